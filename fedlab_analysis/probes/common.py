"""Rebuild everything a probe needs from a checkpoint alone (DESIGN.md: probes read only checkpoints).

``rebuild(ckpt, data='train'|'test'|'client:I', samples=N, bn_mode=...)`` returns a Bundle: the model as a pure
function ``f(theta, x)`` of a flat vector, the global parameters, the evaluation data, and the clients' last
local models when the run kept them. The caller's tensors are never changed by a probe. Only what a probe reads
goes to its device: the clients' [m, P] table (4.2 GiB at ResNet-18 x 100 clients) stays where the checkpoint was
loaded until a probe first reads ``Bundle.clients``.

BatchNorm (``bn_mode``; models without BatchNorm give the same numbers in every mode):
  * ``train`` (default): each group of ``bn_batch`` samples (default: the run's training batch size) is
    normalised by its own statistics, as in the clients' local steps. For ``--data train`` the samples are ordered
    client by client and every client's samples are cut into groups of their own (``Bundle.layout``), so a group
    never holds two clients' data, as a local step never does; a client's last group is short when its count is
    not a multiple of ``bn_batch`` and is normalised by the statistics of those few samples. The probed loss is the
    mean over SAMPLES (every sample weighs 1/N, whatever the size of its group), not a mean over groups. This is
    the objective the clients optimised. No running statistic is read or written.
  * ``eval``: the running statistics in the checkpoint (the server's average of the clients' statistics), as at
    test time. This is the deployed model, but not the function that training minimised.
  * ``recalibrate``: running statistics recomputed once at theta on the probe's data (cumulative average over
    batches of ``bn_batch``, as ``torch.optim.swa_utils.update_bn`` and loss-landscape studies do), then held
    fixed as in eval mode. The samples are passed in ascending dataset order, so the statistics depend on the
    sample set and ``bn_batch`` only, not on the order in which ``--samples`` drew them.

Samples: ``--samples N --seed S`` draws the same N samples in every mode (from the union of the clients' data in
ascending dataset order); train mode only reorders them client by client.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..checkpoint import consistent
from ..data import load_dataset
from ..errors import UserError
from ..models import build_model
from ..params import ParamSpace
from ..params import functional as params_functional


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
    layout: list[int] | None = None      # train-mode BatchNorm: consecutive samples of one client each
    sample_index: torch.Tensor | None = None   # the dataset indices of X (train split) in X's order
    loss: object = "ce"                  # 'ce', 'mse' or a callable (logits, y) -> mean loss (the Python entry points)

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
        source = {"source": self.ckpt["source"]} if "source" in self.ckpt else {}    # a plain state_dict's origin
        return {"algo": c["algo"], "dataset": c["dataset"], "model": c["model"], "round": int(self.ckpt["round"]),
                **source,
                "data": self.data, "n_samples": int(len(self.y)), "n_available": self.n_available,
                "n_params": int(self.space.P),
                "batchnorm": bn, "bn_mode": self.bn_mode if bn else "n/a (no BatchNorm)",
                "bn_batch": self.bn_batch if bn and self.bn_mode != "eval" else None,
                **({"bn_groups": f"client by client ({len(self.layout)} clients), groups of bn_batch, a client's "
                                 "last group short; loss = mean over samples"} if bn and self.layout else {})}

    def title(self, what: str) -> str:
        """A figure title naming the run (algorithm, data, round) and the probe's settings ``what``."""
        c = self.config
        bn = f", BN {self.bn_mode}" if has_batchnorm(self.model) else ""
        of = f" of {self.n_available}" if self.n_available and self.n_available != len(self.y) else ""
        src = self.ckpt.get("source")
        run = (f"{Path(src.get('weights') or 'module').name} ({Path(c['model']).name}) on {c['dataset']}" if src
               else f"{c['algo']}, {c['model']} on {c['dataset']}, round {int(self.ckpt['round'])}")
        return (f"{run}: {what}\n"
                f"({self.data} data, {len(self.y)}{of} samples{bn})")


# ---- BatchNorm modes ---------------------------------------------------------------------------------------
BN_MODES = ("train", "eval", "recalibrate")


