"""paper_figures/runs.py and tier.py: the shared, resumable run cache of the paper figures (tiny digits runs).

The pool trains and a second call touches nothing; a killed run resumes bit-identically; a change of the training
source hash (or of the config) trains again; runs two scripts share are one run; the matched-fit checkpoints sit at
the first evaluated round below each rung; the convergence criterion; the theory report's cache key; every script's
run list resolves in every tier.
"""
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import kill_in_round

from paper_figures import common as C
from paper_figures import tiers as T_
from paper_figures import entry as E
from paper_figures import runs as R

TINY = {"algo": "fedavg", "clients": 4, "rounds": 6, "eval_train_samples": 100, "ckpt_every": 2}


@pytest.fixture(autouse=True)
def _own_args(monkeypatch, tmp_path):
    monkeypatch.setattr(T_, "_ARGS", dict(T_._ARGS, out=tmp_path / "out"))


def _mtimes(root: Path) -> dict:
    return {str(p): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def test_pool_trains_and_a_second_call_touches_nothing(tmp_path):
    tasks = R.tasks([(TINY, 0, ""), (TINY, 1, ""), (TINY, 0, "")], "quick")    # 2 spawned workers: ~20 s idle
    assert len(tasks) == 2                                       # the same run asked twice is one run
    recs = R.train_pool(tasks, workers=2, quiet=True)
    assert sorted(r["status"] for r in recs) == ["done", "done"]
    before = _mtimes(tmp_path / "out" / "runs" / "quick")
    assert R.train_pool(tasks, workers=2, quiet=True) == []
    res = C.train_seeds(TINY, [0, 1], tier="quick")
    assert _mtimes(tmp_path / "out" / "runs" / "quick") == before
    assert [r["seed"] for r in res] == [0, 1] and all(r["diverged"] is None for r in res)
    assert len(res[0]["rows"]) == 6 and res[0]["run_dir"] != res[1]["run_dir"]


def test_a_killed_run_resumes_from_its_last_checkpoint(tmp_path, monkeypatch):
    task = R.tasks([(TINY, 0, "")], "quick")[0]
    kill_in_round(monkeypatch, task, 5)                         # as if the process were killed in round 5
    entry = Path(task["path"])
    assert R.status(task) == "partial" and not (entry / "done.json").exists()
    assert torch.load(entry / "run" / "ckpt" / "last.pt", weights_only=True)["round"] == 4
    assert R.ensure(task)["status"] == "done"
    assert json.loads((entry / "done.json").read_text())["resumed"] is True
    from fedlab_analysis.trainers.loop import train
    whole = train(C.config(TINY, 0, "quick"), tmp_path / "whole")
    got = torch.load(entry / "run" / "ckpt" / "last.pt", weights_only=True)
    assert got["round"] == 6 and all(torch.equal(got["global"][k], v) for k, v in
                                     whole.space.unflatten(whole.w).items())
    rows = [json.loads(s) for s in (entry / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == list(range(1, 7))
    assert not list((entry / "run" / "ckpt").glob("round_*.pt"))  # pruned: last.pt alone holds the state


def test_a_run_killed_after_it_diverged_resumes_to_an_unbroken_runs_rows(tmp_path, monkeypatch):
    """A run that goes on through a divergence checkpoints its non-finite state: killed after that checkpoint, it
    resumes from it (under its own --on-divergence continue) to the rows an unbroken run writes, marked once."""
    cfg = {**TINY, "lr": 1e4, "on_divergence": "continue"}
    task = R.tasks([(cfg, 0, "")], "quick")[0]
    kill_in_round(monkeypatch, task, 5)
    entry = Path(task["path"])
    last = torch.load(entry / "run" / "ckpt" / "last.pt", weights_only=True)
    assert last["round"] == 4 and not all(torch.isfinite(v).all() for v in last["global"].values())
    assert R.ensure(task)["status"] == "done"
    assert json.loads((entry / "done.json").read_text())["resumed"] is True
    rows = [json.loads(s) for s in (entry / "run" / "metrics.jsonl").read_text().splitlines()]
    from fedlab_analysis.trainers.loop import train
    train(C.config(cfg, 0, "quick"), tmp_path / "whole")
    whole = [json.loads(s) for s in (tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()]
    drop = lambda r: {k: v for k, v in r.items() if k != "seconds"}          # noqa: E731
    assert [r["round"] for r in rows] == list(range(1, 7)) and sum("diverged" in r for r in rows) == 1
    assert json.dumps([drop(r) for r in rows]) == json.dumps([drop(r) for r in whole])


def test_a_changed_training_source_or_config_trains_again(monkeypatch):
    task = R.tasks([(TINY, 0, "")], "quick")[0]
    R.ensure(task)
    assert R.status(task) == "done"
    monkeypatch.setattr(E, "training_source_hash", lambda: "edited")
    again = R.tasks([(TINY, 0, "")], "quick")[0]
    assert again["path"] == task["path"] and R.status(again) == "new"     # same entry, stale key
    R.ensure(again)
    assert json.loads((Path(task["path"]) / "key.json").read_text())["source"] == "edited"
    assert R.status(again) == "done" and R.status(task) == "new"
    other = R.tasks([({**TINY, "lr": 0.05}, 0, "")], "quick")[0]
    assert other["path"] != task["path"]


def test_a_changed_hook_source_recomputes_tagged_runs_only(monkeypatch):
    """A tagged run's key holds the hash of the code that defines its hooks (runs.py, the probe modules, the tag's
    own module): a change there trains the tagged run again and leaves an untagged run alone."""
    tagged, plain = R.tasks([(TINY, 0, "consensus"), (TINY, 0, "")], "quick")
    assert "hooks_source" in tagged["key"] and "hooks_source" not in plain["key"]
    for t in (tagged, plain):
        R.ensure(t)
    assert R.status(tagged) == R.status(plain) == "done"
    monkeypatch.setattr(E, "hooks_source_hash", lambda tag: "edited")
    tagged2, plain2 = R.tasks([(TINY, 0, "consensus"), (TINY, 0, "")], "quick")
    assert tagged2["path"] == tagged["path"] and R.status(tagged2) == "new"     # same entry, stale key
    assert plain2 == plain and R.status(plain2) == "done"
    monkeypatch.undo()
    files = {str(f.relative_to(R.PKG.parent)) for f in R.hook_sources("consensus")}
    assert {"paper_figures/hooks.py", "paper_figures/fedsmoo_table2.py", "fedlab_analysis/probes/sharpness.py",
            "fedlab_analysis/probes/consensus.py", "fedlab_analysis/linalg.py",      # the probes' helpers outside
            "fedlab_analysis/studies/stability.py"} <= files and "fedlab_analysis/models.py" not in files   # probes/
    assert "paper_figures/runs.py" not in files          # the pool's own code keeps the trained runs
    assert "paper_figures/fedlesam_fig2_drift.py" in {str(f.relative_to(R.PKG.parent))
                                                      for f in R.hook_sources("drift,sharpness-ascent5-rho0.1")}
    assert R.hooks_source_hash("consensus") != R.hooks_source_hash("mnist")


def test_source_hash_covers_the_training_files_only():
    h = R.training_source_hash()
    assert h == R.training_source_hash() and len(h) == 12
    files = {str(f.relative_to(R.PKG)) for pat in R.TRAINING_SOURCES for f in R.PKG.glob(pat)}
    assert "models.py" in files and "trainers/loop.py" in files and "probes/drift.py" not in files
    from fedlab_analysis import provenance
    assert provenance.source_hash()[:12] != h                      # the whole package: another hash


def test_shared_runs_one_key():
    """FedInit is FedAvg + RI; a hyper-parameter the algorithm never reads is no part of the key."""
    a = R.tasks([({"algo": "fedinit", "beta": 0.1}, 0, "")], "quick")[0]
    b = R.tasks([({"algo": "fedavg", "ri": True, "beta": 0.1}, 0, "")], "quick")[0]
    c = R.tasks([({"algo": "fedavg", "rho": 0.01, "lamb": 0.1}, 0, "")], "quick")[0]
    d = R.tasks([({"algo": "fedavg"}, 0, "")], "quick")[0]
    assert a["path"] == b["path"] and c["path"] == d["path"] and a["path"] != d["path"]


def test_matched_fit_checkpoints_sit_at_the_first_round_below_each_rung():
    cfg = {**TINY, "rounds": 8, "eval_every": 1}
    res = C.train_seeds(cfg, [0, 1], tier="quick")
    from fedlab_analysis import checkpoint
    from fedlab_analysis.probes.common import rebuild
    for r in res:
        assert r["matched"], "digits FedAvg reaches train loss 0.3 in 8 rounds"
        for rung, hit in r["matched"].items():
            first = next(row["round"] for row in r["rows"] if row["train_loss"] < float(rung))
            assert hit["round"] == first
            ck = checkpoint.load(hit["path"])
            b = rebuild(ck, samples=50)
            assert ck["algo_state"] == {} and ck["clients"] is None and b.theta.numel() > 0
    m = C.matched_checkpoints(res)
    assert m["rung"] == min(float(k) for k in set(res[0]["matched"]) & set(res[1]["matched"]))
    assert len(m["paths"]) == 2 and all(Path(p).exists() for p in m["paths"])
    assert C.matched_checkpoints([*res, {"matched": {}}])["rung"] is None


def test_converged_criterion():
    rng = np.random.default_rng(0)
    flat = 0.97 + 0.001 * rng.standard_normal(150)
    assert C.converged(flat)
    climbing = np.linspace(0.90, 0.97, 150)                   # +0.47 points per 15 evaluations: still climbing
    assert not C.converged(climbing)
    assert not C.converged([*flat[:-1], float("nan")]) and not C.converged(flat[:9])
    assert C.converged(np.linspace(0.96, 0.97, 150))          # 0.07 points per window: settled
    # jitter of a few test images around a plateau is not a climb; a steady climb under the same jitter still is
    jitter = 0.95 + 0.01 * rng.standard_normal(30)
    assert C.converged(jitter)
    assert not C.converged(np.linspace(0.75, 0.80, 30) + 0.001 * rng.standard_normal(30))


@pytest.mark.parametrize("argv,flag", [(["--tier", "bogus"], "--tier"), (["--workers", "0"], "--workers"),
                                       (["--full", "--tier", "mnist"], "--full"), (["--tier", "full"], "--data-dir"),
                                       (["--tier", "mnist", "--seeds", "0"], "--seeds")])
def test_tier_flags_refused_cleanly(argv, flag, capsys):
    with pytest.raises(SystemExit) as e:
        C.parse_args("x", argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and err[0].startswith(f"error: {flag}"), err


def test_tier_defaults_and_tier_cli(capsys, tmp_path):
    a = C.parse_args("x", ["--tier", "mnist", "--out", str(tmp_path)])
    assert (a.tier, a.seeds, a.workers, a.full) == ("mnist", 5, 2, False)
    assert C.parse_args("x", ["--out", str(tmp_path)]).seeds == 3
    from paper_figures import tier
    assert tier.main(["--only", "nope", "--out", str(tmp_path)]) == 2
    assert "error: --only" in capsys.readouterr().err
    assert tier.main(["--tier", "mnist", "--plan", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| fedsmoo_table2 |" in out and "**total**" in out and not (tmp_path / "runs").exists()
    assert tier.main(["--tier", "mnist", "--plan", "--only", "fedcm_table3_alpha", "fedsmoo_table2",
                      "--out", str(tmp_path)]) == 0
    names = [ln.split("|")[1].strip() for ln in capsys.readouterr().out.splitlines()[2:4]]
    assert names == ["fedcm_table3_alpha", "fedsmoo_table2"]                    # --only: in the order given


def test_every_script_run_list_resolves_in_every_tier():
    from paper_figures import tier
    for t in ("quick", "mnist"):
        tasks, per = tier.collect(t, 2)
        assert set(per) == set(tier.ORDER) and tasks
        for task in tasks:
            assert task["config"]["seed"] in (0, 1) and task["est"] > 0
            assert not task["tag"] or task["tag"] in R.HOOKS
    for tag in R.HOOKS:                                            # every registered tag builds its hooks
        assert all(callable(h) for h in R.hooks_for(tag, 0)) and R.hooks_for(tag, 0)
    mn, _ = tier.collect("mnist", 1)
    assert all(t["config"]["dataset"] == "mnist" for t in mn)
    main = [t for t in mn if t["config"]["clients"] == 100]
    assert main and all(t["tag"] == "mnist" for t in main)        # one hook set: shared across scripts


def test_real_tiers_run_each_code_form_beside_its_paper_form_and_quick_none():
    """Every script with code forms (a CODE of common.code_form): in each real tier its run list holds every code
    form, its knobs at the released code's values, each run beside its paper-form twin (the same config with the
    knobs at their defaults), so the same rows judge both; FedInit Fig. 1's over the whole beta grid. The quick
    tier's run list holds no code form (its CI outputs keep the paper's form alone)."""
    import importlib

    from fedlab_analysis.config import RunConfig
    from paper_figures import tier
    with_code = {}
    for name in tier.ORDER:
        mod = importlib.import_module(f"paper_figures.{name}")
        if hasattr(mod, "CODE"):
            with_code[name] = mod
    assert {"fedsmoo_table2", "fedlesam_fig2_drift", "fedlesam_fig4_rho", "fedsmoo_fig3_surface",
            "fedsmoo_table8_ablation", "fedlesam_fig3_surface", "fedinit_fig1_sensitivity"} <= set(with_code)
    for name, mod in with_code.items():
        for t in ("quick", "mnist", "fmnist", "full"):
            cfgs = [C.config(ov, s, t).to_dict() for ov, s, _ in mod.run_list(t, 1)]
            for arm, (base, label, knobs) in mod.CODE.items():
                assert label.endswith("(code form)") and knobs, (name, arm)
                code = [c for c in cfgs if all(c[k] == v for k, v in knobs.items())]
                if t == "quick":
                    assert not code, (name, t, arm)
                    continue
                assert code, (name, t, arm)
                for c in code:
                    twin = {**c, **{k: getattr(RunConfig, k) for k in knobs}}
                    assert twin in cfgs, (name, t, arm, "no paper-form twin")
                if name == "fedinit_fig1_sensitivity":
                    assert sorted(c["beta"] for c in code) == sorted(mod.grids(t)[2]), (name, t)


def test_theory_report_recomputed_when_the_package_source_changes(tmp_path, monkeypatch):
    import subprocess
    calls = []

    def fake(cmd, **kw):
        calls.append(cmd)
        out = Path(cmd[cmd.index("--out") + 1])
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_text(json.dumps([{"id": "x", "claim": "c", "expected": "e", "measured": "m",
                                                      "verdict": "holds", "where": "Thm 1"}]))
    monkeypatch.setattr(subprocess, "run", fake)
    d = tmp_path / "th"
    C.theory_rows("fedcm", d)
    C.theory_rows("fedcm", d)
    assert len(calls) == 1                                         # reused while the key holds
    from fedlab_analysis import provenance
    monkeypatch.setattr(provenance, "source_hash", lambda paths=None: "edited")
    C.theory_rows("fedcm", d)
    assert len(calls) == 2                                         # a code change recomputes it
    os.remove(d / "provenance.json")
    C.theory_rows("fedcm", d)
    assert len(calls) == 3                                         # a report without a key is not trusted


# the mnist tier's code path (its grids, hooks tag, per-method hyper-parameters and verdict rows) on tiny digits runs
TINY_MNIST = dict(C.QUICK_BASE, model_kwargs={"widths": [16]}, clients=10, active_ratio=0.3, batch_size=20,
                  local_epochs=1, rounds=10, eval_every=1, eval_train_samples=300, on_divergence="continue")
OWN_PROTOCOL = {"fedals_table2": dict(rounds=20, eval_every=2, eval_train_samples=300, local_steps=2, holdout=140),
                "fedals_fig1_consensus": dict(rounds=10, eval_every=1, eval_train_samples=300, local_steps=5)}


@pytest.mark.slow
@pytest.mark.parametrize("tier_name", ["mnist", "quick"])
def test_every_script_runs_its_tier_path_on_tiny_digits(tier_name, tmp_path, monkeypatch, capsys):
    """Every script's main with --tier mnist (and quick), the tier's base swapped for tiny digits runs (and FedALS's
    own protocol shortened): no grid the tier trims is indexed (e.g. FedCM Table 3's alpha = 0.03), a comparison whose
    configs the tier does not train is "not measured in this tier" naming what is missing, and every script makes
    as many comparisons as its docstring states (none dropped). About a minute of CPU per tier on one thread."""
    import importlib
    import re

    from paper_figures import tier
    monkeypatch.setitem(C.TIERS, tier_name, TINY_MNIST)
    for name, ov in OWN_PROTOCOL.items():
        mod = importlib.import_module(f"paper_figures.{name}")
        monkeypatch.setitem(mod.DEFS, tier_name, {**mod.DEFS[tier_name], **ov})
    fig1 = importlib.import_module("paper_figures.fedinit_fig1_sensitivity")       # FedInit's three scripts' runs:
    monkeypatch.setitem(fig1.DEFS, tier_name, {**fig1.DEFS[tier_name], "het_noise": 0.0})  # digits take no noise
    for name in tier.ORDER + tier.TOY:
        mod = importlib.import_module(f"paper_figures.{name}")
        mod.main(["--tier", tier_name, "--seeds", "2", "--workers", "1", "--quiet", "--out", str(tmp_path)])
        d = json.loads((C.out_dir(name, tier_name, root=tmp_path) / "data.json").read_text())
        doc = " ".join(mod.__doc__.split())
        said = re.search(r"[Cc]omparisons: (.*?)\.(?:\s|$)", doc)
        in_all = re.search(r"(\d+) in all\.", doc)              # the real tiers' count, with the code forms
        n = int(in_all[1]) if tier_name != "quick" and in_all else int(re.findall(r"\d+", said[1])[-1])
        assert n == d["n_comparisons"] == len(d["table"]), name
        for t in d["table"]:
            assert t["verdict"] in C.VERDICTS, (name, t)
            if t.get("form") == "code":                         # a code form's row says so; none in quick
                assert tier_name != "quick" and "(code form)" in t["row"], (name, t)
            if t["measured"].startswith("not measured in this tier"):
                assert t["verdict"] == "not measured" and "mnist tier's grid" in t["measured"], (name, t)
        trimmed = [t for t in d["table"] if t["measured"].startswith("not measured in this tier")]
        if tier_name == "mnist" and name in ("fedlesam_fig2_drift", "fedinit_table6", "fedsmoo_fig3_surface",
                                             "fedlesam_fig3_surface"):
            assert trimmed, f"{name}: the mnist tier trims its grid, so some rows are not measured"
    if tier_name == "mnist":                        # each control finds its arms' runs and is gated on their curves
        from paper_figures import settings as S
        ctrls = S.controls(tmp_path, tier_name)
        assert len(ctrls) == 7 and all(len(c["verdict"]["runs"]) == 4 for c in ctrls), ctrls
    capsys.readouterr()


def test_compare_tiers_reports_changed_verdicts(tmp_path, monkeypatch, capsys):
    from paper_figures import common as C
    from paper_figures import compare_tiers as CT
    monkeypatch.setattr(C, "OUT", tmp_path)                              # the committed results it reads
    for tier, verdicts in (("quick", ["reproduced", "not converged"]), ("mnist", ["reproduced", "opposite"])):
        d = C.committed_dir("fedsmoo_table2", tier)
        d.mkdir(parents=True)
        (d / "data.json").write_text(json.dumps({"table": [{"row": f"r{i}", "verdict": v}
                                                           for i, v in enumerate(verdicts)]}))
    pairs = CT.compare(["fedsmoo_table2", "fedcm_table3_alpha"])          # the second has no results: skipped
    assert pairs == [("fedsmoo_table2", "r0", "reproduced", "reproduced"),
                     ("fedsmoo_table2", "r1", "not converged", "opposite")]
    assert CT.main(["--changed"]) == 0
    out = capsys.readouterr().out
    assert "| fedsmoo_table2 | r1 | not converged | opposite | changed |" in out and "| r0 |" not in out
    assert "1 of 2 comparisons (1 scripts)" in out
    assert CT.main(["--tiers", "quick", "cifar"]) == 2


def test_compare_tiers_reads_a_tier_as_an_earlier_commit_held_it(tmp_path, monkeypatch, capsys):
    """TIER@REV: the verdicts committed at git revision REV beside today's (what a change of settings changed)."""
    import subprocess

    from paper_figures import common as C
    from paper_figures import compare_tiers as CT
    monkeypatch.setattr(C, "OUT", tmp_path)
    git = lambda *a: subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *a],  # noqa: E731
                                    check=True, capture_output=True, text=True).stdout.strip()
    git("init", "-q")
    f = C.committed_dir("fedsmoo_table2", "mnist") / "data.json"
    f.parent.mkdir(parents=True)
    write = lambda vs: f.write_text(json.dumps({"table": [{"row": f"r{i}", "verdict": v} for i, v in enumerate(vs)]}))  # noqa: E731
    write(["reproduced", "opposite"])
    git("add", "-A")
    git("commit", "-q", "-m", "protocol 1")
    rev = git("rev-parse", "--short", "HEAD")
    assert CT.compare(["fedsmoo_table2"], f"mnist@{rev}", "mnist") == [
        ("fedsmoo_table2", "r0", "reproduced", "reproduced"), ("fedsmoo_table2", "r1", "opposite", "opposite")]
    write(["reproduced", "not measured"])                               # redrawn, not yet committed
    assert CT.main(["--tiers", f"mnist@{rev}", "mnist", "--changed"]) == 0
    out = capsys.readouterr().out
    assert "| fedsmoo_table2 | r1 | opposite | not measured | changed |" in out and "| r0 |" not in out
    assert CT.at("fedsmoo_table2", "quick@" + rev) is None                # none committed there
    assert CT.main(["--tiers", "mnist@no-such-rev", "mnist"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --tiers: 'mnist@no-such-rev'") and err.count("\n") == 1


def test_committed_results_are_read_from_the_repository_whatever_out_says(tmp_path, monkeypatch):
    """A notebook executed with a scratch output root ($PAPER_FIGURES_OUT, as the notebook tests run them) still
    shows the committed MNIST results: committed() reads this package's own out/, never --out."""
    monkeypatch.setitem(C._ARGS, "out", tmp_path)                       # an empty scratch root
    name = "fedcm_table3_alpha"
    assert (C.OUT / "mnist" / name / "data.json").exists(), "the committed MNIST result this test reads"
    assert not C.out_dir(name, "mnist").exists()
    data = C.committed(name, "mnist")
    assert data is not None and data["table"], "committed() followed --out instead of the repository"
    assert C.committed_dir(name, "quick") == C.OUT / name
    assert C.committed("no_such_script", "mnist") is None


def test_packed_pool_equals_one_run_at_a_time(tmp_path):
    """--pack: the pool trains runs of one model together (trainers/pack.py); every cache entry ends with the
    metrics and weights the run alone gives."""
    items = [({**TINY, "dtype": "float64", "client_parallel": "vmap"}, s, "") for s in range(3)]
    packed_tasks = R.tasks(items, "quick", out_root=tmp_path / "packed")
    assert [len(p) for p in R.packed(packed_tasks, 2)] == [2, 1]
    assert sorted(r["status"] for r in R.train_pool(packed_tasks, workers=1, quiet=True, pack=3)) == ["done"] * 3
    alone_tasks = R.tasks(items, "quick", out_root=tmp_path / "alone")
    R.train_pool(alone_tasks, workers=1, quiet=True, pack=1)
    for a, b in zip(packed_tasks, alone_tasks):
        ra, rb = R.result({"path": a["path"], "status": "done"}), R.result({"path": b["path"], "status": "done"})
        assert [r["test_acc"] for r in ra["rows"]] == [r["test_acc"] for r in rb["rows"]]
        wa, wb = (torch.load(Path(t["path"]) / "run" / "ckpt" / "last.pt", weights_only=True)["global"]
                  for t in (a, b))
        assert all(torch.allclose(wa[k], wb[k], rtol=1e-12, atol=0) for k in wb)


def test_full_tier_plans_without_data_and_trains_on_cifar_files(tmp_path, monkeypatch, capsys):
    """--tier full --plan needs no data and prints GPU-hours naming the card; the full tier trains end to end on
    official-format CIFAR-10 files (a tiny generated copy; the model and rounds shrunk so the CPU can run it)."""
    from paper_figures import tier as T
    from tests.test_data import write_cifar10
    assert T.main(["--tier", "full", "--plan", "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "GPU-hours" in out and R.CARD in out and "of 324 runs done" in out
    write_cifar10(tmp_path / "cifar" / "cifar-10-batches-py", np.random.default_rng(0), n=40)
    monkeypatch.setitem(C.TIERS, "full", {**C.TIERS["full"], "model": "cnn", "rounds": 2, "clients": 4,
                                          "active_ratio": 0.5, "local_epochs": 1, "batch_size": 20,
                                          "eval_train_samples": 40})
    from paper_figures import probed
    asked = []                                # the CNN's float64 Hessians would take minutes here (test_probed
    monkeypatch.setattr(probed, "measure", lambda task: asked.append(task["measure"]))    # measures on digits)
    assert T.main(["--tier", "full", "--data-dir", str(tmp_path / "cifar"), "--seeds", "1", "--workers", "1",
                   "--only", "fedsmoo_table2", "--out", str(tmp_path / "o"), "--quiet"]) == 0
    assert "6 of 6 runs done" in capsys.readouterr().out          # FedSMOO in both forms
    assert asked == [["fedsmoo_table2"]] * 6                      # each measured for the script, after training


def test_handbook_shows_the_current_full_tier_plan(capsys, tmp_path):
    """The handbook's `--tier full --plan` block (docs/reproductions.md) is what the command prints now (it changes
    with the scripts' run lists and the measured per-round cost)."""
    import re

    from paper_figures import tier as T
    page = (Path(__file__).resolve().parents[1] / "docs" / "reproductions.md").read_text()
    m = re.search(r"\$ python -m paper_figures.tier --tier full --plan\n(.*?)\n```", page, re.S)
    assert m, "docs/reproductions.md: no `--tier full --plan` block"
    assert T.main(["--tier", "full", "--plan", "--out", str(tmp_path)]) == 0        # an empty cache
    assert capsys.readouterr().out.strip() == m.group(1).strip()


def test_fmnist_tier_runs_the_mnist_protocol_on_fashion_mnist():
    """Every script's fmnist runs are its mnist runs with the data set changed: the same model, settings, grids,
    seeds and hooks (common.protocol), so a claim meets the same test on the second real task."""
    import importlib

    from paper_figures import common, tier
    for name in tier.ORDER:
        mod = importlib.import_module(f"paper_figures.{name}")
        a, b = mod.run_list("mnist", 2), mod.run_list("fmnist", 2)
        assert len(a) == len(b) > 0, name
        for (oa, sa, ta), (ob, sb, tb) in zip(a, b):
            ca, cb = common.config(oa, sa, "mnist").to_dict(), common.config(ob, sb, "fmnist").to_dict()
            assert (sa, ta) == (sb, tb) and ca.pop("dataset") == "mnist" and cb.pop("dataset") == "fmnist", name
            assert ca == cb, name
    assert common.protocol("fmnist") == common.protocol("mnist") == "mnist" and common.protocol("quick") == "quick"


def test_claims_on_real_tasks_count_where_they_hold(tmp_path, monkeypatch):
    """compare_tiers.tasks: a comparison holds on k of the n real tasks with committed results; an untrained tier is
    not counted, and the table says how to train it."""
    from paper_figures import common, compare_tiers
    monkeypatch.setattr(common, "OUT", tmp_path)

    def put(tier, verdicts):
        d = common.out_dir("s", tier, root=tmp_path)
        d.mkdir(parents=True)
        (d / "data.json").write_text(json.dumps({"table": [{"row": r, "verdict": v} for r, v in verdicts.items()]}))
    put("mnist", {"a": "reproduced", "b": "opposite", "c": "not measured"})
    got = compare_tiers.tasks(["s"], fam={})
    assert [(r["row"], r["holds"], r["of"]) for r in got] == [("a", 1, 1), ("b", 0, 1), ("c", 0, 0)]
    assert "make figures TIER=fmnist" in compare_tiers.tasks_table(["s"], fam={})
    put("fmnist", {"a": "reproduced", "b": "reproduced", "c": "inconclusive"})
    got = compare_tiers.tasks(["s"], fam={})
    assert [(r["row"], r["holds"], r["of"]) for r in got] == [("a", 2, 2), ("b", 1, 2), ("c", 0, 1)]
    table = compare_tiers.tasks_table(["s"], fam={})
    assert "| s | a | reproduced | reproduced | 2 of 2 |" in table and "not trained yet" not in table
    # in its paper's family, Holm's verdict is the one counted, the raw one shown beside it
    fam = {"fmnist": [{"script": "s", "row": "a", "p": 0.04, "adjusted": "inconclusive", "relative": 0.125}]}
    got = compare_tiers.tasks(["s"], fam=fam)
    assert (got[0]["holds"], got[0]["of"]) == (1, 2)
    assert "| s | a | reproduced | **inconclusive** (raw: reproduced), +12.5% of the error | 1 of 2 |" in \
        compare_tiers.tasks_table(["s"], fam=fam)
    # a stored verdict that today's rule re-derives otherwise: the re-derived one is the raw, the stored is named
    fam["mnist"] = [{"script": "s", "row": "b", "p": 0.001, "raw": "reproduced", "adjusted": "reproduced"}]
    got = compare_tiers.tasks(["s"], fam=fam)
    assert (got[1]["raw"]["mnist"], got[1]["stored"]["mnist"], got[1]["holds"]) == ("reproduced", "opposite", 2)
    assert "| s | b | reproduced; stored: opposite, under an earlier rule | reproduced | 2 of 2 |" in \
        compare_tiers.tasks_table(["s"], fam=fam)


def test_one_comparison_joins_across_tiers_whatever_rung_it_met_and_untrained_scripts_are_named(tmp_path,
                                                                                                 monkeypatch):
    """A matched-fit row names the rung its tier reached ("(0.1)" on MNIST, "(0.3)" on Fashion-MNIST): it is one
    comparison, one line; a script of the paper with no output in a trained tier is named, not silently absent."""
    from paper_figures import common, compare_tiers
    monkeypatch.setattr(common, "OUT", tmp_path)

    def put(name, tier, verdicts):
        d = common.out_dir(name, tier, root=tmp_path)
        d.mkdir(parents=True)
        (d / "data.json").write_text(json.dumps({"table": [{"row": r, "verdict": v} for r, v in verdicts.items()]}))
    put("s", "mnist", {"lam1 at matched train loss (0.1)": "reproduced", "best other (1) minus 0.1": "opposite"})
    put("s", "fmnist", {"lam1 at matched train loss (0.3)": "reproduced", "best other (0.01) minus 0.1": "opposite"})
    put("t", "mnist", {"x": "reproduced"})
    fam = {"fmnist": [{"script": "s", "row": "lam1 at matched train loss (0.3)", "p": 0.2, "adjusted": "inconclusive"}]}
    got = compare_tiers.tasks(["s", "t"], fam=fam)
    assert [(r["script"], r["row"], r["verdicts"]) for r in got] == [
        ("s", "lam1 at matched train loss", {"mnist": "reproduced", "fmnist": "inconclusive"}),
        ("s", "best other minus 0.1", {"mnist": "opposite", "fmnist": "opposite"}),
        ("t", "x", {"mnist": "reproduced"})]                        # no output there: not counted
    table = compare_tiers.tasks_table(["s", "t"], fam=fam)
    assert "| t | x | reproduced | absent | 1 of 1 |" in table
    assert "*Not yet trained in the fmnist tier (fmnist):* t (" in table and "not trained yet" not in table


def test_the_cpu_estimate_scales_with_this_machine_s_measured_step(monkeypatch, capsys, tmp_path):
    """The plan's CPU costs were measured on other machines: each estimate is scaled by this machine's step time over
    theirs (runs.machine_factor), printed under the table; the GPU tier's is not."""
    from fedlab_analysis.config import RunConfig
    from paper_figures import tier
    f = R.machine_factor()
    assert 0.05 < f < 50, f
    cfg = RunConfig(dataset="mnist", model="mlp", rounds=10).validate()
    monkeypatch.setattr(R, "machine_factor", lambda: 1.0)
    one, full = R.estimate(cfg, "", "mnist"), R.estimate(cfg, "", "full")
    monkeypatch.setattr(R, "machine_factor", lambda: 3.0)
    assert R.estimate(cfg, "", "mnist") == pytest.approx(3 * one) and R.estimate(cfg, "", "full") == full
    assert tier.main(["--tier", "mnist", "--plan", "--only", "fedals_fig1_consensus", "--out", str(tmp_path)]) == 0
    assert "this machine's measured step time over theirs (3.00;" in capsys.readouterr().out
