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
iterations, the round forms after aggregation) and ``compute`` reads a checkpoint (``probe consensus``).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import UserError
from ..params import ParamSpace
from .common import WEIGHTS, client_weights, require_clients  # noqa: F401  (client_weights re-exported)
from .options import Common, opt

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
CHUNK_ELEMENTS = 1 << 22       # float64 entries of one chunk of clients (32 MiB): extra memory O(P), not O(n P)


def _chunks(n: int, P: int, chunk: int | None):
    c = max(1, int(chunk) if chunk else CHUNK_ELEMENTS // max(P, 1))
    return [(s, min(s + c, n)) for s in range(0, n, c)]


def _rows(x: Tensor, rows: Tensor | None, s: int, e: int) -> Tensor:
    """Rows s:e of x, or of x[rows], in float64 (a view of x is converted, never the whole table)."""
    part = x[s:e] if rows is None else x[rows[s:e].to(x.device)]
    return part.detach().to(torch.float64)


def weighted_mean(x: Tensor, p: Tensor | None = None, rows: Tensor | None = None, chunk: int | None = None) -> Tensor:
    """sum_i p_i x_i (float64) over the rows of x (or x[rows]), accumulated chunk by chunk of clients."""
    n = len(x) if rows is None else len(rows)
    p = (client_weights(n) if p is None else p).to(x.device, torch.float64)
    out = torch.zeros(x.shape[-1], dtype=torch.float64, device=x.device)
    for s, e in _chunks(n, x.shape[-1], chunk):
        out += p[s:e] @ _rows(x, rows, s, e)
    return out


def spread(x: Tensor, center: Tensor, space: ParamSpace | None = None, p: Tensor | None = None,
           by: str = "block", rows: Tensor | None = None, chunk: int | None = None) -> dict:
    """sum_i p_i ||center - x_i||^2 (float64) in total and, with a ``space``, per layer, over the rows of x (or
    x[rows]).

    The clients are visited in chunks of ``chunk`` rows (default: CHUNK_ELEMENTS / P), each converted to float64
    on its own, so the extra memory is a few [chunk, P] blocks whatever the number of clients, and the sums are
    float64. Returns ``{"raw", "per_param", "relative", "layers": {label: {"raw", "per_param", "relative",
    "numel"}}}``; per_param divides by the number of entries, relative by ||center||^2 (None where it is 0)."""
    rows = None if rows is None else torch.as_tensor(rows, dtype=torch.long)
    n = len(x) if rows is None else len(rows)
    c = center.detach().to(x.device, torch.float64)
    p = (client_weights(n) if p is None else p).to(x.device, torch.float64)
    seg = "layer" if by == "param" else by                      # ParamSpace calls a named tensor a layer
    total = torch.zeros((), dtype=torch.float64, device=x.device)
    per_seg = None
    for s, e in _chunks(n, x.shape[-1], chunk):
        d2 = (_rows(x, rows, s, e) - c).pow_(2)                 # [chunk, P]
        total += p[s:e] @ d2.sum(-1)
        if space is not None:
            part = p[s:e] @ space.segment_sum(d2, seg)
            per_seg = part if per_seg is None else per_seg + part
    out = _summarise(total, c.pow(2).sum(), x.shape[-1])
    if space is not None:
        norm2 = space.segment_sum(c.pow(2), seg)
        numel = space.segment_sum(torch.ones_like(c), seg)
        out["layers"] = {lab: _summarise(per_seg[j], norm2[j], numel[j])
                         for j, lab in enumerate(segment_labels(space, by))}
    return out


def _summarise(raw, norm2, numel) -> dict:
    raw, norm2, numel = float(raw), float(norm2), int(numel)
    return {"raw": raw, "per_param": raw / numel, "relative": raw / norm2 if norm2 > 0 else None, "numel": numel}


# ---- the papers' forms --------------------------------------------------------------------------------
# What each form is, in words, and where it comes from (the summary, the figure and --help use these).
FORMS = {
    "fedals_cd_all_clients": ("all clients' last models around their mean",
                              "FedALS consensus distance, Sec. 1 / Fig. 1"),
    "fedals_cd": ("the clients' models around their mean", "FedALS consensus distance, Sec. 1 / Fig. 1"),
    "divergence": ("last round's clients around the new global model w^{t+1}",
                   "divergence term of FedSMOO Sec. 5.2 and FedInit Fig. 2"),
    "fedsmoo_wbar": ("last round's clients around their plain average",
                     "FedSMOO App. C, w_bar^{t+1} of Eq. (21)"),
    "fedsmoo_table2": ("last round's clients around the round's start model w^t", "FedSMOO Table 2, row label"),
    "fedinit_delta": ("all clients' latest models around w^{t+1}", "FedInit divergence Delta^{t+1}, Sec. 4"),
    "fedsmoo_proof": ("all clients' latest models around the last round's average",
                      "FedSMOO App. C, the proof's delta^t"),
}


def describe_form(key: str) -> str:
    what, src = FORMS.get(key, (key, ""))
    return f"{what} ({src})" if src else what


def fedals_cd(x: Tensor, space: ParamSpace | None = None, p: Tensor | None = None, by: str = "block",
              rows: Tensor | None = None, chunk: int | None = None) -> dict:
    """FedALS's CD = sum_k p_k ||theta_bar - theta_k||^2, theta_bar = sum_k p_k theta_k (uniform p: the paper)."""
    n = len(x) if rows is None else len(rows)
    p = client_weights(n) if p is None else p
    return spread(x, weighted_mean(x, p, rows, chunk), space, p, by, rows, chunk)


def round_forms(x: Tensor, w_new: Tensor, w_start: Tensor | None = None, last: Tensor | None = None,
                space: ParamSpace | None = None, p: Tensor | None = None, q: Tensor | None = None,
                by: str = "block", rows: Tensor | None = None, chunk: int | None = None) -> dict[str, dict]:
    """The forms measured after aggregation: ``x`` [n, P] the selected clients' final local models (or the rows
    ``rows`` of x), ``w_new`` the new global model w^{t+1}, ``w_start`` the round's start model w^t, ``last``
    [m, P] every client's latest local model (stale ones included); ``p`` weights over the n selected clients,
    ``q`` over all m. A form whose input is missing (None) is left out. Chunked over clients (:func:`spread`)."""
    n = len(x) if rows is None else len(rows)
    p = client_weights(n) if p is None else p
    w_bar = weighted_mean(x, p, rows, chunk)
    kw = {"by": by, "rows": rows, "chunk": chunk}
    out = {"divergence": spread(x, w_new, space, p, **kw), "fedsmoo_wbar": spread(x, w_bar, space, p, **kw)}
    if w_start is not None:
        out["fedsmoo_table2"] = spread(x, w_start, space, p, **kw)
    if last is not None:
        q = client_weights(len(last)) if q is None else q
        out["fedinit_delta"] = spread(last, w_new, space, q, by, chunk=chunk)
        out["fedsmoo_proof"] = spread(last, w_bar, space, q, by, chunk=chunk)
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
    hook.needs_last_local, hook.name = True, name     # the round forms over all clients read run.last_local
    return hook


# ---- checkpoint CLI ---------------------------------------------------------------------------------
def from_checkpoint(bundle, by: str = "block", weights: str = "uniform", chunk: int | None = None) -> dict:
    """The forms one checkpoint supports: FedALS's CD over all clients' last local models, and the round forms of
    the last round (its clients are those with rounds == round - 1). FedSMOO Table 2's row needs w^t, known only
    when the algorithm kept its last global update (FedLESAM: w^t = w^{t+1} - last_update). The clients' table is
    read chunk by chunk of clients (never copied whole), at the precision it was stored in (float64 sums), so
    --dtype cannot act."""
    clients = require_clients(bundle, "the consensus probe", stored=True)     # a float64 run's table stays exact
    ck = bundle.ckpt
    T = int(ck["round"])
    rounds = torch.as_tensor(ck["clients"]["rounds"]).cpu()
    sizes = torch.tensor([len(ix) for ix in ck["partition"]["indices"]])
    sel = (rounds == T - 1).nonzero().flatten()
    q = client_weights(len(clients), weights, sizes)
    w = bundle.space.flatten(ck["global"]).to(bundle.theta.device, torch.float64)
    out = {"fedals_cd_all_clients": fedals_cd(clients, bundle.space, q, by, chunk=chunk)}
    notes = []
    if len(sel):
        upd = ck["algo_state"].get("last_update")
        w_start = None if upd is None else w - upd.to(w)
        if w_start is None:
            notes.append(f"{describe_form('fedsmoo_table2')} needs the round's start model w^t, which this "
                         "algorithm's checkpoint does not keep; log it during training with the consensus hook")
        out.update(round_forms(clients, w, w_start, clients, bundle.space,
                               client_weights(len(sel), weights, sizes[sel]), q, by, rows=sel, chunk=chunk))
    else:
        notes.append(f"no client trained in the last round ({T}); only {describe_form('fedals_cd_all_clients')} "
                     "is available")
    return {"by": by, "weights": weights, "n_clients": len(clients), "last_round_clients": sel.tolist(),
            "forms": out, "definitions": {k: {"what": FORMS[k][0], "source": FORMS[k][1]} for k in out},
            "notes": notes}


def table(result: dict, key: str = "raw") -> str:
    """The printed summary: a legend naming each form, then one row per layer (and the total), one column per
    form, of sum_i p_i ||c - x_i||^2 (``key``: raw, per_param or relative)."""
    forms = result["forms"]
    cols = list(forms)
    what = {"raw": "sum_i p_i ||c - x_i||^2", "per_param": "sum_i p_i ||c - x_i||^2 / entries",
            "relative": "sum_i p_i ||c - x_i||^2 / ||c||^2"}[key]
    lines = [f"consensus distance {what}, per {result['by']}, {result['weights']} client weights "
             f"({result['n_clients']} clients; last round's: {len(result['last_round_clients'])}):"]
    lines += [f"  [{j + 1}] {describe_form(k)}" for j, k in enumerate(cols)]
    labels = list(next(iter(forms.values())).get("layers", {}))
    width = max([len("layer")] + [len(lab) for lab in labels] + [5])
    lines.append(f"{'layer':<{width}}" + "".join(f"{f'[{j + 1}]':>12}" for j in range(len(cols))))

    def fmt(v):
        return f"{v:>12.4g}" if v is not None else f"{'-':>12}"
    for lab in labels:
        lines.append(f"{lab:<{width}}" + "".join(fmt(forms[k]["layers"][lab][key]) for k in cols))
    lines.append(f"{'total':<{width}}" + "".join(fmt(forms[k][key]) for k in cols))
    lines += [f"note: {n}" for n in result.get("notes", [])]
    return "\n".join(lines)


def draw(result: dict, title: str | None = None):
    """Per-layer dot plot of every form on log axes (three panels: raw, per parameter, relative); one marker per
    form and layer, the legend names each form by what it is and where it comes from."""
    import numpy as np
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    from ..plots import layer_figure, title as set_title
    forms = result["forms"]
    labels = list(next(iter(forms.values()))["layers"])
    fig, ax = layer_figure(len(labels) + 3, ncols=3, w=3.8, layout="constrained")
    y = np.arange(len(labels))
    markers = "osD^vP*X"
    off = (np.arange(len(forms)) - (len(forms) - 1) / 2) * min(0.12, 0.7 / max(len(forms), 1))
    for j, (form, r) in enumerate(forms.items()):
        for a, key in zip(ax[0], ("raw", "per_param", "relative")):
            vals = np.array([r["layers"][lab][key] if r["layers"][lab][key] is not None else np.nan
                             for lab in labels], dtype=float)
            vals[vals <= 0] = np.nan
            a.plot(vals, y + off[j], markers[j % len(markers)], ls="none", ms=5,
                   label=f"[{j + 1}] {describe_form(form)}")
    for a, key in zip(ax[0], ("sum_i p_i ||c - x_i||^2", "per parameter (/ entries)", "relative (/ ||c||^2)")):
        a.set_xscale("log")
        x = np.array([v for line in a.get_lines() for v in line.get_xdata()], dtype=float)
        x = x[np.isfinite(x) & (x > 0)]
        few = len(x) and np.log10(x.max() / x.min()) < 1.3             # about a decade: 1-2-5 ticks
        a.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0) if few else (1.0,), numticks=6))
        a.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.3g}"))
        a.xaxis.set_minor_locator(LogLocator(subs="auto", numticks=10))
        a.xaxis.set_minor_formatter(NullFormatter())             # decade labels only: they never run together
        a.margins(x=0.15, y=0.2)
        a.set_xlabel(key)
        a.grid(axis="y", visible=False)
    ax[0, 0].set_yticks(y, labels)
    ax[0, 0].invert_yaxis()
    fig.legend(*ax[0, 0].get_legend_handles_labels(), loc="outside lower center", ncol=1, fontsize="small",
               frameon=False)
    set_title(fig, title)
    return fig


