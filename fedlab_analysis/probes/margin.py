"""The margin generalization bound of FedSMOO Theorem 4.4 (Sun et al. 2023, Eqs. 15-16).

    G^f      <= G~_eps^f + O( sqrt( (L^2 L_n^2 d ln(d L) V_L + ln(L D / p)) / ((D - 1) eps^2) ) )     Thm 4.4
    V_L       = prod_l ||W_l||_2^2 * sum_l ||W_l||_F^2 / ||W_l||_2^2                                 Eq. (16)
    G~_eps^f  = (1/D) #{ f(w + s, x)[y] <= max_{j != y} f(w + s, x)[j] + eps }                      Eq. (15)

L layers (every Linear / Conv weight), L_n the largest input norm, d the width, D samples, 1 - p confidence, s the
global perturbation (FedSMOO's s, a one-step SAM perturbation, or none).

Readings chosen (the theorem is stated up to O(.)):
- ``bound``: the displayed expression with the O-constant 1. ``bound_explicit``: the constants of the proof
  (App. C.2): 4 sqrt((KL + ln(6 L D^{1 + 1/(2L)} / p)) / (D - 1)) with KL = 16 e^4 L^2 L_n^2 d ln(4 d L) V_L / eps^2
  (Lemma C.7, proof step 4, and the union bound over the cover of size L D^{1/(2L)} of step 5).
- ||W_l||_2 of a convolution is the operator norm of the layer as a linear map on its actual input (stride,
  padding, dilation, groups and the input size included), computed exactly from the dense operator when it is
  small and by power iteration on A'A otherwise; the reshaped-kernel norm ||W.reshape(out, -1)||_2 is reported
  beside it. ||W_l||_F is the Frobenius norm of the parameter tensor (the PAC-Bayes KL term of the proof).
- d = the largest dimension of any layer's operator (Neyshabur et al.'s width h), unless given.
- The theorem assumes a bias-free network with 1-Lipschitz activations; ``bias_free`` says whether every
  parameter is a Linear/Conv weight (biases and normalisation scales break the assumption; the value is then
  reported for the weights alone). The bound is vacuous (> 1) at every practical scale: compare orderings only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import UserError
from .options import Common, opt

OPS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)
DENSE_LIMIT = 1 << 22            # entries of the dense operator below which the spectral norm is exact


def operators(model: nn.Module, x: torch.Tensor) -> list[dict]:
    """The Linear/Conv layers in forward order with the per-sample shape of their input (one forward pass)."""
    found, hooks = [], []
    for name, mod in model.named_modules():
        if isinstance(mod, OPS):
            hooks.append(mod.register_forward_hook(
                lambda m, inp, out, name=name: found.append({"module": m, "name": f"{name}.weight",
                                                            "in_shape": tuple(inp[0].shape[1:]),
                                                            "out_shape": tuple(out.shape[1:])})))
    mode = model.training
    try:
        with torch.no_grad():
            model.eval()                  # BatchNorm: no running-stat update, one sample is enough
            model(x[:1])
    finally:
        model.train(mode)
        for h in hooks:
            h.remove()
    seen, out = set(), []
    for op in found:                      # a module applied twice counts once (its first use)
        if op["name"] not in seen:
            seen.add(op["name"])
            out.append(op)
    return out


def _apply(op: dict, W: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The layer's linear map (no bias) on a batch of inputs of shape [n, *in_shape]."""
    m = op["module"]
    return F.linear(v, W) if isinstance(m, nn.Linear) else m._conv_forward(v, W, None)


def spectral_norm(op: dict, W: torch.Tensor, *, iters: int = 500, tol: float = 1e-10, seed: int = 0) -> float:
    """||A||_2 of the layer's linear map x -> W * x on its input shape: exact (dense) when small, else power
    iteration on A'A (the adjoint by autograd) from a seeded start."""
    if isinstance(op["module"], nn.Linear):
        return float(torch.linalg.matrix_norm(W.detach().double(), ord=2))
    n_in = math.prod(op["in_shape"])
    n_out = math.prod(op["out_shape"])
    W = W.detach().double()
    if n_in * n_out <= DENSE_LIMIT:
        eye = torch.eye(n_in, dtype=W.dtype, device=W.device).view(n_in, *op["in_shape"])
        A = _apply(op, W, eye).reshape(n_in, -1)
        return float(torch.linalg.matrix_norm(A, ord=2))
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(1, *op["in_shape"], generator=g, dtype=W.dtype).to(W.device)
    v, s = v / v.norm(), 0.0
    for _ in range(iters):
        x = v.detach().requires_grad_(True)
        with torch.enable_grad():
            Av = _apply(op, W, x)
            (AtAv,) = torch.autograd.grad(Av, x, Av)       # A' A v
        s_new = float(AtAv.norm()) ** 0.5
        v = AtAv / AtAv.norm()
        if abs(s_new - s) <= tol * max(s_new, 1e-300):
            s = s_new
            break
        s = s_new
    return s


