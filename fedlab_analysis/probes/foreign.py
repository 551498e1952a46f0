"""A probe's model and data from outside the toolkit (DESIGN.md, fourth round: a checkpoint is one way to build them).

A plain state_dict file (``torch.save(model.state_dict(), path)``, or a dict holding one under ``state_dict``,
``model``, ``model_state_dict`` or ``net``), read with ``torch.load(weights_only=True)``, is loaded strictly into
  * a registry model: ``--model NAME [--model-kwargs JSON]`` (fedlab_analysis/models.py), built for the data's
    input shape and class count; or
  * the user's own module: ``--model-factory path/to/file.py:callable`` or ``package.module:callable``, called with
    no arguments, returning the ``nn.Module`` the weights load into;
on a registered data set (``--dataset NAME [--data-dir DIR]``). The training samples are one client unless
``--clients N [--partition NAME --dir-alpha A]`` splits them (train-mode BatchNorm groups, ``--data client:I``,
``sharpness --local``). ``checkpoint`` turns all this into the dict the probes read (round 0, no algorithm state,
no clients' models, ``source`` naming where model and data came from), so every probe runs on it unchanged.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from pathlib import Path

import torch

from ..errors import CheckpointError, UserError

FLAGS = ("model", "model_kwargs", "model_factory", "strip_prefix", "dataset", "partition", "clients", "dir_alpha")
ALGO = "state_dict"      # the config's algo of a plain state_dict: no algorithm trained it here
NEEDS = ("needs a federated run: a fedlab_analysis checkpoint (python -m fedlab_analysis.train), not a plain "
         "state_dict")


def given(opts) -> bool:
    """Whether the line names a model for a plain state_dict (--model or --model-factory)."""
    return bool(getattr(opts, "model", None) or getattr(opts, "model_factory", None))


def check(opts) -> None:
    """The foreign flags together, before anything is read: one model source, the data, a sane split."""
    from .common import refuse
    model, factory_, dataset, partition, clients, alpha = (getattr(opts, n, None) for n in (
        "model", "model_factory", "dataset", "partition", "clients", "dir_alpha"))
    if model and factory_:
        raise UserError("give either --model NAME or --model-factory FILE.py:callable, not both")
    if not given(opts):
        refuse(opts, [f for f in FLAGS if f not in ("model", "model_factory")],
               "without --model or --model-factory (it describes a plain state_dict)")
        return
    if factory_:
        refuse(opts, ["model_kwargs"], "with --model-factory (the factory builds the module itself)")
    if not dataset:
        raise UserError("a plain state_dict needs its data: add --dataset NAME (e.g. digits, cifar10; --data-dir "
                        "DIR for the real ones)")
    if partition and not clients:
        raise UserError(f"--partition {partition} needs --clients N (how many clients to split into)")
    if alpha is not None and partition not in ("dirichlet", "labeldir"):
        refuse(opts, ["dir_alpha"], "without --partition dirichlet or labeldir")


def factory(spec: str):
    """The callable named by ``path/to/file.py:callable`` or ``package.module:callable`` (one line if not)."""
    where, _, attr = spec.rpartition(":")
    if not where or not attr.isidentifier():
        raise UserError(f"--model-factory {spec!r}: give FILE.py:callable or package.module:callable")
    try:
        if where.endswith(".py"):
            path = Path(where)
            if not path.is_file():
                raise UserError(f"--model-factory: no file {where!r}")
            name = f"_fedlab_factory_{abs(hash(str(path.resolve())))}"
            mod_spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(mod_spec)
            sys.modules[name] = module
            mod_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001  the user's module failed to import: say how, in one line
        raise UserError(f"--model-factory {spec!r}: importing {where} failed ({type(e).__name__}: "
                        f"{' '.join(str(e).split())[:160]})") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise UserError(f"--model-factory {spec!r}: {where} has no callable {attr!r}")
    return fn


def build(opts, ds) -> tuple[torch.nn.Module, dict]:
    """(module, model spec) of the line's --model or --model-factory for the data set ``ds``."""
    from ..models import build_model
    if opts.model:
        try:
            kwargs = json.loads(opts.model_kwargs) if opts.model_kwargs else {}
        except json.JSONDecodeError as e:
            raise UserError(f"--model-kwargs {opts.model_kwargs!r} is not JSON ({e.msg})") from None
        if not isinstance(kwargs, dict):
            raise UserError(f"--model-kwargs must be a JSON object, e.g. '{{\"width\": 64}}' (got {opts.model_kwargs})")
        model = build_model(opts.model, ds.input_shape, ds.n_classes, **kwargs)
        return model, dict(model.spec)
    try:
        model = factory(opts.model_factory)()
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001
        raise UserError(f"--model-factory {opts.model_factory!r}: calling it failed ({type(e).__name__}: "
                        f"{' '.join(str(e).split())[:160]})") from None
    if not isinstance(model, torch.nn.Module):
        raise UserError(f"--model-factory {opts.model_factory!r} returned a {type(model).__name__}, not an "
                        "nn.Module")
    return model, {"name": f"factory:{opts.model_factory}", "input_shape": list(ds.input_shape),
                   "n_classes": int(ds.n_classes), "kwargs": {}}


