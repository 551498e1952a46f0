"""A registered probe on one checkpoint, in process: rebuild the model and data, ``compute``, and the result
as the command line writes it (the run, the samples, the device and the seconds beside the probe's numbers).

The command line (probe.py), the sweep and the demo all measure through ``measure`` (by way of ``line.run``);
none of them reads a probe back from a JSON file.
"""
from __future__ import annotations

import copy
import dataclasses
import time
from pathlib import Path

import torch

from ..errors import CheckpointError, UserError
from . import PROBES, common

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def public(result: dict) -> dict:
    """The result without its private keys (``_title``: the figure's title, kept for ``plot``)."""
    return {k: v for k, v in result.items() if not k.startswith("_")}


def load(path):
    """The checkpoint at ``path``; a folder that holds runs but is not one is named as such, with its runs."""
    from .. import checkpoint
    p = Path(path)
    if p.is_dir() and not (p / "ckpt" / "last.pt").exists() and not (p / "last.pt").exists():
        runs = sorted(str(d) for d in p.iterdir() if (d / "ckpt" / "last.pt").exists())
        if runs:
            raise UserError(f"{str(path)!r} is a folder of runs; name one of: {', '.join(runs)}")
    return checkpoint.load(path)


def precheck(name: str, opts) -> None:
    """The refusals a probe line gets before any checkpoint is read (the sweep runs them before it trains): the
    common options the probe cannot act on (its module's ``IGNORES = (names, why)``), --bn-batch with --bn-mode
    eval. One line each."""
    common.refuse(opts, *getattr(PROBES[name], "IGNORES", ((), "")))
    if opts.bn_mode == "eval":
        common.refuse(opts, ["bn_batch"], "with --bn-mode eval (eval mode uses the running statistics)")


def one(name: str, opts, path, device, dtype) -> tuple[dict, common.Bundle]:
    """(result, bundle) of probe ``name`` on the checkpoint at ``path``."""
    spec = PROBES[name]
    ckpt = load(path)
    t0 = time.perf_counter()
    given = {"bn_mode": opts.bn_mode, "bn_batch": opts.bn_batch}
    opts = dataclasses.replace(opts, data=opts.data or "train", seed=opts.seed or 0, bn_mode=opts.bn_mode or "train")
    try:
        bundle = common.rebuild(ckpt, data=opts.data, samples=opts.samples, seed=opts.seed, dtype=dtype,
                                device=device, data_dir=opts.data_dir, bn_mode=opts.bn_mode, bn_batch=opts.bn_batch)
    except CheckpointError as e:                 # the partition against the data: name the file
        raise CheckpointError(f"{path}: {e}") from None
    if not common.has_batchnorm(bundle.model):
        common.refuse(dataclasses.replace(opts, **given), ["bn_mode", "bn_batch"],
                      f"on this {ckpt['model']['name']} (it has no BatchNorm)")
    result = spec.compute(bundle, dataclasses.replace(opts, ckpt=str(path)))
    described = bundle.describe()
    if not getattr(spec, "READS_DATA", True):
        for k in ("data", "n_samples", "n_available", "bn_mode", "bn_batch"):
            described.pop(k, None)
    result = {"probe": name, "checkpoint": str(path), **described,
              "device": str(device), "seconds_total": time.perf_counter() - t0, **result}
    return result, bundle


def measure(name: str, opts, device=None, dtype=None) -> dict:
    """Probe ``name`` with options ``opts`` (its ``Options``; ``opts.ckpt`` one path or a list of paths)."""
    from ..device import resolve
    device = resolve(opts.device) if device is None else device
    dtype = DTYPES[opts.dtype] if dtype is None else dtype
    precheck(name, opts)
    paths = opts.ckpt if isinstance(opts.ckpt, list) else [opts.ckpt]
    if len(paths) == 1:
        return one(name, opts, paths[0], device, dtype)[0]
    compare = getattr(PROBES[name], "compare", None)
    if compare is None:
        raise UserError(f"the {name} probe takes one checkpoint")
    runs = (one(name, copy.copy(opts), p, device, dtype) for p in paths)      # one at a time: a refusal stops early
    return compare(runs, paths)
