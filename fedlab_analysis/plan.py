"""A run's memory and disk plan, from its config alone (no data loaded, no training): ``train --dry-run`` and
``sweep --dry-run`` print it, and ``train`` refuses a run whose peak would not fit the device.

Peak memory on the run's device = runtime + data + model + per-client tables + the round's working set:
    data        train and test inputs and labels (the known shapes of the real data sets; embedded ones loaded)
    model       the flat global model and its few model-sized copies and server vectors (``Part.vectors``)
    tables      each per-client [m, P] table the algorithm declares (``Part.tables``), plus the clients' last local
                models where kept; on --state-device cpu they sit in host memory, staged [n, P] rows on the device
    working     the larger of: the round's [n, P] buffers (n = the largest active set) with the activations of one
                minibatch (loop: one client's, vmap: all active clients'); and an evaluation batch's activations
                (train's loop releases the round's buffers before it evaluates)
Where the round of all n active clients at once would not fit the memory the run may use (free, plus what the run
already holds when it plans itself), the round takes them in chunks of C < n (the largest C that fits; at least 1):
its buffers are [C, P] and the server's sums a few [P] vectors (engine.py: Run.chunks). --client-chunk forces C.
Disk = last.pt (all a resume needs) + with --ckpt-keep all a model checkpoint every --ckpt-every rounds.
The counts of [n, P] buffers are read off the trainer (engine.py, parts.py); tests/test_memory_plan.py checks the
estimate against measured peak RSS on the CPU.
"""
from __future__ import annotations

import functools
import json
import math
import os
import shutil
from dataclasses import dataclass, field

import torch

GiB = 2 ** 30
RUNTIME = {"cpu": 0.40 * GiB, "cuda": 0.55 * GiB}     # python + torch (+ the CUDA context), measured here
SHAPES = {"cifar10": (50000, 10000, (3, 32, 32), 10), "cifar100": (50000, 10000, (3, 32, 32), 100),
          "svhn": (73257, 26032, (3, 32, 32), 10), "mnist": (60000, 10000, (1, 28, 28), 10),
          "fmnist": (60000, 10000, (1, 28, 28), 10)}   # (train, test, input shape, classes): no files needed
# [n, P] buffers a round holds at once besides x and one gradient buffer, by part (engine.py / parts.py):
# SAM x + delta and the second gradient; FedSMOO also mu_i (+ s_hat_i where it cannot stay in its gradient buffer:
# SMOO_SHAT); FedDyn lamb (h_i - w), computed in the gathered rows; SCAFFOLD c_i, its correction and the round-end
# c_i+ with its temporaries; FedLESAM the perturbation and its gathered w_i^old
ROUND_ROWS = {"SAM": 2, "SMOO": 3, "LESAM": 3, "Scaffold": 4, "Dyn": 1, "RelaxedInit": 1, "ALS": 1}
DRAWS = 10 ** 7       # largest_active replays the sampling up to this many draws, else bounds it
ENGINE_ROWS = 2       # x and one gradient buffer; Delta = x - w is written into the spent gradient buffer


@dataclass
class Plan:
    """Bytes by item: ``memory`` on the run's device, ``host`` in host memory when that differs, ``disk``."""
    name: str
    device: str
    memory: dict = field(default_factory=dict)
    host: dict = field(default_factory=dict)
    disk: dict = field(default_factory=dict)
    chunk: int | None = None      # active clients trained at once, where fewer than all (Run.chunk); None: all
    n_active: int = 0             # the largest active set

    @property
    def peak(self) -> int:
        return sum(self.memory.values())

    @property
    def disk_total(self) -> int:
        return sum(self.disk.values())

    def biggest(self) -> str:
        return max(self.memory, key=self.memory.get)

    def lines(self) -> list[str]:
        f = lambda d: ", ".join(f"{k} {gib(v)}" for k, v in d.items() if v)   # noqa: E731
        out = [f"{self.name}: peak {gib(self.peak)} on {self.device} ({f(self.memory)})"]
        if self.chunk is not None:
            out.append(f"  rounds in chunks of {self.chunk} of the {self.n_active} active clients (--client-chunk)")
        if self.host:
            out.append(f"  host memory: {gib(sum(self.host.values()))} ({f(self.host)})")
        out.append(f"  disk: {gb(self.disk_total)} ({', '.join(f'{k} {gb(v)}' for k, v in self.disk.items())})")
        return out


def gib(b: float | None) -> str:
    return "unknown (no CUDA device here)" if b is None else f"{b / GiB:.2f} GiB"


def gb(b: float) -> str:
    return f"{b / 1e9:.2f} GB"


def data_shape(cfg, dataset=None):
    """(n_train, n_test, input shape, classes) without reading the real data sets' files."""
    if dataset is None and cfg.dataset in SHAPES:
        return SHAPES[cfg.dataset]
    if dataset is None:
        return _loaded_shape(cfg.dataset, cfg.data_dir, cfg.seed)
    return len(dataset.x_train), len(dataset.x_test), tuple(dataset.input_shape), dataset.n_classes


