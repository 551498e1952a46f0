"""FedLESAM (Fan et al. 2024, "Locally Estimated Global Perturbations are Better than Local Perturbations
for Federated Sharpness-aware Minimization"): its theory checked on toys.

One client-vectorised simulator runs Algorithm 1 (FedAvg, FedSAM, FedLESAM) on any ``ClientProblem``:
E local steps of size eta_l, server step w^{t+1} = w^t + eta_g mean_S(w_i - w^t) (the mean; Algorithm 1 as
printed omits the 1/|S|).
FedSAM's ascent uses the step's own stochastic gradient and the same noise draw for the descent gradient
("same minibatch"); FedLESAM's perturbation rho (w_i^old - w^t)/||w_i^old - w^t|| is constant within the
round, with w_i^old per client (paper) or the last global update for everyone (``w_old="global"``, the
code), and no perturbation on a client's first participation (the default; ``first="literal"``
uses w_i^old = 0). Stochastic gradients are exact gradients plus N(0, sigma^2 I) noise.

Each ``check_<id>`` builds its toy from its arguments, measures, and computes its verdict with ``claims``.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from ..linalg import cosine, trust_region_max, unit
from .claims import (HOLDS, INCONCLUSIVE, OBSERVATION, SANITY, VACUOUS, VIOLATED, Claim, bound, identity, judge,
                     loglog_fit, loglog_slope, noise_tol, rate, se_of, slack, trend)
from . import rules
from .mistakes import Mistake
from .engine_toys import make_run
from .toys import DT, active_masks, make_quadratics, no_autograd, per_run, save_figure
from .toys_nonconvex import flatness_runs, flatness_text, make_sharp_flat

PAPER = "fedlesam"


@no_autograd
def simulate(prob, *, method: str = "fedlesam", T: int = 100, E: int = 10, eta_l=0.05, eta_g=1.0, rho=0.05,
             n_active: int | None = None, sigma: float = 0.0, w_old: str = "paper", first: str = "zero",
             w0: torch.Tensor | None = None, seed: int = 0, probe: bool = False, track: bool = False,
             sign: float = 1.0, normalise: bool = True) -> dict:
    """Algorithm 1 of FedLESAM for FedAvg / FedSAM / FedLESAM; ``rho``, ``eta_l``, ``eta_g`` may hold one
    value per run (then w0 is [B, d]). Returns w [T+1, ..., d] and active [T, m]; with ``track`` also
    D [T, ..., E] (Lemma 2: (1/|S|) sum_i ||delta_{i,k} - delta_{i,0}||^2) and drift [T, ..., E] (Lemma 4:
    (1/|S|) sum_i ||w_{i,k} - w^t||^2); with ``probe`` also PD [T] (Sec. 4.1 with unit vectors:
    (1/(2|S|E)) sum_{k,i} ||unit grad F(w_{g,k}) - unit delta_{i,k}||, w_{g,k} the virtual global model) and
    est: (round, client, staleness, cos(delta_i, grad F(w^t))) for every participation with a stored
    w_i^old (delta_i = rho unit(w_i^old - w^t), eq. (3)).
    Two switches exist only to break the algorithm on purpose (mistakes of ``MISTAKES``; theory/power.py):
    ``sign = -1`` flips the perturbation (descent along the estimate / the gradient instead of ascent) and
    ``normalise = False`` drops FedSAM's normalisation (rho g instead of rho g / ||g||)."""
    if method not in ("fedavg", "fedsam", "fedlesam"):
        raise ValueError(f"unknown method {method!r}; choose fedavg, fedsam or fedlesam")
    m, d = prob.n, prob.d
    gen = torch.Generator().manual_seed(seed)
    w = torch.zeros(d, dtype=DT) if w0 is None else torch.as_tensor(w0, dtype=DT).clone()
    batch = w.shape[:-1]
    rho, eta_l, eta_g = (per_run(v, batch) for v in (rho, eta_l, eta_g))
    rho, eta_li = (v.unsqueeze(-1) if v.dim() else v for v in (rho, eta_l))      # per client row
    rho = sign * rho
    old = torch.zeros(*batch, m, d, dtype=DT)                   # w_i^old (0 = the paper's initialisation)
    last = torch.full((m,), -1)                                 # round of each client's last participation
    w_prev = None
    masks = active_masks(m, n_active, T, seed)

    def over_active(v, dim=-1):                                  # mean over the round's active clients
        return v.mean(dim) if full else v.index_select(dim, idx).mean(dim)

    ws, Ds, drifts, pds, est = [w], [], [], [], []
    for t in range(T):
        act = masks[t]
        full, idx = bool(act.all()), act.nonzero().squeeze(-1)
        wc = w.unsqueeze(-2)
        x = wc.expand(*batch, m, d).clone()
        if method == "fedlesam":                                 # eq. (3), constant during the round
            ref = old if w_old == "paper" else (w if w_prev is None else w_prev).unsqueeze(-2)
            delta_c = rules.lesam_estimate(ref, wc, rho).expand(*batch, m, d)
            seen = (last >= 0) if w_old == "paper" else torch.full((m,), w_prev is not None)
            if first == "zero":
                delta_c = torch.where(seen.unsqueeze(-1), delta_c, torch.zeros_like(delta_c))
            if probe and w_old == "paper":
                c = cosine(delta_c, prob.grad_f(w).unsqueeze(-2), at_zero=0.0).reshape(-1, m).mean(0)
                est += [(t, i, t - int(last[i]), float(c[i])) for i in range(m) if act[i] and last[i] >= 0]
        D_k, dr_k, pd = [], [], 0.0
        for k in range(E):
            xi = sigma * torch.randn(*batch, m, d, generator=gen, dtype=DT) if sigma else None
            if method == "fedavg":
                delta = torch.zeros_like(x) if track else 0.0
            elif method == "fedsam":                             # same noise draw for ascent and descent
                g = prob.grad(x) if xi is None else prob.grad(x) + xi
                delta = rules.sam_ascent(g, rho) if normalise else rho * g
            else:
                delta = delta_c
            if track:
                if k == 0:
                    delta0 = delta
                D_k.append(over_active((delta - delta0).pow(2).sum(-1)))
            if probe and method != "fedavg":
                wg = w + eta_g * over_active(x - wc, -2)                       # virtual global model
                gap = (unit(prob.grad_f(wg)).unsqueeze(-2) - unit(delta)).norm(dim=-1)
                pd = pd + over_active(gap).mean()
            g = prob.grad(x + delta)
            x = rules.sgd_step(x, eta_li, g if xi is None else g + xi)
            if track:
                dr_k.append(over_active((x - wc).pow(2).sum(-1)))
        if method == "fedlesam" and w_old == "paper":
            old = torch.where(act.unsqueeze(-1), wc.expand_as(old), old)               # w_i^old <- w^t
        last = torch.where(act, t, last)
        w_prev, w = w, w + eta_g * over_active(x - wc, -2)
        ws.append(w), pds.append(float(pd) / (2 * E))
        if track:
            Ds.append(torch.stack(D_k, -1)), drifts.append(torch.stack(dr_k, -1))
    out = {"w": torch.stack(ws), "active": masks, "PD": torch.tensor(pds, dtype=DT), "est": est}
    if track:
        out |= {"D": torch.stack(Ds), "drift": torch.stack(drifts)}
    return out


def _claim(id, claim, where, expected, measured, verdict, value, details, figure=None, **kw) -> Claim:
    return Claim(PAPER, id, claim, where, expected, measured, verdict,
                 None if value is None else float(value), details, figure, **kw)


