"""power.tighter: a loose bound searched over the regimes its theorem allows (issue 37). A toy paper module whose
bound is B(a) = 2 + 10 / a over a measured 1 + err: the search must find the largest a, report its slack, skip a
regime whose correct run is violated, and run the row's declared mistakes only in the tightest regime."""
import types

import pytest

from fedlab_analysis.theory import claims as C
from fedlab_analysis.theory import power
from fedlab_analysis.theory.mistakes import Mistake


def _design(seed, a=1.0, err=0.0, bad=False):
    bound, meas = 2.0 + 10.0 / a, 1.0 + err
    if bad:                                   # a regime outside the bound: the correct run is violated
        bound = 0.5
    v = C.HOLDS if meas <= bound else C.VIOLATED
    if a > 1000:                              # outside the theorem's condition a <= 1000: reported, never kept
        v = C.OUTSIDE
    return [C.Claim("toy", "b", "B >= m", "Thm 1", "m <= B", f"{meas} vs {bound}", v, value=meas,
                    slack=bound / meas, kind=C.LOOSE, regime=C.regime_text("a <= 1000", a <= 1000))]


def _module():
    m = types.ModuleType("toy")
    m.DESIGNS = {"d": _design}
    m.MISTAKES = {"err-2": Mistake("err-2", "measured value +2", switch={"err": 2.0}),
                  "err-20": Mistake("err-20", "measured value +20", switch={"err": 20.0})}
    m.POWER = {"b": ("d", ("err-2", "err-20"))}
    m.TIGHTER = {"b": (("a = 1", "d", {"a": 1.0}), ("a = 100", "d", {"a": 100.0}), ("a = 10", "d", {"a": 10.0}),
                       ("bad", "d", {"bad": True}),
                       ("a = 1e4", "d", {"a": 1e4}))}
    return m


def test_the_smallest_slack_is_found_and_its_mistakes_run_there():
    t = power.tighter(_module())["b"]
    assert t["regime"] == "a = 100" and t["slack"] == pytest.approx(2.1)
    assert {r: s for r, s, _ in t["tried"]}["bad"] is None     # violated control: no slack
    assert t["power"] == {"err-2": power.CAUGHT, "err-20": power.CAUGHT}
    loose = power.tighter(_module(), rows={"x"})
    assert loose == {}


def test_at_the_committed_design_the_mistake_is_not_caught_but_at_the_tight_one_it_is():
    m = _module()
    m.TIGHTER = {"b": (("a = 1", "d", {"a": 1.0}),)}            # slack 12: err +2 stays inside the bound
    assert power.tighter(m)["b"]["power"]["err-2"] == power.MISSED
    m.TIGHTER = {"b": (("a = 100", "d", {"a": 100.0}),)}
    assert power.tighter(m)["b"]["power"]["err-2"] == power.CAUGHT


def test_the_report_states_the_regime_and_what_is_caught(tmp_path):
    m = _module()
    rows = power.annotate(_design(0), m)
    assert rows[0].details["tighter"]["regime"] == "a = 100"
    md = C.write_report(rows, tmp_path, mistakes={"err-2": "x", "err-20": "y"}).read_text()
    line = next(ln for ln in md.splitlines() if ln.startswith("| toy | b | x"))
    assert "x2.1 | a = 100 |" in line and "bad: violated (no slack)" in line and "err-2, err-20" in line
    assert "a = 1e4: outside the proven regime (no slack)" in line
    assert "Counterexamples: the correct algorithm breaks the bound inside the theorem's conditions in toy b (bad)." \
        in md
