"""Uniform stability by coupled retraining (FedInit App. B, Definition 11): a study, since it trains runs (the
engine's ``Run``); ``probe stability`` (probes/stability.py) and the ``gap``/``stability`` training hooks call it.

    gap          test loss - train loss, train acc - test acc, train = the union of the clients' data
    stability    Hardt et al. (2016) / FedInit Definition 11: train on C and on a neighbouring C~ (sample j* of
                 client i* replaced by z'), with COUPLED randomness (same client draws, same minibatch indices,
                 same init); report delta^T = ||w^T - w~^T|| and |f(w^T; z) - f(w~^T; z)| over a pool of points
    recursion    per round t (FedInit's stability recursion, App. B):
                   delta_0^t    = mean over the active clients of ||w_{i,0}^t - w~_{i,0}^t||       (start points)
                   delta_K^t    = mean over the active clients of ||w_{i,K}^t - w~_{i,K}^t||       (after K steps)
                   delta_last^t = (1/C) sum over ALL clients of ||w_i^last - w~_i^last|| (stale ones too; the paper's
                                  delta^t_K, with w_i^last = w^0 before a client's first round)
                   r_init^t  = delta_0^t / delta_last^{t-1}   the RI step, paper: <= 1 + 2 beta
                   r_local^t = delta_K^t / delta_0^t          local steps, paper: <= prod_k (1 + eta L)
                 (None while the denominator is 0, i.e. before the replaced sample has been used).

The trainer draws every random number from (seed, round, client, purpose), so two Runs with one config share
client draws and minibatch indices; the replacement z' has the label of z_{j*} so that label-based partitions
give the same clients. The neighbour run is advanced round by round beside the base run (``Shadow``), which is
how the training hook measures stability during a real run. Memory: the probe (``uniform_stability``) holds two
runs at a time, the base and one neighbour: the pairs are trained one after the other, the base retrained for
each (the same numbers, checked), and delta_last keeps one norm per client rather than two [m, P] tables. The
training hook advances all its pairs beside the one run it watches, so it holds 1 + pairs runs.
"""
from __future__ import annotations

import dataclasses
import gc

import numpy as np
import torch

from ..errors import UserError
from ..probes.common import generalization_gap, loss_acc, sample_losses  # noqa: F401  (re-exported)


# ---- neighbouring data sets --------------------------------------------------------------------------------
def draw_pair(ds, indices, seed: int = 0, client: int | None = None) -> dict:
    """A neighbour of the training set: client i* (uniform, or ``client``), sample j* uniform in its data, and
    z' a test sample of the same label (uniform). Returns {client, index (into x_train), test_index}."""
    rng = np.random.default_rng(seed)
    m = len(indices)
    i = int(rng.integers(m)) if client is None else int(client)
    if not 0 <= i < m:
        raise UserError(f"--client {i} names no client; clients are 0..{m - 1}")
    j = int(np.asarray(indices[i])[rng.integers(len(indices[i]))])
    same = (ds.y_test == ds.y_train[j]).nonzero().flatten().numpy()
    if len(same) == 0:
        raise UserError(f"no test sample has label {int(ds.y_train[j])} to replace training sample {j}; "
                        "pass --client to pick another client")
    return {"client": i, "index": j, "test_index": int(same[rng.integers(len(same))])}


def neighbour(ds, index: int, x_new: torch.Tensor, y_new) -> object:
    """A copy of ``ds`` with training sample ``index`` replaced by (x_new, y_new)."""
    X, Y = ds.x_train.clone(), ds.y_train.clone()
    X[index] = torch.as_tensor(x_new, dtype=X.dtype)
    Y[index] = int(y_new)
    return dataclasses.replace(ds, x_train=X, y_train=Y)


def _ratio(a: float, b: float):
    return a / b if b > 0 else None


