"""Runs as a batch axis (trainers/pack.py): a packed run equals its run alone, float64 to 1e-12, for every algorithm
of the table and relaxed initialisation; each check is shown to fail when one run's seed or hyper-parameter is
swapped."""
import dataclasses
import json

import pytest
import torch

from fedlab_analysis import algos, checkpoint
from fedlab_analysis.config import RunConfig
from fedlab_analysis.errors import UserError
from fedlab_analysis.train import main as train_main
from fedlab_analysis.trainers.loop import train
from fedlab_analysis.trainers.pack import Job, groups, pack_key, parse_seeds, train_pack

# Bernoulli sampling (a different number of active clients per run and round), Dirichlet sizes (unequal K_i, short
# padded batches), a decaying lr, weight decay and clipping: every path the local steps can take
BASE = dict(dataset="digits", model="mlp", model_kwargs={"widths": [12]}, clients=8, active_ratio=0.5,
            local_epochs=1, batch_size=24, lr=0.05, lr_decay=0.95, wd=1e-3, clip=10.0, partition="dirichlet",
            dir_alpha=0.5, dtype="float64", rounds=3, client_parallel="vmap", eval_train_samples=200, quiet=True)


def cfg(**kw) -> RunConfig:
    return RunConfig(**{**BASE, **kw}).validate()


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm().clamp_min(1e-300)).item()


def same_run(packed, alone, tol=1e-12) -> float:
    """The largest relative difference over weights, algorithm state and the last metrics row."""
    errs = [rel(packed.w, alone.w)]
    for k, v in alone.state.items():
        if not v.is_floating_point():                  # flags (FedLESAM's first participation): equal or not
            errs.append(0.0 if torch.equal(packed.state[k], v) else float("inf"))
        elif v.abs().sum() > 0:
            errs.append(rel(packed.state[k], v))
    for k in ("train_loss", "test_loss", "test_acc"):
        errs.append(abs(packed.last_row[k] - alone.last_row[k]) / max(abs(alone.last_row[k]), 1e-300))
    return max(errs)


FULL = {"fedals", "fedals-scaffold"}                    # FedALS runs with full participation
CASES = [dict(algo=a, **({"active_ratio": 1.0} if a in FULL else {})) for a in algos.NAMES] + \
    [dict(algo="fedavg", ri=True), dict(algo="scaffold", ri=True)]


@pytest.mark.parametrize("kw", CASES, ids=lambda kw: kw["algo"] + ("+ri" if kw.get("ri") else ""))
def test_packed_equals_alone_float64(kw):
    cfgs = [cfg(seed=0, **kw), cfg(seed=1, **kw), cfg(seed=0, lr=0.08, **kw)]
    outs = train_pack([Job(c) for c in cfgs])
    assert [o.status for o in outs] == ["done"] * 3, [o.error for o in outs]
    alone = [train(c) for c in cfgs]
    for o, a in zip(outs, alone):
        assert same_run(o.run, a) <= 1e-12
    # the check can fail: run 0 against the runs that differ from it in seed (1) or in lr (2)
    assert same_run(outs[0].run, alone[1]) > 1e-6
    assert same_run(outs[0].run, alone[2]) > 1e-6


def test_mixed_algorithms_and_hyperparameters_share_a_pack():
    """Any runs of one model and data set share the gathered call: algorithms, rho and alpha differ per run."""
    cfgs = [cfg(algo="fedsam", rho=0.05), cfg(algo="fedsam", rho=0.2, seed=2), cfg(algo="fedcm", alpha=0.3),
            cfg(algo="scaffold", seed=4)]
    assert len({pack_key(c) for c in cfgs}) == 1
    outs = train_pack([Job(c) for c in cfgs])
    for o, c in zip(outs, cfgs):
        assert same_run(o.run, train(c)) <= 1e-12