@functools.lru_cache(maxsize=64)                     # a sweep's cells share a few data sets
def _loaded_shape(name: str, data_dir, seed: int):
    from .data import load_dataset
    d = load_dataset(name, data_dir=data_dir, seed=seed)
    return len(d.x_train), len(d.x_test), tuple(d.input_shape), d.n_classes


def model_size(cfg, shape, n_classes) -> tuple[int, int, int, int]:
    """(P, float buffers, activation floats per sample, the largest one): the model built on the meta device, one
    forward pass summing every leaf module's output (what autograd keeps for the backward pass, roughly)."""
    return _model_size(cfg.model, json.dumps(cfg.model_kwargs or {}, sort_keys=True), tuple(shape), n_classes)


@functools.lru_cache(maxsize=256)                    # a sweep's cells share a few models
def _model_size(name: str, kwargs: str, shape: tuple, n_classes: int) -> tuple[int, int, int, int]:
    from .models import build_model
    model = build_model(name, shape, n_classes, meta=True, **json.loads(kwargs))   # checks: one UserError line
    with torch.device("meta"):
        acts = []
        hooks = [m.register_forward_hook(lambda m, i, o: acts.append(o.numel()))
                 for m in model.modules() if not list(m.children())]
        model.eval()(torch.zeros(1, *shape))         # eval: BatchNorm takes a batch of one
    for h in hooks:
        h.remove()
    P = sum(p.numel() for p in model.parameters())
    nbuf = sum(b.numel() for b in model.buffers() if b.is_floating_point())
    return P, nbuf, sum(acts), max(acts)


def largest_active(cfg) -> int:
    """The largest active set over the run's rounds (the seeded sampling, as the trainer draws it)."""
    m = cfg.clients
    if cfg.sampling == "fixed" or cfg.active_ratio >= 1:
        return max(1, round(cfg.active_ratio * m))
    if m * min(cfg.rounds, 2000) > DRAWS:            # too many draws to replay: a bound 6 deviations above the mean
        p = cfg.active_ratio
        return min(m, math.ceil(p * m + 6 * math.sqrt(m * p * (1 - p))) + 1)
    from .trainers.rng import generator
    top = 1
    for t in range(min(cfg.rounds, 2000)):
        on = torch.rand(m, generator=generator(cfg.seed, t, purpose="sample"), dtype=torch.float64) <= cfg.active_ratio
        top = max(top, int(on.sum()))
    return top


