"""Loss-landscape probe: directions, exact grid evaluation, federated planes, plots (float64, tiny models)."""
import copy

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from fedlab_analysis.errors import UserError
from fedlab_analysis.params import ParamSpace, functional
from fedlab_analysis.probes import landscape as L

D = torch.float64


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def mlp(seed=0, d=6, h=9, c=3):
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        m = nn.Sequential(nn.Linear(d, h), nn.Tanh(), nn.Linear(h, c)).to(D).eval()
    space = ParamSpace.of_model(m)
    return m, space, functional(m, space), space.flatten(dict(m.named_parameters())).detach().clone()


def cls_data(n=40, d=6, c=3, seed=1):
    g = gen(seed)
    return torch.randn(n, d, generator=g, dtype=D), torch.randint(0, c, (n,), generator=g)


def ce(f, theta, data):
    return F.cross_entropy(f(theta, data[0]), data[1]).item()


# ---- directions ----------------------------------------------------------------------------------------

def test_direction_is_zero_mean_gaussian():
    """loss-landscapes draws U[0, 1] (mean 1/2); ours is N(0, 1) before the per-filter rescale."""
    layer = nn.Linear(300, 200).to(D)
    space = ParamSpace.of_model(layer)
    theta = space.flatten(dict(layer.named_parameters())).detach()
    for norm in ("none", "filter"):
        d = space.of(L.random_direction(space, theta, gen(3), norm=norm), "weight").reshape(-1)
        se = d.std() / d.numel() ** 0.5
        assert d.mean().abs() < 4 * se, (norm, d.mean(), se)
    raw = L.random_direction(space, theta, gen(3), norm="none")
    assert abs(raw[space["weight"].slice].std().item() - 1) < 0.01


def test_filter_normalisation_is_exact_and_1d_tensors_are_zeroed():
    conv = nn.Sequential(nn.Conv2d(3, 5, 3), nn.BatchNorm2d(5), nn.Flatten(), nn.Linear(5 * 4, 4)).to(D)
    space = ParamSpace.of_model(conv)
    theta = space.flatten(dict(conv.named_parameters())).detach() + 0.3  # BN gamma=1, beta=0.3: non-trivial
    d = L.random_direction(space, theta, gen(0), norm="filter")
    for l in space.layers:
        dl, wl = space.of(d, l.name), space.of(theta, l.name)
        if len(l.shape) <= 1:
            assert torch.equal(dl, torch.zeros_like(dl)), l.name
        else:
            dn, wn = dl.reshape(l.shape[0], -1).norm(dim=1), wl.reshape(l.shape[0], -1).norm(dim=1)
            assert (dn - wn).abs().max() < 1e-12, l.name
    inc = L.random_direction(space, theta, gen(0), norm="filter", ignore_1d=False)
    for l in space.layers:  # included 1-D tensors copy w (Li et al.'s reference code, ignore='')
        if len(l.shape) <= 1:
            assert torch.equal(space.of(inc, l.name), space.of(theta, l.name))
        else:
            assert torch.equal(space.of(inc, l.name), space.of(d, l.name))
    lay = L.random_direction(space, theta, gen(0), norm="layer")
    for l in space.layers:
        if len(l.shape) > 1:
            assert abs(lay[l.slice].norm() - theta[l.slice].norm()) < 1e-12


def test_directions_are_seeded_and_dtype_independent():
    _, space, _, theta = mlp()
    a1, a2 = L.plane_random(space, theta, seed=5)
    b1, b2 = L.plane_random(space, theta, seed=5)
    c1, _ = L.plane_random(space, theta, seed=6)
    assert torch.equal(a1, b1) and torch.equal(a2, b2) and not torch.equal(a1, c1)
    assert not torch.allclose(a1, a2)
    f1, _ = L.plane_random(space, theta.float(), seed=5)
    assert f1.dtype == torch.float32 and torch.allclose(f1.double(), a1, rtol=1e-6, atol=1e-6)


