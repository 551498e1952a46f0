"""python -m fedlab_analysis.probe PROBE CKPT [...] [--json FILE|-] [--plot FILE]

PROBE in hessian, trace, density (curvature), landscape, consensus, sharpness, drift, stability, margin (one line
each below; `probe PROBE --help` says what it computes, the paper it serves and its cost). Every probe rebuilds the
model and data from the checkpoint alone, prints a short summary (with the number of samples it used), writes its
full result as JSON (``--json -`` to stdout) and its figure with ``--plot``. Long probes show a progress bar on
stderr (``--quiet`` hides it). Bad input: one line, exit 2, nothing written.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import time

import torch

from .cli import data_spec, guard, layer_spec, out_file, plot_file
from .errors import CheckpointError, UserError
from .options import ArgParser, HelpFormatter
from .rules import arg_type

MODULES = {"hessian": "curvature", "trace": "curvature", "density": "curvature", "landscape": "landscape",
           "consensus": "federated", "sharpness": "federated", "drift": "federated",
           "stability": "federated", "margin": "federated"}

# One line per probe for `probe --help`, and a paragraph for `probe PROBE --help`.
HELP = {
    "hessian": "extreme Hessian eigenvalues (Lanczos), per layer too",
    "trace": "Hessian trace (Hutchinson/Hutch++) +- std. error",
    "density": "Hessian spectral density (stochastic Lanczos)",
    "landscape": "loss surface on a plane, or a line to a 2nd model",
    "consensus": "client models' spread, each paper's form, per layer",
    "sharpness": "SAM sharpness in a rho-ball; several CKPTs compared",
    "drift": "FedLESAM's perturbation estimate vs staleness",
    "stability": "generalisation gap, stability by retraining",
    "margin": "FedSMOO Thm 4.4's margin generalisation bound",
}
DESCRIBE = {
    "hessian": "The largest (--which LA), most negative (SA) or largest-magnitude (LM) eigenvalues of the Hessian of "
               "the mean training loss at the checkpoint, by Lanczos with full re-orthogonalisation, each with its "
               "residual bound; the normalised top eigenvalue lambda_max(T H T), T = diag(|w| + eta), sits beside "
               "the raw one, so flatness compares across models whose weights differ in scale (Kwon et al. 2021, "
               "ASAM). Eigenvalues within round-off of zero (relative to lambda_max and the dtype) are reported as "
               "zero. Serves FedSMOO (Sun et al. 2023) Table 2 and FedLESAM (Fan et al. 2024) Fig. 2.",
    "trace": "The trace of the Hessian of the mean training loss, by Hutchinson's estimator or Hutch++ (Meyer et al. "
             "2021), optionally after deflating the top eigenvectors; printed as mean +- standard error with the "
             "number of random probes. Serves FedSMOO Table 2's trace column.",
    "density": "The Hessian's spectral density by stochastic Lanczos quadrature (Ghorbani et al. 2019), smoothed "
               "with Gaussians; its trace estimate is printed with its standard error over the start vectors. "
               "Serves the spectrum plots of FedSMOO and FedLESAM.",
    "landscape": "The loss and accuracy on a grid of a 2-D plane through the checkpoint (Li et al. 2018, "
                 "'Visualizing the Loss Landscape of Neural Nets': filter-normalised random directions), or through "
                 "two clients' models, the last global update, the top Hessian eigenvectors or the PCA of the "
                 "trajectory; --other draws the 1-D line to a second checkpoint. --save-directions/--directions "
                 "reuse one plane for several checkpoints; --h5 writes Li et al.'s HDF5 layout. Serves FedSMOO "
                 "Fig. 3 and FedLESAM Figs. 1, 3, 6.",
    "consensus": "How far the clients' last local models lie from their centre: FedALS's consensus distance "
                 "(FedALS Sec. 1, Fig. 1), FedInit's divergence Delta (FedInit Sec. 4), FedSMOO Table 2's "
                 "consensus row and its proof's delta (FedSMOO App. C), in total and per layer. Reads the "
                 "checkpoint's stored client models only, no data.",
    "sharpness": "max_{||delta|| <= rho} F(w + delta) - F(w), by SAM's one step, a projected ascent or the exact "
                 "quadratic model, at --rho (default 0.05 for every algorithm); --local adds each client's "
                 "sharpness and the Jensen gap between FedLESAM's Eq. (2) and Eq. (1). Several checkpoints "
                 "(probe sharpness A B ...) are measured at one radius, start and sample set and printed as one "
                 "table; --adaptive adds Kwon et al. 2021's scale-invariant adaptive sharpness.",
    "drift": "FedLESAM's estimate of the global perturbation from the last global update against the true one, "
             "by the clients' staleness (FedLESAM Sec. 4.1, Fig. 2 left).",
    "stability": "Retrains the run on a neighbouring data set (one sample replaced) with coupled randomness and "
                 "reports the parameter distance and loss differences (FedInit App. B, Definition 11), and the "
                 "train/test generalisation gap.",
    "margin": "The margin-based generalisation bound of FedSMOO Theorem 4.4 (spectral and Frobenius norms of the "
              "layers, margin loss), at the checkpoint or at its SAM-perturbed point.",
}

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


SEED_MAX = 2**32 - 1      # a probe's seeds feed torch.Generator.manual_seed with offsets added

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


class _OneLine(HelpFormatter):
    """`probe --help`: each probe's name and its line side by side (the longest name is 9 characters)."""

    def add_argument(self, action):
        super().add_argument(action)
        self._action_max_length = max(self._action_max_length, 14)


