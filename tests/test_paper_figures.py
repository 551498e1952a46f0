"""A committed QUICK figure is what its script produces: regenerate one figure's JSON from a clean output folder
and compare it with the committed paper_figures/out/<name>/data.json (FedALS Table 2's communication column:
deterministic and a second to compute, so it fits the default suite)."""
import json
import math
from pathlib import Path

import pytest

from paper_figures import fedals_table2_comm

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
    assert fresh["verdict"] == "reproduced" and (tmp_path / name / "fig.png").stat().st_size > 10_000


def test_comparison_can_fail():
    with pytest.raises(AssertionError):
        _same({"x": [1.0, 2.0]}, {"x": [1.0, 2.0 + 1e-9]})
