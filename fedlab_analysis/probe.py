"""python -m fedlab_analysis.probe PROBE CKPT [...] [--json FILE|-] [--plot FILE]

PROBE in hessian, trace, density (curvature), landscape, consensus, sharpness, drift, stability, margin (one line
each below; `probe PROBE --help` says what it computes, the paper it serves and its cost). Every probe rebuilds the
model and data from the checkpoint alone, prints a short summary (with the number of samples it used), writes its
full result as JSON (``--json -`` to stdout) and its figure with ``--plot``. Long probes show a progress bar on
stderr (``--quiet`` hides it). Bad input: one line, exit 2, nothing written.
"""
from __future__ import annotations

import argparse
import json
import sys

from .cli import data_spec, guard, layer_spec, out_file, plot_file
from .errors import UserError
from .options import ArgParser
from .probes import PROBES, options
from .probes.options import HelpFormatter


class _OneLine(HelpFormatter):
    """`probe --help`: each probe's name and its line side by side (the longest name is 9 characters)."""

    def add_argument(self, action):
        super().add_argument(action)
        self._action_max_length = max(self._action_max_length, 14)


def parser(cls=None) -> argparse.ArgumentParser:
    """The command line, generated from the registry: one subcommand per probe, its flags from the probe's
    ``Options``, its description and cost line from its ``DESCRIBE`` and ``COST``. ``cls``: the parser class
    (the sweep passes one that raises instead of exiting)."""
    p = (cls or ArgParser)(prog="python -m fedlab_analysis.probe", description=__doc__.split("\n\n")[1],
                           formatter_class=_OneLine)
    sub = p.add_subparsers(dest="probe", required=True, metavar="PROBE", title="probes (one line each)")
    for name, spec in PROBES.items():
        sp = sub.add_parser(name, help=spec.HELP, description=spec.DESCRIBE, formatter_class=HelpFormatter,
                            epilog=spec.COST)
        options.common_arguments(sp, many=hasattr(spec, "compare"))
        options.add_arguments(sp, spec.Options, skip=options.COMMON)
        getattr(spec, "tune_parser", lambda sp: None)(sp)
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


def sources(p, args) -> dict:
    """For every option of the probe: 'flag' where the command line set it, 'default' where it did not (the
    value actually used is in the result)."""
    sp = p._subparsers._group_actions[0].choices[args.probe]
    return {a.dest: ("flag" if getattr(args, a.dest, a.default) != a.default else "default")
            for a in sp._actions if a.dest not in ("help", "ckpt")}


def options_of(args):
    """The parsed flags as the probe's ``Options``."""
    return options.from_namespace(PROBES[args.probe].Options, args)


@guard("probe")
def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)
    given = sources(p, args)
    spec = PROBES[args.probe]
    try:
        check_args(args)
        from .device import set_threads
        from .probes import common, runner
        set_threads(args.threads)
        common.PROGRESS = not args.quiet
        if isinstance(args.ckpt, list) and len(args.ckpt) == 1:
            args.ckpt = args.ckpt[0]
        result = runner.measure(args.probe, options_of(args))
        result["setting_sources"] = given
        if args.plot:                                # the figure first: a failure in it leaves no JSON behind
            spec.plot(result, args.plot)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    result = runner.public(result)
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
