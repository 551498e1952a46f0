"""The probe command line as a user meets it: every flag acts or is refused in one line (exit 2, nothing
written), figures are written when asked, the sample count stands beside every number, --help reads cleanly."""
import json

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from fedlab_analysis import probe
from fedlab_analysis.probes import PROBES


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from fedlab_analysis.config import RunConfig
    from fedlab_analysis.trainers.loop import train
    out = tmp_path_factory.mktemp("logreg_run")
    train(RunConfig(algo="fedavg", dataset="digits", model="logreg", clients=4, active_ratio=1.0, rounds=2,
                    local_steps=2, batch_size=16, lr=0.1, seed=0, quiet=True, keep_clients=True, ckpt_every=1,
                    eval_train_samples=64), out)
    return out


REFUSED = [
    ("hessian", ["--products", "5"], "--products"),
    ("hessian", ["--by", "param"], "--by"),
    ("hessian", ["--minibatch", "10", "--batch-size", "5"], "--batch-size"),
    ("hessian", ["--keep-graph", "on", "--hvp", "func"], "--keep-graph"),
    ("hessian", ["--backend", "pyhessian", "--which", "SA"], "--which"),
    ("hessian", ["--per-layer", "--layer", "fc.*"], "--layer"),
    ("trace", ["--tol", "1e-4"], "--tol"),
    ("density", ["--backend", "curvlinops", "--sigma", "0.1"], "--sigma"),
    ("landscape", ["--vmax", "3"], "--vmax"),
    ("landscape", ["--log"], "--log"),
    ("landscape", ["--extend", "0.5"], "--extend"),
    ("landscape", ["--plane", "hessian", "--norm", "layer"], "--norm"),
    ("landscape", ["--plane", "pca", "--orthogonalize"], "--orthogonalize"),
    ("landscape", ["--clients-pair", "0,1"], "--clients-pair"),
    ("landscape", ["--other", "OTHER", "--range", "-1:1"], "--range"),
    ("landscape", ["--batch-size", "0"], "--batch-size"),
    ("sharpness", ["--method", "one_step", "--steps", "3"], "--steps"),
    ("sharpness", ["--weights", "size"], "--weights"),
    ("stability", ["--rounds", "0", "--pairs", "2"], "--pairs"),
    ("stability", ["--samples", "10"], "--samples"),
    ("consensus", ["--samples", "10"], "--samples"),
    ("consensus", ["--data", "test"], "--data"),
    ("margin", ["--margin", "1", "--quantile", "0.2"], "--quantile"),
    ("margin", ["--rho", "0.1"], "--rho"),
    ("hessian", ["--bn-mode", "train"], "--bn-mode"),             # logreg: no BatchNorm
    ("hessian", ["--bn-mode", "eval", "--bn-batch", "4"], "--bn-batch"),
    ("hessian", ["--device", "cuda:7"] if not torch.cuda.is_available() else ["--device", "tpu"], "--device"),
    ("hessian", ["--threads", "0"], "--threads"),
    ("hessian", ["--plot", "PLOT"], "--plot"),                     # consensus-only check below; hessian draws
]


@pytest.mark.parametrize("name, flags, needle", [r for r in REFUSED if r[1] != ["--plot", "PLOT"]])
def test_a_flag_that_cannot_act_is_refused_in_one_line(run_dir, tmp_path, capsys, name, flags, needle):
    flags = [str(run_dir / "ckpt" / "round_0001.pt") if f == "OTHER" else f for f in flags]
    out, fig = tmp_path / "r.json", tmp_path / "r.png"
    argv = ([name, str(run_dir), "--samples", "40", *flags, "--json", str(out)]
            if "--samples" not in flags and name not in ("consensus", "stability") else
            [name, str(run_dir), *flags, "--json", str(out)])
    try:
        code = probe.main(argv)
    except SystemExit as e:                          # refused by the parser itself (a declared range)
        code = e.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("error:") and needle in err, err
    assert not out.exists() and not fig.exists()


def test_trace_plot_writes_a_figure(run_dir, tmp_path):
    png = tmp_path / "trace.png"
    assert probe.main(["trace", str(run_dir), "--samples", "40", "--products", "12", "--quiet", "--plot",
                       str(png)]) == 0
    assert png.stat().st_size > 10_000


