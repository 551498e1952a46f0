"""Spectral estimators over a matrix-free symmetric operator : top-k eigenpairs, trace, density.

- ``top_eigenvalues``: Lanczos with full re-orthogonalisation (Golub & Van Loan, Matrix
  Computations, section 10.1; "twice is enough" classical Gram-Schmidt) and a residual-based
  stopping rule; deflated power iteration as the reference (PyHessian's method, with a shift so
  that it can target the largest algebraic or most negative eigenvalues); ARPACK through scipy's
  ``eigsh``.
- ``trace``: Hutchinson (Rademacher probes, standard error from the sample variance) and Hutch++
  (Meyer, Musco, Musco & Woodruff 2021, Alg. 1), optionally after deflating a Krylov subspace that
  holds the top eigenvectors.
- ``density``: stochastic Lanczos quadrature (Ghorbani, Krishnan & Xiao 2019; Lin, Saad & Yang
  2016): nodes = eigenvalues of the tridiagonal T, weights = squared first components of its
  eigenvectors, smoothed with Gaussians.

Every random draw comes from ``torch.Generator().manual_seed(seed)``: the same seed gives the
same numbers. ``op`` is any ``hvp.Operator`` (``HessianOperator``, ``MatrixOperator``).
"""
from __future__ import annotations

import math
import time

import numpy as np
import torch

from ..errors import UserError

WHICH = ("LA", "SA", "LM")  # largest algebraic, smallest algebraic (most negative), largest magnitude


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(seed))


def _randn(gen, shape, op) -> torch.Tensor:
    return torch.randn(shape, generator=gen, dtype=torch.float64).to(op.device, op.dtype)


def _rademacher(gen, shape, op) -> torch.Tensor:
    return (torch.randint(0, 2, tuple(np.atleast_1d(shape)), generator=gen) * 2 - 1).to(op.device, op.dtype)


def _orthogonalise(w: torch.Tensor, Q: torch.Tensor) -> torch.Tensor:
    """Remove from the rows of ``w`` their components along the orthonormal rows of ``Q`` (twice)."""
    for _ in range(2):
        w = w - (w @ Q.T) @ Q
    return w


def lanczos_steps(op, v0: torch.Tensor, n_steps: int, gen: torch.Generator):
    """Lanczos with full re-orthogonalisation. Yields ``(alphas, betas, Q)`` after every step j:
    T = tridiag(betas[:-1], alphas, betas[:-1]) = Q op Q^T, and ``betas[-1]`` is the norm of the
    next residual (the Ritz residual of eigenvector s of T is ``betas[-1] * |s[-1]|``). On breakdown
    (an invariant subspace was found) the next vector is a fresh random one orthogonal to Q and the
    coupling is set to 0, so that ``n_steps == op.dim`` always reaches every eigenvalue.
    Memory: ``n_steps`` vectors of size ``op.dim``.
    """
    n_steps = min(n_steps, op.dim)
    Q = torch.empty(min(n_steps, 32), op.dim, dtype=op.dtype, device=op.device)
    alphas, betas, scale = [], [], 0.0
    q = v0 / v0.norm()
    for j in range(n_steps):
        if j == Q.shape[0]:
            Q = torch.cat([Q, torch.empty(min(Q.shape[0], n_steps - j), op.dim, dtype=op.dtype,
                                          device=op.device)])
        Q[j] = q
        w = op.matvec(q)
        alphas.append(float(q @ w))
        w = _orthogonalise(w, Q[:j + 1])
        betas.append(float(w.norm()))
        scale = max(scale, abs(alphas[-1]) + betas[-1])
        breakdown = betas[-1] <= 100 * torch.finfo(op.dtype).eps * scale
        if breakdown and j + 1 < n_steps:
            betas[-1] = 0.0
            w = _orthogonalise(_randn(gen, op.dim, op), Q[:j + 1])
        yield alphas, betas, Q[:j + 1]
        q = w / w.norm()


def _ritz(alphas, betas):
    """Eigenvalues and eigenvectors of the Lanczos tridiagonal T (float64, ascending)."""
    import scipy.linalg             # imported when first used: the probes import without scipy's cost
    return scipy.linalg.eigh_tridiagonal(np.array(alphas), np.array(betas[:-1]))


def _wanted(theta: np.ndarray, which: str) -> np.ndarray:
    """Indices of the eigenvalues in the requested order (most wanted first)."""
    key = {"LA": -theta, "SA": theta, "LM": -np.abs(theta)}[which]
    return np.argsort(key, kind="stable")


