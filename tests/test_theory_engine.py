"""The toys through the trainer: the engine's FedCM and FedInit agree with the independent numpy
simulators of theory/fedcm.py and theory/fedinit.py to 1e-10 in float64, and the toy data are the quadratic."""
import pytest
import torch

from fedlab_analysis.theory import fedcm, fedinit
from fedlab_analysis.theory.engine_toys import client_data, half_mse, half_mse_grads, make_run, trajectory
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


def test_engine_feddyn_matches_numpy_simulator():
    from fedlab_analysis.theory import fedsmoo
    prob = fedsmoo.make_toy(6, 4, seed=4)
    w0 = torch.zeros(4, dtype=DT)
    ref = fedsmoo.feddyn_code(prob, T=15, K=4, eta=0.05, lamb=0.1, w0=w0)
    eng = trajectory(make_run(prob, "feddyn", K=4, lr=0.05, x0=w0, lamb=0.1), 15)["w"]
    assert float((eng - ref).abs().max()) < 1e-10 and float(ref[-1].abs().max()) > 0.1


def test_engine_sam_family_matches_numpy_up_to_the_trainers_norm_epsilon():
    """The trainer normalises by ||v|| + 1e-7 (as the authors' simulator), the toys exactly: the two agree to
    O(1e-7 rho / ||v||), and exactly in FedAvg's limit rho = 0."""
    from fedlab_analysis.theory import fedlesam
    prob = make_quadratics(6, 4, shared=False, seed=5)
    w0 = prob.x_star + 3.0
    for algo in ("fedsam", "fedlesam"):
        ref = fedlesam.simulate(prob, method=algo, T=12, E=4, eta_l=0.05, eta_g=1.0, rho=0.05, w0=w0)["w"]
        eng = trajectory(make_run(prob, algo, K=4, lr=0.05, x0=w0, rho=0.05), 12)["w"]
        assert float((eng - ref).abs().max()) < 1e-7, algo
        zero = trajectory(make_run(prob, algo, K=4, lr=0.05, x0=w0, rho=0.0), 12)["w"]
        fedavg = fedlesam.simulate(prob, method="fedavg", T=12, E=4, eta_l=0.05, w0=w0)["w"]
        assert float((zero - fedavg).abs().max()) < 1e-10, algo


def test_engine_scaffold_matches_the_scaffold_branch_of_fedcm_simulate():
    """fedcm.simulate(algo="scaffold") is a batched copy of the engine's Scaffold part (option II): pinned."""
    prob = make_quadratics(6, 4, shared=False, seed=6)
    x0 = prob.x_star + 1.0
    ref = fedcm.simulate(prob, algo="scaffold", K=4, eta_l=0.05, eta_g=1.0, T=15, x0=x0)["x"][:, 0]
    eng = trajectory(make_run(prob, "scaffold", K=4, lr=0.05, x0=x0), 15)["w"]
    assert float((eng - ref).abs().max()) < 1e-10
    avg = fedcm.simulate(prob, alpha=1.0, K=4, eta_l=0.05, T=15, x0=x0)["x"][:, 0]
    assert float((avg - ref).abs().max()) > 1e-3                            # the correction matters here


def test_engine_fedsmoo_corrected_ascent_matches_numpy_up_to_the_norm_epsilon():
    """fedsmoo.simulate's corrected ascent (r > 0) is a batched copy of the engine's SMOO part: pinned, up to
    the trainer's ||v|| + 1e-7 normalisation."""
    from fedlab_analysis.theory import fedsmoo
    prob = fedsmoo.make_toy(6, 4, seed=7)
    w0 = torch.zeros(4, dtype=DT)
    ref = fedsmoo.simulate(prob, method="fedsmoo", T=12, K=4, eta=0.05, beta=10.0, r=0.1, w0=w0)["w"]
    eng = trajectory(make_run(prob, "fedsmoo", K=4, lr=0.05, x0=w0, rho=0.1, lamb=0.1), 12)["w"]
    assert float((eng - ref).abs().max()) < 1e-6
    r0 = fedsmoo.simulate(prob, method="fedsmoo", T=12, K=4, eta=0.05, beta=10.0, r=0.0, w0=w0)["w"]
    assert float((r0 - ref).abs().max()) > 1e-3                             # the ascent matters here


@pytest.mark.parametrize("algo, kw", [("fedavg", {}), ("feddyn", {}), ("fedsmoo", {"rho": 0.05}),
                                      ("fedcm", {"alpha": 0.3}), ("fedinit", {"beta": 0.1}),
                                      ("fedlesam", {"rho": 0.05}), ("fedavg", {"batch": 2, "active_ratio": 0.5})])
def test_closed_form_toy_gradient_is_the_engines_vmap_grad_bit_for_bit(algo, kw):
    """make_run's Run.batched_grad (half_mse_grads) reproduces vmap(grad(half_mse)) exactly, full batch and
    minibatch, every Part; the same gradient scaled by 0.9 does not."""
    prob = make_quadratics(6, 5, shared=False, seed=2)
    x0 = prob.x_star + 1.0

    def traj(grad_fn):
        run = make_run(prob, algo, K=3, lr=0.05, x0=x0, seed=1, **kw)
        assert run.batched_grad is half_mse_grads             # the toys' default
        run.batched_grad = grad_fn
        return trajectory(run, 4)["w"]

    vmapped = traj(None)                                       # None: the engine's own vmap(grad(...))
    assert torch.equal(traj(half_mse_grads), vmapped)
    scaled = lambda p, xb, yb, W: {k: 0.9 * v for k, v in half_mse_grads(p, xb, yb, W).items()}   # noqa: E731
    assert (traj(scaled) - vmapped).abs().max() > 1e-3
