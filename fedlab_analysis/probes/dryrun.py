"""``--dry-run``: a probe's memory plan from its samples and model size, before any product is computed.

The model and data are built (as the probe would build them) but no estimator runs. The plan adds up:
  * the data on the probe's device: samples x the input size x the dtype's bytes;
  * the parameters and the vectors the estimator keeps: Lanczos keeps every Krylov vector (hessian: up to
    --max-iter, default max(100, 10 top-k); density: --steps), trace keeps about 2/3 of --products (Hutch++'s
    sketch) or a few (Hutchinson), the others a handful of P-vectors;
  * the autograd graph of one memory chunk (--batch-size samples): the bytes autograd saves for the gradient with
    its graph (what a Hessian-vector product differentiates again), measured on a few samples and scaled by the
    chunk; with the curvature probes' graph kept between products (--keep-graph), the graphs of all chunks.
Autograd's own temporaries during a backward are not counted, so the peak can exceed the plan by a small factor.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

GIB = 2 ** 30
PLANNED = ("hessian", "trace", "density", "landscape", "sharpness", "margin")   # the probes that evaluate on data
MEASURE = 8            # samples the graph is measured on (a whole BatchNorm group where one is larger)


def graph_bytes(bundle, n: int, loss=F.cross_entropy) -> int:
    """Bytes autograd saves for grad F with create_graph=True on the first ``n`` samples."""
    saved = [0]

    def pack(t):
        saved[0] += t.numel() * t.element_size()
        return t
    theta = bundle.theta.detach().clone().requires_grad_(True)
    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        (g,) = torch.autograd.grad(loss(bundle.f(theta, bundle.X[:n]), bundle.y[:n]), theta, create_graph=True)
    del g
    return saved[0]


def graph_model(bundle, loss=F.cross_entropy, n: int = MEASURE) -> tuple[float, float]:
    """(fixed bytes, bytes per sample) of the gradient graph, from two measurements (n and 2n samples, whole
    BatchNorm groups): the fixed part is what autograd saves once per chunk whatever its size (weights)."""
    g = max(1, getattr(bundle.f, "group", 1))
    n1 = max(g, n // 2 // g * g)
    n2 = min(len(bundle.y), 2 * n1)
    b1 = graph_bytes(bundle, n1, loss)
    if n2 <= n1:
        return 0.0, b1 / n1
    b2 = graph_bytes(bundle, n2, loss)
    per = max(0.0, (b2 - b1) / (n2 - n1))
    return max(0.0, b1 - per * n1), per


def graph_bytes_per_sample(bundle, loss=F.cross_entropy, n: int = MEASURE) -> float:
    """The per-sample slope of :func:`graph_model` (``n``: the smaller of its two measurements times 2)."""
    return graph_model(bundle, loss, n)[1]


def vectors(name: str, opts, P: int) -> tuple[int, str]:
    """(P-vectors the estimator keeps, what they are)."""
    if name == "hessian":
        k = getattr(opts, "top_k", 1) or 1
        steps = min(P, getattr(opts, "max_iter", None) or max(100, 10 * k))
        return steps + 3, f"Lanczos basis: up to {steps} Krylov vectors (--max-iter) + 3"
    if name == "trace":
        m = getattr(opts, "products", 100)
        keep = (2 * m) // 3 + 2 if getattr(opts, "method", "hutch++") == "hutch++" else 3
        return keep, f"Hutch++ sketch of {m} products" if keep > 3 else "Hutchinson: 3 vectors"
    if name == "density":
        steps = getattr(opts, "steps", 80)
        return steps + 3, f"Lanczos basis of one start vector: {steps} steps + 3"
    if name == "landscape":
        return 4, "centre, two directions, one grid point"
    return 4, "a few P-vectors"


def plan(name: str, bundle, opts) -> dict:
    """The memory plan (bytes and GiB) of probe ``name`` with ``opts`` on ``bundle`` (module docstring)."""
    from .hvp import _free_bytes
    el = bundle.theta.element_size()
    N, P = len(bundle.y), bundle.space.P
    data = bundle.X.numel() * bundle.X.element_size() + bundle.y.numel() * bundle.y.element_size()
    nvec, what = vectors(name, opts, P)
    fixed, per_sample = graph_model(bundle, loss=_loss(bundle))
    chunk = min(N, getattr(opts, "batch_size", None) or (1000 if name in ("hessian", "trace", "density") else 4096))
    n_chunks = -(-N // chunk)
    free = _free_bytes(bundle.theta.device)
    every = fixed * n_chunks + per_sample * N            # the graphs of all chunks, as --keep-graph holds them
    mode = getattr(opts, "keep_graph", "auto") if name in ("hessian", "trace", "density") else "off"
    keep = mode == "on" or (mode == "auto" and every <= free / 4)     # HessianOperator's own rule for 'auto'
    graphs = every if keep else fixed + per_sample * chunk
    parts = {"data": data, "parameters": P * el, "vectors": nvec * P * el, "graph": graphs}
    total = sum(parts.values())
    if keep:
        how = f"all {n_chunks} chunks of {chunk} kept between products; --keep-graph off holds one"
    else:
        how = f"one chunk of {chunk} samples at a time"
        if mode == "auto":
            how += f"; keeping all {n_chunks} ({every / GIB:.1f} GiB) would exceed a quarter of the free memory"
    text = [f"dry run: {name} on {bundle.config['model']} ({P:,} parameters), {N:,} samples "
            f"{list(bundle.X.shape[1:])}, {str(bundle.theta.dtype).replace('torch.', '')} on {bundle.theta.device}",
            f"  data        {data / GIB:9.3f} GiB  (samples x input x {bundle.X.element_size()} bytes)",
            f"  parameters  {P * el / GIB:9.3f} GiB",
            f"  vectors     {nvec * P * el / GIB:9.3f} GiB  ({what})",
            f"  graph       {graphs / GIB:9.3f} GiB  ({per_sample / 2**20:.2f} MiB a sample, "
            f"{fixed / 2**20:.0f} MiB a chunk: {how})",
            f"  total       {total / GIB:9.3f} GiB  of {free / GIB:.1f} GiB free on the device"
            + ("" if total <= free else "  -- does not fit: use --samples, --batch-size or --keep-graph off")]
    return {"probe": name, "dry_run": True, "n_samples": N, "n_params": P, "bytes": {**parts, "total": total},
            "gib": {k: v / GIB for k, v in {**parts, "total": total}.items()}, "free_bytes": free,
            "graph_bytes_per_sample": per_sample, "graph_bytes_per_chunk": fixed, "graphs_kept": keep,
            "fits": total <= free, "summary_text": "\n".join(text)}


def _loss(bundle):
    from .hvp import LOSSES
    loss = getattr(bundle, "loss", "ce")
    return LOSSES[loss] if isinstance(loss, str) else loss
