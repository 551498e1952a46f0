"""Curvature probe against exact answers: float64 logistic regression and a tiny MLP whose
Hessian comes from torch.func.hessian + numpy.linalg.eigh."""
import argparse
import dataclasses
import importlib.util
import json
import math
from types import SimpleNamespace

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from torch import nn

from fedlab_analysis.errors import UserError
from fedlab_analysis.params import ParamSpace, functional
from fedlab_analysis.probes import PROBES, options
from fedlab_analysis.probes import curvature as C
from fedlab_analysis.probes.runner import public
from fedlab_analysis.probes.curvature import (HessianOperator, MatrixOperator, density, per_layer,
                                              top_eigenvalues, trace)

F64 = torch.float64




def _problem(kind):
    g = torch.Generator().manual_seed(0)
    if kind == "logreg":
        model = nn.Linear(6, 3)
        X = torch.randn(50, 6, generator=g, dtype=F64)
    elif kind == "mlp":
        model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
        X = torch.randn(60, 5, generator=g, dtype=F64)
    else:  # GroupNorm: the default double-backward path must work there
        model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.GroupNorm(2, 4), nn.ReLU(), nn.Flatten(), nn.Linear(64, 3))
        X = torch.randn(12, 1, 6, 6, generator=g, dtype=F64)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    model = model.to(F64).eval()
    space = ParamSpace.of_model(model)
    f = functional(model, space)
    theta = space.flatten(dict(model.named_parameters())).detach()
    y = torch.randint(0, 3, (len(X),), generator=g)
    loss = lambda t: nn.functional.cross_entropy(f(t, X), y)  # noqa: E731
    H = torch.func.jacrev(torch.func.jacrev(loss))(theta)
    return SimpleNamespace(f=f, theta=theta, X=X, y=y, space=space, H=H, ev=np.linalg.eigh(H.numpy())[0],
                           model=model)


@pytest.fixture(scope="module")
def logreg():
    return _problem("logreg")


@pytest.fixture(scope="module")
def mlp():
    return _problem("mlp")


def _op(pb, **kw):
    return HessianOperator(pb.f, pb.theta, (pb.X, pb.y), **kw)


def _dense(op):
    return op.matmat(torch.eye(op.dim, dtype=op.dtype))


# ---- the operator ---------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["autograd", "func"])
@pytest.mark.parametrize("kind", ["logreg", "mlp", "groupnorm"])
def test_hvp_equals_exact_hessian(kind, backend):
    pb = _problem(kind)
    v = torch.randn(pb.space.P, generator=torch.Generator().manual_seed(1), dtype=F64)
    for data, bs in [((pb.X, pb.y), None), ((pb.X, pb.y), 7), (list(zip(pb.X.split(5), pb.y.split(5))), None)]:
        op = HessianOperator(pb.f, pb.theta, data, batch_size=bs, backend=backend)
        assert torch.allclose(op.matvec(v), pb.H @ v, rtol=0, atol=1e-10)
        assert torch.allclose(op @ torch.stack([v, 2 * v], 1), pb.H @ torch.stack([v, 2 * v], 1), rtol=0, atol=1e-10)
    assert op.n_products == 3 and op.seconds > 0


def test_kept_graph_gives_the_same_products(mlp):
    V = torch.randn(3, mlp.space.P, generator=torch.Generator().manual_seed(3), dtype=F64)
    for data in [(mlp.X, mlp.y), list(zip(mlp.X.split(25), mlp.y.split(25)))]:
        op = HessianOperator(mlp.f, mlp.theta, data, keep_graph=True)
        for _ in range(2):
            assert torch.allclose(op.matmat(V), V @ mlp.H, atol=1e-10, rtol=0)
        assert len(op._graphs) == len(op.batches)
        op.release()
        assert not op._graphs and torch.allclose(op.matvec(V[0]), mlp.H @ V[0], atol=1e-10, rtol=0)


def test_graph_kept_by_default_only_when_it_fits(mlp, monkeypatch):
    from fedlab_analysis.probes import hvp
    v = torch.randn(mlp.space.P, generator=torch.Generator().manual_seed(4), dtype=F64)
    op = HessianOperator(mlp.f, mlp.theta, (mlp.X, mlp.y))
    assert op.keep_graph and "keep_graph_note" not in op.describe()
    monkeypatch.setattr(hvp, "_free_bytes", lambda device: 1000)          # no room: rebuilt per product
    op = HessianOperator(mlp.f, mlp.theta, (mlp.X, mlp.y))
    assert not op.keep_graph and "not kept" in op.describe()["keep_graph_note"]
    assert torch.allclose(op.matvec(v), mlp.H @ v, atol=1e-10, rtol=0) and not op._graphs


