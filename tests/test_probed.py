"""What a weights script measured outlives the machine (paper_figures.probed): drawn again on a fresh machine it
takes the kept measurements and trains nothing; a measurement not kept (a new argument, code, or key) trains the run
again and gives the same number; a light entry keeps its matched-fit rounds; the tier runner trains no light run for
a script that finished. Real training on digits (the quick tier, made a ledger tier here). This module is itself the
weights script: ``run_script`` finds WEIGHTS, run_list and compute here."""
import json
import shutil
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from paper_figures import common as C  # noqa: E402
from paper_figures import flatness as FL  # noqa: E402
from paper_figures import ledger as L  # noqa: E402
from paper_figures import probed as P  # noqa: E402
from paper_figures import runs as R  # noqa: E402
from paper_figures import tier as T  # noqa: E402
from paper_figures import tiers as T_  # noqa: E402

TINY = {"algo": "fedavg", "clients": 4, "rounds": 6, "eval_every": 1, "eval_train_samples": 100}
WEIGHTS = True
NAME = "probed_check"


def run_list(tier, seeds):
    return [(TINY, s, "") for s in C.seed_list(seeds)]


def compute(seeds, tier):
    """The final model's train loss and the loss at the common matched-fit rung, per seed."""
    rs = C.train_seeds(TINY, seeds, tier=tier, weights=WEIGHTS)
    m = C.matched_checkpoints(rs)
    vals = [FL.train_loss(FL.last(r)) for r in rs] + [FL.train_loss(p) for p in m["paths"]]
    fig = plt.figure()
    return {"summary": f"{len(vals)} values", "table": [], "vals": vals, "rung": m["rung"]}, fig


@pytest.fixture
def out(tmp_path, monkeypatch):
    monkeypatch.setattr(T_, "_ARGS", dict(T_._ARGS, out=tmp_path / "out"))
    monkeypatch.setattr(L, "TIERS", ("quick",))
    return tmp_path / "out"


def draw(out):
    data = C.run_script(NAME, compute, "probed check", ["--tier", "quick", "--seeds", "2", "--workers", "1",
                                                       "--out", out, "--quiet"])
    entries = sorted((out / "runs" / "quick").glob("fedavg-*"))
    return data, entries


def fresh_machine(out):
    """What a new machine has: the ledger (in git), no run cache."""
    shutil.rmtree(out / "runs")


def test_a_finished_weights_script_draws_again_on_a_fresh_machine_without_training(out):
    first, entries = draw(out)
    assert len(entries) == 2 and first["rung"] is not None and len(first["vals"]) == 4
    assert all(P.path_of(e).exists() for e in entries)
    assert all(P.marked(e, NAME) for e in entries)
    fresh_machine(out)
    again, entries = draw(out)
    assert all(L.light(e) and not (e / "run" / "ckpt").exists() for e in entries), "nothing was trained"
    assert again["vals"] == first["vals"] and again["rung"] == first["rung"]


def test_a_measurement_not_kept_trains_the_light_runs_again_to_the_same_number(out, monkeypatch):
    first, entries = draw(out)
    fresh_machine(out)
    P.path_of(entries[1]).unlink()                     # one run's measurements lost
    pooled, pool = [], R.train_pool
    monkeypatch.setattr(R, "train_pool", lambda todo, *a, **k: pooled.append([t["weights"] for t in todo])
                        or pool(todo, *a, **k))
    again, entries = draw(out)
    assert not L.light(entries[1]) and (entries[1] / "run" / "ckpt" / "last.pt").exists()
    assert again["vals"] == first["vals"]
    assert pooled == [[False, False], [True, True]], "trained again through the pool, side by side"


def test_a_kept_measurement_is_keyed_by_its_arguments_and_by_the_run_s_key(out):
    _, entries = draw(out)
    fresh_machine(out)
    R.tasks(run_list("quick", 2), "quick")               # restored, light
    last = entries[0] / "run" / "ckpt" / "last.pt"
    assert FL.train_loss(last) == FL.train_loss(last, 1000)           # the default, applied
    with pytest.raises(P.NeedWeights):
        FL.train_loss(last, samples=999)
    key = entries[0] / "key.json"
    key.write_text(json.dumps({**json.loads(key.read_text()), "other": 1}))
    assert P.kept(entries[0]) == {}
    with pytest.raises(P.NeedWeights):
        FL.train_loss(last)


