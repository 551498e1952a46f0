"""python -m fedlab_analysis.probe PROBE CKPT [...] [--json FILE|-] [--plot FILE]

PROBE in hessian, trace, density (curvature), landscape, consensus, sharpness, drift, stability, margin (one line
each below; `probe PROBE --help` says what it computes, the paper it serves and its cost). Every probe rebuilds the
model and data from the checkpoint alone (or from a plain state_dict with --model NAME or --model-factory
FILE.py:callable and --dataset), prints a short summary (with the number of samples it used), writes its full result
as JSON (``--json -`` to stdout) and its figure with ``--plot``; ``--dry-run`` prints its memory plan instead. Long
probes show a progress bar on stderr (``--quiet`` hides it). Bad input: one line, exit 2, nothing written.
"""
from __future__ import annotations

import json
import os
import sys

from .cli import guard
from .errors import UserError
from .probes import line


def parser(cls=None):
    """The command line: the probe line's parser (probes/line.py, generated from the registry) with this text."""
    return line.parser(cls, description=__doc__.split("\n\n")[1])


def _summary(result: dict) -> dict | str:
    """The probe's summary with the run, the sample count and the BatchNorm mode beside the numbers."""
    s = result.get("summary") or {k: v for k, v in result.items() if isinstance(v, (int, float, str))}
    if isinstance(s, str):
        return s
    ctx = {k: result[k] for k in ("algo", "round", "data", "n_samples", "bn_mode") if k in result}
    return {**s, **ctx}


@guard("probe")
def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)
    try:
        result = line.run(p, args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    text = json.dumps(result, indent=1, default=float)
    if args.json == "-":
        print(text)
    else:
        summary = result.get("summary_text") or _summary(result)      # a table where the probe prints one
        print(json.dumps(summary, default=float) if not isinstance(summary, str) else summary)
        for k, meaning in (result.get("legend") or {}).items():      # what each printed number is
            print(f"  {k}: {meaning}")
        if args.json and (not os.path.exists(args.json) or os.path.isfile(args.json)):
            line.write_json(result, args.json)        # atomic: a full disk leaves no empty or partial file
        elif args.json:                               # a plain write: --json may name a pipe or /dev/stdout
            with open(args.json, "w") as fh:
                fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
