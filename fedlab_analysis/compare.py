"""python -m fedlab_analysis.compare RUN_OR_DIR ... [--plot FILE]

Several runs side by side: a one-screen table of their final metrics and of the config keys on which they
differ, and (with --plot) their learning curves on one figure. Each argument is a run directory (config.json,
metrics.jsonl) or a directory of runs, such as a sweep's output. Bad input: one line, exit 2.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .cli import guard, plot_file
from .errors import UserError
from .options import ArgParser
from .report import read_metrics
from .rundir import read_config
from .sweep import HASH_FREE

METRICS = ("round", "test_acc", "test_loss", "train_acc", "train_loss")


def run_dirs(paths) -> list[Path]:
    from .report import _run_dirs
    out = []
    for p in map(Path, paths):
        if (p / "config.json").is_file() and (p / "metrics.jsonl").is_file():
            out.append(p)
        elif p.is_dir() and _run_dirs(p):
            out += _run_dirs(p)
        else:
            raise UserError(f"RUN_OR_DIR: {str(p)!r} is neither a run directory (config.json, metrics.jsonl) "
                            "nor a directory of runs")
    return out


def frame(paths):
    """One row per run: run, final metrics, then the config keys that differ between the runs."""
    import pandas as pd
    dirs = run_dirs(paths)
    configs = [read_config(d / "config.json", flag="RUN_OR_DIR") for d in dirs]
    keys = [k for k in configs[0] if k not in HASH_FREE
            and len({json.dumps(c.get(k), sort_keys=True) for c in configs}) > 1]
    rows = []
    for d, c in zip(dirs, configs):
        m = read_metrics(d)
        last = m[-1] if m else {}
        rows.append({"run": d.name, **{k: last.get(k) for k in METRICS}, **{k: c.get(k) for k in keys}})
    return pd.DataFrame(rows), dirs, keys


def parser() -> argparse.ArgumentParser:
    p = ArgParser(prog="python -m fedlab_analysis.compare", description=__doc__.split("\n\n")[1])
    p.add_argument("paths", nargs="+", metavar="RUN_OR_DIR", help="run directories or directories of runs")
    p.add_argument("--plot", default=None, metavar="FILE", help="learning curves of every run on one figure")
    return p


@guard("compare")
def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        if any(not p.strip() for p in args.paths):
            raise UserError("RUN_OR_DIR: an empty path; give a run directory or a directory of runs")
        if args.plot is not None:
            plot_file(args.plot)
        df, dirs, keys = frame(args.paths)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    import pandas as pd
    with pd.option_context("display.width", 200, "display.max_columns", 40, "display.float_format", "{:.4f}".format):
        print(df.to_string(index=False))
    print(f"\n{len(df)} runs; they differ in: {', '.join(keys) or 'nothing but their directory'}")
    if args.plot:
        from .plots import learning_curves, save
        labels = [", ".join(f"{k}={r[k]}" for k in keys) or r["run"] for _, r in df.iterrows()]
        labels = [lab if labels.count(lab) == 1 else f"{lab} ({d})" for lab, d in zip(labels, dirs)]
        curves = {lab: read_metrics(d) for lab, d in zip(labels, dirs)}
        print(f"curves -> {save(learning_curves(curves), args.plot)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
