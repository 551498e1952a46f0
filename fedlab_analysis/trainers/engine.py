"""The round engine: one loop for every algorithm (DESIGN.md decisions 2 and 3).

A round, top to bottom:
    S        = sample_clients(t)                       bernoulli (the simulator) or fixed
    x        = algo.start(run, ctx)                    [n_active, P]: w, RI's w + beta (w - w_i^last), FedALS'
    for k in range(max K_i):                           lock-step: all active clients advance step k together
                                                       (in runs of steps with the same clients: Run.segments)
        g    = algo.gradient(run, ctx, x, k)            plain, SAM, FedSMOO's corrected ascent, FedLESAM's estimate
        d, c = algo.direction(run, ctx, x, g)           + prox / SCAFFOLD / FedDyn terms, FedCM mixing; c: decay
        x   -= lr * (clip(d) + c x)                     in place; clients past their own K_i stay put
        algo.after_step(...); callbacks('step', ...)    FedALS synchronisation; probes watching local steps
    algo.client_end -> w = algo.aggregate -> algo.server_end; callbacks('round', ...)
The client side (start .. client_end: Run.clients) takes every active client at once, or, where the memory plan
(plan.py) or --client-chunk says so, C of them at a time (Run.chunks): each chunk's [C, P] buffers reused, and the
server step reads what it needs of the clients as sums over the chunks (RoundCtx.add / total / mean).
Each part owns its state (``part.state``, declared as slots: trainers/state.py), allocated here: [P] vectors and
[m, P] tables (``Run.table``, on --state-device); ``run.state`` reads them all by name. A part's round constants are
its attributes, set in round_start and cleared at the round's end (``Run.release``).

The gradients of a step come from ``Run.grads``: ``--client-parallel loop`` takes one client after the other,
``vmap`` all active clients in one ``torch.func.vmap(grad(...))`` call over their stacked parameters. Both read the
round's minibatch table ``ctx.I`` (and augmentation draws ``ctx.aug``) drawn from the same per-client generators; a
short batch is padded and its mean loss re-weighted, so the two modes agree to float rounding.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import sys
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
import torch
import torch.nn.functional as F

from ..checkpoint import load_weights, misfit
from ..config import RunConfig
from ..data import Dataset, heterogeneity_noise, load_dataset, partition
from ..data.augment import aug_apply
from ..device import resolve
from ..errors import UserError
from ..models import build_model, model_spec
from ..params import ParamSpace, functional
from . import sampling
from .algorithms import build
from .rng import generator
from .state import allocate
from .views import PartView, RoundView, RunView, StepView

DTYPES = {"float32": torch.float32, "float64": torch.float64}
PARTITION_OPTIONS = {"dirichlet": ("alpha", "replacement"), "labeldir": ("alpha", "min_size"),
                     "pathological": ("classes_per_client", "replacement"), "shards": ("shards_per_client",)}


@dataclass
class RoundCtx:
    """What one round knows: the active clients, their step counts and minibatches, the learning rate."""
    t: int
    S: torch.Tensor                   # active client ids, sorted, long [n] (host)
    lr: float
    w: torch.Tensor                   # global model at the start of the round [P]
    K: torch.Tensor                   # local steps per active client, long [n]
    batches: list[list[torch.Tensor]]  # batches[j][k] = data indices of client S[j] at step k
    aug: torch.Tensor | None = None   # augmentation draws [n, max K_i, 3, max B] (data.augment.aug_draw)
    x0: torch.Tensor | None = None    # local start points [n, P] (kept where the algorithm or a callback reads it)
    k: int = 0                        # current local step
    active: torch.Tensor | None = None  # bool [n]: clients still stepping at step k
    all_on: bool = True               # every client steps at step k (k < min K_i): no masks needed
    rows: torch.Tensor | None = None  # the active rows when not all_on (on the device)
    rows_host: list | None = None     # the same rows as Python ints: decided on the host from K, never read back
    K_dev: torch.Tensor | None = None  # K on the run's device
    Kmin: int = 0
    act: torch.Tensor | None = None   # bool [max K_i, n] on the device: act[k, j] = K_j > k
    row_at: dict = field(default_factory=dict)  # k -> (device rows, host rows) for the masked steps k >= Kmin
    sizes: list = field(default_factory=list)   # sizes[j][k] = |batch of client S[j] at step k| (host ints)
    S_dev: torch.Tensor | None = None  # S on the run's device
    I: torch.Tensor | None = None     # padded minibatch indices [n, max K_i, max B] (Run._pad)
    W: torch.Tensor | None = None     # mean-loss weights of padded batches, or None when all are full
    padded: list = field(default_factory=list)  # padded[k]: some active batch at step k is short
    buf: torch.Tensor | None = None   # each active client's BatchNorm buffers [n, P_buf] (models with them)
    fixed: dict | None = None         # --compile: the round's batch tables padded to one shape (Run._fixed)
    segs: list = field(default_factory=list)    # (a, b, device rows, host rows): steps a..b-1 of the clients K_i > a
    per: dict = field(default_factory=dict)     # what the server step reads, per client [n, ...] (RoundCtx.add)
    sums: dict | None = None          # a chunked round's running sums over its chunks of the same (shared by them)

    @property
    def n(self) -> int:
        return len(self.S)

    @functools.cached_property
    def view(self) -> RoundView:
        """The read-only face of this round that the parts see (trainers/views.py): built once per round (each
        chunk of a chunked round has its own RoundCtx), not at every local step."""
        return RoundView(self)

    def add(self, name: str, v: torch.Tensor) -> None:
        """Per-client values v [n, ...] that the server step reads as their sum or mean over the round's active
        clients (``total``, ``mean``): kept as they are in a round of all active clients at once, or added to the
        round's running sum by each chunk of a chunked round (Run.chunks), so no [n, P] tensor outlives a chunk."""
        if self.sums is None:
            self.per[name] = v
        elif name in self.sums:
            self.sums[name].add_(v.sum(0))
        else:
            self.sums[name] = v.sum(0)

    def total(self, name: str) -> torch.Tensor:
        """The sum over the round's active clients of what ``add`` was given under ``name``."""
        return self.per[name].sum(0) if self.sums is None else self.sums[name]

    def mean(self, name: str) -> torch.Tensor:
        """The mean over the round's active clients of what ``add`` was given under ``name`` (on the round's ctx)."""
        return self.per[name].mean(0) if self.sums is None else self.sums[name] / self.n

    def take(self, rows: torch.Tensor, host: list, Kmin: int) -> "RoundCtx":
        """The round restricted to the clients at ``rows`` (``host``: the same as Python ints), all of which step
        until step ``Kmin``: S, K, batches, draws, x0 and the BatchNorm buffers as their rows (gathered), so its
        steps take every row and no masks (the parts' per-client round constants: Algorithm.take)."""
        h = torch.tensor(host, dtype=torch.long)
        sub = lambda v: None if v is None else v.index_select(0, rows)      # noqa: E731
        return dataclasses.replace(
            self, S=self.S[h], K=self.K[h], batches=[self.batches[j] for j in host], aug=sub(self.aug),
            x0=sub(self.x0), active=None, all_on=True, rows=None, rows_host=None, K_dev=self.K_dev[rows], Kmin=Kmin,
            act=self.act.index_select(1, rows), row_at={}, sizes=[self.sizes[j] for j in host],
            S_dev=self.S_dev[rows], I=self.I.index_select(0, rows), W=sub(self.W), buf=sub(self.buf), segs=[])


