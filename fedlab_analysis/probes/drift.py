"""Perturbation drift and the quality of the global-direction estimators .

FedLESAM Sec. 4.1 and Fig. 2: the global SAM perturbation at local step k is
delta_{g,k} = rho grad F(w_{g,k}) / ||grad F(w_{g,k})|| at the virtual global model
w_{g,k} = w^t - eta_g (1/n) sum_i (w^t - w_{i,k}), F the loss on the union of the clients' data. The drift of
the clients' actual perturbations delta_{i,k} (FedSAM's local ascent, FedSMOO's corrected s_hat, FedLESAM's
estimate) is

    PD^t = (1 / (2 n E)) sum_k sum_i || u(delta_{g,k}) - u(delta_{i,k}) ||,    u(v) = v / ||v||,

with unit directions, so PD lies in [0, 1] as in the paper's figure (rho divided out).
A client with a zero perturbation (FedLESAM's first participation) has no direction and is left out of the mean.
The global update itself is judged at both ends: cos(w^t - w^{t+1}, grad F(w^t)) (does the round descend?) and
cos(w^t - w^{t+1}, grad F(w^{t+1})) (FedLESAM's full-participation estimate of the next ascent direction; negative
when the round overshoots along sharp directions).

Estimators of grad F(w) that a checkpoint holds (``estimator_quality``):
    FedLESAM Eq. 3   cos(w_i^old - w^t, grad F(w^t)) per client against its staleness t - (last round it trained)
                     (Eq. 3 used beyond what its analysis covers);
    FedSMOO          cos(s, grad F(w)) of the server perturbation (FedSMOO Alg. 1);
    FedCM            cos(Delta_t, grad F(x_t)) and ||Delta_t - grad F(x_t)|| / ||grad F(x_t)|| (FedCM Sec. 4,
                     Lemma 4.1).
``make_hook`` logs PD at local steps and the estimators after every probed round; ``compute`` (``probe drift``)
reads the estimators from a checkpoint (the per-step drift needs training, hence the hook).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import UserError
from ..linalg import cosine, unit  # noqa: F401  (re-exported)
from .common import full_gradient  # noqa: F401  (re-exported)
from .consensus import wanted
from .options import Common, opt


# ---- vectors: unit(v) and cosine(a, b) live in fedlab_analysis/linalg.py (shared with the sharpness probe) --------
def perturbation_drift(local: Tensor, global_: Tensor) -> tuple[float | None, int]:
    """One step of FedLESAM's PD: (1/(2n)) sum_i ||u(global_) - u(local_i)|| over the n clients whose local
    perturbation is non-zero; returns (PD, n). ``local`` [n, P], ``global_`` [P]; PD is None when n = 0."""
    local = local.detach().to(torch.float64)
    keep = local.norm(dim=-1) > 0
    n = int(keep.sum())
    if n == 0:
        return None, 0
    d = (unit(global_.detach().to(torch.float64)) - unit(local[keep])).norm(dim=-1)
    return float(d.sum() / (2 * n)), n


def virtual_global(w: Tensor, x: Tensor, eta_g: float = 1.0) -> Tensor:
    """w_{g,k} = w - eta_g (1/n) sum_i (w - x_i) (FedLESAM Sec. 4.1) from the active clients' models x [n, P]."""
    return w - eta_g * (w - x).mean(0)


# ---- estimators a checkpoint holds -------------------------------------------------------------------------
def estimator_quality(w: Tensor, grad: Tensor, state: dict, *, rounds_done: int | None = None,
                      last_round: Tensor | None = None, source: str = "client_old", first: str = "zero",
                      wd: float = 0.0) -> dict:
    """How well the algorithm's stored direction points along grad F(w), for each estimator ``state`` holds.

    ``state`` is ``run.state`` / a checkpoint's ``algo_state``; FedLESAM's staleness of client i is
    ``rounds_done - last_round[i]`` (None without ``last_round``). ``source``/``first`` are the run's
    --lesam-source/--lesam-first: the code's form uses the last global update for everyone, a never-seen client
    uses the first-participation rule (zero: no direction). FedCM's Delta averages the gradients its clients
    stepped with, weight decay included under --fedcm-wd inside (Lemma 4.1), so it is compared with
    grad F(w) + ``wd`` w (pass the run's wd there, 0 otherwise)."""
    out = {"grad_norm": float(grad.norm())}
    if "w_old" in state:
        out["fedlesam"] = _lesam(w, grad, state, rounds_done, last_round, source, first)
    if "s" in state and "mu" in state:
        out["fedsmoo"] = {"cos_s_grad": _num(cosine(state["s"][None], grad)[0]), "s_norm": float(state["s"].norm())}
    if "D" in state:
        D = state["D"].to(torch.float64)
        g = grad.detach().to(torch.float64) + wd * w.detach().to(torch.float64)
        rel = float((D - g).norm() / g.norm()) if g.norm() > 0 else None
        out["fedcm"] = {"cos_D_grad": _num(cosine(D[None], g)[0]), "rel_err": rel, "D_norm": float(D.norm())}
    return out


