"""What training callbacks and an algorithm's parts see: read-only views of the run and of the step (Flower's
``Strategy``: each argument documented once, here).

A callback is ``cb(event, run, step, x) -> None`` (its return value is ignored), called by the engine:

    event  "step" after every local step k of the round (all active clients stepped together), or "round" after
           the server step (w^{t+1} is ``run.w``, and ``run.t`` already counts the round)
    run    ``RunView``: the run, read-only (``RUN_FIELDS``); setting an attribute raises AttributeError
    step   ``StepView``: the round and step, read-only (``STEP_FIELDS``)
    x      the active clients' local models [n, P] after step k ("step") or at the round's end ("round"); the
           engine's own tensor: read it, do not change it (clone what you keep)

A callback with ``needs_last_local = True`` makes the engine keep every client's last local model
(``run.last_local``); a callback's ``rows`` list (plain-number dicts) goes to metrics.jsonl (loop.py).
Attached callbacks make the round take the masked path (every client's rows whole, Run.segments).
"""
from __future__ import annotations

from types import MappingProxyType

RUN_FIELDS = {
    "cfg": "the run's RunConfig (resolved choices)",
    "t": "rounds completed",
    "m": "number of clients",
    "w": "the global model [P] (w^{t+1} at a 'round' event, the round's start model at a 'step' event)",
    "buf": "the global BatchNorm buffers [P_buf] (empty without them)",
    "space": "ParamSpace: the flat vector's layers", "bspace": "ParamSpace of the buffers",
    "model": "the torch module (its weights are not the run's: use forward)",
    "forward": "forward(theta [P], x, buf=None) -> outputs: the model as a function of a flat vector",
    "evaluate": "evaluate(X, Y, theta=None) -> (mean loss, accuracy)",
    "loss": "loss(outputs, labels): cross-entropy, or a toy's",
    "X": "training inputs on the device", "Y": "training labels", "Xte": "test inputs", "Yte": "test labels",
    "idx": "idx[i]: client i's sample indices (host)", "n_i": "clients' data sizes [m] (host)",
    "eval_train": "the fixed training subsample evaluation uses", "eval_test": "the fixed test subsample",
    "last_local": "every client's last local model [m, P], or None where the run keeps none",
    "last_round": "the last round each client trained [m] (-1: never)",
    "state": "every part's state by name (read-only mapping; a checkpoint's algo_state)",
    "state_tables": "the names in state that are per-client [m, P] tables",
    "spec": "spec() -> the model's description (a checkpoint's 'model' entry)",
    "device": "the run's device", "dtype": "the run's float dtype",
    "ds": "the Dataset", "part": "the Partition", "n_grads": "forward/backward passes so far",
    "grads": "grads(step, x, k) -> the active clients' minibatch gradients [n, P] at points x [n, P] on step k's "
             "minibatches (zero rows for clients past their K_i; counted in n_grads; valid until the next call)",
}
STEP_FIELDS = {
    "t": "the round in progress (0-based: rounds completed before it)",
    "k": "the local step just taken (0-based; the last step's at a 'round' event)",
    "S": "active client ids, sorted, long [n] (host)", "n": "len(S)",
    "K": "local steps per active client, long [n]", "lr": "the round's local learning rate",
    "w": "the global model at the round's start [P]",
    "x0": "the clients' start points [n, P] (kept while a callback is attached)",
    "active": "bool [n]: the clients that took step k (K_i > k)",
    "batches": "batches[j][k]: the data indices of client S[j] at step k (host)",
    "perturbation": "the perturbation [n, P] under step k's gradient (SAM: rho g/||g||; FedLESAM: the round's), "
                    "or None where the algorithm has none",
    "extra": "{'delta': perturbation} where there is one, else {} (the name probes read)",
}


