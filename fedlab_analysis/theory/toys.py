"""Convex toy federated problems with exact constants, vectorised across clients (float64 torch).

Every family is a set of n client objectives f_i on R^d with uniform weights, f = (1/n) sum_i f_i.
Shapes: a per-client point table ``W`` is ``[..., n, d]`` (any leading batch dims: trials, sweeps);
a global point ``x`` is ``[..., d]``. One tensor program, no loop over clients.

Families:
- ``HeteroQuadratics(A, b)``: f_i(x) = 1/2 (x - b_i)^T A_i (x - b_i). Shared Hessian (FedCM T1,
  FedInit M1/M2) or distinct Hessians (FedCM T2, FedInit M3).
- ``LeastSquares(X, y, lam)``: f_i(w) = 1/(2m) ||X_i w - y_i||^2 + lam/2 ||w||^2, minibatch gradients,
  and with ``make_regression`` a closed-form population risk.
- ``Logistic(X, y, lam)``: binary logistic regression on Dirichlet label-skewed clients with label noise
  (non-separable, so x* exists); the only family where FedCM's A2/A3/A5 hold globally.

Constants: ``L`` (max client smoothness), ``mu`` (min client strong convexity), ``mu_f`` (of f),
``x_star``/``f_star``, ``sigma_g2(x)`` = (1/n) sum_i ||grad f_i(x) - grad f(x)||^2 (A5 at x), and
``constants(traj)``: the sups of sigma_g^2 and ||grad f|| along a visited trajectory.
"""
from __future__ import annotations

import math

import numpy as np
import torch

DT = torch.float64


def _t(a) -> torch.Tensor:
    return torch.as_tensor(a, dtype=DT)