def _check(op, k: int, which: str, tol: float, method: str):
    if which not in WHICH:
        raise UserError(f"unknown which={which!r}; use 'LA' (largest), 'SA' (most negative) or 'LM'")
    if not 1 <= k <= op.dim:
        raise UserError(f"k={k} must be between 1 and the number of parameters selected ({op.dim}); "
                        "ask for fewer eigenvalues or select more parameters")
    if not tol > 0:
        raise UserError(f"tol={tol} must be positive")
    if method not in ("lanczos", "power", "eigsh"):
        raise UserError(f"unknown method {method!r}; use 'lanczos', 'power' or 'eigsh'")


ZERO_ULPS = 100     # an eigenvalue within 100 eps(dtype) x the spectral scale of zero is zero within round-off


def zero_band(scale: float, dtype: torch.dtype) -> float:
    """Eigenvalues with |lambda| <= this are zero within round-off: ZERO_ULPS * eps(dtype) * scale, ``scale`` the
    largest |eigenvalue| seen (Lanczos: the largest |Ritz value|, a lower bound on ||H|| that converges first).
    A Hessian-vector product in float32 carries relative errors of order eps * ||H||, so a computed value below
    this is no evidence of a non-zero eigenvalue, let alone of its sign."""
    return ZERO_ULPS * float(torch.finfo(dtype).eps) * float(scale)


def top_eigenvalues(op, k: int = 1, which: str = "LA", tol: float = 1e-3, max_iter: int | None = None,
                    seed: int = 0, method: str = "lanczos") -> dict:
    """The k extreme eigenpairs of ``op`` (``which``: 'LA' largest, 'SA' most negative, 'LM').

    Stopping rule (Lanczos and power): every wanted Ritz pair (theta_i, y_i) has a residual
    r_i = ||H y_i - theta_i y_i|| <= tol * |theta_i|, so that an eigenvalue of H lies within
    tol * |theta_i| of theta_i (a bound, not an estimate). The usual refinement r_i^2 / gap_i
    (Kato-Temple, gap to the nearest other Ritz value) is returned as ``error_estimates`` but not
    used to stop: the Ritz gap over-estimates the true gap while a close eigenvalue is still
    undiscovered, and stopped 10x early on clustered spectra (benchmarks/bench_curvature.py).
    eigsh uses ARPACK's rule with ``tol``. ``max_iter`` bounds the Lanczos steps (default
    ``min(dim, max(100, 10 k))``), the power steps per eigenvalue (default 1000) or eigsh's restarts.
    ``zero_tol`` (:func:`zero_band`) and ``zero_within_round_off`` (one flag per eigenvalue) say which of them are
    zero within round-off.
    Returns eigenvalues (ordered, most wanted first), residuals r_i, error_estimates, eigenvectors
    ``[k, P]`` (unit norm, in the full ParamSpace layout, zeros outside a parameter filter),
    n_products, seconds, converged.
    """
    _check(op, k, which, tol, method)
    gen, n0, t0 = _gen(seed), op.n_products, time.perf_counter()
    solver = {"lanczos": _lanczos_top, "power": _power_top, "eigsh": _eigsh_top}[method]
    op.spectral_scale = None
    vals, vecs, res, err, converged, n_used = solver(op, k, which, tol, max_iter, gen)
    scale = max([abs(float(x)) for x in vals] + [op.spectral_scale or 0.0])
    band = zero_band(scale, op.dtype)
    return {"eigenvalues": [float(x) for x in vals], "residuals": [float(x) for x in res],
            "zero_tol": band, "spectral_scale": scale, "zero_within_round_off": [abs(float(x)) <= band for x in vals],
            "error_estimates": [float(x) for x in err], "converged": bool(converged),
            "n_products": n_used if n_used is not None else op.n_products - n0,
            "seconds": time.perf_counter() - t0, "method": method, "which": which, "k": k, "tol": tol,
            "seed": seed, "dim": op.dim, "eigenvectors": op.embed(vecs)}