def test_orthogonalised_second_direction():
    _, space, _, theta = mlp()
    d1, d2 = L.plane_random(space, theta, seed=2)
    o1, o2 = L.plane_random(space, theta, seed=2, orthogonalize=True)
    assert torch.equal(o1, d1)
    assert abs(o1 @ o2) < 1e-12 * o1.norm() * o2.norm()
    assert abs(o2.norm() - d2.norm()) < 1e-12


def test_bad_norm_is_a_user_error():
    _, space, _, theta = mlp()
    with pytest.raises(UserError, match="norm"):
        L.random_direction(space, theta, gen(), norm="unit")


# ---- grid evaluation -----------------------------------------------------------------------------------

@pytest.mark.parametrize("batch_points,chunk", [(1, 16384), (4, 16384), (7, 20)])
def test_centre_is_the_checkpoint_and_nothing_moves(batch_points, chunk):
    m, space, f, theta = mlp()
    data = cls_data()
    params = [p.detach().clone() for p in m.parameters()]
    t0 = theta.clone()
    d1, d2 = L.plane_random(space, theta, seed=0)
    c1, c2 = d1.clone(), d2.clone()
    r = L.surface(f, theta, d1, d2, data, grid=9, batch_points=batch_points, chunk=chunk)
    assert r["a"][4] == 0.0 and r["b"][4] == 0.0
    true = ce(f, theta, data)
    assert abs(r["loss"][4][4] - true) < 1e-12 and abs(r["center_loss"] - true) < 1e-12
    acc = (f(theta, data[0]).argmax(1) == data[1]).double().mean().item()
    assert r["acc"][4][4] == acc == r["center_acc"]
    assert all(torch.equal(p, q) for p, q in zip(params, m.parameters()))
    assert torch.equal(theta, t0) and torch.equal(d1, c1) and torch.equal(d2, c2)
    # an off-centre point, built independently ('ij' indexing: loss[i][j] is at a[i], b[j])
    a, b = r["a"][1], r["b"][6]
    assert abs(r["loss"][1][6] - ce(f, theta + a * d1 + b * d2, data)) < 1e-12


def test_batched_points_equal_one_by_one():
    _, space, f, theta = mlp()
    data = cls_data()
    d1, d2 = L.plane_random(space, theta, seed=1)
    r1 = L.surface(f, theta, d1, d2, data, grid=6, range_=(-2, 1), range_y=(-0.5, 0.5), batch_points=1)
    r8 = L.surface(f, theta, d1, d2, data, grid=6, range_=(-2, 1), range_y=(-0.5, 0.5), batch_points=8, chunk=24)
    assert np.abs(np.array(r1["loss"]) - np.array(r8["loss"])).max() < 1e-12
    assert r1["acc"] == r8["acc"]
    # no grid point at the centre (even grid, asymmetric range): the centre is still evaluated exactly
    assert abs(r1["center_loss"] - ce(f, theta, data)) < 1e-12


def test_quadratic_toy_matches_closed_form():
    """f(theta, X) = X theta, L = mean (X theta - y)^2, so L(theta0 + a d1 + b d2) = mean (r0 + a u + b v)^2."""
    g = gen(4)
    X, y = torch.randn(30, 5, generator=g, dtype=D), torch.randn(30, generator=g, dtype=D)
    lin = nn.Linear(5, 1, bias=False).to(D)
    space = ParamSpace.of_model(lin)
    f = lambda th, x: functional(lin, space)(th, x).squeeze(-1)  # noqa: E731
    theta = torch.randn(5, generator=g, dtype=D)
    d1, d2 = torch.randn(5, generator=g, dtype=D), torch.randn(5, generator=g, dtype=D)
    r = L.surface(f, theta, d1, d2, (X, y), grid=7, range_=(-1.5, 2.0), loss="mse", batch_points=3)
    r0, u, v = X @ theta - y, X @ d1, X @ d2
    A, B = np.meshgrid(r["a"], r["b"], indexing="ij")
    closed = ((r0.numpy() + A[..., None] * u.numpy() + B[..., None] * v.numpy()) ** 2).mean(-1)
    assert np.abs(np.array(r["loss"]) - closed).max() < 1e-12 and r["acc"] is None
    ln = L.line(f, theta, theta + d1, (X, y), n=5, extend=0.5, loss="mse")
    t = np.array(ln["t"])
    assert t[0] == -0.5 and t[-1] == 1.5 and 0.0 in ln["t"] and 1.0 in ln["t"]
    closed = ((r0.numpy() + t[:, None] * u.numpy()) ** 2).mean(-1)
    assert np.abs(np.array(ln["loss"]) - closed).max() < 1e-12