def sigma_g2_max(prob, W: torch.Tensor) -> float:
    """A2's sigma_g^2 = sup_w max_i ||grad F_i(w) - grad F(w)||^2 over the points W [..., d]."""
    g = prob.grads_at(W)
    return float((g - g.mean(-2, keepdim=True)).pow(2).sum(-1).max())


# ---------------------------------------------------------------------------------------------------
# Eq. (1) vs Eq. (2): the Jensen gap with the exact inner maximisation
# ---------------------------------------------------------------------------------------------------
def ball_max(A: torch.Tensor, g: torch.Tensor, rho: float):
    """Exact max_{||u|| <= rho} g^T u + 1/2 u^T A u over a batch of quadratic models (A [..., d, d], g [..., d]):
    the maximiser from the trust-region solver the sharpness probe uses (``linalg.trust_region_max``: the secular
    equation by bisection, the hard case included) and its value. Returns (value, maximiser)."""
    u = trust_region_max(A, g, rho)
    return (g * u).sum(-1) + 0.5 * (u * (A @ u.unsqueeze(-1)).squeeze(-1)).sum(-1), u


def sam_losses(prob, x: torch.Tensor, rho: float, sign: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. (2) mean_i max_{||d|| <= rho} F_i(x + d) and Eq. (1) max_{||d|| <= rho} F(x + d), exactly, at
    x [..., d] (quadratics: F_i(x + d) = F_i(x) + g_i^T d + 1/2 d^T A_i d). ``sign = -1`` (a perturbation)
    evaluates each objective at its maximiser reflected, F(x - d*): SAM's ascent flipped."""
    def inner(A, g):
        val, u = ball_max(A, g, rho)
        return val if sign == 1 else val - 2 * (g * u).sum(-1)        # g^T(-u) + 1/2 u^T A u

    local = prob.loss(prob.at(x)) + inner(prob.A, prob.grads_at(x))
    glob = prob.f(x) + inner(prob.A_bar, prob.grad_f(x))
    return local.mean(-1), glob


def check_jensen(n=10, d=5, spreads=(0.3, 1.0, 3.0), rhos=(0.05, 0.2, 0.5), points=64, seed=0,
                 out_dir=None, sign: float = 1.0) -> list[Claim]:
    """Eq. (1) vs (2): at aligned models (w_i = w) the local-SAM objective upper-bounds the global one
    (E max >= max E); the gap grows with heterogeneity (spread of the client centres) and with rho. Exact
    inner maxima; w drawn around the minimiser."""
    gen = torch.Generator().manual_seed(seed)
    gaps, per = np.zeros((len(spreads), len(rhos))), np.zeros((len(spreads), len(rhos), points))
    worst = float("inf")
    for a, sp in enumerate(spreads):
        prob = make_quadratics(n, d, shared=False, L=1.0, mu=0.1, spread=sp, seed=seed)
        x = prob.x_star + torch.randn(points, d, generator=gen, dtype=DT)
        for b, rho in enumerate(rhos):
            loc, glo = sam_losses(prob, x, rho, sign)
            worst = min(worst, float((loc - glo).min()))
            per[a, b] = (loc - glo).numpy()
            gaps[a, b] = float(per[a, b].mean())
    # increasing in rho (paired: the same points) and in spread (fresh points: unpaired), each step beyond
    # 3 SE of the points' noise (claims.noise_tol)
    tol_rho = [[noise_tol(se_of(per[a, b + 1] - per[a, b]), gaps.max()) for b in range(len(rhos) - 1)]
               for a in range(len(spreads))]
    tol_sp = [[noise_tol(np.hypot(se_of(per[a, b]), se_of(per[a + 1, b])), gaps.max()) for a in range(len(spreads) - 1)]
              for b in range(len(rhos))]
    trends = ([trend(-gaps[a], tol_rho[a], noise_tol(se_of(per[a, -1] - per[a, 0]), gaps.max()))
               for a in range(len(spreads))]
              + [trend(-gaps[:, b], tol_sp[b], noise_tol(np.hypot(se_of(per[0, b]), se_of(per[-1, b])), gaps.max()))
                 for b in range(len(rhos))])
    mono = HOLDS if all(t == HOLDS for t in trends) else VIOLATED if VIOLATED in trends else INCONCLUSIVE
    fig = save_figure(out_dir, f"{PAPER}_jensen-trend.png",
                      {f"spread {sp}": (rhos, gaps[a]) for a, sp in enumerate(spreads)},
                      xlabel="rho", ylabel="Eq.(2) - Eq.(1)", title="local vs global SAM objective")
    det = {"n": n, "d": d, "spreads": list(spreads), "rhos": list(rhos), "points": points,
           "mean_gap": gaps.tolist(), "min_gap": worst}
    return [_claim("jensen-gap", "local-SAM objective (2) upper-bounds the global SAM objective (1)",
                   "Sec. 3.1, Eqs. (1)-(2)", "gap >= 0 at every aligned point",
                   f"min gap {worst:.3g} over {points * len(spreads) * len(rhos)} points (Jensen: max of a mean <= "
                   "mean of maxes, true for every input)", bound(-worst, 0.0), worst, det, kind=SANITY),
            _claim("jensen-trend", "the gap grows with heterogeneity and with rho", "Sec. 3.1",
                   "mean gap increasing in spread and in rho",
                   "mean gap " + "; ".join(f"spread {sp}: " + ", ".join(f"{g:.3g}" for g in gaps[a])
                                           for a, sp in enumerate(spreads)),
                   mono, float(gaps[-1, -1]), det, fig)]


# ---------------------------------------------------------------------------------------------------
# Lemmas 2, 3, 4
# ---------------------------------------------------------------------------------------------------
def check_lemma2(n=10, d=20, T=50, E=10, eta_l=0.05, rho=0.05, sigmas=(0.0, 0.1, 0.5), seed=0,
                 normalise: bool = True) -> list[Claim]:
    """Lemma 2: FedSAM's in-round perturbation difference (1/N) sum_i E||delta_{i,k} - delta_{i,0}||^2
    <= 2 E^2 L^2 eta_l^2 rho^2 (K read as E); FedLESAM's is exactly 0. Exact gradients: the max over rounds
    and k; with noise: the mean over rounds (the expectation) of the max over k. Lemma 2 is stated under
    A1-A2, and A1's unit-gradient variance is always bounded, so the noisy runs are inside it."""
    prob = make_quadratics(n, d, shared=False, L=1.0, mu=0.05, spread=1.0, seed=seed)
    lim = 2 * E ** 2 * prob.L ** 2 * eta_l ** 2 * rho ** 2
    kw = {"T": T, "E": E, "eta_l": eta_l, "rho": rho, "w0": prob.x_star + 3.0, "seed": seed, "normalise": normalise}
    les = max(float(simulate(prob, method="fedlesam", sigma=s, track=True, **kw)["D"].max()) for s in sigmas)
    sam = {}
    for s in sigmas:
        D = simulate(prob, method="fedsam", sigma=s, track=True, **kw)["D"]
        sam[s] = float(D.max()) if s == 0 else float(D.max(-1).values.mean())
    det = {"n": n, "d": d, "T": T, "E": E, "eta_l": eta_l, "rho": rho, "L": prob.L, "bound": lim,
           "fedsam": sam}
    noisy = [s for s in sigmas if s > 0]
    worst = max(sam[s] for s in noisy)
    return [_claim("L2-fedlesam", "FedLESAM's perturbation is constant within the round",
                   "Lemma 2 (FedLESAM)", "difference = 0", f"max {les:.1e} over sigma in {list(sigmas)}",
                   identity(les), les, det, kind=SANITY),
            _claim("L2-fedsam", "FedSAM's in-round perturbation difference, exact gradients",
                   "Lemma 2 (FedSAM)", f"<= 2E^2L^2 eta^2 rho^2 = {lim:.3g}",
                   f"max {sam[0.0]:.3g} (ratio {sam[0.0] / lim:.3g})", bound(sam[0.0], lim), sam[0.0] / lim,
                   det, slack=slack(sam[0.0], lim)),
            _claim("L2-fedsam-noise", "FedSAM's in-round perturbation difference, stochastic gradients",
                   "Lemma 2 (FedSAM) under A1-A2", f"<= {lim:.3g}",
                   ", ".join(f"sigma={s}: {sam[s]:.3g}" for s in noisy) + f" (ratio {worst / lim:.3g})",
                   bound(worst, lim), worst / lim, det, slack=slack(worst, lim))]


def check_lemma3(n=10, d=5, points=256, rho=0.1, spread=1.0, seed=0) -> Claim:
    """Lemma 3: ||grad F_i(w + delta_i) - grad F(w + delta)||^2 <= 3 sigma_g^2 + 6 L^2 rho^2 for any
    ||delta_i||, ||delta|| <= rho. Shared-Hessian quadratics: A2's sigma_g^2 = max_i ||A(c_i - c_bar)||^2."""
    prob = make_quadratics(n, d, shared=True, L=1.0, mu=0.1, spread=spread, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    w = prob.x_star + 3 * torch.randn(points, 1, d, generator=gen, dtype=DT)

    def ball(*shape):                                           # uniform direction, radius in [0, rho]
        u = unit(torch.randn(*shape, d, generator=gen, dtype=DT))
        return rho * u * torch.rand(*shape, 1, generator=gen, dtype=DT)

    lhs = (prob.grad(w + ball(points, n)) - prob.grad_f(w + ball(points, 1))).pow(2).sum(-1)
    sg2 = sigma_g2_max(prob, prob.x_star)                      # constant in w for a shared Hessian
    lim = 3 * sg2 + 6 * prob.L ** 2 * rho ** 2
    ratio = float(lhs.max()) / lim
    return _claim("L3", "gradient difference after perturbation", "Lemma 3", "<= 3 sigma_g^2 + 6 L^2 rho^2",
                  f"max ratio {ratio:.3g} over {points * n} draws (triangle inequality and A1-A2: true for "
                  "every input)", bound(ratio, 1.0), ratio,
                  {"n": n, "d": d, "rho": rho, "sigma_g2": sg2, "L": prob.L, "bound": lim}, kind=SANITY,
                  slack=slack(ratio, 1.0))


def check_lemma4(n=10, d=5, T=60, E=10, rho=0.05, spread=1.0, seed=0, local_sign=1.0, start=3.0,
                 sigma=0.0) -> Claim:
    """Lemma 4 with eta_l = 1/(10 E L) (its condition), shared Hessian (exact sigma_g):
    (1/N) sum_i ||w_{i,k} - w^t||^2 <= 5 E eta_l^2 (2 L^2 rho^2 sigma_l^2 + 6E(3 sigma_g^2 + 6 L^2 rho^2)
    + 6E ||grad F(w~)||^2 + 12 E L^2 eta_l^2 D), with w~ read as w^t and D the Lemma-2 term; w^0 = x* + ``start``.
    Exact gradients (sigma_l = 0): the max over rounds of the ratio. ``sigma`` > 0: gradients plus N(0, sigma^2 I)
    noise, inside A1 (it bounds only the unit gradient's variance, by 4 at most: sigma_l^2 = 4 is taken); the
    ratio of the round's drift to its RHS is then averaged over rounds (the expectation)."""
    prob = make_quadratics(n, d, shared=True, L=1.0, mu=0.1, spread=spread, seed=seed)
    L, eta = prob.L, 1 / (10 * E * prob.L)
    sg2, sl2 = sigma_g2_max(prob, prob.x_star), 4.0 if sigma else 0.0
    ratios = {}
    for meth in ("fedsam", "fedlesam"):
        tr = simulate(prob, method=meth, T=T, E=E, eta_l=local_sign * eta, rho=rho, w0=prob.x_star + start,
                      seed=seed, track=True, sigma=sigma)
        g2 = prob.grad_f(tr["w"][:-1]).pow(2).sum(-1)
        rhs = 5 * E * eta ** 2 * (2 * L ** 2 * rho ** 2 * sl2 + 6 * E * (3 * sg2 + 6 * L ** 2 * rho ** 2) + 6 * E * g2
                                  + 12 * E * L ** 2 * eta ** 2 * tr["D"].max(-1).values)
        r = tr["drift"].max(-1).values / rhs
        ratios[meth] = float(r.mean() if sigma else r.max())
    worst = max(ratios.values())
    grads = f"stochastic gradients (sigma {sigma:g}; A1's unit variance <= 4)" if sigma else "exact gradients"
    return _claim("L4", "bounded client drift within a round (eta_l <= 1/(10EL))", "Lemma 4", "drift <= RHS",
                  ", ".join(f"{k}: {'mean' if sigma else 'max'} ratio {v:.3g}" for k, v in ratios.items())
                  + "; no power at this scale: a sign-flipped local step is not caught (the RHS grows with "
                  "||grad F||^2 along the diverging run)", bound(worst, 1.0), worst, kind=VACUOUS,
                  slack=slack(worst, 1.0), regime=f"inside the proven regime (eta_l = 1/(10EL), {grads})",
                  details=
                  {"n": n, "d": d, "T": T, "E": E, "eta_l": eta, "rho": rho, "sigma_g2": sg2, "L": L,
                   "w_tilde": "read as w^t (the paper leaves it undefined)",
                   **({"sigma": sigma, "sigma_l2": sl2, "start": start} if sigma or start != 3.0 else {})})


# ---------------------------------------------------------------------------------------------------
# Theorem 1 (full participation, independent rho)
# ---------------------------------------------------------------------------------------------------
def thm1_rhs(method: str, T: int, E: int, N: int, L: float, F0: float, rho: float, sg2: float,
             sl2: float = 0.0) -> float:
    """Theorem 1's printed right-hand side with C = 1/2 - 30 E^2 L^2 eta_l^2 = 1/2 - 30/T."""
    C, r2 = 0.5 - 30 / T, L ** 2 * rho ** 2
    delta = 120 * r2 / (C * E * T ** 2) + 2 * r2 / (C * T) if method == "fedsam" else 0.0
    return (10 * L * F0 / (C * math.sqrt(T * E * N)) + 90 * r2 * sg2 / (C * T * E) + 180 * r2 / (C * T)
            + delta + r2 * sl2 / (C * math.sqrt(T * E * N)))


def fedsam_limit(prob, rho: float, iters: int = 50, weights: torch.Tensor | None = None) -> torch.Tensor:
    """The point FedSAM tends to as eta_l -> 0 at fixed rho: the zero next to the minimiser of
    G(w) = mean_i grad F_i(w + rho unit(grad F_i(w))) (Newton with the exact Jacobian of G). ``weights``
    [n] (a perturbation) replaces the server's uniform mean by a weighted one."""
    p = torch.full((prob.n, 1), 1 / prob.n, dtype=DT) if weights is None else torch.as_tensor(
        weights, dtype=DT).reshape(-1, 1) / float(sum(weights))
    G = lambda w: (p * prob.grad(prob.at(w) + rho * unit(prob.grads_at(w)))).sum(-2)
    w = prob.x_star.clone()
    for _ in range(iters):
        g = G(w)
        if float(g.norm()) < 1e-14:
            break
        w = w - torch.linalg.solve(torch.autograd.functional.jacobian(G, w), g)
    return w


def check_thm1(n=10, d=5, E=10, rho=0.05, Ts=(100, 400, 1600), spread=1.0, seed=0,
               out_dir=None, server_sign: float = 1.0, weights=None, mu=0.1, start=2.0) -> list[Claim]:
    """Theorem 1 with eta_l = 1/(sqrt(T) E L), eta_g = sqrt(E N), full participation, exact gradients
    (sigma_l = 0), a shared Hessian (A2's sigma_g exact): LHS (1/T) sum_{t=1}^T ||grad F(w^{t+1})|| (printed;
    the squared form is in the details) against the printed RHS for FedSAM and FedLESAM (w^old = w^{t-1});
    Delta's sign; and the limit T -> inf: with rho fixed the RHS -> 0, while FedSAM tends to a point with
    grad F != 0. Regime: C = 1/2 - 30/T > 0 (T > 60) and Lemma 4's eta_l <= 1/(10EL) (T >= 100).
    ``server_sign = -1`` (a perturbation) flips the sign of the server step; ``weights`` [n] (a perturbation)
    makes the server's mean a weighted one in the fixed point of ``thm1-independent-rho``. ``mu``: the smallest
    curvature (A1 needs only L-smoothness); ``start``: w^0 = x* + start (every coordinate), which sets F(w^0) - F*."""
    prob = make_quadratics(n, d, shared=True, L=1.0, mu=mu, spread=spread, seed=seed)
    L, w0 = prob.L, prob.x_star + start
    F0, sg2 = float(prob.f(w0) - prob.f_star), sigma_g2_max(prob, prob.x_star)
    Tt = torch.tensor(Ts, dtype=DT)
    eta_l, eta_g = 1 / (Tt.sqrt() * E * L), server_sign * math.sqrt(E * n) * torch.ones_like(Tt)  # batched
    rows = {m_: [] for m_ in ("fedsam", "fedlesam")}
    for meth, out in rows.items():
        w = simulate(prob, method=meth, T=max(Ts) + 1, E=E, eta_l=eta_l, eta_g=eta_g, rho=rho,
                     w0=w0.expand(len(Ts), d), w_old="global", seed=seed)["w"]
        for b, T in enumerate(Ts):
            gn = prob.grad_f(w[2:T + 2, b]).norm(dim=-1)                           # w^2 .. w^{T+1}
            out.append({"T": T, "lhs": float(gn.mean()), "lhs_sq": float(gn.pow(2).mean()),
                        "rhs": thm1_rhs(meth, T, E, n, L, F0, rho, sg2), "final_grad": float(gn[-1])})
    in_reg = all(T >= 100 for T in Ts)
    worst = {k: max(r["lhs"] / r["rhs"] for r in v) for k, v in rows.items()}
    floor = float(prob.grad_f(fedsam_limit(prob, rho, weights=weights)).norm())
    T_star = (10 * L * F0 / (0.5 * floor)) ** 2 / (E * n) if floor > 0 else float("inf")   # 1st term = floor
    det = {"n": n, "d": d, "E": E, "rho": rho, "L": L, "F0_gap": F0, "sigma_g2": sg2, "sigma_l2": 0.0,
           "rows": rows, "fedsam_limit_grad_norm": floor, "T_star_estimate": T_star}
    fig = save_figure(out_dir, f"{PAPER}_thm1-fedsam.png",
                      {**{f"{k} LHS": (Ts, [r["lhs"] for r in v]) for k, v in rows.items()},
                       "RHS (FedSAM)": (Ts, [r["rhs"] for r in rows["fedsam"]]),
                       "FedSAM limit ||grad F||": (Ts, [floor] * len(Ts))},
                      xlabel="T", ylabel="(1/T) sum ||grad F(w^{t+1})||", title=f"Thm 1, rho={rho}",
                      ref=(-0.5, Ts, [r["rhs"] for r in rows["fedsam"]]))
    ratio_les = [a["lhs"] / b["lhs"] for a, b in zip(rows["fedlesam"], rows["fedsam"])]
    finals = {k: ", ".join(f"{r['final_grad']:.3g}" for r in v) for k, v in rows.items()}
    regime = {"C = 1/2 - 30/T > 0 and eta_l <= 1/(10EL) (T >= 100)": in_reg}
    out = [_claim(f"thm1-{k}", f"Theorem 1 bound for {name}", "Thm 1 (printed)", "LHS <= RHS for every T",
                  f"max LHS/RHS {worst[k]:.3g} over T={list(Ts)}", bound(worst[k], 1.0, in_reg), worst[k],
                  {**det, "regime": regime, "in_regime": in_reg}, fig, slack=slack(worst[k], 1.0))
           for k, name in (("fedsam", "FedSAM"), ("fedlesam", "FedLESAM (its RHS without Delta)"))]
    share = [(b["rhs"] - a["rhs"]) / b["rhs"] for a, b in zip(rows["fedlesam"], rows["fedsam"])]
    out[1].measured += "; its RHS is FedSAM's minus Delta, " + ", ".join(f"{x:.2g}" for x in share) + \
        " of FedSAM's RHS"
    out[1].details = {**out[1].details, "delta_share_of_rhs": share}
    out.append(_claim("thm1-delta", "observation (not a statement of Thm 1, which compares bounds): FedLESAM's "
                      "measured gradient norms are no larger than FedSAM's", "Thm 1, Delta term",
                      "LHS(FedLESAM) <= LHS(FedSAM)", "ratio " + ", ".join(f"{x:.3g}" for x in ratio_les),
                      HOLDS if max(ratio_les) <= 1 else VIOLATED, max(ratio_les), det, kind=OBSERVATION))
    out.append(_claim("thm1-independent-rho", "with rho independent of T the bound vanishes as T -> inf",
                      "Thm 1 ('independent rho')", "(1/T) sum ||grad F|| -> 0 for FedSAM",
                      f"FedSAM tends to a point with ||grad F|| = {floor:.3g} > 0 (final ||grad F||: "
                      f"{finals['fedsam']}); the RHS falls below it at T ~ {T_star:.2g}. FedLESAM's final "
                      f"||grad F||: {finals['fedlesam']}, not settling to 0 at these T either (its perturbation "
                      f"keeps size rho; see thm1-fedlesam's tighter instances)", bound(floor, 1e-8, in_reg), floor,
                      {**det, "regime": regime, "in_regime": in_reg}))
    return out


def check_rho_tradeoff(n=10, d=5, E=10, T=200, rhos=(0.01, 0.05, 0.2, 0.5), spread=1.0, seed=0,
                       out_dir=None, sign: float = 1.0) -> Claim:
    """Sec. 5.2 / Fig. 4: a larger rho slows convergence: (1/T) sum ||grad F(w^{t+1})|| at fixed T grows
    with rho (Theorem 1's schedule for eta_l and eta_g)."""
    prob = make_quadratics(n, d, shared=True, L=1.0, mu=0.1, spread=spread, seed=seed)
    eta_l, eta_g = 1 / (math.sqrt(T) * E * prob.L), math.sqrt(E * n)
    w0 = (prob.x_star + 2.0).expand(len(rhos), d)
    lhs = {}
    for meth in ("fedsam", "fedlesam"):
        w = simulate(prob, method=meth, T=T, E=E, eta_l=eta_l, eta_g=eta_g, rho=list(rhos), w0=w0,
                     seed=seed, sign=sign)["w"]
        lhs[meth] = prob.grad_f(w[1:]).norm(dim=-1).mean(0).tolist()
    tol = noise_tol(0.0, max(max(v) for v in lhs.values()))            # deterministic: round-off only
    mono = all(trend(-np.asarray(v), tol, tol) == HOLDS for v in lhs.values())      # increasing in rho
    fig = save_figure(out_dir, f"{PAPER}_rho-tradeoff.png", {k: (rhos, v) for k, v in lhs.items()},
                      xlabel="rho", ylabel="(1/T) sum ||grad F||", title=f"T={T}")
    return _claim("rho-tradeoff", "a larger rho hinders convergence", "Sec. 5.2; Fig. 4",
                  "averaged ||grad F|| increases with rho",
                  "; ".join(f"{k}: " + ", ".join(f"{x:.3g}" for x in v) for k, v in lhs.items()),
                  HOLDS if mono else VIOLATED, lhs["fedlesam"][-1] / lhs["fedlesam"][0],
                  {"n": n, "d": d, "E": E, "T": T, "rhos": list(rhos), "lhs": lhs}, fig)


# ---------------------------------------------------------------------------------------------------
# Theorem 2 (estimation error, one local step, full participation)
# ---------------------------------------------------------------------------------------------------
def thm2_errors(prob, eta: float, T: int, rho: float = 0.0, w0=None, seed=0, one_client: bool = False):
    """e_t = ||unit(w^{t-1} - w^t) - unit(grad F(w^t))|| for t >= 1 along a run with E = 1, eta_g = 1,
    eta_l = eta (rho = 0: the update the proof models; rho > 0: FedLESAM's own trajectory).
    ``one_client`` (a perturbation): the estimate is client 0's own step -eta grad F_0(w^t) instead of the
    averaged global update, so heterogeneity is not averaged out."""
    w = simulate(prob, method="fedlesam" if rho else "fedavg", T=T, E=1, eta_l=eta, rho=rho, w_old="global",
                 w0=w0, seed=seed)["w"]
    est = prob.grad(prob.at(w[1:]))[..., 0, :] if one_client else w[:-1] - w[1:]
    return (unit(est) - unit(prob.grad_f(w[1:]))).norm(dim=-1)[1:]


def check_thm2(n=10, d=20, etas=(3e-4, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0), T=55, rho=0.05, seed=0,
               out_dir=None, one_client: bool = False) -> list[Claim]:
    """Theorem 2 noise-free (sigma_l' = 0; sigma_g' = 0 because F = mean F_i): the printed bound
    e_t <= 3 L_g^2 eta^2 and the squared reading e_t^2 <= 3 L_g^2 eta^2 (the proof's), every round; the
    error's log-log slope in eta over the small-angle range eta L_g <= 0.1 the proof's tan(phi) ~ phi needs;
    and FedLESAM's own trajectory (rho > 0), whose update contains the perturbation the proof leaves out,
    judged, like the slope, only inside the small-angle range (its witness lies inside it)."""
    prob = make_quadratics(n, d, shared=False, L=1.0, mu=0.05, spread=1.0, seed=seed)
    Lg = float(torch.linalg.eigvalsh(prob.A_bar)[-1])
    w0 = prob.x_star + 3.0
    e = [thm2_errors(prob, eta, T, w0=w0, seed=seed, one_client=one_client) for eta in etas]
    small = [i for i, eta in enumerate(etas) if eta * Lg <= 0.1]
    e_rho = {i: thm2_errors(prob, etas[i], T, rho=rho, w0=w0, seed=seed, one_client=one_client)[1:]
             for i in small}                                                                # perturbed rounds
    lim = [3 * Lg ** 2 * eta ** 2 for eta in etas]
    printed = max(float(x.max()) / b for x, b in zip(e, lim))
    squared = max(float(x.pow(2).max()) / b for x, b in zip(e, lim))
    rho_ratio = {etas[i]: float(x.pow(2).max()) / lim[i] for i, x in e_rho.items()}
    with_rho = max(rho_ratio.values())
    eta_w = max(rho_ratio, key=rho_ratio.get)
    rho_where = ", ".join(f"eta {eta:g}: {r:.3g}" for eta, r in rho_ratio.items())
    mean_e = [float(x.mean()) for x in e]
    fit = (loglog_fit([etas[i] for i in small], [mean_e[i] for i in small]) if len(small) > 1
           else (float("nan"),) * 3)
    k = fit[0]
    det = {"n": n, "d": d, "T": T, "L_g": Lg, "etas": list(etas), "bound": lim, "mean_e": mean_e,
           "max_e": [float(x.max()) for x in e], "mean_e_rho": [float(x.mean()) for x in e_rho.values()],
           "rho": rho, "rho_ratio_by_eta": rho_ratio, "one_client": one_client,
           "slope_points": [etas[i] for i in small], "slope_all_points": loglog_slope(etas, mean_e)}
    fig = save_figure(out_dir, f"{PAPER}_thm2-slope.png",
                      {"mean e_t (rho=0)": (etas, mean_e), "3 L_g^2 eta^2": (etas, lim),
                       f"mean e_t (FedLESAM rho={rho})": ([etas[i] for i in small], det["mean_e_rho"])},
                      xlabel="eta_g eta_l", ylabel="estimation error",
                      title="Theorem 2, E = 1, full participation", ref=(1.0, etas, mean_e))
    return [_claim("thm2-printed", "estimation error, as printed (not squared)", "Thm 2",
                   "e_t <= 3 L_g^2 eta^2 every round", f"max e_t / bound {printed:.3g}", bound(printed, 1.0),
                   printed, det, fig, slack=slack(printed, 1.0)),
            _claim("thm2-squared", "estimation error, squared (the proof's quantity)", "Thm 2 / App. B.4",
                   "e_t^2 <= 3 L_g^2 eta^2 every round", f"max e_t^2 / bound {squared:.3g}",
                   bound(squared, 1.0), squared, det, fig, slack=slack(squared, 1.0)),
            _claim("thm2-slope", "the estimation error is controlled by the learning rates",
                   "Thm 2; Sec. 5.3", "e ~ eta (log-log slope 1, 95% interval +- 0.15) over the small-angle "
                   "range eta L_g <= 0.1 the proof needs",
                   f"slope {k:.3f} [{fit[1]:.3f}, {fit[2]:.3f}] (all etas: {det['slope_all_points']:.3f})",
                   rate(fit, 1.0, 0.15), k, {**det, "fit_95": fit}, fig),
            _claim("thm2-with-rho", "Theorem 2 along FedLESAM's own trajectory (rho > 0)",
                   "Thm 2 (stated for FedLESAM)", "e_t^2 <= 3 L_g^2 eta^2 every round, eta L_g <= 0.1",
                   f"rho={rho}: max e_t^2 / bound {with_rho:.3g} at eta {eta_w:g} (eta L_g = {eta_w * Lg:.2g}); "
                   f"per eta: {rho_where}", bound(with_rho, 1.0), with_rho, det, fig,
                   regime=f"inside the small-angle range eta L_g <= 0.1 (L_g = {Lg:.2f})",
                   slack=slack(with_rho, 1.0))]


# ---------------------------------------------------------------------------------------------------
# the estimator beyond the theorem, perturbation drift, flatness
# ---------------------------------------------------------------------------------------------------
def check_estimator(n=20, n_active=5, d=10, T=200, E=10, eta_l=0.02, rho=0.05, spread=1.0, seed=0,
                    out_dir=None, sign: float = 1.0) -> list[Claim]:
    """Eq. (3) under partial participation: cos(w_i^old - w^t, grad F(w^t)) for every participation, in the
    transient (rounds with ||grad F(w^t)|| above 10x its median over the last half) and near convergence
    (the last half), and by staleness (rounds since the client's previous participation). The estimate
    should point along the global gradient: mean cos > 0.5 holds, < 0 is a violation."""
    prob = make_quadratics(n, d, shared=False, L=1.0, mu=0.1, spread=spread, seed=seed)
    tr = simulate(prob, T=T, E=E, eta_l=eta_l, rho=rho, n_active=n_active, w0=prob.x_star + 3.0, seed=seed,
                  probe=True, sign=sign)
    est, gn = np.array(tr["est"]), prob.grad_f(tr["w"][:-1]).norm(dim=-1).numpy()
    transient = gn > 10 * np.median(gn[T // 2:])
    phase = {"early": est[transient[est[:, 0].astype(int)]], "late": est[est[:, 0] >= T / 2]}
    mc = {k: float(v[:, 3].mean()) if len(v) else math.nan for k, v in phase.items()}   # nan: no such round

    def by_staleness(rows):
        s = np.minimum(rows[:, 2], 8)
        return {int(v): float(rows[s == v, 3].mean()) for v in np.unique(s)}

    by, late_by = by_staleness(est), by_staleness(phase["late"])
    fig = save_figure(out_dir, f"{PAPER}_eq3-estimator-late.png",
                      {"all rounds": (list(by), list(by.values())),
                       "last half": (list(late_by), list(late_by.values()))},
                      xlabel="staleness (rounds; 8 = 8+)", ylabel="cos(w_old - w, grad F(w))", logx=False,
                      logy=False, title=f"Eq. (3), {n_active}/{n} active")
    det = {"n": n, "n_active": n_active, "T": T, "E": E, "eta_l": eta_l, "rho": rho,
           "transient_rounds": int(transient.sum()), "cos_by_staleness": by, "cos_by_staleness_late": late_by,
           "mean_cos": mc}
    late_txt = "; late, by staleness " + ", ".join(f"{s_}: {c:.2f}" for s_, c in late_by.items())
    return [_claim(f"eq3-estimator-{k}", f"w_i^old - w^t estimates the global gradient direction ({what})",
                   "Eq. (3); Sec. 4.1", "cos(w_i^old - w^t, grad F(w^t)) > 0.5",
                   f"mean cos {mc[k]:.3f} ({len(phase[k])} participations)"
                   + (late_txt if k == "late" else ""),
                   judge(mc[k], 0.5, 0.0), mc[k], det, fig if k == "late" else None)
            for k, what in (("early", "transient"), ("late", "near convergence"))]


def check_pd(n=20, d=10, T=100, E=10, eta_l=0.02, rho=0.05, settings=((None, 0.0), (None, 0.5), (5, 0.0)),
             spread=1.0, seed=0, sign: float = 1.0) -> Claim:
    """Sec. 4.1 / Fig. 2 left: perturbation drift PD (unit vectors) is smaller for FedLESAM than for FedSAM,
    in every setting (n_active, sigma), averaged over rounds 1..T-1. ``sign = -1`` (a perturbation) flips
    FedLESAM's perturbation only."""
    prob = make_quadratics(n, d, shared=False, L=1.0, mu=0.1, spread=spread, seed=seed)
    res = []
    for n_act, sig in settings:
        kw = {"T": T, "E": E, "eta_l": eta_l, "rho": rho, "n_active": n_act, "sigma": sig,
              "w0": prob.x_star + 3.0, "seed": seed, "probe": True}
        tr = {meth: simulate(prob, method=meth, sign=sign if meth == "fedlesam" else 1.0, **kw)["PD"][1:].numpy()
              for meth in ("fedsam", "fedlesam")}
        tol = noise_tol(se_of(tr["fedlesam"] - tr["fedsam"]), tr["fedsam"].max())    # rounds' paired noise
        res.append({"n_active": n_act or n, "sigma": sig, "tol": tol, **{k: float(v.mean()) for k, v in tr.items()}})
    gaps = [r["fedlesam"] - r["fedsam"] for r in res]
    ok = (HOLDS if all(g < -r["tol"] for g, r in zip(gaps, res))
          else VIOLATED if any(g > r["tol"] for g, r in zip(gaps, res)) else INCONCLUSIVE)
    return _claim("PD", "FedLESAM has lower perturbation drift than FedSAM", "Sec. 4.1; Fig. 2 (left)",
                  "PD(FedLESAM) < PD(FedSAM), beyond 3 SE of the per-round difference",
                  "; ".join(f"{r['n_active']}/{n}, sigma={r['sigma']}: {r['fedlesam']:.3f} vs "
                            f"{r['fedsam']:.3f} (tol {r['tol']:.2g})" for r in res),
                  ok, max(r["fedlesam"] / r["fedsam"] for r in res),
                  {"n": n, "d": d, "T": T, "E": E, "eta_l": eta_l, "rho": rho, "results": res,
                   "PD": "(1/(2|S|E)) sum_{k,i} ||unit grad F(w_gk) - unit delta_ik||, w_gk virtual global"})


def check_flatness(n=10, het=0.8, spread=0.3, R=32, T=150, E=10, eta_l=0.01, rho=0.2, rel_margin=0.05,
                   seed=0, sign: float = 1.0, lesam: str = "fedlesam") -> Claim:
    """Sec. 6.2 / Fig. 2 (right) at toy scale: on the 1-D sharp/flat landscape FedLESAM's final global model
    is flatter (lower lambda_max of grad^2 f, averaged over R starts) than both FedSAM's and FedAvg's; the
    relative gain over the flatter baseline must exceed ``rel_margin``. Perturbations: ``sign = -1`` flips
    FedLESAM's perturbation; ``lesam = "fedsam"`` runs FedSAM's local ascent in FedLESAM's place."""
    prob = make_sharp_flat(n, 1, het=het, spread=spread, seed=seed)
    kw = {"T": T, "E": E, "eta_l": eta_l, "rho": rho, "seed": seed}
    run = {"fedavg": {"method": "fedavg"}, "fedsam": {"method": "fedsam"}, "fedlesam": {"method": lesam, "sign": sign}}
    res = flatness_runs(prob, {k: (simulate, {**kw, **a}) for k, a in run.items()},
                        R=R, lo=-2.5, hi=2.5)
    a, b = res["fedlesam"]["lam_max"], min(res["fedsam"]["lam_max"], res["fedavg"]["lam_max"])
    rel = (b - a) / b
    return _claim("flatness", "FedLESAM finds flatter global minima than FedSAM and FedAvg",
                  "Sec. 6.2; Figs. 2-3", "lambda_max(FedLESAM) < lambda_max of both baselines",
                  flatness_text(res), judge(rel, rel_margin, -rel_margin), rel,
                  {"toy": "SharpFlat 1-D", "n": n, "het": het, "spread": spread, "R": R, "T": T, "E": E,
                   "eta_l": eta_l, "rho": rho, "rel_margin": rel_margin, "results": res,
                   "relative_gain_vs_fedsam": (res["fedsam"]["lam_max"] - a) / res["fedsam"]["lam_max"]})


def check_het_sharpens(n=10, hets=(0.0, 0.4, 0.8, 0.95), spread=0.3, R=16, T=150, E=10, eta_l=0.01,
                       rel_margin=0.05, seed=0) -> Claim:
    """Fig. 1's "heterogeneity sharpens the global minimum", as a toy analogue (an observation: the paper
    shows it on image data): FedAvg on the 1-D sharp/flat landscape from R starts, lambda_max of grad^2 f at
    the minimum each run selects, per heterogeneity of the clients' sharp/flat mixing. Holds when the most
    heterogeneous setting is sharper than the least by more than ``rel_margin`` (relative)."""
    lam = {}
    for h in hets:
        prob = make_sharp_flat(n, 1, het=h, spread=spread, seed=seed)
        res = flatness_runs(prob, {"fedavg": (simulate, {"method": "fedavg", "T": T, "E": E, "eta_l": eta_l,
                                                          "rho": 0.0, "seed": seed})}, R=R, lo=-2.5, hi=2.5)
        lam[h] = res["fedavg"]
    rel = (lam[hets[-1]]["lam_max"] - lam[hets[0]]["lam_max"]) / lam[hets[0]]["lam_max"]
    return _claim("het-sharpens-toy", "observation (toy analogue of Fig. 1): heterogeneity sharpens the "
                  "minimum FedAvg selects", "Fig. 1 (image data in the paper)",
                  f"lambda_max at het {hets[-1]:g} > at het {hets[0]:g} by > {100 * rel_margin:.0f}%",
                  "lam_max (flat basin fraction) " + ", ".join(f"het {h:g}: {v['lam_max']:.3g} "
                                                               f"({v['flat_frac']:.2f})" for h, v in lam.items())
                  + f"; change {100 * rel:+.0f}%", judge(rel, rel_margin, -rel_margin), rel,
                  {"toy": "SharpFlat 1-D", "n": n, "hets": list(hets), "R": R, "T": T, "E": E, "eta_l": eta_l,
                   "results": {str(h): v for h, v in lam.items()}}, kind=OBSERVATION)


# ---------------------------------------------------------------------------------------------------
# cost and communication bookkeeping, on the trainer's own algorithms
# ---------------------------------------------------------------------------------------------------
TABLE5 = {  # Table 5 (CIFAR10, Dir 0.1): (round ratio, cost ratio) to reach 68% and 74%, relative to FedAvg
    "fedsam": ((1.02, 1.02), (0.83, 0.83)), "mofedsam": ((0.47, 0.94), (0.51, 1.02)),
    "fedgamma": ((0.76, 1.51), (0.44, 0.89)), "fedsmoo": ((0.51, 1.02), (0.29, 0.58)),
    "fedlesam-s": ((0.57, 1.14), (0.38, 0.77)), "fedlesam-d": ((0.46, 0.92), (0.31, 0.60))}


def check_cost_and_comm(n=6, d=4, K=3, seed=0, table5: dict = TABLE5, engine: dict | None = None) -> list[Claim]:
    """Sec. 4 / Table 5: FedLESAM needs one gradient per local step (FedSAM two), counted on the trainer's
    engine; and Table 5's communication costs are its rounds times a per-round multiplier of 1 or 2 (each
    ratio printed to two decimals: the multiplier's interval from that rounding must contain 1 or 2). The
    trainer's own per-round floats (down + up, relative to FedAvg) are reported beside the table's.
    Perturbations: ``table5`` replaces Table 5's rows; ``engine`` {name: trainer algorithm} runs another
    algorithm's spec under a name (e.g. FedSAM's for FedLESAM)."""
    prob = make_quadratics(n, d, shared=False, seed=seed)
    grads, mult = {}, {}
    for a in ("fedavg", "fedsam", "fedlesam", *table5):
        run = make_run(prob, (engine or {}).get(a, a), K=K, lr=0.05, x0=prob.x_star + 1.0, seed=seed)
        ctx = run.round()
        grads[a] = run.n_grads / (K * ctx.n)
        c = run.algo.comm(run, ctx)
        mult[a] = c["floats_down"] + c["floats_up"]
    mult = {a: v / mult["fedavg"] for a, v in mult.items()}
    table, ok = {}, True
    for a, rows in table5.items():
        iv = [((c - 0.005) / (r + 0.005), (c + 0.005) / (r - 0.005)) for r, c in rows]
        k = [next((m for m in (1, 2) if lo <= m <= hi), None) for lo, hi in iv]
        table[a] = {"intervals": iv, "multiplier": k[0] if len(set(k)) == 1 else None}
        ok &= table[a]["multiplier"] is not None
    det = {"grads_per_step": grads, "trainer_multiplier": mult, "table5": table, "K": K, "n": n}
    cost = _claim("cost-grads", "FedLESAM costs one forward/backward per local step, FedSAM two",
                  "Sec. 4.1; Table 5 (compute time)", "gradients per client-step: FedLESAM 1, FedSAM 2",
                  ", ".join(f"{a} {grads[a]:g}" for a in ("fedavg", "fedsam", "fedlesam")) + " on the trainer",
                  HOLDS if grads["fedlesam"] == 1 and grads["fedsam"] == 2 else VIOLATED, grads["fedlesam"], det)
    diff = {a: (table[a]["multiplier"], mult[a]) for a in table5 if table[a]["multiplier"] != mult[a]}
    comm = _claim("comm-bookkeeping", "Table 5's communication cost = rounds x a per-round multiplier of 1 or 2",
                  "Table 5", "cost ratio / round ratio in {1, 2}, the same at 68% and 74%",
                  "table multipliers " + ", ".join(f"{a} {v['multiplier']}" for a, v in table.items())
                  + "; the trainer's per-round floats differ for "
                  + (", ".join(f"{a} ({k} vs {m:g})" for a, (k, m) in diff.items()) or "none"),
                  HOLDS if ok else VIOLATED, len(diff), det)
    return [cost, comm]


# ---------------------------------------------------------------------------------------------------
def run(quick: bool = False, out_dir: Path | None = None, seed: int = 0) -> list[Claim]:
    """Every check. ``quick`` runs the same designs (the same T, eta, rho and K grids) with fewer replicates:
    R = 16 start points instead of 64 in the flatness comparisons (the command runs fewer seeds too)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)                       # tiny float64 programs: one thread is fastest and fair
    R = 16 if quick else 64
    try:
        claims = check_jensen(seed=seed, out_dir=out_dir)
        claims += check_lemma2(seed=seed)
        claims += [check_lemma3(seed=seed), check_lemma4(seed=seed)]
        claims += check_thm1(seed=seed, out_dir=out_dir)
        claims.append(check_rho_tradeoff(seed=seed, out_dir=out_dir))
        claims += check_thm2(seed=seed, out_dir=out_dir)
        claims += check_estimator(seed=seed, out_dir=out_dir)
        claims.append(check_pd(seed=seed))
        claims.append(check_flatness(seed=seed, R=R))
        claims.append(check_het_sharpens(seed=seed, R=R))
        claims += check_cost_and_comm(seed=seed)
    finally:
        torch.set_num_threads(threads)
    return claims


# ---------------------------------------------------------------------------------------------------
# power: the perturbation each finding must catch (theory/power.py)
# ---------------------------------------------------------------------------------------------------
def _as_list(rows) -> list[Claim]:
    return rows if isinstance(rows, list) else [rows]


WEIGHT0 = [2.0] + [1.0] * 9                     # the server's mean with client 0 counted twice (n = 10)
TABLE5_HOLDING = {k: v for k, v in TABLE5.items() if k != "fedlesam-d"}   # the rows whose arithmetic holds

# Power (theory/power.py): each design is a check at quick sizes, restricted (where a row is violated or inconclusive
# as a whole) to the part of its design where the correct algorithm is not "violated"; each row declares the mistakes
# it should catch, from theory/mistakes.py's library (rule copies replaced for the call) or the switches below.
MISTAKES = {m.name: m for m in (
    Mistake("jensen-sign", "SAM's inner maximisation sign-flipped: each objective at its maximiser reflected, "
            "F(x - d*)", switch={"sign": -1.0}),
    Mistake("server-sign", "server step sign-flipped (w - eta_g Delta -> w + eta_g Delta)",
            switch={"server_sign": -1.0}),
    Mistake("weight-client0", "wrong aggregation weight: client 0 counted twice in the server's mean",
            switch={"weights": WEIGHT0}),
    Mistake("rho-unwired", "rho never reaches the update (the perturbation switched off)", switch={"sign": 0.0}),
    Mistake("estimate-one-client", "the estimate is one client's own step, heterogeneity not averaged out",
            switch={"one_client": True}),
    Mistake("lesam-as-fedsam", "FedLESAM's perturbation taken from the client's own gradient (FedSAM's local "
            "ascent) instead of the global estimate", switch={"lesam": "fedsam"}),
    Mistake("trainer-fedsam-spec", "FedLESAM run with FedSAM's spec on the trainer (an ascent gradient every step)",
            switch={"engine": {"fedlesam": "fedsam"}}),
    Mistake("table5-misread", "one Table 5 ratio mis-transcribed (FedSAM's cost at 74%: 0.83 -> 0.93)",
            switch={"table5": {**TABLE5_HOLDING, "fedsam": ((1.02, 1.02), (0.83, 0.93))}}),
)}


def _design(check, **where):
    return lambda seed, **kw: _as_list(check(seed=seed, **{**where, **kw}))


DESIGNS = {
    "jensen": _design(check_jensen),
    "lemma2": _design(check_lemma2, T=20),
    "lemma2-noise": _design(check_lemma2, T=20, sigmas=(0.0, 0.1)),
    "lemma4": _design(check_lemma4, T=20),
    "thm1": _design(check_thm1, Ts=(100, 200)),
    "thm1-rho0": _design(check_thm1, Ts=(100,), rho=0.0),
    "rho": _design(check_rho_tradeoff),
    "thm2": _design(check_thm2),
    "thm2-large-eta": _design(check_thm2, etas=(0.1, 0.3, 1.0)),
    "thm2-mid-eta": _design(check_thm2, etas=(0.003, 0.01, 0.03, 0.1)),
    "estimator": _design(check_estimator),
    "estimator-E1": _design(check_estimator, E=1),
    "pd-full": _design(check_pd, settings=((None, 0.0), (None, 0.5))),
    "flatness": _design(check_flatness, R=16),
    "cost": _design(check_cost_and_comm),
    "comm": _design(check_cost_and_comm, table5=TABLE5_HOLDING),
}
_LOCAL = ("step-x2", "weight-decay", "sam-sign", "sam-unnormalised", "lesam-sign")
POWER = {
    "jensen-trend": ("jensen", ("jensen-sign",)),
    "L2-fedsam": ("lemma2", _LOCAL),
    "L2-fedsam-noise": ("lemma2-noise", _LOCAL),
    "L4": ("lemma4", _LOCAL),
    "thm1-fedsam": ("thm1", _LOCAL + ("server-sign", "weight-client0")),
    "thm1-fedlesam": ("thm1", _LOCAL + ("server-sign", "weight-client0")),
    "thm1-independent-rho": ("thm1-rho0", _LOCAL + ("weight-client0",)),
    "rho-tradeoff": ("rho", _LOCAL + ("rho-unwired",)),
    "thm2-printed": ("thm2-large-eta", ("step-x2", "weight-decay", "estimate-one-client")),
    "thm2-squared": ("thm2", ("step-x2", "weight-decay", "estimate-one-client")),
    "thm2-slope": ("thm2", ("step-x2", "weight-decay", "estimate-one-client")),
    "thm2-with-rho": ("thm2-mid-eta", ("step-x2", "weight-decay", "estimate-one-client")),
    "eq3-estimator-early": ("estimator", _LOCAL),
    "eq3-estimator-late": ("estimator-E1", _LOCAL),
    "PD": ("pd-full", _LOCAL),
    "flatness": ("flatness", _LOCAL + ("lesam-as-fedsam",)),
    "cost-grads": ("cost", ("trainer-fedsam-spec",)),
    "comm-bookkeeping": ("comm", ("table5-misread",)),
}

# Tighter instances (theory/power.py): regimes Theorem 1 and Lemma 4 allow that bring the bound nearer the measurement.
# Theorem 1 holds for any start w^0, any rho, N, E, d and T >= 100 under its schedule; Lemma 4 at eta_l = 1/(10EL)
# for any heterogeneity and any A1 noise (A1 bounds only the unit gradient's variance).
_X0 = "w^0 = x* (F(w^0) = F*: only the RHS's rho terms remain)"
TIGHTER = {
    "thm1-fedsam": (
        ("T = 6400 (a longer horizon), w^0 = x* + 2 as committed", "thm1", {"Ts": (6400,)}),
        ("w^0 = x* + 0.5 (F(w^0) - F* 16x smaller), T in {100, 200}", "thm1", {"start": 0.5}),
        (f"{_X0}, T in {{100, 200}}", "thm1", {"start": 0.0}),
        (f"{_X0}, mu = 0.01 (worse conditioning), T = 300", "thm1", {"start": 0.0, "mu": 0.01, "Ts": (300,)}),
        (f"{_X0}, T = 350", "thm1", {"start": 0.0, "Ts": (350,)}),
        (f"{_X0}, T = 600: past FedSAM's floor (thm1-independent-rho)", "thm1", {"start": 0.0, "Ts": (600,)})),
    "thm1-fedlesam": (
        ("T = 6400 (a longer horizon), w^0 = x* + 2 as committed", "thm1", {"Ts": (6400,)}),
        ("w^0 = x* + 0.5 (F(w^0) - F* 16x smaller), T in {100, 200}", "thm1", {"start": 0.5}),
        ("w^0 = x* + 0.4, T in {100, 200}", "thm1", {"start": 0.4}),
        (f"{_X0}, rho = 0.3, T = 200", "thm1", {"start": 0.0, "rho": 0.3, "Ts": (200,)}),
        (f"{_X0}, T in {{100, 200}}", "thm1", {"start": 0.0}),
        ("d = 1 (L = mu = 0.1), T in {100, 200}", "thm1", {"d": 1})),
    "L4": (
        ("homogeneous clients (spread 0: sigma_g = 0), exact gradients", "lemma4", {"spread": 0.0}),
        ("homogeneous, E = 1, w^0 = x* + 10, exact gradients", "lemma4", {"spread": 0.0, "E": 1, "start": 10.0}),
        ("stochastic gradients sigma = 2, spread 0.1, T = 300", "lemma4", {"sigma": 2.0, "spread": 0.1, "T": 300}),
        ("stochastic gradients sigma = 3, homogeneous, E = 1, T = 60", "lemma4", {"sigma": 3.0, "spread": 0.0, "E": 1}),
        ("stochastic gradients sigma = 2, homogeneous, T = 300 (stationary rounds dominate)", "lemma4",
         {"sigma": 2.0, "spread": 0.0, "T": 300})),
}
