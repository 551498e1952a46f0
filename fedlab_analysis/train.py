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
    p.add_argument("--seeds", nargs="+", metavar="S", help="train these seeds together in one program (0 1 2, or "
                   "0-4): --out DIR receives DIR/seed_S, each the run --seed S would write alone; --resume DIR "
                   "resumes them together")
    p.add_argument("--dry-run", action="store_true", help="print the run's memory and disk plan and the device's free "
                   "memory, and stop (nothing is trained or written; --out may be left out)")
    add_arguments(p, RunConfig)
    return p


@guard("train")
def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        jobs = [configure(a) for a in per_seed(args)]
        from .device import set_threads
        from .probes.hooks import build
        set_threads(jobs[0][0].threads)
        hooks = [build(cfg) for cfg, *_ in jobs]
        if args.dry_run:
            print("\n".join(dry_run([j[0] for j in jobs], args.out or args.resume, hooks)))
            return 0
        why = fits([j[0] for j in jobs], args.out or args.resume, hooks)
        if why:
            raise UserError(why)
        if len(jobs) > 1:
            return train_seeds(jobs, hooks, args.overwrite)
        from .trainers.loop import train
        (cfg, out, resume, restart), = jobs
        run = train(cfg, out, resume=resume, callbacks=hooks[0], overwrite=args.overwrite or restart)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Diverged as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_DIVERGED
    print(summary(cfg, run, out))
    return 0


def summary(cfg: RunConfig, run, out) -> str:
    r = run.last_row or {}
    return (f"{cfg.algo} on {cfg.dataset}: round {run.t}, test_acc {r.get('test_acc', float('nan')):.4f}, "
            f"test_loss {r.get('test_loss', float('nan')):.4f} -> {out}")


def per_seed(args) -> list[argparse.Namespace]:
    """The arguments of each run: ``args`` itself, or with --seeds one copy per seed, writing (or resuming)
    DIR/seed_S under --out (--resume) DIR."""
    if args.seeds is None:
        return [args]
    from .trainers.pack import parse_seeds
    seeds = parse_seeds(args.seeds)
    if args.seed is not None:
        raise UserError("--seed: give --seed or --seeds, not both")
    base = args.resume if args.resume is not None else args.out
    if base is None and not args.dry_run:
        raise UserError("--seeds: give --out DIR (it receives DIR/seed_S, one run directory per seed)")
    if args.resume is not None and args.out is not None and Path(args.out).resolve() != Path(base).resolve():
        raise UserError(f"--out {args.out}: differs from --resume {args.resume}; drop --out")
    out = []
    for s in seeds:
        where = None if base is None else str(Path(base) / f"seed_{s}")
        out.append(argparse.Namespace(**{**vars(args), "seed": None if args.resume is not None else s,
                                         "seeds": None, "out": None if args.resume is not None else where,
                                         "resume": where if args.resume is not None else None}))
    return out


def configure(args) -> tuple[RunConfig, str | None, bool, bool]:
    """One run's validated config, its directory, whether it resumes, and whether a --resume restarts it (killed
    before its first checkpoint: a restart begins at round 0 again)."""
    restart = False                                  # --resume of a run killed before its first checkpoint
    yaml = load_yaml(args.config, RunConfig) if args.config is not None else {}
    flags = [f.name for f in fields(RunConfig) if getattr(args, f.name) is not None]
    sources = {k: f"--config {args.config}" for k in yaml}
    base = yaml
    out = args.out
    if args.resume is not None:
        out_dir(args.resume, "--resume")
        if out is not None and Path(out).resolve() != Path(args.resume).resolve():
            raise UserError(f"--out {out}: differs from --resume {args.resume}; a resumed run writes "
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
        out = args.resume
    if out is None and not args.dry_run:
        raise UserError("--out: give a run directory (it receives config.json, metrics.jsonl and ckpt/)")
    if out is not None:
        out_dir(out)
    for k in flags:                                  # a flag overrides the file: name the flag
        sources.pop(k, None)
    cfg = from_args(args, RunConfig, base).validate(sources)
    refuse_unused(cfg, [*flags, *yaml], sources)     # what the user typed, not a resumed config.json
    return cfg, out, args.resume is not None and not restart, restart


def train_seeds(jobs: list, hooks: list, overwrite: bool) -> int:
    """--seeds: the runs trained together as one pack (trainers/pack.py); a line per run. Exit 0 when every run
    ended, 3 when one diverged, 2 when one was refused; a defect of one run is raised after the others end."""
    from .trainers.pack import Job, train_pack
    packed = [Job(cfg, out, resume=resume, overwrite=overwrite or restart, callbacks=h)
              for (cfg, out, resume, restart), h in zip(jobs, hooks)]
    outcomes = train_pack(packed, show=not jobs[0][0].quiet, desc=jobs[0][0].algo)
    code, defect = 0, None
    for (cfg, out, *_), o in zip(jobs, outcomes):
        if o.status == "done":
            print(summary(cfg, o.run, out))
        elif isinstance(o.exc, (UserError, Diverged)):
            print(f"error: seed {cfg.seed}: {o.exc}", file=sys.stderr)
            code = max(code, EXIT_DIVERGED if o.status == "diverged" else 2)
        else:
            defect = defect or o.exc
    if defect is not None:
        raise defect
    return code


def _plan(cfgs: list[RunConfig], hooks: list):
    """The plan of one run, or of a --seeds pack (plan.pack: the data once, the rest per run)."""
    from . import plan as planning
    if len(cfgs) == 1:
        return planning.plan(cfgs[0], hooks=hooks[0])
    plans = [planning.plan(c, hooks=h) for c, h in zip(cfgs, hooks)]
    return planning.pack(plans, f"pack of {len(cfgs)} runs ({plans[0].name})")


def dry_run(cfgs: list[RunConfig], out, hooks: list) -> list[str]:
    """The plan's lines and what the device and the disk have free."""
    from . import plan as planning
    p = _plan(cfgs, hooks)
    lines = p.lines()
    lines.append(f"  free: {planning.gib(planning.free_memory(p.device))} on {p.device}"
                 + (f", {planning.gib(planning.free_memory('cpu'))} host memory" if p.host else "")
                 + f", {planning.gb(planning.free_disk(out or '.'))} disk at {out or '.'}")
    return lines


def fits(cfgs: list[RunConfig], out, hooks: list) -> str | None:
    """One line when the plan exceeds the device's free memory (or host memory, or the disk), else None."""
    from . import plan as planning
    p = _plan(cfgs, hooks)
    why = planning.refusal(p, planning.free_memory(p.device), planning.free_disk(out))
    if why is None and p.host and sum(p.host.values()) > planning.free_memory("cpu"):    # the tables in host RAM
        why = (f"--state-device cpu: the tables need about {planning.gib(sum(p.host.values()))} of host memory and "
               f"{planning.gib(planning.free_memory('cpu'))} is available: use fewer --clients (see --dry-run)")
    return why


if __name__ == "__main__":
    sys.exit(main())
