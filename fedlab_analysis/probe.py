"""python -m fedlab_analysis.probe PROBE CKPT [...] [--json FILE|-] [--plot FILE]

PROBE in hessian, trace, density (curvature), landscape, consensus, sharpness, drift, stability, margin.
Every probe rebuilds the model and data from the checkpoint alone, prints a short summary, writes its full
result as JSON (``--json -`` to stdout) and its figure with ``--plot``. Bad input: one line, exit 2.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import time

import torch

from .config import arg_type
from .errors import ArgParser, UserError

MODULES = {"hessian": "curvature", "trace": "curvature", "density": "curvature", "landscape": "landscape",
           "consensus": "federated", "sharpness": "federated", "drift": "federated",
           "stability": "federated", "margin": "federated"}


def _table(name):
    try:
        mod = importlib.import_module(f"fedlab_analysis.probes.{MODULES[name]}")
    except ImportError:
        return None
    return getattr(mod, "CLI", {}).get(name)


def parser(cls=None) -> argparse.ArgumentParser:
    """``cls``: the parser class (the sweep passes one that raises instead of exiting)."""
    p = (cls or ArgParser)(prog="python -m fedlab_analysis.probe", description=__doc__.split("\n\n")[1])
    sub = p.add_subparsers(dest="probe", required=True, metavar="PROBE")
    for name in MODULES:
        entry = _table(name)
        sp = sub.add_parser(name, help=f"{name} probe" + ("" if entry else " (not available in this build)"),
                            formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        sp.add_argument("ckpt", metavar="CKPT", help="checkpoint file, or a run directory (uses ckpt/last.pt)")
        sp.add_argument("--data", default="train", help="train (union of the clients' data) | test | client:I")
        sp.add_argument("--samples", type=arg_type(int, lo=1), default=None,
                        help="evaluate on N samples drawn with --seed")
        sp.add_argument("--seed", type=arg_type(int, lo=0), default=0, help="seed of every random draw of the probe")
        sp.add_argument("--dtype", choices=("float32", "float64"), default="float32")
        sp.add_argument("--device", default="cpu")
        sp.add_argument("--data-dir", default=None, help="where the real dataset lives, if not where training saw it")
        sp.add_argument("--json", default=None, metavar="FILE", help="write the result as JSON ('-' = stdout)")
        sp.add_argument("--plot", default=None, metavar="FILE", help="save the probe's figure")
        if entry:
            entry[0](sp)
    return p


def check_args(args) -> None:
    """Before any work: the output paths can be written, the device exists, every number is finite and every
    whole number non-negative."""
    import math

    from .device import resolve
    from .rundir import check_file
    if args.json not in (None, "-"):
        check_file(args.json, "--json")
    if args.plot is not None:
        check_file(args.plot, "--plot")
    args.device = str(resolve(args.device))
    for k, v in vars(args).items():                  # every probe's own options too
        if isinstance(v, float) and not math.isfinite(v):
            raise UserError(f"--{k.replace('_', '-')}: must be a finite number (got {v})")
        if isinstance(v, int) and not isinstance(v, bool) and v < 0:     # a count or an index, never negative
            raise UserError(f"--{k.replace('_', '-')}: must be >= 0 (got {v})")


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    entry = _table(args.probe)
    try:
        if entry is None:
            raise UserError(f"probe {args.probe!r} is not available in this build of fedlab_analysis")
        check_args(args)
        from . import checkpoint
        from .probes.common import rebuild
        ckpt = checkpoint.load(args.ckpt)
        dtype = {"float32": torch.float32, "float64": torch.float64}[args.dtype]
        t0 = time.perf_counter()
        bundle = rebuild(ckpt, data=args.data, samples=args.samples, seed=args.seed, dtype=dtype,
                         device=args.device, data_dir=args.data_dir)
        bundle.args = args
        result, fig = entry[1](args, bundle)
        result = {"probe": args.probe, "checkpoint": str(args.ckpt), **bundle.describe(),
                  "seconds_total": time.perf_counter() - t0, **result}
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    text = json.dumps(result, indent=1, default=float)
    if args.json == "-":
        print(text)
    else:
        summary = result.get("summary") or {k: v for k, v in result.items() if isinstance(v, (int, float, str))}
        print(json.dumps(summary, default=float) if not isinstance(summary, str) else summary)
        if args.json:
            with open(args.json, "w") as fh:
                fh.write(text + "\n")
    if args.plot and fig is not None:
        from .plots import save
        save(fig, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
