"""FedSMOO Theorem 4.4's margin bound against closed forms (linear model, circulant convolutions)."""
import json
import math

import numpy as np
import pytest
import torch
from torch import nn

from fedlab_analysis.models import build_model
from fedlab_analysis.params import ParamSpace
from fedlab_analysis.probes import margin as M

D64 = torch.float64


def model_and_theta(name, shape, classes, **kw):
    torch.manual_seed(0)          # test-local: only to fill the weights
    m = build_model(name, shape, classes, **kw).to(D64)
    space = ParamSpace.of_model(m)
    return m, space, space.flatten(dict(m.named_parameters())).detach()


def test_linear_model_bound_equals_its_closed_form():
    m, space, theta = model_and_theta("logreg", (6,), 3, bias=False)
    g = torch.Generator().manual_seed(1)
    X = torch.randn(40, 6, generator=g, dtype=D64)
    y = torch.randint(0, 3, (40,), generator=g)
    eps, p = 0.2, 0.05
    r = M.margin_bound(m, space, theta, X, y, margin=eps, p=p)
    W = theta.view(3, 6).numpy()
    Z = X.numpy() @ W.T
    marg = np.array([Z[i, y[i]] - np.max(np.delete(Z[i], y[i])) for i in range(40)])
    G = float(np.mean(marg <= eps))
    V = float(np.sum(W ** 2))                       # L = 1: V_1 = ||W||_2^2 * ||W||_F^2 / ||W||_2^2 = ||W||_F^2
    Ln, d, D = float(np.linalg.norm(X.numpy(), axis=1).max()), 6, 40
    term = math.sqrt((Ln ** 2 * d * math.log(d) * V + math.log(D / p)) / ((D - 1) * eps ** 2))
    kl = 16 * math.e ** 4 * Ln ** 2 * d * math.log(4 * d) * V / eps ** 2
    explicit = 4 * math.sqrt((kl + math.log(6 * D ** 1.5 / p)) / (D - 1))
    assert r["n_layers"] == 1 and r["width"] == d and r["bias_free"]
    assert r["V_L"] == pytest.approx(V, rel=1e-12) and r["L_n"] == pytest.approx(Ln, rel=1e-12)
    assert r["margin_loss"] == G
    assert r["bound"] == pytest.approx(G + term, rel=1e-12)
    assert r["bound_explicit"] == pytest.approx(G + explicit, rel=1e-12)
    json.dumps(r)


def test_two_layer_V_L_and_perturbed_margins():
    m, space, theta = model_and_theta("mlp", (5,), 4, widths=[7], bias=False)
    W1, W2 = (space.of(theta, n).numpy() for n in ("fc1.weight", "fc2.weight"))
    s1, s2 = np.linalg.norm(W1, 2), np.linalg.norm(W2, 2)
    V = s1 ** 2 * s2 ** 2 * (np.sum(W1 ** 2) / s1 ** 2 + np.sum(W2 ** 2) / s2 ** 2)
    g = torch.Generator().manual_seed(3)
    X = torch.randn(30, 5, generator=g, dtype=D64)
    y = torch.randint(0, 4, (30,), generator=g)
    s = 0.05 * torch.randn(space.P, generator=g, dtype=D64)
    r = M.margin_bound(m, space, theta, X, y, margin=0.1, s=s)
    assert r["V_L"] == pytest.approx(V, rel=1e-12)
    w = theta + s
    Z = torch.relu(X @ space.of(w, "fc1.weight").T) @ space.of(w, "fc2.weight").T
    marg = torch.stack([Z[i, y[i]] - torch.cat([Z[i, :y[i]], Z[i, y[i] + 1:]]).max() for i in range(30)])
    assert r["margin_loss"] == float((marg <= 0.1).double().mean())
    assert r["error_at_w_s"] == float((marg <= 0).double().mean())
    assert r["perturbation_norm"] == pytest.approx(float(s.norm()))
    # default margin: the 10% quantile of the positive margins
    d = M.margin_bound(m, space, theta, X, y, s=s)
    assert d["margin"] == pytest.approx(float(torch.quantile(marg[marg > 0], 0.1)), rel=1e-12)


def test_biases_are_reported_as_outside_the_theorem():
    m, space, theta = model_and_theta("mlp", (5,), 3, widths=[4])
    X = torch.randn(10, 5, dtype=D64)
    r = M.margin_bound(m, space, theta, X, torch.arange(10) % 3, margin=0.5)
    assert not r["bias_free"] and r["not_covered"] == ["fc1.bias", "fc2.bias"]


