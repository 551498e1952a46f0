"""Curvature probe: Hessian top eigenvalues, trace and spectral density of a checkpoint's loss.

The questions FedSMOO (Sun et al. 2023) Table 2 and FedLESAM (Fan et al. 2024) Fig. 2 ask: the top Hessian
eigenvalue lambda_max and the trace tr(H) of the global model's training loss, and per layer (sharpness per
layer, as PyHessian's per-block analysis, Yao et al. 2020 Sec. 3). Function first:

    op = HessianOperator(f, theta, (X, y))                 # hvp.py: H = (1/N) sum_b n_b H_b
    top_eigenvalues(op, k=5)                               # lanczos.py: Lanczos, full re-orth.
    trace(op, 100, method="hutch++", deflate=5)            # Hutchinson / Hutch++ with a stderr
    density(op, n_steps=80, n_vectors=4)                   # stochastic Lanczos quadrature
    per_layer(f, theta, (X, y), space)                     # top eigenvalue and trace per layer

and the probes ``python -m fedlab_analysis.probe hessian|trace|density CKPT [...]`` (hessian.py, trace.py,
density.py: each its options, then ``run`` here).
``--backend pyhessian|curvlinops`` asks the same question through those libraries (optional
extras) for cross-checks. Readings chosen where the papers do not say which Hessian they measure:
cross-entropy training loss without weight decay (``--wd`` adds it), BatchNorm in train mode (the objective
the clients optimised; ``--bn-mode``, see probes/common.py), the full chosen data set (``--minibatch N`` for
PyHessian's one-batch Hessian).
"""
from __future__ import annotations

import contextlib
import copy
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..errors import UserError
from ..params import ParamSpace
from .hvp import HessianOperator, MatrixOperator, Operator
from .lanczos import density, smooth_density, top_eigenvalues, trace
from .options import Common, opt, resolve

if TYPE_CHECKING:                  # figures only when drawn: matplotlib is not imported with the probes
    from matplotlib.figure import Figure

__all__ = ["HessianOperator", "MatrixOperator", "Operator", "top_eigenvalues", "trace", "density",
           "per_layer", "layer_specs", "plot_eigenvalues", "plot_density", "plot_per_layer", "Curvature", "run",
           "plot"]


# ---- per layer ------------------------------------------------------------------------------------
def layer_specs(space: ParamSpace, by: str = "block") -> dict[str, str]:
    """``{label: ParamSpace spec}`` for each layer: ``by='block'`` (a weight with its bias/norm
    scale, FedALS blocks), ``'param'`` (each named tensor) or ``'group'`` (phi/h)."""
    if by == "param":
        return {name: name for name in space.names}
    if by == "block":
        first = {}
        for l in space.layers:
            first.setdefault(l.block, l.name.rsplit(".", 1)[0] if "." in l.name else l.name)
        return {label: f"block:{b}" for b, label in first.items()}
    if by == "group":
        return {g: f"group:{g}" for g in dict.fromkeys(l.group for l in space.layers)}
    raise UserError(f"unknown per-layer split {by!r}; use 'block', 'param' or 'group'")


