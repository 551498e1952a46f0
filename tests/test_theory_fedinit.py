"""FedInit theory checks (Alg. 1, Thms 1, 6, 9, 12, 15, 17, 19, Remark 14, Tables 4, 6): closed forms to 1e-10
and their verdicts."""

import math

import pytest
import torch

from fedlab_analysis.theory import fedinit
from fedlab_analysis.theory.claims import FINDING, HOLDS, OUTSIDE, VACUOUS, VIOLATED
from fedlab_analysis.theory.toys import make_quadratics


def test_beta_zero_is_fedavg_and_aggregations_agree_at_full_participation():
    q = make_quadratics(6, 3, shared=False, seed=1)
    r = fedinit.simulate(q, beta=0.0, K=3, eta=0.1, T=4, seed=0)
    x = r["w"][0, 0].clone()
    for t in range(4):                                                    # plain FedAvg, full participation
        y = x.expand(6, 3).clone()
        for _ in range(3):
            y = y - 0.1 * q.grad(y)
        x = y.mean(0)
        assert float((x - r["w"][t + 1, 0]).abs().max()) < 1e-12
    a = fedinit.simulate(q, beta=0.3, K=3, eta=0.1, T=6, seed=0, agg="final_avg")
    b = fedinit.simulate(q, beta=0.3, K=3, eta=0.1, T=6, seed=0, agg="delta_from_init")
    assert float((a["w"] - b["w"]).abs().max()) < 1e-12                  # offsets average to 0


def test_null_test_beta_invariance():
    c = fedinit.check_null_test(T=30)
    assert c.verdict == HOLDS and c.value <= 1e-10
    assert c.details["distinct_hessian_diff"] > 1e-3                     # the test can fail


def test_delta_inf_closed_form_and_monotone():
    exact, claim = fedinit.check_delta_inf(T=200)
    assert exact.value <= 1e-10 and exact.verdict == HOLDS
    assert claim.verdict == HOLDS                                         # beta > 0 lowers, beta < 0 raises
    closed = exact.details["closed"]
    assert closed[0] > closed[1] > closed[2]                              # -0.3 > 0 > 0.1


def test_fixed_point_closed_form_and_bias_shrinks():
    exact, claim = fedinit.check_fixed_point_bias()
    assert exact.value <= 1e-10
    assert claim.verdict == HOLDS and claim.value < 1


def test_beta_threshold_is_near_inverse_norm_M():
    c = fedinit.check_beta_threshold()
    assert c.verdict == HOLDS
    assert abs(c.value - c.details["inv_max_norm_M"]) < 0.1              # note: threshold ~ 1/||M|| ~ 1
    assert c.details["rho_at_proven_max"] < 1


def test_floors_scale_as_predicted():
    eta2, Kc = fedinit.check_floors(T=60, R=4, etas=(0.0025, 0.005, 0.01), Ks=(5, 10, 20))
    assert eta2.verdict == HOLDS and Kc.verdict == HOLDS
    s = Kc.details["slopes"]
    assert abs(s["het_K"] - 2) < 0.25 and abs(s["noise_K"] - 1) < 0.25


def test_thm19_holds_in_regime_and_is_outside_beyond_gamma():
    c = fedinit.check_interpolation_thm19(T=60)
    assert c.verdict == HOLDS and c.details["zeta"] > 0
    out = fedinit.check_interpolation_thm19(T=20, beta=0.2)              # beta > 1/sqrt(39) = 0.160
    assert out.verdict == OUTSIDE
    full = fedinit.check_interpolation_thm19(T=20, N=10)                 # N = C: Thm 19 takes Thms 6/9's 1 < N < C
    assert full.verdict == OUTSIDE and "1 < N < C fails" in full.regime


def test_thm1_ri_term_is_negligible():
    c = fedinit.check_thm1_ri_term(T=40)
    assert c.verdict == VIOLATED and c.value < 1e-2                       # 'same magnitude as D' fails
    assert fedinit.check_thm1_ri_term(T=10, beta=0.1).verdict == OUTSIDE   # beta > 1/sqrt(141)


def test_lemma27_and_ri_amplification_step():
    assert fedinit.check_lemma27(sims=4000).verdict == HOLDS
    c = fedinit.check_amplification(T=10, pairs=4)
    assert c.verdict == HOLDS and c.value <= 1 + 2 * 0.3


