"""FedALS theory checks (Thms 4.1, 4.3, B.1; App. A, C) and the least-squares toy with its closed-form risk."""
import numpy as np
import torch
from torch.func import grad, hessian

from fedlab_analysis.theory import fedals
from fedlab_analysis.theory.claims import HOLDS, INCONCLUSIVE, VIOLATED
from fedlab_analysis.theory.toys import DT, make_regression, make_task


# ---- the least-squares toy ---------------------------------------------------------------------------------
def test_least_squares_exact():
    p = make_regression(4, 30, 3, het=1.0, lam=0.2, seed=2)
    x = torch.randn(3, dtype=DT, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(hessian(p.f)(x), p.A_bar, atol=1e-12)
    assert torch.allclose(grad(p.f)(x), p.grad_f(x), atol=1e-12)
    assert float(p.grad_f(p.x_star).norm()) < 1e-12
    assert float(p.grad(p.b).norm()) < 1e-10                                   # local ERMs are stationary
    W = torch.randn(4, 3, dtype=DT, generator=torch.Generator().manual_seed(1))
    assert torch.allclose(p.grad(W, torch.arange(30).expand(4, 30)), p.grad(W), atol=1e-13)
    assert torch.allclose(p.sample_grads(W).mean(-2), p.grad(W), atol=1e-13)


def test_population_risk_matches_monte_carlo():
    task = make_task(3, 4, het=1.5, noise=0.7, scale_spread=0.5, seed=4)
    w = torch.randn(4, dtype=DT, generator=torch.Generator().manual_seed(3))
    X, y = task.sample(200000, np.random.default_rng(0))
    mc = 0.5 * ((X @ w) - y).pow(2).mean(-1)                                    # per client
    exact = task.risk(w)
    assert torch.allclose(mc, exact, rtol=0.02)


# ---- identities and bounds ----------------------------------------------------------------------------
def test_lemma_a1_by_monte_carlo():
    c = fedals.check_lemma_a1(R=1500)
    assert c.verdict == HOLDS and abs(c.value) < 3
    assert "z_wrong_weight" in c.details                                   # its power is measured on the same data


def test_stability_22_exact_and_23_holds():
    eq22, eq23 = fedals.check_stability_22_23(R=100)
    assert eq22.value <= 1e-10 and eq22.verdict == HOLDS
    assert eq23.verdict == HOLDS and eq23.value <= 1


def test_thm41_bound_and_iid_scaling_is_1_over_K():
    bound, het, iid = fedals.check_thm41(Ks=(1, 4, 16), hets=(0.0, 3.0), R=150)
    assert bound.verdict == HOLDS and het.verdict == HOLDS
    assert iid.verdict == VIOLATED and abs(iid.value + 1) < 0.3               # slope -1, not -2
    rows = [r for r in iid.details["rows"] if r["het"] == 0.0 and r["K"] > 1]
    assert all(r["delta_k"] > 0.1 * r["gen_k"] for r in rows)                 # delta_k != 0 in the iid case


def test_thm_b1_bound():
    c = fedals.check_thm_b1(R=100, taus=(5,))
    assert c.verdict == HOLDS and c.value < 1


def test_thm43_gap_falls_with_tau():
    gap, opt = fedals.check_thm43_tau(T=50, taus=(1, 25), R=40)
    assert gap.verdict == HOLDS and opt.verdict == HOLDS


def test_participation_identities_and_gap():
    ids, fixed, agg = fedals.check_participation(R=100)
    assert ids.value <= 1e-10 and fixed.value <= 1e-10
    assert ids.details["caseI_merged_err"] > 1e-3    # merging duplicates is another identity: not the lemma's
    assert agg.verdict == VIOLATED and agg.details["gap_agg_mean"] > 0        # participants fit themselves
    iid = fedals.check_participation(R=100, het=0.0)[2]
    assert iid.verdict == HOLDS and abs(iid.details["gap_agg_mean"]) < 1e-12   # identical clients: no gap


def test_table2_communication_arithmetic():
    c = fedals.check_comm_table2()
    assert c.verdict == HOLDS and c.value < 5e-4
    assert fedals.check_comm_table2(h=6500).verdict == VIOLATED             # a wrong head size is caught


def test_participation_schemes_are_distributions_and_match_lemmas():
    Kw = np.random.default_rng(0).dirichlet(np.ones(4))
    x = np.random.default_rng(1).standard_normal(4)
    sch = fedals.participation_schemes(4, 2, Kw)
    assert abs(sum(p for p, _ in sch["I"]) - 1) < 1e-12 and abs(sum(p for p, _ in sch["II"]) - 1) < 1e-12
    assert all(abs(w.sum() - 1) < 1e-12 for _, w in sch["I"])              # 1/K_hat per draw sums to one
    # Lemma C.1's first identity through the weights the check aggregates with: E_P sum_k w_k x_k = E_K x
    assert abs(sum(p * (w * x).sum() for p, w in sch["I"]) - (Kw * x).sum()) < 1e-10
    u = np.full(4, 0.25)
    assert abs(sum(p * (w * w * x).sum() for p, w in fedals.participation_schemes(4, 2, u)["II"])
               - 4 / 2 * (u * u * x).sum()) < 1e-10                           # Lemma C.2, uniform K


def test_partial_bound_closed_form():
    g, dl = torch.tensor([0.3, 0.5, 0.2], dtype=DT), torch.tensor([0.4, 0.1, 0.9], dtype=DT)
    u = np.full(3, 1 / 3)
    want = sum((4.0 / 4 * g[k] + 2 * 2 * 0.5 * (dl[k] * g[k]).sqrt()) / 3 for k in range(3))   # L/mu = 4, K_hat = 2
    assert abs(fedals.partial_bound(4.0, 1.0, u, 2, "I", g, dl) - float(want)) < 1e-12
    assert abs(fedals.partial_bound(4.0, 1.0, u, 2, "II", g, dl) - float(want)) < 1e-12     # equal for uniform K


def test_partial_participation_bounds_73_74():
    b73, b74 = fedals.check_partial_bounds(R=100, hets=(0.0, 1.0), Khats=(3,))
    for c in (b73, b74):
        assert c.verdict == HOLDS and c.slack > 1 and c.regime.startswith("inside")
        iid, het = c.details["rows"]
        assert abs(iid["participation_gap"]) < 1e-12                        # identical clients: no gap
        assert het["participation_gap"] > het["out_of_sample"] > 0          # (71) fails; the bound holds anyway


def test_partial_bounds_fail_at_high_heterogeneity_inside_their_regime():
    b73, b74 = fedals.check_partial_bounds(R=100, hets=(0.0, 10.0), Khats=(1,))
    for c in (b73, b74):
        assert c.verdict == VIOLATED and c.regime.startswith("inside")     # the bound only asks strong convexity
        assert "het 0: holds at K_hat 1" in c.measured and "het 10: violated at K_hat 1" in c.measured


def test_partial_bounds_sweep_the_full_grid_and_judge_cells_with_their_noise():
    b73, _ = fedals.check_partial_bounds(R=50, hets=(0.0, 3.0), Khats=(1, 2))
    assert [(r["het"], r["K_hat"]) for r in b73.details["rows"]] == [(0.0, 1), (0.0, 2), (3.0, 1), (3.0, 2)]
    r = dict(b73.details["rows"][0])
    r.update(gen=1.0, bound=1.0, gen_se=0.1)                              # at the bound, within 3 SE
    assert fedals._cell_verdict(r) == INCONCLUSIVE
    r.update(gen=1.5, ratio=1.5)
    assert fedals._cell_verdict(r) == VIOLATED and "violated at K_hat 1 (1.50x)" in fedals.grid_text([r])


# ---- bound (9) through Eq. (57), and the perturbations the power checks switch on -----------------------------
def test_rounds_57_terms_are_signed_as_their_definitions():
    task = make_task(3, 4, het=1.0, noise=1.0, seed=1)
    t = fedals.rounds_57(task, 3, 5, 20, 2, 0.05, 0.1, 30, 0)
    assert len(t["gap"]) == 4 and t["a"].shape == (4, 3)
    assert bool((t["a"] - t["c"] >= -1e-12).all())            # E eps_k >= 0: A* minimises the ridge risk on Z
    assert bool((t["b"] >= -1e-12).all())                      # E(delta_k + eps_k) = E[R_Z(A) - R_Z(A*)] >= 0
    assert t["mu"] >= 0.1 - 1e-12 and t["L"] > t["mu"]         # ridge: mu >= lam


def test_bound57_closed_form():
    t = {"a": torch.tensor([[0.4, 0.2]], dtype=DT), "b": torch.tensor([[0.9, 0.1]], dtype=DT),
         "c": torch.tensor([[0.3, 0.1]], dtype=DT), "L": 4.0, "mu": 1.0}
    want = np.mean([2 * 4 / 4 * a + np.sqrt(32) / 2 * np.sqrt(b * c) for a, b, c in ((0.4, 0.9, 0.3), (0.2, 0.1, 0.1))])
    assert abs(fedals.bound57(t, 2) - want) < 1e-12
    want38 = np.mean([2 * a + np.sqrt(32) / 2 * np.sqrt(b * a) for a, b in ((0.4, 0.9), (0.2, 0.1))])
    assert abs(fedals.bound57(t, 2, "38") - want38) < 1e-12


def test_bound9_holds_loosely_and_is_vacuous():
    c = fedals.check_bound9(T=20, R=30, hets=(0.0, 2.0), taus=(1, 10), tau_het=10)
    assert c.verdict == HOLDS and c.kind == fedals.VACUOUS and c.slack > 1 and c.regime.startswith("inside")
    flipped = fedals.check_bound9(T=20, R=30, hets=(0.0, 2.0), taus=(1, 10), tau_het=10, local_sign=-1.0)
    assert flipped.verdict == HOLDS                              # the sign flip is not caught: that is the label


def test_fedavg_rounds_perturbations_reduce_to_the_plain_run():
    task = make_task(3, 4, het=1.0, noise=1.0, seed=2)
    g, e = fedals.fedavg_rounds(task, 3, 1, 10, 2, 0.05, 0.0, 8, 0)
    g2, e2 = fedals.fedavg_rounds(task, 3, 1, 10, 2, 0.05, 0.0, 8, 0, reuse=True, agg_scale=1.0)
    assert torch.equal(g, g2) and torch.equal(e, e2)            # tau = 1: nothing to reuse
    g3, _ = fedals.fedavg_rounds(task, 3, 5, 10, 2, 0.05, 0.0, 8, 0, reuse=True)
    assert not torch.equal(g3, fedals.fedavg_rounds(task, 3, 5, 10, 2, 0.05, 0.0, 8, 0)[0])


def test_thm43_larger_for_non_iid_is_judged_in_standard_errors():
    gap, _ = fedals.check_thm43_tau(T=50, taus=(1, 25), R=40)
    z = gap.details["z_noniid_minus_iid"]
    assert len(z) == 2 and max(z) > 3 and min(z) > -3 and gap.verdict == HOLDS


def test_partial_bounds_state_their_grid_over_seeds():
    cell = lambda h, k, gen: {"het": h, "K_hat": k, "gen": gen, "bound": 1.0, "gen_se": 0.01, "ratio": gen}  # noqa
    seeds = [[cell(0.0, 1, 0.5), cell(3.0, 1, 2.0), cell(3.0, 2, 1.5)],
             [cell(0.0, 1, 0.4), cell(3.0, 1, 3.0), cell(3.0, 2, 0.5)]]
    text = fedals.grid_over_seeds(seeds)
    assert text.startswith("over 2 seeds: het 0: holds in every seed at K_hat 1")
    assert "het 3: violated in every seed at K_hat 1 (2.00-3.00x); by seed at K_hat 2 (violated 1/2" in text
