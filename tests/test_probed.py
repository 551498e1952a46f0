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
    assert P.stamped("quick", NAME, entries)
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
    tasks, per = T.collect("quick", 3, ["fedcm_dispersion"])
    assert all(t["weights"] for t in tasks)
    P.stamp("quick", "fedcm_dispersion", per["fedcm_dispersion"])
    tasks, _ = T.collect("quick", 3, ["fedcm_dispersion"])
    assert not any(t["weights"] for t in tasks)
    tasks, _ = T.collect("quick", 4, ["fedcm_dispersion"])        # a run the stamp does not name
    assert all(t["weights"] for t in tasks)