def _mv(A: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Batched matrix-vector product with broadcasting: A [..., d, d], v [..., d] -> [..., d]."""
    return (A @ v.unsqueeze(-1)).squeeze(-1)


class _Stacked:
    """``_mv(A, v)`` for one fixed A and many v of a few shapes, bit for bit: ``A @ v`` broadcasts A to v's
    batch and copies it into a [batch, d, d] block for ``bmm`` on every call; this keeps that block per batch
    shape and calls ``bmm`` itself (the same kernel on the same operands, so the same bits)."""

    def __init__(self, A: torch.Tensor):
        self.A, self.blocks = A, {}

    def __call__(self, v: torch.Tensor) -> torch.Tensor:
        key = (v.shape, torch.is_inference_mode_enabled())   # an inference-mode block cannot enter autograd
        hit = self.blocks.get(key)
        if hit is None:
            batch = torch.broadcast_shapes(self.A.shape[:-2], v.shape[:-1])   # slow: once per shape
            if v.dim() < 2 or len(batch) < 1:
                return _mv(self.A, v)                    # matmul folds these shapes into one mm: keep its path
            if len(self.blocks) > 8:                     # a few shapes per problem; never grow without bound
                self.blocks.clear()
            block = self.A.expand(*batch, *self.A.shape[-2:]).reshape(-1, *self.A.shape[-2:])
            hit = self.blocks[key] = (batch, block, tuple(batch) != tuple(v.shape[:-1]))
        batch, block, expand = hit
        v = v.expand(*batch, v.shape[-1]) if expand else v
        return torch.bmm(block, v.reshape(-1, v.shape[-1], 1)).reshape(*batch, -1)


def no_autograd(fn):
    """Run a simulator under ``torch.inference_mode`` (no autograd bookkeeping: a tiny float64 op costs ~10-25%
    less) and hand back ordinary tensors (cloned outside it), so callers may still write into them or
    differentiate through them. Skipped for a problem whose gradient is itself autograd (``prob.autograd``)."""
    import functools

    def plain(x):                                        # a copy with x's exact layout: a reduction over a
        if isinstance(x, torch.Tensor):                  # strided view must not become one over a dense copy
            return torch.empty(0, dtype=x.dtype).set_(x.untyped_storage().clone(), x.storage_offset(), x.shape,
                                                      x.stride())
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return type(x)(plain(v) for v in x)
        return x

    @functools.wraps(fn)
    def run(prob, *a, **kw):
        if getattr(prob, "autograd", False) or torch.is_inference_mode_enabled():
            return fn(prob, *a, **kw)
        with torch.inference_mode():
            out = fn(prob, *a, **kw)
        return plain(out)
    return run


# ---------------------------------------------------------------------------------------------------
# the shared interface
# ---------------------------------------------------------------------------------------------------
class ClientProblem:
    """Base class: subclasses define ``loss(W)``, ``grad(W)`` and ``x_star``; the rest is generic."""

    n: int
    d: int

    def loss(self, W: torch.Tensor) -> torch.Tensor:       # [..., n, d] -> [..., n]
        raise NotImplementedError

    def grad(self, W: torch.Tensor) -> torch.Tensor:       # [..., n, d] -> [..., n, d]
        raise NotImplementedError

    # ---- the global objective f = mean_i f_i ------------------------------------------------
    def at(self, x: torch.Tensor) -> torch.Tensor:
        """Broadcast a global point [..., d] to a client table [..., n, d]."""
        return x.unsqueeze(-2).expand(*x.shape[:-1], self.n, self.d)

    def grads_at(self, x: torch.Tensor) -> torch.Tensor:
        """All client gradients at one global point: [..., d] -> [..., n, d]."""
        return self.grad(self.at(x))

    def f(self, x: torch.Tensor) -> torch.Tensor:
        return self.loss(self.at(x)).mean(-1)

    def grad_f(self, x: torch.Tensor) -> torch.Tensor:
        return self.grads_at(x).mean(-2)

    @property
    def f_star(self) -> torch.Tensor:
        return self.f(self.x_star)

    def sigma_g2(self, x: torch.Tensor) -> torch.Tensor:
        """Gradient dissimilarity at x (FedCM A5, FedInit A5): (1/n) sum_i ||grad f_i - grad f||^2."""
        g = self.grads_at(x)
        return (g - g.mean(-2, keepdim=True)).pow(2).sum(-1).mean(-1)

    def constants(self, traj: torch.Tensor | None = None) -> dict:
        """Exact constants, and the sup of sigma_g^2, ||grad f|| and f - f* along ``traj`` [T, ..., d]."""
        c = {"n": self.n, "d": self.d, "L": float(self.L), "mu": float(self.mu), "mu_f": float(self.mu_f),
             "f_star": float(self.f_star.max()), "sigma_g2_star": float(self.sigma_g2(self.x_star).max())}
        if traj is not None:
            c["sigma_g2_sup"] = float(self.sigma_g2(traj).max())
            c["G_sup"] = float(self.grad_f(traj).norm(dim=-1).max())
            c["D"] = float((traj[0] - self.x_star).pow(2).sum(-1).max())
            c["F"] = float((self.f(traj[0]) - self.f_star).max())
        return c


# ---------------------------------------------------------------------------------------------------
# quadratics
# ---------------------------------------------------------------------------------------------------
class HeteroQuadratics(ClientProblem):
    """f_i(x) = 1/2 x^T A_i x - c_i^T x + e_i, built from centres: c_i = A_i b_i, e_i = 1/2 b_i^T A_i b_i,
    so f_i(x) = 1/2 (x - b_i)^T A_i (x - b_i) >= 0. A: [..., n, d, d] symmetric PSD, b: [..., n, d]."""

    def __init__(self, A, b):
        A, b = _t(A), _t(b)
        self._set(A, _mv(A, b), 0.5 * (b * _mv(A, b)).sum(-1))
        self.b = b

    def _set(self, A, c, e):
        self.A, self.c, self.e = A, c, e
        self.n, self.d = A.shape[-3], A.shape[-1]
        ev = torch.linalg.eigvalsh(A)
        self.L_i, self.mu_i = ev[..., -1], ev[..., 0]             # per client (and per batch element)
        self.L, self.mu = float(self.L_i.max()), float(self.mu_i.min())
        self.A_bar = A.mean(-3)
        self.mu_f = float(torch.linalg.eigvalsh(self.A_bar)[..., 0].min())
        self.x_star = torch.linalg.solve(self.A_bar, self.c.mean(-2))   # mean A_i (x - b_i) = 0

    @classmethod
    def from_linear(cls, A, c, e) -> HeteroQuadratics:
        q = cls.__new__(cls)
        q._set(_t(A), _t(c), _t(e))
        q.b = torch.linalg.lstsq(q.A, q.c.unsqueeze(-1)).solution.squeeze(-1)  # a local minimiser
        return q

    def loss(self, W):
        return 0.5 * (W * _mv(self.A, W)).sum(-1) - (self.c * W).sum(-1) + self.e

    def grad(self, W):
        if self.__dict__.get("_A_mv") is None or self._A_mv.A is not self.A:
            self._A_mv = _Stacked(self.A)                 # rebuilt if A is replaced
        return self._A_mv(W) - self.c

    def hessian_f(self) -> torch.Tensor:
        return self.A_bar


def spectrum_matrix(eigs, rng: np.random.Generator) -> np.ndarray:
    """A random symmetric matrix Q diag(eigs) Q^T with a Haar-random rotation Q."""
    Q, _ = np.linalg.qr(rng.standard_normal((len(eigs), len(eigs))))
    return (Q * np.asarray(eigs)) @ Q.T


def make_quadratics(n: int = 10, d: int = 5, *, shared: bool = True, L: float = 1.0, mu: float = 0.1,
                    spread: float = 1.0, seed: int = 0) -> HeteroQuadratics:
    """Heterogeneous quadratics, centres b_i ~ N(0, spread^2 I). ``shared``: one Hessian with eigenvalues
    evenly spaced in [mu, L] for every client (FedCM T1); else client 0 has that spectrum and every other
    client its own rotation and eigenvalues drawn uniformly in [mu, L] (T2). Exact L and mu either way."""
    if not (0 < mu <= L):
        raise ValueError(f"need 0 < mu <= L, got mu={mu}, L={L}")
    rng = np.random.default_rng(seed)
    A0 = spectrum_matrix(np.linspace(mu, L, d), rng)
    A = [A0 if shared or i == 0 else spectrum_matrix(rng.uniform(mu, L, d), rng) for i in range(n)]
    b = spread * rng.standard_normal((n, d))
    return HeteroQuadratics(np.stack(A), b)


# ---------------------------------------------------------------------------------------------------
# least squares / ridge with a closed-form population risk
# ---------------------------------------------------------------------------------------------------
class LeastSquares(HeteroQuadratics):
    """f_i(w) = 1/(2m) ||X_i w - y_i||^2 + lam/2 ||w||^2 with X: [..., n, m, d], y: [..., n, m].
    A_i = X_i^T X_i/m + lam I, c_i = X_i^T y_i/m. ``grad(W, idx)`` takes minibatch indices [..., n, B]."""

    def __init__(self, X, y, lam: float = 0.0, task: RegressionTask | None = None):
        X, y = _t(X), _t(y)
        self.X, self.y, self.lam, self.task, self.m = X, y, float(lam), task, X.shape[-2]
        eye = torch.eye(X.shape[-1], dtype=DT)
        A = X.transpose(-1, -2) @ X / self.m + self.lam * eye
        c = (X.transpose(-1, -2) @ y.unsqueeze(-1)).squeeze(-1) / self.m
        self._set(A, c, 0.5 * y.pow(2).mean(-1))
        self.b = torch.linalg.lstsq(A, c.unsqueeze(-1)).solution.squeeze(-1)
        self.L_sample = float(X.pow(2).sum(-1).max()) + self.lam     # per-sample smoothness max ||x||^2

    def grad(self, W, idx: torch.Tensor | None = None):
        if idx is None:
            return super().grad(W)
        X = self.X.expand(*idx.shape[:-2], *self.X.shape[-3:])
        Xb = torch.gather(X, -2, idx.unsqueeze(-1).expand(*idx.shape, self.d))        # [..., n, B, d]
        yb = torch.gather(self.y.expand(*idx.shape[:-2], *self.y.shape[-2:]), -1, idx)
        r = (Xb * W.unsqueeze(-2)).sum(-1) - yb
        return (Xb * r.unsqueeze(-1)).mean(-2) + self.lam * W

    def sample_grads(self, W) -> torch.Tensor:
        """Per-sample gradients [..., n, m, d] at the client points W [..., n, d]."""
        r = (self.X @ W.unsqueeze(-1)).squeeze(-1) - self.y
        return self.X * r.unsqueeze(-1) + self.lam * W.unsqueeze(-2)

    def sigma_l2(self, W, B: int = 1) -> torch.Tensor:
        """Minibatch gradient variance, batches of B drawn with replacement (A4): mean over clients."""
        g = self.sample_grads(W)
        return (g - g.mean(-2, keepdim=True)).pow(2).sum(-1).mean(-1).mean(-1) / B

    def population_risk(self, w) -> torch.Tensor:
        """F(w) = mean_i F_i(w) without the ridge term (it cancels in every gap); needs ``task``."""
        if self.task is None:
            raise ValueError("this LeastSquares has no generating task; build it with make_regression")
        return self.task.risk(w).mean(-1)

    def empirical_risk(self, w) -> torch.Tensor:
        """R_S(w) = mean_i (1/(2m)) ||X_i w - y_i||^2, without the ridge term."""
        r = (self.X * w[..., None, None, :]).sum(-1) - self.y
        return 0.5 * r.pow(2).mean(-1).mean(-1)


class RegressionTask:
    """Client k: x ~ N(m_k, s_k^2 I), y = x^T w_k + N(0, noise^2). Population risk, closed form:
    F_k(w) = 1/2 (w - w_k)^T (s_k^2 I + m_k m_k^T) (w - w_k) + noise^2/2."""

    def __init__(self, means, scales, w_true, noise: float):
        self.means, self.scales, self.w_true, self.noise = _t(means), _t(scales), _t(w_true), float(noise)
        self.n, self.d = self.means.shape
        eye = torch.eye(self.d, dtype=DT)
        self.Sigma = self.scales[:, None, None] ** 2 * eye + self.means[:, :, None] * self.means[:, None, :]

    def risk(self, w) -> torch.Tensor:
        """Per-client population risk F_k(w): w [..., d] -> [..., n]."""
        e = w.unsqueeze(-2) - self.w_true
        return 0.5 * (e * _mv(self.Sigma, e)).sum(-1) + 0.5 * self.noise ** 2

    def sample(self, m: int, rng: np.random.Generator, batch: tuple = ()) -> tuple:
        """Fresh data X [*batch, n, m, d], y [*batch, n, m]."""
        z = rng.standard_normal((*batch, self.n, m, self.d))
        X = self.means.numpy()[:, None, :] + self.scales.numpy()[:, None, None] * z
        y = np.einsum("...nmd,nd->...nm", X, self.w_true.numpy())
        y = y + self.noise * rng.standard_normal(X.shape[:-1])
        return _t(X), _t(y)


def make_task(n: int = 5, d: int = 5, *, het: float = 0.0, noise: float = 1.0, scale_spread: float = 0.0,
              seed: int = 0) -> RegressionTask:
    """w_k = w_0 + het xi_k, m_k = het zeta_k, s_k = exp(scale_spread u_k); het = 0 is the iid task."""
    rng = np.random.default_rng(seed)
    w0 = rng.standard_normal(d)
    w_true = w0 + het * rng.standard_normal((n, d))
    means = het * rng.standard_normal((n, d)) / math.sqrt(d)
    scales = np.exp(scale_spread * rng.uniform(-1, 1, n))
    return RegressionTask(means, scales, w_true, noise)


def make_regression(n: int = 5, m: int = 50, d: int = 5, *, het: float = 0.0, noise: float = 1.0,
                    lam: float = 0.0, scale_spread: float = 0.0, seed: int = 0,
                    batch: tuple = ()) -> LeastSquares:
    """A least-squares (lam = 0) or ridge problem drawn from ``make_task``; ``batch`` stacks datasets."""
    task = make_task(n, d, het=het, noise=noise, scale_spread=scale_spread, seed=seed)
    X, y = task.sample(m, np.random.default_rng([seed, 1]), batch)
    return LeastSquares(X, y, lam, task)


# ---------------------------------------------------------------------------------------------------
# logistic regression on Dirichlet-skewed clients
# ---------------------------------------------------------------------------------------------------
class Logistic(ClientProblem):
    """f_i(w) = (1/m) sum_j log(1 + exp(-y_ij x_ij^T w)) + lam/2 ||w||^2, y in {-1, +1}.
    Exact smoothness L = max_i lambda_max(X_i^T X_i)/(4m) + lam; per-sample L_sample = max ||x||^2/4 + lam;
    for lam = 0, ||grad f|| <= G_bound = max ||x|| everywhere (FedCM A3); mu = lam."""

    def __init__(self, X, y, lam: float = 0.0):
        self.X, self.y, self.lam = _t(X), _t(y), float(lam)
        self.n, self.m, self.d = self.X.shape[-3:]
        XtX = self.X.transpose(-1, -2) @ self.X / self.m
        self.L = float(torch.linalg.eigvalsh(XtX)[..., -1].max()) / 4 + self.lam
        self.L_sample = float(self.X.pow(2).sum(-1).max()) / 4 + self.lam
        self.G_bound = float(self.X.norm(dim=-1).max())
        self.mu = self.lam
        self.x_star = self._newton()
        self.mu_f = float(torch.linalg.eigvalsh(self.hessian_f(self.x_star))[..., 0].min())

    def _margins(self, W):
        return self.y * (self.X * W.unsqueeze(-2)).sum(-1)                 # [..., n, m]

    def loss(self, W):
        return torch.nn.functional.softplus(-self._margins(W)).mean(-1) + 0.5 * self.lam * W.pow(2).sum(-1)

    def grad(self, W, idx: torch.Tensor | None = None):
        X, y = self.X, self.y
        if idx is not None:
            X = torch.gather(X.expand(*idx.shape[:-2], *X.shape[-3:]), -2,
                             idx.unsqueeze(-1).expand(*idx.shape, self.d))
            y = torch.gather(y.expand(*idx.shape[:-2], *y.shape[-2:]), -1, idx)
        s = torch.sigmoid(-y * (X * W.unsqueeze(-2)).sum(-1))
        return -(X * (y * s).unsqueeze(-1)).mean(-2) + self.lam * W

    def hessian_f(self, x) -> torch.Tensor:
        """Exact Hessian of f at x [..., d]."""
        s = torch.sigmoid(self._margins(self.at(x)))
        w = (s * (1 - s)).unsqueeze(-1)
        H = (self.X.transpose(-1, -2) @ (w * self.X)) / self.m           # [..., n, d, d]
        return H.mean(-3) + self.lam * torch.eye(self.d, dtype=DT)

    def _newton(self, iters: int = 100) -> torch.Tensor:
        x = torch.zeros(self.X.shape[:-3] + (self.d,), dtype=DT)
        for _ in range(iters):
            g = self.grad_f(x)
            if float(g.norm(dim=-1).max()) < 1e-14:
                break
            step = torch.linalg.solve(self.hessian_f(x), g)
            t = 1.0                                                        # backtracking (damped Newton)
            while t > 1e-8 and bool((self.f(x - t * step) > self.f(x) + 1e-15).any()):
                t *= 0.5
            x = x - t * step
        if not float(self.grad_f(x).norm(dim=-1).max()) < 1e-9:
            raise ValueError("logistic minimiser not found: the data may be separable; "
                             "raise label_noise or lam")
        return x


def make_logistic(n: int = 10, m: int = 40, d: int = 5, *, dir_alpha: float = 0.5, sep: float = 1.0,
                  label_noise: float = 0.1, lam: float = 0.0, seed: int = 0) -> Logistic:
    """Two Gaussian classes N(+-sep u, I) (u a unit vector) with a constant feature (bias) in the last
    coordinate; client i draws class proportions q_i ~ Dir(dir_alpha 1_2) and m points by them (label
    skew, equal sizes); each label flips with prob ``label_noise`` so the data are not separable."""
    rng = np.random.default_rng(seed)
    u = rng.standard_normal(d - 1)
    u /= np.linalg.norm(u)
    q = rng.dirichlet(dir_alpha * np.ones(2), size=n)[:, 0]               # P(y = +1) per client
    y = np.where(rng.uniform(size=(n, m)) < q[:, None], 1.0, -1.0)
    feats = sep * y[..., None] * u + rng.standard_normal((n, m, d - 1))
    X = np.concatenate([feats, np.ones((n, m, 1))], -1)
    y = np.where(rng.uniform(size=(n, m)) < label_noise, -y, y)
    return Logistic(X, y, lam)


# ---------------------------------------------------------------------------------------------------
# stochasticity and participation (all draws take a generator)
# ---------------------------------------------------------------------------------------------------
def gaussian_noise(shape, sigma: float, gen: torch.Generator) -> torch.Tensor:
    """Additive gradient noise with E||xi||^2 = d sigma^2 per client (sigma_l^2 = d sigma^2)."""
    return sigma * torch.randn(shape, generator=gen, dtype=DT)


def minibatch_idx(m: int, B: int, shape: tuple, gen: torch.Generator) -> torch.Tensor:
    """Minibatch indices [*shape, B], uniform with replacement over a client's m samples."""
    return torch.randint(0, m, (*shape, B), generator=gen)


def participation_mask(shape: tuple, N: int, S, gen: torch.Generator, p: float | None = None) -> torch.Tensor:
    """Boolean masks [*shape, N]: S of N clients uniformly without replacement (FedCM section 5.1, FedInit
    Lemma 22; S may be a tensor broadcastable to ``shape``), or, with ``p``, each client active with
    probability p, re-drawn while empty (the FedDyn / FL-Simulator convention)."""
    if p is not None:
        m = torch.rand(*shape, N, generator=gen, dtype=DT) < p
        while not bool(m.any(-1).all()):
            empty = ~m.any(-1)
            m[empty] = torch.rand(int(empty.sum()), N, generator=gen, dtype=DT) < p
        return m
    rank = torch.rand(*shape, N, generator=gen, dtype=DT).argsort(-1).argsort(-1)
    return rank < torch.as_tensor(S).unsqueeze(-1)


def active_masks(m: int, n_active: int | None, T: int, seed: int) -> torch.Tensor:
    """[T, m] participation masks: n_active of m uniformly without replacement each round (all if None)."""
    if n_active is None or n_active >= m:
        return torch.ones(T, m, dtype=torch.bool)
    return participation_mask((T,), m, n_active, torch.Generator().manual_seed(seed))


def per_run(v, batch: tuple) -> torch.Tensor:
    """A hyper-parameter as a scalar tensor, or (one value per run) as a [*batch, 1] column."""
    v = torch.as_tensor(v, dtype=DT)
    return v if v.dim() == 0 else v.reshape(*batch, 1)


# ---------------------------------------------------------------------------------------------------
# figures (one PNG per rate or sweep; matplotlib Agg)
# ---------------------------------------------------------------------------------------------------
def save_figure(out_dir, name: str, series: dict, *, xlabel: str, ylabel: str, title: str = "",
                logx: bool = True, logy: bool = True, ref: tuple | None = None) -> str | None:
    """Plot ``series`` {label: (x, y)} to ``out_dir/name`` and return the file name (None without out_dir).
    ``ref = (slope, x, y)`` draws a dashed reference line of that log-log slope through the series."""
    if out_dir is None:
        return None
    from pathlib import Path

    from matplotlib import style
    from matplotlib.figure import Figure             # no pyplot: never switches the caller's backend
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    # matplotlib's own style, whatever the caller set (plots.style() applies seaborn's theme process-wide): the fixed
    # margins below are measured for it
    with style.context("default"):
        # Margins in inches on a 5 x 4 figure (the legend's rows below the x label; the left one wider where log tick
        # labels are), not layout="constrained", which measured every artist twice and cost 40% of the CPU time.
        rows = -(-(len(series) + (ref is not None)) // 2)
        fig = Figure(figsize=(5.0, 4.0))
        fig.subplots_adjust(left=0.72 / 5.0, right=1 - 0.14 / 5.0, top=1 - 0.32 / 4.0,
                            bottom=(0.56 + 0.15 * rows) / 4.0)
        ax = fig.subplots()
        xs = set()
        for label, (x, y) in series.items():
            ax.plot(np.asarray(x, float), np.asarray(y, float), "o-", ms=3, label=label)
            xs.update(np.asarray(x, float).tolist())
        if ref is not None:
            k, x, y = ref
            x = np.asarray(x, float)
            line = y[0] * (x / x[0]) ** k if logx else y[0] + k * (x - x[0])
            ax.plot(x, line, "k--", lw=1, label=f"slope {k:g}")
        ax.set(xscale="log" if logx else "linear", yscale="log" if logy else "linear", xlabel=xlabel, ylabel=ylabel)
        ax.set_title(title, fontsize=10)
        if logx and len(xs) <= 8:                        # label the measured x values, nothing in between
            ax.xaxis.set_major_locator(FixedLocator(sorted(xs)))
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set_xticklabels([f"{v:g}" for v in sorted(xs)], fontsize=8)
        elif logx:
            ax.xaxis.set_minor_formatter(NullFormatter())
        fig.legend(*ax.get_legend_handles_labels(), fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 0.01),
                   ncol=2, frameon=False)
        lo, hi = ax.get_ylim()                           # log y over <= 1 power of 10 labels "2 x 10^-1" ticks too
        if logy and np.floor(np.log10(hi)) - np.floor(np.log10(lo)) <= 1:
            fig.subplots_adjust(left=fig.subplotpars.left + 0.45 / 5.0)
        from ..plots import DPI
        fig.savefig(Path(out_dir) / name, dpi=DPI)
    return name


# ---------------------------------------------------------------------------------------------------
# several seeds in one simulation (the leading dimension)
# ---------------------------------------------------------------------------------------------------
def stack_seeds(probs: list, ndim: int = 0):
    """One problem whose leading axis holds ``probs`` (one per seed, each built as for a run by itself), with
    ``ndim`` singleton axes after it, so that it broadcasts against runs [seeds, *batch(ndim)]. Every tensor is
    the per-seed tensor stacked, never recomputed, so each slice keeps its bits; any other attribute is kept
    when it is the same for every seed, else it becomes the list of the per-seed values (read those from
    ``probs``: e.g. ``L``). Only for simulators that draw nothing from the seed (full participation, GD)."""
    q = type(probs[0]).__new__(type(probs[0]))
    for k, v in vars(probs[0]).items():
        if k.startswith("_"):
            continue                                             # caches (the _Stacked block) are rebuilt
        vs = [vars(p)[k] for p in probs]
        if isinstance(v, torch.Tensor):
            v = torch.stack(vs)
            v = v.reshape(len(vs), *(1,) * ndim, *v.shape[1:])
        elif not all(type(x) is type(v) and x == v for x in vs):
            v = vs
        setattr(q, k, v)
    return q
