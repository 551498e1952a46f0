"""Non-convex toy federated problems for the SAM papers (float64 torch, vectorised across clients).

Same interface as ``toys.ClientProblem``: a client table ``W`` is ``[..., n, d]``, f = (1/n) sum_i f_i.

- ``SharpFlat``: a 1-2-D landscape with one SHARP and one FLAT minimum and client-specific mixing
  (FedSMOO Fig. 1, FedLESAM Fig. 2 at toy scale):
      f_i(w) = -log( a_i N(w; u, s_sharp^2 I) + b_i N(w; v, s_flat^2 I) ) + kappa/2 ||w - c_i||^2.
  Gradient and Hessian in closed form; the curvature of f at a point is exact (no estimator).
- ``BiasFreeMLP``: a small bias-free ReLU network (Thm 4.4 of FedSMOO needs bias-free, 1-Lipschitz
  activations) on Gaussian-class data with Dirichlet label skew across clients (T7(b), T8). Each client's
  parameters are one flat vector laid out by ``params.ParamSpace``; exact Hessians come from
  double backward.
"""
from __future__ import annotations

import math
from itertools import pairwise

import numpy as np
import torch
from torch import nn

from ..params import ParamSpace
from .toys import DT, ClientProblem, _t


# ---------------------------------------------------------------------------------------------------
# sharp / flat mixture landscape
# ---------------------------------------------------------------------------------------------------
class SharpFlat(ClientProblem):
    """f_i(w) = -log(a_i N(w; u, s_sharp^2 I) + b_i N(w; v, s_flat^2 I)) + kappa/2 ||w - c_i||^2.

    a, b: [n] mixing weights; c: [n, d] anchors; u, v: [d] the sharp and flat centres."""

    def __init__(self, a, b, c, u, v, s_sharp: float, s_flat: float, kappa: float):
        self.a, self.b, self.c = _t(a), _t(b), _t(c)
        self.u, self.v = _t(u), _t(v)
        self.s_sharp, self.s_flat, self.kappa = float(s_sharp), float(s_flat), float(kappa)
        self.n, self.d = self.c.shape
        self.centres = torch.stack([self.u, self.v])                      # [2, d]
        self.var = _t([self.s_sharp ** 2, self.s_flat ** 2])               # [2]
        self.logmix = torch.stack([self.a, self.b], -1).log()              # [n, 2]
        self.minima = {name: self._newton(x0) for name, x0 in (("sharp", self.u), ("flat", self.v))}
        self.x_star = min(self.minima.values(), key=lambda x: float(self.f(x)))

    def _resp(self, W):
        """Component log-densities [..., n, 2] and responsibilities r_j = p_j / sum p."""
        diff = W.unsqueeze(-2) - self.centres                               # [..., n, 2, d]
        logp = (self.logmix - 0.5 * diff.pow(2).sum(-1) / self.var
                - 0.5 * self.d * torch.log(2 * math.pi * self.var))
        return logp, torch.softmax(logp, -1), diff

    def loss(self, W):
        logp, _, _ = self._resp(W)
        return -torch.logsumexp(logp, -1) + 0.5 * self.kappa * (W - self.c).pow(2).sum(-1)

    def grad(self, W):
        _, r, diff = self._resp(W)
        g = diff / self.var.unsqueeze(-1)                                   # grad of -log N_j
        return (r.unsqueeze(-1) * g).sum(-2) + self.kappa * (W - self.c)

    def hessian(self, W) -> torch.Tensor:
        """Exact per-client Hessians [..., n, d, d]:
        sum_j r_j (I/var_j - g_j g_j^T) + (sum_j r_j g_j)(sum_j r_j g_j)^T + kappa I."""
        _, r, diff = self._resp(W)
        g = diff / self.var.unsqueeze(-1)
        eye = torch.eye(self.d, dtype=DT)
        rg = (r.unsqueeze(-1) * g).sum(-2)
        H = (r / self.var)[..., None, None].mul(eye).sum(-3) \
            - torch.einsum("...j,...ja,...jb->...ab", r, g, g) + rg.unsqueeze(-1) * rg.unsqueeze(-2)
        return H + self.kappa * eye

    def hessian_f(self, x) -> torch.Tensor:
        return self.hessian(self.at(x)).mean(-3)

    def lam_max(self, x) -> torch.Tensor:
        """Top Hessian eigenvalue of f at x [..., d] (exact)."""
        return torch.linalg.eigvalsh(self.hessian_f(x))[..., -1]

    def basin(self, x) -> torch.Tensor:
        """True where x is closer to the flat minimum than to the sharp one."""
        return (x - self.minima["flat"]).norm(dim=-1) < (x - self.minima["sharp"]).norm(dim=-1)

    def _newton(self, x, iters: int = 100) -> torch.Tensor:
        for _ in range(iters):
            g = self.grad_f(x)
            if float(g.norm()) < 1e-13:
                break
            x = x - torch.linalg.solve(self.hessian_f(x), g)
        return x