def test_stability_worsens_with_beta_under_algorithm_1():
    bound, remark14, thm15 = fedinit.check_stability(T=40, pairs=6, C=10, S=20, d=5)
    assert bound.verdict == HOLDS                                          # beta = 0: inside Thm 12
    assert remark14.verdict == OUTSIDE and thm15.verdict == OUTSIDE          # fixed beta > 0: neither applies
    assert remark14.kind == thm15.kind == bound.kind == VACUOUS               # no power at any feasible size
    assert remark14.regime.startswith("outside")                              # phi(t) = (1 + c/t)^K, c = 0.2, K = 10:
    assert "beta = 0.1 it holds only in the first 3 rounds" in remark14.regime    # 0.36 >= 0.2 > 0.17 (t = 3, 4)
    assert "beta = 0.05 it holds only in the first 5 rounds" in remark14.regime   # 0.100 >= 0.1 at t = 5
    assert "interpolation" in thm15.regime
    assert remark14.value > 0.01                                           # eps rises with beta all the same
    moved = fedinit.check_stability(T=10, pairs=2, C=10, S=20, d=5, betas=(0.1, 0.2))[0]
    assert moved.verdict == OUTSIDE                                        # constant beta > 0 breaks Thm 12


def test_excess_risk_split():
    split, gen = fedinit.check_excess_risk_split(datasets=20)
    assert split.details["E_O"][-1] < split.details["E_O"][0]              # beta lowers E_O
    assert gen.verdict == VIOLATED                                          # and raises E_G on this toy


def test_ri_transient_alternates_on_the_trainer():
    c = fedinit.check_oscillation(T=4, betas=(0.0, 0.5))
    assert c.verdict == HOLDS and c.value < 1e-10
    assert max(c.details["results"][0.5]["cos_consecutive"]) < 0 and max(c.details["results"][0.0]["u_norm"]) < 1e-10