def test_line_endpoints_are_the_two_models():
    _, _, f, theta = mlp(0)
    _, _, _, other = mlp(1)
    data = cls_data()
    ln = L.line(f, theta, other, data, n=4, extend=0.34, batch_points=3)
    assert ln["t"] == [-1 / 3, 0.0, 1 / 3, 2 / 3, 1.0, 4 / 3]
    assert ln["loss_a"] == ln["loss"][1] and abs(ln["loss_a"] - ce(f, theta, data)) < 1e-12
    assert abs(ln["loss_b"] - ce(f, other, data)) < 1e-12
    assert abs(ln["distance"] - (other - theta).norm().item()) < 1e-12


def test_bad_grid_and_loss_are_user_errors():
    _, space, f, theta = mlp()
    d1, d2 = L.plane_random(space, theta, 0)
    with pytest.raises(UserError, match="grid"):
        L.surface(f, theta, d1, d2, cls_data(), grid=1)
    with pytest.raises(UserError, match="lo < hi"):
        L.surface(f, theta, d1, d2, cls_data(), range_=(1, -1))
    with pytest.raises(UserError, match="loss"):
        L.surface(f, theta, d1, d2, cls_data(), grid=2, loss="hinge")


# ---- federated planes ----------------------------------------------------------------------------------

def test_plane_through_three_models_reproduces_their_losses():
    _, _, f, theta0 = mlp(0)
    thetas = [mlp(s)[3] for s in (1, 2)]
    data = cls_data()
    origin, d1, d2, coords = L.plane_through(theta0, *thetas)
    assert torch.equal(origin, theta0) and coords[0].tolist() == [0.0, 0.0] and coords[1].tolist() == [1.0, 0.0]
    assert abs(d1 @ d2) < 1e-12 * d1.norm() ** 2 and abs(d2.norm() - d1.norm()) < 1e-12
    for (a, b), th in zip(coords.tolist(), [theta0, *thetas]):
        assert (theta0 + a * d1 + b * d2 - th).abs().max() < 1e-12
    want = [ce(f, th, data) for th in [theta0, *thetas]]
    got = L.evaluate_plane(f, origin, d1, d2, data, coords)["loss"]
    assert np.abs(np.array(got) - want).max() < 1e-12
    r = L.surface(f, origin, d1, d2, data, grid=3, range_=(-2, 2),
                  points={"client 1": coords[1].tolist(), "client 2": coords[2].tolist()})
    assert [p["name"] for p in r["points"]] == ["client 1", "client 2"]
    assert np.abs(np.array([p["loss"] for p in r["points"]]) - want[1:]).max() < 1e-12
    with pytest.raises(UserError, match="collinear"):
        L.plane_through(theta0, thetas[0], 2 * thetas[0] - theta0)