def test_weight_decay_and_minibatch(mlp):
    v = torch.randn(mlp.space.P, generator=torch.Generator().manual_seed(2), dtype=F64)
    assert torch.allclose(_op(mlp, weight_decay=0.3).matvec(v), mlp.H @ v + 0.3 * v, atol=1e-10, rtol=0)
    x, y = mlp.X[:9], mlp.y[:9]
    H9 = torch.func.hessian(lambda t: nn.functional.cross_entropy(mlp.f(t, x), y))(mlp.theta)
    assert torch.allclose(HessianOperator(mlp.f, mlp.theta, (x, y)).matvec(v), H9 @ v, atol=1e-10, rtol=0)


@pytest.mark.parametrize("spec", ["0.weight", "2.*", "block:1", "re:bias$", "group:h"])
def test_filtered_operator_is_the_diagonal_block(mlp, spec):
    space = mlp.space.with_phi_layers(1)
    op = _op(mlp, params=spec, space=space)
    idx = space.index(spec)
    assert op.dim == len(idx) < space.P
    assert torch.allclose(_dense(op), mlp.H[idx][:, idx], atol=1e-10, rtol=0)
    v = torch.randn(op.dim, dtype=F64)
    full = op.embed(v)
    assert full.shape == (space.P,) and torch.equal(op.restrict(full), v)
    assert torch.equal(full[~space.mask(spec)], torch.zeros(space.P - op.dim, dtype=F64))


def test_bad_input_is_one_line_user_error(mlp):
    for kw, needle in [(dict(params="nope", space=mlp.space), "0.weight"), (dict(params="2.*"), "space="),
                       (dict(backend="jax"), "autograd"), (dict(loss="hinge"), "ce"), (dict(batch_size=0), "batch")]:
        with pytest.raises(UserError, match=needle) as e:
            _op(mlp, **kw)
        assert "\n" not in str(e.value)
    op = _op(mlp, params="2.bias", space=mlp.space)
    for call, needle in [(lambda: top_eigenvalues(op, k=4), "between 1 and"),
                         (lambda: top_eigenvalues(op, k=3, method="eigsh"), "k < dim"),
                         (lambda: top_eigenvalues(op, which="BE"), "LA"),
                         (lambda: trace(op, 10, method="xtrace"), "hutchinson")]:
        with pytest.raises(UserError, match=needle):
            call()


# ---- eigenvalues ----------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["lanczos", "eigsh", "power"])
@pytest.mark.parametrize("which, k", [("LA", 5), ("SA", 1)])
def test_top_eigenvalues_exact(mlp, method, which, k):
    op = _op(mlp)
    tol = 1e-7 if method == "power" else 1e-10
    r = top_eigenvalues(op, k=k, which=which, tol=tol, seed=3, method=method,
                        max_iter=3000 if method == "power" else None)
    exact = mlp.ev[::-1][:k] if which == "LA" else mlp.ev[:k]
    np.testing.assert_allclose(r["eigenvalues"], exact, rtol=1e-8)
    V = r["eigenvectors"]
    assert V.shape == (k, mlp.space.P) and r["converged"]
    resid = (V @ mlp.H - torch.tensor(r["eigenvalues"], dtype=F64)[:, None] * V).norm(dim=1)
    assert resid.max() < 1e-5 and torch.allclose(V.norm(dim=1), torch.ones(k, dtype=F64))


def test_lanczos_to_full_dimension_is_exact_despite_degenerate_eigenvalues(logreg):
    """Softmax regression has a null space (a zero eigenvalue of multiplicity >= 7): Lanczos breaks
    down early and must restart to reach every eigenvalue."""
    op = _op(logreg)
    r = top_eigenvalues(op, k=op.dim, tol=1e-12, seed=0)
    assert (np.abs(logreg.ev) < 1e-12).sum() >= 7
    np.testing.assert_allclose(r["eigenvalues"], logreg.ev[::-1], rtol=0, atol=1e-10)
    assert op.n_products == op.dim