def _num(v: Tensor):
    v = float(v)
    return None if v != v else v


def _lesam(w, grad, state, rounds_done, last_round, source, first) -> dict:
    back = -state["last_update"]                               # w^{t-1} - w^t
    if source == "last_global_update":
        return {"source": source, "cos_global_update": _num(cosine(back[None], grad)[0])}
    seen = state["seen"].bool().cpu()
    rule = {"zero": torch.zeros_like(w), "global_update": back, "literal": -w}[first]
    est = torch.where(seen[:, None].to(w.device), state["w_old"] - w, rule.expand_as(state["w_old"]))
    cos = cosine(est, grad).cpu()
    stale = [None] * len(seen)
    if last_round is not None and rounds_done is not None:
        stale = [int(rounds_done - r) if s else None for r, s in zip(last_round.cpu().tolist(), seen.tolist())]
    clients = [{"client": i, "seen": bool(seen[i]), "staleness": stale[i], "cos": _num(cos[i])}
               for i in range(len(seen))]
    groups: dict = {}
    for c in clients:
        if c["seen"] and c["cos"] is not None:
            groups.setdefault(c["staleness"], []).append(c["cos"])
    by_staleness = {str(s): {"n": len(groups[s]), "mean_cos": sum(groups[s]) / len(groups[s])}
                    for s in sorted(groups, key=lambda s: (s is None, s or 0))}
    seen_cos = [v for vs in groups.values() for v in vs]
    return {"source": source, "first": first, "clients": clients, "by_staleness": by_staleness,
            "mean_cos_seen": sum(seen_cos) / len(seen_cos) if seen_cos else None, "n_seen": int(seen.sum())}


# ---- training hook ----------------------------------------------------------------------------------------
@contextlib.contextmanager
def _eval_mode(model):
    was = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was)


def make_hook(name: str = "drift", every: int = 1, steps=1, *, samples: int | None = 2048, seed: int = 0,
              batch_size: int = 1024):
    """A training callback appending plain-number rows to ``hook.rows``.

    Rounds t with t % every == 0 are probed. At local steps k selected by ``steps`` (see consensus.wanted;
    default every step) of a sharpness-aware algorithm (one that publishes ``ctx.extra['delta']``), PD_k of the
    active clients against grad F at the virtual global model (``{"event": "step", "round", "step": k, "pd",
    "pd_clients"}``); after aggregation the round's mean PD over the probed steps and the estimators of
    :func:`estimator_quality` at w^{t+1} and ``update_cos_start`` / ``update_cos_end`` (the global update against
    grad F at both ends, module docstring) (``{"event": "round", ...}``). F is the mean loss over the union of the
    clients' data (size-weighted), on ``samples`` of it drawn once with ``seed`` (None: all of it); the model is
    evaluated in eval mode. Cost: one full-gradient pass per probed step, two per probed round. Nothing of the run
    is changed."""
    if every < 1:
        raise UserError(f"--probe-every must be >= 1 (got {every})")
    if samples is not None and samples <= 0:
        raise UserError(f"drift probe: samples must be > 0 (got {samples}); None uses all the clients' data")
    rows: list[dict] = []
    mem: dict = {"pds": [], "x_prev": None}

    def data(run):
        if "X" not in mem:
            idx = torch.cat(run.idx)
            if samples is not None and samples < len(idx):
                pick = torch.randperm(len(idx), generator=torch.Generator().manual_seed(seed))[:samples]
                idx = idx[pick.to(idx.device)]
            mem["X"], mem["y"] = run.X[idx], run.Y[idx]
        return mem["X"], mem["y"]

    def grad_F(run, theta):
        with _eval_mode(run.model):
            return full_gradient(run.forward, theta, *data(run), loss=run.loss, batch_size=batch_size)

    def hook(event, run, ctx, x):
        if ctx.t % every:
            return
        if event == "step":
            k = ctx.k
            x_k = ctx.x0 if k == 0 else mem["x_prev"]           # w_{i,k}: where delta_{i,k} was taken
            mem["x_prev"] = x.clone() if wanted(steps, k + 1) else None
            if "delta" not in ctx.extra or not wanted(steps, k):
                return
            act = ctx.active.to(x.device)
            g = grad_F(run, virtual_global(ctx.w, x_k, run.cfg.hp("server_lr")))
            pd, n = perturbation_drift(ctx.extra["delta"][act], g)
            mem["pds"].append(pd)
            rows.append({"probe": name, "event": "step", "round": ctx.t + 1, "step": k, "pd": pd, "pd_clients": n})
        elif event == "round":
            pds = [v for v in mem["pds"] if v is not None]
            mem["pds"] = []
            g_new, back = grad_F(run, run.w), (ctx.w - run.w)[None]
            q = estimator_quality(run.w, g_new, run.state, rounds_done=run.t, last_round=run.last_round,
                                  source=run.cfg.lesam_source, first=run.cfg.lesam_first, wd=_fedcm_wd(vars(run.cfg)))
            rows.append({"probe": name, "event": "round", "round": ctx.t + 1,
                         "pd": sum(pds) / len(pds) if pds else None, "pd_steps": len(pds), **flat_quality(q),
                         "update_cos_start": _num(cosine(back, grad_F(run, ctx.w))[0]),
                         "update_cos_end": _num(cosine(back, g_new)[0])})

    hook.rows = rows
    return hook


