"""paper_figures/common.py: verdict rows and counts (the rule itself: tests/test_verdict.py), the command line's bad
input, the claims table and the cached multi-seed training (a second call reuses the run directories instead of
training again; the run cache itself is tested in test_paper_figures_tier.py)."""
import json
from pathlib import Path

import pytest

from paper_figures import common as C
from paper_figures import tiers as T_


def test_mean_std():
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


def test_rows_carry_the_claim_and_the_table_its_words():
    from paper_figures import verdict as V
    r = C.row("fedinit.t6.scaffold", "||w|| SCAFFOLD +RI", "m", V.decide(C.CLAIMS["fedinit.t6.scaffold"], [0.02] * 3))
    assert r["claim"] == "fedinit.t6.scaffold" and "2% ~ 3%" in r["paper"] and r["verdict"] == "reproduced"
    theory = [{"claim": "c", "where": C._paper_only("Thm 5.1, notes/seed_002 s5.5.3"), "expected": "e",
               "measured": "m", "verdict": "violated"}]
    md = C.claims_table([r], theory).splitlines()
    assert md[0] == "| comparison | paper says (where) | we measured | verdict |"
    assert "\\|\\|w\\|\\|" in md[2] and "**reproduced**" in md[2]
    assert "(Thm 5.1; convex toy)" in md[3] and "notes" not in md[3] and "**violated**" in md[3]
    assert C._paper_only("notes/seed_002 s6.2 (alpha)(i), s7.4").startswith("a consequence")
    f = C.finish([r, {**r, "verdict": "opposite"}])
    assert f == {"n_comparisons": 2, "counts": {"reproduced": 1, "opposite": 1},
                 "summary": "1 reproduced, 1 opposite of 2 comparisons"}


@pytest.fixture(autouse=True)
def _own_args(monkeypatch):
    monkeypatch.setattr(T_, "_ARGS", dict(T_._ARGS))          # parse_args's settings stay inside each test


def test_train_seeds_caches_by_config(tmp_path, monkeypatch):
    C.parse_args("x", ["--out", str(tmp_path)])
    assert C.out_dir("fig") == tmp_path / "fig" and C.out_dir("fig", "mnist") == tmp_path / "mnist" / "fig"
    C.parse_args("x", ["--out", str(tmp_path), "--tier", "mnist"])
    assert C.out_dir("fig") == tmp_path / "mnist" / "fig" and C.out_dir("fig", "quick") == tmp_path / "fig"
    C.parse_args("x", ["--out", str(tmp_path)])
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