def test_a_light_entry_keeps_its_matched_fit_rounds_and_an_older_record_asks_for_weights(out):
    first = C.train_seeds(TINY, [0], tier="quick")[0]
    task = R.tasks([(TINY, 0, "")], "quick")[0]
    fresh_machine(out)
    again = C.train_seeds(TINY, [0], tier="quick")[0]
    assert L.light(task["path"]) and again["matched"] == first["matched"] and first["matched"]
    (Path(task["path"]) / L.MATCHED).unlink()           # as a record written before the rounds were kept
    older = C.train_seeds(TINY, [0], tier="quick")[0]
    assert older["matched"] is None
    with pytest.raises(P.NeedWeights):
        C.matched_checkpoints([older])


def test_the_tier_runner_trains_no_light_run_for_a_script_that_finished(out):
    tasks, per = T.collect("quick", 3, ["fedcm_table3_alpha", "fedcm_dispersion"])
    mine = [t for t in tasks if t["path"] in per["fedcm_dispersion"]]
    assert all(t["weights"] and t["measure"] == ["fedcm_dispersion"] for t in mine) and len(mine) == 3
    assert not any(t["weights"] or t.get("measure") for t in tasks if t not in mine)
    for t in mine:                                                   # as a run kept by the ledger
        Path(t["path"]).mkdir(parents=True)
        (Path(t["path"]) / "key.json").write_text(json.dumps(t["key"]))
    P.mark(per["fedcm_dispersion"][:2], "fedcm_dispersion")
    tasks, _ = T.collect("quick", 3, ["fedcm_dispersion"])
    assert [t["weights"] for t in tasks] == [False, False, True]     # the third is not marked


def draw_dispersion(out):
    from paper_figures import fedcm_dispersion
    return C.run_script("fedcm_dispersion", fedcm_dispersion.compute, "d",
                        ["--tier", "quick", "--seeds", "1", "--workers", "1", "--out", out, "--quiet"])


def test_the_tier_runner_measures_each_run_for_its_weights_scripts_so_a_later_machine_trains_nothing(out, tmp_path,
                                                                                                     monkeypatch):
    """fedcm_dispersion's run (seed 0) trained by the runner and measured right after; on a fresh machine the script
    draws from the light entry, to the numbers of a draw that measured the weights itself (another output root).
    Fails if the runner does not measure, or measures other arguments than the script asks."""
    tasks, per = T.collect("quick", 1, ["fedcm_dispersion"])
    R.train_pool(tasks, workers=1, quiet=True)
    assert all(P.marked(p, "fedcm_dispersion") for p in per["fedcm_dispersion"])
    assert R.train_pool(tasks, workers=1, quiet=True) == []          # measured: nothing left to do
    fresh_machine(out)
    tasks, _ = T.collect("quick", 1, ["fedcm_dispersion"])
    assert not any(t["weights"] for t in tasks) and all(L.light(t["path"]) for t in tasks)
    assert R.train_pool(tasks, workers=1, quiet=True) == []          # nothing to train, nothing to measure
    again = draw_dispersion(out)
    assert all(L.light(t["path"]) for t in tasks), "drawn from the kept measurements"
    monkeypatch.setattr(T_, "_ARGS", dict(T_._ARGS, out=tmp_path / "elsewhere"))
    assert draw_dispersion(tmp_path / "elsewhere")["ratio_to_alpha1"] == again["ratio_to_alpha1"]


def test_the_tier_runner_measures_a_run_trained_before_it_was_asked_to(out):
    from paper_figures import fedcm_dispersion
    overrides, seed, tag = fedcm_dispersion.run_list("quick", 1)[0]
    C.train_seeds(overrides, [seed], tier="quick", tag=tag)           # by a script, not the runner: not measured
    tasks, per = T.collect("quick", 1, ["fedcm_dispersion"])
    assert R.status(tasks[0]) == "done" and not P.marked(tasks[0]["path"], "fedcm_dispersion")
    R.train_pool(tasks, workers=1, quiet=True)
    assert P.marked(tasks[0]["path"], "fedcm_dispersion")


@pytest.mark.parametrize("script", ["fedsmoo_table2", "fedsmoo_fig3_surface", "fedlesam_fig3_surface",
                                    "fedlesam_fig2_drift"])