def _lanczos_top(op, k, which, tol, max_iter, gen):
    max_iter = min(op.dim, max(max_iter or max(100, 10 * k), k))
    converged = False
    for alphas, betas, Q in lanczos_steps(op, _randn(gen, op.dim, op), max_iter, gen):
        m = len(alphas)
        if m < k:
            continue
        theta, S = _ritz(alphas, betas)
        idx = _wanted(theta, which)[:k]
        res = np.abs(betas[-1] * S[-1, idx])
        gaps = np.array([np.min(np.abs(np.delete(theta, i) - theta[i])) if m > 1 else 0.0 for i in idx])
        err = np.where(gaps > res, res**2 / np.where(gaps > 0, gaps, 1.0), res)
        scale = np.maximum(np.abs(theta[idx]), 1e-12 * np.abs(theta).max())
        converged = bool(np.all(res <= tol * scale)) or m == op.dim
        if converged:
            break
    vecs = torch.as_tensor(S[:, idx].T, dtype=op.dtype, device=op.device) @ Q
    op.spectral_scale = float(np.abs(theta).max())          # max |Ritz value|: a lower bound on ||op||, for zero_band
    return theta[idx], vecs, res, err, converged, None


def _power_top(op, k, which, tol, max_iter, gen):
    """Deflated power iteration (PyHessian's method) on H + shift*I; the shift (a first power run
    for the largest magnitude |mu|) makes the wanted end of the spectrum the dominant one. The
    residual of the i-th vector is that of the deflated operator (I - V V^T) H."""
    max_iter = max_iter or 1000
    if which == "LM":
        return _power_run(op, k, 0.0, 1.0, tol, max_iter, gen)
    (mu,), *_ = _power_run(op, 1, 0.0, 1.0, tol, max_iter, gen)
    op.spectral_scale = abs(float(mu))
    sign = -1.0 if which == "SA" else 1.0    # SA: iterate |mu| I - H, whose dominant end is H's bottom
    return _power_run(op, k, abs(mu), sign, tol, max_iter, gen)


def _power_run(op, k, shift, sign, tol, max_iter, gen):
    """k deflated power iterations on sign * H + shift * I."""
    V = torch.zeros(0, op.dim, dtype=op.dtype, device=op.device)
    vals, res, ok = [], [], True
    for _ in range(k):
        v = _orthogonalise(_randn(gen, op.dim, op), V)
        v = v / v.norm()
        for _ in range(max_iter):
            w = _orthogonalise(op.matvec(v), V)   # the deflated operator (I - V V^T) H
            theta = float(v @ w)
            r = float((w - theta * v).norm())
            if r <= tol * max(abs(theta), 1e-30):
                break
            w = sign * w + shift * v
            v = w / w.norm()
        else:
            ok = False
        V = torch.cat([V, v[None]])
        vals.append(theta)
        res.append(r)
    return np.array(vals), V, np.array(res), np.array(res), ok, None


def _eigsh_top(op, k, which, tol, max_iter, gen):
    from scipy.sparse.linalg import ArpackNoConvergence, eigsh

    if k >= op.dim:
        raise UserError(f"method='eigsh' needs k < dim ({op.dim}); use method='lanczos'")
    n0 = op.n_products
    v0 = torch.randn(op.dim, generator=gen, dtype=torch.float64).numpy()
    try:
        theta, S = eigsh(op.to_linear_operator(), k=k, which=which, tol=tol, v0=v0, maxiter=max_iter)
        converged = True
    except ArpackNoConvergence as e:
        theta, S, converged = e.eigenvalues, e.eigenvectors, False
    n_used = op.n_products - n0
    idx = _wanted(theta, which)
    vecs = torch.as_tensor(S[:, idx].T.copy(), dtype=op.dtype, device=op.device)
    res = (op.matmat(vecs) - torch.as_tensor(theta[idx], dtype=op.dtype, device=op.device)[:, None] * vecs)
    res = res.norm(dim=1).cpu().numpy()      # a check: these k products are not counted as eigsh's
    return theta[idx], vecs, res, res, converged and len(idx) == k, n_used