def with_dataset(cfg: RunConfig, dataset: Dataset | None) -> RunConfig:
    """The config a run records: data passed from memory (``Dataset.from_tensors``) is named ``memory:<name>``."""
    if dataset is not None and dataset.name.startswith("memory:") and cfg.dataset != dataset.name:
        return dataclasses.replace(cfg, dataset=dataset.name)
    return cfg


def resident(x: torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Inputs as a run holds them: on its device, in its dtype, images channels-last (~25% faster convolutions on
    the CPU, measured). A tensor already so is returned as it is (a pack's runs share one copy: trainers/pack.py)."""
    x = x.to(dtype=dtype, device=device)
    return x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x


def check_precision(precision: str, device: torch.device) -> None:
    """--precision's device rule (its choices are RunConfig's): TF32 exists only on CUDA."""
    if precision == "tf32" and device.type != "cuda":
        raise UserError("--precision tf32: TF32 is a CUDA matmul mode; use fp32 or bf16 on the CPU")


class Run:
    """Everything a run needs: data on the device, the model as a pure function of a flat vector, state."""

    def __init__(self, cfg: RunConfig, algo=None, dataset: Dataset | None = None, init=None):
        """``init``: start weights as a state dict (name -> tensor) or a path (see ``--init``); None takes
        ``cfg.init``; False starts from the seeded initialisation even if ``cfg.init`` is set (a resume)."""
        self.cfg = cfg = with_dataset(cfg, dataset).validate()
        self.algo = algo or build(cfg)
        self.dtype, self.device = DTYPES[cfg.dtype], resolve(cfg.device)
        # ---- data, resident on the device -------------------------------------------------------
        self.ds = dataset or load_dataset(cfg.dataset, data_dir=cfg.data_dir, seed=cfg.seed)
        self.part = self._partition()
        if cfg.het_noise:                            # FedInit Sec. 5.1's noise: a new x_train (a pack's stays shared)
            self.ds = heterogeneity_noise(self.ds, self.part.indices, cfg.het_noise,
                                          generator(cfg.seed, purpose="noise"))
        dev = dict(device=self.device)
        self.X, self.Xte = (resident(t, self.dtype, self.device) for t in (self.ds.x_train, self.ds.x_test))
        self.Y = self.ds.y_train.to(**dev)
        if self.device.type == "cpu" and self.ds.x_train.dtype == self.dtype:   # one copy of the images, not two
            self.ds = dataclasses.replace(self.ds, x_train=self.X, x_test=self.Xte)
        self.Yte = self.ds.y_test.to(**dev)
        self.idx = [torch.as_tensor(ix, dtype=torch.long) for ix in self.part.indices]    # host: batches are drawn
        self.n_i = torch.tensor([len(ix) for ix in self.part.indices])
        if (self.n_i == 0).any():
            raise UserError(f"--clients: {int((self.n_i == 0).sum())} client(s) got no data with partition "
                            f"{cfg.partition!r}; use fewer clients or a larger --dir-alpha")
        # ---- model as f(theta, x) -----------------------------------------------------------------
        self.model = build_model(cfg.model, tuple(self.ds.input_shape), self.ds.n_classes,
                                 seed=generator(cfg.seed, purpose="init"), **cfg.model_kwargs)
        self.model.to(dtype=self.dtype, **dev)
        self.space = ParamSpace.of_model(self.model)
        self.bspace = ParamSpace.buffers_of(self.model)
        self.w = self.space.flatten(dict(self.model.named_parameters())).detach().clone()
        self.buf = self.bspace.flatten(dict(self.model.named_buffers())).detach().clone() \
            if self.bspace.P else torch.zeros(0, dtype=self.dtype, **dev)
        self._int_bufs = {n: b for n, b in self.model.named_buffers() if not b.is_floating_point()}
        # f(named params, x, flat buffers): built once; the engine always passes the parameters as named tensors
        # (unflattened with run.space, which FedALS and a resume may replace by an equal layout)
        self._f = functional(self.model, self.space, bspace=self.bspace)
        if init is not None and init is not False and cfg.init:
            raise UserError(f"--init: given twice ({cfg.init!r} and init=); pass one of them")
        init = cfg.init if init is None else init
        if init:
            self._start_from(load_weights(init) if isinstance(init, (str, os.PathLike)) else init)
        # ---- evaluation subsets (fixed for the run) -------------------------------------------------
        g = generator(cfg.seed, purpose="eval")
        union = torch.cat(self.idx).unique()
        self.eval_train = union[torch.randperm(len(union), generator=g)[:cfg.eval_train_samples]].to(self.device)
        g = generator(cfg.seed, client=0, purpose="eval")
        self.eval_test = torch.randperm(len(self.Yte), generator=g)[:cfg.eval_samples].to(self.device)
        # ---- state ------------------------------------------------------------------------------
        self.m = len(self.idx)
        self.t = 0                                   # rounds completed
        self.n_grads = 0                             # forward/backward passes, for the mechanics tests
        self.callbacks: list = []                    # cb(event, RunView, StepView, x): trainers/views.py
        self.view = RunView(self)                    # what callbacks see of this run
        self.face = PartView(self)                   # what the algorithm's parts see of it (trainers/views.py)
        self.out = None                              # the run directory of the latest train() call, if any
        self.trainer = None                          # the loop that trained it (loop.train sets it): Run.advance
        self.last_row = None                         # the latest metrics row
        self.marked = False                          # a divergence marked in metrics.jsonl (--on-divergence continue)
        self.loss = F.cross_entropy                  # loss(output, labels); swapped for exact toy checks
        self._scratch, self._flip = {}, 0            # work buffers reused across steps (Run.scratch)
        self._stage = {}                             # host staging buffers for --state-device cpu (Run.rows, put)
        self.parallel = cfg.client_parallel
        if self.parallel == "auto":                  # vmap, except: BatchNorm statistics, or convolutions on a CPU
            conv = any(isinstance(mod, torch.nn.modules.conv._ConvNd) for mod in self.model.modules())
            self.parallel = "loop" if self.bspace.P or (conv and self.device.type == "cpu") else "vmap"
        if self.parallel == "vmap" and self.bspace.P:
            raise UserError("--client-parallel vmap: this model has BatchNorm running statistics; vmap over clients "
                            "needs a model without them (use --client-parallel loop, or a GroupNorm model)")
        if cfg.compile and self.parallel != "vmap":
            raise UserError("--compile: compiles the vmapped step of all active clients; it needs --client-parallel "
                            f"vmap (this run resolved to {self.parallel})")
        self._vfns = {}                              # the vmapped gradient per batch kind, built once (_vgrad)
        self.batched_grad = None                     # opt-in (exact toys): fn(params, xb, yb, W) used by _vgrad
        self.batcher = None                          # a pack's gathered gradient call (trainers/pack.py), or None
        self.n_compiles, self._warned = 0, False     # --compile: graphs compiled so far (_counted)
        self._n_pad = (None, 0)                      # --compile: (rounds, largest active set) (n_pad)
        self.cfg = dataclasses.replace(cfg, client_parallel=self.parallel)      # the resolved choice is recorded
        keep = cfg.keep_clients or self.algo.needs_last_local        # RI and FedALS read it; hooks: keep_last_local
        check_precision(cfg.precision, self.device)
        if cfg.precision == "tf32":                   # process-wide switch, set only when asked for
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        self.autocast = torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=cfg.precision == "bf16")
        self.state_device = self.device if cfg.state_device == "run" else torch.device("cpu")
        self.last_local = self.table().copy_(self.w) if keep else None
        self.last_round = torch.full((self.m,), -1, dtype=torch.long, device=self.device)
        if any(p.state is not None for p in self.algo.parts):   # its parts hold one run's state
            raise ValueError("Run(algo=...): this Algorithm already belongs to another Run; build one per run")
        for p in self.algo.parts:                    # each part's declared state (trainers/state.py), on its device
            p.state = allocate(self, p.name, p.slots)
        self.algo.init(self)
        self.chunk = self._chunk()
        if self.chunk is not None:                   # the plan's chunk is recorded, as the parallel mode is
            self.cfg = dataclasses.replace(self.cfg, client_chunk=self.chunk)

    @property
    def state(self):
        """Every part's state by name (read-only mapping; names are unique within an algorithm): what a checkpoint
        saves as ``algo_state``. A part writes its own, ``part.state``."""
        return MappingProxyType(dict(self.algo.state_items()))

    def _chunk(self) -> int | None:
        """How many active clients a round trains at once (Run.chunks): --client-chunk, or the memory plan's choice
        from the memory this process may use (plan.py); None: all of them (the round of every active client at once,
        with no per-round cost beyond planning it here, once per run)."""
        if not self.algo.chunkable:
            return None
        from ..plan import plan
        return plan(self.cfg, dataset=self.ds, running=True).chunk

    # ---------------------------------------------------------------------------------------------
    def _partition(self):
        cfg = self.cfg
        labels = self.ds.y_train.numpy()
        if cfg.partition == "natural":
            if cfg.holdout:
                raise UserError("--holdout: the natural partition's clients come from the data; hold out none")
            if self.ds.natural_clients is None:
                raise UserError(f"--partition natural: dataset {cfg.dataset!r} has no natural clients")
            from ..data import Partition
            ix = [np.asarray(a, dtype=np.int64) for a in self.ds.natural_clients]
            counts = np.stack([np.bincount(labels[a], minlength=self.ds.n_classes) for a in ix])
            return Partition(ix, counts)
        keep = np.arange(len(labels))
        if cfg.holdout:                              # a validation split: on no client, evaluated in each row
            if cfg.holdout >= len(labels):
                raise UserError(f"--holdout: {cfg.holdout} is not below the {len(labels)} training samples")
            perm = torch.randperm(len(labels), generator=generator(cfg.seed, purpose="holdout")).numpy()
            self.holdout_idx = torch.as_tensor(np.sort(perm[:cfg.holdout]), dtype=torch.long)
            keep = np.sort(perm[cfg.holdout:])
            labels = labels[keep]
        if cfg.clients > len(labels):
            raise UserError(f"--clients: {cfg.clients} clients exceed the {len(labels)} training samples")
        opts = {"alpha": cfg.dir_alpha, "replacement": cfg.replacement, "min_size": cfg.min_size,
                "classes_per_client": cfg.classes_per_client, "shards_per_client": cfg.shards_per_client}
        allowed = PARTITION_OPTIONS.get(cfg.partition, ())
        part = partition(cfg.partition, labels, cfg.clients, self.ds.n_classes, cfg.seed,
                         **{k: v for k, v in opts.items() if k in allowed})
        return dataclasses.replace(part, indices=[keep[ix] for ix in part.indices]) if cfg.holdout else part

    def _start_from(self, sd: dict) -> None:
        """w (and float buffers) from the state dict ``sd``, checked name by name and shape by shape."""
        if not isinstance(sd, dict):
            raise UserError(f"--init: expected a state dict (name -> tensor), got {type(sd).__name__}")
        need = {l.name: l.shape for l in (*self.space.layers, *self.bspace.layers)}
        said = misfit(sd, need, ignore=self._int_bufs)
        if said:
            raise UserError(f"--init: the state dict does not fit model {self.cfg.model!r}: it {'; it '.join(said)}; "
                            f"give weights of this model (same --model, --model-kwargs and data shape)")
        if not all(sd[n].is_floating_point() and torch.isfinite(sd[n]).all() for n in need):
            raise UserError("--init: the weights hold non-floating or non-finite values")
        dev = dict(dtype=self.dtype, device=self.device)
        self.w = self.space.flatten(sd).to(**dev).detach().clone()
        if self.bspace.P:
            self.buf = self.bspace.flatten(sd).to(**dev).detach().clone()

    def keep_last_local(self, who: str) -> None:
        """From now on keep every client's last local model (``who`` reads it): w^0 for all before round 1; a run
        already past round 0 that did not keep them cannot recover them, which is said in one line."""
        if self.last_local is not None:
            return
        if self.t == 0:
            self.last_local = self.table().copy_(self.w)
        else:
            print(f"warning: {who} reads every client's last local model, which this run did not keep before round "
                  f"{self.t}; what needs them is left out (train with --keep-clients true from round 0)",
                  file=sys.stderr)

    def zeros(self, *lead) -> torch.Tensor:
        return torch.zeros(*lead, self.space.P, dtype=self.dtype, device=self.device)

    def table(self) -> torch.Tensor:
        """A per-client state table [m, P] (SCAFFOLD c_i, FedDyn h_i, ...) on --state-device: the run's device, or
        host memory (pinned when the run is on CUDA) with the active rows moved per round."""
        return torch.zeros(self.m, self.space.P, dtype=self.dtype, device=self.state_device)   # staged: Run.rows

    def rows(self, table: torch.Tensor, S: torch.Tensor) -> torch.Tensor:
        """The rows S of a state table, on the run's device (a new tensor). A host table (--state-device cpu) is
        gathered with ``index_select`` into a staging buffer reused across rounds (pinned where the run is on CUDA)
        and copied without waiting."""
        if table.device.type == self.device.type:    # (a table on 'cuda:0' is on the run's 'cuda')
            return torch.index_select(table, 0, S if S.device == table.device else self.dev(S))
        buf = self._staging("get", table, len(S))
        torch.index_select(table, 0, S.cpu(), out=buf)
        out = buf.to(self.device, non_blocking=True)
        self._staged(buf)
        return out

    def put(self, table: torch.Tensor, S: torch.Tensor, v: torch.Tensor) -> None:
        """table[S] = v, across devices (a host table: through a reused staging buffer, then ``index_copy_``)."""
        if table.device == v.device:
            table[S if S.device == table.device else self.dev(S)] = v
            return
        buf = self._staging("put", table, len(S))
        buf.copy_(v, non_blocking=True)
        if v.device.type == "cuda":                  # the host reads buf next: wait for this copy (once per round)
            torch.cuda.current_stream(v.device).synchronize()
        table.index_copy_(0, S.cpu(), buf)

    def _staging(self, kind: str, table: torch.Tensor, n: int) -> torch.Tensor:
        """A host buffer [n, P] for ``table``'s rows, kept across rounds (grown when a round has more clients);
        pinned when the run is on CUDA; a copy still reading it from an earlier round is waited for first."""
        key = (kind, table.data_ptr())
        buf, event = self._stage.get(key, (None, None))
        if event is not None:
            event.synchronize()
        if buf is None or len(buf) < n:
            buf = torch.empty(max(n, 1), *table.shape[1:], dtype=table.dtype,
                              pin_memory=self.device.type == "cuda")
        self._stage[key] = (buf, None)
        return buf[:n]

    def _staged(self, view: torch.Tensor) -> None:
        """Mark the staging buffer under ``view`` as read by an asynchronous copy (CUDA): waited for at reuse."""
        if self.device.type != "cuda":
            return
        for key, (buf, _) in self._stage.items():
            if buf.data_ptr() == view.data_ptr():
                event = torch.cuda.Event()
                event.record(torch.cuda.current_stream(self.device))
                self._stage[key] = (buf, event)

    def lr_at(self, t: int) -> float:
        return self.cfg.lr * self.cfg.lr_decay ** t

    # ---- client sampling and minibatches (sampling.py) -------------------------------------------------
    def sample_clients(self, t: int) -> torch.Tensor:
        return sampling.sample_clients(self.cfg, self.m, t)

    def local_steps(self, i: int) -> int:
        return sampling.local_steps(self.cfg, int(self.n_i[i]), self.algo.K)

    def batches(self, t: int, i: int, K: int) -> list[torch.Tensor]:
        return sampling.batches(self.cfg, self.idx[i], t, i, K)

    def round_ctx(self, t: int) -> RoundCtx:
        """Round t's clients, step counts, minibatches and step tables (and augmentation draws), from the host."""
        S = self.sample_clients(t)
        K = torch.tensor([self.local_steps(int(i)) for i in S])
        batches = [self.batches(t, int(i), int(k)) for i, k in zip(S, K)]
        ctx = RoundCtx(t, S, self.lr_at(t), self.w.clone(), K, batches)
        self._steps(ctx)
        if self.cfg.augment and self.ds.augmentable:     # one draw per client per round, shared by both modes
            ctx.aug = self.dev(sampling.aug_table(self.cfg.seed, t, S, batches, *ctx.I.shape[1:]))
        return ctx

    def _steps(self, ctx: RoundCtx) -> None:
        sampling.step_tables(ctx, self.dev, self.dtype)

    def dev(self, t: torch.Tensor) -> torch.Tensor:
        """A host tensor on the run's device, copied without waiting (no host sync on CUDA)."""
        return t.to(self.device, non_blocking=True)

    def set_step(self, ctx: RoundCtx, k: int) -> None:
        """Step k's active clients: every one while k < min K_i (no masks), else those with K_i > k."""
        ctx.k, ctx.all_on = k, k < ctx.Kmin
        self._flip = 0                               # a step's first gradient in buffer 1, SAM's second in 0
        ctx.active = ctx.act[k]
        ctx.rows, ctx.rows_host = ctx.row_at.get(k, (None, None))

    # ---- the model as a function --------------------------------------------------------------------
    def forward(self, theta: torch.Tensor, x: torch.Tensor, buf: torch.Tensor | None = None) -> torch.Tensor:
        return self._call(self.space.unflatten(theta), x, buf)

    def _call(self, tensors: dict, x: torch.Tensor, buf: torch.Tensor | None = None) -> torch.Tensor:
        return self._f(tensors, x, (self.buf if buf is None else buf) if self.bspace.P else None)

    def batch(self, ctx: RoundCtx, j: int, k: int):
        """Client S[j]'s minibatch at step k (its real samples, augmented with the round's draws)."""
        ix = ctx.I[j, k, :ctx.sizes[j][k]]           # the device copy of ctx.batches[j][k]
        xb = self.X[ix]
        if ctx.aug is not None:
            xb = aug_apply(xb, ctx.aug[j, k, :, :len(ix)])
        return xb, self.Y[ix]

    def step_data(self, ctx: RoundCtx, k: int):
        """Step k's minibatches of the active clients, once (SAM's two passes share them): a list of (x, y) per
        active client (loop), or stacked [n_act, B, ...] tensors with mean-loss weights or None (vmap)."""
        if self.parallel == "loop":
            return [self.batch(ctx, j, k) for j in (range(ctx.n) if ctx.all_on else ctx.rows_host)]
        if self.cfg.compile:                         # one fixed shape: every row, padded to the run's largest set
            fixed = self._fixed(ctx)
            I, A, W = fixed["I"][k], None if ctx.aug is None else fixed["aug"][k], fixed["W"][k]
        else:
            I = ctx.I[:, k] if ctx.all_on else ctx.I[ctx.rows, k]
            A = None if ctx.aug is None else ctx.aug[:, k] if ctx.all_on else ctx.aug[ctx.rows, k]   # [n_act, 3, B]
            W = None
            if ctx.W is not None and ctx.padded[k]:
                W = ctx.W[:, k] if ctx.all_on else ctx.W[ctx.rows, k]
        if self.X.is_contiguous():                   # a gather into a reused buffer: ~3x faster than X[I] (same copy)
            xb = torch.index_select(self.X, 0, I.reshape(-1), out=self.scratch("xb", self.X, rows=I.numel()))
            xb = xb.view(*I.shape, *self.X.shape[1:])
        else:                                        # channels-last images: X[I] keeps their layout
            xb = self.X[I]
        if A is not None:
            xb = aug_apply(xb.flatten(0, 1), A.transpose(0, 1).flatten(1)).view(xb.shape)
        return xb, self.Y[I], W

    def n_pad(self) -> int:
        """--compile's row count: the largest active set of the run's rounds, so the compiled step sees one shape in
        every round."""
        if self._n_pad[0] != self.cfg.rounds:
            self._n_pad = (self.cfg.rounds, sampling.largest_active_set(self.cfg, self.m))
        return self._n_pad[1]

    def _fixed(self, ctx: RoundCtx) -> dict:
        """The round's --compile batch tables (sampling.fixed_tables), padded to ``n_pad`` rows (or the chunk's)."""
        if ctx.fixed is None:
            N = max(self.n_pad() if self.chunk is None else min(self.n_pad(), self.chunk), ctx.n)
            ctx.fixed = sampling.fixed_tables(ctx, N, self.dtype, self.device)
        return ctx.fixed

    def grads(self, ctx: RoundCtx, x: torch.Tensor, k: int, data=None) -> torch.Tensor:
        """Minibatch loss gradients of the active clients at their points x [n, P] (rows of inactive clients
        are zero). ``data`` reuses the minibatches of an earlier call in the same step (SAM's second pass).
        The gradient is taken with respect to per-parameter leaves (views of x), and concatenated once."""
        data = self.step_data(ctx, k) if data is None else data
        if not self.model.training:                   # train() walks every module: 2 calls a step for SAM
            self.model.train()
        with self.autocast:
            return self._grads(ctx, x, data)

    def scratch(self, name: str, like: torch.Tensor, rows: int | None = None) -> torch.Tensor:
        """A persistent work buffer shaped like ``like`` (fresh [n, P] tensors cost page faults on every step).
        The gradient buffers alternate (``grads`` returns buffer 0, 1, 0, ...), so a gradient stays valid through
        the next call in the same step (SAM's two passes), not across steps: a part that keeps one copies it."""
        b = self._scratch.get(name)
        shape = like.shape if rows is None else (rows, *like.shape[1:])
        if b is None or b.shape[1:] != shape[1:] or len(b) < shape[0] or b.dtype != like.dtype or \
                b.device != like.device:
            b = self._scratch[name] = like.new_empty(shape)
        return b[:shape[0]]                          # fewer rows (a later run of steps, a smaller round): a prefix

    def spare(self, like: torch.Tensor) -> torch.Tensor:
        """After the local steps: the latest gradient's buffer, consumed by its step and free until the next round
        (the round's end writes Delta_i there instead of into a fresh [n, P] tensor)."""
        return self.scratch(f"grad{self._flip}", like)

    def release(self, ctx: RoundCtx) -> None:
        """Drop the finished round's [n, P] tensors (the algorithm's round constants, Delta_i, the start points)
        and the work buffers, so evaluation and the checkpoint do not hold them (train's loop calls it)."""
        self.algo.clear()
        ctx.buf, ctx.fixed, ctx.x0, ctx.delta, ctx.per = None, None, None, None, {}
        if ctx.sums is not None:                     # a chunked round's sums
            ctx.sums = {}
        self._scratch.clear()

    def _grads(self, ctx: RoundCtx, x: torch.Tensor, data) -> torch.Tensor:
        self._flip ^= 1
        out = self.scratch(f"grad{self._flip}", x)
        fixed = self.parallel == "vmap" and self.cfg.compile       # all rows: those past K_i get zero weights
        if not (ctx.all_on or fixed):
            out.zero_()
        rows = None if ctx.all_on or fixed else ctx.rows
        xa = x.detach() if rows is None else x.detach()[rows]
        if fixed:                                    # rows beyond n: copies of row 0, weights 0, results dropped
            N = len(data[2])
            xp = self.scratch("x_pad", x, rows=N)
            xp[:len(x)] = xa
            xp[len(x):] = xa[:1]
            g = self._vgrad(self.space.unflatten(xp), *data)
            torch.cat([v[:len(x)].flatten(1) for v in g.values()], 1, out=out)
            self.n_grads += len(x)
            return out
        if self.parallel == "vmap":
            if self.batcher is not None:             # one call with the other runs of its pack (trainers/pack.py)
                flat = self.batcher.grad(self, xa, *data)
                out.copy_(flat) if rows is None else out.index_copy_(0, rows, flat)
            else:
                g = self._vgrad(self.space.unflatten(xa), *data)
                if rows is None:
                    torch.cat([v.flatten(1) for v in g.values()], 1, out=out)
                else:
                    out[rows] = torch.cat([v.flatten(1) for v in g.values()], 1)
            self.n_grads += len(xa)
            return out
        for r, (xb, yb) in enumerate(data):
            j = r if rows is None else ctx.rows_host[r]
            leaves = {n: v.requires_grad_() for n, v in self.space.unflatten(xa[r]).items()}
            buf = ctx.buf[j] if self.bspace.P else None
            loss = self.loss(self._call(leaves, xb, buf), yb)
            torch.cat([v.flatten() for v in torch.autograd.grad(loss, list(leaves.values()))], out=out[j])
            self.n_grads += 1
        return out

    def _vgrad(self, params, xb, yb, W):
        """Per-client gradients of all active clients in one vmapped call; the transform is built once per batch
        kind (full, or padded with weights), not at every step, and compiled once with --compile. A supplied
        ``batched_grad`` (closed-form gradients of a toy, same arguments and result) is called instead."""
        if self.batched_grad is not None:
            return self.batched_grad(params, xb, yb, W)
        key = W is None
        fn = self._vfns.get(key)
        if fn is None:                               # self.loss is looked up at call time: toys may swap it
            if key:
                f = lambda p, xb, yb: self.loss(self._call(p, xb), yb)                     # noqa: E731
            else:
                f = lambda p, xb, yb, w: (self.loss(self._call(p, xb), yb, reduction="none") * w).sum()  # noqa: E731
            fn = torch.func.vmap(torch.func.grad(f))
            fn = self._vfns[key] = torch.compile(fn, backend=self._counted) if self.cfg.compile else fn
        return fn(params, xb, yb) if key else fn(params, xb, yb, W)

    def _counted(self, gm, example_inputs):
        """torch.compile's inductor backend, counting compiles (``n_compiles``); warns once where torch._dynamo's
        recompile limit is reached, after which it would run the step eagerly without a word."""
        self.n_compiles += 1
        limit = getattr(torch._dynamo.config, "recompile_limit", None) or torch._dynamo.config.cache_size_limit
        if self.n_compiles >= limit and not self._warned:
            self._warned = True
            print(f"warning: --compile: the step was compiled {self.n_compiles} times (torch._dynamo's recompile "
                  f"limit {limit}); shapes beyond it run eagerly", file=sys.stderr)
        return torch._dynamo.lookup_backend("inductor")(gm, example_inputs)

    def step(self, ctx: RoundCtx, x: torch.Tensor, d: torch.Tensor, decay: float) -> None:
        """x <- x (1 - eta c) - eta clip(d) in place (two passes over the active rows); clients past their own
        K_i stay put. clip(d) = d min(1, C / (||d|| + 1e-6)) row-wise."""
        keep, s = 1.0 - ctx.lr * decay, -ctx.lr
        if not ctx.all_on:
            d = d[ctx.rows]
        if self.cfg.clip > 0 and not self.cfg.local_momentum:          # with momentum, its part clipped d
            s = torch.clamp(self.cfg.clip / (d.norm(dim=1, keepdim=True) + 1e-6), max=1.0).mul_(-ctx.lr)
        xa = x if ctx.all_on else x[ctx.rows]
        if keep != 1.0:
            xa.mul_(keep)
        xa.addcmul_(d, s) if torch.is_tensor(s) else xa.add_(d, alpha=s)
        if not ctx.all_on:
            x[ctx.rows] = xa

    # ---- one round --------------------------------------------------------------------------------
    def segments(self, ctx: RoundCtx, x: torch.Tensor):
        """The round's local steps as runs with one set of active clients: (ctx, x, first step, end step). Steps
        below min K_i take every client. Past it, where no callback watches the steps and the step's shape is free
        (no --compile), each run (ctx.segs) works on its clients' rows, gathered once into a reused buffer
        (RoundCtx.take, Algorithm.take) and written back after it with the per-client values the run kept: a step
        then takes no masks and moves no rows. Otherwise the masked step of ctx.rows (callbacks read x and the
        perturbation whole; --compile steps every row). The same arithmetic either way: each row's numbers are
        unchanged."""
        if self.callbacks or self.cfg.compile or not ctx.segs:
            yield ctx, x, 0, int(ctx.K.max())
            return
        yield ctx, x, 0, ctx.Kmin
        for a, b, rows, host in ctx.segs:
            c = ctx.take(rows, host, b)
            taken = self.algo.take(rows, host, ctx.n)
            xc = torch.index_select(x, 0, rows, out=self.scratch("x_seg", x, rows=len(host)))
            yield c, xc, a, b
            x.index_copy_(0, rows, xc)
            if c.buf is not None:                    # the clients' BatchNorm buffers (updated in place): back
                ctx.buf.index_copy_(0, rows, c.buf)
            self.algo.put_back(taken, rows)

    def round(self) -> RoundCtx:
        """One round: the client side (``clients``) for all active clients at once, or, where ``Run.chunk`` is
        smaller than the active set, for one chunk of them after the other (``chunks``); then the server step,
        which reads the clients' values through ``RoundCtx.total`` / ``mean`` (sums over the chunks)."""
        algo = self.algo
        for cb in self.callbacks:                    # a hook that reads the clients' last local models asks for them
            if self.last_local is None and getattr(cb, "needs_last_local", False):
                self.keep_last_local(f"the {getattr(cb, 'name', 'probe')} hook")
        ctx = self.round_ctx(self.t)
        if self.chunk is None or ctx.n <= self.chunk or self.callbacks:      # callbacks read every client's x
            x = self.clients(ctx)
        else:
            ctx.sums, x = {}, None                   # the server step reads the sums only
            for c in self.chunks(ctx):
                self.clients(c)
                algo.clear()                         # this chunk's [C, P] tensors go before the next's
                c.buf, c.fixed, c.x0, c.delta = None, None, None, None
        w_new = algo.aggregate(self.face, ctx, x)
        algo.server_end(self.face, ctx, x, w_new)
        self.w = w_new
        if self.bspace.P:
            self.buf = ctx.mean("buf")
        self.last_round.index_fill_(0, ctx.S_dev, self.t)
        self.t += 1
        step = StepView((ctx, algo))
        for cb in self.callbacks:
            cb("round", self.view, step, x)
        return ctx

    def clients(self, ctx: RoundCtx) -> torch.Tensor:
        """The client side of a round for ctx's clients: start points, local steps, client_end (Delta_i, the
        clients' tables, what the server reads: ``RoundCtx.add``), last local models; returns x [n, P]."""
        algo = self.algo
        if self.bspace.P:
            ctx.buf = self.buf.expand(ctx.n, -1).clone()
        x = algo.start(self.face, ctx)
        ctx.x0 = x.clone() if algo.needs_x0 or self.callbacks else None    # [n, P]: only where something reads it
        algo.round_start(self.face, ctx)
        step = StepView((ctx, algo)) if self.callbacks else None
        for c, xc, a, b in self.segments(ctx, x):
            for k in range(a, b):
                self.set_step(c, k)
                g = algo.gradient(self.face, c, xc, k)
                d, decay = algo.direction(self.face, c, xc, g)
                self.step(c, xc, d, decay)
                algo.after_step(self.face, c, xc)
                for cb in self.callbacks:            # callbacks: one run of all steps (segments), c is ctx
                    cb("step", self.view, step, xc)
        algo.client_end(self.face, ctx, x)
        if self.bspace.P:
            ctx.add("buf", ctx.buf)
        if self.last_local is not None:
            self.put(self.last_local, ctx.S, x)
        return x

    def chunks(self, ctx: RoundCtx):
        """The round's active clients in chunks of at most ``Run.chunk`` (in the order of S), each a round of its
        own clients (their step counts, minibatches and draws, as ``round_ctx`` drew them) adding to ctx's sums."""
        for a in range(0, ctx.n, self.chunk):
            h = list(range(a, min(a + self.chunk, ctx.n)))
            c = RoundCtx(ctx.t, ctx.S[h], ctx.lr, ctx.w, ctx.K[h], [ctx.batches[j] for j in h], sums=ctx.sums)
            self._steps(c)
            if ctx.aug is not None:                  # the round's draws of these clients, cut to their batch table
                c.aug = ctx.aug[a:a + len(h), :c.I.shape[1], :, :c.I.shape[2]]
            yield c

    # ---- evaluation ---------------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, X: torch.Tensor, Y: torch.Tensor, theta: torch.Tensor | None = None, bs: int | None = None):
        bs = bs or (4096 if self.device.type == "cuda" else 1000)      # large batches; evaluation holds no graph
        theta = self.w if theta is None else theta
        if self.batcher is not None and self.parallel == "vmap":        # with the other runs of its pack (pack.py)
            return self.batcher.evaluate(self, X, Y, theta, bs)
        self.model.eval()
        loss = correct = 0.0
        for s in range(0, len(X), bs):
            out = self.forward(theta, X[s:s + bs])
            loss += F.cross_entropy(out, Y[s:s + bs], reduction="sum").item()
            correct += (out.argmax(1) == Y[s:s + bs]).sum().item()
        return loss / len(X), correct / len(X)

    def metrics(self, seconds: float, ctx: RoundCtx, full: bool = True) -> dict:
        """The round's row; the test numbers on the whole test set, or (``full=False``) on the fixed subsample
        ``eval_test`` (--eval-samples). ``test_samples`` says which."""
        tr = self.evaluate(self.X[self.eval_train], self.Y[self.eval_train])
        Xte, Yte = (self.Xte, self.Yte) if full or not len(self.eval_test) else \
            (self.Xte[self.eval_test], self.Yte[self.eval_test])
        te = self.evaluate(Xte, Yte)
        row = {"round": self.t, "lr": ctx.lr, "train_loss": tr[0], "train_acc": tr[1], "test_loss": te[0],
               "test_acc": te[1], "test_samples": len(Yte), "n_active": ctx.n, "seconds": seconds}
        if self.cfg.holdout:
            ho = self.evaluate(self.X[self.holdout_idx.to(self.device)], self.Y[self.holdout_idx.to(self.device)])
            row.update(holdout_loss=ho[0], holdout_acc=ho[1])
        row.update(self.algo.comm(self.face, ctx))
        return row

    # ---- continuing in memory ------------------------------------------------------------------
    def advance(self, rounds: int, out=None, callbacks=()) -> "Run":
        """Train ``rounds`` more rounds in place, exactly as one longer run (metrics and checkpoints go to ``out``,
        by default the directory of the previous ``train`` call). ``run.advance(3)`` twice equals 6 rounds."""
        if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
            raise UserError(f"advance: rounds must be an integer >= 1 (got {rounds!r})")
        if self.trainer is None:
            raise UserError("advance: this Run was built directly, not by train(); continue it with "
                            "fedlab_analysis.trainers.loop.train(cfg, run=run)")
        cfg = dataclasses.replace(self.cfg, rounds=self.t + rounds)
        return self.trainer(cfg, self.out if out is None else out, callbacks=callbacks, run=self)

    # ---- state for checkpoints ---------------------------------------------------------------------
    def spec(self) -> dict:
        return model_spec(self.model)

    @property
    def state_tables(self) -> tuple:
        """The names of the per-client [m, P] state tables the algorithm's parts declare."""
        return tuple(self.algo.tables)