def flat_quality(q: dict) -> dict:
    """The estimator dict as one row of plain numbers (FedLESAM's per-staleness means as ``lesam_cos_s{s}``)."""
    row = {"grad_norm": q["grad_norm"]}
    if "fedlesam" in q:
        L = q["fedlesam"]
        if "cos_global_update" in L:
            row["lesam_cos"] = L["cos_global_update"]
        else:
            row["lesam_cos"] = L["mean_cos_seen"]
            row.update({f"lesam_cos_s{s}": b["mean_cos"] for s, b in L["by_staleness"].items()})
    if "fedsmoo" in q:
        row["smoo_cos_s_grad"] = q["fedsmoo"]["cos_s_grad"]
    if "fedcm" in q:
        row["fedcm_cos_D_grad"] = q["fedcm"]["cos_D_grad"]
        row["fedcm_rel_err"] = q["fedcm"]["rel_err"]
    return row


def _fedcm_wd(cfg: dict) -> float:
    """The weight decay inside FedCM's momentum (--fedcm-wd inside) from a config dict, else 0."""
    return float(cfg.get("wd", 0.0)) if cfg.get("fedcm_wd", "inside") == "inside" else 0.0


# ---- checkpoint CLI -------------------------------------------------------------------------------------
def from_checkpoint(bundle, batch_size: int = 1024) -> dict:
    """The estimators the checkpoint's algo_state holds, against grad F of the bundle's data at its global model."""
    ck, cfg = bundle.ckpt, bundle.config
    state = {k: v.to(bundle.theta.device) for k, v in ck["algo_state"].items()}
    state = {k: v.to(bundle.theta.dtype) if v.is_floating_point() else v for k, v in state.items()}
    if not ({"w_old", "D"} & set(state) or {"s", "mu"} <= set(state)):
        raise UserError(f"the drift probe reads FedLESAM's w_old, FedSMOO's s or FedCM's momentum D, and this "
                        f"{cfg['algo']} checkpoint holds none of them (it has {', '.join(state) or 'no state'}); "
                        f"per-step perturbation drift needs training: record it with the drift hook "
                        f"(python -m fedlab_analysis.train ... --probe drift)")
    g = full_gradient(bundle.f, bundle.theta, bundle.X, bundle.y, batch_size=batch_size)
    cl = ck.get("clients")
    last = torch.as_tensor(cl["rounds"]) if cl else None
    q = estimator_quality(bundle.theta, g, state, rounds_done=int(ck["round"]), last_round=last,
                          source=cfg.get("lesam_source", "client_old"), first=cfg.get("lesam_first", "zero"),
                          wd=_fedcm_wd(cfg))
    if "fedlesam" in q and last is None and "clients" in q["fedlesam"]:
        q["notes"] = ["staleness needs each client's last round, which this checkpoint did not keep; re-run "
                      "training with --keep-clients true"]
    return q