def per_layer(f, theta, data, space: ParamSpace, *, by: str = "block", k: int = 1, which: str = "LA",
              method: str = "lanczos", tol: float = 1e-3, max_iter: int | None = None, trace_products: int = 60,
              trace_method: str = "hutch++", seed: int = 0, progress=None, **op_kwargs) -> dict[str, dict]:
    """The ``which`` end eigenvalues (by ``method``) and the trace of each diagonal block H[layer, layer].

    ``op_kwargs`` go to ``HessianOperator`` (batch_size, loss, weight_decay, backend). A layer with
    at most ``trace_products`` entries gets its exact trace. Returns ``{label: {spec, dim, which,
    eigenvalue (the most wanted), top_eigenvalue (which='LA' only), eigenvalues, residuals, trace,
    trace_stderr, n_products, seconds}}``. ``progress``: a bar counting the products."""
    rows = {}
    for label, spec in layer_specs(space, by).items():
        op = HessianOperator(f, theta, data, params=spec, space=space, **op_kwargs)
        op.progress = progress
        if method == "eigsh" and k >= op.dim:
            raise UserError(f"--method eigsh needs --top-k below every layer's size; layer {label} has {op.dim} "
                            "parameters: use --method lanczos")
        top = top_eigenvalues(op, k=min(k, op.dim), which=which, tol=tol, max_iter=max_iter, seed=seed,
                              method=method)
        tr = trace(op, min(trace_products, op.dim), method=trace_method, seed=seed)
        rows[label] = {"spec": spec, "dim": op.dim, "which": which, "method": method,
                       "eigenvalue": top["eigenvalues"][0], "eigenvalues": top["eigenvalues"],
                       "zero_tol": top["zero_tol"], "zero_within_round_off": top["zero_within_round_off"],
                       "residuals": top["residuals"], "converged": top["converged"], "trace": tr["trace"],
                       "trace_stderr": tr["stderr"], "n_products": op.n_products, "seconds": op.seconds}
        if which == "LA":
            rows[label]["top_eigenvalue"] = top["eigenvalues"][0]
    return rows


# ---- scale-invariant curvature ------------------------------------------------------------------------
def normalised_top_eigenvalue(op, theta: torch.Tensor, eta: float = 0.01, **kw) -> dict:
    """lambda_max(T H T), T = diag(|w| + eta) on the operator's coordinates: the top eigenvalue of the Hessian in
    ASAM's scale-invariant coordinates (Kwon et al. 2021, Sec. 3, normalisation operator T_w with eta), which a
    layer-wise rescaling of a ReLU network's weights leaves (for eta -> 0) unchanged, unlike the raw lambda_max.
    To second order the adaptive sharpness at radius rho is rho^2 / 2 times it at a minimum. ``kw`` go to
    top_eigenvalues."""
    from .hvp import ScaledOperator
    if not eta >= 0:
        raise UserError(f"--eta must be >= 0 (got {eta})")
    t = op.restrict(theta.detach()).abs() + eta
    r = top_eigenvalues(ScaledOperator(op, t), 1, "LA", **kw)
    return {"eigenvalue": r["eigenvalues"][0], "residual": r["residuals"][0], "eta": float(eta),
            "converged": r["converged"], "n_products": r["n_products"],
            "definition": "lambda_max(T H T), T = diag(|w| + eta) (ASAM, Kwon et al. 2021, Sec. 3)"}


def _reported(vals, flags) -> list:
    """Eigenvalues as reported: 0.0 where zero within round-off."""
    return [0.0 if z else v for v, z in zip(vals, flags)]


# ---- figures (plots.py style; pass ax to draw into an existing figure) ---------------------------------
ORDER = {"LA": "1 = largest", "SA": "1 = most negative", "LM": "1 = largest magnitude"}


def _axes(ax, n=1, width=5.0):
    """(figure, [axes]) from the given axes (one or a sequence) or a new figure in plots.py's style."""
    if ax is not None:
        axes = list(np.atleast_1d(ax))
        return axes[0].figure, axes
    from ..plots import figure
    fig, axes = figure(ncols=n, w=width, h=3.6)
    return fig, list(axes[0])


def plot_eigenvalues(result: dict, ax=None, title: str | None = None) -> Figure:
    """The extreme eigenvalues with their residuals (an eigenvalue of H lies within the residual)."""
    from ..plots import integer_ticks, title as set_title
    fig, (ax,) = _axes(ax)
    vals = np.array(result["eigenvalues"])
    ax.errorbar(np.arange(1, len(vals) + 1), vals, yerr=result.get("residuals"), fmt="o", capsize=3)
    if result.get("zero_tol"):
        tol = result["zero_tol"]
        ax.axhspan(-tol, tol, color="0.8", alpha=0.6, lw=0, label=f"zero within round-off (|lambda| <= {tol:.1e})")
        ax.legend(fontsize="small")
    integer_ticks(ax.xaxis)
    ax.set_xlabel(f"eigenvalue rank ({ORDER.get(result.get('which', 'LA'))})")
    ax.set_ylabel("Hessian eigenvalue")
    set_title(fig, title or f"Hessian eigenvalues ({result.get('method', '')}, "
                            f"{result.get('n_products', '?')} Hessian-vector products)")
    return fig