def test_plane_update_marks_the_previous_global_model():
    _, space, f, theta = mlp()
    data = cls_data()
    update = 0.05 * torch.randn(space.P, generator=gen(7), dtype=D)
    d1, d2 = L.plane_update(space, theta, update, seed=3)
    assert torch.equal(d1, update)
    assert abs(d1 @ d2) < 1e-12 * d1.norm() ** 2 and abs(d2.norm() - d1.norm()) < 1e-12
    prev = L.evaluate_plane(f, theta, d1, d2, data, [[-1.0, 0.0]])["loss"][0]
    assert abs(prev - ce(f, theta - update, data)) < 1e-12
    with pytest.raises(UserError, match="zero"):
        L.plane_update(space, theta, torch.zeros_like(theta), seed=3)


def test_pca_trajectory_recovers_a_planar_path():
    from sklearn.decomposition import PCA
    g = gen(9)
    P, T = 40, 7
    q, _ = torch.linalg.qr(torch.randn(P, 2, generator=g, dtype=D))
    xy = torch.randn(T, 2, generator=g, dtype=D) * torch.tensor([3.0, 1.0], dtype=D)
    final = torch.randn(P, generator=g, dtype=D)
    thetas = final + (xy - xy[-1]) @ q.T
    out = L.pca_trajectory(thetas)
    V = torch.stack([out["d1"], out["d2"]])
    assert (V @ V.T - torch.eye(2, dtype=D)).abs().max() < 1e-12
    assert ((q @ (q.T @ V.T)) - V.T).abs().max() < 1e-12  # spans the path's plane
    assert (out["coords"] @ V - (thetas - final)).abs().max() < 1e-12  # projections are exact in-plane
    assert torch.equal(out["origin"], final) and abs(sum(out["explained"]) - 1) < 1e-12
    ref = PCA(2).fit((thetas[:-1] - final).numpy())  # Li et al.'s projection.py uses sklearn's PCA
    assert np.abs(np.abs(ref.components_ @ V.numpy().T) - np.eye(2)).max() < 1e-10
    assert np.allclose(ref.explained_variance_ratio_, out["explained"], atol=1e-12)
    with pytest.raises(UserError, match="at least 4"):
        L.pca_trajectory(thetas[:3])


def test_states_include_batchnorm_buffers():
    with torch.random.fork_rng():
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 2)).to(D)
        m2 = copy.deepcopy(m)
        for net, s in ((m, 1.0), (m2, 3.0)):  # two different running statistics
            net.train()(s * torch.randn(64, 4, dtype=D))
    m.eval(), m2.eval()
    space = ParamSpace.of_model(m)
    theta = space.flatten(dict(m.named_parameters())).detach()
    sspace, fs, z = L.with_states(m, space, theta)
    assert sspace.P == space.P + 12 and sspace.layers[-1].name == "1.running_var"
    X, y = torch.randn(20, 4, generator=gen(), dtype=D), torch.randint(0, 2, (20,), generator=gen())
    assert torch.equal(fs(z, X), m(X))
    d = L.random_direction(sspace, z, gen(), norm="filter")
    assert torch.equal(d[space.P:], torch.zeros(12, dtype=D))
    z2 = torch.cat([space.flatten(dict(m2.named_parameters())), ParamSpace.buffers_of(m2).flatten(
        dict(m2.named_buffers()))]).detach()
    ln = L.line(fs, z, z2, (X, y), n=3, extend=0.0, batch_points=3)
    mid = copy.deepcopy(m)
    mid.load_state_dict({k: (v + m2.state_dict()[k]) / 2 if v.is_floating_point() else v
                         for k, v in m.state_dict().items()})
    assert abs(ln["loss"][1] - F.cross_entropy(mid(X), y).item()) < 1e-12


# ---- plots ---------------------------------------------------------------------------------------------

