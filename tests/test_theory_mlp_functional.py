"""The theory's non-convex toy (theory/toys_nonconvex.py: BiasFreeMLP) writes its forward pass by hand on the
ParamSpace views, batched over client tables. It must be the same function as the package's one flat-vector model,
``params.functional``, which the trainer and the probes use: pinned here in float64, client by client."""
import pytest
import torch

from fedlab_analysis.params import functional
from fedlab_analysis.theory.toys_nonconvex import BiasFreeMLP


def _toy(seed=0, n=3, m=5, din=4):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, m, din, generator=g, dtype=torch.float64)
    Y = torch.randint(0, 3, (n, m), generator=g)
    return BiasFreeMLP(X, Y, X[0], Y[0], widths=(6, 5), n_classes=3, seed=seed)


def _pinned(p, logits):
    f = functional(p.model.double(), p.space)
    W = p.theta0 + 0.1 * torch.randn(p.n, p.d, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    Z = logits(W, p.X)                                          # [n, m, C]: every client's table row at once
    for i in range(p.n):
        torch.testing.assert_close(Z[i], f(W[i], p.X[i]), rtol=1e-12, atol=1e-12)


def test_the_toy_mlp_is_the_packages_functional_model():
    p = _toy()
    _pinned(p, p.logits)


def test_the_pin_catches_a_broken_forward():
    p = _toy()
    broken = lambda W, X: BiasFreeMLP.logits(p, W, X).relu()    # noqa: E731  a ReLU on the output layer too
    with pytest.raises(AssertionError):
        _pinned(p, broken)