def has_batchnorm(model: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def functional(model: nn.Module, space: ParamSpace, bn_mode: str = "eval", bn_batch: int | None = None,
               layout: list[int] | None = None):
    """A pure ``f(theta, x) -> logits`` of a private copy of ``model`` (``model`` itself is never used again, so
    neither its mode nor its buffers matter afterwards; f never writes a buffer, so it is safe under vmap).

    ``bn_mode='train'``: BatchNorm normalises each consecutive group of ``bn_batch`` rows of x by the group's own
    statistics (one group when ``bn_batch`` is None). ``layout`` (the clients' sample counts, in order): on the
    whole data (len(x) == sum(layout)) each client's rows are grouped on their own, the last group of a client
    short. ``f.group`` and ``f.layout`` are kept on f; the probes cut their data with :func:`chunks`, whose pieces
    never cross a client and are whole groups, so the objective does not depend on a memory chunk size.
    'eval' / 'recalibrate': the copy's running statistics, read only."""
    if bn_mode not in BN_MODES:
        raise UserError(f"--bn-mode: unknown {bn_mode!r}; use one of {', '.join(BN_MODES)}")
    m = copy.deepcopy(model)
    train = bn_mode == "train" and has_batchnorm(m)
    for mod in m.modules():
        if train and isinstance(mod, nn.modules.batchnorm._BatchNorm):
            mod.track_running_stats = False     # batch statistics, and nothing is written back
    m.train(train)
    group = int(bn_batch) if train and bn_batch else None

    layout = [int(n) for n in layout] if train and layout else None

    def split(x: torch.Tensor):
        parts = x.split(layout) if layout and len(x) == sum(layout) and len(layout) > 1 else (x,)
        return [xg for xp in parts for xg in (xp.split(group) if group else (xp,))]
    f = params_functional(m, space, {n: b.detach() for n, b in m.named_buffers()}, split=split if train else None)
    f.group = group or 1
    f.layout = layout
    f.bn_mode = bn_mode if has_batchnorm(m) else None
    return f


def aligned(f, n: int) -> int:
    """A chunk size near ``n`` that is a multiple of ``f``'s BatchNorm group (train mode), else ``n``. Pieces of
    this size can still cross a client boundary of ``f.layout``: cut the data with :func:`chunks`."""
    g = getattr(f, "group", 1)
    return max(g, int(n) // g * g)


def chunks(f, N: int, n: int) -> list[int]:
    """Sizes (summing to N) of memory chunks of about ``n`` samples that ``f`` evaluates exactly as it does the
    whole data: each a multiple of f's BatchNorm group within one client of ``f.layout`` (train mode), plus the
    client's short last group. ``X.split(chunks(f, len(X), n))``."""
    size, out = aligned(f, n), []
    layout = getattr(f, "layout", None)
    for seg in (layout if layout and sum(layout) == N else [N]):
        out += [min(size, seg - s) for s in range(0, seg, size)]
    return out


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


def owners(ckpt: dict, n_train: int) -> torch.Tensor:
    """For every training sample, the first client whose partition holds it (-1: none)."""
    owner = torch.full((n_train,), -1, dtype=torch.long)
    for i in reversed(range(len(ckpt["partition"]["indices"]))):
        owner[torch.as_tensor(ckpt["partition"]["indices"][i], dtype=torch.long)] = i
    return owner


def select_data(ds, ckpt: dict, data: str, by_client: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(X, y) of every sample of ``data`` (:func:`pick_samples` without a subset)."""
    return pick_samples(ds, ckpt, data, by_client=by_client)[:2]


def pick_samples(ds, ckpt: dict, data: str, samples: int | None = None, seed: int = 0,
                 by_client: bool = False) -> tuple[torch.Tensor, torch.Tensor, int, torch.Tensor | None,
                                                   list[int] | None]:
    """(X, y, n_available, dataset indices, layout) of the probe's samples.

    The candidates are in ascending dataset order (train: the union of the clients' data, each sample once); with
    ``samples`` a seeded subset is drawn from them and put back in ascending order, so the same ``samples`` and
    ``seed`` give the same samples whatever the BatchNorm mode. ``by_client`` (train-mode BatchNorm on --data
    train) reorders them client by client (a sample held by several clients counts for the first) and returns
    the clients' counts as ``layout``."""
    idx = ckpt["partition"]["indices"]
    if data == "train":
        ix, x_all, y_all = torch.cat([torch.as_tensor(i, dtype=torch.long) for i in idx]).unique(), ds.x_train, \
            ds.y_train
    elif data == "test":
        ix, x_all, y_all = torch.arange(len(ds.y_test)), ds.x_test, ds.y_test
    elif data.startswith("client:"):
        try:
            i = int(data.split(":", 1)[1])
            ix = torch.as_tensor(idx[i], dtype=torch.long).sort().values
        except (ValueError, IndexError):
            raise UserError(f"--data: {data!r} names no client; clients are 0..{len(idx) - 1}") from None
        x_all, y_all = ds.x_train, ds.y_train
    else:
        raise UserError(f"--data: unknown {data!r}; use train, test or client:I")
    n_available = len(ix)
    if samples is not None and samples < len(ix):
        if samples <= 0:
            raise UserError(f"--samples must be > 0 (got {samples})")
        pick = torch.randperm(len(ix), generator=torch.Generator().manual_seed(seed))[:samples]
        ix = ix[pick.sort().values]
    layout = None
    if by_client and data == "train":
        own = owners(ckpt, len(y_all))[ix]
        order = torch.argsort(own, stable=True)
        ix = ix[order]
        layout = [int(c) for c in torch.bincount(own[order]) if c > 0]
    return x_all[ix], y_all[ix], n_available, (ix if data != "test" else None), layout


def rebuild(ckpt: dict, data: str = "train", samples: int | None = None, seed: int = 0,
            dtype=torch.float32, device="cpu", data_dir: str | None = None, dataset=None, bn_mode: str = "train",
            bn_batch: int | None = None, model: nn.Module | None = None) -> Bundle:
    """The Bundle of a checkpoint (module docstring). ``bn_batch`` defaults to the run's training batch size;
    ``dataset`` gives the data of a run trained on in-memory data (``Dataset.from_tensors``), which the checkpoint
    names but does not store; ``model``: the module to probe instead of the registry's (a copy is taken; a plain
    state_dict's ``--model-factory`` module, probes/foreign.py)."""
    if bn_mode not in BN_MODES:
        raise UserError(f"--bn-mode: unknown {bn_mode!r}; use one of {', '.join(BN_MODES)}")
    if bn_batch is not None and bn_batch < 2:
        raise UserError(f"--bn-batch must be >= 2 (batch statistics of one sample are degenerate); got {bn_batch}")
    cfg = ckpt["config"]
    ds = dataset if dataset is not None else load_dataset(cfg["dataset"], data_dir=data_dir or cfg.get("data_dir"),
                                                          seed=cfg["seed"])
    consistent(ckpt, "checkpoint", len(ds.y_train))          # partition indices within this data
    spec = ckpt["model"]
    model = copy.deepcopy(model) if model is not None else \
        build_model(spec["name"], tuple(spec["input_shape"]), spec["n_classes"], **spec.get("kwargs", {}))
    model.load_state_dict({**ckpt["global"], **ckpt.get("buffers", {})}, strict=False)
    model.to(device=device, dtype=dtype).eval()
    space = ParamSpace.from_table(ckpt["layers"])
    theta = space.flatten(ckpt["global"]).to(device=device, dtype=dtype)
    bn = has_batchnorm(model)
    bn_batch = int(bn_batch or cfg.get("batch_size") or 32)
    X, y, n_available, sample_index, layout = pick_samples(ds, ckpt, data, samples, seed,
                                                          by_client=bn and bn_mode == "train")
    X, y = X.to(device=device, dtype=dtype), y.to(device)
    if bn and bn_mode == "recalibrate":
        model = recalibrate(model, space, theta, X, bn_batch)
    f = functional(model, space, bn_mode, bn_batch, layout)
    cl = ckpt.get("clients")
    clients = cl.get("models") if cl else None           # moved by Bundle.clients when a probe reads it
    return Bundle(cfg, model, space, theta, f, X, y, clients, cl["ids"] if cl else None, ckpt, data, bn_mode,
                  bn_batch, n_available, layout, sample_index)


def require_clients(b: Bundle, what: str, stored: bool = False) -> torch.Tensor:
    """The clients' last local models on the probe's device and dtype (``stored``: as the checkpoint holds them,
    on the probe's device, in their own dtype), or one line saying what is missing."""
    if "source" in b.ckpt:
        raise UserError(f"{what} needs the clients' last local models of a federated run (a fedlab_analysis "
                        f"checkpoint trained with --keep-clients true); a plain state_dict holds one model")
    if b.clients_stored is None:
        raise UserError(f"{what} needs the clients' last local models, which this checkpoint did not keep; "
                        f"re-run training with --keep-clients true")
    return b.clients_stored.to(b.theta.device) if stored else b.clients


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
    sizes = chunks(f, N, batch_size)
    for xb, yb in zip(X.split(sizes), y.split(sizes)):
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
        v = getattr(args, n, None)
        if v is not None and v is not False:        # given: an explicit 0 (0.0 == False) is given too
            raise UserError(f"--{n.replace('_', '-')} cannot act {why}; drop it")


def default(args, name: str, value):
    """The flag's value, or ``value`` when it was not given (flags that can be refused default to None)."""
    v = getattr(args, name, None)
    return value if v is None else v


# ---- generalization gap ------------------------------------------------------------------------------------
@torch.no_grad()
def loss_acc(f, theta, X, y, batch_size: int = 2048) -> tuple[float, float]:
    """Mean cross-entropy and accuracy of f(theta, .) on (X, y)."""
    if len(y) == 0:
        raise UserError("the gap needs at least one sample on each side; check --data / --samples")
    loss = correct = 0.0
    sizes = chunks(f, len(y), batch_size)         # BatchNorm train mode: whole groups within one client
    for x, t in zip(X.split(sizes), y.split(sizes)):
        out = f(theta, x)
        loss += float(F.cross_entropy(out, t, reduction="sum"))
        correct += float((out.argmax(1) == t).sum())
    return loss / len(y), correct / len(y)


def generalization_gap(f, theta, X_train, y_train, X_test, y_test, batch_size: int = 2048) -> dict:
    """Train/test loss and accuracy of w and the two gaps (test - train loss, train - test accuracy)."""
    tl, ta = loss_acc(f, theta, X_train, y_train, batch_size)
    vl, va = loss_acc(f, theta, X_test, y_test, batch_size)
    return {"train_loss": tl, "train_acc": ta, "test_loss": vl, "test_acc": va,
            "gap_loss": vl - tl, "gap_acc": ta - va, "n_train": len(y_train), "n_test": len(y_test)}


@torch.no_grad()
def sample_losses(f, theta, X, y, batch_size: int = 2048) -> torch.Tensor:
    return torch.cat([F.cross_entropy(f(theta, x), t, reduction="none")
                      for x, t in zip(X.split(batch_size), y.split(batch_size))])
