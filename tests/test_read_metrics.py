"""One reader of metrics.jsonl (rundir.read_metrics), reached from plots, report and compare alike."""
import json

import pytest

from fedlab_analysis import compare, plots, report, rundir
from fedlab_analysis.errors import UserError


def _write(d, text):
    (d / "metrics.jsonl").write_text(text, encoding="utf-8")


def test_one_reader():
    assert plots.read_metrics is report.read_metrics is compare.read_metrics is rundir.read_metrics


def test_directory_or_file_torn_last_line_and_missing_file(tmp_path):
    rows = [{"round": 1, "test_acc": 0.5}, {"round": 2, "test_acc": 0.75}]
    _write(tmp_path, "".join(json.dumps(r) + "\n" for r in rows) + '{"round": 3, "te')    # killed mid-write
    assert rundir.read_metrics(tmp_path) == rundir.read_metrics(tmp_path / "metrics.jsonl") == rows
    assert rundir.read_metrics(tmp_path / "nothing") == []
    assert rundir.read_metrics(tmp_path / "nothing" / "metrics.jsonl") == []


@pytest.mark.parametrize("bad", ['{"round": 1}\nnot json\n', '{"round": 1}\n[1, 2]\n', '{"round": true}\n'])
def test_damage_is_one_line_naming_file_and_line(tmp_path, bad):
    _write(tmp_path, bad)
    with pytest.raises(UserError, match=r"metrics\.jsonl: line \d"):
        rundir.read_metrics(tmp_path)