def make_sharp_flat(n: int = 10, d: int = 1, *, het: float = 0.8, spread: float = 0.3,
                    s_sharp: float = 0.1, s_flat: float = 0.5, kappa: float = 0.1,
                    seed: int = 0) -> SharpFlat:
    """Sharp centre u = -1, flat centre v = +1 (first coordinate). Client i weighs the sharp mode by
    a_i = 1/2 + het (U_i - 1/2) and the flat one by b_i = 1 - a_i (het in [0, 1): 0 = identical mixing);
    anchors c_i ~ N(0, spread^2 I). With the defaults the sharp minimum is the deeper one (global f*)."""
    if not 0 <= het < 1:
        raise ValueError(f"het must be in [0, 1), got {het}")
    rng = np.random.default_rng(seed)
    a = 0.5 + het * (rng.uniform(size=n) - 0.5)
    e1 = np.eye(d)[0]
    return SharpFlat(a, 1 - a, spread * rng.standard_normal((n, d)), -e1, e1, s_sharp, s_flat, kappa)


# ---------------------------------------------------------------------------------------------------
# bias-free MLP on Dirichlet label-skewed clients
# ---------------------------------------------------------------------------------------------------
class BiasFreeMLP(ClientProblem):
    """f_i(theta) = mean cross-entropy of a bias-free ReLU MLP on client i's data (X: [n, m, din],
    Y: [n, m]); ``X_test``/``Y_test`` hold data from the global (class-balanced) distribution.

    The forward pass runs on the ParamSpace views of the flat vectors, so a client table
    W [..., n, P] is evaluated in one batched program (no loop over clients)."""

    autograd = True                      # grad() differentiates the network: simulators keep autograd on

    def __init__(self, X, Y, X_test, Y_test, widths=(16, 16), n_classes: int | None = None, seed: int = 0):
        self.X, self.X_test = _t(X), _t(X_test)
        self.Y, self.Y_test = torch.as_tensor(Y).long(), torch.as_tensor(Y_test).long()
        self.n, self.m, din = self.X.shape
        self.n_classes = int(n_classes or int(self.Y.max()) + 1)
        sizes = (din, *widths, self.n_classes)
        layers = []
        for k, (i, o) in enumerate(pairwise(sizes)):
            layers += [nn.Linear(i, o, bias=False)] + [nn.ReLU()] * (k < len(sizes) - 2)   # bias-free
        self.model = nn.Sequential(*layers)
        self.space = ParamSpace.of_model(self.model)
        self.d = self.space.P
        gen = torch.Generator().manual_seed(seed)
        self.theta0 = torch.cat([torch.randn(l.numel, generator=gen, dtype=DT) * math.sqrt(2 / l.shape[1])
                                 for l in self.space.layers])               # He init, fan-in scaled
        self.L_n = float(self.X.norm(dim=-1).max())                         # input norm bound (Thm 4.4)

    def logits(self, W, X) -> torch.Tensor:
        """W [..., P] (or [..., n, P] with X [n, m, din]) -> logits [..., m, C]."""
        z = X
        for k, M in enumerate(self.weights(W)):
            z = z @ M.transpose(-1, -2)
            z = torch.relu(z) if k < len(self.space.layers) - 1 else z
        return z

    def loss(self, W):
        z = self.logits(W, self.X)                                          # [..., n, m, C]
        logp = torch.log_softmax(z, -1).gather(-1, self.Y.expand(z.shape[:-1]).unsqueeze(-1))
        return -logp.squeeze(-1).mean(-1)

    def grad(self, W):
        with torch.enable_grad():
            W = W.detach().requires_grad_(True)
            return torch.autograd.grad(self.loss(W).sum(), W)[0]           # clients are independent

    def hessian_f(self, x) -> torch.Tensor:
        """Exact Hessian of f at one point x [P]: one double-backward row per parameter."""
        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            g = torch.autograd.grad(self.f(x), x, create_graph=True)[0]
            rows = [torch.autograd.grad(g[j], x, retain_graph=True)[0] for j in range(self.d)]
        return torch.stack(rows).detach()

    def lam_max(self, x) -> torch.Tensor:
        return torch.linalg.eigvalsh(self.hessian_f(x))[-1]

    def accuracy(self, x, test: bool = True) -> float:
        X, Y = (self.X_test, self.Y_test) if test else (self.X, self.Y)
        return float((self.logits(x, X).argmax(-1) == Y).double().mean())

    def weights(self, x) -> list[torch.Tensor]:
        """The layer matrices W_l [..., out, in] of flat vectors x [..., P] (ParamSpace views, in order)."""
        return list(self.space.unflatten(x).values())

    @property
    def x_star(self):
        raise NotImplementedError("the MLP's minimiser is not known in closed form")


