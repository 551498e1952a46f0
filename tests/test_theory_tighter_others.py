"""Tighter instances of the loosest FedLESAM, FedALS and FedSMOO bounds (issue 37): for each row, power.tighter over
the module's TIGHTER finds a slack no larger than its committed power design's, in a regime the theorem allows (the
row's regime text says "inside"). The regimes where the correct algorithm breaks the bound are pinned as violated."""
import types

import pytest

from fedlab_analysis.theory import claims as C
from fedlab_analysis.theory import fedals, fedlesam, fedsmoo, power


def committed_slack(mod, rid):
    return {c.id: c for c in mod.DESIGNS[mod.POWER[rid][0]](0)}[rid].slack


def row_at(mod, rid, regime):
    _, design, kw = next(r for r in mod.TIGHTER[rid] if r[0] == regime)
    return {c.id: c for c in mod.DESIGNS[design](0, **kw)}[rid]


def assert_tighter(mod, rows, ref=None) -> dict:
    """Each row's tightest regime: a finite slack no larger than the committed design's, its row inside the
    theorem's conditions; no regime tried outside them. ``ref``: the module whose committed design is the reference."""
    res = power.tighter(mod, 0, rows=set(rows))
    for rid in rows:
        t = res[rid]
        assert t["slack"] is not None, f"{rid}: no regime gave a slack: {t['tried']}"
        assert t["slack"] <= committed_slack(ref or mod, rid), f"{rid}: {t['slack']} looser than committed"
        c = row_at(mod, rid, t["regime"])
        assert c.regime.startswith("inside") and c.slack == t["slack"], (rid, c.regime)
        assert all(v != C.OUTSIDE for _, _, v in t["tried"]), (rid, t["tried"])
    return res


def test_fedlesam_theorem1_and_lemma4_reach_a_slack_near_1_and_break_where_the_paper_allows():
    res = assert_tighter(fedlesam, ("thm1-fedsam", "thm1-fedlesam", "L4"))
    for rid in res:
        assert res[rid]["slack"] < 2, (rid, res[rid]["slack"])             # x48.6, x22.7, x51.4 committed
    tried = {rid: {r: v for r, _, v in t["tried"]} for rid, t in res.items()}
    x0 = f"{fedlesam._X0}, T in {{100, 200}}"
    assert tried["thm1-fedlesam"][x0] == C.VIOLATED                          # FedLESAM's O(rho L) floor at w^0 = x*
    floor = f"{fedlesam._X0}, T = 600: past FedSAM's floor (thm1-independent-rho)"
    assert tried["thm1-fedsam"][floor] == C.VIOLATED
    stationary = "stochastic gradients sigma = 2, homogeneous, T = 300 (stationary rounds dominate)"
    assert tried["L4"][stationary] == C.VIOLATED                             # Lemma 4 has no raw-variance term
    assert res["thm1-fedlesam"]["power"]["step-x2"] == power.CAUGHT          # caught nowhere at the committed design
    assert res["L4"]["power"]["step-x2"] == power.CAUGHT


def test_fedals_one_round_and_eq57_bounds_tighten_at_iid_long_local_runs():
    res = assert_tighter(fedals, ("thmB1-bound", "bound9-eq57"))
    assert res["thmB1-bound"]["slack"] < 10 and res["bound9-eq57"]["slack"] < 5     # x106, x18 committed


@pytest.mark.slow
def test_fedsmoo_margin_bound_stays_far_from_1_at_every_affordable_size():
    res = assert_tighter(fedsmoo, ("T8-genbound",))
    assert 100 < res["T8-genbound"]["slack"] < 1e3                           # x3.9e7 committed: a linear net, D = 40000


def test_a_looser_or_outside_regime_fails_the_check():
    broken = types.ModuleType("broken")
    broken.DESIGNS, broken.POWER, broken.MISTAKES = fedlesam.DESIGNS, {}, {}
    broken.TIGHTER = {"thm1-fedsam": (("w^0 = x* + 5", "thm1", {"start": 5.0}),)}     # slack x130 > x48.6
    with pytest.raises(AssertionError, match="looser than committed"):
        assert_tighter(broken, ("thm1-fedsam",), ref=fedlesam)
    broken.TIGHTER = {"thm1-fedsam": (("T = 80 < 100: eta_l > 1/(10EL)", "thm1", {"Ts": (80,)}),)}
    with pytest.raises(AssertionError, match="no regime gave a slack"):
        assert_tighter(broken, ("thm1-fedsam",), ref=fedlesam)