def parser(cls=None) -> argparse.ArgumentParser:
    """``cls``: the parser class (the sweep passes one that raises instead of exiting)."""
    p = (cls or ArgParser)(prog="python -m fedlab_analysis.probe", description=__doc__.split("\n\n")[1],
                           formatter_class=_OneLine)
    sub = p.add_subparsers(dest="probe", required=True, metavar="PROBE", title="probes (one line each)")
    for name in MODULES:
        entry = _table(name)
        sp = sub.add_parser(name, help=HELP[name] + ("" if entry else " (not available in this build)"),
                            description=DESCRIBE[name], formatter_class=HelpFormatter, epilog=COST[name])
        if name == "sharpness":
            sp.add_argument("ckpt", metavar="CKPT", nargs="+", help="checkpoint file(s) or run directories (uses "
                            "ckpt/last.pt); several: one comparison table at the same radius, start and samples")
        else:
            sp.add_argument("ckpt", metavar="CKPT", help="checkpoint file, or a run directory (uses ckpt/last.pt)")
        sp.add_argument("--data", default=None,
                        help="train (union of the clients' data; the default) | test | client:I")
        sp.add_argument("--samples", type=arg_type(int, lo=1), default=None, help="evaluate on N samples drawn "
                        "with --seed (default: all of --data)")
        sp.add_argument("--seed", type=arg_type(int, lo=0, hi=SEED_MAX), default=None,
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


def check_args(args, outputs: bool = True) -> None:
    """Before any work: the output paths can be written (``outputs``; a plot in a format matplotlib writes), the
    device exists, --data and --layer can be read, every number is finite and every whole number non-negative.
    The sweep checks its probe lines with ``outputs=False`` before it trains."""
    import math

    from .device import resolve
    if outputs and args.json is not None and args.json != "-":
        out_file(args.json, "--json")
    if outputs and args.plot is not None:
        plot_file(args.plot, "--plot")
    if outputs:
        args.device = str(resolve(args.device))
    for flag, v in (("CKPT", args.ckpt), ("--data-dir", args.data_dir)):
        if v is not None and not str(v).strip():
            raise UserError(f"{flag}: an empty path; give a path" + (" or leave it out" if flag != "CKPT" else ""))
    data_spec(args.data)
    layer_spec(getattr(args, "layer", None))
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


NO_DATA = ("consensus",)        # probes that read no data: no sample count, split or BatchNorm mode in their output


def load(path):
    """The checkpoint at ``path``; a folder that holds runs but is not one is named as such, with its runs."""
    from pathlib import Path

    from . import checkpoint
    p = Path(path)
    if p.is_dir() and not (p / "ckpt" / "last.pt").exists() and not (p / "last.pt").exists():
        runs = sorted(str(d) for d in p.iterdir() if (d / "ckpt" / "last.pt").exists())
        if runs:
            raise UserError(f"{str(path)!r} is a folder of runs; name one of: {', '.join(runs)}")
    return checkpoint.load(path)


def _one(args, path, entry, device, dtype):
    """(result, figure) of the probe on one checkpoint; ``args`` is this checkpoint's own copy."""
    from .probes import common
    from .probes.common import rebuild
    ckpt = load(path)
    t0 = time.perf_counter()
    given = {"bn_mode": args.bn_mode, "bn_batch": args.bn_batch}
    args.data, args.seed, args.bn_mode = args.data or "train", args.seed or 0, args.bn_mode or "train"
    try:
        bundle = rebuild(ckpt, data=args.data, samples=args.samples, seed=args.seed, dtype=dtype,
                         device=device, data_dir=args.data_dir, bn_mode=args.bn_mode, bn_batch=args.bn_batch)
    except CheckpointError as e:                 # the partition against the data: name the file
        raise CheckpointError(f"{path}: {e}") from None
    if not common.has_batchnorm(bundle.model):
        common.refuse(argparse.Namespace(**given), ["bn_mode", "bn_batch"],
                      f"on this {ckpt['model']['name']} (it has no BatchNorm)")
    bundle.args = args
    result, fig = entry[1](args, bundle)
    if args.plot and fig is None:
        raise UserError(f"--plot: the {args.probe} probe draws no figure for these options; drop --plot")
    described = bundle.describe()
    if args.probe in NO_DATA:
        for k in ("data", "n_samples", "n_available", "bn_mode", "bn_batch"):
            described.pop(k, None)
    result = {"probe": args.probe, "checkpoint": str(path), **described,
              "device": str(device), "seconds_total": time.perf_counter() - t0, **result}
    return result, fig, bundle


def _compare(args, entry, device, dtype):
    """``probe sharpness A B ...``: every checkpoint at the same radius, start and samples; one table."""
    import copy

    from .probes.sharpness import compare_table, plot_compare
    results, index, dataset = [], None, None
    for path in args.ckpt:
        r, _, b = _one(copy.copy(args), path, entry, device, dtype)
        if dataset not in (None, r["dataset"]):
            raise UserError(f"{path}: trained on {r['dataset']}, the first checkpoint on {dataset}; a sharpness "
                            "comparison needs one data set")
        dataset = r["dataset"]
        ix = None if b.sample_index is None else sorted(b.sample_index.tolist())
        r["same_samples_as_first"] = index is None or ix == index
        index = ix if index is None else index
        results.append(r)
    table = compare_table(results)
    notes = [] if all(r["same_samples_as_first"] for r in results) else [
        "the runs' partitions cover different samples, so their sample sets differ; use --data test for one set"]
    out = {"probe": "sharpness", "comparison": True, "checkpoints": [str(p) for p in args.ckpt],
           "rho": results[0]["rho"], "settings": results[0]["settings"], "results": results, "notes": notes,
           "summary": {r["checkpoint"]: r["global"]["sharpness"] for r in results},
           "summary_text": table + "".join(f"\nnote: {n}" for n in notes)}
    return out, plot_compare(results) if args.plot else None


def _sources(p, args) -> dict:
    """For every option of the probe: 'flag' where the command line set it, 'default' where it did not (the
    value actually used is in the result)."""
    sp = p._subparsers._group_actions[0].choices[args.probe]
    return {a.dest: ("flag" if getattr(args, a.dest, a.default) != a.default else "default")
            for a in sp._actions if a.dest not in ("help", "ckpt")}


@guard("probe")
def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)
    sources = _sources(p, args)
    entry = _table(args.probe)
    try:
        if entry is None:
            raise UserError(f"probe {args.probe!r} is not available in this build of fedlab_analysis")
        check_args(args)
        from .device import resolve, set_threads
        from .probes import common
        set_threads(args.threads)
        device = resolve(args.device)
        common.refuse(args, *UNUSED.get(args.probe, ((), "")))
        if args.bn_mode == "eval":
            common.refuse(args, ["bn_batch"], "with --bn-mode eval (eval mode uses the running statistics)")
        dtype = {"float32": torch.float32, "float64": torch.float64}[args.dtype]
        common.PROGRESS = not args.quiet
        if isinstance(args.ckpt, list) and len(args.ckpt) > 1:
            result, fig = _compare(args, entry, device, dtype)
        else:
            args.ckpt = args.ckpt[0] if isinstance(args.ckpt, list) else args.ckpt
            result, fig, _ = _one(args, args.ckpt, entry, device, dtype)
        result["setting_sources"] = sources
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.plot:                                    # the figure first: a failure in it leaves no JSON behind
        from .plots import save
        save(fig, args.plot)
    text = json.dumps(result, indent=1, default=float)
    if args.json == "-":
        print(text)
    else:
        summary = result.get("summary_text") or _summary(result)      # a table where the probe prints one
        print(json.dumps(summary, default=float) if not isinstance(summary, str) else summary)
        if args.json:
            with open(args.json, "w") as fh:
                fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
