"""A committed QUICK figure is what its script produces: regenerate one figure's JSON from a clean output folder
and compare it with the committed paper_figures/out/<name>/data.json (FedALS Table 2's communication column:
deterministic and a second to compute, so it fits the default suite)."""
import importlib
import json
import math
import re
from pathlib import Path

import pytest

from paper_figures import fedals_table2_comm
from paper_figures import verdict as V

ROOT = Path(__file__).resolve().parents[1]


def _same(a, b, path="") -> None:
    assert type(a) is type(b) or {type(a), type(b)} <= {int, float}, (path, a, b)
    if isinstance(a, dict):
        assert a.keys() == b.keys(), (path, sorted(a), sorted(b))
        for k in a:
            _same(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{path}[{i}]")
    elif isinstance(a, float):
        assert math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15), (path, a, b)
    else:
        assert a == b, (path, a, b)


def test_regenerated_json_equals_committed(tmp_path):
    name = fedals_table2_comm.NAME
    committed = json.loads((ROOT / "paper_figures" / "out" / name / "data.json").read_text())
    fedals_table2_comm.main(["--out", str(tmp_path), "--quiet"])
    fresh = json.loads((tmp_path / name / "data.json").read_text())
    _same(fresh, committed)
    assert fresh["summary"] == "1 reproduced of 1 comparison" and (tmp_path / name / "fig.png").stat().st_size > 10_000


def test_comparison_can_fail():
    with pytest.raises(AssertionError):
        _same({"x": [1.0, 2.0]}, {"x": [1.0, 2.0 + 1e-9]})


def test_matched_fit_row_uses_the_ladder_and_says_so_without_one(monkeypatch):
    """paper_figures/flatness.matched_row: at the common rung it compares the probe seed by seed; with no common
    rung (runs that never reached one, or without checkpoints on the ladder) it is "not measured", never a number."""
    from paper_figures import common as C
    from paper_figures import flatness as FL
    runs_a = [{"seed": s, "converged": True, "diverged": None, "matched": {"0.3": {}}} for s in range(3)]
    runs_b = [{"seed": s, "converged": True, "diverged": None, "matched": {}} for s in range(3)]
    r = FL.matched_row("fedsmoo.t2.lam1", "x", runs_a, runs_b, probe=lambda p: pytest.fail("probed"))
    assert r["verdict"] == "not measured" and "matched fit" in r["measured"]
    paths = {"a0": 4.0, "a1": 4.2, "a2": 3.9, "b0": 1.0, "b1": 1.1, "b2": 0.9}
    monkeypatch.setattr(C, "matched_checkpoints", lambda runs: {"rung": 0.1, "paths": list(paths),
                                                               "rounds": [5] * 6}, raising=False)
    r = FL.matched_row("fedsmoo.t2.lam1", "x", runs_a, runs_b, probe=paths.get)
    assert r["verdict"] == "reproduced" and r["rung"] == 0.1 and r["effect"] == pytest.approx([0.75, 0.738, 0.769],
                                                                                             abs=1e-3)
    monkeypatch.setattr(C, "matched_checkpoints", lambda runs: {"rung": None, "paths": [], "rounds": []},
                        raising=False)
    assert FL.matched_row("fedsmoo.t2.lam1", "x", runs_a, runs_b)["verdict"] == "not measured"
    runs_b[1]["converged"] = False
    monkeypatch.setattr(C, "matched_checkpoints", lambda runs: {"rung": 0.1, "paths": list(paths),
                                                               "rounds": [5] * 6}, raising=False)
    assert FL.matched_row("fedsmoo.t2.lam1", "x", runs_a, runs_b, probe=paths.get)["verdict"] == "not converged"


def test_every_committed_row_names_a_quoted_claim_and_states_its_seeds():
    from paper_figures.claims import CLAIMS
    for f in sorted((ROOT / "paper_figures" / "out").glob("*/data.json")):
        d = json.loads(f.read_text())
        assert d["n_comparisons"] == len(d["table"]) and d["summary"].endswith(
            f"of {len(d['table'])} comparison{'s' if len(d['table']) != 1 else ''}"), f
        doc = importlib.import_module(f"paper_figures.{f.parent.name}").__doc__
        said = re.search(r"[Cc]omparisons: (.*?)\.(?:\s|$)", " ".join(doc.split()))     # "... = 14." or "6."
        assert said and int(re.findall(r"\d+", said[1])[-1]) == d["n_comparisons"], (f, said)
        for t in d["table"]:
            assert t["claim"] in CLAIMS and CLAIMS[t["claim"]].quote in t["paper"], (f, t["row"])
            assert "n_seeds" in t and t["verdict"] in V.OUTCOMES, (f, t["row"])