class _ReadOnly:
    __slots__ = ("_of",)
    FIELDS: dict = {}

    def __init__(self, of):
        object.__setattr__(self, "_of", of)

    def __getattr__(self, name):
        if name not in self.FIELDS:
            raise AttributeError(f"{type(self).__name__} has no {name!r}; it shows {', '.join(self.FIELDS)}")
        return self._get(name)

    def _get(self, name):
        return getattr(self._of, name)

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is read-only: {name!r} cannot be set from a callback")

    def __dir__(self):
        return list(self.FIELDS)


class RunView(_ReadOnly):
    """The run as callbacks see it (``RUN_FIELDS``)."""
    __slots__ = ()
    FIELDS = RUN_FIELDS

    def _get(self, name):
        if name == "grads":
            return lambda step, x, k: self._of.grads(step._of[0] if isinstance(step, StepView) else step, x, k)
        return getattr(self._of, name)


class StepView(_ReadOnly):
    """The round and step as callbacks see it (``STEP_FIELDS``); ``of`` is (RoundCtx, Algorithm)."""
    __slots__ = ()
    FIELDS = STEP_FIELDS

    def _get(self, name):
        ctx, algo = self._of
        if name == "perturbation":
            return algo.perturbation
        if name == "extra":
            d = algo.perturbation
            return MappingProxyType({} if d is None else {"delta": d})
        return getattr(ctx, name)


# ---- what the parts of an algorithm see (parts.py; engine.py's docstring shows when each hook runs) -------------
PART_FIELDS = {
    "cfg": "the run's RunConfig", "m": "number of clients", "n_i": "clients' data sizes [m] (host)",
    "space": "ParamSpace of the flat vector", "bspace": "ParamSpace of the BatchNorm buffers",
    "dtype": "the run's float dtype", "device": "the run's device",
    "last_local": "every client's last local model [m, P] (kept where a part needs_last_local), or None",
    "watched": "a callback is attached (it may read any step's values, so nothing may be left for later)",
    "grads": "grads(ctx, x, k, data=None) -> minibatch gradients [n, P] at x (Run.grads)",
    "step_data": "step_data(ctx, k): step k's minibatches, to share between two gradient passes",
    "scratch": "scratch(name, like, rows=None): a work buffer reused across steps (Run.scratch)",
    "spare": "spare(like): the last gradient's buffer, free after the local steps (Run.spare)",
    "rows": "rows(table, S) -> the rows S of a [m, ...] state table on the run's device (a new tensor)",
    "put": "put(table, S, v): table[S] = v across devices",
}
ROUND_FIELDS = {
    "t": "the round (0-based)", "k": "the current local step", "n": "number of active clients",
    "S": "active client ids, long [n] (host)", "S_dev": "the same on the run's device",
    "K": "local steps per active client, long [n] (host)", "K_dev": "the same on the run's device",
    "Kmin": "min K_i (of this run of steps)", "lr": "the round's local learning rate",
    "w": "the global model at the round's start [P]",
    "x0": "the clients' start points [n, P], where the algorithm or a callback reads them, else None",
    "all_on": "every client takes step k (no masks)", "rows": "the active rows at step k when not all_on",
    "delta": "Delta_i = x_i - ref_i [n, P] (from client_end on)", "buf": "the clients' BatchNorm buffers [n, P_buf]",
    "add": "add(name, v [n, ...]): a per-client value the server step reads as a sum or mean (RoundCtx.add)",
    "total": "total(name): its sum over the round's active clients", "mean": "mean(name): its mean",
}


class PartView(_ReadOnly):
    """The run as parts see it (``PART_FIELDS``): read-only, with the engine's services a part calls."""
    __slots__ = ()
    FIELDS = PART_FIELDS

    def _get(self, name):
        run = self._of
        if name == "watched":
            return bool(run.callbacks)
        if name in ("grads", "step_data"):
            fn = getattr(run, name)
            return lambda ctx, *a, **kw: fn(ctx._of if isinstance(ctx, RoundView) else ctx, *a, **kw)
        return getattr(run, name)


class RoundView(_ReadOnly):
    """The round as parts see it (``ROUND_FIELDS``): read-only but for ``add`` (what the server step reads)."""
    __slots__ = ()
    FIELDS = ROUND_FIELDS
