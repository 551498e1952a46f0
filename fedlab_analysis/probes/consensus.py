"""Consensus distance, per layer, in every form the five papers use.

Every form is one weighted spread sum_i p_i ||c - x_i||^2 of client models x_i around a centre c, with
client weights p_i uniform (the papers) or proportional to the clients' data sizes:

    fedals_cd       FedALS Sec. 1 / Fig. 1: CD(t) = (1/K) sum_k ||theta_bar_t -
                    theta_{k,t}||^2, theta_bar_t the mean of the client models, at local iterations between
                    synchronisations. Per layer raw, per parameter (/ numel) and relative (/ ||theta_bar^l||^2):
                    raw CD grows with a layer's parameter count (compare per_param across layers of different size).
    fedinit_delta   FedInit Delta^{t+1} = (1/C) sum_{i in C} ||w_{i,K}^{last} - w^{t+1}||^2 over ALL clients, stale
                    ones with their latest local model (w^0 before their first round; FedInit Sec. 4).
    divergence      the released code's probe (FedInit Fig. 2, FedSMOO's text, FL-Simulator):
                    (1/|S|) sum_{i in S} ||w^t_{i,K} - w^{t+1}||^2 over the selected clients against the new global
                    model, dual-shifted for FedDyn/FedSMOO (the released code).
    fedsmoo_table2  FedSMOO Table 2's row label: (1/n) sum_{i in S} ||w_i^t - w^t||^2, against the round's start.
    fedsmoo_wbar    against w_bar^{t+1} = mean_S w_i^t, the un-shifted average (= fedals_cd of the final models).
    fedsmoo_proof   the proof's delta^t = (1/m) sum_{i in [m]} ||w_i - w_bar^{t+1}||^2, all m clients, stale ones
                    included (FedSMOO App. C's proof).

Functions take flat [n, P] client tables and a ParamSpace; ``make_hook`` watches training (FedALS's CD at local
iterations, the round forms after aggregation) and ``CLI['consensus']`` reads a checkpoint.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..errors import UserError
from ..params import ParamSpace
from .common import WEIGHTS, client_weights, require_clients  # noqa: F401  (client_weights re-exported)

BY = ("block", "param", "group")


# ---- weights and segments ---------------------------------------------------------------------------
def segment_labels(space: ParamSpace, by: str = "block") -> list[str]:
    """Names of the columns of ``space.segment_sum(..., by)``: a block is named after its weight's module."""
    if by == "param":
        return space.names
    if by == "block":
        first: dict[int, str] = {}
        for l in space.layers:
            first.setdefault(l.block, l.name.rsplit(".", 1)[0] if "." in l.name else l.name)
        return [first.get(b, f"block{b}") for b in range(space.n_blocks)]
    if by == "group":
        return sorted({l.group for l in space.layers})
    raise UserError(f"unknown layer split {by!r}; use one of {', '.join(BY)}")


# ---- the one primitive ------------------------------------------------------------------------------
def spread(x: Tensor, center: Tensor, space: ParamSpace | None = None, p: Tensor | None = None,
           by: str = "block") -> dict:
    """sum_i p_i ||center - x_i||^2 (float64) in total and, with a ``space``, per layer.

    Returns ``{"raw", "per_param", "relative", "layers": {label: {"raw", "per_param", "relative", "numel"}}}``;
    per_param divides by the number of entries, relative by ||center||^2 (None where the centre is 0)."""
    x = x.detach().to(torch.float64)
    c = center.detach().to(torch.float64)
    p = (client_weights(len(x)) if p is None else p).to(x.device, torch.float64)
    d2 = (x - c).pow(2)                                        # [n, P]
    out = _summarise(p @ d2.sum(-1), c.pow(2).sum(), x.shape[-1])
    if space is not None:
        seg = "layer" if by == "param" else by                  # ParamSpace calls a named tensor a layer
        raw = p @ space.segment_sum(d2, seg)                    # [S]
        norm2 = space.segment_sum(c.pow(2), seg)
        numel = space.segment_sum(torch.ones_like(c), seg)
        out["layers"] = {lab: _summarise(raw[j], norm2[j], numel[j])
                         for j, lab in enumerate(segment_labels(space, by))}
    return out


def _summarise(raw, norm2, numel) -> dict:
    raw, norm2, numel = float(raw), float(norm2), int(numel)
    return {"raw": raw, "per_param": raw / numel, "relative": raw / norm2 if norm2 > 0 else None, "numel": numel}


