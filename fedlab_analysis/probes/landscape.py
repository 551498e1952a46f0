"""Loss landscapes: filter-normalised random planes (Li et al. 2018), federated planes, 1-D interpolation.

Method (Li, Xu, Taylor, Studer, Goldstein 2018, "Visualizing the Loss Landscape of Neural Nets", and their
reference code tomgoldstein/loss-landscape):
  * a direction d is Gaussian, one draw per entry; every >=2-D tensor is filter-normalised, each slice along
    dim 0 (a conv filter / a linear row) rescaled so that ||d_i|| = ||w_i|| (Li et al. Sec. 4);
  * 1-D tensors (biases, norm scales, BatchNorm running stats) get direction 0 by default (``ignore='biasbn'``),
    or, on request, a copy of w itself (the reference code's behaviour when they are not ignored);
  * the surface is f(a, b) = L(theta0 + a*d1 + b*d2) on a grid, each point built from theta0 afresh, so the
    centre of the grid IS the checkpoint, on a fixed evaluation set, loss and accuracy.
  * ``dir_type='states'`` (parameters + BatchNorm buffers) is :func:`with_states`.

Federated planes (the reason this module exists; FedSMOO Fig. 3, FedLESAM Figs. 1, 3, 6 only show random ones):
  * :func:`plane_through` the global model and two clients' last local models;
  * :func:`plane_update` the global model and its last update Delta (FedLESAM's estimate of the global
    perturbation direction, Sec. 4.1 / Fig. 1f), against a random direction at the same scale;
  * :func:`plane_hessian` the top two Hessian eigenvectors;
  * :func:`pca_trajectory` PCA of the run's checkpoints (Li et al. Sec. 7).
:func:`line` is the 1-D interpolation between two checkpoints (Goodfellow et al. 2015; Li et al. Sec. 3).

Unlike the ``loss-landscapes`` 3.0.6 package: directions are zero-mean, filter normalisation is exact and
skips 1-D tensors, the grid is not walked in place (no drift, the centre is exact), the caller's model is
never touched, and everything lives on theta's device. Grid points are evaluated ``batch_points`` at a time
with ``torch.vmap`` over the stacked parameter vectors.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ..errors import UserError
from ..params import Layer, ParamSpace, functional
from . import foreign
from .options import Common, opt


def nice_levels(Z, *a, **kw):
    """plots.levels: the one contour-level rule (round 1-2-5 values) of every figure (matplotlib imported here,
    when a figure is drawn, not with the probes)."""
    from ..plots import levels
    return levels(Z, *a, **kw)

LI_LEVELS = (0.1, 10.0, 0.5)  # Li et al. plot_2D.py: contour levels arange(vmin, vmax, vlevel)


# ---------------------------------------------------------------------------------------------------------
# directions

def random_direction(space: ParamSpace, theta: Tensor, gen: torch.Generator, *, norm: str = "filter",
                     ignore_1d: bool = True) -> Tensor:
    """One Gaussian direction over ``space``, normalised to the weights ``theta`` (flat, same layout).

    ``norm``: 'filter' (each slice along dim 0 has the norm of the same slice of w; Li et al. Sec. 4),
    'layer' (each tensor has the norm of w's tensor) or 'none' (raw N(0, 1)).
    ``ignore_1d``: tensors with <= 1 dim get 0 (Li's ``ignore='biasbn'``); False copies w into them as the
    reference code does. The draw is float64 on ``gen``'s device, so a seed gives the same direction for
    float32 and float64 models and on every device; the result has theta's dtype and device.
    """
    if norm not in ("filter", "layer", "none"):
        raise UserError(f"unknown direction norm {norm!r}; use 'filter', 'layer' or 'none'")
    w = theta.detach().to(gen.device, torch.float64)
    d = torch.randn(space.P, generator=gen, dtype=torch.float64, device=gen.device)
    for l in space.layers:
        dl, wl = d[l.slice], w[l.slice]
        if len(l.shape) <= 1:
            dl.copy_(torch.zeros_like(wl) if ignore_1d else wl)
        elif norm != "none":
            rows = l.shape[0] if norm == "filter" else 1
            dv, wv = dl.view(rows, -1), wl.view(rows, -1)
            dv.mul_(wv.norm(dim=1, keepdim=True) / dv.norm(dim=1, keepdim=True))
    return d.to(theta.device, theta.dtype)


def _orthogonal(d: Tensor, to: Tensor, scale: float | None = None) -> Tensor:
    """The part of ``d`` orthogonal to ``to`` (one Gram-Schmidt step), rescaled to ``scale``
    (default: d's own norm)."""
    scale = d.norm() if scale is None else scale
    out = d - (d @ to) / (to @ to) * to
    return out * (scale / out.norm())


def plane_random(space: ParamSpace, theta: Tensor, seed: int, orthogonalize: bool = False, *,
                 norm: str = "filter", ignore_1d: bool = True) -> tuple[Tensor, Tensor]:
    """Two directions from ``torch.Generator().manual_seed(seed)``, d1 drawn first.

    ``orthogonalize`` projects d1 out of d2 AFTER normalisation and restores d2's norm (loss-landscapes
    orthogonalises before normalising, which filter normalisation then undoes). d2's filters are then
    normalised only approximately; random directions are nearly orthogonal already (cos ~ 1/sqrt(P))."""
    gen = torch.Generator().manual_seed(int(seed))
    d1 = random_direction(space, theta, gen, norm=norm, ignore_1d=ignore_1d)
    d2 = random_direction(space, theta, gen, norm=norm, ignore_1d=ignore_1d)
    return d1, (_orthogonal(d2, d1) if orthogonalize else d2)


def plane_through(theta0: Tensor, theta1: Tensor, theta2: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The plane through three models, e.g. the global model and two clients' last local models.

    Returns ``(origin, d1, d2, coords)``: origin = theta0, d1 = theta1 - theta0, d2 = the part of
    theta2 - theta0 orthogonal to d1 scaled to ||d1||, so the plane is drawn without shear, one unit being
    ||theta1 - theta0|| on both axes. ``coords`` [3, 2] holds the (a, b) of theta0, theta1, theta2
    (theta1 is exactly (1, 0))."""
    d1 = theta1 - theta0
    u = theta2 - theta0
    tiny = 1e3 * torch.finfo(theta0.dtype).eps * float(theta0.norm())     # round-off of the models' entries
    if float(d1.norm()) <= tiny or float((u - (u @ d1) / (d1 @ d1) * d1).norm()) <= tiny:
        raise UserError("the three models are collinear or two are equal within round-off (a client that "
                        "trained last can equal the global model), so they span no plane; pick two clients with "
                        "other local models (--clients-pair I,J)")
    d2 = _orthogonal(u, d1, d1.norm())
    coords = torch.tensor([[0.0, 0.0], [1.0, 0.0], [float((u @ d1) / (d1 @ d1)), float((u @ d2) / (d2 @ d2))]],
                          dtype=torch.float64)
    return theta0, d1, d2, coords


def plane_update(space: ParamSpace, theta: Tensor, update: Tensor, seed: int, *, norm: str = "filter",
                 ignore_1d: bool = True) -> tuple[Tensor, Tensor]:
    """The plane of the last global update Delta = w^t - w^{t-1} and a random direction.

    FedLESAM (Sec. 4.1, Fig. 1f) estimates the global ascent direction by -Delta. d1 = Delta, so the previous
    global model sits at (a, b) = (-1, 0); d2 is a filter-normalised random direction made orthogonal to
    Delta and scaled to ||Delta||, so both axes share one unit and the curvature along Delta can be compared
    with a random direction's."""
    if update.norm() == 0:
        raise UserError("the last global update is zero, so it gives no direction; probe a later round")
    gen = torch.Generator().manual_seed(int(seed))
    r = random_direction(space, theta, gen, norm=norm, ignore_1d=ignore_1d)
    return update, _orthogonal(r, update, update.norm())


def plane_hessian(f, theta: Tensor, data: tuple[Tensor, Tensor], space: ParamSpace | None = None,
                  params: str | None = None, seed: int = 0, batch_size: int | None = 1000, loss="ce", **kwargs):
    """The plane of the top two Hessian eigenvectors (unit norm) of the mean ``loss`` at theta,
    from the curvature probe's Lanczos (``kwargs`` go to its ``top_eigenvalues``: tol, max_iter, method).

    ``params`` (a ParamSpace spec such as 'group:h', needs ``space``) restricts H to those coordinates; the
    eigenvectors are then zero elsewhere. ``batch_size`` samples per HVP chunk bound the memory (None: one
    batch). Returns ``(d1, d2, eigenvalues)``. Along a unit eigenvector v_i
    the loss is L(theta) + lambda_i a^2 / 2 + O(a^3), so the grid axes are parameter-space distances."""
    from .curvature import HessianOperator, top_eigenvalues  # the curvature probe, imported on use

    from .common import bar
    op = HessianOperator(f, theta, data, params=params, space=space, batch_size=batch_size, loss=loss)
    with bar(None, "hessian plane: Hessian-vector product", "HVP") as op.progress:
        out = top_eigenvalues(op, 2, seed=seed, **kwargs)
    op.progress = None
    v = torch.as_tensor(out["eigenvectors"]).to(theta.device, theta.dtype)
    return v[0], v[1], out["eigenvalues"][:2]


def pca_trajectory(thetas: Tensor) -> dict:
    """Li et al. Sec. 7 (``projection.py``): PCA of the differences theta_t - theta_T over a run's
    checkpoints (rows of ``thetas``, in order, the last one the origin), centred as sklearn's PCA does.

    Returns ``{'origin', 'd1', 'd2' (unit principal directions), 'coords' [T, 2] (projection of every
    theta_t - theta_T), 'explained' (explained-variance ratios of the two components)}``."""
    if thetas.dim() != 2 or thetas.shape[0] < 4:
        raise UserError(f"a trajectory PCA needs at least 4 checkpoints (3 differences span 2 centred "
                        f"dimensions), got {len(thetas)}; save more rounds (--ckpt-every) or probe a later one")
    origin = thetas[-1]
    M = thetas[:-1] - origin
    _, S, Vh = torch.linalg.svd(M - M.mean(0), full_matrices=False)
    if not S[1] > 1e-12 * S[0]:
        raise UserError("the checkpoints lie on a line (their differences span < 2 dimensions); "
                        "no PCA plane exists, use --other for a 1-D interpolation instead")
    # sklearn's svd_flip: the largest-|.| entry of each component is positive (a deterministic sign)
    Vh = Vh[:2] * torch.sign(Vh[:2].gather(1, Vh[:2].abs().argmax(1, keepdim=True)))
    var = S.pow(2)
    return {"origin": origin, "d1": Vh[0], "d2": Vh[1], "coords": (thetas - origin) @ Vh.T,
            "explained": (var[:2] / var.sum()).tolist()}


def with_states(model, space: ParamSpace, theta: Tensor):
    """Li et al.'s ``dir_type='states'``: one flat vector of the parameters followed by the floating
    buffers (BatchNorm running mean/var). Returns ``(space, f, z)`` to use in place of the
    parameter-only triple; buffers are 1-D, so random directions leave them alone unless
    ``ignore_1d=False``, but :func:`line` interpolates them (the reference README's advice)."""
    bspace = ParamSpace.buffers_of(model)
    layers = space.layers + [Layer(l.name, l.shape, l.offset + space.P, l.numel, l.block, "buffers")
                             for l in bspace.layers]
    z = torch.cat([theta, bspace.flatten(dict(model.named_buffers())).to(theta.device, theta.dtype)])
    return ParamSpace(layers), functional(model, space, bspace=bspace, states=True), z


# ---------------------------------------------------------------------------------------------------------
# evaluation

def _per_sample(loss, out: Tensor, y: Tensor) -> Tensor:
    """Per-sample losses [B, n] from outputs [B, n, ...].

    Cross-entropy is logsumexp(z) - z_y: the same value as ``-log_softmax(z)[y]``, but on CPU
    ``log_softmax`` over 10 classes costs about 4x ``logsumexp`` (290 vs 70 us on 1797 x 10), which was
    most of the gap between a grid point and a bare forward pass (benchmarks/bench_landscape.py)."""
    if loss == "ce":
        return out.logsumexp(-1) - out.gather(-1, y.expand(out.shape[0], -1).unsqueeze(-1)).squeeze(-1)
    if loss == "mse":
        return (out - y.view(1, *out.shape[1:])).pow(2).reshape(*out.shape[:2], -1).mean(-1)
    return loss(out, y)


def per_sample(loss):
    """'ce' / 'mse' as they are; a callable mean loss ``(logits, y) -> scalar`` (the Python entry points) as the
    [B, n] form ``_evaluate`` sums: each point's mean loss times the chunk's n, so the sums over chunks divided by
    N are the mean (exact for a loss that averages over its batch, as F.cross_entropy does)."""
    if isinstance(loss, str):
        return loss
    return lambda out, y: torch.stack([loss(o, y) for o in out]).unsqueeze(1).expand(-1, len(y)).contiguous()


def _evaluate(f, thetas_of, coords: Tensor, data, *, loss="ce", batch_points="auto", chunk=16384,
              desc: str = "landscape: grid point"):
    """Mean loss (and accuracy for 'ce') over ``data`` at the models ``thetas_of(coords[s:e])``.

    ``batch_points`` models go through one vmapped forward ('auto': on CPU 512 // N, so 1 from 512 samples
    on (vmap over points only pays there for tiny sets, benchmarks/bench_landscape.py), on a GPU as many as
    256 MiB of stacked parameters allow, at most 64);
    ``chunk`` bounds points x samples per forward. Sums are float64."""
    if not (callable(loss) or loss in ("ce", "mse")):
        raise UserError(f"unknown loss {loss!r}; use 'ce', 'mse' or a callable (out [B, n, ...], y) -> [B, n]")
    X, y = data
    first = thetas_of(coords[:1])
    dev, dt = first.device, first.dtype
    X = X.to(dev, dt) if X.is_floating_point() else X.to(dev)
    y = y.to(dev, dt) if y.is_floating_point() else y.to(dev)
    N, n = X.shape[0], coords.shape[0]
    if N == 0:
        raise UserError("the evaluation set is empty; choose other --data or more --samples")
    if batch_points == "auto":  # CPU: batch only tiny evaluation sets, where a call's overhead dominates
        batch_points = (max(1, min(32, 512 // N)) if dev.type == "cpu"
                        else max(1, min(64, 2**28 // (first.numel() * first.element_size()))))
    B = max(1, min(int(batch_points), n))
    from .common import chunks                    # BatchNorm train mode: whole groups within one client
    sizes = chunks(f, N, max(1, chunk // B))
    starts = np.cumsum([0] + sizes[:-1]).tolist()
    vf = torch.vmap(f, in_dims=(0, None))
    losses = torch.zeros(n, dtype=torch.float64, device=dev)  # sums stay on the device: no sync per batch
    correct = torch.zeros(n, dtype=torch.float64, device=dev)
    from .common import bar
    with torch.inference_mode(), bar(n, desc, "point") as pb:
        for s in range(0, n, B):
            th = thetas_of(coords[s:s + B])
            for c, step in zip(starts, sizes):
                xb, yb = X[c:c + step], y[c:c + step]
                out = f(th[0], xb).unsqueeze(0) if th.shape[0] == 1 else vf(th, xb)
                losses[s:s + B] += _per_sample(loss, out, yb).sum(1, dtype=torch.float64)
                if loss == "ce":
                    correct[s:s + B] += (out.argmax(-1) == yb).sum(1, dtype=torch.float64)
            pb.update(th.shape[0])
    return losses.cpu() / N, (correct.cpu() / N if loss == "ce" else None)


def _grid(lo: float, hi: float, n: int) -> np.ndarray:
    """n points from lo to hi, each computed as (lo*(n-1-i) + hi*i)/(n-1), so a symmetric range with odd n
    has exactly 0.0 in the middle (linspace's lo + i*step may miss it by an ulp)."""
    if n < 2 or not lo < hi:
        raise UserError(f"a grid needs at least 2 points and lo < hi, got {n} points on [{lo}, {hi}]")
    return np.array([(lo * (n - 1 - i) + hi * i) / (n - 1) for i in range(n)])


def _plane(theta0: Tensor, d1: Tensor, d2: Tensor):
    """coords [B, 2] -> models theta0 + a*d1 + b*d2 [B, P], built from theta0 every time."""
    return lambda c: theta0 + c[:, :1].to(theta0) * d1 + c[:, 1:2].to(theta0) * d2


def evaluate_plane(f, theta0: Tensor, d1: Tensor, d2: Tensor, data, coords, **kw) -> dict:
    """Loss (and accuracy) at arbitrary plane coordinates ``coords`` [[a, b], ...]."""
    c = torch.as_tensor(np.asarray(coords, dtype=np.float64).reshape(-1, 2))
    losses, acc = _evaluate(f, _plane(theta0, d1, d2), c, data, **kw)
    return {"loss": losses.tolist(), "acc": None if acc is None else acc.tolist()}


def surface(f, theta0: Tensor, d1: Tensor, d2: Tensor, data, grid: int = 25, range_=(-1.0, 1.0),
            range_y=None, batch_points="auto", loss="ce", chunk: int = 16384, points: dict | None = None) -> dict:
    """L(theta0 + a*d1 + b*d2) on a ``grid`` x ``grid`` lattice over ``range_`` (a) x ``range_y`` (b).

    ``data`` = (X, y) is the fixed evaluation set; ``f(theta, x)`` a pure function of the flat parameters (one
    that writes no buffer: ``probes.common.functional(model, space, bn_mode)`` makes one from any module, in any
    BatchNorm mode, without touching the module).
    ``loss[i][j]`` and ``acc[i][j]`` are at (a[i], b[j]) ('ij' indexing). ``points`` {name: (a, b)} are
    evaluated exactly too (e.g. the clients of :func:`plane_through`). Nothing passed in is modified."""
    a = _grid(*map(float, range_), int(grid))
    b = _grid(*map(float, range_ if range_y is None else range_y), int(grid))
    A, Bm = np.meshgrid(a, b, indexing="ij")
    coords = torch.as_tensor(np.stack([A.ravel(), Bm.ravel()], 1))
    opts = dict(loss=loss, batch_points=batch_points, chunk=chunk)
    t0 = time.perf_counter()
    losses, acc = _evaluate(f, _plane(theta0, d1, d2), coords, data, **opts)
    seconds = time.perf_counter() - t0
    Lg, Ag = losses.view(len(a), len(b)), (None if acc is None else acc.view(len(a), len(b)))
    names = list(points or {})
    on_grid = 0.0 in a and 0.0 in b  # then the grid holds the centre and reports that very value
    extra = ([] if on_grid else [(0.0, 0.0)]) + [tuple(map(float, points[k])) for k in names]
    el, ea = _evaluate(f, _plane(theta0, d1, d2), torch.tensor(extra, dtype=torch.float64).view(-1, 2), data,
                       desc="landscape: marked point", **opts) if extra else (None, None)
    if on_grid:
        i, j = a.tolist().index(0.0), b.tolist().index(0.0)
        centre = (Lg[i, j].item(), _item(Ag, (i, j)))
    else:
        centre, el, ea = (el[0].item(), _item(ea, 0)), el[1:], (None if ea is None else ea[1:])
    return {
        "a": a.tolist(), "b": b.tolist(), "indexing": "ij",
        "loss": Lg.tolist(), "acc": None if Ag is None else Ag.tolist(),
        "center_loss": centre[0], "center_acc": centre[1],
        "points": [{"name": k, "a": float(points[k][0]), "b": float(points[k][1]), "loss": el[i].item(),
                    "acc": _item(ea, i)} for i, k in enumerate(names)],
        "n_samples": int(data[0].shape[0]), "d1_norm": float(d1.norm()), "d2_norm": float(d2.norm()),
        "cos_d1_d2": float((d1 @ d2) / (d1.norm() * d2.norm())),
        "seconds": seconds, "seconds_per_point": seconds / coords.shape[0],
    }


def _item(t: Tensor | None, i):
    return None if t is None else t[i].item()


def line(f, theta_a: Tensor, theta_b: Tensor, data, n: int = 25, extend: float = 0.25, **kw) -> dict:
    """1-D interpolation (1 - t)*theta_a + t*theta_b (Goodfellow et al. 2015; Li et al. Sec. 3).

    ``n`` points on [0, 1] (t = i/(n-1), so t=0 and t=1 are exactly the two models) plus the same spacing
    continued ``extend`` beyond each end."""
    if n < 2 or extend < 0:
        raise UserError(f"a line needs n >= 2 points and extend >= 0, got n={n}, extend={extend}")
    m = int(round(extend * (n - 1)))
    t = torch.tensor([i / (n - 1) for i in range(-m, n + m)], dtype=torch.float64)
    thetas_of = lambda c: (1 - c.to(theta_a)) * theta_a + c.to(theta_a) * theta_b  # noqa: E731
    t0 = time.perf_counter()
    losses, acc = _evaluate(f, thetas_of, t[:, None], data, desc="line: point", **kw)
    seconds = time.perf_counter() - t0
    return {"t": t.tolist(), "loss": losses.tolist(), "acc": None if acc is None else acc.tolist(),
            "loss_a": losses[m].item(), "loss_b": losses[m + n - 1].item(),
            "distance": float((theta_b - theta_a).norm()), "n_samples": int(data[0].shape[0]),
            "seconds": seconds, "seconds_per_point": seconds / len(t)}


# ---------------------------------------------------------------------------------------------------------
# plots (matplotlib Figure objects outside pyplot, in the package style of plots.py)

def _new_figure(size):
    from matplotlib.figure import Figure

    from ..plots import style
    style()  # the package's one figure style
    return Figure(figsize=size, layout="constrained")


def _figure(ax=None, projection=None, size=(5, 4)):
    if ax is not None:
        return ax.figure, ax
    fig = _new_figure(size)
    return fig, fig.add_subplot(projection=projection)


def _Z(result, what):
    if result.get(what) is None:
        raise UserError(f"this landscape has no {what!r} values (accuracy needs loss='ce')")
    return np.ma.masked_invalid(np.asarray(result[what], dtype=float).T)  # [b, a] for matplotlib; inf/nan hidden


def paper_levels(Z: np.ndarray, n_fallback: int = 12) -> np.ndarray:
    """Li et al.'s contour levels arange(0.1, 10, 0.5) inside Z's range; when fewer than 4 of them fall
    there (a very flat or very low surface), ``n_fallback`` evenly spaced levels instead."""
    Z = np.ma.masked_invalid(Z)
    lo, hi = float(Z.min()), float(Z.max())
    levels = np.arange(*LI_LEVELS)
    inside = levels[(levels > lo) & (levels < hi)]
    return inside if len(inside) >= 4 else np.linspace(lo, hi, n_fallback + 2)[1:-1]


def _markers(result) -> list[tuple[float, float]]:
    return [(0.0, 0.0)] + [(p["a"], p["b"]) for p in result.get("points", [])]


def _mark(ax, result):
    ax.plot([0], [0], "k*", ms=10, label=f"centre (loss {result['center_loss']:.5g})")
    for p in result.get("points", []):
        ax.plot([p["a"]], [p["b"]], "o", ms=7, mec="k", label=f"{p['name']} (loss {p['loss']:.5g})")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(0, -0.14), ncol=2, frameon=False)


def _clear_labels(ax, texts, result, a, b, radius: float = 0.07):
    """Remove contour labels within ``radius`` (a fraction of the axis spans) of a marker."""
    span = np.array([np.ptp(a) or 1.0, np.ptp(b) or 1.0])
    for t in texts:
        if any(np.hypot(*((np.array(t.get_position()) - m) / span)) < radius for m in _markers(result)):
            t.remove()


def plot_contour(result: dict, ax=None, levels=None, what: str = "loss", filled: bool = True,
                 vmax: float | None = None, log: bool | None = None):
    """Contour lines over a filled map, with the centre and the plane's marked points (values in the legend).

    Levels follow the range of the values (plots.levels: round values, 1-2-5 log-spaced when they span more
    than a factor of 20,
    or with ``log=True``); ``vmax`` clips the colour scale so that the basin is not washed out by a few large
    values. ``levels`` may be given (e.g. Li et al.'s arange(0.1, 10, 0.5): :func:`paper_levels`). Axes share
    one unit (equal aspect): a plane's distances are compared in both directions."""
    from matplotlib.colors import LogNorm, Normalize

    fig, ax = _figure(ax)
    a, b, Z = np.asarray(result["a"]), np.asarray(result["b"]), _Z(result, what)
    if vmax is not None:
        Z = np.ma.minimum(Z, vmax)
    lv, is_log = nice_levels(Z, 12, log) if levels is None else (np.asarray(levels), bool(log))
    norm = LogNorm(max(float(Z.min()), 1e-12), float(Z.max())) if is_log else Normalize(float(Z.min()), float(Z.max()))
    if filled:
        fill = np.geomspace(norm.vmin, norm.vmax, 40) if is_log else np.linspace(norm.vmin, norm.vmax, 40)
        cf = ax.contourf(a, b, Z, levels=fill, cmap="viridis", norm=norm, alpha=0.9, extend="neither")
        cb = fig.colorbar(cf, ax=ax, shrink=0.85, label=what + (" (log scale)" if is_log else "") +
                          (f", clipped at {vmax:g}" if vmax is not None else ""))
        from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator
        # log: the contour levels' round values (1-2-5 or 1-9 per decade, thinned to <= 7); linear: round steps
        ticks = lv[::max(1, -(-len(lv) // 7))] if is_log and len(lv) else None
        cb.locator = FixedLocator(ticks) if ticks is not None else MaxNLocator(6, steps=[1, 2, 2.5, 5, 10])
        cb.formatter = FuncFormatter(lambda v, _: f"{v:g}")
        cb.update_ticks()
        cb.ax.minorticks_off()
    if len(lv) > 1 or levels is not None:
        cs = ax.contour(a, b, Z, levels=lv, colors="k", linewidths=0.6, norm=norm)
        fmt = "%g"                       # round levels print as they are (0.2, 0.25, 1, 5)
        _clear_labels(ax, ax.clabel(cs, cs.levels[::2], inline=True, fontsize="small", fmt=fmt), result, a, b)
    _mark(ax, result)
    ax.set(xlabel="a (along d1)", ylabel="b (along d2)")
    from matplotlib.ticker import MaxNLocator
    for axis in (ax.xaxis, ax.yaxis):                 # round, well-spaced ticks that never run together
        axis.set_major_locator(MaxNLocator(5, steps=[1, 2, 2.5, 5, 10]))
    ax.set_aspect("equal", adjustable="box")
    return fig


def plot_surface3d(result: dict, ax=None, what: str = "loss", vmax: float | None = None, log: bool = False,
                   **kw):
    """3-D surface (Li et al. / FedSMOO Fig. 3); values above ``vmax`` are clipped for display, ``log`` draws
    log10 of the values."""
    fig, ax = _figure(ax, projection="3d")
    A, Bm = np.meshgrid(result["a"], result["b"])
    Z = _Z(result, what) if vmax is None else np.minimum(_Z(result, what), vmax)
    if log:
        Z = np.log10(np.maximum(Z, 1e-12))
    ax.plot_surface(A, Bm, Z, **({"cmap": "viridis", "linewidth": 0} | kw))
    ax.set(xlabel="a (along d1)", ylabel="b (along d2)", zlabel=f"log10 {what}" if log else what)
    return fig


def plot_panel(results: list[dict], titles: list[str] | None = None, kind: str = "surface",
               overlay: dict | None = None, what: str = "loss", vmax: float | None = None):
    """Several checkpoints side by side on ONE colour (and z) scale, logarithmic and labelled so when the values
    span more than a factor of 20 (plots.shared_norm). ``overlay`` (FedSMOO Fig. 3: each
    baseline with FedSMOO's surface superimposed) is drawn as a wireframe on every panel."""
    from matplotlib import colormaps

    from ..plots import shared_norm
    if kind not in ("surface", "contour"):
        raise UserError(f"unknown panel kind {kind!r}; use 'surface' or 'contour'")
    titles = titles or [f"#{i}" for i in range(len(results))]
    Zs = [_Z(r, what) if vmax is None else np.minimum(_Z(r, what), vmax) for r in results]
    norm, log = shared_norm(Zs)              # log when the panels span > 20x: a flat model is not one colour
    up = (lambda Z: np.log10(np.maximum(Z, norm.vmin))) if log and kind == "surface" else (lambda Z: Z)
    fig = _new_figure((4.2 * len(results), 4))
    for i, (r, Z) in enumerate(zip(results, Zs)):
        ax = fig.add_subplot(1, len(results), i + 1, projection="3d" if kind == "surface" else None)
        A, Bm = np.meshgrid(r["a"], r["b"])
        if kind == "surface":                # height log10(loss) on a log scale, colour by the shared norm
            ax.plot_surface(A, Bm, up(Z), facecolors=colormaps["coolwarm"](norm(Z)), linewidth=0, shade=False)
            ax.set_zlim(*up(np.array([norm.vmin, norm.vmax])))
            ax.set(xlabel="a (along d1)", ylabel="b (along d2)")
            if i == len(results) - 1:        # once: on every panel it would collide with the next one's ticks
                ax.set_zlabel(f"log10 {what}" if log else what)
            if overlay is not None:
                Zo = _Z(overlay, what) if vmax is None else np.minimum(_Z(overlay, what), vmax)
                ax.plot_wireframe(*np.meshgrid(overlay["a"], overlay["b"]), up(Zo), color="k", lw=0.4)
        else:
            fill = np.geomspace(norm.vmin, norm.vmax, 31) if log else np.linspace(norm.vmin, norm.vmax, 31)
            ax.contourf(A, Bm, Z, levels=fill, cmap="viridis", norm=norm)
            ax.contour(A, Bm, Z, levels=nice_levels(Z, log=log)[0], colors="k", linewidths=0.5)
        ax.set_title(titles[i])
        if kind == "contour":
            ax.set_aspect("equal", adjustable="box")
            ax.plot([0], [0], "k*", ms=9)
            ax.set(xlabel="a (along d1)", ylabel="b (along d2)")
    from matplotlib.cm import ScalarMappable
    from matplotlib.ticker import LogLocator, MaxNLocator
    cb = fig.colorbar(ScalarMappable(norm, "coolwarm" if kind == "surface" else "viridis"), ax=fig.axes,
                      label=f"{what}, one {'log ' if log else ''}scale for all panels", shrink=0.7)
    cb.locator = LogLocator(subs=(1.0, 2.0, 5.0)) if log else MaxNLocator(6)
    cb.update_ticks()
    return fig


def plot_trajectory(result: dict, coords, explained=None, labels=None, ax=None, **kw):
    """Li et al. Sec. 7: the contour of the PCA plane with the run's checkpoints projected onto it."""
    fig = plot_contour(result, ax=ax, **kw)
    ax = ax or fig.axes[0]
    c = np.asarray(coords, dtype=float)
    ax.plot(c[:, 0], c[:, 1], "r.-", lw=1, ms=5)
    for (x, y), s in zip(c, labels or []):
        ax.annotate(str(s), (x, y), fontsize=6, color="r")
    if explained is not None:
        ax.set(xlabel=f"1st PC: {100 * explained[0]:.1f} %", ylabel=f"2nd PC: {100 * explained[1]:.1f} %")
    return fig


def plot_line(result: dict, ax=None, log: bool = False):
    """Loss along a 1-D interpolation (Li et al. plot_1D) and, when measured and no ``ax`` is given, accuracy in a
    second panel beside it (two panels, not two y scales on one: plots.check)."""
    acc = result.get("acc") is not None and ax is None
    fig = ax.figure if ax is not None else _new_figure((9.5 if acc else 5, 4))
    axes = [ax] if ax is not None else fig.subplots(1, 2 if acc else 1, squeeze=False)[0]
    for a, what, style in zip(axes, ("loss", "acc"), ("b-", "r-")):
        a.plot(result["t"], result[what], style)
        a.set(xlabel="t  (0 = first model, 1 = second)", ylabel="accuracy" if what == "acc" else "loss",
              yscale="log" if log and what == "loss" else "linear")
        for x in (0, 1):
            a.axvline(x, color="0.7", lw=0.6)
    return fig


# ---------------------------------------------------------------------------------------------------------
# command line: python -m fedlab_analysis.probe landscape CKPT [...]

PLANES = ("random", "clients", "update", "hessian", "pca")


HELP = "loss surface on a plane, or a line to a 2nd model"
DESCRIBE = ("The loss and accuracy on a grid of a 2-D plane through the checkpoint (Li et al. 2018, "
            "'Visualizing the Loss Landscape of Neural Nets': filter-normalised random directions), or through "
            "two clients' models, the last global update, the top Hessian eigenvectors or the PCA of the "
            "trajectory; --other draws the 1-D line to a second checkpoint. --save-directions/--directions "
            "reuse one plane for several checkpoints; --h5 writes Li et al.'s HDF5 layout. Serves FedSMOO "
            "Fig. 3 and FedLESAM Figs. 1, 3, 6.")
COST = ("cost: grid^2 passes (+1 per marked point); --other: grid * (1 + 2 * extend) passes; "
        "--plane hessian adds a Lanczos for two eigenvectors (~20-100 HVPs).")


def _batch_points(text: str):
    import argparse
    if text == "auto" or (text.isdigit() and int(text) > 0):
        return text if text == "auto" else int(text)
    raise argparse.ArgumentTypeError(f"{text!r} is not 'auto' or a positive integer")


@dataclass
class Options(Common):
    plane: str | None = opt(None, "directions of the 2-D plane (default random)", choices=PLANES)
    other: str | None = opt(None, "second checkpoint: 1-D interpolation from CKPT to it")
    grid: int = opt(25, "points per axis (line: points between the models)")
    range: str | None = opt(None, "lo:hi of a (default -1:1; fitted to the marked points for the clients/update/pca "
                            "planes)")
    range_y: str | None = opt(None, "lo:hi of b (default: as --range)")
    norm: str | None = opt(None, "normalisation of random directions (random/update planes; default: filter)",
                           choices=("filter", "layer", "none"))
    include_1d: bool = opt(False, "move biases/norm scales too (direction = w)")
    dir_type: str = opt("weights", "states: BatchNorm running statistics are part of the vector (Li et al.)",
                        choices=("weights", "states"))
    orthogonalize: bool = opt(False, "random plane: make d2 orthogonal to d1")
    clients_pair: str | None = opt(None, "clients plane: two client ids I,J (default: the two that trained last "
                                   "and differ from the global model)")
    extend: float | None = opt(None, "with --other: how far to continue past each model (default: 0.25)")
    batch_size: int | None = opt(None, "samples per forward pass and per Hessian-vector chunk of --plane hessian "
                                 "(memory only; default: 16384 // batch-points per forward, 1000 per HVP chunk)",
                                 lo=1, metavar="N")
    vmax: float | None = opt(None, "with --plot: clip the colour scale at this loss")
    log: bool | None = opt(None, "with --plot: log colour scale and levels (default: log when the loss spans > 20x)")
    save_directions: str | None = opt(None, "save the plane's two directions (torch file) to draw the same plane for "
                                      "other checkpoints", metavar="FILE")
    directions: str | None = opt(None, "draw the plane of a --save-directions FILE (checked to be of this model) "
                                 "instead of --plane", metavar="FILE")
    h5: str | None = opt(None, "also write the surface in the HDF5 layout of Li et al.'s loss-landscape code "
                         "(xcoordinates, ycoordinates, train_loss, train_acc in %% for their plot_2D.py and "
                         "h52vtp.py; with --other the 1-D line: xcoordinates, train_loss, train_acc for their "
                         "plot_1D.py; needs h5py: the landscape-h5 extra)", metavar="FILE")
    batch_points: str = opt("auto", "grid points per vmapped forward ('auto': 1 on CPU from 512 samples on, "
                            "memory-bounded on GPU)", parse=_batch_points)


def tune_parser(p) -> None:
    """Let `--range -1:1` read as a value: argparse takes only plain negative numbers for values, and otherwise
    anything starting with '-' for an option (this parser has no option that looks numeric)."""
    p._negative_number_matcher = re.compile(r"^-\d*\.?\d+(e-?\d+)?(:-?\d*\.?\d+(e-?\d+)?)?$")


DIRECTIONS = "fedlab_analysis.directions"


def save_directions(path, d1: Tensor, d2: Tensor, bundle, **meta) -> None:
    """The plane (d1, d2) with the model it belongs to (layer table, model spec), for :func:`load_directions`."""
    from ..checkpoint import save_plain
    save_plain({"format": DIRECTIONS, "version": 1, "d1": d1.detach().cpu(), "d2": d2.detach().cpu(),
                "layers": bundle.ckpt["layers"], "model": bundle.ckpt["model"], **meta}, path)


def load_directions(path, bundle, dir_type: str) -> tuple[Tensor, Tensor, dict]:
    """(d1, d2, meta) of a :func:`save_directions` file, refused in one line unless it was made for this model
    (same layer names, shapes and order) and the same --dir-type."""
    from ..checkpoint import read
    from ..errors import CheckpointError
    if Path(path).is_dir():
        raise UserError(f"--directions {path}: is a folder; give a file written with --save-directions")
    try:
        _, obj = read(path)                        # torch.load(weights_only=True), its refusal in one full line
    except CheckpointError as e:
        raise UserError(f"--directions: {e}".replace(" torch checkpoint", " torch file")) from None
    if not isinstance(obj, dict) or obj.get("format") != DIRECTIONS:
        raise UserError(f"--directions {path}: not a directions file (write one with --save-directions)")
    d1, d2 = obj.get("d1"), obj.get("d2")
    if not (torch.is_tensor(d1) and torch.is_tensor(d2) and d1.dim() == d2.dim() == 1 and d1.shape == d2.shape
            and d1.is_floating_point() and d2.is_floating_point() and bool(torch.isfinite(d1).all())
            and bool(torch.isfinite(d2).all()) and float(d1.norm()) > 0 and float(d2.norm()) > 0):
        raise UserError(f"--directions {path}: does not hold a plane (two finite, non-zero 1-D float vectors d1, "
                        "d2 of one length); write it again with --save-directions")
    if not isinstance(obj.get("layers"), list) or not isinstance(obj.get("model"), dict):
        raise UserError(f"--directions {path}: names no model (layers, model); write it again with "
                        "--save-directions")
    if obj["layers"] != bundle.ckpt["layers"] or obj["model"] != bundle.ckpt["model"]:
        n = sum(l["numel"] for l in obj["layers"])
        raise UserError(f"--directions {path}: made for another model ({obj['model'].get('name')}, {n} parameters) "
                        f"than this {bundle.ckpt['model']['name']} ({bundle.space.P} parameters); save directions "
                        "from a checkpoint of the same model")
    if obj.get("dir_type", "weights") != dir_type:
        raise UserError(f"--directions {path}: saved with --dir-type {obj.get('dir_type')}; pass the same --dir-type")
    meta = {k: v for k, v in obj.items() if k not in ("d1", "d2", "layers", "model", "format", "version")}
    return obj["d1"], obj["d2"], meta


def write_h5(path, res: dict, split: str = "train", **attrs) -> None:
    """The surface in Li et al.'s loss-landscape layout (tomgoldstein/loss-landscape, ``crunch``, ``plot_2D`` and
    ``plot_1D``): a plane as ``xcoordinates`` [nx], ``ycoordinates`` [ny], ``{split}_loss`` and ``{split}_acc``
    (accuracy in percent, as their code writes it) of shape [ny, nx], entry [j, i] at (x_i, y_j), which is how their
    plot_2D.py and h52vtp.py read it (``X, Y = meshgrid(x, y)``); a line (``--other``) as ``xcoordinates`` [nx] (t:
    0 at CKPT, 1 at the other model, their ``--model_file2`` interpolation) and ``{split}_loss``, ``{split}_acc``
    [nx], which their plot_1D.py reads. ``split`` is train or test as in their files."""
    import h5py
    line = res.get("mode") == "line"
    with h5py.File(path, "w") as fh:
        fh["xcoordinates"] = np.asarray(res["t"] if line else res["a"], dtype=np.float64)
        if not line:
            fh["ycoordinates"] = np.asarray(res["b"], dtype=np.float64)
        loss = np.asarray(res["loss"], dtype=np.float64)
        fh[f"{split}_loss"] = loss if line else loss.T
        if res.get("acc") is not None:
            acc = 100.0 * np.asarray(res["acc"], dtype=np.float64)
            fh[f"{split}_acc"] = acc if line else acc.T
        for k, v in attrs.items():
            fh.attrs[k] = v if isinstance(v, (int, float)) else str(v)


def _range(text: str | None, default, flag: str = "--range"):
    if text is None:
        return default
    try:
        lo, hi = (float(v) for v in text.split(":"))
    except ValueError:
        raise UserError(f"{flag} {text!r} is not lo:hi (e.g. -1:1)") from None
    if not lo < hi:
        raise UserError(f"{flag} {text!r} needs lo < hi")
    return lo, hi


def _fit(coords, margin: float = 1.25):
    """A symmetric range per axis covering every marked point (so the centre stays a grid point)."""
    m = margin * np.abs(np.asarray(coords, dtype=float)).max(0)
    m = np.where(m > 0, m, 1.0)
    return (-m[0], m[0]), (-m[1], m[1])


def _flat(ckpt: dict, bundle, states: bool, where: str) -> Tensor:
    """The global model of a checkpoint as the bundle's flat vector (plus its buffers for 'states')."""
    if ckpt.get("layers") != bundle.ckpt.get("layers"):
        raise UserError(f"{where} holds a different model than the probed checkpoint; "
                        "compare checkpoints of the same model")
    v = bundle.space.flatten(ckpt["global"])
    if states:
        bspace = ParamSpace.buffers_of(bundle.model)
        missing = [l.name for l in bspace.layers if l.name not in (ckpt.get("buffers") or {})]
        if missing:
            raise UserError(f"{where} stores no buffers {missing[:3]}; use --dir-type weights")
        v = torch.cat([v, bspace.flatten(ckpt["buffers"])])
    return v.to(bundle.theta.device, bundle.theta.dtype)


def _run_checkpoints(path: str) -> list[dict]:
    """Every ckpt/round_*.pt of the run holding ``path`` (a file or a run directory), in round order."""
    from ..checkpoint import load
    p = Path(path)
    folder = (p / "ckpt" if (p / "ckpt").is_dir() else p) if p.is_dir() else p.parent
    return sorted((load(q) for q in folder.glob("round_*.pt")), key=lambda c: c["round"])


def _last_update(bundle, path: str) -> tuple[Tensor, str]:
    """w^t - w^{t-1}: FedLESAM's algo_state['last_update'], else the difference to the previous round's
    checkpoint when the run saved it."""
    state = bundle.ckpt.get("algo_state") or {}
    if isinstance(state.get("last_update"), Tensor):
        return state["last_update"].reshape(-1).to(bundle.theta.device, bundle.theta.dtype), "algo_state"
    t = bundle.ckpt["round"]
    prev = [c for c in _run_checkpoints(path) if c["round"] == t - 1]
    if not prev:
        raise UserError(f"--plane update: the checkpoint keeps no last global update (fedlesam does) and the run "
                        f"saved no round {t - 1} checkpoint beside it; train with --ckpt-every 1")
    return bundle.theta - _flat(prev[0], bundle, False, f"the round {t - 1} checkpoint"), f"round {t - 1}"


def _client_pair(bundle, text: str | None) -> list[int]:
    from .common import require_clients
    require_clients(bundle, "--plane clients")
    rounds = bundle.ckpt["clients"].get("rounds")
    rounds = [0] * len(bundle.client_ids) if rounds is None else [int(r) for r in rounds]
    trained = [i for _, i in sorted(((-r, i) for i, r in zip(bundle.client_ids, rounds) if r >= 0))]
    if text is None:                 # the two that trained last, leaving out one equal to the global model (sole
        tiny = 1e3 * torch.finfo(bundle.theta.dtype).eps * float(bundle.theta.norm())      # client of its round)
        apart = [i for i in trained
                 if float((bundle.clients[bundle.client_ids.index(i)] - bundle.theta).norm()) > tiny]
        pair = apart[:2]
    else:
        try:
            pair = [int(v) for v in text.split(",")]
        except ValueError:
            pair = []
    if len(pair) != 2 or pair[0] == pair[1] or any(i not in trained for i in pair):
        raise UserError(f"--clients-pair {text!r} must name two different clients that trained; "
                        f"these did: {trained}" if text else
                        f"--plane clients needs two clients that trained, this checkpoint has {trained}")
    return pair


def _check(args):
    """Refuse every flag that cannot act with the others (one line)."""
    from ..rundir import check_file
    for flag in ("save_directions", "h5"):
        if getattr(args, flag) is not None:
            check_file(getattr(args, flag), "--" + flag.replace("_", "-"))
    _conflicts(args)
    if args.h5 is not None:  # after the conflicts: a flag that cannot act is named first, h5py or not
        try:
            import h5py  # noqa: F401
        except ImportError:
            raise UserError("--h5 needs h5py: pip install 'fedlab_analysis[landscape-h5]' (or pip install h5py)"
                            ) from None


def _conflicts(args):
    from .common import refuse
    if args.grid < 2:
        raise UserError(f"--grid {args.grid} is too small; use at least 2 (3+ for contours)")
    if args.batch_size is not None and args.batch_size < 1:
        raise UserError(f"--batch-size must be >= 1 (got {args.batch_size})")
    if not args.plot:
        refuse(args, ["vmax", "log"], "without --plot (they shape the figure only)")
    if args.other:
        if args.plane:
            raise UserError("--other draws a 1-D interpolation; leave out --plane (or --other)")
        refuse(args, ["range", "range_y", "norm", "include_1d", "orthogonalize", "clients_pair", "vmax",
                      "save_directions", "directions"], "with --other (a 1-D interpolation has no plane)")
        return
    if args.directions:
        if args.plane:
            raise UserError("--directions gives the plane; leave out --plane (or --directions)")
        refuse(args, ["norm", "include_1d", "orthogonalize", "clients_pair"],
               "with --directions (the saved plane is used as it is)")
        return
    refuse(args, ["extend"], "without --other (it extends the 1-D interpolation)")
    plane = args.plane or "random"
    if plane != "random":
        refuse(args, ["orthogonalize"], f"with --plane {plane} (it orthogonalises the random plane)")
    if plane != "clients":
        refuse(args, ["clients_pair"], f"with --plane {plane} (it picks the clients of --plane clients)")
    if plane not in ("random", "update"):
        refuse(args, ["norm", "include_1d"], f"with --plane {plane} (they shape random directions)")
    if args.dir_type == "states" and plane in ("clients", "update", "hessian"):
        raise UserError(f"--dir-type states works with --plane random or pca and with --other, not {plane}")


def compute(bundle, opts: Options) -> dict:
    """The loss and accuracy on a plane through the checkpoint's model (or on the line to ``opts.other``).

    Args:
        bundle: the rebuilt checkpoint (``common.rebuild``); the loss is its mean over ``bundle.X``.
        opts: the options above (the plane, its range and grid, the directions' file, the outputs).
    Returns:
        ``surface``'s dict (coordinates a, b, loss, acc on the grid, marked points) or ``line``'s, with the
        plane's settings and ``summary``; ``_figure`` holds what ``plot`` needs.

    The evaluation against the exact answer (a quadratic loss on a plane: F(w + a d1 + b d2) = (a^2 + b^2) / 2):

    >>> import torch
    >>> w = torch.zeros(2, dtype=torch.float64)
    >>> X, y = torch.eye(2, dtype=torch.float64), torch.zeros(2, dtype=torch.float64)
    >>> r = surface(lambda th, x: x @ th, w, torch.tensor([1.0, 0.0], dtype=torch.float64),
    ...             torch.tensor([0.0, 1.0], dtype=torch.float64), (X, y), grid=3, loss="mse")
    >>> [round(v, 9) for v in r["loss"][0]]           # a = -1, b = -1, 0, 1: (1 + b^2) / 2
    [1.0, 0.5, 1.0]
    """
    args = opts
    _check(args)
    plane, states = args.plane, args.dir_type == "states"
    space, f, theta = (with_states(bundle.model, bundle.space, bundle.theta) if states
                       else (bundle.space, bundle.f, bundle.theta))
    data, bp = (bundle.X, bundle.y), args.batch_points
    common = {"seed": args.seed, "dir_type": args.dir_type}
    ev = {"batch_points": bp, "loss": per_sample(getattr(bundle, "loss", "ce"))}
    if args.batch_size:
        B = args.batch_size
        ev["chunk"] = B * (1 if bp == "auto" else int(bp))
    log = args.log

    if foreign.is_foreign(bundle.ckpt) and (plane or "random") in ("clients", "update", "pca"):
        raise UserError(f"--plane {plane} {foreign.NEEDS}; use --plane random or hessian, or --other FILE")
    if args.other:
        from ..checkpoint import load
        load = partial(foreign.like, bundle) if foreign.is_foreign(bundle.ckpt) else load
        extend = 0.25 if args.extend is None else args.extend
        res = line(f, theta, _flat(load(args.other), bundle, states, str(args.other)), data, n=args.grid,
                   extend=extend, **ev)
        res = {"mode": "line", "other": str(args.other), **common, **res}
        if args.h5:
            write_h5(args.h5, res, "test" if bundle.data == "test" else "train", checkpoint=str(args.ckpt),
                     other=str(args.other), n_samples=int(len(bundle.y)), data=bundle.data)
            res["h5"] = str(args.h5)
        res["summary"] = {"loss_a": res["loss_a"], "loss_b": res["loss_b"], "distance": res["distance"],
                          "points": len(res["t"])}
        res["_figure"] = {"log": log, "title": bundle.title(f"loss along the line to {Path(args.other).name} "
                                                           f"({len(res['t'])} points)")}
        return res

    plane = "file" if args.directions else plane or "random"
    dir_kw = {"norm": args.norm or "filter", "ignore_1d": not args.include_1d}
    points, extra, rng = {}, {}, None
    if plane == "file":
        d1, d2, meta = load_directions(args.directions, bundle, args.dir_type)
        if d1.numel() != space.P or d2.numel() != space.P:
            raise UserError(f"--directions {args.directions}: {d1.numel()} entries for a {space.P}-entry vector")
        d1, d2 = d1.to(theta), d2.to(theta)
        extra = {"directions": str(args.directions), "directions_meta": meta}
        if meta.get("window"):                   # a clients/update/pca plane: its window, scale and markers again
            rng = tuple(tuple(map(float, w)) for w in meta["window"])
            extra["isometric"] = bool(meta.get("isometric"))
        same = str(meta.get("source")) == str(args.ckpt)
        points = {(k if same else f"{k} (saved)"): tuple(map(float, v)) for k, v in (meta.get("points") or {}).items()}
        if points and not same:
            extra["points_note"] = (f"the marked points are where {meta.get('source')} (round {meta.get('round')}) "
                                    "saw them, offsets from its own centre; this centre is another model")
    elif plane == "random":
        d1, d2 = plane_random(space, theta, args.seed, args.orthogonalize, **dir_kw)
    elif plane == "clients":
        pair = _client_pair(bundle, args.clients_pair)
        _, d1, d2, c = plane_through(theta, *(bundle.clients[bundle.client_ids.index(i)] for i in pair))
        points = {f"client {pair[0]}": c[1].tolist(), f"client {pair[1]}": c[2].tolist()}
        rng, extra = _fit(c), {"clients": pair, "isometric": True}
    elif plane == "update":
        update, source = _last_update(bundle, args.ckpt)
        d1, d2 = plane_update(space, theta, update, args.seed, **dir_kw)
        points = {"previous global": [-1.0, 0.0]}
        rng, extra = ((-1.5, 1.5), (-1.5, 1.5)), {"update_from": source, "isometric": True}
    elif plane == "hessian":
        d1, d2, eig = plane_hessian(f, theta, data, seed=args.seed, batch_size=args.batch_size or 1000,
                                    loss=getattr(bundle, "loss", "ce"))
        extra = {"eigenvalues": eig}
    else:
        cks = [c for c in _run_checkpoints(args.ckpt) if c["round"] < bundle.ckpt["round"]] + [bundle.ckpt]
        if len(cks) < 4:
            raise UserError(f"--plane pca needs >= 4 checkpoints of the run up to this round, found {len(cks)}; "
                            "train with a smaller --ckpt-every or probe a later round")
        pca = pca_trajectory(torch.stack([_flat(c, bundle, states, f"round {c['round']}") for c in cks]))
        d1, d2, rng = pca["d1"], pca["d2"], _fit(pca["coords"])
        extra = {"explained": pca["explained"], "trajectory": pca["coords"].tolist(),
                 "rounds": [c["round"] for c in cks]}
    if rng is not None and plane != "file":   # one range on both axes: drawn to scale, so make it square too
        m = max(rng[0][1], rng[1][1])
        rng = ((-m, m), (-m, m))
    r_a = _range(args.range, rng[0] if rng else (-1.0, 1.0))
    r_b = _range(args.range_y, rng[1] if rng and args.range is None else r_a, "--range-y")
    res = surface(f, theta, d1, d2, data, grid=args.grid, range_=r_a, range_y=r_b, points=points, **ev)
    res = {"mode": "plane", "plane": plane, "norm": dir_kw["norm"] if plane in ("random", "update") else None,
           "include_1d": bool(args.include_1d), **common, **extra, **res}
    if args.h5:                                      # before the plane: a failed write leaves neither (atomic)
        from ..rundir import atomic
        atomic(Path(args.h5), lambda tmp: write_h5(tmp, res, "test" if bundle.data == "test" else "train",
               checkpoint=str(args.ckpt), plane=plane, n_samples=int(len(bundle.y)), data=bundle.data,
               dir_file=str(args.directions or args.save_directions or "")))
        res["h5"] = str(args.h5)
    if args.save_directions:
        marked = {p["name"]: [p["a"], p["b"]] for p in res["points"]} if plane != "random" else {}
        save_directions(args.save_directions, d1, d2, bundle, dir_type=args.dir_type, plane=plane, seed=args.seed,
                        norm=res["norm"], source=str(args.ckpt), round=int(bundle.ckpt["round"]), points=marked,
                        window=[[res["a"][0], res["a"][-1]], [res["b"][0], res["b"][-1]]] if rng else None,
                        isometric=bool(extra.get("isometric")))
        res["saved_directions"] = str(args.save_directions)
    res["summary"] = {"center_loss": res["center_loss"], "center_acc": res["center_acc"],
                      "min_loss": float(np.nanmin(res["loss"])), "max_loss": float(np.nanmax(res["loss"])),
                      "grid": args.grid}
    how = {"random": f"random {dir_kw['norm']}-normalised plane (seed {args.seed})",
           "clients": f"plane through clients {extra.get('clients')}", "update": "last-update plane",
           "hessian": "plane of the top-2 Hessian eigenvectors", "pca": "PCA plane of the trajectory",
           "file": f"plane of {Path(str(args.directions)).name}"}[plane]
    res["_figure"] = {"log": log, "vmax": args.vmax,
                      "title": bundle.title(f"loss landscape, {how}, {args.grid} x {args.grid} grid")}
    return res


def plot(result: dict, path) -> None:
    """The surface as contours beside a 3-D view (the PCA plane: the trajectory over the contours), or the
    line's loss and accuracy, saved at ``path``."""
    from ..plots import save, title
    opts = result["_figure"]
    log = opts["log"]
    if result["mode"] == "line":
        fig = plot_line(result, log=bool(log))
        title(fig, opts["title"])
        save(fig, path)
        return
    fig = _new_figure((10, 4.8))
    ax = fig.add_subplot(1, 2, 1)
    if result["plane"] == "pca":
        plot_trajectory(result, result["trajectory"], result["explained"], result["rounds"], ax=ax,
                        vmax=opts["vmax"], log=log)
    else:
        plot_contour(result, ax=ax, vmax=opts["vmax"], log=log)
    is_log = log if log is not None else nice_levels(_Z(result, "loss"))[1]
    plot_surface3d(result, ax=fig.add_subplot(1, 2, 2, projection="3d"), vmax=opts["vmax"], log=is_log)
    title(fig, opts["title"])
    save(fig, path)