def test_plots_draw_every_panel():
    _, space, f, theta = mlp()
    data = cls_data()
    d1, d2 = L.plane_random(space, theta, 0)
    r = L.surface(f, theta, d1, d2, data, grid=5, range_=(-4, 4), points={"x": (1.0, 1.0)})
    assert len(L.plot_contour(r).axes) == 2  # map + colour bar
    assert L.plot_surface3d(r).axes[0].name == "3d"
    assert len(L.plot_panel([r, r], ["A", "B"], overlay=r).axes) == 3
    assert len(L.plot_panel([r, r, r], kind="contour", what="acc").axes) == 4
    fig = L.plot_trajectory(r, [[0.5, 0.5], [0.0, 0.0]], explained=[0.8, 0.1], labels=[1, 2])
    assert fig.axes[0].get_xlabel() == "1st PC: 80.0 %"
    assert len(L.plot_line(L.line(f, theta, theta + d1, data, n=3)).axes) == 2
    blown = {**r, "loss": [[float("inf"), *row[1:]] for row in r["loss"]]}  # overflow far out: masked, drawn
    assert len(L.plot_contour(blown).axes) == 2 and len(L.plot_panel([blown, r], kind="contour").axes) == 3
    Z = np.array(r["loss"])
    lv = L.paper_levels(Z)
    li = np.arange(*L.LI_LEVELS)
    assert set(lv) <= set(li) or (len(lv) == 12 and lv.min() > Z.min() and lv.max() < Z.max())
    assert np.array_equal(L.paper_levels(np.array([[0.0, 5.0]])), li[(li > 0) & (li < 5)])


def test_hessian_plane_is_the_top_two_eigenvectors():
    _, space, f, theta = mlp()
    data = cls_data()
    H = torch.func.hessian(lambda th: F.cross_entropy(f(th, data[0]), data[1]))(theta)
    evals, evecs = torch.linalg.eigh(H)
    d1, d2, eig = L.plane_hessian(f, theta, data, tol=1e-10)
    assert np.allclose(eig, evals[-2:].flip(0).tolist(), rtol=1e-9, atol=0)
    assert abs(abs(d1 @ evecs[:, -1]) - 1) < 1e-8 and abs(abs(d2 @ evecs[:, -2]) - 1) < 1e-8
    assert abs(d1.norm() - 1) < 1e-12 and abs(d1 @ d2) < 1e-10
    head = space.index("2.*")  # the plane of the head's Hessian block, zero on the other layers
    h1, _, (e1, _) = L.plane_hessian(f, theta, data, space, params="2.*", tol=1e-10)
    top = torch.linalg.eigvalsh(H[head][:, head])[-1].item()
    assert abs(e1 - top) < 1e-9 * top and h1.norm() == h1[head].norm()


# ---- command line: python -m fedlab_analysis.probe landscape ---------------------------------------------

@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """FedLESAM (keeps last_update) on digits, logreg, 4 clients, 4 rounds, every checkpoint kept."""
    from fedlab_analysis import train
    out = tmp_path_factory.mktemp("landscape") / "run"
    flags = ["--algo", "fedlesam", "--dataset", "digits", "--model", "logreg", "--clients", "4", "--rounds", "4",
             "--local-steps", "2", "--ckpt-every", "1", "--keep-clients", "--out", str(out), "--quiet"]
    assert train.main(flags) == 0
    return out


def probe(run, *flags, tmp_path):
    import json
    from fedlab_analysis import probe as cli
    js = tmp_path / "out.json"
    code = cli.main(["landscape", str(run), "--samples", "120", "--dtype", "float64", "--json", str(js), *flags])
    return code, (json.loads(js.read_text()) if code == 0 else None)


def loss_of(bundle, theta):
    return F.cross_entropy(bundle.f(theta, bundle.X), bundle.y).item()