def test_thm6_thm9_hold_in_regime_and_constants_are_exact():
    thm6, thm9 = fedinit.check_thm6_thm9(T=60, R=4)
    for c in (thm6, thm9):
        assert c.verdict == HOLDS and c.regime.startswith("inside") and c.slack >= 1
    d = thm9.details
    assert d["R_beta"] == 228 * d["mu_PL"] * d["gamma_beta"] ** 2 * d["beta"] ** 2 * d["a2"] * d["b2"]
    prob, *_ = fedinit._interp_problem(10, 5, 5, 0.25, 0)
    w = torch.randn(7, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    gap = prob.f(w) - prob.f_star                 # PL in the paper's form: mu (f - f*) <= ||grad f||^2, tight
    assert bool((d["mu_PL"] * gap <= fedinit._grad_sq(prob, w) * (1 + 1e-12)).all())
    v = torch.linalg.eigh(prob.A_bar).eigenvectors[:, 0] + prob.x_star
    assert abs(float(d["mu_PL"] * (prob.f(v) - prob.f_star) - fedinit._grad_sq(prob, v))) < 1e-10
    assert fedinit.check_thm6_thm9(T=20, R=2, beta=0.2)[0].verdict == OUTSIDE     # beta > 1/sqrt(39)


def test_thm1_thm17_evaluated_at_lambda_half_with_exact_noise_constants():
    thm1, thm17, _ = fedinit.check_thm1_thm17(T=40, R=4)
    assert thm1.verdict == HOLDS and thm17.verdict == HOLDS
    d = thm1.details
    prob = fedinit.make_quadratics(20, 5, shared=True, L=1.0, mu=0.1, seed=0)
    sg2 = sum(float((prob.A[0] @ (prob.b[i] - prob.b.mean(0))).pow(2).sum()) for i in range(20)) / 20
    assert abs(d["sigma_g2"] - sg2) < 1e-10 and d["sigma"] == d["sigma_l2"] + 6 * d["K"] * d["sigma_g2"]
    assert abs(d["kappa"] - (8 + 78 * 0.05 ** 2 / (1 - 141 * 0.05 ** 2))) < 1e-12
    assert fedinit.check_thm1_thm17(T=10, R=2, beta=0.08)[0].verdict == OUTSIDE    # beta > 1/sqrt(189)


def test_stability_in_S_and_N_rows():
    cs, n = fedinit.check_stability_CS_N(T=20, pairs=8, groups=2, Ss=(20, 80), Ns=(2, 8))
    assert cs.id == "stab-CS" and n.id == "stab-N" and cs.kind == n.kind == "finding"
    assert len(cs.details["eps_S"]) == 2 and all(e >= 0 for e in cs.details["eps_S"] + n.details["eps_N"])


def test_tables_bookkeeping_and_ri_never_hurts():
    same, hurts = fedinit.check_tables()
    assert same.verdict == HOLDS and hurts.verdict == VIOLATED and hurts.value == -0.52   # FedDyn, 10%-100 Dir-0.6
    t6 = {m: (p, tuple(x + 1 for x in ri)) for m, (p, ri) in fedinit.TABLE6.items()}     # the checks have teeth
    same2, hurts2 = fedinit.check_tables(t6=t6)
    assert same2.verdict == VIOLATED and same2.value == 4 and hurts2.verdict == HOLDS


def test_thm4_from_the_proofs_explicit_constants():
    """Theorem 4 with its O(1/T + eta^2) written out (App. A.2.3: the Delta-telescope times Lemma 23's bound),
    recomputed here from the row's constants; judged at the lambda where the RHS is smallest."""
    *_, thm4 = fedinit.check_thm1_thm17(T=60, R=4)
    d = thm4.details
    assert thm4.id == "thm4-value" and thm4.kind == FINDING and thm4.verdict == HOLDS and thm4.slack >= 1

    def rhs(la):
        eta, K, T, N, L, b, kb, mu = d["eta"], d["K"], d["T"], d["N"], d["L"], d["beta"], d["kappa_beta"], d["mu_PL"]
        r11 = 804 * d["C_beta"] * eta * K * d["D"] / (la * T) + eta ** 2 * d["C_beta"] * (
            132 + 804 * d["kappa"] / (la * N)) * K * d["sigma"]
        return (math.exp(-la * mu * eta * K * T) * d["D"] + eta * d["kappa"] * L * d["sigma"] / (la * mu * N)
                + 13 * b ** 2 * kb * la * mu * eta * K * T * L / N * r11)
    assert abs(rhs(d["lambda_min"]) - d["rhs"]) <= 1e-12 * d["rhs"]
    assert all(rhs(la) >= d["rhs"] * (1 - 1e-12) for la in (0.01, 0.1, 0.25, 0.5))
    assert fedinit.check_thm1_thm17(T=60, R=4, local_sign=-1.0)[2].verdict == VIOLATED     # two-sided


def test_violated_rows_can_come_out_holds():
    """The rows violated on the toy are not stuck: a named change that makes the claim true makes them hold."""
    assert fedinit.check_excess_risk_split(datasets=20, ri_from="flipped")[1].verdict == HOLDS   # E_G falls
    hurts = fedinit.check_tables(t6={m: v for m, v in fedinit.TABLE6.items() if m not in ("FedDyn", "FedCM")})[1]
    assert hurts.verdict == HOLDS                                      # the paper's own exceptions removed
    assert fedinit.check_thm1_ri_term(T=40, beta=0.084).verdict == HOLDS   # kappa_beta ~ 200 at the regime's edge


def test_batched_runs_equal_separate_runs():
    """The vectorised designs (N axis, eta axis, both aggregations, sigma_l without per-sample tables) give the
    numbers of the separate runs they replace."""
    kw = dict(T=15, pairs=8, groups=2, Ss=(20, 40), S_N=40, N_S=4)
    a = fedinit.check_stability_CS_N(Ns=(2, 4, 8), **kw)[1].details["eps_N"]
    b = fedinit.check_stability_CS_N(Ns=(8, 4, 2), **kw)[1].details["eps_N"]
    assert a == b[::-1]
    q = fedinit.make_quadratics(6, 3, shared=False, seed=1)
    one = {agg: fedinit.simulate(q, beta=0.3, K=3, eta=0.1, T=5, N=3, agg=agg, seed=2)["w"]
           for agg in ("final_avg", "delta_from_init")}
    both = fedinit.simulate(q, beta=0.3, K=3, eta=0.1, T=5, N=3, batch=(2,), rshape=(1,), seed=2,
                            agg=torch.tensor([0.0, 1.0], dtype=torch.float64))["w"]
    assert float((both[:, 0] - one["final_avg"][:, 0]).abs().max()) < 1e-12
    assert float((both[:, 1] - one["delta_from_init"][:, 0]).abs().max()) < 1e-12
    assert float((one["final_avg"] - one["delta_from_init"]).abs().max()) > 1e-6        # N < C: they differ
    eta2, _ = fedinit.check_floors(T=30, R=2, etas=(0.0025, 0.005, 0.01), Ks=(5, 10, 20))
    iid = fedinit.make_quadratics(10, 5, shared=True, L=1.0, mu=0.1, spread=0.0, seed=0)
    sep = fedinit.simulate(iid, beta=0.1, K=10, eta=0.01, T=30, batch=(2,), sigma=0.5, w0=iid.x_star)
    assert abs(float(sep["Delta"][15:].mean()) - eta2.details["noise_eta"][2]) < 1e-12
    X, y = torch.randn(3, 4, 7, 5, dtype=torch.float64), torch.randn(3, 4, 7, dtype=torch.float64)
    traj = torch.randn(6, 3, 5, dtype=torch.float64)
    g = X * ((X * traj[:, :, None, None]).sum(-1) - y).unsqueeze(-1)
    direct = float((g - g.mean(-2, keepdim=True)).pow(2).sum(-1).mean(-1).sqrt().max())
    assert abs(fedinit._sigma_l(X, y, traj) - direct) < 1e-12 * direct


@pytest.mark.slow
def test_every_finding_declares_its_mistakes():
    rows = fedinit.run(quick=True, seed=0)
    missing = [c.id for c in rows if c.kind in (FINDING, VACUOUS) and c.id not in fedinit.POWER]
    assert not missing, missing
