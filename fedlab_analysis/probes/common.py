"""Rebuild everything a probe needs from a checkpoint alone (DESIGN.md: probes read only checkpoints).

``rebuild(ckpt, data='train'|'test'|'client:I', samples=N)`` returns a Bundle: the model as a pure
function ``f(theta, x)`` of a flat vector, the global parameters, the evaluation data, and the clients' last
local models when the run kept them. The caller's tensors are never changed by a probe.
"""
from __future__ import annotations

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
    clients: torch.Tensor | None
    client_ids: list[int] | None
    ckpt: dict
    data: str = "train"

    def describe(self) -> dict:
        c = self.config
        return {"algo": c["algo"], "dataset": c["dataset"], "model": c["model"], "round": int(self.ckpt["round"]),
                "data": self.data, "n_samples": int(len(self.y)), "n_params": int(self.space.P)}


def select_data(ds, ckpt: dict, data: str) -> tuple[torch.Tensor, torch.Tensor]:
    idx = ckpt["partition"]["indices"]
    if data == "train":
        ix = torch.cat([torch.as_tensor(i) for i in idx]).unique()
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
            dtype=torch.float32, device="cpu", data_dir: str | None = None, dataset=None) -> Bundle:
    """Model, flat weights and data of a checkpoint; ``dataset`` gives the data of a run trained on in-memory data
    (``Dataset.from_tensors``), which the checkpoint names but does not store."""
    cfg = ckpt["config"]
    ds = dataset if dataset is not None else load_dataset(cfg["dataset"], data_dir=data_dir or cfg.get("data_dir"),
                                                          seed=cfg["seed"])
    spec = ckpt["model"]
    model = build_model(spec["name"], tuple(spec["input_shape"]), spec["n_classes"], **spec.get("kwargs", {}))
    model.load_state_dict({**ckpt["global"], **ckpt.get("buffers", {})}, strict=False)
    model.to(device=device, dtype=dtype).eval()
    space = ParamSpace.from_table(ckpt["layers"])
    theta = space.flatten(ckpt["global"]).to(device=device, dtype=dtype)
    X, y = select_data(ds, ckpt, data)
    if samples is not None and samples < len(y):
        if samples <= 0:
            raise UserError(f"--samples must be > 0 (got {samples})")
        g = torch.Generator().manual_seed(seed)
        ix = torch.randperm(len(y), generator=g)[:samples]
        X, y = X[ix], y[ix]
    X, y = X.to(device=device, dtype=dtype), y.to(device)
    bufs = {n: b for n, b in model.named_buffers()}

    def f(th: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(model, {**space.unflatten(th), **bufs}, (x,))

    cl = ckpt.get("clients")
    clients = cl["models"].to(device=device, dtype=dtype) if cl else None
    return Bundle(cfg, model, space, theta, f, X, y, clients, cl["ids"] if cl else None, ckpt, data)


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
    for s in range(0, N, batch_size):
        xb, yb = X[s:s + batch_size], y[s:s + batch_size]
        g += torch.autograd.grad(loss(f(theta, xb), yb) * (len(yb) / N), theta)[0]
    return g
