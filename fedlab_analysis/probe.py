"""python -m fedlab_analysis.probe PROBE CKPT [...] [--json FILE|-] [--plot FILE]

PROBE in hessian, trace, density (curvature), landscape, consensus, sharpness, drift, stability, margin.
Every probe rebuilds the model and data from the checkpoint alone, prints a short summary (with the number of
samples it used), writes its full result as JSON (``--json -`` to stdout) and its figure with ``--plot``.
Long probes show a progress bar on stderr (``--quiet`` hides it). Bad input: one line, exit 2, nothing written.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import time

import torch

from .config import HelpFormatter, arg_type
from .errors import ArgParser, UserError

MODULES = {"hessian": "curvature", "trace": "curvature", "density": "curvature", "landscape": "landscape",
           "consensus": "federated", "sharpness": "federated", "drift": "federated",
           "stability": "federated", "margin": "federated"}

# Rough cost of each probe, so a run can be sized before it starts. A "pass" is one forward pass over the
# probe's samples (--samples, default all); a Hessian-vector product (HVP) costs about 3-4 passes.
COST = {
    "hessian": "cost: Lanczos uses ~20-100 HVPs for the top eigenvalue (at most --max-iter, default max(100, "
               "10 * top-k)); the power method up to 1000 per eigenvalue. --per-layer: that for every layer, plus "
               "--products HVPs per layer for its trace. The JSON gives seconds_per_product.",
    "trace": "cost: --products HVPs (default 100), plus the Lanczos of --deflate K (~20-100 HVPs).",
    "density": "cost: --steps x --vectors HVPs (default 80 x 4 = 320).",
    "landscape": "cost: grid^2 passes (+1 per marked point); --other: grid * (1 + 2 * extend) passes; "
                 "--plane hessian adds a Lanczos for two eigenvectors (~20-100 HVPs).",
    "consensus": "cost: no pass over the data; one sweep over the clients' stored models (seconds).",
    "sharpness": "cost: --method one_step: 1 gradient + 1 pass; ascent: --steps + 1 gradients and about as many "
                 "passes; --local: the same for every client on its own data, plus the global mixture.",
    "drift": "cost: one gradient pass over the samples.",
    "stability": "cost: retrains from round 0: --pairs x 2 coupled runs x --rounds rounds (the pairs one after "
                 "the other, so memory is that of two runs), each round about the trainer's round time; plus one "
                 "pass over the train and test data.",
    "margin": "cost: one pass over the samples, plus power iterations for the spectral norm of each large "
              "convolution (--perturb sam adds one gradient).",
}

BN_HELP = ("BatchNorm statistics: train = each batch of --bn-batch samples normalised by its own statistics, the "
           "objective the clients optimised (the default, so curvature and sharpness describe what training "
           "minimised); eval = the checkpoint's running statistics, the deployed model; recalibrate = running "
           "statistics recomputed on the probe's data at the probed model. Refused for a model without BatchNorm")


# common flags a probe cannot act on (refused with one line when given)
UNUSED = {"consensus": (("data", "samples", "seed", "bn_mode", "bn_batch"),
                        "with the consensus probe (it compares the stored models and reads no data)"),
          "stability": (("data", "samples"), "with the stability probe (it retrains on the clients' data and "
                                             "evaluates the full train and test sets)")}


def _table(name):
    try:
        mod = importlib.import_module(f"fedlab_analysis.probes.{MODULES[name]}")
    except ImportError:
        return None
    return getattr(mod, "CLI", {}).get(name)


def parser(cls=None) -> argparse.ArgumentParser:
    """``cls``: the parser class (the sweep passes one that raises instead of exiting)."""
    p = (cls or ArgParser)(prog="python -m fedlab_analysis.probe", description=__doc__.split("\n\n")[1],
                           formatter_class=HelpFormatter)
    sub = p.add_subparsers(dest="probe", required=True, metavar="PROBE")
    for name in MODULES:
        entry = _table(name)
        sp = sub.add_parser(name, help=f"{name} probe" + ("" if entry else " (not available in this build)"),
                            formatter_class=HelpFormatter, epilog=COST[name])
        sp.add_argument("ckpt", metavar="CKPT", help="checkpoint file, or a run directory (uses ckpt/last.pt)")
        sp.add_argument("--data", default=None,
                        help="train (union of the clients' data; the default) | test | client:I")
        sp.add_argument("--samples", type=arg_type(int, lo=1), default=None, help="evaluate on N samples drawn "
                        "with --seed (default: all of --data)")
        sp.add_argument("--seed", type=arg_type(int, lo=0), default=None,
                        help="seed of every random draw of the probe (default: 0)")
        sp.add_argument("--dtype", choices=("float32", "float64"), default="float32")
        sp.add_argument("--bn-mode", choices=("train", "eval", "recalibrate"), default=None, help=BN_HELP)
        sp.add_argument("--bn-batch", type=int, default=None, metavar="B",
                        help="BatchNorm batch size of --bn-mode train/recalibrate (default: the run's batch size)")
        sp.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
        sp.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (1 was fastest for the small models measured)")
        sp.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
        sp.add_argument("--data-dir", default=None, help="where the real dataset lives, if not where training saw it")
        sp.add_argument("--json", default=None, metavar="FILE", help="write the result as JSON ('-' = stdout)")
        sp.add_argument("--plot", default=None, metavar="FILE", help="save the probe's figure (PNG, PDF, SVG)")
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


def _summary(result: dict) -> dict | str:
    """The probe's summary with the run, the sample count and the BatchNorm mode beside the numbers."""
    s = result.get("summary") or {k: v for k, v in result.items() if isinstance(v, (int, float, str))}
    if isinstance(s, str):
        return s
    ctx = {k: result[k] for k in ("algo", "round", "data", "n_samples", "bn_mode") if k in result}
    return {**s, **ctx}


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    entry = _table(args.probe)
    try:
        if entry is None:
            raise UserError(f"probe {args.probe!r} is not available in this build of fedlab_analysis")
        check_args(args)
        from . import checkpoint
        from .device import resolve, set_threads
        from .probes import common
        from .probes.common import rebuild
        set_threads(args.threads)
        device = resolve(args.device)
        common.refuse(args, *UNUSED.get(args.probe, ((), "")))
        if args.bn_mode == "eval":
            common.refuse(args, ["bn_batch"], "with --bn-mode eval (eval mode uses the running statistics)")
        ckpt = checkpoint.load(args.ckpt)
        dtype = {"float32": torch.float32, "float64": torch.float64}[args.dtype]
        t0 = time.perf_counter()
        common.PROGRESS = not args.quiet
        given = {"bn_mode": args.bn_mode, "bn_batch": args.bn_batch}
        args.data, args.seed, args.bn_mode = args.data or "train", args.seed or 0, args.bn_mode or "train"
        bundle = rebuild(ckpt, data=args.data, samples=args.samples, seed=args.seed, dtype=dtype,
                         device=device, data_dir=args.data_dir, bn_mode=args.bn_mode, bn_batch=args.bn_batch)
        if not common.has_batchnorm(bundle.model):
            common.refuse(argparse.Namespace(**given), ["bn_mode", "bn_batch"],
                          f"on this {ckpt['model']['name']} (it has no BatchNorm)")
        bundle.args = args
        result, fig = entry[1](args, bundle)
        if args.plot and fig is None:
            raise UserError(f"--plot: the {args.probe} probe draws no figure for these options; drop --plot")
        result = {"probe": args.probe, "checkpoint": str(args.ckpt), **bundle.describe(),
                  "device": str(device), "seconds_total": time.perf_counter() - t0, **result}
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    text = json.dumps(result, indent=1, default=float)
    if args.json == "-":
        print(text)
    else:
        summary = _summary(result)
        print(json.dumps(summary, default=float) if not isinstance(summary, str) else summary)
        if args.json:
            with open(args.json, "w") as fh:
                fh.write(text + "\n")
    if args.plot:
        from .plots import save
        save(fig, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