def test_each_weights_script_draws_on_a_fresh_machine_from_what_the_runner_measured(out, script):
    """Its measure_run covers what its compute asks: the runner trains and measures (2 seeds), the cache is lost,
    the script draws from light entries alone, to the same data as a draw that measures the weights itself."""
    import importlib
    mod = importlib.import_module(f"paper_figures.{script}")
    tasks, _ = T.collect("quick", 2, [script])
    R.train_pool(tasks, workers=1, quiet=True)
    full = out.parent / "full"
    shutil.copytree(out / "runs", full)
    fresh_machine(out)
    argv = ["--tier", "quick", "--seeds", "2", "--workers", "1", "--out", out, "--quiet"]
    light = C.run_script(script, mod.compute, "w", argv)
    assert all(L.light(t["path"]) for t in tasks), "nothing was trained"
    shutil.rmtree(out / "runs")
    shutil.copytree(full, out / "runs")                               # the weights back; the measurements not
    shutil.rmtree(L.folder("quick"))
    assert C.run_script(script, mod.compute, "w", argv)["table"] == light["table"]


def test_a_measurement_is_named_by_its_file_so_a_script_run_as_main_finds_what_the_runner_kept():
    import types

    from paper_figures import fedcm_dispersion
    fn = fedcm_dispersion.one_round.__wrapped__
    main = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    main.__module__, main.__qualname__ = "__main__", fn.__qualname__          # python -m paper_figures.fedcm_...
    assert P._where(main) == P._where(fn) == "paper_figures.fedcm_dispersion.one_round"


SRC = '''"""Module prose."""
import math


def f(x, k=2):
    """Function prose."""
    return math.sqrt(x) * k   # a comment
'''


def test_the_code_hash_reads_code_not_prose():
    same = [SRC.replace("Module prose.", "Edited."),
            SRC.replace("Function prose.", "Other words, two lines.\n\n    More."),
            SRC.replace("# a comment", ""), SRC.replace("(x, k=2)", "(x,  k = 2)"),
            SRC.replace('    """Function prose."""\n', "")]
    moved = [SRC.replace("k=2", "k=3"), SRC.replace("sqrt", "exp"), SRC.replace("* k", "/ k"),
             SRC.replace('"""Module prose."""', '"""Module prose."""\nMODE = "a b"'), SRC + "\nY = 'x'\n"]
    base = P._code_of(SRC)
    assert all(P._code_of(s) == base for s in same)
    assert all(P._code_of(s) != base for s in moved)
    assert len({P._code_of(s) for s in moved}) == len(moved)


def test_the_noise_counts_only_for_a_run_trained_with_it(tmp_path, monkeypatch):
    monkeypatch.setattr(P, "ROOT", tmp_path)
    for rel, text in {"pkg/a.py": "A = 1\n", "pkg/noise.py": "S = 0.2\n"}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    before = {skip: P._hash_sources(("pkg",), skip) for skip in ((), ("pkg/noise.py",))}
    (tmp_path / "pkg/noise.py").write_text("S = 0.3\n")
    assert P._hash_sources(("pkg",), ("pkg/noise.py",)) == before[("pkg/noise.py",)]
    assert P._hash_sources(("pkg",)) != before[()]
    (tmp_path / "pkg/a.py").write_text("A = 2\n")
    assert P._hash_sources(("pkg",), ("pkg/noise.py",)) != before[("pkg/noise.py",)]
    repo = Path(P.__file__).resolve().parents[1]                   # the skipped file is one the hash reads
    assert (repo / P.NOISE).is_file() and any(repo / s in (repo / P.NOISE).parents for s in P.SOURCES)
    for het, noisy in ((0.0, False), (0.2, True)):
        entry = tmp_path / f"run-{het}"
        entry.mkdir()
        (entry / "key.json").write_text(json.dumps({"config": {"algo": "fedinit", "het_noise": het}}))
        assert P._noisy(entry) is noisy


def test_the_code_hash_is_the_same_on_python_versions_that_split_f_strings_otherwise():
    """Python 3.12.1 parses ``f"{a:<{w}}"`` with an empty part after ``{w}``; the hash drops empty parts, so 3.10 to
    3.13 agree (checked on every file of the package and of paper_figures on this machine's four Pythons)."""
    import ast
    text = 'y = f"{a:<{w}}" + f"{b}"\n'
    split = ast.parse(text)
    split.body[0].value.left.values[0].format_spec.values.append(ast.Constant(""))   # as 3.12.1 parses it
    assert P._canon(P._bare(split)).encode() == P._code_of(text)
    assert P._code_of(text) != P._code_of(text.replace("<", ">"))
