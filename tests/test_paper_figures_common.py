"""paper_figures/common.py: the one verdict rule, the overall rule, the command line's bad input, the claims table
and the cached multi-seed training (a second call reuses the run directories instead of training again; the run
cache itself is tested in test_paper_figures_tier.py)."""
import json
from pathlib import Path

import pytest

from paper_figures import common as C


def test_verdict_rule_is_mean_against_one_std():
    assert C.verdict(0.3, 0.1) == "reproduced"
    assert C.verdict(-0.3, 0.1) == "opposite"
    assert C.verdict(0.05, 0.1) == C.verdict(-0.05, 0.1) == "not reproduced at this scale"
    assert C.verdict(0.1, 0.1) == "not reproduced at this scale"          # the boundary is not "clear of noise"
    assert C.verdict(None) == C.verdict(float("nan")) == "not reproduced at this scale"
    assert C.verdict(-5.0, 0.0, paper_claim_holds=True) == "reproduced"   # an exact check decides by itself
    assert C.verdict(5.0, 0.0, paper_claim_holds=False) == "not reproduced at this scale"


def test_overall_and_mean_std():
    R, N, O = C.VERDICTS
    assert C.overall([R, R]) == R and C.overall([O, O, N]) == O and C.overall([R, O, O]) == N
    assert C.overall([N, N]) == N
    m, s = C.mean_std([1.0, 2.0, 3.0])
    assert m == 2.0 and s == 1.0                                            # sample std (ddof=1)
    assert C.mean_std([4.0]) == (4.0, 0.0)


@pytest.mark.parametrize("argv,flag", [(["--seeds", "0"], "--seeds"), (["--full"], "--data-dir"),
                                       (["--data-dir", "/nonexistent/cifar"], "--data-dir")])
def test_bad_input_is_one_error_line_and_exit_2(argv, flag, capsys):
    with pytest.raises(SystemExit) as e:
        C.parse_args("x", argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and err[0].startswith(f"error: {flag}"), err


def test_claims_table_escapes_pipes_and_keeps_paper_references_only():
    rows = [{"row": "||w||", "paper": "p", "measured": "m", "verdict": "reproduced"}]
    theory = [{"claim": "c", "where": "Thm 5.1, notes/seed_002 s5.5.3", "expected": "e", "measured": "m",
               "verdict": "violated"}]
    theory[0]["where"] = C._paper_only(theory[0]["where"])
    md = C.claims_table(rows, theory).splitlines()
    assert md[0].startswith("| claim | paper says | we measured | reproduced at this scale? |")
    assert "\\|\\|w\\|\\|" in md[2] and "**reproduced**" in md[2]
    assert "(Thm 5.1; convex toy)" in md[3] and "notes" not in md[3]
    assert "not reproduced at this scale (violated)" in md[3]
    assert C._paper_only("notes/seed_002 s6.2 (alpha)(i), s7.4").startswith("a consequence")


@pytest.fixture(autouse=True)
def _own_args(monkeypatch):
    monkeypatch.setattr(C, "_ARGS", dict(C._ARGS))          # parse_args's settings stay inside each test


def test_train_seeds_caches_by_config(tmp_path, monkeypatch):
    C.parse_args("x", ["--out", str(tmp_path)])
    assert C.out_dir("fig") == tmp_path / "fig"
    small = {"algo": "fedavg", "rounds": 2, "clients": 4, "eval_train_samples": 100}
    a = C.train_seeds(small, [0, 1], tmp_path / "runs")
    assert [r["seed"] for r in a] == [0, 1] and all(0 <= r["test_acc"] <= 1 for r in a)
    assert a[0]["run_dir"] != a[1]["run_dir"]
    import fedlab_analysis.trainers.loop as loop
    monkeypatch.setattr(loop, "train", lambda *a, **k: pytest.fail("a cached run was trained again"))
    b = C.train_seeds(small, [0, 1], tmp_path / "runs")
    assert [r["rows"] for r in b] == [r["rows"] for r in a]
    cfg = json.loads((Path(a[0]["run_dir"]) / "config.json").read_text())
    assert Path(a[0]["run_dir"]).parent.parent == tmp_path / "runs"
    assert cfg["seed"] == 0 and cfg["dataset"] == C.QUICK_BASE["dataset"] and cfg["rounds"] == 2
