"""What the probe command line says is true (issue 36's defects): random starts carry their mean +- standard error and
count in the comparison table and figure, --adaptive honours --starts, a defaulted --method is recorded as a
default, --dtype / --method have help, consensus refuses --dtype, a --directions file that is not a plane is one
full line, a clients plane reused with --directions keeps its window and markers, drift's and margin's numbers are
explained where printed, a 1-D --h5 is in Li et al.'s layout (their plot_1D.py key names)."""
import json

import pytest
import torch

from fedlab_analysis import probe
from fedlab_analysis.probes import landscape as L


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from fedlab_analysis.config import RunConfig
    from fedlab_analysis.trainers.loop import train
    out = tmp_path_factory.mktemp("run36")
    train(RunConfig(algo="fedlesam", dataset="digits", model="mlp", model_kwargs={"widths": [8]}, clients=4,
                    active_ratio=0.5, rounds=3, local_steps=2, batch_size=16, lr=0.1, seed=0, quiet=True,
                    keep_clients=True, ckpt_every=1, eval_train_samples=64), out)
    return out


def _run(argv, capsys, tmp_path, name="r.json"):
    out = tmp_path / name
    code = probe.main([*argv, "--quiet", "--json", str(out)])
    cap = capsys.readouterr()
    return code, (json.loads(out.read_text()) if code == 0 else None), cap


def test_random_starts_print_mean_stderr_and_count_and_adaptive_honours_starts(run_dir, tmp_path, capsys):
    import matplotlib.image
    a, b = str(run_dir / "ckpt" / "round_0002.pt"), str(run_dir / "ckpt" / "last.pt")
    png = tmp_path / "cmp.png"
    code, r, _ = _run(["sharpness", a, b, "--samples", "60", "--steps", "2", "--start", "random", "--starts", "3",
                       "--adaptive", "--plot", str(png)], capsys, tmp_path)
    assert code == 0
    for res in r["results"]:
        for part in (res["global"], res["adaptive"]):
            st = part["starts"]
            assert st["n"] == 3 and len(st["values"]) == 3 and part["sharpness"] == max(st["values"])
            assert st["stderr"] == pytest.approx(torch.tensor(st["values"]).double().std().item() / 3 ** 0.5)
    text = r["summary_text"]
    assert "mean +- s.e. (starts)" in text and text.count("(3)") == 4, text
    assert matplotlib.image.imread(png).shape[0] > 100


def test_a_defaulted_method_is_recorded_as_a_default(run_dir, tmp_path, capsys):
    _, r, _ = _run(["sharpness", str(run_dir), "--samples", "40", "--steps", "1"], capsys, tmp_path)
    assert r["settings"]["method"] == {"value": "ascent", "source": "default"}
    _, r, _ = _run(["sharpness", str(run_dir), "--samples", "40", "--method", "one_step"], capsys, tmp_path)
    assert r["settings"]["method"] == {"value": "one_step", "source": "--method"}


@pytest.mark.parametrize("name, flag", [("hessian", "--dtype"), ("hessian", "--method"), ("trace", "--method"),
                                        ("sharpness", "--step-size"), ("sharpness", "--adaptive"),
                                        ("hessian", "--eta")])
def test_the_flags_say_what_they_do_and_their_default(name, flag):
    sub = probe.parser()._subparsers._group_actions[0].choices[name]
    action = next(a for a in sub._actions if flag in a.option_strings)
    said = action.help or ""
    assert len(said) > 40 and ("default" in said or action.default is not None), (flag, said)
    if flag in ("--adaptive", "--eta"):
        assert "eta 0" in said or "0: exactly" in said, said
    if flag == "--adaptive":
        assert "T = 1" in said                        # ASAM's code normalises biases otherwise


def test_consensus_refuses_dtype_and_reads_a_float64_run_exactly(run_dir, tmp_path, capsys, tiny_cfg):
    code, _, cap = _run(["consensus", str(run_dir), "--dtype", "float64"], capsys, tmp_path)
    assert code == 2 and "--dtype cannot act with the consensus probe" in cap.err and "float64" in cap.err
    from fedlab_analysis import checkpoint
    from fedlab_analysis.probes.consensus import fedals_cd
    from fedlab_analysis.trainers.loop import train
    train(tiny_cfg(dtype="float64", keep_clients=True, rounds=2), tmp_path / "r64")
    _, r, _ = _run(["consensus", str(tmp_path / "r64")], capsys, tmp_path)
    table = checkpoint.load(tmp_path / "r64")["clients"]["models"]
    assert table.dtype == torch.float64
    assert r["forms"]["fedals_cd_all_clients"]["raw"] == fedals_cd(table)["raw"]     # not via float32


def test_a_directions_file_that_is_not_a_plane_is_one_full_line(run_dir, tmp_path, capsys):
    (tmp_path / "text.pt").write_bytes(b"not a torch file at all\n")
    torch.save({"format": L.DIRECTIONS, "d1": torch.ones(3), "d2": "x", "layers": [], "model": {}},
               tmp_path / "half.pt")
    torch.save({"w": torch.ones(3)}, tmp_path / "sd.pt")
    for f, needle in (("text.pt", "is truncated or not a torch file"), ("half.pt", "does not hold a plane"),
                      ("sd.pt", "not a directions file")):
        code, _, cap = _run(["landscape", str(run_dir), "--samples", "30", "--grid", "3", "--directions",
                             str(tmp_path / f)], capsys, tmp_path)
        err = cap.err.strip()
        assert code == 2 and len(err.splitlines()) == 1 and needle in err, err
        assert err.endswith(("file", "--save-directions", "--save-directions)")), err   # ours, not torch's cut