def test_stopping_rule_is_honest_and_residuals_are_true(mlp):
    for k, tol in [(1, 1e-3), (5, 1e-3), (3, 1e-6)]:
        op = _op(mlp)
        r = top_eigenvalues(op, k=k, tol=tol, seed=1)
        exact = mlp.ev[::-1][:k]
        assert r["converged"] and r["n_products"] < op.dim
        assert np.all(np.abs(np.array(r["eigenvalues"]) - exact) <= tol * exact)
        assert np.all(np.diff(r["eigenvalues"]) <= 0)
        V = r["eigenvectors"]
        true = (V @ mlp.H - torch.tensor(r["eigenvalues"], dtype=F64)[:, None] * V).norm(dim=1).numpy()
        np.testing.assert_allclose(r["residuals"], true, rtol=1e-6, atol=1e-12)


def test_clustered_top_eigenvalues_in_order():
    """The hard case of the benchmark, with a designed spectrum: five eigenvalues within 4%."""
    g = torch.Generator().manual_seed(0)
    U = torch.linalg.qr(torch.randn(400, 400, generator=g, dtype=F64))[0]
    lam = torch.cat([torch.tensor([1.0, 0.99, 0.98, 0.97, 0.96], dtype=F64),
                     torch.rand(395, generator=g, dtype=F64) * 0.5 - 0.1])
    op = MatrixOperator(U @ torch.diag(lam) @ U.T)
    r = top_eigenvalues(op, k=5, tol=1e-3, seed=0)
    assert r["converged"] and r["n_products"] <= 100
    np.testing.assert_allclose(r["eigenvalues"], lam[:5].numpy(), rtol=1e-3)


def test_seeded(mlp):
    a, b, c = (top_eigenvalues(_op(mlp), k=2, tol=1e-2, seed=s) for s in (4, 4, 5))
    assert a["eigenvalues"] == b["eigenvalues"] and a["n_products"] == b["n_products"]
    assert torch.equal(a["eigenvectors"], b["eigenvectors"]) and a["eigenvalues"] != c["eigenvalues"]
    t = [trace(_op(mlp), 12, method=m, seed=s)["trace"] for m in ("hutchinson", "hutch++") for s in (4, 4, 5)]
    assert t[0] == t[1] != t[2] and t[3] == t[4] != t[5]
    d = [density(_op(mlp), n_steps=10, n_vectors=2, seed=s)["density"] for s in (4, 4)]
    assert d[0] == d[1]


# ---- trace ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("method, n, deflate", [("hutchinson", 6, 0), ("hutch++", 15, 0), ("hutchinson", 12, 3)])
def test_trace_unbiased_with_honest_stderr(mlp, method, n, deflate):
    exact = float(torch.trace(mlp.H))
    runs = [trace(_op(mlp), n, method=method, deflate=deflate, seed=s) for s in range(150)]
    est = np.array([r["trace"] for r in runs])
    assert all(r["n_products"] == n for r in runs)
    spread = est.std(ddof=1) / math.sqrt(len(est))
    assert abs(est.mean() - exact) < 3 * spread
    ratio = np.mean([r["stderr"] ** 2 for r in runs]) / est.var(ddof=1)   # reported vs actual variance
    assert 0.6 < ratio < 1.6, ratio


@pytest.mark.parametrize("kind", ["logreg", "mlp"])
@pytest.mark.parametrize("method, deflate", [("hutch++", 0), ("hutch++", 3), ("hutchinson", 0)])
def test_trace_exact_with_as_many_products_as_the_dimension(kind, method, deflate, logreg, mlp):
    pb = {"logreg": logreg, "mlp": mlp}[kind]
    op = _op(pb)
    r = trace(op, op.dim, method=method, deflate=deflate, seed=7)
    assert r["n_products"] <= op.dim and r["stderr"] == 0.0 and r["exact_dim"] == op.dim
    assert abs(r["trace"] - float(torch.trace(pb.H))) < 1e-10


def test_hutchpp_beats_hutchinson_at_equal_products(mlp):
    exact = float(torch.trace(mlp.H))
    err = {m: np.sqrt(np.mean([(trace(_op(mlp), 30, method=m, seed=s)["trace"] - exact) ** 2 for s in range(30)]))
           for m in ("hutchinson", "hutch++")}
    assert err["hutch++"] < err["hutchinson"]


