"""The round engine: one loop for every algorithm (DESIGN.md decisions 2 and 3).

A round, top to bottom:
    S        = sample_clients(t)                       bernoulli (the simulator) or fixed
    x        = algo.start(run, ctx)                    [n_active, P]: w, RI's w + beta (w - w_i^last), FedALS'
    for k in range(max K_i):                           lock-step: all active clients advance step k together
        g    = algo.gradient(run, ctx, x, k)            plain, SAM, FedSMOO's corrected ascent, FedLESAM's estimate
        d    = algo.direction(run, ctx, x, g)           + prox / SCAFFOLD / FedDyn terms, FedCM mixing
        x   -= lr * (clip(d) + post-clip terms)         clients past their own K_i are masked out
        algo.after_step(...); callbacks('step', ...)    FedALS synchronisation; probes watching local steps
    algo.client_end -> w = algo.aggregate -> algo.server_end; callbacks('round', ...)
All algorithm state lives in ``run.state`` as flat tensors or [m, P] tables.
"""
from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from ..checkpoint import load_weights
from ..config import RunConfig
from ..data import Dataset, augment, load_dataset, partition
from ..device import resolve
from ..errors import UserError
from ..models import build_model, model_spec
from ..params import ParamSpace
from .rng import generator

DTYPES = {"float32": torch.float32, "float64": torch.float64}
PARTITION_OPTIONS = {"dirichlet": ("alpha", "replacement"), "labeldir": ("alpha", "min_size"),
                     "pathological": ("classes_per_client", "replacement"), "shards": ("shards_per_client",)}


@dataclass
class RoundCtx:
    """What one round knows: the active clients, their step counts and minibatches, the learning rate."""
    t: int
    S: torch.Tensor                   # active client ids, sorted, long [n]
    lr: float
    w: torch.Tensor                   # global model at the start of the round [P]
    K: torch.Tensor                   # local steps per active client, long [n]
    batches: list[list[torch.Tensor]]  # batches[j][k] = data indices of client S[j] at step k
    aug_gens: list | None = None
    x0: torch.Tensor | None = None    # local start points [n, P]
    k: int = 0                        # current local step
    active: torch.Tensor | None = None  # bool [n]: clients still stepping at step k
    extra: dict = field(default_factory=dict)   # per-round constants of the algorithm

    @property
    def n(self) -> int:
        return len(self.S)


def with_dataset(cfg: RunConfig, dataset: Dataset | None) -> RunConfig:
    """The config a run records: data passed from memory (``Dataset.from_tensors``) is named ``memory:<name>``."""
    if dataset is not None and dataset.name.startswith("memory:") and cfg.dataset != dataset.name:
        return dataclasses.replace(cfg, dataset=dataset.name)
    return cfg