def test_a_clients_plane_reused_keeps_its_window_and_markers(run_dir, tmp_path, capsys):
    plane = tmp_path / "plane.pt"
    base = ["landscape", str(run_dir), "--samples", "30", "--grid", "5"]
    _, first, _ = _run([*base, "--plane", "clients", "--save-directions", str(plane)], capsys, tmp_path, "a.json")
    _, again, _ = _run([*base, "--directions", str(plane)], capsys, tmp_path, "b.json")
    assert again["a"] == first["a"] and again["b"] == first["b"]
    assert [(p["name"], p["a"], p["b"], p["loss"]) for p in again["points"]] == \
        [(p["name"], p["a"], p["b"], p["loss"]) for p in first["points"]]
    other = str(run_dir / "ckpt" / "round_0002.pt")
    _, moved, _ = _run(["landscape", other, "--samples", "30", "--grid", "5", "--directions", str(plane)],
                       capsys, tmp_path, "c.json")
    assert moved["a"] == first["a"] and all(p["name"].endswith("(saved)") for p in moved["points"])
    assert "offsets from its own centre" in moved["points_note"]


def test_drift_and_margin_explain_their_numbers_where_printed(run_dir, capsys):
    assert probe.main(["drift", str(run_dir), "--samples", "50", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "lesam_cos_sK: the same mean over the clients whose estimate is K rounds stale" in out, out
    assert probe.main(["margin", str(run_dir), "--samples", "50", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "bound_explicit: the same with the constants" in out and "vacuous" in out, out


def test_a_1d_h5_is_li_et_als_plot_1d_layout(run_dir, tmp_path, capsys):
    h5py = pytest.importorskip("h5py")
    h5 = tmp_path / "line.h5"
    code, r, _ = _run(["landscape", str(run_dir), "--samples", "40", "--grid", "5", "--other",
                       str(run_dir / "ckpt" / "round_0001.pt"), "--h5", str(h5)], capsys, tmp_path)
    assert code == 0 and r["h5"] == str(h5)
    with h5py.File(h5, "r") as f:                     # as tomgoldstein/loss-landscape's plot_1D.py reads it
        x = f["xcoordinates"][:]
        assert "train_loss" in f.keys()
        train_loss, train_acc = f["train_loss"][:], f["train_acc"][:]
        assert set(f) == {"xcoordinates", "train_loss", "train_acc"}
    assert x.shape == train_loss.shape == train_acc.shape == (len(r["t"]),)
    assert x.tolist() == r["t"] and train_loss.tolist() == r["loss"]
    assert train_acc.tolist() == pytest.approx([100 * a for a in r["acc"]], abs=1e-12)
    assert x[0] < 0 and 0.0 in x.tolist() and 1.0 in x.tolist()       # 0: CKPT, 1: --other, extended both ways


def test_a_client_equal_to_the_global_model_spans_no_plane(run_dir, tmp_path, capsys):
    """The sole client of a round ends equal to the global model: the default pair leaves it out, and asked for
    explicitly it is refused in one line (before: a plane 1e8 wide around a vector of norm 1e-8)."""
    from fedlab_analysis import checkpoint
    ck = checkpoint.load(run_dir)
    cl = ck["clients"]
    last = [i for _, i in sorted((-int(r), i) for i, r in zip(cl["ids"], cl["rounds"].tolist()))]
    w = torch.cat([ck["global"][n].reshape(-1) for n in [l["name"] for l in ck["layers"]]])
    cl["models"][cl["ids"].index(last[0])] = w + 1e-9          # the last trainer: the global model, up to round-off
    checkpoint.save({k: v for k, v in ck.items() if k not in ("format", "version")}, tmp_path / "c.pt")
    base = ["landscape", str(tmp_path / "c.pt"), "--samples", "30", "--grid", "3", "--plane", "clients"]
    code, r, _ = _run(base, capsys, tmp_path)
    assert code == 0 and last[0] not in r["clients"], r["clients"]
    code, _, cap = _run([*base, "--clients-pair", f"{last[0]},{last[1]}"], capsys, tmp_path)
    assert code == 2 and "equal within round-off" in cap.err, cap.err


def test_pyhessian_trace_stopping_on_a_negative_running_mean_is_said():
    """PyHessian 0.1's trace stops once its running mean is negative (it divides by the signed mean); the backend
    says so beside the number instead of passing off an early stop as converged."""
    pytest.importorskip("pyhessian")
    import fedlab_analysis as fl
    from torch import nn
    torch.manual_seed(1)
    m = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 3))
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(4)
    x, y = torch.randn(32, 4), torch.randint(0, 3, (32,))
    r = fl.trace(m, (x, y), products=20, backend="pyhessian", tol=1e-3)
    assert r["n_probes"] < 20 and "running mean is negative" in r["notes"][0]
    full = fl.trace(m, (x, y), products=20, backend="pyhessian", tol=float("-inf"))
    assert full["n_probes"] == 20 and "notes" not in full