# ---- density --------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["logreg", "mlp"])
def test_slq_with_dim_steps_has_the_exact_eigenvalues_as_nodes(kind, logreg, mlp):
    pb = {"logreg": logreg, "mlp": mlp}[kind]
    op = _op(pb)
    r = density(op, n_steps=op.dim, n_vectors=2, seed=0)
    for nodes, w in zip(r["nodes"], r["weights"]):
        np.testing.assert_allclose(np.sort(nodes), pb.ev, rtol=0, atol=1e-10)
        assert abs(sum(w) - 1) < 1e-12 and min(w) >= 0
    grid, dens = np.array(r["grid"]), np.array(r["density"])
    assert abs(np.sum((dens[1:] + dens[:-1]) / 2 * np.diff(grid)) - 1) < 1e-3   # a probability density
    assert r["n_products"] == 2 * op.dim


def test_slq_quadrature_trace_is_unbiased(mlp):
    exact = float(torch.trace(mlp.H))
    est = np.array([density(_op(mlp), n_steps=12, n_vectors=1, seed=s)["trace"] for s in range(60)])
    assert abs(est.mean() - exact) < 3 * est.std(ddof=1) / math.sqrt(len(est))


# ---- per layer, figures, CLI ----------------------------------------------------------------------
def test_per_layer_matches_the_exact_diagonal_blocks(mlp):
    rows = per_layer(mlp.f, mlp.theta, (mlp.X, mlp.y), mlp.space, by="block", tol=1e-10, trace_products=60)
    assert list(rows) == ["0", "2"]
    for row in rows.values():
        idx = mlp.space.index(row["spec"])
        block = mlp.H[idx][:, idx]
        assert row["dim"] == len(idx)
        assert abs(row["top_eigenvalue"] - np.linalg.eigvalsh(block.numpy())[-1]) < 1e-10
        assert abs(row["trace"] - float(torch.trace(block))) < 1e-10 and row["trace_stderr"] == 0.0
    assert list(per_layer(mlp.f, mlp.theta, (mlp.X, mlp.y), mlp.space, by="param", trace_products=5)) == \
        ["0.weight", "0.bias", "2.weight", "2.bias"]
    fig = C.plot_per_layer(rows)
    assert [a.get_xlabel() for a in fig.axes] == ["largest eigenvalue", "trace (+- stderr)"]
    plt.close(fig)


def _args(question, *argv):
    """The probe's Options from flags, through the subcommand's generated arguments (no checkpoint)."""
    p = argparse.ArgumentParser()
    options.add_arguments(p, PROBES[question].Options, skip=("ckpt",))
    opts = options.from_namespace(PROBES[question].Options, p.parse_args(list(argv)))
    return dataclasses.replace(opts, data="train", seed=0, plot="figure.png")


def _compute(question, args, bundle):
    return PROBES[question].compute(bundle, args)


def _bundle(pb):
    return SimpleNamespace(f=pb.f, theta=pb.theta, X=pb.X, y=pb.y, space=pb.space, model=pb.model,
                           config={}, ckpt={}, title=lambda what: what)


@pytest.mark.parametrize("question, argv", [
    ("hessian", ["--top-k", "3", "--tol", "1e-9"]),
    ("hessian", ["--per-layer", "--tol", "1e-9", "--products", "80"]),
    ("hessian", ["--layer", "2.*", "--which", "SA", "--tol", "1e-9", "--minibatch", "20"]),
    ("trace", ["--products", "75"]),
    ("trace", ["--per-layer", "--by", "param", "--products", "4", "--method", "hutchinson"]),
    ("density", ["--steps", "75", "--vectors", "1"]),
])
def test_cli_run_functions_give_json_and_a_figure(mlp, question, argv, tmp_path):
    args = _args(question, *argv)
    result = _compute(question, args, _bundle(mlp))
    text = json.dumps(public(result))
    assert "n_products" in text and "seconds" in text and result["data_used"]["n"] in (60, 20)
    if question == "hessian" and not args.per_layer and not args.layer:
        np.testing.assert_allclose(result["eigenvalues"], mlp.ev[::-1][:3], rtol=1e-8)
        assert result["parameters"]["dim"] == mlp.space.P
    if args.layer:
        assert result["parameters"]["layers"] == ["2.weight", "2.bias"] and result["eigenvalues"][0] < 0
    if question == "trace" and not args.per_layer:
        assert abs(result["trace"] - float(torch.trace(mlp.H))) < 1e-10
    if args.per_layer:
        assert set(result["layers"]) == set(C.layer_specs(mlp.space, result["by"])) and "summary" in result
    PROBES[question].plot(result, tmp_path / "f.png")       # every question draws its figure (trace too)
    assert (tmp_path / "f.png").stat().st_size > 10_000


