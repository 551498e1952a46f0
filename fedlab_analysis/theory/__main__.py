"""python -m fedlab_analysis.theory PAPER|all [--quick] [--out DIR] [--seed S] [--seeds N]

Runs every toy check of one paper (or all five) on N seeds (S, S+1, ...), prints the claim table, and
writes ``report.md`` / ``report.json`` plus one PNG per rate or sweep (first seed) to ``--out`` (default
``out/theory/PAPER``). Each verdict is computed from the measurement, per seed, and reported as
"holds in n/n", "violated in k/n" or "mixed" (theory/claims.py). Exit 0 on success, 2 on bad input.
"""
from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

import torch

from ..cli import guard, out_dir
from ..rules import arg_type
from ..errors import UserError
from ..options import ArgParser
from . import power, untested
from .claims import counts, over_seeds, to_markdown, write_report

PAPERS = ("fedsmoo", "fedlesam", "fedcm", "fedals", "fedinit")
TITLES = {"fedsmoo": "FedSMOO", "fedlesam": "FedLESAM", "fedcm": "FedCM", "fedals": "FedALS",
          "fedinit": "FedInit"}


def load(paper: str):
    """The paper's check module, or None (with one line on stdout) if it is not written yet."""
    try:
        return importlib.import_module(f"{__package__}.{paper}")
    except ModuleNotFoundError as e:
        if e.name != f"{__package__}.{paper}":
            raise
        print(f"{paper}: no check module yet (fedlab_analysis/theory/{paper}.py); skipped")
        return None


SEED_MAX = 2**32 - 1                     # seeds S .. S+N-1 feed torch generators with offsets added


@guard("theory")
def main(argv: list[str] | None = None) -> int:
    ap = ArgParser(prog="python -m fedlab_analysis.theory", description=__doc__.splitlines()[2])
    ap.add_argument("paper", help=f"one of {', '.join(PAPERS)}, all")
    ap.add_argument("--quick", action="store_true",
                    help="the same designs with fewer replicates: 2 seeds, fewer draws, no mistake runs "
                         "(kinds are then not measured; classroom: all papers in about a minute)")
    ap.add_argument("--out", default=None, help="report folder (default out/theory/PAPER)")
    ap.add_argument("--seed", type=arg_type(int, lo=0, hi=SEED_MAX), default=0, help="first seed (default 0)")
    ap.add_argument("--no-power", action="store_true",
                    help="skip the mistake runs (the 'mistakes caught' column says not measured); --quick skips "
                         "them too")
    ap.add_argument("--seeds", type=arg_type(int, lo=1, hi=10_000), default=None,
                    help="number of seeds for every check (default 5, 2 with --quick; at least 1)")
    args = ap.parse_args(argv)
    try:
        if args.paper not in PAPERS + ("all",):
            raise UserError(f"unknown paper {args.paper!r}: choose one of {', '.join(PAPERS)}, all")
        out = out_dir(Path("out/theory") / args.paper if args.out is None else args.out)
        n_seeds = args.seeds if args.seeds is not None else 2 if args.quick else 5
        if args.seed + n_seeds - 1 > SEED_MAX:
            raise UserError(f"--seed: seeds {args.seed}..{args.seed + n_seeds - 1} go beyond {SEED_MAX}")
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    torch.set_num_threads(1)             # the toys are tiny tensors; threads only add contention
    claims, times, texts = [], {}, {}
    for paper in PAPERS if args.paper == "all" else (args.paper,):
        mod = load(paper)
        if mod is None:
            continue
        t0 = time.perf_counter()
        rows = over_seeds(mod.run, list(range(args.seed, args.seed + n_seeds)), quick=args.quick, out_dir=out)
        claims += power.annotate(rows, mod, seed=args.seed, run=not (args.no_power or args.quick))
        texts.update({n: m.text for n, m in power.mistake_table(mod).items()})
        claims += untested.rows(paper)
        times[paper] = time.perf_counter() - t0
    print(to_markdown(claims))
    print(f"{len(claims)} claims over {n_seeds} seeds: {counts(claims)}")
    print("time: " + ", ".join(f"{p} {t:.1f}s" for p, t in times.items()))
    title = "Theory checks: " + ("all papers" if args.paper == "all" else TITLES[args.paper])
    title += " (quick)" if args.quick else ""
    print(f"report: {write_report(claims, out, title, mistakes=texts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
