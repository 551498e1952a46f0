"""python -m fedlab_analysis.train --algo NAME --dataset NAME --rounds N --out DIR [...]

Writes DIR/config.json, DIR/metrics.jsonl (one JSON object per evaluated round), DIR/ckpt/round_XXXX.pt
(every --ckpt-every rounds) and DIR/ckpt/last.pt. ``--config run.yaml`` gives a base config; flags override it.
``--resume DIR`` continues a run and ends bit-identical (CPU) to an uninterrupted one. Bad input: one line, exit 2.
"""
from __future__ import annotations

import argparse
import json
import sys

from .config import HelpFormatter, add_arguments, from_args, load_yaml
from .errors import UserError


def parser() -> argparse.ArgumentParser:
    from .trainers import ALGORITHMS
    p = argparse.ArgumentParser(
        prog="python -m fedlab_analysis.train", formatter_class=HelpFormatter,
        description=__doc__.split("\n\n")[1],
        epilog="algorithms: " + ", ".join(ALGORITHMS) + ". Hyper-parameters left unset take the paper's default.")
    p.add_argument("--out", help="run directory (config.json, metrics.jsonl, ckpt/)")
    p.add_argument("--config", help="YAML (or JSON) file of RunConfig fields; flags override it")
    p.add_argument("--resume", metavar="DIR", help="continue the run in DIR from DIR/ckpt/last.pt")
    add_arguments(p)
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        base = load_yaml(args.config) if args.config else {}
        if args.resume:
            with open(f"{args.resume}/config.json") as fh:
                base = {**json.load(fh), **base}
            args.out = args.resume
        cfg = from_args(args, base)
        if args.out is None:
            raise UserError("--out: give a run directory (it receives config.json, metrics.jsonl and ckpt/)")
        import torch

        from .probes.hooks import build
        from .trainers.loop import train
        torch.set_num_threads(cfg.threads)
        run = train(cfg, args.out, resume=bool(args.resume), callbacks=build(cfg))
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    r = run.last_row or {}
    print(f"{cfg.algo} on {cfg.dataset}: round {run.t}, test_acc {r.get('test_acc', float('nan')):.4f}, "
          f"test_loss {r.get('test_loss', float('nan')):.4f} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