def plan(cfg, dataset=None, hooks=(), name: str | None = None, running: bool = False,
         budget: int | None = None) -> Plan:
    """The plan of run ``cfg`` (validated RunConfig); ``hooks``: the training callbacks it will carry (a round with
    hooks takes all active clients at once: they read them all); ``running``: the run plans itself (Run._chunk), so
    the memory it already holds counts as its own; ``budget``: bytes the run may use instead of what is free."""
    from .trainers import ALGORITHMS
    algo = ALGORITHMS[cfg.algo](cfg)
    s = 8 if cfg.dtype == "float64" else 4
    n_tr, n_te, shape, n_classes = data_shape(cfg, dataset)
    # the partitions refuse it too, after loading the data; a data set given here is partitioned already, and
    # natural clients come from the data (--clients unread)
    if dataset is None and cfg.clients > n_tr and cfg.partition != "natural":
        from .errors import UserError
        raise UserError(f"--clients {cfg.clients} exceeds the {n_tr} training samples of {cfg.dataset}; use at most "
                        f"{n_tr} clients")
    P, nbuf, act, act_max = model_size(cfg, shape, n_classes)
    m, n = cfg.clients, largest_active(cfg)
    dev = "cuda" if str(cfg.device).startswith("cuda") or (cfg.device == "auto" and torch.cuda.is_available()) \
        else "cpu"
    feat = math.prod(shape)
    keep = cfg.keep_clients or algo.needs_last_local or any(getattr(h, "needs_last_local", False) for h in hooks)
    tables = len(algo.tables) + keep
    rows = ENGINE_ROWS + (algo.needs_x0 or bool(hooks)) + sum(ROUND_ROWS.get(type(p).__name__, 0) for p in algo.parts)
    rows += any(type(p).__name__ == "SMOO" for p in algo.parts) and smoo_shat(cfg, hooks)
    conv = dev == "cpu" and len(shape) == 3 and cfg.model != "mlp"
    parallel = cfg.client_parallel if cfg.client_parallel != "auto" else ("loop" if nbuf or conv else "vmap")
    B = cfg.batch_size * (n if parallel == "vmap" else 1)
    grad_act = 3 * act * B * s                         # saved activations, their gradients, the batch
    eval_act = 4 * act_max * min(4096 if dev == "cuda" else 1000, n_te) * s     # no graph: a few layers at once
    p = Plan(name or f"{cfg.algo} {cfg.model} {cfg.clients} clients", dev)
    p.memory["runtime"] = RUNTIME[dev]
    p.memory["data"] = (n_tr + n_te) * (feat * s + 8)
    p.memory["model"] = (6 + len(algo.vectors)) * (P + nbuf) * s
    table_bytes = tables * m * P * s
    staged = cfg.state_device == "cpu" and dev == "cuda"       # tables in host memory, C rows each on the device

    def at_once(C: int) -> dict:                       # the items that grow with C, the clients trained at once
        sums = 4 * P * s if C < n else 0               # a chunked round's sums and their chunk's term
        return {"tables": tables * C * P * s if staged else table_bytes,
                "working set": max(rows * C * P * s + grad_act * (C / n if parallel == "vmap" else 1) + sums,
                                   eval_act)}
    C = n
    if not algo.chunkable or hooks:                    # FedALS averages over all clients at local steps; hooks read all
        pass
    elif cfg.client_chunk is not None:
        C = min(cfg.client_chunk, n)
    elif n > 1:
        if budget is None:
            budget = free_memory(dev)
            budget = budget + in_use(dev) if running and budget is not None else budget
        need = lambda C: sum(p.memory.values()) + sum(at_once(C).values())     # noqa: E731
        if budget is not None and need(n) > budget:
            C = max([c for c in range(1, n) if need(c) <= budget] or [1])
    p.chunk, p.n_active = (C if C < n else None), n
    p.memory.update(at_once(C))
    if staged:
        p.host["tables"], p.host["staging"] = table_bytes, 2 * tables * C * P * s
    model_ck = (1 + len(algo.vectors)) * (P + nbuf) * s + n_tr * 8
    p.disk["last.pt"] = model_ck + table_bytes + (m * 8 if keep else 0)
    if cfg.ckpt_every and cfg.ckpt_keep == "all":
        lean = model_ck + (m * P * s if cfg.keep_clients else 0)
        p.disk["round checkpoints"] = (cfg.rounds // cfg.ckpt_every) * lean
    return p


def smoo_shat(cfg, hooks=()) -> bool:
    """Whether FedSMOO keeps its own [n, P] copy of s_hat_i (parts.SMOO): under the paper's server rule, unless
    every client takes the same --local-steps and no hook runs (then s_hat_i stays in its gradient buffer)."""
    return cfg.smoo_server != "code" and (cfg.local_steps is None or bool(hooks))


def free_memory(device: str) -> int | None:
    """Free memory of the device: available RAM on the CPU, ``torch.cuda.mem_get_info`` on CUDA (None where this
    machine has no CUDA device)."""
    if device == "cuda":
        return torch.cuda.mem_get_info()[0] if torch.cuda.is_available() else None
    try:
        with open("/proc/meminfo") as fh:
            info = dict(line.split(":", 1) for line in fh)
        return int(info["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def in_use(device: str) -> int:
    """What this process holds already: its resident memory on the CPU, its reserved memory on CUDA."""
    if device == "cuda":
        return torch.cuda.memory_reserved() if torch.cuda.is_available() else 0
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def free_disk(path) -> int:
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return shutil.disk_usage(path).free


SHRINK = {"tables": "--state-device cpu (tables in host memory) or fewer --clients",
          "working set": "a smaller --client-chunk, --active-ratio or --batch-size, or --client-parallel loop",
          "data": "a smaller data set", "model": "a smaller --model", "runtime": "a machine with more memory"}


def refusal(p: Plan, free: int, disk: int | None = None) -> str | None:
    """One line when the plan does not fit the free memory (or the free disk), else None."""
    if free is not None and p.peak > free:
        big = p.biggest()
        fix = SHRINK[big] if p.device == "cuda" or big != "tables" else "fewer --clients (or drop --keep-clients)"
        return (f"the run needs about {gib(p.peak)} on {p.device} and {gib(free)} is free; the biggest item is "
                f"{big} ({gib(p.memory[big])}): use {fix} (see --dry-run)")
    if disk is not None and p.disk_total > disk:
        return (f"the run writes about {gb(p.disk_total)} and {gb(disk)} is free on its disk; use --ckpt-keep last "
                f"or a larger --ckpt-every (see --dry-run)")
    return None


def pack(plans: list[Plan], name: str) -> Plan:
    """A pack's plan (trainers/pack.py): the runtime and the data once, the rest once per run (the pack's gathered
    gradient call holds every run's working set at once)."""
    p = Plan(name, plans[0].device, n_active=sum(q.n_active for q in plans))
    for q in plans:
        for k, v in q.memory.items():
            p.memory[k] = max(p.memory.get(k, 0), v) if k in ("runtime", "data") else p.memory.get(k, 0) + v
        for mine, theirs in ((p.host, q.host), (p.disk, q.disk)):
            for k, v in theirs.items():
                mine[k] = mine.get(k, 0) + v
    return p
