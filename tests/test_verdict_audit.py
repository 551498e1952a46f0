"""paper_figures/verdict.py's convergence gate, margins and audit trail: the gate reads the claim's own curve (the
training loss for a curvature or flatness claim, test accuracy for an accuracy claim) with a tolerance tied to the
interval's half-width, a run flat at chance is collapse; a margin of ours comes from the baseline arm's seeds; a
divergence the paper predicts counts for its claim; the controls are claims in their paper's family; and every
committed row that names its runs is re-derived from its script's curves.json, a changed curve number caught."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from fedlab_analysis.errors import UserError
from paper_figures import verdict as V
from paper_figures import family as F
from paper_figures.claims import CLAIMS, Claim

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "paper_figures" / "out"
ACC = CLAIMS["fedinit.t6.fedavg"]              # an accuracy claim about the trained model
CURV = CLAIMS["fedsmoo.t2.lam1"]               # a curvature claim: gated on the training loss
DURING = CLAIMS["fedcm.fig23.fedadam"]         # a claim about the course of training: not gated
rng = np.random.default_rng(0)
FLAT_ACC = (0.95 + 0.0005 * rng.standard_normal(50)).tolist()
FALLING_LOSS = np.geomspace(0.4, 0.05, 50).tolist()          # still falling: -19% over the last 5 evaluations
FLAT_LOSS = (0.05 * (1 + 0.002 * rng.standard_normal(50))).tolist()


def run(acc, loss, i=0, diverged=None):
    return {"id": f"r{i}", "diverged": diverged, "curve": {"round": list(range(len(acc))), "test_acc": acc,
                                                             "train_loss": loss}}


def test_claims_name_their_gate_curve():
    assert ACC.measure == "test_acc" and CURV.measure == "train_loss" and DURING.measure is None
    assert CLAIMS["fedcm.lemma41"].measure is None                        # an exact check: no runs
    # every claim gated on the training loss has a relative effect, the units its relative drift is read in
    # (Remark 14's loss difference is measured on a toy, with no tier runs to gate)
    assert [c.id for c in CLAIMS.values() if c.measure == "train_loss" and "/" not in c.effect] == \
        ["fedinit.remark14"]


def test_the_gate_reads_the_training_loss_for_a_curvature_claim():
    """Accuracy flat, training loss still falling: a curvature claim is not converged, an accuracy claim is; the old
    gate (test accuracy for every claim) would have passed the curvature claim."""
    r = run(FLAT_ACC, FALLING_LOSS)
    tol = 0.05
    assert V.flag(r, CURV, tol) == "not converged" and V.flag(r, ACC, tol) == "ok"
    assert V.plateau(FLAT_ACC, tol)                                     # the old gate's reading: passes
    assert V.flag(run(FLAT_ACC, FLAT_LOSS), CURV, tol) == "ok"          # a flat loss passes
    assert V.flag(r, DURING, tol) == "ok"                                 # a claim along training is not gated
    rows = [V.decide(CURV, [0.3, 0.32, 0.31], [run(FLAT_ACC, L, i) for i in range(6)]) for L in
            (FALLING_LOSS, FLAT_LOSS)]
    assert rows[0]["verdict"] == V.NOT_CONVERGED and "6 of 6 runs not converged (train loss" in rows[0]["note"]
    assert rows[1]["verdict"] == V.REPRODUCED and rows[1]["flags"] == ["ok"] * 6
    assert rows[0]["runs"] == [f"r{i}" for i in range(6)] and rows[0]["gate"]["measure"] == "train_loss"


def test_the_gate_tolerance_is_tied_to_the_interval():
    """A curve that still gains 0.22 points from one window to the next passes for an effect whose interval is
    20 points wide, and fails for one whose interval is 1 point wide: the tolerance is a quarter of the
    half-width (the old fixed 0.3 points passed both)."""
    climb = np.concatenate([np.full(40, 0.9), np.linspace(0.9, 0.904, 10)]).tolist()
    wide, narrow = [0.01, 0.05, 0.09], [0.048, 0.05, 0.052]
    half = lambda e: (V.interval(e)[2] - V.interval(e)[1]) / 2                   # noqa: E731
    assert V.GATE_FRACTION * half(wide) > 0.0022 > V.GATE_FRACTION * half(narrow)
    runs = [run(climb, FLAT_LOSS, i) for i in range(6)]
    assert V.decide(ACC, wide, runs)["verdict"] == V.INCONCLUSIVE
    r = V.decide(ACC, narrow, runs)
    assert r["verdict"] == V.NOT_CONVERGED and r["gate"]["tol"] == pytest.approx(V.GATE_FRACTION * half(narrow))
    # the old fixed 0.3-point tolerance passed this climb for both
    assert V.plateau(climb, 0.003)


def test_a_run_flat_at_chance_is_collapse_not_converged():
    chance = (0.1 + 0.002 * rng.standard_normal(50)).tolist()
    assert V.plateau(chance, 0.0)                                       # a plateau: the gate alone would pass it
    assert V.flag(run(chance, FLAT_LOSS), ACC, 0.01) == "collapsed"
    r = V.decide(ACC, [0.3, 0.31, 0.29], [run(FLAT_ACC, FLAT_LOSS, 0), run(chance, FLAT_LOSS, 1)])
    assert r["verdict"] == V.COLLAPSED and r["flags"] == ["ok", "collapsed"]
    nan = [*FLAT_ACC[:-1], None]
    assert V.flag(run(nan, FLAT_LOSS, diverged="loss nan"), ACC, 0.01) == "diverged"


def test_a_margin_of_ours_is_two_seed_sd_of_the_baseline_and_labelled():
    null = CLAIMS["fedinit.t6.feddyn"]
    assert null.margin is None and null.margin_from == "ours"
    base = [0.90, 0.91, 0.92]                                            # seed sd 0.01: margin 0.02
    r = V.decide(null, [0.002, -0.001, 0.0], base=base)
    assert r["margin"] == pytest.approx(0.02) and r["margin_from"].startswith("ours") and r["baseline"] == base
    assert r["verdict"] == V.REPRODUCED and "margin 2 points, ours" in V.fmt(r, 100, " points")
    assert V.decide(null, [0.05, 0.04, 0.045], base=base)["verdict"] == V.OPPOSITE
    tight = V.decide(null, [0.002, -0.001, 0.0], base=[0.9, 0.9001, 0.9002])     # a quiet baseline: a tight margin
    assert tight["verdict"] == V.INCONCLUSIVE
    assert V.decide(null, [0.002, -0.001, 0.0])["verdict"] == V.INCONCLUSIVE    # no baseline given: no margin
    assert V.p_value(null, [0.002, -0.001, 0.0], 0.02) < V.ALPHA
    paper = Claim("t.paper", "fedinit", "x", "quote text", "points", kind="equivalent", margin=0.01)
    assert V.decide(paper, [0.002, -0.001, 0.0])["margin_from"] == "paper"
    slope = CLAIMS["fedcm.b8"]                                           # one arm's statistic: its own seeds
    r = V.decide(slope, [-0.5, -0.4, -0.6])
    assert r["margin"] == pytest.approx(0.2) and "baseline" not in r and r["margin_from"].endswith("effect")


def test_a_predicted_divergence_counts_for_the_claim():
    div = CLAIMS["fedinit.fig1.diverges"]
    assert div.predicts_failure and not ACC.predicts_failure
    runs = [run(FLAT_ACC, FLAT_LOSS, 0), run([*FLAT_ACC[:-1], None], FLAT_LOSS, 1, diverged="loss nan")]
    r = V.decide(div, [0.3, np.nan], runs)
    assert r["verdict"] == V.REPRODUCED and r["note"] == "1 of 2 runs diverged (non-finite), as the paper predicts"
    assert V.decide(ACC, [0.3, np.nan], runs)["verdict"] == V.DIVERGED
    # the baseline arm (beta = 0) diverging is no evidence that beta past the threshold diverges
    assert V.decide(div, [np.nan, 0.3], runs[::-1])["verdict"] == V.DIVERGED


def test_a_predicted_collapse_counts_for_the_claim_only_in_the_arm_it_names():
    """FedLESAM Fig. 4: "larger perturbations hinder convergence". A largest-rho run at chance (the second arm) is
    that hindrance; the best interior rho's run at chance is not, and stays "collapsed to chance"."""
    drop = CLAIMS["fedlesam.fig4.drop"]
    chance = [0.1] * 50
    ok, dead = run(FLAT_ACC, FLAT_LOSS, 0), run(chance, FLAT_LOSS, 1)
    r = V.decide(drop, [0.85, 0.84], [ok, ok, ok, dead])
    assert r["verdict"] == V.REPRODUCED and r["note"].endswith("to chance (final test accuracy below 19%), "
                                                                "as the paper predicts")
    assert V.decide(drop, [-0.85, 0.84], [dead, ok, ok, ok])["verdict"] == V.COLLAPSED
    assert V.decide(CLAIMS["fedlesam.fig4.rise"], [0.85, 0.84], [ok, ok, ok, dead])["verdict"] == V.COLLAPSED


