"""A probe's options as a dataclass: every flag declared once, with its type, default, range and help.

``opt(default, help, lo=..., choices=..., metavar=...)`` declares a field; the command line's subcommand is
generated from the dataclass (``add_arguments``), and ``from_namespace`` turns parsed flags back into the
dataclass that ``compute(bundle, opts)`` reads. A field whose default is None is one the probe fills itself
(its default depends on other options) and may refuse when given with options it cannot act on.

The field helpers are the rules layer's (fedlab_analysis/rules.py), as for the run's configuration.
"""
from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, fields

from ..data.partitions import PARTITIONS
from ..models import MODELS
from ..options import HelpFormatter  # noqa: F401  (probe.py and the probes take it from here)
from ..rules import arg_type, type_of  # noqa: F401
from ..rules import field as _f

SEED_MAX = 2**32 - 1      # a probe's seeds feed torch.Generator.manual_seed with offsets added
TYPES = {"int": int, "float": float, "str": str, "bool": bool}
RULE = ("lo", "hi", "lo_open", "hi_open")


def opt(default, help: str, *, metavar: str | None = None, parse=None, positional: bool = False, **rule):
    """A probe option: ``default``, ``help``, and for the command line ``metavar``, ``choices`` (argparse
    choices), a range (``lo``/``hi``, ``lo_open``/``hi_open``: checked as the flag is read), or ``parse`` (a
    callable turning the flag's text into the value). A bool option is a switch (store_true)."""
    extra = {k: v for k, v in (("metavar", metavar), ("parse", parse)) if v is not None}
    return _f(default, help, **extra, positional=positional, **rule)


def _base(f: dataclasses.Field) -> type:
    """int, float, str or bool from the field's annotation (``int | None`` -> int)."""
    return TYPES[type_of(f)[0]]


def argument(f: dataclasses.Field) -> tuple[list[str], dict]:
    """The ``add_argument`` call of one field: (names, keyword arguments)."""
    m, base = f.metadata, _base(f)
    kw = {"default": f.default, "help": m["help"]}
    if m.get("positional"):
        names = [f.name]
        kw.pop("default")
        kw.update(metavar=m.get("metavar", f.name.upper()), **({"nargs": m["nargs"]} if "nargs" in m else {}))
        return names, kw
    names = ["--" + f.name.replace("_", "-")]
    if base is bool:
        kw["action"] = "store_true"
    elif "parse" in m:
        kw["type"] = m["parse"]
    elif any(k in m for k in RULE):
        kw["type"] = arg_type(base, **{k: m[k] for k in RULE if k in m})
    elif base is not str:
        kw["type"] = base
    for k in ("choices", "metavar"):
        if k in m:
            kw[k] = m[k]
    return names, kw


def add_arguments(p: argparse.ArgumentParser, options: type, skip: tuple = ()) -> None:
    """One argparse argument per field of the ``options`` dataclass, in declaration order."""
    for f in fields(options):
        if f.name not in skip:
            names, kw = argument(f)
            p.add_argument(*names, **kw)


def from_namespace(options: type, ns: argparse.Namespace):
    """The ``options`` dataclass holding the parsed flags (fields the namespace lacks keep their default)."""
    return options(**{f.name: getattr(ns, f.name) for f in fields(options) if hasattr(ns, f.name)})


BN_HELP = ("BatchNorm statistics: train = each batch of --bn-batch samples normalised by its own statistics, the "
           "objective the clients optimised (the default, so curvature and sharpness describe what training "
           "minimised); eval = the checkpoint's running statistics, the deployed model; recalibrate = running "
           "statistics recomputed on the probe's data at the probed model. Refused for a model without BatchNorm")


@dataclass
class Common:
    """The options every probe takes: where the checkpoint's data and model go, and the outputs."""
    ckpt: str | None = opt(None, "checkpoint file, or a run directory (uses ckpt/last.pt), or a plain state_dict "
                           "with --model/--model-factory and --dataset", positional=True, metavar="CKPT")
    data: str | None = opt(None, "train (union of the clients' data; the default) | test | client:I")
    samples: int | None = opt(None, "evaluate on N samples drawn with --seed (default: all of --data)", lo=1)
    seed: int | None = opt(None, "seed of every random draw of the probe (default: 0)", lo=0, hi=SEED_MAX)
    dtype: str | None = opt(None, "floating-point type of the model, the data and every product (default: "
                            "float32; float64 for comparisons to the last digits)",
                            choices=("float32", "float64"))
    bn_mode: str | None = opt(None, BN_HELP, choices=("train", "eval", "recalibrate"))
    bn_batch: int | None = opt(None, "BatchNorm batch size of --bn-mode train/recalibrate (default: the run's batch "
                               "size; 32 for a plain state_dict)", metavar="B")
    device: str = opt("auto", "auto | cpu | cuda | cuda:N")
    threads: int = opt(1, "torch CPU threads (1 was fastest for the small models measured)")
    quiet: bool = opt(False, "no progress bar on stderr")
    dry_run: bool = opt(False, "print the memory plan (data, parameters, kept vectors, autograd graphs, in GiB, "
                        "against the device's free memory) and stop before computing")
    data_dir: str | None = opt(None, "where the real dataset lives, if not where training saw it")
    model: str | None = opt(None, "CKPT is a plain state_dict of this registry model ("
                            f"{', '.join(MODELS)}), built for --dataset", metavar="NAME")
    model_kwargs: str | None = opt(None, "with --model: its options as JSON, e.g. '{\"width\": 64}'", metavar="JSON")
    model_factory: str | None = opt(None, "CKPT is a plain state_dict of the nn.Module this callable returns "
                                    "(called with no arguments)", metavar="FILE.py:callable|package.module:callable")
    strip_prefix: str | None = opt(None, "with a plain state_dict: take this prefix off its names (e.g. module. "
                                   "of DataParallel)", metavar="PREFIX")
    dataset: str | None = opt(None, "with a plain state_dict: its data set (digits, mnist, cifar10, ...; "
                              "--data-dir for the real ones)", metavar="NAME")
    clients: int | None = opt(None, "with a plain state_dict: split its training data over N clients (default: "
                              "one client holds it all)", metavar="N", lo=1)
    partition: str | None = opt(None, "with --clients: how (iid when not given)",
                                choices=PARTITIONS)
    dir_alpha: float | None = opt(None, "with --partition dirichlet/labeldir: the concentration alpha",
                                  lo=0, lo_open=True)
    json: str | None = opt(None, "write the result as JSON ('-' = stdout)", metavar="FILE")
    plot: str | None = opt(None, "save the probe's figure (PNG, PDF, SVG)", metavar="FILE")


COMMON = tuple(f.name for f in fields(Common))
MANY_CKPT_HELP = ("checkpoint file(s) or run directories (uses ckpt/last.pt); several: one comparison table at the "
                  "same radius, start and samples")


def common_arguments(p: argparse.ArgumentParser, many: bool = False) -> None:
    """CKPT (``many``: one or more) and the common flags, as every probe's subcommand starts."""
    for f in fields(Common):
        names, kw = argument(f)
        if f.name == "ckpt" and many:
            kw.update(nargs="+", help=MANY_CKPT_HELP)
        p.add_argument(*names, **kw)


def resolve(opts, **values):
    """A copy of ``opts`` with the defaults a probe fills itself (the dataclass is never mutated in place)."""
    return dataclasses.replace(opts, **values)