def make_mlp_problem(n: int = 10, m: int = 40, din: int = 8, n_classes: int = 4, *, dir_alpha: float = 0.3,
                     sep: float = 1.5, m_test: int = 400, widths=(16, 16), seed: int = 0) -> BiasFreeMLP:
    """Class means mu_c ~ N(0, sep^2 I); x = mu_y + N(0, I), scaled so that E||x||^2 = 1.
    Client i draws its labels from q_i ~ Dir(dir_alpha 1_C) (label skew, equal sizes m); the test set is
    class-balanced."""
    rng = np.random.default_rng(seed)
    means = sep * rng.standard_normal((n_classes, din))
    q = rng.dirichlet(dir_alpha * np.ones(n_classes), size=n)
    Y = np.stack([rng.choice(n_classes, size=m, p=qi) for qi in q])
    Y_test = rng.integers(0, n_classes, size=m_test)
    X, X_test = (means[y] + rng.standard_normal((*y.shape, din)) for y in (Y, Y_test))
    scale = 1.0 / np.sqrt(din + sep ** 2 * din)
    return BiasFreeMLP(X * scale, Y, X_test * scale, Y_test, widths, n_classes, seed)


def flatness_runs(prob, methods: dict, *, R: int, lo: float, hi: float, **kw) -> dict:
    """Run each method from R start points (an even grid on the first axis) and measure the flatness of the
    minimum each run selects: the exact top Hessian eigenvalue of f at the minimum of the basin its final
    global model lies in (not at the final iterate, which need not have converged; its eigenvalue and its
    distance to that minimum are kept as diagnostics), and the fraction that ends in the flat basin."""
    w0 = torch.zeros(R, prob.d, dtype=DT)
    w0[:, 0] = torch.linspace(lo, hi, R, dtype=DT)
    lam = {k: float(prob.lam_max(x)) for k, x in prob.minima.items()}
    out = {}
    for name, (sim, args) in methods.items():
        wT = sim(prob, w0=w0, **{**kw, **args})["w"][-1]
        flat = prob.basin(wT)
        dist = torch.where(flat, (wT - prob.minima["flat"]).norm(dim=-1), (wT - prob.minima["sharp"]).norm(dim=-1))
        out[name] = {"lam_max": float(torch.where(flat, lam["flat"], lam["sharp"]).mean()),
                     "flat_frac": float(flat.double().mean()),
                     "lam_max_final_iterate": float(prob.lam_max(wT).mean()),
                     "dist_to_selected_min": float(dist.mean()),
                     "f_gap": float((prob.f(wT) - prob.f_star).mean())}
    return out


def flatness_text(res: dict) -> str:
    return ("lam_max at the selected minimum: " + "; ".join(f"{k} {v['lam_max']:.3g} (flat basin {v['flat_frac']:.2f})"
                                                            for k, v in res.items()))
