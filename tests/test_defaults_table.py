"""The handbook's table of default hyper-parameters (docs/training.md) states exactly what RunConfig fills in for
each algorithm."""
import re
from pathlib import Path

import pytest

from fedlab_analysis.config import RunConfig
from fedlab_analysis.trainers import ALGORITHMS

PAGE = Path(__file__).parents[1] / "docs" / "training.md"


def table_rows():
    text = PAGE.read_text().split("## Default hyper-parameters", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and "=" in cells[1]:
            algos = list(ALGORITHMS) if cells[0] == "every one" else re.findall(r"[a-z][a-z-]+", cells[0].split("(")[0])
            rows.append((algos, dict(re.findall(r"`(\w+)=([^`]+)`", cells[1]))))
    return rows


def test_every_algorithm_has_a_row():
    named = {a for algos, _ in table_rows() for a in algos if len(algos) < len(ALGORITHMS)}
    assert named == set(ALGORITHMS)


@pytest.mark.parametrize("algos, values", table_rows())
def test_table_matches_the_config(algos, values):
    own = {(a, n) for al, v in table_rows() if len(al) < len(ALGORITHMS) for a in al for n in v}
    for algo in algos:
        cfg = RunConfig(algo=algo)
        for name, text in values.items():
            if len(algos) == len(ALGORITHMS) and (algo, name) in own:
                continue                                   # an "every one" value the algorithm's own row overrides
            got = cfg.hp(name)
            assert str(got) == text or (not isinstance(got, str) and float(got) == float(text)), (algo, name, got)
