"""Runs as a batch axis: a pack of runs trained together in one program (DESIGN.md, fourth round of work).

Each run of a pack is a whole ``Run``. It keeps its own global model, clients, server and client state, sampling,
RNG streams, hyper-parameters and run directory, so it is the run it would be alone: the same config.json, metrics
and checkpoints, resumable one by one or together.

What the runs share is what costs more in calls than in arithmetic:
- the data set, loaded once and held once on the device (``engine.resident``);
- the local steps' gradients. Every run trains in a thread of its own, and the threads take turns. At each local step a
  run's vmapped gradient request waits for the other runs' requests; the last computes them all in one
  ``torch.func`` call over every run's active clients (``Batcher``), and each run takes its rows back;
- evaluation: the runs' models in one vmapped forward pass per batch.

Which runs may share a call: ``pack_key``. A run that diverges, fails or ends leaves the pack; the others go on.
The rows of one call are independent of each other, so a packed run equals its run alone up to the float rounding of
a larger batched product (tests/test_pack.py: float64 to 1e-12).
"""
from __future__ import annotations

import dataclasses
import json
import sys
import threading
from dataclasses import dataclass

import torch

from ..config import RunConfig
from ..data import SEEDED, load_dataset
from ..device import resolve
from ..errors import Diverged, UserError
from .engine import DTYPES, resident


# On a CPU a gathered call pays only while the pack's [N, P] rows stay small. Beyond this many floats, copying the
# runs' rows into one tensor and back, and switching runs at every step (each evicts the other's rows from the
# caches), cost more than the calls save: MNIST's MLP (P = 199,210, 5 runs) ran at 0.6-0.8x the runs alone
# (benchmarks/many_runs.py). Such a run keeps the turn and trains on as it would alone (``Batcher.request``).
CPU_GATHER = 2 ** 20


def parse_seeds(tokens: list[str]) -> list[int]:
    """--seeds: integers and inclusive ranges ("0 1 2", "0-4", "0-2 7"), each seed once, in the order given."""
    out = []
    for tok in tokens:
        a, dash, b = tok.partition("-")
        try:
            lo, hi = int(a), int(b) if dash else int(a)
        except ValueError:
            raise UserError(f"--seeds: {tok!r} is not a seed or a range like 0-4") from None
        if lo < 0 or hi < lo:
            raise UserError(f"--seeds: {tok!r}: seeds are integers >= 0 and a range goes up (0-4)")
        if hi - lo >= 10000:
            raise UserError(f"--seeds: {tok!r} names {hi - lo + 1} seeds; a pack takes at most 10000")
        out.extend(s for s in range(lo, hi + 1) if s not in out)
    return out


def pack_key(cfg: RunConfig) -> str:
    """Runs with the same key can share one gradient call: the same model on the same data, dtype and device.
    Algorithm, seed and every continuous hyper-parameter may differ (each run keeps its own)."""
    return json.dumps([cfg.model, cfg.model_kwargs, cfg.dataset, cfg.data_dir, cfg.dtype,
                       cfg.device, cfg.precision], sort_keys=True, default=str)


def packable(cfg: RunConfig) -> bool:
    """Whether a run gains from a pack: its local steps go through the vmapped gradient (a model without BatchNorm
    statistics, and convolutions only on a GPU: ``Run``'s own rule, read off the plan) and it is not compiled."""
    from ..plan import data_shape, model_size
    if cfg.compile or cfg.client_parallel == "loop" or cfg.dataset.startswith("memory:"):
        return False
    if cfg.client_parallel == "vmap":
        return True
    _, _, shape, n_classes = data_shape(cfg)
    nbuf = model_size(cfg, shape, n_classes)[1]
    gpu = cfg.device.startswith("cuda") or (cfg.device == "auto" and torch.cuda.is_available())
    conv = len(shape) == 3 and cfg.model != "mlp" and not gpu
    return not nbuf and not conv


