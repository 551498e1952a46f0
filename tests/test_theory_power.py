"""Power of the claim table: every declared perturbation is caught (its row comes out "violated"), the
verdict helpers are two-sided, and a row without power is labelled vacuous (theory/power.py)."""
import importlib
import math

import pytest

from fedlab_analysis.theory import power
from fedlab_analysis.theory.claims import HOLDS, VACUOUS, VIOLATED, Claim, bound, counts

PAPERS = ("fedsmoo", "fedlesam", "fedcm", "fedals", "fedinit")
DECLARED = [(p, rid) for p in PAPERS for rid in power.declared(importlib.import_module(f"fedlab_analysis.theory.{p}"))]


def test_bound_is_two_sided_and_divergence_is_a_violation():
    assert bound(0.5, 1.0) == HOLDS and bound(2.0, 1.0) == VIOLATED
    assert bound(math.inf, 1.0) == VIOLATED and bound(math.nan, 1.0) == VIOLATED


def test_every_paper_declares_perturbations():
    assert {p for p, _ in DECLARED} == set(PAPERS)


@pytest.mark.parametrize("paper,row", DECLARED)
def test_perturbation_is_caught(paper, row):
    """A finding catches its perturbation; a row labelled vacuous at this scale does not (that is its label)."""
    mod = importlib.import_module(f"fedlab_analysis.theory.{paper}")
    r = power.perturbed_row(mod, row, seed=0)
    assert (r.verdict == VIOLATED) == (r.kind != VACUOUS), (r.kind, r.verdict, r.measured)


def test_annotate_marks_findings_without_a_perturbation():
    class Mod:
        PERTURBATIONS = {"a": ("sign flip", lambda seed: [Claim("x", "a", "", "", "", "", VIOLATED)])}
    rows = [Claim("x", "a", "", "", "", "", HOLDS), Claim("x", "b", "", "", "", "", HOLDS)]
    power.annotate(rows, Mod)
    assert rows[0].perturbation == "sign flip" and rows[0].caught is True
    assert rows[1].perturbation == "none declared yet" and rows[1].caught is None


def test_vacuous_rows_are_counted_apart():
    rows = [Claim("x", "a", "", "", "", "", HOLDS), Claim("x", "b", "", "", "", "", HOLDS, kind=VACUOUS)]
    assert "1 findings: 1 holds" in counts(rows) and "1 rows vacuous at this scale: 1 holds" in counts(rows)


def test_lemma_a1_without_power_is_vacuous():
    from fedlab_analysis.theory import fedals
    c = fedals.check_lemma_a1(R=1000)
    assert c.kind == VACUOUS and "not caught" in c.measured       # 1/(K-1) is within Monte-Carlo error here
