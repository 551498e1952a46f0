"""The probes on a plain PyTorch module, in Python, as PyHessian takes one (DESIGN.md decision 6: probes are
functions first)::

    import fedlab_analysis as fl
    fl.hessian(model, (x, y), top_k=3)               # or a DataLoader instead of (x, y)
    fl.trace(model, loader, products=200); fl.density(model, loader)
    fl.landscape(model, (x, y), grid=21, plot="surface.png"); fl.sharpness(model, (x, y), rho=0.05)

Each takes an ``nn.Module`` giving logits, the data (a tuple ``(x, y)`` of tensors, or a DataLoader read once in
its order), ``loss`` ('ce', the default; 'mse'; or a callable ``(logits, y) -> mean loss``), BatchNorm as the
probes offer it (``bn_mode`` train / eval / recalibrate, ``bn_batch``: default the loader's batch size, or every
sample of the tuple in one batch, as ``model(x)`` in train mode sees them), ``dtype`` and ``device`` (default the
module's), ``plot`` (a file for the probe's figure) and the probe's own options by their command-line names
(``top_k``, ``which``, ``products``, ``grid``, ``rho``, ...; ``python -m fedlab_analysis.probe PROBE --help``).
The result is the command line's JSON as a dict. The module is never changed: the probe works on a copy, and its
parameters, buffers and train/eval mode are checked to be as they were after the call.
"""
from __future__ import annotations

import copy
import dataclasses

import torch
from torch import nn

from ..errors import UserError
from . import PROBES, common, foreign, runner

PLAIN = ("hessian", "trace", "density", "landscape", "sharpness", "margin")   # the probes that need no federation
NOT_HERE = ("ckpt", "data", "samples", "data_dir", "json", "threads", "quiet", "dtype", "device", "plot",
            "bn_mode", "bn_batch", *foreign.FLAGS)   # given as this function's own arguments, or meaningless here


def _data(data) -> tuple[torch.Tensor, torch.Tensor, int | None, str]:
    """(x, y, the loader's batch size or None, what the data was) of a tuple or a DataLoader."""
    if isinstance(data, torch.utils.data.DataLoader):
        xs, ys = [], []
        for batch in data:
            if not isinstance(batch, (tuple, list)) or len(batch) < 2:
                raise UserError("the DataLoader must yield (x, y) batches")
            xs.append(batch[0]), ys.append(batch[1])
        if not xs:
            raise UserError("the DataLoader yielded no batch")
        return torch.cat(xs), torch.cat(ys), data.batch_size, f"DataLoader ({len(xs)} batches of {data.batch_size})"
    if isinstance(data, (tuple, list)) and len(data) == 2 and all(torch.is_tensor(t) for t in data):
        x, y = data
        if len(x) != len(y) or len(y) == 0:
            raise UserError(f"data (x, y) must hold the same number (>= 1) of samples, got {len(x)} and {len(y)}")
        return x, y, None, "tensors (x, y)"
    raise UserError(f"data must be a tuple (x, y) of tensors or a torch DataLoader, got {type(data).__name__}")