def test_cli_optional_backends_agree_or_say_they_are_missing():
    """PyHessian 0.1 and curvlinops (optional extras) answer the same question as ours."""
    pb = _problem("mlp")
    if importlib.util.find_spec("curvlinops") is None:
        with pytest.raises(UserError, match="not installed"):
            _compute("hessian", _args("hessian", "--backend", "curvlinops"), _bundle(pb))
    else:
        r = _compute("hessian", _args("hessian", "--top-k", "2", "--tol", "1e-8", "--backend", "curvlinops"),
                     _bundle(pb))
        np.testing.assert_allclose(r["eigenvalues"], pb.ev[::-1][:2], rtol=1e-6)
        args = _args("trace", "--backend", "curvlinops", "--products", "30", "--method", "hutchinson")
        r = _compute("trace", args, _bundle(pb))
        assert r["n_products"] == 30 and abs(r["trace"] - float(torch.trace(pb.H))) < 5 * r["stderr"] + 1.0
    if importlib.util.find_spec("pyhessian") is None:
        with pytest.raises(UserError, match="not installed"):
            _compute("trace", _args("trace", "--backend", "pyhessian"), _bundle(pb))
        return
    with pytest.raises(UserError, match="float32"):
        _compute("hessian", _args("hessian", "--backend", "pyhessian"), _bundle(pb))
    pb.model.float()
    pb.theta, pb.X = pb.theta.float(), pb.X.float()
    r = _compute("hessian", _args("hessian", "--backend", "pyhessian", "--top-k", "2", "--tol", "1e-6"),
                 _bundle(pb))
    assert r["n_products"] > 2 and abs(max(r["eigenvalues"]) - pb.ev[-1]) < 1e-3 * pb.ev[-1]
    r = _compute("trace", _args("trace", "--backend", "pyhessian", "--products", "40"), _bundle(pb))
    assert r["n_products"] == r["n_probes"] >= 2 and r["stderr"] > 0
    with pytest.raises(UserError, match="density"):
        _compute("density", _args("density", "--backend", "pyhessian", "--steps", "5", "--vectors", "1"), _bundle(pb))


def test_cli_end_to_end_on_a_checkpoint(tmp_path, capsys):
    """python -m fedlab_analysis.probe hessian|trace|density CKPT on a tiny trained run, and its bad inputs."""
    from fedlab_analysis import probe, train
    from fedlab_analysis.probes.common import rebuild
    from fedlab_analysis import checkpoint

    run = tmp_path / "run"
    assert train.main(["--algo", "fedavg", "--dataset", "digits", "--model", "logreg", "--clients", "4",
                       "--rounds", "1", "--local-steps", "1", "--out", str(run), "--quiet"]) == 0
    ck = run / "ckpt" / "last.pt"
    common = ["--samples", "120", "--dtype", "float64"]
    out = tmp_path / "h.json"
    assert probe.main(["hessian", str(ck), *common, "--top-k", "2", "--tol", "1e-8", "--json", str(out),
                       "--plot", str(tmp_path / "h.png")]) == 0
    r = json.loads(out.read_text())
    b = rebuild(checkpoint.load(ck), samples=120, dtype=F64)
    H = torch.func.hessian(lambda t: nn.functional.cross_entropy(b.f(t, b.X), b.y))(b.theta)
    np.testing.assert_allclose(r["eigenvalues"], np.linalg.eigvalsh(H.numpy())[::-1][:2], rtol=1e-7)
    assert r["parameters"]["dim"] == b.space.P and r["data_used"]["n"] == 120 and (tmp_path / "h.png").exists()
    for q, extra in [("trace", ["--products", "20"]), ("density", ["--steps", "15", "--vectors", "1"])]:
        assert probe.main([q, str(ck), *common, *extra, "--json", str(out)]) == 0
        assert json.loads(out.read_text())["n_products"] > 0
    capsys.readouterr()
    raw = torch.load(ck, weights_only=True)
    raw["config"] = {**raw["config"], "dataset": "cifar10", "data_dir": str(tmp_path / "nowhere")}
    torch.save(raw, tmp_path / "cifar.pt")
    for argv, needle in [(["hessian", str(ck), "--layer", "nope"], "nope"),
                         (["hessian", str(ck), "--top-k", "100000"], "100000"),
                         (["trace", str(tmp_path / "cifar.pt")], "cifar")]:
        assert probe.main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err.lower(), err


