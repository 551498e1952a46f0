"""Rebuild everything a probe needs from a checkpoint alone (DESIGN.md: probes read only checkpoints).

``rebuild(ckpt, data='train'|'test'|'client:I', samples=N, bn_mode=...)`` returns a Bundle: the model as a pure
function ``f(theta, x)`` of a flat vector, the global parameters, the evaluation data, and the clients' last
local models when the run kept them. The caller's tensors are never changed by a probe. Only what a probe reads
goes to its device: the clients' [m, P] table (4.2 GiB at ResNet-18 x 100 clients) stays where the checkpoint was
loaded until a probe first reads ``Bundle.clients``.

BatchNorm (``bn_mode``; models without BatchNorm give the same numbers in every mode):
  * ``train`` (default): each batch of ``bn_batch`` samples (default: the run's training batch size) is
    normalised by its own statistics, as in the clients' local steps, and the probed loss is the mean over these
    batches. This is the objective the clients optimised. For ``--data train`` the samples are ordered client by
    client, so a batch holds one client's data, as in training. No running statistic is read or written.
  * ``eval``: the running statistics in the checkpoint (the server's average of the clients' statistics), as at
    test time. This is the deployed model, but not the function that training minimised.
  * ``recalibrate``: running statistics recomputed once at theta on the probe's data (cumulative average over
    batches of ``bn_batch``, as ``torch.optim.swa_utils.update_bn`` and loss-landscape studies do), then held
    fixed as in eval mode.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..data import load_dataset
from ..errors import UserError
from ..models import build_model
from ..params import ParamSpace


@dataclass
class Bundle:
    config: dict
    model: nn.Module
    space: ParamSpace
    theta: torch.Tensor
    f: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    X: torch.Tensor
    y: torch.Tensor
    clients_stored: torch.Tensor | None  # the checkpoint's [m, P] table as loaded (host memory), never moved
    client_ids: list[int] | None
    ckpt: dict
    data: str = "train"
    bn_mode: str = "eval"
    bn_batch: int | None = None
    n_available: int | None = None       # samples of --data before --samples drew a subset

    def __post_init__(self):
        self._clients = None

    @property
    def clients(self) -> torch.Tensor | None:
        """The clients' last local models [m, P] on the probe's device and dtype, moved there on first read only
        (a probe that never reads them never pays for them); None when the run did not keep them."""
        if self.clients_stored is None:
            return None
        if self._clients is None:
            self._clients = self.clients_stored.to(device=self.theta.device, dtype=self.theta.dtype)
        return self._clients

    def describe(self) -> dict:
        c = self.config
        bn = has_batchnorm(self.model)
        return {"algo": c["algo"], "dataset": c["dataset"], "model": c["model"], "round": int(self.ckpt["round"]),
                "data": self.data, "n_samples": int(len(self.y)), "n_available": self.n_available,
                "n_params": int(self.space.P),
                "batchnorm": bn, "bn_mode": self.bn_mode if bn else "n/a (no BatchNorm)",
                "bn_batch": self.bn_batch if bn and self.bn_mode != "eval" else None}

    def title(self, what: str) -> str:
        """A figure title naming the run (algorithm, data, round) and the probe's settings ``what``."""
        c = self.config
        bn = f", BN {self.bn_mode}" if has_batchnorm(self.model) else ""
        of = f" of {self.n_available}" if self.n_available and self.n_available != len(self.y) else ""
        return (f"{c['algo']}, {c['model']} on {c['dataset']}, round {int(self.ckpt['round'])}: {what}\n"
                f"({self.data} data, {len(self.y)}{of} samples{bn})")


# ---- BatchNorm modes ---------------------------------------------------------------------------------------
BN_MODES = ("train", "eval", "recalibrate")