def test_circular_conv_operator_norm_equals_its_fourier_closed_form():
    """Stride-1 circular convolution on n x n inputs: the singular values are those of the c_out x c_in matrices
    K_hat(u, v) = sum_{a,b} K[:, :, a, b] exp(-2 pi i (u a + v b) / n) (Sedghi et al. 2019)."""
    torch.manual_seed(0)
    conv = nn.Conv2d(2, 3, 3, padding=1, padding_mode="circular", bias=False).to(D64)
    n = 6
    op = {"module": conv, "in_shape": (2, n, n), "out_shape": (3, n, n)}
    K = conv.weight.detach().numpy()
    a = np.arange(3) - 1                                      # cross-correlation offsets of a padding-1 kernel
    k = np.arange(n)
    phase = np.exp(2j * np.pi * np.outer(k, a) / n)           # [n, 3]
    Khat = np.einsum("oiab,ua,vb->uvoi", K, phase, phase)
    closed = max(np.linalg.svd(Khat[u, v], compute_uv=False)[0] for u in range(n) for v in range(n))
    assert M.spectral_norm(op, conv.weight) == pytest.approx(closed, rel=1e-12)
    reshaped = float(torch.linalg.matrix_norm(conv.weight.detach().reshape(3, -1), ord=2))
    assert abs(closed - reshaped) > 1e-3                      # the reshaped kernel is a different number


def test_power_iteration_matches_the_dense_operator_for_strided_zero_padded_convs(monkeypatch):
    torch.manual_seed(1)
    conv = nn.Conv2d(3, 4, 3, stride=2, padding=1, bias=False).to(D64)
    op = {"module": conv, "in_shape": (3, 8, 8), "out_shape": (4, 4, 4)}
    dense = M.spectral_norm(op, conv.weight)
    eye = torch.eye(192, dtype=D64).view(192, 3, 8, 8)
    A = conv(eye).reshape(192, -1).detach()
    assert dense == pytest.approx(float(torch.linalg.matrix_norm(A, ord=2)), rel=1e-12)
    monkeypatch.setattr(M, "DENSE_LIMIT", 0)
    assert M.spectral_norm(op, conv.weight, tol=1e-13, iters=2000) == pytest.approx(dense, rel=1e-6)


def test_cnn_layers_use_their_input_shapes():
    m, space, theta = model_and_theta("resnet20", (3, 4, 4), 10)
    norms = M.layer_norms(m, space, theta, torch.zeros(1, 3, 4, 4, dtype=D64))
    first = norms[0]
    assert first["name"] == "conv1.weight" and first["in_shape"] == [3, 4, 4]
    assert all(l["spectral"] > 0 and l["frobenius"] > 0 for l in norms)
    assert norms[-1]["kind"] == "Linear"


def test_cli_uses_fedsmoo_s_and_refuses_state_without_it(tmp_path, tiny_cfg, capsys):
    from fedlab_analysis import probe
    from fedlab_analysis.trainers.loop import train
    kw = {"model": "mlp", "model_kwargs": {"widths": [8], "bias": False}, "rounds": 2}
    train(tiny_cfg(algo="fedsmoo", **kw), tmp_path / "smoo")
    out = tmp_path / "m.json"
    assert probe.main(["margin", str(tmp_path / "smoo"), "--margin", "0.1", "--json", str(out),
                       "--plot", str(tmp_path / "m.png")]) == 0
    r = json.loads(out.read_text())
    assert r["perturbation"] == "state" and r["perturbation_norm"] > 0 and r["bias_free"]
    assert r["bound"] >= r["margin_loss"] and (tmp_path / "m.png").exists()
    train(tiny_cfg(algo="fedavg", **kw), tmp_path / "avg")
    assert probe.main(["margin", str(tmp_path / "avg"), "--perturb", "state"]) == 2
    assert "--perturb sam" in capsys.readouterr().err
    assert probe.main(["margin", str(tmp_path / "avg"), "--perturb", "sam", "--json", str(out)]) == 0
    r = json.loads(out.read_text())                      # the common default radius, not the run's 0.1
    assert r["perturbation_norm"] == pytest.approx(0.05, rel=1e-5) and r["rho_source"] == "default"