def test_float32_first_round_to_round_off():
    cfgs = [cfg(dtype="float32", rounds=1, seed=s) for s in range(3)]
    outs = train_pack([Job(c) for c in cfgs])
    for o, c in zip(outs, cfgs):
        assert rel(o.run.w, train(c).w) <= 1e-6


def test_one_run_diverges_the_others_go_on():
    cfgs = [cfg(seed=0), cfg(seed=1, lr=1e30, clip=0.0), cfg(seed=2)]
    outs = train_pack([Job(c) for c in cfgs])
    assert [o.status for o in outs] == ["done", "diverged", "done"]
    assert "diverged" in outs[1].error
    for i in (0, 2):
        assert same_run(outs[i].run, train(cfgs[i])) <= 1e-12


def test_each_run_s_end_is_reported_as_it_ends_and_a_failing_report_fails_that_run_alone():
    """on_end(r, outcome) comes in run r's thread as it ends (the short run's while the long one still trains), once
    per run, diverged included; an error in it makes that run 'failed' and the others go on."""
    cfgs = [cfg(seed=0, rounds=1), cfg(seed=1, rounds=4), cfg(seed=2, lr=1e30, clip=0.0), cfg(seed=3, rounds=2)]
    ends, runs = [], {}

    def on_end(r, o):
        ends.append((r, o.status, {s: getattr(run, "t", None) for s, run in runs.items()}))
        if r == 3:
            raise OSError("disk full")

    jobs = [Job(c, callbacks=[lambda ev, view, step, x, r=r: runs.setdefault(r, view)]) for r, c in enumerate(cfgs)]
    outs = train_pack(jobs, on_end=on_end)
    assert sorted(r for r, *_ in ends) == [0, 1, 2, 3]
    assert [o.status for o in outs] == ["done", "done", "diverged", "failed"] and "disk full" in outs[3].error
    r0 = next(e for e in ends if e[0] == 0)
    assert r0[1] == "done" and r0[2][1] < 4, "the long run had not ended when the short one's end was reported"


def test_run_directories_equal_and_resume_together(tmp_path):
    """The same config.json, metrics (seconds aside) and checkpoints as alone; a pack resumed together, and a run
    resumed alone, continue exactly."""
    cfgs = [cfg(seed=s, rounds=2, ckpt_every=1) for s in range(2)]
    train_pack([Job(c, tmp_path / f"p{i}") for i, c in enumerate(cfgs)])
    for i, c in enumerate(cfgs):
        train(c, tmp_path / f"a{i}")
        p, a = tmp_path / f"p{i}", tmp_path / f"a{i}"
        assert (p / "config.json").read_text() == (a / "config.json").read_text()
        rows = [[{k: v for k, v in json.loads(line).items() if k != "seconds"}
                 for line in (d / "metrics.jsonl").read_text().splitlines()] for d in (p, a)]
        assert rows[0] == rows[1]
        cp, ca = checkpoint.load(p / "ckpt" / "last.pt"), checkpoint.load(a / "ckpt" / "last.pt")
        for k in ca["global"]:
            assert torch.equal(cp["global"][k], ca["global"][k]) or rel(cp["global"][k], ca["global"][k]) <= 1e-12
    longer = [dataclasses.replace(c, rounds=4) for c in cfgs]
    outs = train_pack([Job(c, tmp_path / f"p{i}", resume=True) for i, c in enumerate(longer)])
    for o, c in zip(outs, longer):
        assert same_run(o.run, train(c)) <= 1e-12
    one = train(dataclasses.replace(longer[0], rounds=5), tmp_path / "p0", resume=True)
    assert same_run(one, train(dataclasses.replace(longer[0], rounds=5))) <= 1e-12


def test_a_pack_refuses_runs_of_different_models():
    with pytest.raises(UserError, match="share model"):
        train_pack([Job(cfg()), Job(cfg(model_kwargs={"widths": [4]}))])
    assert groups([cfg(), cfg(seed=1), cfg(model_kwargs={"widths": [4]}), cfg(seed=2)], n=2) == [[0, 3], [1], [2]]