def draw(q: dict, title: str | None = None):
    """FedLESAM: cos against staleness per client; FedSMOO / FedCM: their cosines as bars."""
    from ..plots import figure
    fig, ax = figure()
    a = ax[0, 0]
    L = q.get("fedlesam", {})
    if L.get("clients"):
        pts = [(c["staleness"], c["cos"]) for c in L["clients"] if c["staleness"] is not None and c["cos"] is not None]
        if pts:
            a.scatter(*zip(*pts), s=14, alpha=0.7, label="clients")
            s, m = zip(*[(int(k), b["mean_cos"]) for k, b in L["by_staleness"].items() if k != "None"])
            a.plot(s, m, "k.-", label="mean")
            a.set(xlabel="staleness (rounds since last trained)", ylabel="cos(w_i^old - w, grad F(w))")
            a.legend(fontsize=8)
    else:
        bars = {k: v for k, v in {"FedLESAM cos(-last update, grad F)": L.get("cos_global_update"),
                                  "FedSMOO cos(s, grad F)": q.get("fedsmoo", {}).get("cos_s_grad"),
                                  "FedCM cos(D, grad F)": q.get("fedcm", {}).get("cos_D_grad")}.items()
                if v is not None}
        a.barh(list(bars), list(bars.values()))
        a.set(xlabel="cosine", xlim=(-1, 1))
    fig.tight_layout()
    from ..plots import title as set_title
    set_title(fig, title)
    return fig


# ---- the probe: options, compute, plot ----------------------------------------------------------------
HELP = "FedLESAM's perturbation estimate vs staleness"
DESCRIBE = ("FedLESAM's estimate of the global perturbation from the last global update against the true one, "
            "by the clients' staleness (FedLESAM Sec. 4.1, Fig. 2 left).")
COST = "cost: one gradient pass over the samples."
NEEDS_RUN = True      # a plain state_dict is refused (probes/foreign.py): this probe reads the federation
HOOK_NAMES = ("drift",)


@dataclass
class Options(Common):
    batch_size: int = opt(1024, "chunk of the full-gradient pass (memory only)", lo=1)


def compute(bundle, opts: Options) -> dict:
    """The global-direction estimators the checkpoint holds against grad F at its global model.

    Args:
        bundle: the rebuilt checkpoint (its algo_state holds FedLESAM's w_old, FedSMOO's s or FedCM's D).
        opts: ``batch_size``, the chunk of the full-gradient pass.
    Returns:
        ``from_checkpoint``'s dict plus ``summary`` (``flat_quality`` and the sample count).

    FedLESAM's perturbation drift against the exact answer (one client along the global direction, one at a
    right angle to it: (0 + sqrt 2) / (2 * 2)):

    >>> import torch
    >>> perturbation_drift(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([1.0, 0.0]))
    (0.3535533905932738, 2)
    """
    q = from_checkpoint(bundle, opts.batch_size)
    summary = {**flat_quality(q), "n_samples": len(bundle.y)}
    return {**q, "summary": summary, "legend": legend(summary, LEGEND),
            "_title": bundle.title("global-direction estimators against grad F")}


LEGEND = {   # what each printed number is (summary keys; lesam_cos_sK stands for every staleness K)
    "grad_norm": "||grad F(w)||, F the mean loss over the samples at the global model w",
    "lesam_cos": "cos(w_i^old - w, grad F(w)) of FedLESAM's estimate (Eq. 3), mean over the clients that have "
                 "trained (cos(w^{t-1} - w^t, grad F(w^t)) with --lesam-source last_global_update)",
    "lesam_cos_sK": "the same mean over the clients whose estimate is K rounds stale (they last trained K rounds "
                    "before this checkpoint; FedLESAM Fig. 2 left)",
    "smoo_cos_s_grad": "cos(s, grad F(w)) of FedSMOO's server perturbation s",
    "fedcm_cos_D_grad": "cos(Delta, grad F(w)) of FedCM's momentum Delta",
    "fedcm_rel_err": "||Delta - grad F(w)|| / ||grad F(w)|| (FedCM Lemma 4.1)",
}


def legend(summary: dict, meanings: dict) -> dict:
    """What each number of ``summary`` is, in its order (``meanings``; a key ending in _s and a number K is
    explained once under its name with K); the command line prints it under the summary."""
    import re
    out = {}
    for k in summary:
        name = re.sub(r"_s\d+$", "_sK", k)
        if name in meanings:
            out.setdefault(name, meanings[name])
    return out


def plot(result: dict, path) -> None:
    """``draw`` of ``compute``'s result, saved at ``path``."""
    from ..plots import save
    save(draw(result, result.get("_title")), path)