def bundle(model: nn.Module, data, *, loss="ce", bn_mode: str | None = None, bn_batch: int | None = None,
           dtype=None, device=None) -> common.Bundle:
    """The Bundle the probes read, of a module and data (module docstring); ``model`` itself is not used again."""
    if not isinstance(model, nn.Module) or not any(True for _ in model.parameters()):
        raise UserError(f"model must be an nn.Module with parameters, got {type(model).__name__}")
    if not (loss in ("ce", "mse") or callable(loss)):
        raise UserError(f"loss must be 'ce', 'mse' or a callable (logits, y) -> mean loss, got {loss!r}")
    X, y, loader_batch, what = _data(data)
    p0 = next(model.parameters())
    dtype, device = dtype or p0.dtype, torch.device(device) if device is not None else p0.device
    m = copy.deepcopy(model).to(device=device, dtype=dtype).eval()
    X = X.to(device=device, dtype=dtype) if X.is_floating_point() else X.to(device)
    y = y.to(device)
    bn_mode = bn_mode or "train"
    bn_batch = int(bn_batch or loader_batch or len(y))
    if bn_mode not in common.BN_MODES:
        raise UserError(f"bn_mode: unknown {bn_mode!r}; use one of {', '.join(common.BN_MODES)}")
    if bn_batch < 2 and common.has_batchnorm(m) and bn_mode != "eval":
        raise UserError(f"bn_batch must be >= 2 (batch statistics of one sample are degenerate); got {bn_batch}")
    spec = {"name": type(model).__name__, "input_shape": list(X.shape[1:]), "n_classes": None, "kwargs": {}}
    source = {"model": f"an nn.Module given in Python ({type(model).__name__})", "data": what}
    ckpt = foreign.as_checkpoint(m, spec, "data given in Python", [torch.arange(len(y))], source, bn_batch)
    space = common.ParamSpace.of_model(m)
    theta = space.flatten(dict(m.named_parameters())).detach().clone()
    if common.has_batchnorm(m) and bn_mode == "recalibrate":
        m = common.recalibrate(m, space, theta, X, bn_batch)
    f = common.functional(m, space, bn_mode, bn_batch)
    return common.Bundle(ckpt["config"], m, space, theta, f, X, y, None, None, ckpt, "train", bn_mode, bn_batch,
                         len(y), None, None, loss)


def _state(model: nn.Module) -> tuple:
    """What a probe must leave as it was: every parameter's and buffer's version counter (bumped by any in-place
    write) and identity, and every submodule's train/eval flag."""
    return ([(n, id(t), t._version) for n, t in (*model.named_parameters(), *model.named_buffers())],
            [m.training for m in model.modules()])


def run(name: str, model: nn.Module, data, *, loss="ce", bn_mode: str | None = None, bn_batch: int | None = None,
        dtype=None, device=None, plot=None, **options) -> dict:
    """Probe ``name`` on ``model`` and ``data`` (module docstring): the command line's result as a dict."""
    if name not in PLAIN:
        raise UserError(f"the {name} probe {foreign.NEEDS}; in Python it takes a module for: {', '.join(PLAIN)}")
    Options = PROBES[name].Options
    names = {f.name for f in dataclasses.fields(Options)} - set(NOT_HERE)
    odd = sorted(set(options) - names)
    if odd:
        raise UserError(f"{name}: unknown option(s) {', '.join(odd)}; valid: {', '.join(sorted(names))}")
    for k in ("local", "at_clients"):
        if options.get(k):
            raise UserError(f"{name}: {k} needs a federated run's clients; give a checkpoint to the command line")
    opts = Options(**options, bn_mode=bn_mode, bn_batch=bn_batch)
    runner.precheck(name, opts)
    before = _state(model)
    b = bundle(model, data, loss=loss, bn_mode=bn_mode, bn_batch=bn_batch, dtype=dtype, device=device)
    given = {"bn_mode": bn_mode, "bn_batch": bn_batch}
    opts = dataclasses.replace(opts, data="train", seed=opts.seed or 0, bn_mode=b.bn_mode, bn_batch=b.bn_batch)
    result = runner.on_bundle(name, b, opts, given)
    if _state(model) != before:            # a probe works on a copy: reaching this is a bug of the probe
        raise RuntimeError(f"the {name} probe changed the module it was given")
    result = {"probe": name, **result}
    if plot:
        PROBES[name].plot(result, plot)
    return runner.public(result)


def _entry(name: str):
    def probe(model: nn.Module, data, **kw) -> dict:
        return run(name, model, data, **kw)
    probe.__name__ = probe.__qualname__ = name
    probe.__doc__ = (f"The {name} probe on a plain module: ``{name}(model, (x, y) or loader, loss='ce', "
                     f"bn_mode=None, bn_batch=None, dtype=None, device=None, plot=None, **options)``; "
                     f"{PROBES[name].HELP}. See fedlab_analysis.probes.plain.")
    return probe


hessian, trace, density, landscape, sharpness, margin = (_entry(n) for n in PLAIN)
