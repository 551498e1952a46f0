"""python -m fedlab_analysis.train --algo NAME --dataset NAME --rounds N --out DIR [...]

Writes DIR/config.json, DIR/metrics.jsonl (one JSON object per evaluated round), DIR/ckpt/round_XXXX.pt
(every --ckpt-every rounds) and DIR/ckpt/last.pt. ``--config run.yaml`` gives a base config; flags override it.
``--resume DIR`` continues a run and ends bit-identical (CPU) to an uninterrupted one. Bad input: one line, exit 2;
divergence (non-finite loss or parameters): one line, exit 3. A second writer on DIR, or a non-empty DIR without
``--overwrite``, is refused.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import algos, rundir
from .cli import guard, out_dir
from .config import RunConfig, check, fields, refuse_unused
from .errors import EXIT_DIVERGED, Diverged, UserError
from .options import ArgParser, add_arguments, from_args, load_yaml


def parser() -> argparse.ArgumentParser:
    p = ArgParser(
        prog="python -m fedlab_analysis.train",            # each field's help already states its default
        description=__doc__.split("\n\n")[1],
        epilog="algorithms: " + ", ".join(algos.NAMES) + ". Hyper-parameters left unset take the paper's default. "
               f"Exit codes: 0 done, 2 bad input (one line, nothing written), {EXIT_DIVERGED} diverged.")
    p.add_argument("--out", help="run directory (config.json, metrics.jsonl, ckpt/)")
    p.add_argument("--config", help="YAML (or JSON) file of RunConfig fields; flags override it")
    p.add_argument("--resume", metavar="DIR", help="continue the run in DIR from DIR/ckpt/last.pt")
    p.add_argument("--overwrite", action="store_true", help="delete the run already in --out and start afresh")
    p.add_argument("--dry-run", action="store_true", help="print the run's memory and disk plan and the device's free "
                   "memory, and stop (nothing is trained or written; --out may be left out)")
    add_arguments(p, RunConfig)
    return p


@guard("train")
def main(argv=None) -> int:
    args = parser().parse_args(argv)
    restart = False                                  # --resume of a run killed before its first checkpoint
    try:
        yaml = load_yaml(args.config, RunConfig) if args.config is not None else {}
        flags = [f.name for f in fields(RunConfig) if getattr(args, f.name) is not None]
        sources = {k: f"--config {args.config}" for k in yaml}
        base = yaml
        if args.resume is not None:
            out_dir(args.resume, "--resume")
            if args.out is not None and Path(args.out).resolve() != Path(args.resume).resolve():
                raise UserError(f"--out {args.out}: differs from --resume {args.resume}; a resumed run writes "
                                f"into its own directory (drop --out)")
            if args.overwrite:
                raise UserError("--overwrite: cannot be combined with --resume (it would delete the run)")
            restart = rundir.killed_before_checkpoint(args.resume)
            if not restart and not (Path(args.resume) / "ckpt" / "last.pt").is_file():
                raise UserError(f"--resume {args.resume}: no checkpoint {args.resume}/ckpt/last.pt; is this a run "
                                f"directory?")
            path = Path(args.resume) / "config.json"
            base = {**check(rundir.read_config(path), str(path)), **yaml}
            sources = {**{k: str(path) for k in base}, **sources}
            args.out = args.resume
        if args.out is None and not args.dry_run:
            raise UserError("--out: give a run directory (it receives config.json, metrics.jsonl and ckpt/)")
        if args.out is not None:
            out_dir(args.out)
        for k in flags:                              # a flag overrides the file: name the flag
            sources.pop(k, None)
        cfg = from_args(args, RunConfig, base).validate(sources)
        refuse_unused(cfg, [*flags, *yaml], sources)  # what the user typed, not a resumed config.json
        from .device import set_threads
        from .probes.hooks import build
        from .trainers.loop import train
        set_threads(cfg.threads)
        hooks = build(cfg)
        if args.dry_run:
            print("\n".join(dry_run(cfg, args.out, hooks)))
            return 0
        why = fits(cfg, args.out, hooks)
        if why:
            raise UserError(why)
        resume = args.resume is not None and not restart             # a restart begins at round 0 again
        run = train(cfg, args.out, resume=resume, callbacks=hooks, overwrite=args.overwrite or restart)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Diverged as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_DIVERGED
    r = run.last_row or {}
    print(f"{cfg.algo} on {cfg.dataset}: round {run.t}, test_acc {r.get('test_acc', float('nan')):.4f}, "
          f"test_loss {r.get('test_loss', float('nan')):.4f} -> {args.out}")
    return 0


def dry_run(cfg: RunConfig, out, hooks=()) -> list[str]:
    """The plan's lines and what the device and the disk have free."""
    from . import plan as planning
    p = planning.plan(cfg, hooks=hooks)
    lines = p.lines()
    lines.append(f"  free: {planning.gib(planning.free_memory(p.device))} on {p.device}"
                 + (f", {planning.gib(planning.free_memory('cpu'))} host memory" if p.host else "")
                 + f", {planning.gb(planning.free_disk(out or '.'))} disk at {out or '.'}")
    return lines


def fits(cfg: RunConfig, out, hooks=()) -> str | None:
    """One line when the plan exceeds the device's free memory (or host memory, or the disk), else None."""
    from . import plan as planning
    p = planning.plan(cfg, hooks=hooks)
    why = planning.refusal(p, planning.free_memory(p.device), planning.free_disk(out))
    if why is None and p.host and sum(p.host.values()) > planning.free_memory("cpu"):    # the tables in host RAM
        why = (f"--state-device cpu: the tables need about {planning.gib(sum(p.host.values()))} of host memory and "
               f"{planning.gib(planning.free_memory('cpu'))} is available: use fewer --clients (see --dry-run)")
    return why


if __name__ == "__main__":
    sys.exit(main())