def plot_trace(result: dict, ax=None, title: str | None = None) -> Figure:
    """The trace estimate as the probes accumulate: exact part + running mean of the probe values, with its
    standard error, and the final estimate."""
    from ..plots import integer_ticks, title as set_title
    fig, (ax,) = _axes(ax)
    vals = np.asarray(result.get("probe_values") or [], dtype=float)
    exact = float(result.get("exact_part", 0.0))
    if len(vals) >= 2:
        n = np.arange(1, len(vals) + 1)
        mean = exact + np.cumsum(vals) / n
        sd = np.array([vals[:k].std(ddof=1) / np.sqrt(k) if k > 1 else np.nan for k in n])
        ax.plot(n, mean, label="running estimate")
        ax.fill_between(n, mean - sd, mean + sd, alpha=0.25, label="+- standard error")
        ax.set_xlabel("random probes used")
        integer_ticks(ax.xaxis)
    else:
        ax.errorbar([0], [result["trace"]], yerr=[result.get("stderr") or 0.0], fmt="o")
        ax.set_xticks([])
    exact_note = f"; {exact:.4g} exact on {result['exact_dim']} directions" if result.get("exact_dim") else ""
    ax.axhline(result["trace"], color="k", lw=0.8, ls="--",
               label=f"tr(H) = {result['trace']:.4g} +- {result.get('stderr') or 0:.2g}{exact_note}")
    ax.set_ylabel("trace estimate")
    ax.legend(fontsize="small")
    set_title(fig, title or f"Hessian trace ({result.get('method', '')}, {result.get('n_products', '?')} "
                            "Hessian-vector products)")
    return fig