@pytest.fixture(scope="module")
def fam():
    return F.family(OUT)


def test_a_predicted_divergence_round_trips_outside_the_family(tmp_path, monkeypatch):
    """A run that diverged while the effect stayed finite (a late-accuracy mean over rounds before the blow-up):
    the row is re-derived from curves.json, reproduced, and no test of the family."""
    monkeypatch.setattr("paper_figures.claims.TOY", ())
    div = CLAIMS["fedinit.fig1.diverges"]
    runs = [run(FLAT_ACC, FLAT_LOSS, 0), run(FLAT_ACC, FLAT_LOSS, 1),
            run(FLAT_ACC, FLAT_LOSS, 2, diverged="loss is nan at round 40"), run(FLAT_ACC, FLAT_LOSS, 3)]
    rows = [{"row": "beta 3", **V.decide(div, [0.3, 0.31], runs)},
            {"row": "K", **V.decide(CLAIMS["fedinit.fig1.k"], [0.01, 0.012, 0.011], runs[:2] + runs[3:])}]
    assert rows[0]["verdict"] == V.REPRODUCED and rows[0]["flags"][2] == "diverged"
    d = tmp_path / "fedinit_fig1_sensitivity"
    d.mkdir()
    (d / "data.json").write_text(json.dumps({"table": rows}))
    (d / V.CURVES).write_text(json.dumps({"runs": {r["id"]: {**r["curve"], "seed": 0, "diverged": r["diverged"]}
                                                   for r in runs}}))
    got = {r["row"]: r for r in F.family(tmp_path)["quick"]}
    assert got["beta 3"]["raw"] == V.REPRODUCED and got["beta 3"]["p"] is None and got["beta 3"]["curves"] == "checked"
    assert got["K"]["p"] is not None