def layer_norms(model, space, theta: torch.Tensor, x: torch.Tensor, seed: int = 0) -> list[dict]:
    """Per layer: spectral (operator) norm, reshaped-kernel spectral norm, Frobenius norm, operator dims."""
    rows = []
    for op in operators(model, x):
        W = space.of(theta, op["name"]).detach()
        rows.append({"name": op["name"], "kind": type(op["module"]).__name__, "shape": list(W.shape),
                     "in_shape": list(op["in_shape"]), "out_shape": list(op["out_shape"]),
                     "spectral": spectral_norm(op, W, seed=seed),
                     "spectral_reshaped": float(torch.linalg.matrix_norm(W.double().reshape(W.shape[0], -1), ord=2)),
                     "frobenius": float(W.double().norm()),
                     "width": max(math.prod(op["in_shape"]), math.prod(op["out_shape"]))})
    if not rows:
        raise UserError("the margin bound needs Linear/Conv layers; this model has none")
    return rows


def V_L(spectral, frobenius) -> float:
    """Eq. (16): prod_l ||W_l||_2^2 * sum_l ||W_l||_F^2 / ||W_l||_2^2."""
    return math.prod(s ** 2 for s in spectral) * sum(fr ** 2 / s ** 2 for s, fr in zip(spectral, frobenius))


@torch.no_grad()
def margins(f, theta, X, y, batch_size: int = 2048) -> torch.Tensor:
    """f(theta, x)[y] - max_{j != y} f(theta, x)[j] per sample."""
    from .common import chunks
    out = []
    sizes = chunks(f, len(y), batch_size)
    for x, t in zip(X.split(sizes), y.split(sizes)):
        z = f(theta, x)
        true = z.gather(1, t[:, None])[:, 0]
        other = z.scatter(1, t[:, None], float("-inf")).max(1).values
        out.append(true - other)
    return torch.cat(out)


def complexity(V: float, L: int, L_n: float, d: int, D: int, eps: float, p: float) -> dict:
    """The two readings of Theorem 4.4's second term (module docstring)."""
    if D < 2 or eps <= 0 or not 0 < p < 1:
        raise UserError(f"the margin bound needs D >= 2 samples, margin > 0 and 0 < p < 1 (got D={D}, "
                        f"margin={eps}, p={p})")
    o_form = math.sqrt((L ** 2 * L_n ** 2 * d * math.log(d * L) * V + math.log(L * D / p)) / ((D - 1) * eps ** 2))
    kl = 16 * math.e ** 4 * L ** 2 * L_n ** 2 * d * math.log(4 * d * L) * V / eps ** 2
    explicit = 4 * math.sqrt((kl + math.log(6 * L * D ** (1 + 1 / (2 * L)) / p)) / (D - 1))
    return {"term": o_form, "term_explicit": explicit, "kl": kl}