class Batcher:
    """The rendezvous of a pack's requests (gradients, evaluations). The runs take turns, one thread running at a
    time (no two threads compete for the interpreter): in member order, each runs until its next request, then
    hands the turn on. The last member of a cycle computes every waiting request (grouped by kind and shape) in one
    vmapped call each, and the next cycle begins with the first member. ``leave`` takes a run out (ended, diverged
    or failed).
    """

    def __init__(self, n: int):
        self.go = [threading.Event() for _ in range(n)]
        self.alive = [True] * n
        self.pending: dict[int, tuple] = {}
        self.done: dict[int, object] = {}
        self.runs: dict[int, object] = {}           # member -> its Run (the pack's progress bar reads run.t)
        self.calls = self.requests = 0               # gathered calls made, requests served (benchmarks)
        if n:
            self.go[0].set()

    def member(self, r: int) -> "Member":
        """What run ``r`` calls for its gradients and evaluations (``Run.batcher``)."""
        return Member(self, r)

    def wait(self, r: int) -> None:
        """Until it is member ``r``'s turn."""
        self.go[r].wait()
        self.go[r].clear()

    def request(self, r: int, req: tuple):
        """Member ``r``'s request (kind, run, ...), computed with the pack's other requests; its result. A run whose
        gathered rows would not pay (CPU_GATHER) leaves the gathering (``Run.batcher`` None): it keeps the turn and
        trains on as it would alone."""
        self.runs[r] = req[1]
        if req[0] == "grad" and req[1].device.type == "cpu" and req[2].numel() * sum(self.alive) > CPU_GATHER:
            req[1].batcher = None                    # solo: from now on the run computes alone, keeping the turn
            return CALLS[req[0]]([req[1:]])[0]
        self.pending[r] = req
        self._hand_on(r)
        self.wait(r)
        out = self.done.pop(r)
        if isinstance(out, BaseException):
            raise out
        return out

    def leave(self, r: int) -> None:
        self.alive[r] = False
        self._hand_on(r)

    def _hand_on(self, r: int) -> None:
        """The turn goes to the next member after ``r`` that is alive and not waiting for a gradient; when there is
        none, the cycle's requests are computed and the turn goes to the first member alive."""
        for s in range(r + 1, len(self.go)):
            if self.alive[s] and s not in self.pending:
                self.go[s].set()
                return
        if self.pending:
            self._flush()
        first = next((s for s, a in enumerate(self.alive) if a), None)
        if first is not None:
            self.go[first].set()

    def _flush(self) -> None:
        groups: dict[tuple, list[int]] = {}
        for r, req in sorted(self.pending.items()):  # by member: the same grouping every time
            groups.setdefault(KEYS[req[0]](*req[1:]), []).append(r)
        for key, rs in groups.items():
            try:
                for r, g in zip(rs, CALLS[key[0]]([self.pending[r][1:] for r in rs])):
                    self.done[r] = g
            except Exception as e:                   # each run of the call raises it in its own thread
                for r in rs:
                    self.done[r] = e
        self.calls += len(groups)
        self.requests += len(self.pending)
        self.pending.clear()


class Member:
    """A run's face of its pack's Batcher: ``grad`` (Run._grads, vmapped local steps) and ``evaluate``
    (Run.evaluate)."""

    def __init__(self, batcher: Batcher, r: int):
        self.batcher, self.r = batcher, r

    def grad(self, run, xa, xb, yb, W) -> torch.Tensor:
        """The loss gradients [n, P] of the run's clients at xa [n, P] on their minibatches xb, yb (W: mean-loss
        weights of padded batches, or None)."""
        return self.batcher.request(self.r, ("grad", run, xa, xb, yb, W))

    def evaluate(self, run, X, Y, theta, bs: int) -> tuple[float, float]:
        """(mean loss, accuracy) of the run's model ``theta`` on X, Y, in batches of ``bs``."""
        return self.batcher.request(self.r, ("eval", run, X, Y, theta, bs))