class Shadow:
    """The run on the neighbouring data set, advanced one round per round of the base run (coupled randomness).

    ``pair`` = {client, index, test_index} (``draw_pair``) or {index, x, y}; ``idx`` the base run's client
    indices (checked to be unchanged). ``advance(base, ctx, x)`` is called with the base run right after its
    round (the ``"round"`` callback) and returns the row of that round."""

    def __init__(self, cfg, ds, pair: dict, idx):
        from ..trainers.engine import Run
        j = int(pair["index"])
        x_new, y_new = (ds.x_test[pair["test_index"]], ds.y_test[pair["test_index"]]) if "test_index" in pair \
            else (pair["x"], pair["y"])
        self.j = j
        self.z = (ds.x_train[j:j + 1], ds.y_train[j:j + 1])
        self.z_new = (torch.as_tensor(x_new, dtype=ds.x_train.dtype)[None], torch.as_tensor([int(y_new)]))
        self.run = Run(cfg, dataset=neighbour(ds, j, x_new, y_new))
        if len(self.run.idx) != len(idx) or any(not torch.equal(a, b) for a, b in zip(self.run.idx, idx)):
            raise UserError("the neighbouring data set changed the client partition; pick a replacement with the "
                            "same label (draw_pair does) so that the two runs stay coupled")
        self.client = next(i for i, ix in enumerate(idx) if bool((ix == j).any()))
        self.pair = {"client": self.client, "index": j,
                     **({"test_index": int(pair["test_index"])} if "test_index" in pair else {})}
        # ||w_i^last - w~_i^last|| per client: 0 before a client's first round (both runs start at the same w^0),
        # then the distance of its latest final local models; one number per client, not two [m, P] tables
        self.dist_last = torch.zeros(self.run.m, dtype=torch.float64)
        self.delta_last, self.touches, self.x = 0.0, 0, None
        self.run.callbacks.append(self._capture)

    def _capture(self, event, run, ctx, x):
        if event == "round":
            self.x = x.detach().clone()

    def advance(self, base, ctx, x) -> dict:
        ctx2 = self.run.round()
        if not torch.equal(ctx.S.cpu(), ctx2.S.cpu()) or any(
                not torch.equal(a, b) for ba, bb in zip(ctx.batches, ctx2.batches) for a, b in zip(ba, bb)):
            raise UserError("the two runs drew different clients or minibatches; the stability probe needs "
                            "coupled randomness (same config and seed)")
        j, active = self.j, ctx.S.tolist()
        if self.client in active:
            jj = active.index(self.client)
            self.touches += sum(int((b == j).sum()) for b in ctx.batches[jj])
        d0 = float((ctx.x0 - ctx2.x0).norm(dim=1).mean())
        dist = (x - self.x).norm(dim=1)
        dK = float(dist.mean())
        r_init = _ratio(d0, self.delta_last)
        self.dist_last[ctx.S.cpu()] = dist.double().cpu()
        self.delta_last = float(self.dist_last.mean())
        return {"round": base.t, "delta_w": float((base.w - self.run.w).norm()), "delta_0": d0, "delta_K": dK,
                "delta_last": self.delta_last, "r_init": r_init, "r_local": _ratio(dK, d0),
                "touches": self.touches, "client_active": self.client in active}

    def losses(self, base, pool) -> dict:
        """|f(w; z) - f(w~; z)| over the pool, and at the replaced point z_{j*} and its replacement z'."""
        base.model.eval()
        self.run.model.eval()
        out = {}
        for key, (X, y) in {"pool": pool, "z": self.z, "z_new": self.z_new}.items():
            X, y = X.to(base.X), y.to(base.Y.device)
            d = (sample_losses(base.forward, base.w, X, y) - sample_losses(self.run.forward, self.run.w, X, y)).abs()
            out[f"loss_diff_{key}_mean"] = float(d.mean())
            out[f"loss_diff_{key}_max"] = float(d.max())
        return out


def ri_beta(cfg) -> float:
    """beta of relaxed initialisation when the run uses it (FedInit, --ri), else 0."""
    return float(cfg.hp("beta")) if cfg.ri or cfg.algo == "fedinit" else 0.0


def _pool(run, pool: int | None, seed: int):
    """The loss-difference pool: ``pool`` test points drawn with ``seed`` (all of them when None)."""
    n = len(run.Yte)
    ix = torch.arange(n) if pool is None or pool >= n else \
        torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:pool]
    return run.Xte[ix.to(run.device)], run.Yte[ix.to(run.device)]


# ---- training hooks ------------------------------------------------------------------------------------------
def make_hook(name: str = "stability", every: int = 1, steps=None, *, pairs=1, seed: int = 0,
              client: int | None = None, pool: int | None = 1000, samples: int | None = None):
    """``name="gap"``: every ``every`` rounds, the train-test gap of w^{t+1} (train = the union of the clients'
    data, or the run's fixed subset ``run.eval_train`` with ``samples``). ``name="stability"``: ``pairs``
    neighbouring runs (an int: drawn with ``seed``, seed+1, ...; or a list of pair dicts) advanced beside the
    run every round; rows hold the recursion distances each round and the pool loss differences every ``every``
    rounds. ``steps`` is accepted for a uniform signature (both probes work per round). Rows in ``hook.rows``."""
    if name == "gap":
        def gap_hook(event, run, ctx, x):
            if event != "round" or run.t % every:
                return
            if gap_hook.train is None or gap_hook.train[0] is not run:      # the train set, gathered once a run
                ix = run.eval_train[:samples] if samples else torch.cat(run.idx).unique()
                gap_hook.train = (run, run.X[ix], run.Y[ix])
            run.model.eval()
            g = generalization_gap(run.forward, run.w, *gap_hook.train[1:], run.Xte, run.Yte)
            gap_hook.rows.append({"probe": "gap", "round": run.t, **g})
        gap_hook.rows, gap_hook.train = [], None
        return gap_hook
    if name != "stability":
        raise UserError(f"unknown hook {name!r} in probes.stability; use gap or stability")

    def hook(event, run, ctx, x):
        if event != "round":
            return
        if hook.shadows is None:
            if run.t != 1:
                raise UserError("the stability probe retrains from round 0; attach its hook before the first "
                                "round (it cannot join a resumed run)")
            plist = pairs if isinstance(pairs, list) else \
                [draw_pair(run.ds, run.part.indices, seed + p, client) for p in range(int(pairs))]
            hook.shadows = [Shadow(run.cfg, run.ds, p, run.idx) for p in plist]
            hook.pool = _pool(run, pool, seed)
        for p, sh in enumerate(hook.shadows):
            row = {"probe": "stability", "pair": p, **sh.pair, **sh.advance(run, ctx, x)}
            if run.t % every == 0 or run.t == run.cfg.rounds:
                row.update(sh.losses(run, hook.pool))
            hook.rows.append(row)

    hook.rows, hook.shadows, hook.pool = [], None, None
    return hook


