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
from . import PROBES, common, foreign

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def public(result: dict) -> dict:
    """The result without its private keys (``_title``: the figure's title, kept for ``plot``)."""
    return {k: v for k, v in result.items() if not k.startswith("_")}


def load(path, opts=None, name: str | None = None) -> tuple[dict, object, object]:
    """(checkpoint, module or None, data set or None) at ``path``: a fedlab_analysis checkpoint, or a plain state_dict
    with the line's --model/--model-factory and --dataset (``opts``; probes/foreign.py); a folder that holds runs
    but is not one is named as such, with its runs. The one place a probe reads its model."""
    from .. import checkpoint
    p = Path(path)
    if p.is_dir() and not (p / "ckpt" / "last.pt").exists() and not (p / "last.pt").exists():
        runs = sorted(str(d) for d in p.iterdir() if (d / "ckpt" / "last.pt").exists())
        if runs:
            raise UserError(f"{str(path)!r} is a folder of runs; name one of: {', '.join(runs)}")
    p, obj = checkpoint.read(path)
    if isinstance(obj, dict) and obj.get("format") == checkpoint.FORMAT:
        if opts is not None:
            common.refuse(opts, foreign.FLAGS, "with a fedlab_analysis checkpoint (it names its model and data)")
        return checkpoint.validate(obj, p), None, None
    if opts is None or not isinstance(obj, dict):
        return checkpoint.validate(obj, p), None, None          # the checkpoint's own one-line refusal
    if name is not None and getattr(PROBES[name], "NEEDS_RUN", False):
        raise UserError(f"the {name} probe {foreign.NEEDS}; {str(path)!r} is not one")
    return foreign.checkpoint(obj, p, opts)


def precheck(name: str, opts) -> None:
    """The refusals a probe line gets before any checkpoint is read (the sweep runs them before it trains): the
    common options the probe cannot act on (its module's ``IGNORES = (names, why)``), --bn-batch with --bn-mode
    eval. One line each."""
    common.refuse(opts, *getattr(PROBES[name], "IGNORES", ((), "")))
    foreign.check(opts)
    if foreign.given(opts) and getattr(PROBES[name], "NEEDS_RUN", False):
        raise UserError(f"the {name} probe {foreign.NEEDS}; drop --model/--model-factory and give a run's checkpoint")
    if opts.bn_mode == "eval":
        common.refuse(opts, ["bn_batch"], "with --bn-mode eval (eval mode uses the running statistics)")


def one(name: str, opts, path, device, dtype) -> tuple[dict, common.Bundle]:
    """(result, bundle) of probe ``name`` on the checkpoint at ``path``."""
    ckpt, model, dataset = load(path, opts, name)
    t0 = time.perf_counter()
    given = {"bn_mode": opts.bn_mode, "bn_batch": opts.bn_batch}
    opts = dataclasses.replace(opts, data=opts.data or "train", seed=opts.seed or 0, bn_mode=opts.bn_mode or "train")
    try:
        bundle = common.rebuild(ckpt, data=opts.data, samples=opts.samples, seed=opts.seed, dtype=dtype,
                                device=device, data_dir=opts.data_dir, bn_mode=opts.bn_mode, bn_batch=opts.bn_batch,
                                model=model, dataset=dataset)
    except CheckpointError as e:                 # the partition against the data: name the file
        raise CheckpointError(f"{path}: {e}") from None
    result = on_bundle(name, bundle, dataclasses.replace(opts, ckpt=str(path)), given)
    result = {"probe": name, "checkpoint": str(path), **result, "seconds_total": time.perf_counter() - t0}
    return result, bundle


def on_bundle(name: str, bundle: common.Bundle, opts, given: dict) -> dict:
    """Probe ``name`` on a built Bundle (a checkpoint's, or a module's from the Python entry points, plain.py):
    --bn-mode/--bn-batch refused on a model without BatchNorm (``given``: as the user gave them), ``compute``, the
    bundle's description and device beside the probe's numbers."""
    spec = PROBES[name]
    if not common.has_batchnorm(bundle.model):
        common.refuse(dataclasses.replace(opts, **given), ["bn_mode", "bn_batch"],
                      f"on this {bundle.ckpt['model']['name']} (it has no BatchNorm)")
    if getattr(opts, "dry_run", False):
        from .dryrun import PLANNED, plan
        if name not in PLANNED:
            raise UserError(f"--dry-run plans {', '.join(PLANNED)}; the {name} probe has no plan")
        return {**bundle.describe(), "device": str(bundle.theta.device), **plan(name, bundle, opts)}
    result = spec.compute(bundle, opts)
    described = bundle.describe()
    if not getattr(spec, "READS_DATA", True):
        for k in ("data", "n_samples", "n_available", "bn_mode", "bn_batch"):
            described.pop(k, None)
    return {**described, "device": str(bundle.theta.device), **result}


def measure(name: str, opts, device=None, dtype=None) -> dict:
    """Probe ``name`` with options ``opts`` (its ``Options``; ``opts.ckpt`` one path or a list of paths)."""
    from ..device import resolve
    device = resolve(opts.device) if device is None else device
    dtype = DTYPES[opts.dtype or "float32"] if dtype is None else dtype
    precheck(name, opts)
    paths = opts.ckpt if isinstance(opts.ckpt, list) else [opts.ckpt]
    if len(paths) == 1:
        return one(name, opts, paths[0], device, dtype)[0]
    compare = getattr(PROBES[name], "compare", None)
    if getattr(opts, "dry_run", False):
        raise UserError("--dry-run plans one checkpoint at a time; give one CKPT")
    if compare is None:
        raise UserError(f"the {name} probe takes one checkpoint")
    runs = (one(name, copy.copy(opts), p, device, dtype) for p in paths)      # one at a time: a refusal stops early
    return compare(runs, paths)