FORMS_HELP = "; ".join(f"[{k}] {w} ({s})" for k, (w, s) in FORMS.items() if k != "fedals_cd")

# ---- the probe: options, compute, plot ----------------------------------------------------------------
HELP = "client models' spread, each paper's form, per layer"
DESCRIBE = ("How far the clients' last local models lie from their centre: FedALS's consensus distance "
            "(FedALS Sec. 1, Fig. 1), FedInit's divergence Delta (FedInit Sec. 4), FedSMOO Table 2's "
            "consensus row and its proof's delta (FedSMOO App. C), in total and per layer. Reads the "
            "checkpoint's stored client models only, no data.")
COST = "cost: no pass over the data; one sweep over the clients' stored models (seconds)."
READS_DATA = False
IGNORES = (("data", "samples", "seed", "bn_mode", "bn_batch", "dtype"),
           "with the consensus probe (it compares the stored models, always in float64, and reads no data)")
NEEDS_RUN = True      # a plain state_dict is refused (probes/foreign.py): this probe reads the federation
HOOK_NAMES = ("consensus",)


@dataclass
class Options(Common):
    by: str = opt("block", "what a layer is (block = a weight with its bias)", choices=BY)
    weights: str = opt("uniform", "client weights: uniform (the papers) or by data size", choices=WEIGHTS)
    value: str = opt("raw", "the printed table's number: the raw distance, per parameter, or relative to ||c||^2. "
                     "The forms: " + FORMS_HELP, choices=("raw", "per_param", "relative"))
    chunk: int | None = opt(None, "clients per float64 chunk (memory only; default: as many as fit 32 MiB)",
                            metavar="M")


