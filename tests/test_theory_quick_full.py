"""Quick agrees with full: every row unanimous over seeds 0-4 in the committed full report keeps its verdict
when the same designs run with fewer replicates (``--quick``) on seeds 0-4; a row whose quick design differs says
so in its measured text (FedCM's T and participation grids) and is left out."""
from pathlib import Path

import pytest

from fedlab_analysis.theory.__main__ import PAPERS, load
from fedlab_analysis.theory.claims import NOT_CHECKED, over_seeds, read_report

REPORT = Path(__file__).resolve().parents[1] / "paper_figures" / "out" / "theory" / "report.json"


# Rows unanimous in the full run that quick (fewer replicates) still turns "mixed" over seeds 0-4: none since quick
# runs the full designs with fewer replicates (issue 24); a paper named here is a strict xfail.
KNOWN: dict = {}
# Rows whose measurement is a CPU timing (FedInit's RI overhead on the trainer): a verdict on speed is not this test's
# to assert (speed lives in benchmarks/), and on a shared machine it would make the test depend on the load.
TIMED = {"ri-overhead-trainer"}


@pytest.mark.slow
@pytest.mark.parametrize("paper", [pytest.param(p, marks=pytest.mark.xfail(
    strict=True, reason=f"quick turns {KNOWN[p]} mixed")) if p in KNOWN else p for p in PAPERS])
def test_quick_keeps_the_full_runs_unanimous_verdicts(paper):
    full = {c.id: c for c in read_report(REPORT) if c.paper == paper}
    quick = {c.id: c for c in over_seeds(load(paper).run, [0, 1, 2, 3, 4], quick=True)}
    other = {i for i, c in quick.items() if "quick_design" in c.details}      # rows that say they differ in design
    assert all("[quick: another design" in quick[i].measured for i in other)
    differ = [(i, c.outcome, quick[i].outcome) for i, c in full.items()
              if i in quick and i not in TIMED | other and c.verdict != NOT_CHECKED and len(c.tally) == 1
              and quick[i].verdict != c.verdict]
    assert not differ, differ
