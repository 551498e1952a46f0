"""Power of the claim table (theory/power.py, theory/mistakes.py): a mistake replaces one rule for a call and is
restored; one mistake flips the rows that declare it; a row catches a mistake only when its control is not
violated and the broken run is (finite); a finding that catches nothing is refused and labelled loose or vacuous."""
import importlib
import json
import math
from pathlib import Path

import pytest
import torch

from fedlab_analysis.theory import mistakes, power, rules
from fedlab_analysis.theory.claims import (FINDING, HOLDS, LOOSE, VACUOUS, VIOLATED, Claim, bound, counts,
                                           write_report)

PAPERS = ("fedsmoo", "fedlesam", "fedcm", "fedals", "fedinit")
MODS = {p: importlib.import_module(f"fedlab_analysis.theory.{p}") for p in PAPERS}
REPORT = Path(__file__).resolve().parents[1] / "paper_figures" / "out" / "theory" / "report.json"


def row(kind=FINDING, verdict=HOLDS, **kw):
    return Claim("x", "a", "", "", "", "", verdict, kind=kind, **kw)


def test_bound_is_two_sided_and_divergence_is_a_violation():
    assert bound(0.5, 1.0) == HOLDS and bound(2.0, 1.0) == VIOLATED
    assert bound(math.inf, 1.0) == VIOLATED and bound(math.nan, 1.0) == VIOLATED


def test_a_mistake_replaces_one_rule_for_the_call_and_is_restored():
    orig, x, d = rules.sgd_step, torch.ones(3), torch.full((3,), 0.5)
    with mistakes.applied(mistakes.LIBRARY["step-x2"]):
        assert rules.sgd_step is not orig
        assert torch.equal(rules.sgd_step(x, 0.1, d), x - 0.1 * d * 2)
    assert rules.sgd_step is orig
    with pytest.raises(RuntimeError), mistakes.applied(mistakes.LIBRARY["ri-sign"]):
        raise RuntimeError                                             # restored on error too
    assert rules.relaxed_start.__module__ == rules.__name__


def test_library_mistakes_change_what_they_say():
    L, g, mu, s = mistakes.LIBRARY, torch.tensor([[3.0, 4.0]]), torch.tensor([[0.5, 0.0]]), torch.tensor([0.1, 0.2])
    w, last = torch.tensor([1.0, 1.0]), torch.tensor([[0.0, 2.0]])
    with mistakes.applied(L["ri-sign"]):
        assert torch.allclose(rules.relaxed_start(w, last, 0.5), w - 0.5 * (w - last))
    with mistakes.applied(L["sam-unnormalised"]):
        assert torch.equal(rules.sam_ascent(g, 0.1), 0.1 * g)
    shat, mu_new = rules.smoo_ascent(g, mu, s, 0.1)
    with mistakes.applied(L["smoo-dual-sign"]):
        shat2, mu_bad = rules.smoo_ascent(g, mu, s, 0.1)
    assert torch.equal(shat, shat2) and torch.allclose(mu_bad, mu - (shat - s))
    with mistakes.applied(L["cm-alpha-missing"]):
        assert torch.allclose(rules.cm_direction(g, mu, 0.2), g + 0.8 * mu)


def test_one_mistake_flips_the_rows_that_declare_it():
    """The relaxed start sign-flipped in theory/rules.py: FedInit's two Delta_inf rows turn violated, and the same
    design without it holds."""
    f = MODS["fedinit"]
    ctl = {c.id: c for c in f.DESIGNS["delta_inf"](0)}
    with mistakes.applied(mistakes.LIBRARY["ri-sign"]):
        bad = {c.id: c for c in f.DESIGNS["delta_inf"](0)}
    for rid in ("M1-delta-inf", "M1-divergence-beta"):
        assert "ri-sign" in f.POWER[rid][1]
        assert ctl[rid].verdict == HOLDS and bad[rid].verdict == VIOLATED, (rid, bad[rid].measured)
    res = power.measure(f, 0, rows={"M1-delta-inf"})
    assert res["M1-delta-inf"]["ri-sign"] == power.CAUGHT


