"""paper_figures/verdict.py, the one verdict rule, on synthetic effects: every outcome reachable, each boundary
on the side the module docstring states."""
import math

import numpy as np
import pytest

from paper_figures import verdict as V
from paper_figures.claims import CLAIMS, Claim

PLAIN = Claim("t.plain", "fedsmoo", "x", "quote text", "effect")
SIZED = Claim("t.sized", "fedinit", "x", "quote text", "points", size=0.02)          # target 0.01
EQUIV = Claim("t.equiv", "fedinit", "x", "quote text", "points", kind="equivalent", margin=0.01)
ATMOST = Claim("t.atmost", "fedlesam", "x", "quote text", "flatter", kind="at_most", margin=0.1)


def test_interval_is_students_t():
    m, lo, hi = V.interval([1.0, 2.0, 3.0])
    assert m == 2.0 and hi - m == pytest.approx(4.302652729749464 * 1.0 / math.sqrt(3), rel=1e-12)
    assert lo == pytest.approx(2 * m - hi, rel=1e-12)
    assert V.interval([5.0])[1:] == (-math.inf, math.inf)


@pytest.mark.parametrize("claim,effects,want", [
    (PLAIN, [0.3, 0.32, 0.28, 0.31, 0.29], V.REPRODUCED),
    (PLAIN, [-0.3, -0.32, -0.28], V.OPPOSITE),
    (PLAIN, [0.1, -0.1, 0.05], V.INCONCLUSIVE),
    (PLAIN, [0.0, 0.0, 0.0], V.INCONCLUSIVE),                    # a tie: identical per-seed results
    (PLAIN, [0.5], V.INCONCLUSIVE),                              # one seed: no interval
    (SIZED, [0.012, 0.011, 0.013], V.REPRODUCED),                # half of "at least 2 points" reached
    (SIZED, [0.006, 0.007, 0.0065], V.DIRECTION),                # right sign, too small
    (SIZED, [-0.012, -0.011, -0.013], V.OPPOSITE),
    (EQUIV, [0.002, -0.001, 0.0], V.REPRODUCED),
    (EQUIV, [0.05, 0.04, 0.045], V.OPPOSITE),                    # the interval lies beyond +margin
    (EQUIV, [-0.05, -0.04, -0.045], V.OPPOSITE),
    (EQUIV, [0.0, 0.02, 0.01], V.INCONCLUSIVE),
    (ATMOST, [0.31, 0.28, 0.34], V.OPPOSITE),                    # FedSAM 31 +- 3% flatter: not "not flatter"
    (ATMOST, [-0.2, -0.15, -0.18], V.REPRODUCED),
    (ATMOST, [0.0, 0.2, 0.1], V.INCONCLUSIVE),
])
def test_every_outcome_is_reachable(claim, effects, want):
    r = V.decide(claim, effects)
    assert r["verdict"] == want, r
    assert r["n_seeds"] == len(effects) and r["effect"] == pytest.approx(effects)


def test_divergence_and_convergence_come_first_and_are_reported():
    r = V.decide(PLAIN, [0.3, float("nan"), 0.3])
    assert r["verdict"] == V.DIVERGED and "1 of 3" in r["note"] and r["effect"][1] is None
    ok = {"converged": True, "diverged": None}
    runs = [ok, {"diverged": "loss is nan at round 3", "converged": False}, ok]
    assert V.decide(PLAIN, [0.3, 0.31, 0.29], runs)["verdict"] == V.DIVERGED
    r = V.decide(PLAIN, [0.3, 0.31, 0.29], [{"converged": False, "diverged": None}, ok, ok])
    assert r["verdict"] == V.NOT_CONVERGED and "1 of 3" in r["note"] and r["mean"] == pytest.approx(0.3)
    assert V.decide(PLAIN, [0.3, 0.31, 0.29], [ok, ok, ok])["verdict"] == V.REPRODUCED
    with pytest.raises(KeyError):                              # a run without the tier's flags is refused
        V.decide(PLAIN, [0.3, 0.31, 0.29], [{}, ok, ok])
    # a claim about the course of training (per-round dispersion) is judged whether or not the runs converged, and
    # says how many did not; a claim about the trained model is not
    during = CLAIMS["fedcm.b8"]
    assert not during.at_convergence and PLAIN.at_convergence
    r = V.decide(during, [0.4, 0.5, 0.45], [{"converged": False, "diverged": None}, ok, ok])
    assert r["verdict"] == V.OPPOSITE and "1 of 3 runs not converged" in r["note"]


def test_exact_not_measured_and_seed_count_in_rows():
    assert V.exact(CLAIMS["fedcm.lemma41"], True)["verdict"] == V.REPRODUCED
    assert V.exact(CLAIMS["fedcm.lemma41"], False)["verdict"] == V.VIOLATED
    assert V.not_measured(PLAIN, "no ladder")["verdict"] == V.NOT_MEASURED
    assert "fewer than 5" in V.decide(PLAIN, [1.0, 1.1, 0.9])["note"]
    assert "fewer" not in V.decide(PLAIN, np.linspace(1, 2, 5))["note"]
    assert "(3 seeds)" in V.fmt(V.decide(PLAIN, [1.0, 1.1, 0.9]))


def test_summary_counts_never_one_word():
    rows = [{"verdict": v} for v in (V.REPRODUCED, V.OPPOSITE, V.OPPOSITE, V.INCONCLUSIVE)]
    assert V.summary(rows) == "1 reproduced, 2 opposite, 1 inconclusive of 4 comparisons"
    assert V.colour(rows) == "#f0f0f0" and V.colour(rows[:1]) == V.COLOURS[V.REPRODUCED]


def test_the_rule_can_fail():
    """A rule that called an inconclusive effect reproduced (the old mean > 1 sd rule) is caught."""
    effects = [0.3, 0.05, 0.2]                       # mean 0.18 > sd 0.13, yet the t interval covers 0
    m, s = np.mean(effects), np.std(effects, ddof=1)
    assert m > s and V.decide(PLAIN, effects)["verdict"] == V.INCONCLUSIVE


def test_registry_targets():
    assert CLAIMS["fedinit.t6.scaffold"].target == pytest.approx(0.01)     # half of "about 2% ~ 3%"
    assert CLAIMS["fedlesam.fig2.drift"].target == pytest.approx(0.5)      # "much smaller", read once
    assert CLAIMS["fedinit.t6.feddyn"].margin is None and CLAIMS["fedinit.t6.feddyn"].margin_from == "ours"