def plot_density(result: dict, ax=None, title: str | None = None) -> Figure:
    """The SLQ spectral density on a log scale; ``result`` may also be ``{label: density result}``: one panel
    per layer then (facets), each stating its own smoothing width sigma."""
    from ..plots import figure, title as set_title
    curves = {"": result} if "density" in result else result
    if ax is None and len(curves) > 1:
        ncols = min(4, len(curves))
        fig, axes = figure(ncols=ncols, nrows=-(-len(curves) // ncols), w=3.4, h=2.6)
        axes = list(axes.flat)
        for a in axes[len(curves):]:
            a.set_visible(False)
    else:
        fig, axes = _axes(ax, width=6.0)
    one = next(iter(curves.values()))
    for i, (label, r) in enumerate(curves.items()):
        a = axes[min(i, len(axes) - 1)]
        d = np.maximum(np.array(r["density"]), 1e-12)
        a.semilogy(r["grid"], d)
        a.set_ylim(bottom=max(1e-8, float(d.max()) * 1e-6))
        sigma = f"sigma = {r['sigma']:.2g}" if r.get("sigma") is not None else ""
        if label:
            a.set_title(f"{label} ({sigma})" if sigma else label, fontsize="small")
        a.set_xlabel("eigenvalue")
        a.set_ylabel("density (log)")
    sigma = f", sigma = {one['sigma']:.2g}" if one.get("sigma") is not None and len(curves) == 1 else ""
    set_title(fig, title or f"Hessian spectral density (SLQ: {one['n_steps']} steps x {one['n_vectors']} "
                            f"vectors{sigma})")
    fig.tight_layout()
    return fig


def plot_per_layer(result: dict, ax=None, title: str | None = None) -> Figure:
    """Horizontal bars per layer, first layer on top: the extreme eigenvalue (left) and the trace with its
    standard error (right). ``ax`` may be a pair of axes; rows without an eigenvalue draw the trace only."""
    from ..plots import layer_bars, layer_figure, title as set_title
    labels = list(result)
    has_top = all("eigenvalue" in r or "top_eigenvalue" in r for r in result.values())
    if ax is None:
        fig, axes = layer_figure(len(labels), 2 if has_top else 1)
        axes = list(axes[0])
    else:
        fig, axes = _axes(ax)
    rows = list(result.values())
    if has_top:
        which = rows[0].get("which", "LA")
        name = {"LA": "largest eigenvalue", "SA": "most negative eigenvalue", "LM": "largest |eigenvalue|"}[which]
        vals = [r.get("eigenvalue", r.get("top_eigenvalue")) for r in rows]
        zero = [bool((r.get("zero_within_round_off") or [False])[0]) for r in rows]
        layer_bars(axes[0], labels, _reported(vals, zero), xlabel=name)
        tols = [r.get("zero_tol") or 0.0 for r in rows]
        if any(tols):
            for i, (t, z) in enumerate(zip(tols, zero)):      # each layer's own round-off band, first layer on top
                axes[0].fill_betweenx([i - 0.45, i + 0.45], -t, t, color="0.75", lw=0, zorder=0)
                if z:
                    axes[0].annotate("0 (round-off)", (0, i), xytext=(4, 0), textcoords="offset points",
                                     va="center", fontsize="small", color="0.3")
            axes[0].set_title("grey: zero within round-off", fontsize="small")
    layer_bars(axes[-1], labels, [r["trace"] for r in rows],
               [r.get("trace_stderr", r.get("stderr")) or 0.0 for r in rows], xlabel="trace (+- stderr)",
               color="C1")
    set_title(fig, title or "Hessian per layer (diagonal blocks)")
    fig.tight_layout()
    return fig


# ---- optional backends: the same question through PyHessian 0.1 / curvlinops ------------------------
def _module_at(bundle, spec):
    """A copy of the model holding theta; parameters outside ``spec`` do not require grad."""
    model = copy.deepcopy(bundle.model).to(bundle.theta.dtype).eval()
    model.zero_grad(set_to_none=True)   # PyHessian adds its gradient to whatever .grad holds
    named = bundle.space.unflatten(bundle.theta)
    keep = {l.name for l in bundle.space.select(spec)} if spec else set(named)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(named[name])
            p.requires_grad_(name in keep)
    return model, [p for n, p in model.named_parameters() if n in keep]


@contextlib.contextmanager
def _seeded(seed):
    """These libraries draw from torch's global RNG: seed it here and restore it afterwards."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def _pyhessian(args, bundle, batches, spec, question):
    import pyhessian
    mod = sys.modules["pyhessian.hessian"]
    if bundle.theta.dtype != torch.float32:
        raise UserError("PyHessian 0.1 draws its vectors in float32 only; run it with --dtype float32")
    model, _ = _module_at(bundle, spec)
    count = [0]
    hvp = mod.hessian_vector_product
    mod.hessian_vector_product = _counting(hvp, count)
    try:
        with _seeded(args.seed):
            one = len(batches) == 1
            h = pyhessian.hessian(model, torch.nn.CrossEntropyLoss(), data=batches[0] if one else None,
                                  dataloader=None if one else batches, cuda=bundle.theta.is_cuda)
            h.dataloader_hv_product = _counting(h.dataloader_hv_product, count)
            if question == "hessian":
                vals, _ = h.eigenvalues(maxIter=args.max_iter or 100, tol=args.tol, top_n=args.top_k)
                out = {"eigenvalues": [float(v) for v in vals]}
            elif question == "trace":
                s = np.array(h.trace(maxIter=args.products, tol=args.tol))
                out = {"trace": float(s.mean()), "stderr": float(s.std(ddof=1) / np.sqrt(len(s))) if len(s) > 1
                       else None, "n_probes": len(s)}
                if len(s) < args.products and s[:-1].mean() < 0:       # its rule divides by the signed mean
                    out["notes"] = [f"PyHessian stopped after {len(s)} of {args.products} probes: its test "
                                    "|mean_k - mean_(k-1)| / (mean_(k-1) + 1e-6) < tol always holds once the "
                                    "running mean is negative; use --backend ours for the estimate"]
            else:
                try:
                    nodes, weights = h.density(iter=args.steps, n_v=args.vectors)
                except (AttributeError, RuntimeError) as e:
                    raise UserError(f"PyHessian 0.1's density() fails on this PyTorch ({e}); "
                                    "use --backend ours") from None
                nodes, weights = np.array(nodes), np.array(weights)
                grid, dens, sigma = smooth_density(nodes, weights, args.sigma)
                out = {"nodes": nodes.tolist(), "weights": weights.tolist(), "grid": grid, "density": dens,
                       "sigma": sigma, "n_steps": nodes.shape[1], "n_vectors": args.vectors}
    finally:
        mod.hessian_vector_product = hvp
    return {**out, "n_products": count[0]}


def _curvlinops(args, bundle, batches, spec, question):
    import curvlinops
    from scipy.sparse.linalg import eigsh

    model, params = _module_at(bundle, spec)
    H = curvlinops.HessianLinearOperator(model, torch.nn.CrossEntropyLoss(), params, batches,
                                         check_deterministic=False)
    count = [0]
    H._matmat = _counting(H._matmat, count, lambda M: M[0].shape[-1])   # M: list of [*shape, columns]
    dim = sum(p.numel() for p in params)
    with _seeded(args.seed):
        if question == "hessian":
            if args.top_k >= dim:
                raise UserError(f"eigsh needs --top-k < {dim}; use --backend ours")
            v0 = torch.randn(dim, generator=torch.Generator().manual_seed(args.seed), dtype=torch.float64)
            vals = eigsh(H.to_scipy(), k=args.top_k, which=args.which, tol=args.tol, v0=v0.numpy())[0]
            out = {"eigenvalues": vals[np.argsort({"LA": -vals, "SA": vals, "LM": -np.abs(vals)}[args.which])].tolist()}
        elif question == "trace" and args.method == "hutch++":
            out = {"trace": float(curvlinops.hutchpp_trace(H, args.products - args.products % 3)), "stderr": None}
        elif question == "trace":
            s = np.array([float(curvlinops.hutchinson_trace(H, 1)) for _ in range(args.products)])
            out = {"trace": float(s.mean()), "stderr": float(s.std(ddof=1) / np.sqrt(len(s)))}
        else:
            grid, dens = curvlinops.lanczos_approximate_spectrum(H, ncv=args.steps, num_repeats=args.vectors)
            out = {"grid": grid.tolist(), "density": dens.tolist(), "n_steps": args.steps,
                   "n_vectors": args.vectors, "sigma": None}
    return {**out, "n_products": count[0]}


def _counting(fn, count: list, n=lambda *a: 1):
    """``fn`` that adds ``n(*args)`` to ``count[0]`` per call (to count another library's products)."""
    def counted(*a, **kw):
        count[0] += n(*a)
        return fn(*a, **kw)
    return counted


# ---- options shared by hessian, trace and density (their modules add their own) ---------------------------
# Options whose action depends on others default to None here; _check fills the defaults and refuses an option
# that cannot act (one line, exit 2).
@dataclass
class Curvature(Common):
    layer: str | None = opt(None, "restrict H to these parameters: a name, a glob (layer1.*), group:phi, block:3, "
                            "re:REGEX", metavar="SPEC")
    per_layer: bool = opt(False, "one result per layer (see --by)")
    by: str | None = opt(None, "what --per-layer calls a layer (default: block = a weight with its bias)",
                         choices=["block", "param", "group"])
    batch_size: int | None = opt(None, "HVP chunk size over the data, memory only (default: 1000)", lo=1)
    minibatch: int | None = opt(None, "the Hessian of ONE seeded mini-batch of N samples instead of the whole data",
                                metavar="N")
    wd: float = opt(0.0, "add wd * I (the weight-decay term)")
    hvp: str = opt("autograd", "double backward (default; works with GroupNorm) or torch.func jvp(grad)",
                   choices=["autograd", "func"])
    keep_graph: str = opt("auto", "hold each batch's gradient graph between products (faster, PyHessian's memory "
                          "cost); auto: when they fit in a quarter of the free memory", choices=["auto", "on", "off"])
    backend: str = opt("ours", "run the question through an optional library instead (cross-check)",
                       choices=["ours", "pyhessian", "curvlinops"])


def _data(args, bundle):
    X, y = bundle.X, bundle.y
    if args.minibatch is None:
        return (X, y), {"n": len(y), "batch_size": args.batch_size, "minibatch": None}
    if not 1 <= args.minibatch <= len(y):
        raise UserError(f"--minibatch {args.minibatch} must be between 1 and the {len(y)} samples chosen")
    idx = torch.randperm(len(y), generator=torch.Generator().manual_seed(args.seed))[:args.minibatch]
    return (X[idx.to(X.device)], y[idx.to(y.device)]), {"n": args.minibatch, "batch_size": None,
                                                        "minibatch": args.minibatch}


def _ask(question, args, bundle, data, spec) -> dict:
    """One question (hessian/trace/density) on the parameters ``spec``, by the chosen backend."""
    if args.backend != "ours":
        X, y = data
        bs = args.batch_size if args.minibatch is None else len(y)
        batches = list(zip(X.split(bs), y.split(bs)))
        if spec:
            HessianOperator(bundle.f, bundle.theta, data, params=spec, space=bundle.space)  # validates
        run = {"pyhessian": _pyhessian, "curvlinops": _curvlinops}[args.backend]
        try:
            return run(args, bundle, batches, spec, question)
        except NotImplementedError as e:   # curvlinops: no forward-mode rule (GroupNorm's backward)
            raise UserError(f"--backend {args.backend} cannot differentiate this model ({str(e).splitlines()[0]}); "
                            "use --backend ours") from None
        except ImportError:
            raise UserError(f"--backend {args.backend} is not installed; pip install --no-deps "
                            f"{'pyhessian==0.1' if args.backend == 'pyhessian' else 'curvlinops-for-pytorch'}"
                            ) from None
    op = HessianOperator(bundle.f, bundle.theta, data, batch_size=args.batch_size if args.minibatch is None
                         else None, weight_decay=args.wd, backend=args.hvp, params=spec, space=bundle.space,
                         keep_graph=_KEEP[args.keep_graph], loss=getattr(bundle, "loss", "ce"))
    from .common import bar
    if question == "hessian":
        total = min(op.dim, max(args.max_iter or max(100, 10 * args.top_k), args.top_k)) \
            if args.method == "lanczos" else None
    else:
        total = args.products if question == "trace" else args.steps * args.vectors
    with bar(total, f"{question}: Hessian-vector product", "HVP") as op.progress:
        if question == "hessian":
            r = top_eigenvalues(op, args.top_k, which=args.which, tol=args.tol, max_iter=args.max_iter,
                                seed=args.seed, method=args.method)
            r.pop("eigenvectors")
            if getattr(args, "normalised", "off") == "on":
                r["normalised"] = normalised_top_eigenvalue(op, bundle.theta, args.eta, tol=args.tol,
                                                            max_iter=args.max_iter, seed=args.seed,
                                                            method=args.method)
        elif question == "trace":
            r = trace(op, args.products, method=args.method, deflate=args.deflate, seed=args.seed, tol=args.tol)
        else:
            r = density(op, args.steps, args.vectors, args.sigma, seed=args.seed)
    op.progress = None
    return {**r, "seconds_per_product": op.seconds_per_product, "parameters": op.describe()}


_KEEP = {"auto": "auto", "on": True, "off": False}


# flags another backend cannot act on, per question (beyond those only ours has)
BACKEND_UNUSED = {"pyhessian": {"hessian": ("which",), "trace": (), "density": ()},
                  "curvlinops": {"hessian": ("max_iter",), "trace": ("tol",), "density": ("sigma",)}}


def _check(question, args, bundle):
    """Refuse every option that cannot act in this combination (one line); returns ``args`` with the defaults
    filled (a copy; the options given are never changed)."""
    from .common import default, has_batchnorm, refuse
    ours_only = {"--wd": args.wd, "--hvp func": args.hvp != "autograd", "--keep-graph": args.keep_graph == "on",
                 "--per-layer": args.per_layer, "--deflate": getattr(args, "deflate", 0),
                 "--method power/eigsh": getattr(args, "method", None) in ("power", "eigsh")}
    if args.backend != "ours":
        if any(ours_only.values()):
            raise UserError(f"--backend {args.backend} does not take "
                            f"{', '.join(k for k, v in ours_only.items() if v)}; drop it or use --backend ours")
        if question == "hessian" and args.backend == "pyhessian" and args.which != "LA":
            raise UserError("--which: PyHessian finds the largest eigenvalues only; use --backend ours")
        refuse(args, [n for n in BACKEND_UNUSED[args.backend][question] if n != "which"],
               f"with --backend {args.backend}")
        if has_batchnorm(bundle.model) and bundle.bn_mode == "train":
            raise UserError(f"--backend {args.backend} evaluates BatchNorm with running statistics only; use "
                            "--bn-mode eval or recalibrate, or --backend ours")
    if args.layer and args.per_layer:
        raise UserError("give either --layer SPEC or --per-layer, not both")
    if args.keep_graph == "on" and args.hvp != "autograd":
        raise UserError("--keep-graph on holds autograd graphs; drop it or use --hvp autograd")
    if not args.per_layer:
        refuse(args, ["by"] + (["products"] if question == "hessian" else []), "without --per-layer")
    if args.minibatch is not None:
        refuse(args, ["batch_size"], "with --minibatch (the Hessian of one batch of N samples)")
    if question == "trace" and args.backend == "ours" and not args.deflate:
        refuse(args, ["tol"], "without --deflate (it is the tolerance of the deflation's Lanczos)")
    fill = {"by": default(args, "by", "block"), "batch_size": default(args, "batch_size", 1000)}
    if question == "hessian":
        fill["products"] = default(args, "products", 60)
        can = args.which == "LA" and not args.per_layer and args.backend == "ours"
        if args.normalised == "on" and not can:
            raise UserError("--normalised needs --which LA on the whole model (no --per-layer) with --backend ours")
        if args.normalised == "off" or not can:
            refuse(args, ["eta"], "without --normalised (it is the eta of T = diag(|w| + eta))")
        fill["normalised"] = default(args, "normalised", "on") if can else "off"
        fill["eta"] = default(args, "eta", 0.01)
    if question in ("hessian", "trace"):
        fill["tol"] = default(args, "tol", 1e-3)
    return resolve(args, **fill)


def run(question, args, bundle) -> dict:
    """The hessian, trace or density probe's result (``question``) with the options ``args`` (the module's
    ``Options``), the figure's title under ``_title`` and, for ``plot``, the question under ``_question``."""
    args = _check(question, args, bundle)
    data, data_info = _data(args, bundle)
    head = {"backend": args.backend, "seed": args.seed, "dtype": str(bundle.theta.dtype).replace("torch.", ""),
            "data_used": {"split": getattr(args, "data", None), "samples": getattr(args, "samples", None),
                          **data_info}}
    n = data_info["n"]
    if not args.per_layer:
        r = _ask(question, args, bundle, data, args.layer)
        summary = _summary(question, r)
        summary["n_samples"] = n
        where = f" of {args.layer}" if args.layer else ""
        if question == "density":
            sigma = f", sigma = {r['sigma']:.2g}" if r.get("sigma") is not None else ""
            what = f"Hessian spectral density{where} (SLQ {r['n_steps']} steps x {r['n_vectors']} vectors{sigma})"
            if r.get("trace_stderr") is not None:
                what += f"; tr(H) = {r['trace']:.4g} +- {r['trace_stderr']:.2g}"
        else:
            what = (f"Hessian {'eigenvalues' if question == 'hessian' else 'trace'}{where} "
                    f"({r.get('method', args.method)}, {r['n_products']} HVPs)")
        return {**head, **r, "summary": summary, "_title": bundle.title(what), "_question": question}
    if question == "hessian":
        from .common import bar
        with bar(None, "hessian per layer: Hessian-vector product", "HVP") as pb:
            rows = per_layer(bundle.f, bundle.theta, data, bundle.space, by=args.by, k=args.top_k, which=args.which,
                             method=args.method, tol=args.tol, max_iter=args.max_iter, trace_products=args.products,
                             seed=args.seed, progress=pb, batch_size=args.batch_size if args.minibatch is None
                             else None, weight_decay=args.wd, backend=args.hvp, keep_graph=_KEEP[args.keep_graph],
                             loss=getattr(bundle, "loss", "ce"))
    else:
        rows = {label: _ask(question, args, bundle, data, spec)
                for label, spec in layer_specs(bundle.space, args.by).items()}
    summary = {"layers": {label: _layer_summary(r) for label, r in rows.items()}, "n_samples": n}
    what = ("Hessian spectral density per layer (each panel's own smoothing width)" if question == "density" else
            f"Hessian trace per layer ({args.method}, {args.products} HVPs per layer)" if question == "trace" else
            f"Hessian per layer ({args.which} eigenvalue by {args.method}; trace from {args.products} HVPs per "
            "layer)")
    out = {**head, "by": args.by, "layers": rows, "summary": summary, "_title": bundle.title(what),
           "_question": question}
    if question == "hessian":
        out.update(which=args.which, method=args.method)
    return out


def plot(result: dict, path) -> None:
    """The figure of a hessian, trace or density result (per layer: one row or panel per layer), at ``path``."""
    from ..plots import save
    title = result.get("_title")
    if "layers" in result:
        fig = (plot_density if result["_question"] == "density" else plot_per_layer)(result["layers"], title=title)
    else:
        fig = {"hessian": plot_eigenvalues, "trace": plot_trace, "density": plot_density}[result["_question"]](
            result, title=title)
    save(fig, path)


def _summary(question, r) -> dict:
    """The printed numbers: every stochastic estimate with its standard error and sample count; eigenvalues zero
    within round-off reported as 0.0 (the raw values stay in the JSON's ``eigenvalues``)."""
    if question == "hessian":
        zero = r.get("zero_within_round_off") or [False] * len(r["eigenvalues"])
        s = {"eigenvalues": _reported(r["eigenvalues"], zero), "residuals": r.get("residuals")}
        if any(zero):
            s["zero_within_round_off"] = r["zero_within_round_off"]
            s["zero_tol"] = r["zero_tol"]
        if "normalised" in r:
            s["normalised_top_eigenvalue"] = r["normalised"]["eigenvalue"]
    elif question == "trace":
        s = {"trace": r["trace"], "stderr": r.get("stderr"), "n_probes": r.get("n_probes")}
    else:      # SLQ: the trace and tr(H^2) moments with their errors over the start vectors, or not at all
        s = {"n_vectors": r["n_vectors"]}
        if r.get("trace_stderr") is not None:
            s.update(trace=r["trace"], trace_stderr=r["trace_stderr"])
            m2 = (r.get("moments") or {}).get("trace_H2")
            if m2:
                s.update(trace_H2=m2["mean"], trace_H2_stderr=m2["stderr"])
        else:
            s["trace"] = "not printed: one start vector gives no standard error (use --vectors >= 2)"
    return {**s, "n_products": r.get("n_products"), "seconds": r.get("seconds")}


def _layer_summary(r) -> dict:
    s = {}
    if "eigenvalue" in r:
        z = bool((r.get("zero_within_round_off") or [False])[0])
        s["eigenvalue"] = 0.0 if z else r["eigenvalue"]
        if z:
            s["eigenvalue_note"] = f"zero within round-off (|{r['eigenvalue']:.2g}| <= {r['zero_tol']:.2g})"
    err = r.get("trace_stderr", r.get("stderr"))
    if "trace" in r and (err is not None or "n_vectors" not in r):    # SLQ's trace only with its error
        s["trace"] = r["trace"]
        s["trace_stderr"] = err
    return s