def _grads(reqs: list[tuple]) -> list[torch.Tensor]:
    """One vmapped gradient call over every request's clients; each request's rows back."""
    run = reqs[0][0]                                 # every run of a pack has the same model function (pack_key)
    cat = lambda i: reqs[0][i] if len(reqs) == 1 else torch.cat([q[i] for q in reqs])     # noqa: E731
    with torch.autocast(run.device.type, dtype=torch.bfloat16, enabled=run.cfg.precision == "bf16"):
        g = run._vgrad(run.space.unflatten(cat(1)), cat(2), cat(3), None if reqs[0][4] is None else cat(4))
    flat = torch.cat([v.flatten(1) for v in g.values()], 1)
    return list(flat.split([len(q[1]) for q in reqs]))


@torch.no_grad()
def _evals(reqs: list[tuple]) -> list[tuple[float, float]]:
    """Every request's evaluation as one vmapped forward pass per batch over the runs' models (their inputs shared
    where they are one tensor, as the test set of a pack's runs is); each run's loss and accuracy as Run.evaluate
    computes them alone."""
    run, R = reqs[0][0], len(reqs)
    for q in reqs:
        q[0].model.eval()
    thetas = torch.stack([q[3] for q in reqs])
    shared = all(q[1] is reqs[0][1] for q in reqs)
    f = torch.func.vmap(lambda th, x: run._call(run.space.unflatten(th), x), in_dims=(0, None if shared else 0))
    n, bs = len(reqs[0][1]), reqs[0][4]
    loss, correct = [0.0] * R, [0.0] * R
    for s in range(0, n, bs):
        xb = reqs[0][1][s:s + bs] if shared else torch.stack([q[1][s:s + bs] for q in reqs])
        yb = torch.stack([q[2][s:s + bs] for q in reqs])
        out = f(thetas, xb)                          # [R, b, classes]
        ls = torch.stack([torch.nn.functional.cross_entropy(o, y, reduction="sum") for o, y in zip(out, yb)])
        for r, (a, c) in enumerate(zip(ls.tolist(), (out.argmax(2) == yb).sum(1).tolist())):
            loss[r] += a                             # each run's sum as Run.evaluate takes it: the same bits
            correct[r] += c
    return [(loss[r] / n, correct[r] / n) for r in range(R)]


# a request's kind -> how requests group into one call (the same key: one call), and the call
KEYS = {"grad": lambda run, xa, xb, yb, W: ("grad", W is None, tuple(xb.shape[1:]), xa.dtype, xa.device),
        "eval": lambda run, X, Y, theta, bs: ("eval", tuple(X.shape), bs, X.dtype, X.device)}
CALLS = {"grad": _grads, "eval": _evals}


@dataclass
class Job:
    """One run of a pack: its config and run directory, as ``loop.train`` takes them."""
    cfg: RunConfig
    out: object = None
    resume: bool = False
    overwrite: bool = False
    callbacks: tuple = ()


@dataclass
class Outcome:
    """How one run of a pack ended: 'done' (``run``), 'diverged' or 'failed' (``error``: its one line)."""
    status: str
    run: object = None
    error: str = ""
    exc: BaseException | None = None


def shared_data(cfgs: list[RunConfig]) -> dict:
    """One Dataset per (data set, files[, seed where the loader draws from it]), its inputs already where
    and as the runs hold them, so the runs of a pack share one copy. Returns {index of cfg: Dataset}."""
    cache, out = {}, {}
    for i, cfg in enumerate(cfgs):
        if cfg.dataset.startswith("memory:"):
            continue
        key = (cfg.dataset, cfg.data_dir, cfg.dtype, cfg.device, cfg.seed if cfg.dataset in SEEDED else None)
        if key not in cache:
            ds = load_dataset(cfg.dataset, data_dir=cfg.data_dir, seed=cfg.seed)
            dtype, device = DTYPES[cfg.dtype], resolve(cfg.device)
            cache[key] = dataclasses.replace(ds, x_train=resident(ds.x_train, dtype, device),
                                             x_test=resident(ds.x_test, dtype, device))
        out[i] = cache[key]
    return out