def test_cli_random_plane_centre_is_the_checkpoint(run_dir, tmp_path):
    from fedlab_analysis import checkpoint
    from fedlab_analysis.probes.common import rebuild
    code, r = probe(run_dir, "--grid", "5", "--range", "-2:2", "--plot", str(tmp_path / "p.png"), tmp_path=tmp_path)
    assert code == 0 and r["plane"] == "random" and np.array(r["loss"]).shape == (5, 5)
    assert r["a"] == r["b"] == [-2.0, -1.0, 0.0, 1.0, 2.0]
    b = rebuild(checkpoint.load(run_dir), samples=120, dtype=D)
    assert abs(r["loss"][2][2] - loss_of(b, b.theta)) < 1e-12 and (tmp_path / "p.png").stat().st_size > 0


def test_cli_federated_planes_mark_the_right_models(run_dir, tmp_path):
    from fedlab_analysis import checkpoint
    from fedlab_analysis.probes.common import rebuild
    last = checkpoint.load(run_dir)
    b = rebuild(last, samples=120, dtype=D)
    code, r = probe(run_dir, "--plane", "clients", "--grid", "3", "--clients-pair", "2,0", tmp_path=tmp_path)
    assert code == 0 and r["clients"] == [2, 0]
    want = [loss_of(b, b.clients[i]) for i in (2, 0)]
    assert np.abs(np.array([p["loss"] for p in r["points"]]) - want).max() < 1e-12
    code, r = probe(run_dir, "--plane", "update", "--grid", "3", tmp_path=tmp_path)
    prev = rebuild(checkpoint.load(run_dir / "ckpt" / "round_0003.pt"), samples=120, dtype=D)
    assert code == 0 and r["update_from"] == "algo_state"
    assert abs(r["points"][0]["loss"] - loss_of(b, prev.theta)) < 1e-9  # last_update = w^4 - w^3
    code, r = probe(run_dir, "--plane", "pca", "--grid", "3", tmp_path=tmp_path)
    assert code == 0 and r["rounds"] == [1, 2, 3, 4] and len(r["trajectory"]) == 4
    code, r = probe(run_dir / "ckpt" / "round_0001.pt", "--other", str(run_dir), "--grid", "3",
                    "--extend", "0", tmp_path=tmp_path)
    first = rebuild(checkpoint.load(run_dir / "ckpt" / "round_0001.pt"), samples=120, dtype=D)
    assert code == 0 and r["mode"] == "line" and r["t"] == [0.0, 0.5, 1.0]
    assert abs(r["loss_a"] - loss_of(first, first.theta)) < 1e-12 and abs(r["loss_b"] - loss_of(b, b.theta)) < 1e-12


@pytest.mark.parametrize("target, flags, needle", [
    ("ckpt/round_0002.pt", ["--plane", "pca"], "4 checkpoints"),
    ("", ["--plane", "clients", "--clients-pair", "0,9"], "clients-pair"),
    ("", ["--plane", "update", "--other", "x.pt"], "--other"),
    ("", ["--range", "1:-1"], "lo < hi"),
    ("", ["--plane", "hessian", "--dir-type", "states"], "states"),
])
def test_cli_bad_input_is_one_line_exit_2(run_dir, tmp_path, capsys, target, flags, needle):
    code, _ = probe(run_dir / target, *flags, tmp_path=tmp_path)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and needle in err, err