def test_controls_are_claims_in_their_papers_family(fam):
    want = {"fedlesam.ctrl.s_scaffold": "fedlesam", "fedlesam.ctrl.d_feddyn": "fedlesam",
            "fedsmoo.ctrl.feddyn": "fedsmoo", "fedinit.ctrl.ri": "fedinit"}
    for cid, paper in want.items():
        c = CLAIMS[cid]
        assert c.paper == paper and c.where.startswith("Control (the toolkit's)") and c.measure == "test_acc"
    got = {r["claim"] for t in fam.values() for r in t if r["p"] is not None and r["claim"] in want}
    assert got == set(want)                                              # each judged, in its paper's family
    assert all(r["p_holm"] is not None for t in fam.values() for r in t if r["claim"] in want and r["p"] is not None)


# ---- the audit trail: every committed verdict from the committed files ------------------------------------------
def copy_tree(dest: Path) -> Path:
    for p in [*OUT.glob("**/data.json"), *OUT.glob(f"**/{V.CURVES}")]:
        if "runs" not in p.relative_to(OUT).parts:
            (dest / p.relative_to(OUT)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(p, dest / p.relative_to(OUT))
    return dest


def test_every_committed_row_is_rederived_and_absent_curves_are_listed(fam):
    """Every quick row of a trained comparison names its runs and is re-derived from its curves.json; every mnist
    row written before curves were committed is re-derived from its per-seed effects and said to lack curves (in
    verdicts.md's table), none silently skipped."""
    quick = [r for r in fam["quick"] if r["stored"] != V.NOT_MEASURED and r["curves"] != "exact check, restated"
             and r["script"] != "stability_gap"]
    assert quick and all(r["curves"] == "checked" for r in quick), [(r["script"], r["row"]) for r in quick
                                                                    if r["curves"] != "checked"]
    absent = [r for r in fam["mnist"] if r["curves"] and r["curves"].startswith("absent")]
    without = {p.parent.name for p in OUT.glob("mnist/*/data.json") if not (p.parent / V.CURVES).exists()}
    assert {r["script"] for r in absent} == without                     # shrinks as the protocol-1 outputs go
    md = (OUT / "verdicts.md").read_text()
    for s in {r["script"] for r in absent}:
        n = sum(r["script"] == s for r in absent)
        assert f"| mnist | {s} | " in md and f" | {n} | " in md.split(f"| mnist | {s} | ")[1].split("\n")[0]
    sizes = {t: sum(p.stat().st_size for p in OUT.glob(glob)) for t, glob in
             (("quick", f"*/{V.CURVES}"), ("mnist", f"mnist/*/{V.CURVES}"))}
    assert 0 < sizes["quick"] < 2_000_000                               # compact: the repository stays small


def _quick_row_with_runs(root: Path):
    for f in sorted(root.glob("*/data.json")):
        d = json.loads(f.read_text())
        for i, t in enumerate(d["table"]):
            if t.get("runs") and CLAIMS[t["claim"]].measure and t["flags"][0] == "ok" and t["verdict"] in \
                    V.DECISIVE + (V.INCONCLUSIVE,):          # a gated row whose first run passes the gate
                return f, d, i
    raise AssertionError("no committed quick row names its runs")


@pytest.mark.parametrize("what", ["curve", "flag", "diverged"])
def test_one_changed_curve_number_or_flag_is_caught(tmp_path, what):
    root = copy_tree(tmp_path)
    f, d, i = _quick_row_with_runs(root)
    t = d["table"][i]
    if what == "flag":
        t["flags"][0] = "not converged" if t["flags"][0] == "ok" else "ok"
        f.write_text(json.dumps(d))
    else:
        cf = f.parent / V.CURVES
        c = json.loads(cf.read_text())
        r = c["runs"][t["runs"][0]]
        if what == "curve":                          # the last evaluations fall away: no plateau any more
            r["test_acc"][-3:] = [v - 0.2 for v in r["test_acc"][-3:]]
            r["train_loss"][-3:] = [v * 3 for v in r["train_loss"][-3:]]
        else:
            r["diverged"] = "loss is nan at round 7"
        cf.write_text(json.dumps(c))
    with pytest.raises(UserError, match=f"{f.parent.name}/data.json: row {i} .*does not recompute"):
        F.family(root)
    assert F.render(F.family(copy_tree(tmp_path / "fresh"))) == (OUT / "verdicts.md").read_text()


def test_a_changed_baseline_seed_moves_the_margin_and_is_caught(tmp_path):
    root = copy_tree(tmp_path)
    hit = next((f, d, i) for f in sorted(root.glob("*/data.json")) for d in [json.loads(f.read_text())]
               for i, t in enumerate(d["table"]) if t.get("baseline") and t.get("runs"))
    f, d, i = hit
    d["table"][i]["baseline"][0] += 0.01
    f.write_text(json.dumps(d))
    with pytest.raises(UserError, match=f"{f.parent.name}/data.json: row {i} .*does not recompute"):
        F.family(root)


def test_a_missing_curves_file_is_named(tmp_path):
    root = copy_tree(tmp_path)
    f, d, _ = _quick_row_with_runs(root)
    j = next(i for i, t in enumerate(d["table"]) if t.get("runs"))           # the first row that names its runs
    (f.parent / V.CURVES).unlink()
    with pytest.raises(UserError, match=f"{f.parent.name}/data.json: row {j} .*names its runs, but .*{V.CURVES} is "
                                        f"missing"):
        F.family(root)
