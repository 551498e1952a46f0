"""Toys through the trainer: the engine and algorithm specs that users train with, in float64.

A ``HeteroQuadratics`` (f_i(x) = 1/2 (x - b_i)^T A_i (x - b_i)) is written as client data for a bias-free
linear model: client i holds d samples, the rows of X_i = sqrt(d) A_i^(1/2), with targets y_i = X_i b_i, so
the mean-squared loss 1/(2d) ||X_i w - y_i||^2 IS f_i (same gradient A_i (w - b_i)). A full local batch
(batch size = d) makes every local step a full gradient step. The data set goes through
``Run(cfg, dataset=...)`` with the "natural" partition; the exact float64 features and targets replace the
float32 copies the Dataset type holds, and ``run.loss`` is the toy's exact objective. Everything else, the
round loop, the algorithm's parts (FedCM's Momentum, FedInit's RelaxedInit, ...), sampling and aggregation,
is the trainer's own code.
"""
from __future__ import annotations

import numpy as np
import torch

from ..config import RunConfig
from ..data.embedded import Dataset
from ..trainers.engine import Run
from .toys import DT, HeteroQuadratics


def client_data(prob: HeteroQuadratics) -> tuple[torch.Tensor, torch.Tensor]:
    """X [n*d, d], y [n*d]: client i owns rows i*d .. (i+1)*d - 1, with X_i^T X_i / d = A_i, y_i = X_i b_i."""
    ev, V = torch.linalg.eigh(prob.A)
    root = V @ torch.diag_embed(ev.clamp_min(0).sqrt()) @ V.transpose(-1, -2)      # A_i^(1/2), symmetric
    X = prob.d ** 0.5 * root                                                         # [n, d, d]
    y = (X @ prob.b.unsqueeze(-1)).squeeze(-1)                                       # [n, d]
    return X.reshape(-1, prob.d), y.reshape(-1)


def half_mse(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """1/(2B) sum_j (out_j - y_j)^2: the client objective f_i on a full batch."""
    return 0.5 * (out.squeeze(-1) - y).pow(2).mean()


def half_mse_grads(params: dict, xb: torch.Tensor, yb: torch.Tensor, W=None) -> dict:
    """The gradients ``vmap(grad(half_mse(model(x), y)))`` of the bias-free linear model, in closed form: for
    client j, (0.5/B) 2 r_j^T X_j with r_j = X_j w_j - y_j (autograd's order of operations), so the toy's engine
    runs skip functorch's per-step bookkeeping (``Run.batched_grad``). params["fc.weight"]: [n, 1, d]; xb [n, B, d];
    yb [n, B]; W (padded batches' weights) is never set for the toys (full or equal-size minibatches)."""
    if W is not None:
        raise ValueError("half_mse_grads: padded minibatches (weights W) are not part of the toy")
    w = params["fc.weight"]
    r = (xb @ w.transpose(1, 2)).squeeze(-1) - yb                  # [n, B]
    return {"fc.weight": ((0.5 / r.shape[1]) * (2 * r)).unsqueeze(1) @ xb}


def make_run(prob: HeteroQuadratics, algo: str, *, K: int, lr: float, x0: torch.Tensor, rounds: int = 1,
             active_ratio: float = 1.0, sampling: str = "fixed", lr_decay: float = 1.0, batch: int | None = None,
             seed: int = 0, parallel: str = "vmap", **hp) -> Run:
    """A float64 ``Run`` of ``algo`` on the quadratic toy, started at x0, every client full-batch; ``hp`` are
    RunConfig fields (alpha, beta, server_lr, ...); ``batch`` < d draws the trainer's seeded minibatches of a
    client's d rows instead. parallel: the trainer's --client-parallel (vmap: one batched gradient call per local
    step)."""
    n, d = prob.n, prob.d
    X, y = client_data(prob)
    ds = Dataset("quadratic-toy", X.float(), torch.zeros(n * d, dtype=torch.int64), X[:1].float(),
                 torch.zeros(1, dtype=torch.int64), 1, (d,),
                 natural_clients=[np.arange(i * d, (i + 1) * d) for i in range(n)])
    cfg = RunConfig(algo=algo, dataset="synthetic", model="logreg", model_kwargs={"bias": False},
                    dtype="float64", partition="natural", clients=n, active_ratio=active_ratio,
                    sampling=sampling, local_steps=K, batch_size=batch or d, lr=lr, lr_decay=lr_decay, wd=0.0,
                    rounds=rounds, seed=seed, client_parallel=parallel, eval_train_samples=1,
                    device="cpu", **hp)
    run = Run(cfg, dataset=ds)
    run.X, run.Y, run.loss = X.to(DT), y.to(DT), half_mse        # the exact toy, not its float32 copy
    run.batched_grad = half_mse_grads                            # its gradient in closed form (vmap only)
    run.w = torch.as_tensor(x0, dtype=DT).clone()
    if run.last_local is not None:                               # w_i^last = w^0 before the first round
        run.last_local = run.w.expand(run.m, -1).clone()
    return run


def trajectory(run: Run, T: int, dtilde: bool = False) -> dict:
    """T rounds: global models w [T+1, d], every client's last local model [T+1, n, d] (if kept), the
    algorithm's server state after each round (e.g. FedCM's Delta as state_D [T+1, d]), and with ``dtilde``
    Dtilde [T, d]: the mean over the round's active clients and local steps of the minibatch gradients at the
    points the engine visited, recomputed from the batches' rows (X_b^T (X_b x - y_b) / B), independently of
    the engine's autograd."""
    ws, last = [run.w.clone()], [None if run.last_local is None else run.last_local.clone()]
    states = {k: [v.clone()] for k, v in run.state.items() if v.dim() == 1}
    acc, dts = {}, []

    def watch(event, run_, ctx, x):
        if event == "step":
            prev, k = acc.get("prev", ctx.x0), acc.get("k", 0)
            for j in range(ctx.n):
                ix = ctx.batches[j][k]
                Xb, yb = run_.X[ix], run_.Y[ix]
                acc["sum"] = acc.get("sum", 0.0) + Xb.T @ (Xb @ prev[j] - yb) / (len(ix) * ctx.n)
            acc["prev"], acc["k"] = x.clone(), k + 1
        else:
            dts.append(acc["sum"] / acc["k"])
            acc.clear()

    if dtilde:
        run.callbacks.append(watch)
    try:
        for _ in range(T):
            run.round()
            ws.append(run.w.clone())
            last.append(None if run.last_local is None else run.last_local.clone())
            for k, v in states.items():
                v.append(run.state[k].clone())
    finally:
        if dtilde:
            run.callbacks.remove(watch)
    out = {"w": torch.stack(ws), **{f"state_{k}": torch.stack(v) for k, v in states.items()}}
    if last[0] is not None:
        out["last"] = torch.stack(last)
    if dts:
        out["Dtilde"] = torch.stack(dts)
    return out