# ---- landscapes as data: saved directions, Li et al.'s HDF5 layout, round levels --------------------------
def test_saved_directions_give_identical_planes_for_two_checkpoints(run_dir, tmp_path, capsys):
    """Round 4 saves its plane; round 2 draws the same one (same vectors, not redrawn for its own weights); the
    surface equals surface() with the loaded vectors at round 2's model; another model's file is refused."""
    from fedlab_analysis import checkpoint, train
    from fedlab_analysis.probes.common import rebuild
    dirs = tmp_path / "dirs.pt"
    code, r4 = probe(run_dir, "--grid", "3", "--save-directions", str(dirs), tmp_path=tmp_path)
    assert code == 0 and dirs.exists()
    r2_path = run_dir / "ckpt" / "round_0002.pt"
    code, r2 = probe(r2_path, "--grid", "3", "--directions", str(dirs), tmp_path=tmp_path)
    assert code == 0 and r2["plane"] == "file" and r2["directions_meta"]["seed"] == 0
    d1, d2, _ = L.load_directions(dirs, rebuild(checkpoint.load(run_dir), samples=120, dtype=D), "weights")
    ref = L.plane_random(ParamSpace.from_table(checkpoint.load(run_dir)["layers"]),
                         rebuild(checkpoint.load(run_dir), dtype=D).theta, 0)
    assert torch.equal(d1, ref[0].cpu()) and torch.equal(d2, ref[1].cpu())
    assert (r2["d1_norm"], r2["d2_norm"], r2["cos_d1_d2"]) == (r4["d1_norm"], r4["d2_norm"], r4["cos_d1_d2"])
    b2 = rebuild(checkpoint.load(r2_path), samples=120, dtype=D)
    want = L.surface(b2.f, b2.theta, d1.to(D), d2.to(D), (b2.X, b2.y), grid=3)
    assert np.array_equal(np.array(want["loss"]), np.array(r2["loss"]))
    redrawn = probe(r2_path, "--grid", "3", tmp_path=tmp_path)[1]           # a fresh draw is another plane
    assert redrawn["d1_norm"] != r2["d1_norm"]
    other = tmp_path / "mlp"
    assert train.main(["--algo", "fedavg", "--dataset", "digits", "--model", "mlp", "--clients", "4", "--rounds",
                       "1", "--local-steps", "1", "--out", str(other), "--quiet"]) == 0
    capsys.readouterr()
    assert probe(other, "--grid", "3", "--directions", str(dirs), tmp_path=tmp_path)[0] == 2
    assert "another model" in capsys.readouterr().err
    assert probe(run_dir, "--plane", "hessian", "--directions", str(dirs), tmp_path=tmp_path)[0] == 2


def test_h5_file_is_li_et_al_layout_and_matches_the_json(run_dir, tmp_path):
    h5py = pytest.importorskip("h5py")
    code, r = probe(run_dir, "--grid", "5", "--range-y", "-0.5:0.5", "--h5", str(tmp_path / "s.h5"),
                    tmp_path=tmp_path)
    assert code == 0
    with h5py.File(tmp_path / "s.h5", "r") as fh:
        x, y = fh["xcoordinates"][:], fh["ycoordinates"][:]
        loss, acc = fh["train_loss"][:], fh["train_acc"][:]
        assert set(fh) == {"xcoordinates", "ycoordinates", "train_loss", "train_acc"}
    assert x.tolist() == r["a"] and y.tolist() == r["b"] and y.max() == 0.5
    assert loss.shape == (len(y), len(x))                          # [y, x]: Li et al.'s meshgrid(x, y) reading
    for i in range(len(x)):
        for j in range(len(y)):
            assert loss[j, i] == r["loss"][i][j] and acc[j, i] == pytest.approx(100 * r["acc"][i][j], abs=1e-12)


def test_contour_levels_are_round_numbers():
    """1-2-5 (or 1-9) per decade on a log scale, MaxNLocator steps on a linear one: never 0.0676, 0.122."""
    for Z, log in ((np.geomspace(0.05, 3.0, 50).reshape(5, 10), True), (np.linspace(0.31, 0.97, 40), False),
                   (np.geomspace(0.6, 1.7, 30), True)):
        lv, is_log = L.nice_levels(Z, log=log)
        assert is_log == log and len(lv) >= 3
        for v in lv:
            e = np.floor(np.log10(v)) - (0 if log else 1)
            assert abs(v / 10 ** e - round(v / 10 ** e)) < 1e-9, v    # one or two significant digits
    geom = np.geomspace(0.05, 3.0, 14)[1:-1]                          # the old levels: not round
    assert any(abs(v / 10 ** np.floor(np.log10(v)) - round(v / 10 ** np.floor(np.log10(v)))) > 1e-3 for v in geom)
