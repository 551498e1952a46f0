"""Adaptive sharpness (Kwon et al. 2021, ASAM) against closed forms in float64, and its scale invariance."""
import pytest
import torch

from fedlab_analysis.errors import UserError
from fedlab_analysis.probes import sharpness as S

D64 = torch.float64


def f_lin(theta, x):
    return x @ theta


def lstsq(n=50, P=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, P, generator=g, dtype=D64) * torch.linspace(0.4, 2.0, P, dtype=D64)
    y = torch.randn(n, generator=g, dtype=D64)
    return X, y, 2 * X.T @ X / n, torch.linalg.lstsq(X, y).solution


def test_one_step_is_asams_closed_form_on_a_quadratic():
    X, y, H, w_star = lstsq()
    w = w_star + torch.tensor([0.8, -0.3, 0.0, 0.5, -1.2], dtype=D64)
    rho, eta = 0.15, 0.01
    t = w.abs() + eta
    g = 2 * X.T @ (X @ w - y) / len(y)
    eps = rho * t * t * g / (t * g).norm()                     # ASAM Eq. (10): rho T^2 g / ||T g||
    closed = float(g @ eps + 0.5 * eps @ H @ eps)               # exact increase of a quadratic
    r = S.adaptive_sharpness(f_lin, w, X, y, rho, eta=eta, loss="mse", batch_size=7, return_delta=True)
    assert r["sharpness"] == pytest.approx(closed, rel=1e-12)
    assert torch.allclose(r["delta"], eps, rtol=1e-12, atol=0)
    assert float((r["delta"] / t).norm()) == pytest.approx(rho, rel=1e-12)   # on the ellipsoid's boundary
    # dropping T (t = 1) gives plain sharpness, a different number here
    plain = S.global_sharpness(f_lin, w, X, y, rho, loss="mse")["sharpness"]
    assert abs(plain - closed) > 0.1 * abs(closed)


def test_at_the_minimum_quadratic_and_ascent_give_rho2_lambda_max_of_THT_over_2():
    X, y, H, w_star = lstsq(seed=2)
    rho, eta = 0.2, 0.05
    t = w_star.abs() + eta
    exact = rho ** 2 * float(torch.linalg.eigvalsh(t[:, None] * H * t[None, :])[-1]) / 2
    q = S.adaptive_sharpness(f_lin, w_star, X, y, rho, eta=eta, method="quadratic", loss="mse")
    assert q["sharpness"] == pytest.approx(exact, rel=1e-9)
    a = S.adaptive_sharpness(f_lin, w_star, X, y, rho, eta=eta, method="ascent", steps=100, start="random",
                             loss="mse")
    assert a["sharpness"] == pytest.approx(exact, rel=1e-7)
    wrong = rho ** 2 * float(torch.linalg.eigvalsh(H)[-1]) / 2      # the same without T_w
    assert abs(wrong - exact) > 0.1 * exact


def relu_net(W1, b1, W2, b2):
    return torch.cat([W1.flatten(), b1, W2.flatten(), b2])


def f_relu(theta, x, d=4, h=6, k=3):
    W1, b1, W2, b2 = theta.split([h * d, h, k * h, k])
    W1, W2 = W1.view(h, d), W2.view(k, h)
    return torch.relu(x @ W1.T + b1) @ W2.T + b2


@pytest.mark.parametrize("method", ["one_step", "ascent"])
def test_rescaling_a_relu_layer_pair_leaves_adaptive_sharpness_unchanged(method):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(60, 4, generator=g, dtype=D64)
    y = torch.randint(0, 3, (60,), generator=g)
    W1, b1 = torch.randn(6, 4, generator=g, dtype=D64), torch.randn(6, generator=g, dtype=D64) * 0.1
    W2, b2 = torch.randn(3, 6, generator=g, dtype=D64), torch.randn(3, generator=g, dtype=D64) * 0.1
    c = 5.0
    th, th_c = relu_net(W1, b1, W2, b2), relu_net(W1 * c, b1 * c, W2 / c, b2)
    assert torch.allclose(f_relu(th, X), f_relu(th_c, X), rtol=1e-12, atol=1e-12)   # the same function
    kw = dict(method=method, steps=5)
    a, a_c = (S.adaptive_sharpness(f_relu, t, X, y, 0.05, eta=0.0, **kw)["sharpness"] for t in (th, th_c))
    assert a_c == pytest.approx(a, rel=1e-9)
    p, p_c = (S.global_sharpness(f_relu, t, X, y, 0.05, method, 5)["sharpness"] for t in (th, th_c))
    assert abs(p_c - p) > 0.2 * abs(p)                 # plain sharpness is not invariant
    # with eta > 0 the invariance is approximate (eta perturbs zero-ish weights); still much closer than plain
    e, e_c = (S.adaptive_sharpness(f_relu, t, X, y, 0.05, eta=0.01, **kw)["sharpness"] for t in (th, th_c))
    assert abs(e_c - e) / abs(e) < 0.5 * abs(p_c - p) / abs(p)


def test_bad_eta_is_a_user_error():
    X, y, _, w = lstsq()
    for eta in (-0.1, float("nan"), "x"):
        with pytest.raises(UserError, match="eta"):
            S.adaptive_sharpness(f_lin, w, X, y, 0.1, eta=eta, loss="mse")
