"""A probe line, ``PROBE CKPT [flags]``: the parser the registry generates (one subcommand per probe, its flags from
the probe's ``Options``, its description and cost line from its ``DESCRIBE`` and ``COST``), the checks every line
passes before any work, and the line run in process (``runner.measure``). The probe command line (probe.py), the
sweep's probe lines and the demo all go through here, so a line means the same wherever it is written.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from ..cli import data_spec, layer_spec, out_file, plot_file
from ..errors import UserError
from ..options import ArgParser
from . import PROBES, common, options, runner
from .options import HelpFormatter

PROG = "python -m fedlab_analysis.probe"


class _OneLine(HelpFormatter):
    """`probe --help`: each probe's name and its line side by side (the longest name is 9 characters)."""

    def add_argument(self, action):
        super().add_argument(action)
        self._action_max_length = max(self._action_max_length, 14)


def parser(cls=None, description: str | None = None) -> argparse.ArgumentParser:
    """The parser of a probe line. ``cls``: the parser class (the sweep passes one that raises instead of exiting);
    ``description``: the text above the probes in ``--help`` (the command line's)."""
    p = (cls or ArgParser)(prog=PROG, description=description, formatter_class=_OneLine)
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
    from ..device import resolve
    if outputs and args.json is not None and args.json != "-":
        out_file(args.json, "--json")
    if outputs and args.plot is not None:
        plot_file(args.plot, "--plot")
    if outputs:
        args.device = str(resolve(args.device))
    for flag, v in (("CKPT", args.ckpt), ("--data-dir", args.data_dir)):
        if v is not None and not str(v).strip():
            raise UserError(f"{flag}: an empty path; give a path" + (" or leave it out" if flag != "CKPT" else ""))
    if not outputs:                                  # a sweep's line: it probes the run it trained, in full
        from . import common, foreign
        common.refuse(args, [*foreign.FLAGS, "dry_run"], "in a sweep's probe line (it probes the run's own "
                      "checkpoint)")
    data_spec(args.data)
    layer_spec(getattr(args, "layer", None))
    for k, v in vars(args).items():                  # every probe's own options too
        if isinstance(v, float) and not math.isfinite(v):
            raise UserError(f"--{k.replace('_', '-')}: must be a finite number (got {v})")
        if isinstance(v, int) and not isinstance(v, bool) and v < 0:     # a count or an index, never negative
            raise UserError(f"--{k.replace('_', '-')}: must be >= 0 (got {v})")


def sources(p, args) -> dict:
    """For every option of the probe: 'flag' where the command line set it, 'default' where it did not (the
    value actually used is in the result)."""
    sp = p._subparsers._group_actions[0].choices[args.probe]
    return {a.dest: ("flag" if getattr(args, a.dest, a.default) != a.default else "default")
            for a in sp._actions if a.dest not in ("help", "ckpt")}


def options_of(args):
    """The parsed flags as the probe's ``Options``."""
    return options.from_namespace(PROBES[args.probe].Options, args)


def run(p, args, outputs: bool = True) -> dict:
    """The parsed line ``args`` (of parser ``p``) in process: checked (the output paths too with ``outputs``), the
    thread count and progress bar (--threads, --quiet) set, the probe's ``compute``, the figure where --plot asks.
    Returns the result as the command line writes it, with ``setting_sources``; a UserError passes through before
    anything is written."""
    from ..device import set_threads
    given = sources(p, args)                         # before check_args, which resolves --device
    check_args(args, outputs)
    set_threads(args.threads)
    common.PROGRESS = not args.quiet
    if isinstance(args.ckpt, list) and len(args.ckpt) == 1:
        args.ckpt = args.ckpt[0]
    result = runner.measure(args.probe, options_of(args))
    result["setting_sources"] = given
    if args.plot and not result.get("dry_run"):      # the figure first: a failure in it leaves no JSON behind
        PROBES[args.probe].plot(result, args.plot)
    return runner.public(result)


def write_json(result: dict, path) -> dict:
    """``result`` written to ``path`` as the command line's --json writes it (atomically); returned as read back
    from that text (plain numbers), which is what the sweep and the demo keep."""
    from ..rundir import write_text
    text = json.dumps(result, indent=1, default=float)
    write_text(Path(path), text + "\n")
    return json.loads(text)