# ---- the papers' forms --------------------------------------------------------------------------------
def fedals_cd(x: Tensor, space: ParamSpace | None = None, p: Tensor | None = None, by: str = "block") -> dict:
    """FedALS's CD = sum_k p_k ||theta_bar - theta_k||^2, theta_bar = sum_k p_k theta_k (uniform p: the paper)."""
    p = client_weights(len(x)) if p is None else p
    center = p.to(x.device, torch.float64) @ x.detach().to(torch.float64)
    return spread(x, center, space, p, by)


def round_forms(x: Tensor, w_new: Tensor, w_start: Tensor | None = None, last: Tensor | None = None,
                space: ParamSpace | None = None, p: Tensor | None = None, q: Tensor | None = None,
                by: str = "block") -> dict[str, dict]:
    """The forms measured after aggregation: ``x`` [n, P] the selected clients' final local models, ``w_new`` the
    new global model w^{t+1}, ``w_start`` the round's start model w^t, ``last`` [m, P] every client's latest local
    model (stale ones included); ``p`` weights over the n selected clients, ``q`` over all m. A form whose input is
    missing (None) is left out."""
    p = client_weights(len(x)) if p is None else p
    w_bar = p.to(x.device, torch.float64) @ x.detach().to(torch.float64)
    out = {"divergence": spread(x, w_new, space, p, by), "fedsmoo_wbar": spread(x, w_bar, space, p, by)}
    if w_start is not None:
        out["fedsmoo_table2"] = spread(x, w_start, space, p, by)
    if last is not None:
        q = client_weights(len(last)) if q is None else q
        out["fedinit_delta"] = spread(last, w_new, space, q, by)
        out["fedsmoo_proof"] = spread(last, w_bar, space, q, by)
    return out


def flatten(prefix: str, r: dict) -> dict:
    """One metrics row of plain numbers: ``prefix``, ``prefix_per_param``, ``prefix_relative`` and the same
    per layer as ``prefix.LABEL``."""
    row = {}
    for label, d in [(None, r), *r.get("layers", {}).items()]:
        tail = "" if label is None else f".{label}"
        for key in ("raw", "per_param", "relative"):
            row[prefix + ("" if key == "raw" else f"_{key}") + tail] = d[key]
    return row


# ---- training hook ------------------------------------------------------------------------------------
def wanted(steps, k: int) -> bool:
    """``steps``: None (no per-step rows), an int s (every s-th local iteration, k % s == 0) or a collection of k
    (what probes/hooks.parse_steps makes of --probe-steps)."""
    if steps is None:
        return False
    if isinstance(steps, int):
        return steps > 0 and k % steps == 0
    return k in steps


def make_hook(name: str = "consensus", every: int = 1, steps=None, *, by: str = "block",
              weights: str = "uniform"):
    """A training callback (``run.callbacks.append(hook)``) appending plain-number rows to ``hook.rows``.

    Rounds t with t % every == 0 are probed. With ``steps`` (see :func:`wanted`), FedALS's CD of the active
    clients' models w_{i,k} after k local steps (k = 0 is the start point, i.e. right after synchronisation) is
    logged as ``{"probe", "event": "step", "round", "step": k, "iteration": t*K + k, "fedals_cd", ...}``; after
    aggregation every round form (module docstring) as ``{"probe", "event": "round", "round", ...}``. ``round`` is
    1-based like metrics.jsonl's (the round in progress / just finished). Nothing of the run is changed."""
    if every < 1:
        raise UserError(f"--probe-every must be >= 1 (got {every})")
    segment_labels(ParamSpace([]), by)                          # validates ``by`` early
    rows: list[dict] = []

    def weights_of(run, ids):
        return client_weights(len(ids), weights, run.n_i[ids.cpu()])

    def step_row(run, ctx, k, x):
        cd = fedals_cd(x, run.space, weights_of(run, ctx.S), by)
        return {"probe": name, "event": "step", "round": ctx.t + 1, "step": k,
                "iteration": ctx.t * int(ctx.K.max()) + k, **flatten("fedals_cd", cd)}

    def hook(event, run, ctx, x):
        if ctx.t % every:
            return
        if event == "step":
            if ctx.k == 0 and wanted(steps, 0):
                rows.append(step_row(run, ctx, 0, ctx.x0))
            if wanted(steps, ctx.k + 1):
                rows.append(step_row(run, ctx, ctx.k + 1, x))
        elif event == "round":
            all_ids = torch.arange(run.m)
            forms = round_forms(x, run.w, ctx.w, run.last_local, run.space, weights_of(run, ctx.S),
                                weights_of(run, all_ids), by)
            row = {"probe": name, "event": "round", "round": ctx.t + 1}
            for form, r in forms.items():
                row.update(flatten(form, r))
            rows.append(row)

    hook.rows = rows
    return hook