def train_pack(jobs: list[Job], show: bool = False, desc: str = "pack", on_end=None) -> list[Outcome]:
    """Train ``jobs`` together, one thread each, their gradient calls gathered (``Batcher``). Runs whose configs
    differ in ``pack_key`` are refused: pack those apart (``groups``). Each run writes its own directory exactly as
    ``loop.train`` alone; one that diverges or fails ends with its Outcome while the others go on.
    ``on_end(r, outcome)``: called as run ``r`` ends (done, diverged or failed; not on an interrupt), in its thread
    and still holding the turn, so a caller can mark it done before the pack's slowest run ends (on a CPU a pack's
    runs often train one after the other: ``CPU_GATHER``). An error it raises makes the run's Outcome 'failed'."""
    from .loop import train
    if len({pack_key(j.cfg) for j in jobs}) > 1:
        raise UserError("a pack's runs must share model, data set, dtype and device; pack them apart")
    data = shared_data([j.cfg for j in jobs])
    batcher = Batcher(len(jobs))
    outcomes: list[Outcome | None] = [None] * len(jobs)

    n_threads = torch.get_num_threads()              # the caller's torch threads, also in each run's thread

    def work(r: int, job: Job) -> None:
        batcher.wait(r)
        try:
            torch.set_num_threads(n_threads)
            run = train(job.cfg, job.out, resume=job.resume, callbacks=job.callbacks, dataset=data.get(r),
                        overwrite=job.overwrite, batcher=batcher.member(r))
            outcomes[r] = Outcome("done", run)
        except Diverged as e:
            outcomes[r] = Outcome("diverged", error=str(e), exc=e)
        except BaseException as e:                   # noqa: BLE001  (a UserError, a defect: the others go on;
            outcomes[r] = Outcome("failed", error=f"{type(e).__name__}: {e}", exc=e)   # an interrupt: raised below)
        try:
            if on_end is not None and isinstance(outcomes[r].exc, (Exception, type(None))):
                on_end(r, outcomes[r])
        except Exception as e:                       # noqa: BLE001  (the caller's marking failed: the run's outcome)
            outcomes[r] = Outcome("failed", error=f"{type(e).__name__}: {e}", exc=e)
        finally:
            batcher.leave(r)

    threads = [threading.Thread(target=work, args=(r, j), daemon=True, name=f"{desc}-{r}")
               for r, j in enumerate(jobs)]
    from tqdm import tqdm
    total = sum(j.cfg.rounds for j in jobs)
    bar = tqdm(total=total, desc=f"{desc} ({len(jobs)} runs)", unit="round", disable=not (show and sys.stderr.isatty()))
    for th in threads:
        th.start()
    while any(th.is_alive() for th in threads):
        next(th for th in threads if th.is_alive()).join(0.5)
        bar.n = sum(getattr(run, "t", 0) for run in list(batcher.runs.values()))
        bar.refresh()
    bar.close()
    for o in outcomes:                               # an interrupt in a run (Ctrl-C, a hook's KeyboardInterrupt) ends
        if not isinstance(o.exc, (Exception, type(None))):    # the pack as it ends a run alone, once all stopped
            raise o.exc
    return outcomes


def groups(cfgs: list[RunConfig], n: int | None = None) -> list[list[int]]:
    """The indices of ``cfgs`` split into packs: by ``pack_key``, then each key's runs into ``n`` packs of nearly
    equal size (one per worker), or one pack per key (``n`` None)."""
    by: dict[str, list[int]] = {}
    for i, c in enumerate(cfgs):
        by.setdefault(pack_key(c), []).append(i)
    out = []
    for idx in by.values():
        k = max(1, min(n or 1, len(idx)))
        out.extend(idx[j::k] for j in range(k))
    return out
