"""The toys through the trainer: the engine's FedCM and FedInit agree with the independent numpy
simulators of theory/fedcm.py and theory/fedinit.py to 1e-10 in float64, and the toy data are the quadratic."""
import torch

from fedlab_analysis.theory import fedcm, fedinit
from fedlab_analysis.theory.engine_toys import client_data, half_mse, make_run, trajectory
from fedlab_analysis.theory.toys import DT, make_quadratics


def test_client_data_is_the_quadratic():
    prob = make_quadratics(4, 3, shared=False, seed=1)
    X, y = client_data(prob)
    w = torch.randn(4, 3, dtype=DT, generator=torch.Generator().manual_seed(0)).requires_grad_(True)
    f = torch.stack([half_mse(X[3 * i:3 * i + 3] @ w[i], y[3 * i:3 * i + 3]) for i in range(4)])
    (g,) = torch.autograd.grad(f.sum(), w)
    assert torch.allclose(f, prob.loss(w.detach()), rtol=0, atol=1e-12)
    assert torch.allclose(g, prob.grad(w.detach()), rtol=0, atol=1e-12)


def test_engine_fedcm_matches_numpy_simulator():
    prob = make_quadratics(8, 4, shared=False, seed=2)
    x0 = prob.x_star + 1.0
    ref = fedcm.simulate(prob, alpha=0.2, K=4, eta_l=0.05, eta_g=1.5, T=25, x0=x0)
    eng = fedcm.engine_trace(prob, alpha=0.2, K=4, eta_l=0.05, eta_g=1.5, T=25, x0=x0)
    assert float((eng["x"] - ref["x"][:, 0]).abs().max()) < 1e-10
    assert float((eng["Delta"] - ref["Delta"][:, 0]).abs().max()) < 1e-10
    assert float((eng["Dtilde"] - ref["Dtilde"][:, 0]).abs().max()) < 1e-10
    assert float((eng["x"][-1] - eng["x"][0]).abs().max()) > 0.1            # it moved: not a vacuous match


def test_engine_fedinit_matches_numpy_simulator():
    prob = make_quadratics(8, 4, shared=False, seed=3)
    w0 = prob.x_star + 1.0
    ref = fedinit.simulate(prob, beta=0.3, K=5, eta=0.05, T=20, w0=w0)
    eng = trajectory(make_run(prob, "fedinit", K=5, lr=0.05, x0=w0, beta=0.3), 20)
    delta = (eng["last"] - eng["w"].unsqueeze(1)).pow(2).sum(-1).mean(-1)     # Delta^t over all clients
    assert float((eng["w"] - ref["w"][:, 0]).abs().max()) < 1e-10
    assert float((delta - ref["Delta"][:, 0]).abs().max()) < 1e-10
    off = trajectory(make_run(prob, "fedinit", K=5, lr=0.05, x0=w0, beta=0.0), 20)["w"]
    assert float((off - eng["w"]).abs().max()) > 1e-3                     # beta matters with distinct Hessians