# ---- trace ----------------------------------------------------------------------------------------
def trace(op, n_products: int = 100, method: str = "hutch++", deflate: int = 0, seed: int = 0,
          tol: float = 1e-2) -> dict:
    """tr(H) from ``n_products`` Hessian-vector products, with a standard error.

    Both estimators split tr(H) = tr(B^T H B) + tr(P H P) over an orthonormal basis B (exact part)
    and its complement (P = I - B B^T, Rademacher probes g -> P g; unbiased given B):
    - ``hutchinson``: B is empty; mean of g^T H g over all probes (Hutchinson 1989).
    - ``hutch++``: B = orth[S, H S] for random orthonormal S with m/3 columns (block Krylov space;
      it contains Meyer et al.'s range(H S), so it is never worse); m/3 products go to the probes.
    - whenever the products left cover the complement of B, it is traced exactly on an orthonormal
      basis instead of probed: ``n_products >= dim`` gives the exact trace (stderr 0).
    - ``deflate=K``: first run Lanczos for the top-K eigenvalues in magnitude (to ``tol``) and put
      its whole Krylov basis into B (its exact part is tr(T) = sum of the alphas, for free); the
      estimator then runs on the complement with the products left.
    stderr is the sample standard deviation of the probe values over sqrt(#probes) (0 when exact).
    """
    if method not in ("hutchinson", "hutch++"):
        raise UserError(f"unknown trace method {method!r}; use 'hutchinson' or 'hutch++'")
    if not 0 <= deflate < op.dim:
        raise UserError(f"deflate={deflate} must be between 0 and dim-1 ({op.dim - 1})")
    least = deflate + 4 if deflate else 2
    if n_products < min(least, op.dim):
        raise UserError(f"n_products={n_products} is too few: give at least {least}"
                        f"{f' for deflate={deflate}' if deflate else ''} (or {op.dim}, the dimension, "
                        "for the exact trace)")
    gen, n0, t0 = _gen(seed), op.n_products, time.perf_counter()
    B = torch.zeros(0, op.dim, dtype=op.dtype, device=op.device)
    exact = 0.0
    if deflate:
        B, exact = _krylov_basis(op, deflate, max(n_products // 2, deflate + 2), tol, gen)
    if method == "hutch++":
        B, exact = _sketch_basis(op, B, exact, n_products - (op.n_products - n0), gen)
    samples, exact, B = _complement(op, B, exact, n_products - (op.n_products - n0), gen)
    est = exact + (samples.mean() if len(samples) else 0.0)
    stderr = samples.std(ddof=1) / math.sqrt(len(samples)) if len(samples) else 0.0
    return {"trace": float(est), "stderr": float(stderr), "n_products": op.n_products - n0,
            "n_probes": len(samples), "exact_dim": int(B.shape[0]), "exact_part": exact,
            "probe_values": samples.tolist(),
            "seconds": time.perf_counter() - t0, "method": method, "deflate": deflate, "seed": seed,
            "dim": op.dim}


def _krylov_basis(op, k, n_steps, tol, gen):
    """Lanczos until the top-k (magnitude) Ritz pairs have residual <= tol*|theta|; returns the whole
    Krylov basis Q and tr(Q H Q^T) = sum of the alphas."""
    for alphas, betas, Q in lanczos_steps(op, _randn(gen, op.dim, op), n_steps, gen):
        if len(alphas) > k:
            theta, S = _ritz(alphas, betas)
            idx = _wanted(theta, "LM")[:k]
            if np.all(np.abs(betas[-1] * S[-1, idx]) <= tol * np.abs(theta[idx])):
                break
    return Q.clone(), float(sum(alphas))


def _sketch_basis(op, B, exact, budget, gen):
    """Hutch++'s low-rank part, reusing the sketch: B += orth[S, H S], exact += tr over the new
    directions. m/3 products for S (also the exact part on span S), m/3 for H Q; when the budget
    covers the free dimension, half of it goes to S and the rest to H S so that B spans everything."""
    n_free = op.dim - B.shape[0]
    s = math.ceil(n_free / 2) if budget >= n_free else min(budget // 3, (budget - 2) // 2)
    if s <= 0:
        return B, exact
    S = _orthonormal_rows(_orthogonalise(_randn(gen, (s, op.dim), op), B))
    HS = op.matmat(S)
    exact += float((S * HS).sum())
    B = torch.cat([B, S])
    U, sv, _ = torch.linalg.svd(_orthogonalise(HS, B).T, full_matrices=False)
    keep = min(int((sv > 1e-10 * sv.max().clamp_min(1e-300)).sum()), op.dim - B.shape[0])
    W = _orthonormal_rows(_orthogonalise(U[:, :keep].T, B))
    exact += float((W * op.matmat(W)).sum())
    return torch.cat([B, W]), exact


def _complement(op, B, exact, budget, gen):
    """The trace on the complement of B: exact on an orthonormal basis of it when the budget covers
    it, else Hutchinson with projected Rademacher probes (returned as samples)."""
    n_free = op.dim - B.shape[0]
    none = np.zeros(0)
    if n_free == 0:
        return none, exact, B
    if budget >= n_free:
        C = torch.linalg.qr(B.T, mode="complete")[0][:, B.shape[0]:].T if B.shape[0] else \
            torch.eye(op.dim, dtype=op.dtype, device=op.device)
        C = _orthonormal_rows(_orthogonalise(C, B))
        return none, exact + float((C * op.matmat(C)).sum()), torch.cat([B, C])
    if budget < 2:
        raise UserError(f"{budget} product(s) are left for the probes after the exact part; give at "
                        "least 2 more (or as many as the dimension for an exact trace)")
    G = _orthogonalise(_rademacher(gen, (budget, op.dim), op), B)
    return (G * op.matmat(G)).sum(dim=1).cpu().double().numpy(), exact, B


def _orthonormal_rows(V: torch.Tensor) -> torch.Tensor:
    return torch.linalg.qr(V.T)[0].T if V.shape[0] else V


# ---- spectral density -----------------------------------------------------------------------------
def density(op, n_steps: int = 80, n_vectors: int = 4, sigma: float | None = None, grid=None,
            n_grid: int = 1000, seed: int = 0) -> dict:
    """Spectral density phi(t) = (1/dim) sum_i delta(t - lambda_i) by stochastic Lanczos quadrature.

    Each of ``n_vectors`` Rademacher start vectors v gives ``n_steps`` nodes theta_j (eigenvalues
    of T) and weights tau_j = (first component of T's j-th eigenvector)^2, so that
    v^T g(H) v / ||v||^2 ~ sum_j tau_j g(theta_j). The density is the weight-averaged sum of
    Gaussians of width ``sigma`` (default 1% of the node range) on ``grid`` (default ``n_grid``
    points over the node range plus a margin). With ``n_steps = dim`` the nodes are the exact
    eigenvalues. Also returns the SLQ trace estimate dim * sum_j tau_j theta_j with its standard
    error over the vectors, and ``moments``: tr(H) and tr(H^2) = ||H||_F^2 (dim * sum_j tau_j theta_j^k), each
    {mean, stderr, n} over the vectors.
    """
    if n_steps < 1 or n_vectors < 1:
        raise UserError(f"n_steps={n_steps} and n_vectors={n_vectors} must be at least 1")
    gen, n0, t0 = _gen(seed), op.n_products, time.perf_counter()
    nodes, weights = [], []
    for _ in range(n_vectors):
        for alphas, betas, _Q in lanczos_steps(op, _rademacher(gen, op.dim, op), n_steps, gen):
            pass
        theta, S = _ritz(alphas, betas)
        nodes.append(theta)
        weights.append(S[0] ** 2)
    nodes, weights = np.array(nodes), np.array(weights)
    grid, dens, sigma = smooth_density(nodes, weights, sigma, grid, n_grid)
    traces = op.dim * (weights * nodes).sum(axis=1)
    moments = {name: _mean_se(op.dim * (weights * nodes ** k).sum(axis=1)) for name, k in (("trace", 1),
                                                                                          ("trace_H2", 2))}
    return {"moments": moments, "nodes": nodes.tolist(), "weights": weights.tolist(), "grid": grid, "density": dens,
            "sigma": sigma, "n_steps": nodes.shape[1], "n_vectors": n_vectors,
            "trace": float(traces.mean()),
            "trace_stderr": float(traces.std(ddof=1) / math.sqrt(n_vectors)) if n_vectors > 1 else None,
            "n_products": op.n_products - n0, "seconds": time.perf_counter() - t0, "seed": seed, "dim": op.dim}


def _mean_se(x: np.ndarray) -> dict:
    """Mean, standard error (None for one value) and count of per-vector estimates."""
    n = len(x)
    return {"mean": float(x.mean()), "stderr": float(x.std(ddof=1) / math.sqrt(n)) if n > 1 else None, "n": n}


def smooth_density(nodes: np.ndarray, weights: np.ndarray, sigma: float | None = None, grid=None,
                   n_grid: int = 1000) -> tuple[list, list, float]:
    """(grid, density, sigma): the quadrature rules ``nodes``/``weights`` ([n_vectors, n_steps]) averaged
    over the vectors and smoothed by Gaussians of width ``sigma`` (default 1% of the node range)."""
    lo, hi = nodes.min(), nodes.max()
    span = hi - lo if hi > lo else max(abs(hi), 1.0)
    sigma = float(sigma) if sigma is not None else 0.01 * span
    if not sigma > 0:
        raise UserError(f"sigma={sigma} must be positive")
    grid = np.asarray(grid, dtype=np.float64) if grid is not None else \
        np.linspace(lo - 0.05 * span - 3 * sigma, hi + 0.05 * span + 3 * sigma, n_grid)
    z = (grid[:, None] - nodes.reshape(-1)[None]) / sigma
    dens = np.exp(-0.5 * z**2) @ weights.reshape(-1) / (len(nodes) * sigma * math.sqrt(2 * math.pi))
    return grid.tolist(), dens.tolist(), sigma
