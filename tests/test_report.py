"""report (mean ± std tables in the papers' layout, learning curves with seed bands) and compare."""
import json

import pytest

from fedlab_analysis import compare, report, sweep

TINY = dict(dataset="digits", model="logreg", clients=4, active_ratio=0.5, rounds=3, local_steps=2, batch_size=16,
            eval_train_samples=200)


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "sweep"
    df = sweep.run({"base": TINY, "grid": {"algo": ["fedavg", "fedprox"], "seed": [0, 1, 2]}}, out=out, workers=1,
                   quiet=True)
    assert (df["status"] == "done").all()
    return out


def test_table_layout_and_notebook_api(done):
    t = report.table(done, rows="algo")
    assert list(t.index) == ["fedavg", "fedprox"] and t.shape == (2, 1)
    assert all(" ± " in x for x in t.iloc[:, 0])
    s = report.summary(done, metric="test_loss", last_k=3)
    best = s[s["quantity"] == "test_loss (best of last 3)"]
    final = s[s["quantity"] == "test_loss"]
    assert (best["n"] == 3).all() and (best["mean"].values <= final["mean"].values + 1e-12).all()   # a minimum


@pytest.mark.parametrize("fmt,ext", [("md", ".md"), ("csv", ".csv"), ("latex", ".tex")])
def test_report_cli_writes_table_and_curves(done, fmt, ext, capsys):
    assert report.main([str(done), "--format", fmt, "--no-plot" if fmt != "md" else "--last-k=2"]) == 0
    text = (done / f"report{ext}").read_text()
    assert {"md": "| algo |", "csv": "mean,std,n", "latex": r"$\pm$"}[fmt] in text
    assert "test_acc" in capsys.readouterr().out
    if fmt == "md":
        assert (done / "curves_test_acc.png").stat().st_size > 10_000


@pytest.mark.parametrize("argv,needle", [(["--rows", "lr"], "--rows"), (["--metric", "acc"], "--metric"),
                                         (["--last-k", "0"], "--last-k")])
def test_report_bad_input(done, argv, needle, capsys, tmp_path):
    out = tmp_path / "r.md"
    assert report.main([str(done), *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and needle in err and len(err.splitlines()) == 1 and not out.exists()
    assert report.main([str(tmp_path / "nope")]) == 2


def test_compare_runs(done, tmp_path, capsys):
    runs = json.loads((done / "sweep.json").read_text())["runs"]
    a, b = runs[0]["path"], runs[-1]["path"]
    assert compare.main([a, b, "--plot", str(tmp_path / "c.png")]) == 0
    out = capsys.readouterr().out
    assert "differ in: algo, seed" in out and (tmp_path / "c.png").exists()
    final = [json.loads(x) for x in open(f"{a}/metrics.jsonl")][-1]["test_acc"]
    assert f"{final:.4f}" in out
    assert compare.main([str(done)]) == 0 and "6 runs" in capsys.readouterr().out
    assert compare.main([str(tmp_path / "nope")]) == 2


def test_tensorboard_mirrors_metrics_jsonl(tiny_cfg, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from fedlab_analysis.plots import read_metrics
    from fedlab_analysis.trainers.loop import train
    train(tiny_cfg(tensorboard=True), tmp_path)
    ev = EventAccumulator(str(tmp_path / "tb"))
    ev.Reload()
    rows = read_metrics(tmp_path)
    for key in ("test_acc", "train_loss"):
        events = ev.Scalars(key)
        assert [e.step for e in events] == [r["round"] for r in rows] == [1, 2, 3]
        assert [e.value for e in events] == pytest.approx([r[key] for r in rows], rel=1e-6)   # float32 in events