def compute(bundle, opts: Options) -> dict:
    """Every consensus form the checkpoint supports (``from_checkpoint``), with the printed table.

    Args:
        bundle: the checkpoint's rebuilt model and stored client models (``common.rebuild``).
        opts: ``by`` (what a layer is), ``weights`` (client weights), ``value`` (the table's number), ``chunk``.
    Returns:
        ``from_checkpoint``'s dict plus ``summary`` (form -> raw total) and ``summary_text`` (the table).

    FedALS's consensus distance against the exact answer (two clients at (0, 0) and (2, 0): centre (1, 0), each
    at distance 1):

    >>> import torch
    >>> fedals_cd(torch.tensor([[0.0, 0.0], [2.0, 0.0]], dtype=torch.float64))["raw"]
    1.0
    """
    r = from_checkpoint(bundle, opts.by, opts.weights, opts.chunk or None)
    r["summary"] = {form: v["raw"] for form, v in r["forms"].items()}       # numbers, for sweeps and reports
    r["summary_text"] = table(r, opts.value)                                  # what is printed
    r["_title"] = bundle.title(f"consensus distance per {opts.by}, {opts.weights} client weights").split("\n")[0]
    return r


def plot(result: dict, path) -> None:
    """The per-layer dot plot of ``compute``'s result, saved at ``path``."""
    from ..plots import save
    save(draw(result, result.get("_title")), path)