# ---- checkpoint CLI ---------------------------------------------------------------------------------
def from_checkpoint(bundle, by: str = "block", weights: str = "uniform") -> dict:
    """The forms one checkpoint supports: FedALS's CD over all clients' last local models, and the round forms of
    the last round (its clients are those with rounds == round - 1). FedSMOO Table 2's row needs w^t, known only
    when the algorithm kept its last global update (FedLESAM: w^t = w^{t+1} - last_update)."""
    clients = require_clients(bundle, "the consensus probe").to(torch.float64)
    ck = bundle.ckpt
    T = int(ck["round"])
    rounds = torch.as_tensor(ck["clients"]["rounds"]).cpu()
    sizes = torch.tensor([len(ix) for ix in ck["partition"]["indices"]])
    sel = (rounds == T - 1).nonzero().flatten()
    q = client_weights(len(clients), weights, sizes)
    w = bundle.theta.to(torch.float64)
    out = {"fedals_cd_all_clients": fedals_cd(clients, bundle.space, q, by)}
    notes = []
    if len(sel):
        upd = ck["algo_state"].get("last_update")
        w_start = None if upd is None else w - upd.to(w)
        if w_start is None:
            notes.append("fedsmoo_table2 needs the round's start model w^t, which this algorithm's checkpoint "
                         "does not keep; log it during training with the consensus hook")
        out.update(round_forms(clients[sel], w, w_start, clients, bundle.space, client_weights(len(sel), weights,
                                                                                              sizes[sel]), q, by))
    else:
        notes.append(f"no client trained in the last round ({T}); only fedals_cd_all_clients is available")
    return {"by": by, "weights": weights, "last_round_clients": sel.tolist(), "forms": out, "notes": notes}


def plot(result: dict, title: str | None = None):
    """Per-layer dots of every form: raw, per parameter and relative (three panels, log scale)."""
    import numpy as np

    from ..plots import layer_figure, title as set_title
    forms = result["forms"]
    labels = list(next(iter(forms.values()))["layers"])
    fig, ax = layer_figure(len(labels) * max(1, len(forms)) // 2 + 2, ncols=3, layout="constrained")
    height = 0.8 / len(forms)
    y = np.arange(len(labels))
    for j, (form, r) in enumerate(forms.items()):     # dots, not bars: the values are compared on a log axis
        for a, key in zip(ax[0], ("raw", "per_param", "relative")):
            vals = [r["layers"][lab][key] for lab in labels]
            a.plot([v if v is not None else np.nan for v in vals], y + j * height, "o", label=form)
    for a, key in zip(ax[0], ("raw: sum ||c - x_i||^2", "per parameter", "relative to ||c||^2")):
        a.set(xlabel=key, xscale="log")
        a.grid(axis="y", visible=False)
    ax[0, 0].set_yticks(y + 0.4 - height / 2, labels)
    ax[0, 0].invert_yaxis()
    fig.legend(*ax[0, 0].get_legend_handles_labels(), loc="outside lower center", ncol=len(forms),
               fontsize="small", frameon=False)
    set_title(fig, title)
    return fig


def add_arguments(p):
    p.add_argument("--by", default="block", choices=BY, help="what a layer is (block = a weight with its bias)")
    p.add_argument("--weights", default="uniform", choices=WEIGHTS,
                   help="client weights: uniform (the papers) or by data size")


def run(args, bundle):
    r = from_checkpoint(bundle, args.by, args.weights)
    summary = {form: v["raw"] for form, v in r["forms"].items()}
    return {**r, "summary": summary}, plot(r, bundle.title(f"consensus distance per {args.by}, {args.weights} "
                                                          "client weights").split("\n")[0]) if args.plot else None


CLI = {"consensus": (add_arguments, run)}