# ---- the probe as a function ---------------------------------------------------------------------------------
def summarise(rows: list[dict], beta: float = 0.0) -> dict:
    """Final distances and loss differences over the pairs, and the growth ratios of the recursion."""
    final = {}
    for r in rows:
        final[r["pair"]] = r
    fin = list(final.values())
    ratios = lambda key: [r[key] for r in rows if r[key] is not None]
    se = lambda v: float(np.std(v, ddof=1) / np.sqrt(len(v))) if len(v) > 1 else None  # noqa: E731
    out = {"pairs": len(fin), "delta_T_mean": float(np.mean([r["delta_w"] for r in fin])),
           "delta_T_stderr": se([r["delta_w"] for r in fin]),
           "delta_T_max": float(max(r["delta_w"] for r in fin)),
           "touches_mean": float(np.mean([r["touches"] for r in fin])),
           "r_init_max": max(ratios("r_init"), default=None), "r_local_max": max(ratios("r_local"), default=None),
           "paper_r_init_bound": 1 + 2 * beta}
    if "loss_diff_pool_mean" in fin[0]:
        out.update(eps_pool_mean=float(np.mean([r["loss_diff_pool_mean"] for r in fin])),
                   eps_pool_stderr=se([r["loss_diff_pool_mean"] for r in fin]),
                   eps_pool_max=float(max(r["loss_diff_pool_max"] for r in fin)),
                   loss_diff_z_mean=float(np.mean([r["loss_diff_z_mean"] for r in fin])))
    return out


def uniform_stability(cfg, rounds: int | None = None, pairs=1, *, seed: int = 0, client: int | None = None,
                      pool: int | None = 1000, every: int | None = None, dataset=None, keep_runs: bool = False,
                      callbacks=()) -> dict:
    """Train ``cfg`` and ``pairs`` neighbouring runs for ``rounds`` rounds (default cfg.rounds) in lock-step with
    coupled randomness (Hardt et al. 2016; FedInit Definition 11). Returns ``rows`` (one per pair and round),
    ``summary`` (``summarise``), the base run's final train-test ``gap``, and with ``keep_runs`` the Run objects
    of the last pair (``base``, ``shadow``).
    Two runs at a time: the pairs are trained one after the other, each beside a fresh base run (the base runs of
    all pairs are the same run, checked bit for bit), so memory stays that of two runs for any number of pairs.
    ``callbacks`` are attached to the first base run (e.g. ``make_hook("gap")``)."""
    cfg = dataclasses.replace(cfg, rounds=int(rounds or cfg.rounds), quiet=True)
    from ..trainers.engine import Run
    from ..probes.common import bar
    base = Run(cfg, dataset=dataset)
    plist = pairs if isinstance(pairs, list) else \
        [draw_pair(base.ds, base.part.indices, seed + p, client) for p in range(int(pairs))]
    if not plist:
        raise UserError("the stability probe needs at least one neighbouring pair (--pairs >= 1)")
    rows, pair_info, w_first, hook = [], [], None, None
    with bar(cfg.rounds * len(plist), "stability: coupled rounds (2 runs at a time)", "round") as pb:
        for p, pair in enumerate(plist):
            if p:                                         # the previous pair's two runs go before the next come
                del hook, base
                gc.collect()                              # (a Shadow and its Run refer to each other)
                base = Run(cfg, dataset=dataset)
            hook = make_hook("stability", every or cfg.rounds, pairs=[pair], seed=seed, client=client, pool=pool)
            base.callbacks += [hook, *(callbacks if p == 0 else ())]
            for _ in range(cfg.rounds):
                base.round()
                pb.update(1)
            rows += [{**r, "pair": p} for r in hook.rows]
            pair_info.append(hook.shadows[0].pair)
            if w_first is None:
                w_first = base.w.clone()
            elif not torch.equal(base.w, w_first):
                raise UserError("the base run differed between pairs; the stability probe needs a deterministic "
                                "trainer (same config and seed give the same run)")
    base.model.eval()
    union = torch.cat(base.idx).unique()
    out = {"rounds": cfg.rounds, "beta": ri_beta(cfg), "pairs": pair_info,
           "rows": rows, "summary": summarise(rows, ri_beta(cfg)),
           "gap": generalization_gap(base.forward, base.w, base.X[union], base.Y[union], base.Xte, base.Yte)}
    if keep_runs:
        out.update(base=base, shadow=hook.shadows[0])
    return out