class Run:
    """Everything a run needs: data on the device, the model as a pure function of a flat vector, state."""

    def __init__(self, cfg: RunConfig, algo=None, dataset: Dataset | None = None, init=None):
        """``init``: start weights as a state dict (name -> tensor) or a path (see ``--init``); None takes
        ``cfg.init``; False starts from the seeded initialisation even if ``cfg.init`` is set (a resume)."""
        from . import ALGORITHMS
        self.cfg = cfg = with_dataset(cfg, dataset).validate()
        self.algo = algo or ALGORITHMS[cfg.algo](cfg)
        self.dtype, self.device = DTYPES[cfg.dtype], resolve(cfg.device)
        # ---- data, resident on the device -------------------------------------------------------
        self.ds = dataset or load_dataset(cfg.dataset, data_dir=cfg.data_dir, seed=cfg.seed)
        self.part = self._partition()
        dev = dict(device=self.device)
        self.X = self.ds.x_train.to(dtype=self.dtype, **dev)
        self.Y = self.ds.y_train.to(**dev)
        self.Xte = self.ds.x_test.to(dtype=self.dtype, **dev)
        self.Yte = self.ds.y_test.to(**dev)
        self.idx = [torch.as_tensor(ix, dtype=torch.long, device=self.device) for ix in self.part.indices]
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
        if init is not None and init is not False and cfg.init:
            raise UserError(f"--init: given twice ({cfg.init!r} and init=); pass one of them")
        init = cfg.init if init is None else init
        if init:
            self._start_from(load_weights(init) if isinstance(init, (str, os.PathLike)) else init)
        # ---- evaluation subsets (fixed for the run) -------------------------------------------------
        g = generator(cfg.seed, purpose="eval")
        union = torch.cat(self.idx).unique()
        self.eval_train = union[torch.randperm(len(union), generator=g)[:cfg.eval_train_samples].to(self.device)]
        # ---- state ------------------------------------------------------------------------------
        self.m = len(self.idx)
        self.t = 0                                   # rounds completed
        self.state: dict[str, torch.Tensor] = {}
        self.n_grads = 0                             # forward/backward passes, for the mechanics tests
        self.callbacks: list = []
        self.out = None                              # the run directory of the latest train() call, if any
        self.last_row = None                         # the latest metrics row
        self.loss = F.cross_entropy                  # loss(output, labels); swapped for exact toy checks
        self.use_vmap = cfg.vmap == "on" or (cfg.vmap == "auto" and self.device.type == "cuda" and not self.bspace.P)
        if self.use_vmap and self.bspace.P:
            raise UserError("--vmap on: this model has BatchNorm buffers; vmap over clients needs a model without "
                            "them (use --vmap off, or a GroupNorm model)")
        keep = cfg.keep_clients or self.algo.needs_last_local        # RI and FedALS read it
        self.last_local = self.w.expand(self.m, -1).clone() if keep else None
        self.last_round = torch.full((self.m,), -1, dtype=torch.long, device=self.device)
        self.algo.init(self)

    # ---------------------------------------------------------------------------------------------
    def _partition(self):
        cfg = self.cfg
        labels = self.ds.y_train.numpy()
        if cfg.partition == "natural":
            if self.ds.natural_clients is None:
                raise UserError(f"--partition natural: dataset {cfg.dataset!r} has no natural clients")
            from ..data import Partition
            ix = [np.asarray(a, dtype=np.int64) for a in self.ds.natural_clients]
            counts = np.stack([np.bincount(labels[a], minlength=self.ds.n_classes) for a in ix])
            return Partition(ix, counts)
        if cfg.clients > len(labels):
            raise UserError(f"--clients: {cfg.clients} clients exceed the {len(labels)} training samples")
        opts = {"alpha": cfg.dir_alpha, "replacement": cfg.replacement, "min_size": cfg.min_size,
                "classes_per_client": cfg.classes_per_client, "shards_per_client": cfg.shards_per_client}
        allowed = PARTITION_OPTIONS.get(cfg.partition, ())
        return partition(cfg.partition, labels, cfg.clients, self.ds.n_classes, cfg.seed,
                         **{k: v for k, v in opts.items() if k in allowed})

    def _start_from(self, sd: dict) -> None:
        """w (and float buffers) from the state dict ``sd``, checked name by name and shape by shape."""
        if not isinstance(sd, dict):
            raise UserError(f"--init: expected a state dict (name -> tensor), got {type(sd).__name__}")
        need = {l.name: l.shape for l in (*self.space.layers, *self.bspace.layers)}
        missing = [n for n in need if n not in sd]
        extra = [n for n in sd if n not in need and n not in self._int_bufs]
        wrong = [f"{n} {tuple(sd[n].shape)} (model: {need[n]})" for n in need
                 if n in sd and (not torch.is_tensor(sd[n]) or tuple(sd[n].shape) != tuple(need[n]))]
        for what, names in (("lacks", missing), ("has unknown", extra), ("has wrong shapes for", wrong)):
            if names:
                raise UserError(f"--init: the weights {what} {', '.join(names[:4])}"
                                f"{' ...' if len(names) > 4 else ''} for model {self.cfg.model!r}; give weights "
                                f"of this model (same --model, --model-kwargs and data shape)")
        if not all(sd[n].is_floating_point() and torch.isfinite(sd[n]).all() for n in need):
            raise UserError("--init: the weights hold non-floating or non-finite values")
        dev = dict(dtype=self.dtype, device=self.device)
        self.w = self.space.flatten(sd).to(**dev).detach().clone()
        if self.bspace.P:
            self.buf = self.bspace.flatten(sd).to(**dev).detach().clone()

    def zeros(self, *lead) -> torch.Tensor:
        return torch.zeros(*lead, self.space.P, dtype=self.dtype, device=self.device)

    def lr_at(self, t: int) -> float:
        return self.cfg.lr * self.cfg.lr_decay ** t

    # ---- client sampling and minibatches ----------------------------------------------------------
    def sample_clients(self, t: int) -> torch.Tensor:
        cfg, m = self.cfg, self.m
        g = generator(cfg.seed, t, purpose="sample")
        if cfg.sampling == "fixed" or cfg.active_ratio >= 1:
            n = max(1, round(cfg.active_ratio * m))
            return torch.randperm(m, generator=g)[:n].sort().values
        while True:                                  # the simulator: Bernoulli(p) each, redraw if empty
            on = torch.rand(m, generator=g, dtype=torch.float64) <= cfg.active_ratio
            if on.any():
                return on.nonzero().flatten()

    def local_steps(self, i: int) -> int:
        cfg = self.cfg
        if self.algo.K is not None:
            return self.algo.K
        if cfg.local_steps is not None:
            return cfg.local_steps
        return max(1, round(cfg.local_epochs * math.ceil(int(self.n_i[i]) / cfg.batch_size)))

    def batches(self, t: int, i: int, K: int) -> list[torch.Tensor]:
        """K minibatches of client i in round t: reshuffle every epoch; epochs keep the last partial batch
        (a DataLoader with shuffle=True), --local-steps draws full batches from consecutive permutations."""
        g, ix, B = generator(self.cfg.seed, t, i, "batch"), self.idx[i], self.cfg.batch_size
        n = len(ix)
        out = []
        if self.cfg.local_steps is None:
            while len(out) < K:
                perm = ix[torch.randperm(n, generator=g).to(ix.device)]
                out.extend(perm.split(B))
            return out[:K]
        need = K * min(B, n)
        reps = -(-need // n)
        perm = torch.cat([ix[torch.randperm(n, generator=g).to(ix.device)] for _ in range(reps)])
        return list(perm[:need].split(min(B, n)))

    def round_ctx(self, t: int) -> RoundCtx:
        S = self.sample_clients(t)
        K = torch.tensor([self.local_steps(int(i)) for i in S])
        batches = [self.batches(t, int(i), int(k)) for i, k in zip(S, K)]
        gens = [generator(self.cfg.seed, t, int(i), "augment", self.device) for i in S] \
            if self.cfg.augment and self.ds.augmentable else None
        return RoundCtx(t, S, self.lr_at(t), self.w.clone(), K, batches, gens)

    # ---- the model as a function --------------------------------------------------------------------
    def forward(self, theta: torch.Tensor, x: torch.Tensor, buf: torch.Tensor | None = None) -> torch.Tensor:
        tensors = self.space.unflatten(theta)
        if self.bspace.P:
            tensors.update(self.bspace.unflatten(self.buf if buf is None else buf))
            tensors.update(self._int_bufs)
        return torch.func.functional_call(self.model, tensors, (x,))

    def batch(self, ctx: RoundCtx, j: int, k: int):
        ix = ctx.batches[j][k]
        xb = self.X[ix]
        if ctx.aug_gens is not None:
            xb = augment(xb, ctx.aug_gens[j])
        return xb, self.Y[ix]

    def grads(self, ctx: RoundCtx, x: torch.Tensor, k: int, data=None) -> torch.Tensor:
        """Minibatch loss gradients of the active clients at their points x [n, P] (rows of inactive clients
        are zero). ``data`` reuses the minibatches of an earlier call in the same step (SAM's second pass)."""
        g = torch.zeros_like(x)
        self.model.train()
        js = ctx.active.nonzero().flatten().tolist()
        if self.use_vmap and len(js) > 1:
            batches = [data[j] if data is not None else self.batch(ctx, j, k) for j in js]
            if len({len(b[1]) for b in batches}) == 1:          # equal batch sizes: one vmapped call
                loss = lambda th, xb, yb: self.loss(self.forward(th, xb), yb)  # noqa: E731
                xb, yb = torch.stack([b[0] for b in batches]), torch.stack([b[1] for b in batches])
                g[js] = torch.func.vmap(torch.func.grad(loss))(x[js].detach(), xb, yb)
                self.n_grads += len(js)
                return g
            data = dict(zip(js, batches))                      # unequal sizes this step: fall back to the loop
        for j in js:
            xb, yb = data[j] if data is not None else self.batch(ctx, j, k)
            theta = x[j].detach().requires_grad_(True)
            buf = ctx.extra["buf"][j] if self.bspace.P else None
            loss = self.loss(self.forward(theta, xb, buf), yb)
            g[j] = torch.autograd.grad(loss, theta)[0]
            self.n_grads += 1
        return g

    # ---- one round --------------------------------------------------------------------------------
    def round(self) -> RoundCtx:
        cfg, algo = self.cfg, self.algo
        ctx = self.round_ctx(self.t)
        if self.bspace.P:
            ctx.extra["buf"] = self.buf.expand(ctx.n, -1).clone()
        x = algo.start(self, ctx)
        ctx.x0 = x.clone()
        algo.round_start(self, ctx)
        for k in range(int(ctx.K.max())):
            ctx.k, ctx.active = k, ctx.K > k
            g = algo.gradient(self, ctx, x, k)
            d, post = algo.direction(self, ctx, x, g)
            if cfg.clip > 0:
                norm = d.norm(dim=1, keepdim=True)
                d = d * torch.clamp(cfg.clip / (norm + 1e-6), max=1.0)
            d = d + post
            x = torch.where(ctx.active[:, None].to(x.device), x - ctx.lr * d, x)
            algo.after_step(self, ctx, x)
            for cb in self.callbacks:
                cb("step", self, ctx, x)
        algo.client_end(self, ctx, x)
        w_new = algo.aggregate(self, ctx, x)
        algo.server_end(self, ctx, x, w_new)
        self.w = w_new
        if self.bspace.P:
            self.buf = ctx.extra["buf"].mean(0)
        if self.last_local is not None:
            self.last_local[ctx.S] = x
        self.last_round[ctx.S] = self.t
        self.t += 1
        for cb in self.callbacks:
            cb("round", self, ctx, x)
        return ctx

    # ---- evaluation ---------------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, X: torch.Tensor, Y: torch.Tensor, theta: torch.Tensor | None = None, bs: int = 1000):
        self.model.eval()
        theta = self.w if theta is None else theta
        loss = correct = 0.0
        for s in range(0, len(X), bs):
            out = self.forward(theta, X[s:s + bs])
            loss += F.cross_entropy(out, Y[s:s + bs], reduction="sum").item()
            correct += (out.argmax(1) == Y[s:s + bs]).sum().item()
        return loss / len(X), correct / len(X)

    def metrics(self, seconds: float, ctx: RoundCtx) -> dict:
        tr = self.evaluate(self.X[self.eval_train], self.Y[self.eval_train])
        te = self.evaluate(self.Xte, self.Yte)
        row = {"round": self.t, "lr": ctx.lr, "train_loss": tr[0], "train_acc": tr[1], "test_loss": te[0],
               "test_acc": te[1], "n_active": ctx.n, "seconds": seconds}
        row.update(self.algo.comm(self, ctx))
        return row

    # ---- continuing in memory ------------------------------------------------------------------
    def advance(self, rounds: int, out=None, callbacks=()) -> "Run":
        """Train ``rounds`` more rounds in place, exactly as one longer run (metrics and checkpoints go to ``out``,
        by default the directory of the previous ``train`` call). ``run.advance(3)`` twice equals 6 rounds."""
        from .loop import train
        if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
            raise UserError(f"advance: rounds must be an integer >= 1 (got {rounds!r})")
        cfg = dataclasses.replace(self.cfg, rounds=self.t + rounds)
        return train(cfg, self.out if out is None else out, callbacks=callbacks, run=self)

    # ---- state for checkpoints ---------------------------------------------------------------------
    def spec(self) -> dict:
        return model_spec(self.model)