def test_parse_seeds():
    assert parse_seeds(["0-2", "5", "1"]) == [0, 1, 2, 5]
    for bad in (["a"], ["3-1"], ["-1"], ["0-100000"]):
        with pytest.raises(UserError):
            parse_seeds(bad)


def test_cli_seeds_writes_one_directory_per_seed(tmp_path, capsys):
    args = ["--algo", "fedavg", "--rounds", "2", "--clients", "6", "--quiet", "true", "--dtype", "float64"]
    assert train_main([*args, "--seeds", "0-1", "--out", str(tmp_path / "p")]) == 0
    assert train_main([*args, "--seed", "1", "--out", str(tmp_path / "a")]) == 0
    assert (tmp_path / "p" / "seed_1" / "config.json").read_text() == (tmp_path / "a" / "config.json").read_text()
    w = [checkpoint.load(d / "ckpt" / "last.pt")["global"] for d in (tmp_path / "p" / "seed_1", tmp_path / "a")]
    assert all(rel(w[0][k], w[1][k]) <= 1e-12 for k in w[1])
    assert train_main([*args, "--seeds", "0", "--seed", "2", "--out", str(tmp_path / "x")]) == 2
    assert "give --seed or --seeds" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_the_gathered_calls_are_what_the_runs_take(monkeypatch):
    """The pack's runs do share calls (several runs' rows in one gradient call, several models in one evaluation),
    and a call that hands rows to the wrong run is caught by the equality check."""
    from fedlab_analysis.trainers import pack
    sizes = {"grad": [], "eval": []}
    calls = dict(pack.CALLS)

    def spy(kind):
        def call(reqs):
            sizes[kind].append(len(reqs))
            return calls[kind](reqs)
        return call
    monkeypatch.setitem(pack.CALLS, "grad", spy("grad"))
    monkeypatch.setitem(pack.CALLS, "eval", spy("eval"))
    cfgs = [cfg(seed=s, sampling="fixed") for s in range(3)]
    outs = train_pack([Job(c) for c in cfgs])
    assert max(sizes["grad"]) == 3 and max(sizes["eval"]) == 3
    assert all(same_run(o.run, train(c)) <= 1e-12 for o, c in zip(outs, cfgs))
    for kind, wrong in (("grad", lambda reqs: [g.flip(0) for g in calls["grad"](reqs)]),
                        ("eval", lambda reqs: calls["eval"](reqs)[::-1])):
        monkeypatch.setitem(pack.CALLS, kind, wrong)
        outs = train_pack([Job(c) for c in cfgs])
        assert same_run(outs[0].run, train(cfgs[0])) > 1e-6, kind
        monkeypatch.setitem(pack.CALLS, kind, calls[kind])


def test_large_rows_train_one_run_after_the_other(monkeypatch):
    """Above CPU_GATHER floats a pack's runs do not meet at each step (on a CPU the copies and the switching cost
    more than the call saves): each keeps the turn and trains on alone, with the same numbers."""
    from fedlab_analysis.trainers import pack
    seen, calls = [], dict(pack.CALLS)
    monkeypatch.setattr(pack, "CPU_GATHER", 0)

    def spy(kind):
        def call(reqs):
            seen.append((kind, len(reqs), reqs[0][0].cfg.seed))
            return calls[kind](reqs)
        return call
    for kind in calls:
        monkeypatch.setitem(pack.CALLS, kind, spy(kind))
    cfgs = [cfg(seed=s, algo="fedsam") for s in range(2)]
    outs = train_pack([Job(c) for c in cfgs])
    assert {n for _, n, _ in seen} == {1}                  # no gathered call
    order = [s for _, _, s in seen]
    assert order == sorted(order)                          # run 0 trained to its end before run 1 began
    assert all(same_run(o.run, train(c)) <= 1e-12 for o, c in zip(outs, cfgs))
