"""FedCM theory checks (Lemmas 4.1, B.7-B.11, Thm 5.1) and the quadratic / logistic toy families they run on."""

import numpy as np
import pytest
import torch
from torch.func import grad, hessian

from fedlab_analysis.theory import fedcm
from fedlab_analysis.theory.claims import HOLDS, INCONCLUSIVE, NOT_CHECKED, OUTSIDE, VIOLATED
from fedlab_analysis.theory.toys import DT, make_logistic, make_quadratics, participation_mask


# ---- toys: exact constants against autograd / brute force -------------------------------------------
@pytest.mark.parametrize("shared", [True, False])
def test_quadratics_exact(shared):
    q = make_quadratics(8, 4, shared=shared, L=2.0, mu=0.2, seed=3)
    x = torch.randn(4, dtype=DT, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(hessian(q.f)(x), q.A_bar, atol=1e-12)
    assert torch.allclose(grad(q.f)(x), q.grad_f(x), atol=1e-12)
    assert abs(q.L - 2.0) < 1e-12 and abs(q.mu - 0.2) < 1e-12                  # spectrum end points exact
    assert float(q.grad_f(q.x_star).norm()) < 1e-12
    g = q.grads_at(q.x_star)                                                   # sigma_g^2 by brute force
    brute = sum(float((g[i] - g.mean(0)).pow(2).sum()) for i in range(8)) / 8
    assert abs(float(q.sigma_g2(q.x_star)) - brute) < 1e-12
    if shared:
        assert torch.allclose(q.x_star, q.b.mean(0), atol=1e-12)             # T1: x* = mean b_i


def test_logistic_exact():
    p = make_logistic(6, 30, 4, dir_alpha=0.3, seed=1)
    x = torch.randn(4, dtype=DT, generator=torch.Generator().manual_seed(1))
    assert torch.allclose(hessian(p.f)(x), p.hessian_f(x), atol=1e-12)
    assert torch.allclose(grad(p.f)(x), p.grad_f(x), atol=1e-12)
    assert float(p.grad_f(p.x_star).norm()) < 1e-12
    H0 = hessian(lambda w: p.loss(p.at(w)).max())(torch.zeros(4, dtype=DT))   # sup of the Hessian is at w = 0
    assert float(torch.linalg.eigvalsh(H0)[-1]) <= p.L + 1e-12
    idx = torch.arange(30).expand(6, 30)
    W = torch.randn(6, 4, dtype=DT, generator=torch.Generator().manual_seed(2))
    assert torch.allclose(p.grad(W, idx), p.grad(W), atol=1e-14)


def test_participation_mask_counts_and_seed():
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    m = participation_mask((7,), 20, torch.tensor([3, 5, 7, 1, 2, 20, 4]), g1)
    assert m.sum(-1).tolist() == [3, 5, 7, 1, 2, 20, 4]
    assert torch.equal(m, participation_mask((7,), 20, torch.tensor([3, 5, 7, 1, 2, 20, 4]), g2))
    b = participation_mask((50,), 10, None, torch.Generator().manual_seed(0), p=0.05)
    assert bool(b.any(-1).all())                                               # empty rounds are re-drawn


# ---- identities to machine precision ---------------------------------------------------------------------
def test_exact_identities():
    for c in (fedcm.check_lemma41(T=10), fedcm.check_lemmaB7(T=15), fedcm.check_heavy_ball(T=60)):
        assert c.value <= 1e-10 and c.verdict == HOLDS, (c.id, c.measured)
    c = fedcm.check_lemmaB10(T=15)
    assert c.verdict == HOLDS and c.value <= 1e-12


def test_alpha_one_is_fedavg():
    q = make_quadratics(6, 3, shared=False, seed=0)
    r = fedcm.simulate(q, alpha=1.0, K=4, eta_l=0.1, T=5, S=3, seed=2)
    x = r["x"][0, 0].clone()
    for t in range(5):                                                         # plain FedAvg, same masks
        sel = r["mask"][t, 0].bool()
        y = x.expand(6, 3).clone()
        for _ in range(4):
            y = y - 0.1 * q.grad(y)
        x = y[sel].mean(0)
        assert float((x - r["x"][t + 1, 0]).abs().max()) < 1e-12


def test_dispersion_closed_form_and_alpha2():
    exact, rate = fedcm.check_dispersion(T=20)
    assert exact.value <= 1e-10
    assert rate.verdict == HOLDS and abs(rate.value - 2) < 0.15          # note: steps 4.0, 8.6, 9.6 ~ alpha^2


def test_fixed_point_bias():
    exact, rate = fedcm.check_fixed_point_bias(alphas=(0.01, 0.03, 0.1, 1.0))
    assert exact.value <= 1e-10
    assert rate.verdict == HOLDS and abs(rate.value - 2) < 0.2               # bias ~ alpha^2, never 0
    assert min(rate.details["bias"]) > 0


# ---- lemma inequalities, and a verdict that follows the regime -------------------------------------------
def test_drift_and_moment_bounds_hold_loosely():
    b8 = fedcm.check_drift_B8(T=15, R=4)
    assert b8.verdict == HOLDS and b8.value < 0.2                              # loose, as the note expects
    b11 = fedcm.check_second_moments_B11(T=15, R=4)
    assert b11.verdict == HOLDS and b11.value < 1


def test_drift_bound_outside_regime():
    c = fedcm.check_drift_B8(T=10, R=2, eta_scale=3.0)                         # eta_l = 3/(4LK) > 1/(4LK)
    assert c.verdict == OUTSIDE and c.details["in_regime"] is False


# ---- the paper's claims the note says do not reproduce -----------------------------------------------------
def test_theorem51_alpha_reading_is_not_checked():
    bound_claim, _ = fedcm.check_alpha_tradeoff(T=40, R=2, alphas=(0.05, 0.3, 1.0))
    assert bound_claim.verdict == NOT_CHECKED and bound_claim.value == 1.0   # argmin at the O() constants = 1
    assert len(bound_claim.details["argmin_alpha"]) == 9                      # 3 hidden constants x 3 horizons
    b = bound_claim.details["bound"]
    assert all(u > v for u, v in zip(b, b[1:]))                               # monotone decreasing in alpha


def test_speedup_noise_floor_but_not_bound():
    floor, bnd = fedcm.check_speedup_KS(Ks=(1, 8), Ss=(1, 8), T=60, R=6)
    assert floor.verdict == HOLDS and abs(floor.value + 1) < 0.2
    assert bnd.verdict == VIOLATED and bnd.value > -0.2


def test_convex_rate_quick():
    c = fedcm.check_convex_rate(Ts=(50, 100, 200), R=4)
    k, lo, hi = c.details["fit_95"]
    assert c.value == k <= -0.4 and lo < k < hi                     # an interval from the R replicates
    assert c.verdict == fedcm.rate_upper(c.details["fit_95"], c.details["control_constant_step_fit_95"], -0.5)


def test_rate_verdict_needs_the_interval_and_a_failing_control():
    assert fedcm.rate_upper((-1.0, -1.2, -0.8), (0.0, -0.2, 0.2), -0.5) == HOLDS
    assert fedcm.rate_upper((-1.0, -1.2, -0.8), (-1.0, -1.2, -0.8), -0.5) == INCONCLUSIVE   # schedule-blind
    assert fedcm.rate_upper((-1.0, -2.0, 0.1), (0.0, -0.2, 0.2), -0.5) == INCONCLUSIVE      # too wide
    assert fedcm.rate_upper((0.0, -0.2, 0.2), (0.0, -0.2, 0.2), -0.5) == VIOLATED


def test_participation_robustness_not_reproduced():
    c = fedcm.check_participation(Ns=(20, 200), T=60, K=5, R=4)
    assert c.verdict == VIOLATED
    errs = c.details["errors"]
    assert errs["SCAFFOLD"][-1] < errs["FedCM"][-1]                           # note: SCAFFOLD best at every N


# ---- the paired alpha sweep and the perturbations the power checks switch on ---------------------------------
def test_pair_gives_every_setting_the_same_draws():
    q = make_quadratics(8, 3, shared=False, seed=1)
    kw = dict(K=3, eta_l=0.05, T=6, S=3, sigma=0.5, seed=4)
    r = fedcm.simulate(q, alpha=[0.2] * 3 + [0.2] * 3, B=6, pair=3, **kw)          # two settings, 3 replicates
    assert torch.equal(r["x"][:, :3], r["x"][:, 3:]) and torch.equal(r["mask"][:, :3], r["mask"][:, 3:])
    assert not torch.equal(r["x"][:, 0], r["x"][:, 1])                            # replicates still differ
    u = fedcm.simulate(q, alpha=[0.2] * 6, B=6, **kw)                             # unpaired: every run its own
    assert not torch.equal(u["x"][:, :3], u["x"][:, 3:])


def test_uniform_client_weight_is_the_plain_average_and_skewed_is_not():
    q = make_quadratics(6, 3, shared=False, seed=2)
    kw = dict(alpha=0.3, K=3, eta_l=0.05, T=8, S=3, sigma=0.2, B=2, seed=5)
    base = fedcm.simulate(q, **kw)["x"]
    assert torch.equal(fedcm.simulate(q, client_weight=torch.ones(6, dtype=DT), **kw)["x"], base)
    assert float((fedcm.simulate(q, client_weight=fedcm.skewed(6), **kw)["x"] - base).abs().max()) > 1e-3


def test_biased_toy_adds_a_constant_of_the_given_norm():
    q = make_quadratics(5, 4, shared=False, seed=0)
    y = torch.randn(2, 5, 4, dtype=DT, generator=torch.Generator().manual_seed(0))
    diff = fedcm.Biased(q, 0.3).grad(y) - q.grad(y)
    assert torch.allclose(diff.norm(dim=-1), torch.full((2, 5), 0.3, dtype=DT), atol=1e-14)
    assert fedcm.Biased(q, 0.3).f_star == q.f_star                                # f, f* are the toy's own


def test_u_shape_rule_on_exact_inputs():
    base = np.array([1.0, 0.5, 0.6, 0.9])[:, None] + np.linspace(-0.01, 0.01, 6)[None]   # paired offsets
    assert fedcm.u_shape(base)[0] == HOLDS and fedcm.u_shape(base)[1] == 1
    assert fedcm.u_shape(base[::-1].copy() * np.array([[1.0], [3.0], [3.0], [0.2]]))[0] == VIOLATED
    noisy = base + np.array([[0.0, 0.9, -0.9, 0.3, -0.3, 0.0]] * 4) * np.array([[0], [1], [1], [0]])
    assert fedcm.u_shape(noisy)[0] == INCONCLUSIVE                                 # noise swamps the interior
    assert fedcm.u_shape(base[:, :3])[4] > fedcm.u_shape(base)[4]                  # fewer replicates, wider


def test_speedup_bound_control_and_its_perturbation():
    kw = dict(Ks=(1, 8), Ss=(1, 8), T=20, R=2)
    assert fedcm.check_speedup_KS(G2=0.0, **kw)[1].verdict == HOLDS                # no G^2: slope -1/2
    bad = fedcm.check_speedup_KS(G2=0.0, drop_noise_term=True, **kw)[1]
    assert bad.verdict == VIOLATED and abs(bad.value + 0.75) < 0.05