def has_batchnorm(model: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def functional(model: nn.Module, space: ParamSpace, bn_mode: str = "eval", bn_batch: int | None = None):
    """A pure ``f(theta, x) -> logits`` of a private copy of ``model`` (``model`` itself is never used again, so
    neither its mode nor its buffers matter afterwards; f never writes a buffer, so it is safe under vmap).

    ``bn_mode='train'``: BatchNorm normalises each consecutive group of ``bn_batch`` rows of x by the group's own
    statistics (one group when ``bn_batch`` is None); ``f.group`` is that size, and the probes cut their data into
    chunks that are multiples of it (:func:`aligned`), so the objective does not depend on a memory chunk size.
    'eval' / 'recalibrate': the copy's running statistics, read only."""
    if bn_mode not in BN_MODES:
        raise UserError(f"--bn-mode: unknown {bn_mode!r}; use one of {', '.join(BN_MODES)}")
    m = copy.deepcopy(model)
    train = bn_mode == "train" and has_batchnorm(m)
    for mod in m.modules():
        if train and isinstance(mod, nn.modules.batchnorm._BatchNorm):
            mod.track_running_stats = False     # batch statistics, and nothing is written back
    m.train(train)
    bufs = {n: b.detach() for n, b in m.named_buffers()}
    group = int(bn_batch) if train and bn_batch else None

    def f(th: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        named = {**space.unflatten(th), **bufs}
        if group is None or len(x) <= group:
            return torch.func.functional_call(m, named, (x,))
        return torch.cat([torch.func.functional_call(m, named, (xg,)) for xg in x.split(group)])
    f.group = group or 1
    f.bn_mode = bn_mode if has_batchnorm(m) else None
    return f


def aligned(f, n: int) -> int:
    """A chunk size near ``n`` that is a multiple of ``f``'s BatchNorm group (train mode), else ``n``."""
    g = getattr(f, "group", 1)
    return max(g, int(n) // g * g)


@torch.no_grad()
def recalibrate(model: nn.Module, space: ParamSpace, theta: torch.Tensor, X: torch.Tensor,
                bn_batch: int) -> nn.Module:
    """A copy of ``model`` at ``theta`` whose BatchNorm running statistics are recomputed on X (cumulative
    average over batches of ``bn_batch``), in eval mode. ``model`` is not changed."""
    m = copy.deepcopy(model)
    for name, t in space.unflatten(theta).items():
        m.get_parameter(name).copy_(t)
    for mod in m.modules():
        if isinstance(mod, nn.modules.batchnorm._BatchNorm):
            mod.reset_running_stats()
            mod.momentum = None
    m.train()
    for xb in X.split(int(bn_batch)):
        m(xb)
    return m.eval()


def select_data(ds, ckpt: dict, data: str, by_client: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The evaluation set; ``by_client``: the union of the clients' data client by client (each sample once)."""
    idx = ckpt["partition"]["indices"]
    if data == "train":
        ix = torch.cat([torch.as_tensor(i) for i in idx])
        if by_client:
            first = torch.full((len(ds.y_train),), len(ix))
            first.scatter_reduce_(0, ix, torch.arange(len(ix)), "amin")
            ix = ix[first[ix] == torch.arange(len(ix))]
        else:
            ix = ix.unique()
        return ds.x_train[ix], ds.y_train[ix]
    if data == "test":
        return ds.x_test, ds.y_test
    if data.startswith("client:"):
        try:
            i = int(data.split(":", 1)[1])
            ix = torch.as_tensor(idx[i])
        except (ValueError, IndexError):
            raise UserError(f"--data: {data!r} names no client; clients are 0..{len(idx) - 1}") from None
        return ds.x_train[ix], ds.y_train[ix]
    raise UserError(f"--data: unknown {data!r}; use train, test or client:I")


def rebuild(ckpt: dict, data: str = "train", samples: int | None = None, seed: int = 0,
            dtype=torch.float32, device="cpu", data_dir: str | None = None, dataset=None, bn_mode: str = "train",
            bn_batch: int | None = None) -> Bundle:
    """The Bundle of a checkpoint (module docstring). ``bn_batch`` defaults to the run's training batch size;
    ``dataset`` gives the data of a run trained on in-memory data (``Dataset.from_tensors``), which the checkpoint
    names but does not store."""
    if bn_mode not in BN_MODES:
        raise UserError(f"--bn-mode: unknown {bn_mode!r}; use one of {', '.join(BN_MODES)}")
    if bn_batch is not None and bn_batch < 2:
        raise UserError(f"--bn-batch must be >= 2 (batch statistics of one sample are degenerate); got {bn_batch}")
    cfg = ckpt["config"]
    ds = dataset if dataset is not None else load_dataset(cfg["dataset"], data_dir=data_dir or cfg.get("data_dir"),
                                                          seed=cfg["seed"])
    spec = ckpt["model"]
    model = build_model(spec["name"], tuple(spec["input_shape"]), spec["n_classes"], **spec.get("kwargs", {}))
    model.load_state_dict({**ckpt["global"], **ckpt.get("buffers", {})}, strict=False)
    model.to(device=device, dtype=dtype).eval()
    space = ParamSpace.from_table(ckpt["layers"])
    theta = space.flatten(ckpt["global"]).to(device=device, dtype=dtype)
    bn = has_batchnorm(model)
    bn_batch = int(bn_batch or cfg.get("batch_size") or 32)
    X, y = select_data(ds, ckpt, data, by_client=bn and bn_mode == "train")
    n_available = len(y)
    if samples is not None and samples < len(y):
        if samples <= 0:
            raise UserError(f"--samples must be > 0 (got {samples})")
        g = torch.Generator().manual_seed(seed)
        ix = torch.randperm(len(y), generator=g)[:samples]
        if bn and bn_mode == "train":
            ix = ix.sort().values            # keep the client order, so a BatchNorm batch stays within a client
        X, y = X[ix], y[ix]
    X, y = X.to(device=device, dtype=dtype), y.to(device)
    if bn and bn_mode == "recalibrate":
        model = recalibrate(model, space, theta, X, bn_batch)
    f = functional(model, space, bn_mode, bn_batch)
    cl = ckpt.get("clients")
    clients = cl.get("models") if cl else None           # moved by Bundle.clients when a probe reads it
    return Bundle(cfg, model, space, theta, f, X, y, clients, cl["ids"] if cl else None, ckpt, data, bn_mode,
                  bn_batch, n_available)


def require_clients(b: Bundle, what: str) -> torch.Tensor:
    if b.clients is None:
        raise UserError(f"{what} needs the clients' last local models, which this checkpoint did not keep; "
                        f"re-run training with --keep-clients true")
    return b.clients


# ---- shared by the federated probes -------------------------------------------------------------------------
WEIGHTS = ("uniform", "size")


def client_weights(n: int, weights="uniform", sizes=None) -> torch.Tensor:
    """p_i (float64, summing to 1): 'uniform' (1/n, the papers), 'size' (n_i / sum n_i) or explicit numbers."""
    if isinstance(weights, str):
        if weights == "uniform":
            return torch.full((n,), 1.0 / n, dtype=torch.float64)
        if weights != "size":
            raise UserError(f"unknown client weights {weights!r}; use one of {', '.join(WEIGHTS)}")
        if sizes is None:
            raise UserError("client weights 'size' need the clients' data sizes; pass sizes= or use 'uniform'")
        weights = sizes
    p = torch.as_tensor(weights, dtype=torch.float64).flatten().cpu()
    if len(p) != n or (p < 0).any() or p.sum() <= 0:
        raise UserError(f"client weights must be {n} non-negative numbers with a positive sum (got {p.tolist()})")
    return p / p.sum()


def full_gradient(f, theta: torch.Tensor, X: torch.Tensor, y: torch.Tensor, loss=F.cross_entropy,
                  batch_size: int = 1024) -> torch.Tensor:
    """grad_theta of (1/N) sum_n loss(f(theta, x_n), y_n), ``loss`` a mean over its batch; chunks of
    ``batch_size`` only bound the memory."""
    theta = theta.detach().requires_grad_(True)
    g = torch.zeros_like(theta)
    N = len(y)
    batch_size = aligned(f, batch_size)
    for s in range(0, N, batch_size):
        xb, yb = X[s:s + batch_size], y[s:s + batch_size]
        g += torch.autograd.grad(loss(f(theta, xb), yb) * (len(yb) / N), theta)[0]
    return g


# ---- command-line helpers shared by the probes ---------------------------------------------------------------
PROGRESS = False     # progress bars on stderr: the probe command line turns them on (off with --quiet)


def bar(total: int | None, desc: str, unit: str = "it"):
    """A tqdm progress bar on stderr naming what is being counted (silent unless PROGRESS, and, like the trainer's,
    when stderr is not a terminal: logs and captured output stay clean; it appears after one second, so quick
    probes and one-line errors stay clean too)."""
    import sys

    from tqdm import tqdm                 # tqdm.auto would warn in Jupyter without ipywidgets
    return tqdm(total=total, desc=desc, unit=unit, disable=not PROGRESS or not sys.stderr.isatty(), file=sys.stderr,
                leave=False, dynamic_ncols=True, delay=1.0)


def refuse(args, names, why: str) -> None:
    """One line for the first flag in ``names`` (argparse dest names) that was given although it cannot act."""
    for n in names:
        if getattr(args, n, None) not in (None, False):
            raise UserError(f"--{n.replace('_', '-')} cannot act {why}; drop it")


def default(args, name: str, value):
    """The flag's value, or ``value`` when it was not given (flags that can be refused default to None)."""
    v = getattr(args, name, None)
    return value if v is None else v