def test_one_mistake_flips_a_fedlesam_row():
    f = MODS["fedlesam"]
    res = power.measure(f, 0, rows={"eq3-estimator-early"})["eq3-estimator-early"]
    assert res["lesam-sign"] == power.CAUGHT and res["step-x2"] == power.MISSED


def test_only_a_finite_violation_on_a_non_violated_control_is_power():
    ok, bad = row(value=0.5), row(verdict=VIOLATED, value=2.0)
    assert power.outcome(ok, bad) == power.CAUGHT
    assert power.outcome(row(verdict=VIOLATED, value=2.0), bad) == power.INHERITED
    assert power.outcome(ok, row(verdict=VIOLATED, value=1e40)) == power.DIVERGED
    assert power.outcome(ok, row(verdict=VIOLATED, value=math.inf)) == power.DIVERGED
    assert power.outcome(ok, row(value=0.9)) == power.MISSED


def test_a_finding_that_catches_nothing_is_refused():
    with pytest.raises(ValueError, match="must catch"):
        row(mistakes=["step-x2"], caught=[])
    c = row(mistakes=["step-x2"], caught=["step-x2"])
    c.caught = []                                                      # changed after construction
    with pytest.raises(ValueError, match="must catch"):
        write_report([c], "/nonexistent/never-written")


def test_label_keeps_only_rows_that_catch_a_mistake():
    c = power.label(row(slack=12.0), {"step-x2": power.CAUGHT, "ri-sign": power.INHERITED})
    assert c.kind == FINDING and c.caught == ["step-x2"]
    c = power.label(row(slack=12.0), {"step-x2": power.DIVERGED, "ri-sign": power.MISSED})
    assert c.kind == LOOSE and c.label == "loose by x12 at this scale" and c.caught == []
    c = power.label(row(verdict=VIOLATED), {"step-x2": power.INHERITED})
    assert c.kind == VACUOUS
    c = power.label(row(kind=VACUOUS), {"step-x2": power.CAUGHT})      # a check's own label follows its power
    assert c.kind == FINDING
    assert power.label(row(), None).kind == VACUOUS                     # nothing declared: nothing caught
    c = power.label(row(verdict=VIOLATED, slack=0.5), {"agg-1.05": power.MISSED}, control_slack=7.0)
    assert c.kind == LOOSE and c.label == "loose by x7 at this scale"    # the slack where the control holds
    assert power.label(row(kind="sanity check"), None).kind == "sanity check"


def test_loose_and_vacuous_rows_are_counted_apart():
    rows = [row(), row(kind=VACUOUS), row(kind=LOOSE, slack=3.0)]
    s = counts(rows)
    assert "1 findings: 1 holds" in s and "1 rows vacuous at this scale" in s and "1 rows loose at this scale" in s


@pytest.mark.parametrize("paper", PAPERS)
def test_declarations_resolve(paper):
    mod = MODS[paper]
    table = power.mistake_table(mod)
    for rid, (design, names) in power.declared(mod).items():
        assert design in mod.DESIGNS, (rid, design)
        assert names and len(set(names)) == len(names)
        mistakes.resolve(names, table)


def test_lemma_a1_without_power_is_vacuous():
    from fedlab_analysis.theory import fedals
    c = fedals.check_lemma_a1(R=1000)
    assert c.kind == VACUOUS and "not caught" in c.measured       # 1/(K-1) is within Monte-Carlo error here


@pytest.mark.slow
@pytest.mark.parametrize("paper", PAPERS)
def test_committed_power_table_is_reproduced(paper):
    """Every row's measured catches in the committed full report are what the code measures now."""
    rows = {r["id"]: r for r in json.loads(REPORT.read_text()) if r["paper"] == paper and r.get("power")}
    got = power.measure(MODS[paper], 0, rows=set(rows))
    assert {k: v for k, v in got.items()} == {k: r["power"] for k, r in rows.items()}
    for r in rows.values():
        assert (r["kind"] == FINDING) == bool(r["caught"])