def margin_bound(model: nn.Module, space, theta: torch.Tensor, X: torch.Tensor, y: torch.Tensor, *,
                 margin: float | None = None, p: float = 0.05, s: torch.Tensor | None = None,
                 D: int | None = None, width: int | None = None, quantile: float = 0.1, seed: int = 0,
                 f=None) -> dict:
    """FedSMOO Theorem 4.4 at w = ``theta`` on (X, y) (the union of the clients' training data).

    ``margin`` eps (default: the ``quantile`` of the positive margins at w + s, so that
    G~_eps = error + quantile * (1 - error));
    ``s``: the global perturbation (None = 0); ``D``: the data-set size (default len(y)); ``width``: d;
    ``f``: the model as a function (default: ``model`` as it is; the probe passes its BatchNorm mode's f)."""
    from ..params import functional
    theta = theta.detach()
    w_s = theta if s is None else theta + s.to(theta)
    f = functional(model, space) if f is None else f
    norms = layer_norms(model, space, theta, X, seed)
    covered = {r["name"] for r in norms}
    extra = [l.name for l in space.layers if l.name not in covered]
    L = len(norms)
    V = V_L([r["spectral"] for r in norms], [r["frobenius"] for r in norms])
    V_reshaped = V_L([r["spectral_reshaped"] for r in norms], [r["frobenius"] for r in norms])
    m = margins(f, w_s, X, y)
    pos = m[m > 0].double()
    if margin is None and len(pos) == 0:
        raise UserError("no sample has a positive margin at w + s, so no default margin exists; pass --margin")
    eps = float(torch.quantile(pos, quantile)) if margin is None else float(margin)
    G_eps = float((m <= eps).double().mean())
    D = len(y) if D is None else int(D)
    L_n = float(X.flatten(1).double().norm(dim=1).max())
    d = max(r["width"] for r in norms) if width is None else int(width)
    c = complexity(V, L, L_n, d, D, eps, p)
    return {"layers": norms, "n_layers": L, "V_L": V, "V_L_reshaped": V_reshaped, "L_n": L_n, "width": d, "D": D,
            "p": p, "margin": eps,
            "margin_source": "given" if margin is not None else f"quantile {quantile} of the positive margins",
            "margin_loss": G_eps, "error_at_w_s": float((m <= 0).double().mean()),
            "bound": G_eps + c["term"], "bound_explicit": G_eps + c["term_explicit"], **c,
            "perturbed": s is not None, "perturbation_norm": 0.0 if s is None else float(s.norm()),
            "bias_free": not extra, "not_covered": extra,
            "margin_quantiles": {str(q): float(torch.quantile(m.double(), q)) for q in (0.01, 0.1, 0.5, 0.9)}}


# ---- command line ----------------------------------------------------------------------------------------
LEGEND = {   # what each printed number is
    "bound": "FedSMOO Thm 4.4 as displayed, its O(.) constant taken as 1: margin_loss + sqrt((L^2 L_n^2 d ln(dL) "
             "V_L + ln(LD/p)) / ((D-1) margin^2)); a bound on the 0-1 test error, so any value above 1 is vacuous",
    "bound_explicit": "the same with the constants of the theorem's proof (App. C.2); also vacuous above 1",
    "margin_loss": "G~_eps (Eq. 15): the fraction of samples whose margin at w + s is at most the margin eps",
    "margin": "eps (--margin, else the --quantile of the positive margins)",
    "V_L": "Eq. (16): prod_l ||W_l||_2^2 * sum_l ||W_l||_F^2 / ||W_l||_2^2 over the Linear/Conv weights",
    "bias_free": "whether every parameter is a Linear/Conv weight, as the theorem assumes",
    "D": "the number of samples",
}
HELP = "FedSMOO Thm 4.4's margin generalisation bound"
DESCRIBE = ("The margin-based generalisation bound of FedSMOO Theorem 4.4 (spectral and Frobenius norms of the "
            "layers, margin loss), at the checkpoint or at its SAM-perturbed point.")
COST = ("cost: one pass over the samples, plus power iterations for the spectral norm of each large "
        "convolution (--perturb sam adds one gradient).")


@dataclass
class Options(Common):
    margin: float | None = opt(None, "margin eps (default: the --quantile of the positive margins)")
    quantile: float | None = opt(None, "margin quantile used when --margin is not given (default: 0.1)", lo=0, hi=1)
    p: float = opt(0.05, "confidence 1 - p")
    perturb: str = opt("auto", "s: FedSMOO's global s from the checkpoint (state), a one-step SAM perturbation "
                       "rho g/||g|| on the data (sam), none; auto = state when the checkpoint has s, else none",
                       choices=("auto", "none", "state", "sam"))
    rho: float | None = opt(None, "radius of --perturb sam (default: 0.05, SAM's radius, the same for every "
                            "algorithm)")
    width: int | None = opt(None, "d (default: the largest layer operator dimension)", lo=1)