def test_per_layer_honours_which_and_method(run_dir, tmp_path, capsys):
    """--per-layer --which SA finds the bottom of the (single) block's spectrum, not its top; --method acts."""
    from fedlab_analysis import checkpoint
    from fedlab_analysis.probes.common import rebuild
    out = tmp_path / "h.json"
    assert probe.main(["hessian", str(run_dir), "--samples", "40", "--dtype", "float64", "--per-layer",
                       "--which", "SA", "--max-iter", "60", "--quiet", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    b = rebuild(checkpoint.load(run_dir), samples=40, dtype=torch.float64)
    H = torch.func.hessian(lambda t: torch.nn.functional.cross_entropy(b.f(t, b.X), b.y))(b.theta)
    (row,) = r["layers"].values()
    assert row["which"] == "SA" and row["method"] == "lanczos" and "top_eigenvalue" not in row
    ev = np.linalg.eigvalsh(H.numpy())
    assert ev[0] - 1e-9 <= row["eigenvalue"] <= ev[0] + 1e-3 * ev[-1]     # a Ritz value bounds it from above
    assert r["summary"]["n_samples"] == 40
    assert probe.main(["hessian", str(run_dir), "--samples", "40", "--per-layer", "--method", "power",
                       "--max-iter", "3", "--quiet", "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())["layers"].values()
    assert row["method"] == "power" and row["n_products"] >= 3


def test_summary_json_and_figure_title_name_the_sample_count(run_dir, tmp_path, capsys):
    png, out = tmp_path / "e.png", tmp_path / "e.json"
    assert probe.main(["hessian", str(run_dir), "--samples", "40", "--quiet", "--json", str(out), "--plot",
                       str(png)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    r = json.loads(out.read_text())
    assert summary["n_samples"] == r["n_samples"] == r["data_used"]["n"] == 40 and summary["data"] == "train"
    assert r["bn_mode"] == "n/a (no BatchNorm)"


def test_hessian_plane_honours_batch_size(run_dir, tmp_path):
    eig = []
    for bs in ("7", "1000"):
        out = tmp_path / f"l{bs}.json"
        assert probe.main(["landscape", str(run_dir), "--samples", "40", "--dtype", "float64", "--plane", "hessian",
                           "--grid", "3", "--batch-size", bs, "--quiet", "--json", str(out)]) == 0
        eig.append(json.loads(out.read_text())["eigenvalues"])
    assert np.allclose(eig[0], eig[1], rtol=1e-3)


def test_per_layer_density_panels_state_their_own_width():
    from fedlab_analysis.probes.curvature import plot_density
    grid = np.linspace(-1, 3, 50).tolist()
    rows = {name: {"grid": grid, "density": np.exp(-np.square(grid)).tolist(), "sigma": s, "n_steps": 5,
                   "n_vectors": 1} for name, s in (("conv", 0.013), ("fc", 0.47))}
    fig = plot_density(rows)
    titles = [a.get_title() for a in fig.axes if a.get_visible()]
    assert titles == ["conv (sigma = 0.013)", "fc (sigma = 0.47)"]
    plt.close(fig)


def test_help_prints_each_default_once():
    from fedlab_analysis import train
    p = probe.parser()
    texts = [train.parser().format_help()] + [a.choices[n].format_help() for a in p._subparsers._group_actions
                                              for n in a.choices]
    for text in texts:
        flat = " ".join(text.split())
        assert "(default: None)" not in flat
        for chunk in flat.split(" --"):
            assert chunk.count("(default:") <= 1, chunk
    assert "cost:" in p._subparsers._group_actions[0].choices["stability"].format_help()


REFUSED_NEW = [("sharpness", ["--starts", "3"], "--starts"), ("sharpness", ["--eta", "0.1"], "--eta"),
               ("hessian", ["--per-layer", "--normalised", "on"], "--normalised"),
               ("hessian", ["--which", "SA", "--eta", "0.1"], "--eta"),
               ("landscape", ["--directions", "x.pt", "--plane", "hessian"], "--directions"),
               ("landscape", ["--other", "x.pt", "--h5", "s.h5", "--save-directions", "d.pt"], "--save-directions")]


@pytest.mark.parametrize("name, flags, needle", REFUSED_NEW)
def test_new_flags_that_cannot_act_are_refused(run_dir, tmp_path, capsys, name, flags, needle):
    js = tmp_path / "r.json"
    assert probe.main([name, str(run_dir), "--samples", "20", "--json", str(js), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err and needle in err and not js.exists()


def test_probe_help_has_one_line_per_probe_and_each_subcommand_a_paragraph(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    text = probe.parser().format_help()
    lines = text.splitlines()
    for name, spec in PROBES.items():
        row = [line for line in lines if line.startswith("    ") and line.split()[:1] == [name]]
        assert len(row) == 1 and spec.HELP in row[0], name        # name and its line, side by side
        assert f"{name} probe" not in text
    sub = probe.parser()._subparsers._group_actions[0].choices
    for name, spec in PROBES.items():
        flat = " ".join(sub[name].format_help().split())
        assert " ".join(spec.DESCRIBE.split()) in flat and "cost:" in flat, name
        assert len(spec.DESCRIBE) > 150                              # a paragraph, not a label


def test_a_folder_of_runs_is_named_as_such(run_dir, tmp_path, capsys):
    import shutil
    (tmp_path / "runs").mkdir()
    shutil.copytree(run_dir, tmp_path / "runs" / "a")
    shutil.copytree(run_dir, tmp_path / "runs" / "b")
    assert probe.main(["hessian", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "is a folder of runs; name one of:" in err and "runs/a" in err and "runs/b" in err
    assert "truncated" not in err


def test_every_stochastic_estimate_is_printed_with_its_standard_error_and_count(run_dir, tmp_path, capsys):
    runs = {"trace": ["--products", "12"], "density": ["--steps", "6", "--vectors", "3"],
            "sharpness": ["--start", "random", "--starts", "3", "--steps", "2"],
            "stability": ["--rounds", "1", "--pairs", "2", "--pool", "30"]}
    want = {"trace": ("stderr", "n_probes"), "density": ("trace_stderr", "n_vectors"),
            "sharpness": ("sharpness_starts_stderr", "n_starts"), "stability": ("delta_T_stderr", "pairs")}
    for name, flags in runs.items():
        samples = [] if name == "stability" else ["--samples", "40"]
        assert probe.main([name, str(run_dir), *samples, "--quiet", *flags]) == 0
        s = json.loads(capsys.readouterr().out)
        se, n = want[name]
        assert isinstance(s[se], float) and s[se] >= 0 and s[n] >= 2, (name, s)
    assert probe.main(["density", str(run_dir), "--samples", "40", "--steps", "6", "--vectors", "1", "--quiet"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert "trace_stderr" not in s and not isinstance(s["trace"], float)      # no error bar, no number