def _fits_data(model, ds, what: str) -> None:
    """A forward pass of two samples of the data set, else one line: the model does not take these inputs."""
    training = model.training
    try:
        with torch.no_grad():
            out = model.eval()(ds.x_train[:2].to(next(model.parameters()).dtype))
    except Exception as e:  # noqa: BLE001
        raise UserError(f"{what} does not take {ds.name}'s inputs {list(ds.input_shape)} "
                        f"({type(e).__name__}: {' '.join(str(e).split())[:120]})") from None
    finally:
        model.train(training)
    if not (torch.is_tensor(out) and tuple(out.shape) == (2, ds.n_classes)):
        got = list(out.shape) if torch.is_tensor(out) else type(out).__name__
        raise UserError(f"{what} gives {got} for 2 samples of {ds.name}; the probes need logits [2, {ds.n_classes}]")


def _partition(opts, ds) -> tuple[list[torch.Tensor], str]:
    from ..data import partition
    n = len(ds.y_train)
    if not opts.clients:
        return [torch.arange(n)], "one client holding every training sample"
    name = opts.partition or "iid"
    kw = {"alpha": opts.dir_alpha} if opts.dir_alpha is not None else {}
    part = partition(name, ds.y_train.numpy(), opts.clients, ds.n_classes, opts.seed or 0, **kw)
    return [torch.as_tensor(ix, dtype=torch.long) for ix in part.indices], \
        f"{opts.clients} clients, --partition {name}{f' alpha {opts.dir_alpha}' if kw else ''}, seed {opts.seed or 0}"


def checkpoint(obj, path, opts, dataset=None) -> tuple[dict, torch.nn.Module, object]:
    """(checkpoint dict, module, data set) of the plain state_dict ``obj`` read from ``path``, for
    ``common.rebuild``."""
    from ..checkpoint import fit_state, state_dict_of
    from ..data import load_dataset
    where = repr(str(path))
    if not given(opts):
        raise CheckpointError(f"{where} is a plain state_dict, not a fedlab_analysis checkpoint: name its model "
                              f"with --model NAME (--model-kwargs JSON) or --model-factory FILE.py:callable, and "
                              f"its data with --dataset NAME")
    sd = state_dict_of(obj, where, opts.strip_prefix)
    ds = dataset if dataset is not None else load_dataset(opts.dataset, data_dir=opts.data_dir, seed=0)
    model, spec = build(opts, ds)
    what = f"--model {opts.model}" if opts.model else f"the module of --model-factory {opts.model_factory}"
    fit_state(sd, model, where, what)
    _fits_data(model, ds, what)
    indices, split = _partition(opts, ds)
    source = {"weights": str(path), "model": spec["name"], "model_kwargs": spec["kwargs"],
              "strip_prefix": opts.strip_prefix, "dataset": opts.dataset, "data_dir": opts.data_dir,
              "clients": split}
    return as_checkpoint(model, spec, opts.dataset, indices, source, data_dir=opts.data_dir), model, ds


def as_checkpoint(model, spec: dict, dataset: str, indices: list, source: dict, batch_size: int | None = None,
                  data_dir: str | None = None) -> dict:
    """The checkpoint dict the probes read for a module that no run of ours trained: round 0, no algorithm
    (``config.algo`` = ALGO), no algorithm state, no clients' models, the training samples split as
    ``indices``, and ``source`` (where the model and data came from), which the probes' JSON records."""
    from ..params import ParamSpace
    config = {"algo": ALGO, "dataset": dataset, "model": spec["name"], "seed": 0, "clients": len(indices),
              "batch_size": batch_size, "data_dir": data_dir}
    return {"format": "plain state_dict", "version": 1, "config": config, "round": 0, "model": spec,
            "global": {n: p.detach() for n, p in model.named_parameters()},
            "buffers": {n: b.detach() for n, b in model.named_buffers() if b.is_floating_point()},
            "layers": ParamSpace.of_model(model).table(), "algo_state": {}, "clients": None,
            "partition": {"indices": indices, "counts": None}, "metrics": {}, "source": source}


def is_foreign(ckpt: dict) -> bool:
    return isinstance(ckpt, dict) and "source" in ckpt and ckpt.get("config", {}).get("algo") == ALGO


def like(bundle, path) -> dict:
    """A second plain state_dict (landscape's ``--other``) for the probed one's model, as the checkpoint fields the
    probe reads (layers, global, buffers); its names matched as strictly, with the same --strip-prefix."""
    import copy

    from ..checkpoint import fit_state, read, state_dict_of
    p, obj = read(path)
    src = bundle.ckpt["source"]
    model = copy.deepcopy(bundle.model)
    fit_state(state_dict_of(obj, repr(str(p)), src.get("strip_prefix")), model, repr(str(p)), src["model"])
    return {"layers": bundle.ckpt["layers"], "global": {n: t.detach() for n, t in model.named_parameters()},
            "buffers": {n: b.detach() for n, b in model.named_buffers() if b.is_floating_point()}}