def compute(b, opts: Options) -> dict:
    """FedSMOO Theorem 4.4's bound at the checkpoint's model w (+ s, the chosen perturbation).

    Args:
        b: the rebuilt checkpoint (``common.rebuild``); FedSMOO's ``s`` is read from its algo_state.
        opts: ``margin`` or ``quantile`` (eps), ``p`` (confidence 1 - p), ``perturb`` (auto | none | state |
            sam), ``rho`` (radius of sam), ``width`` (d), ``seed`` (the spectral norms' power iterations).
    Returns:
        ``margin_bound``'s dict plus ``perturbation``, ``rho``/``rho_source`` (sam) and ``summary``.

    The bound's norm term V_L (FedSMOO Eq. 16) against the exact answer: two layers with ||W||_2 = 2, 1 and
    ||W||_F = 2, 3: (4 * 1) * (4/4 + 9/1):

    >>> V_L([2.0, 1.0], [2.0, 3.0])
    40.0
    """
    from .common import refuse
    if opts.margin is not None:
        refuse(opts, ["quantile"], "with --margin (the quantile only chooses a default margin)")
    if opts.perturb != "sam":
        refuse(opts, ["rho"], f"with --perturb {opts.perturb} (it is the radius of --perturb sam)")
    quantile = 0.1 if opts.quantile is None else opts.quantile
    s, how, rho = None, opts.perturb, None
    has = "s" in b.ckpt.get("algo_state", {})
    if how == "auto":
        how = "state" if has else "none"
    if how == "state":
        if not has:
            raise UserError(f"--perturb state needs FedSMOO's global perturbation s, which a {b.config['algo']} "
                            "checkpoint does not hold; use --perturb sam or none")
        s = b.ckpt["algo_state"]["s"].to(b.theta)
    elif how == "sam":
        from .sharpness import DEFAULT_RHO, global_sharpness
        rho = DEFAULT_RHO if opts.rho is None else opts.rho
        s = global_sharpness(b.f, b.theta, b.X, b.y, rho, return_delta=True)["delta"]
    r = margin_bound(b.model, b.space, b.theta, b.X, b.y, margin=opts.margin, p=opts.p, s=s, width=opts.width,
                     quantile=quantile, seed=opts.seed, f=b.f)
    r["perturbation"] = how
    if rho is not None:
        r["rho"], r["rho_source"] = rho, "default" if opts.rho is None else "--rho"
    r["summary"] = {k: r[k] for k in ("bound", "bound_explicit", "margin_loss", "margin", "V_L", "bias_free", "D")}
    from .drift import legend
    r["legend"] = legend(r["summary"], LEGEND)
    if min(r["bound"], r["bound_explicit"]) > 1:
        r["legend"]["note"] = "both bounds exceed 1, so they say nothing about this model's error: compare orderings"
    r["_title"] = b.title(f"FedSMOO Thm 4.4 margin bound (perturbation {how}, p = {opts.p:g})")
    return r


def plot(result: dict, path) -> None:
    """``draw`` of ``compute``'s result, saved at ``path``."""
    from ..plots import save
    save(draw(result, result.get("_title")), path)


def draw(r: dict, title: str | None = None):
    import numpy as np

    from ..plots import figure, title as set_title
    names = [l["name"] for l in r["layers"]]
    fig, ax = figure(ncols=2, w=5.0, h=max(3.2, 0.28 * len(names) + 1.4))
    y = np.arange(len(names))
    ax[0, 0].barh(y - 0.2, [l["spectral"] for l in r["layers"]], height=0.4, label="||W||_2 (operator)")
    ax[0, 0].barh(y + 0.2, [l["spectral_reshaped"] for l in r["layers"]], height=0.4, label="||W||_2 (reshaped)")
    ax[0, 0].set_yticks(y, names)
    ax[0, 0].invert_yaxis()
    ax[0, 0].set(xlabel="spectral norm", title=f"V_L = {r['V_L']:.3g}")
    ax[0, 0].legend(fontsize="small")
    qs = r["margin_quantiles"]
    ax[0, 1].plot([float(q) for q in qs], list(qs.values()), marker="o")
    ax[0, 1].axhline(r["margin"], color="C3", ls="--", label=f"eps = {r['margin']:.3g}")
    ax[0, 1].set(xlabel="quantile", ylabel="margin at w + s",
                 title=f"G~_eps = {r['margin_loss']:.3g}, bound = {r['bound']:.3g}")
    ax[0, 1].legend(fontsize="small")
    fig.tight_layout()
    set_title(fig, title)
    return fig