# ---- zero within round-off; scale-invariant top eigenvalue; SLQ moments with errors -------------------------
def _psd_with_zeros(dtype, tail=0.0):
    """A 40 x 40 PSD matrix with 10 zero eigenvalues (lambda_max 10), one of them set to ``tail``."""
    g = torch.Generator().manual_seed(1)
    Q = torch.linalg.qr(torch.randn(40, 40, generator=g, dtype=F64))[0]
    lam = torch.cat([torch.linspace(0.5, 10.0, 30, dtype=F64), torch.zeros(10, dtype=F64)])
    lam[-1] = tail
    return MatrixOperator(((Q * lam) @ Q.T).to(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_round_off_zeros_are_reported_as_zero_and_a_real_negative_one_is_not(dtype):
    op = _psd_with_zeros(dtype)
    r = top_eigenvalues(op, 1, "SA", tol=1e-8, max_iter=40)
    assert r["zero_within_round_off"] == [True] and abs(r["eigenvalues"][0]) <= r["zero_tol"]
    assert r["zero_tol"] == pytest.approx(100 * torch.finfo(dtype).eps * 10.0, rel=1e-3)
    neg = top_eigenvalues(_psd_with_zeros(dtype, tail=-1e-3), 1, "SA", tol=1e-8, max_iter=40)  # broken input
    assert neg["zero_within_round_off"] == [False] and neg["eigenvalues"][0] == pytest.approx(-1e-3, rel=1e-2)
    assert C._summary("hessian", {**r, "n_products": 1})["eigenvalues"] == [0.0]


def test_normalised_top_eigenvalue_is_exact_and_invariant_to_relu_rescaling():
    """lambda_max(T H T), T = |w| (eta 0), against numpy; and unchanged when a ReLU layer is scaled by c and the
    next by 1/c, while the raw lambda_max changes."""
    g = torch.Generator().manual_seed(0)
    X, y = torch.randn(40, 4, generator=g, dtype=F64), torch.randint(0, 3, (40,), generator=g)
    out = {}
    for c in (1.0, 3.0):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3)).to(F64)
        with torch.no_grad():
            model[0].weight.mul_(c), model[0].bias.mul_(c), model[2].weight.div_(c)
        space = ParamSpace.of_model(model)
        theta = space.flatten(dict(model.named_parameters())).detach()
        f = functional(model, space)
        op = HessianOperator(f, theta, (X, y))
        H = torch.func.hessian(lambda th: nn.functional.cross_entropy(f(th, X), y))(theta)
        raw = top_eigenvalues(op, 1, tol=1e-10, max_iter=space.P)["eigenvalues"][0]
        r = C.normalised_top_eigenvalue(op, theta, eta=0.0, tol=1e-10, max_iter=space.P)
        T = theta.abs()
        assert r["eigenvalue"] == pytest.approx(float(np.linalg.eigvalsh((T[:, None] * H * T).numpy())[-1]), rel=1e-8)
        out[c] = (raw, r["eigenvalue"])
    assert abs(out[3.0][0] - out[1.0][0]) > 0.1 * out[1.0][0]          # raw lambda_max is not scale-invariant
    assert out[3.0][1] == pytest.approx(out[1.0][1], rel=1e-8)


def test_slq_moments_carry_standard_errors(mlp):
    op, H = _op(mlp), mlp.H
    r = density(op, n_steps=op.dim, n_vectors=6, seed=0)
    exact = float(torch.trace(H @ H))
    m = r["moments"]["trace_H2"]
    assert m["n"] == 6 and m["stderr"] > 0 and abs(m["mean"] - exact) < 5 * m["stderr"]
    assert r["moments"]["trace"]["mean"] == pytest.approx(r["trace"])
    one = C._summary("density", density(op, n_steps=10, n_vectors=1))
    assert isinstance(one["trace"], str) and "trace_stderr" not in one       # no error, no number
