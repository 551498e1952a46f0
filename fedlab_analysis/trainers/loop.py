"""The run loop: rounds, evaluation, metrics.jsonl, checkpoints, resume (nanoGPT's train.py, as a function)."""
from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

import torch

from .. import checkpoint, rundir
from ..config import EXECUTION, RunConfig
from ..errors import CheckpointError, Diverged, UserError
from .engine import Run, with_dataset


def tables(run: Run) -> set:
    """The names of the run's per-client [m, P] state tables (the algorithm's declaration); a Run or its view."""
    return set(run.state_tables)


def to_checkpoint(run: Run, row: dict | None, lean: bool = False) -> dict:
    """The run's state as a checkpoint dict. Model-sized tensors are copied (own storage: plain data); the [m, P]
    tables are written as they are, without a copy (a clone would double their memory at every save). ``lean``:
    what a model checkpoint needs (ckpt/round_XXXX.pt with --ckpt-keep all): no per-client tables, and the
    clients' last local models only where --keep-clients asked to store them."""
    cfg = run.cfg
    c = lambda t: t.detach().cpu().clone()          # noqa: E731
    as_is = lambda t: t.detach().cpu()              # noqa: E731  (no copy on the CPU)
    clients = None
    if run.last_local is not None and (cfg.keep_clients or not lean):
        clients = {"ids": list(range(run.m)), "models": as_is(run.last_local), "rounds": c(run.last_round)}
    big = tables(run)
    return {
        "config": cfg.to_dict(), "round": run.t, "model": run.spec(),
        "global": {k: c(v) for k, v in run.space.unflatten(run.w).items()},
        "buffers": {k: c(v) for k, v in run.bspace.unflatten(run.buf).items()} if run.bspace.P else {},
        "layers": run.space.table(),
        "algo_state": {k: as_is(v) if k in big else c(v) for k, v in run.state.items() if not (lean and k in big)},
        "clients": clients,
        "partition": {"indices": [torch.as_tensor(ix) for ix in run.part.indices],
                      "counts": torch.as_tensor(run.part.counts)},
        "rng": {"seed": cfg.seed, "scheme": "SeedSequence(seed, spawn_key=(round+1, client+1, purpose))"},
        "metrics": row or {},
    }


def restore(run: Run, ck: dict) -> None:
    """Put a (checked) checkpoint's state into ``run``; state that does not fit this run is one CheckpointError."""
    want = {k: tuple(v.shape) for k, v in run.state.items()}
    got = {k: tuple(v.shape) for k, v in ck["algo_state"].items()}
    rows = ck["clients"]["models"].shape[0] if ck.get("clients") else run.m
    if got != want or rows != run.m:
        raise CheckpointError(f"--resume: the checkpoint's algorithm state ({', '.join(got) or 'none'}; {rows} "
                              f"clients) does not fit a {run.cfg.algo} run with {run.m} clients; it is damaged")
    dev = dict(device=run.device, dtype=run.dtype)
    run.w = run.space.flatten(ck["global"]).to(**dev)
    if run.bspace.P:
        run.buf = run.bspace.flatten(ck["buffers"]).to(**dev)
    state = run.state
    for k, v in ck["algo_state"].items():             # into each part's state in place (the shapes were checked
        state[k].copy_(v)                             # above): it keeps its device; the owner is run.algo.owner[k]
    if ck.get("clients"):
        models = ck["clients"]["models"]
        run.last_local = run.last_local.copy_(models) if run.last_local is not None else models.to(**dev)
        run.last_round = ck["clients"]["rounds"].to(run.device)
    run.space = run.space.from_table(ck["layers"])
    run.t = int(ck["round"])


_RESUME_FREE = {"rounds", "ckpt_every", "ckpt_keep", "eval_every", "eval_samples", "on_divergence", *EXECUTION}


def _diverged(run: Run, row: dict | None) -> str | None:
    """What became non-finite this round (parameters, or the evaluated loss), or None."""
    if not torch.isfinite(run.w).all():
        return "the global parameters are not finite"
    for k in ("train_loss", "test_loss"):
        if row is not None and row.get("round") == run.t and not math.isfinite(row.get(k, 0.0)):
            return f"{k} is {row[k]}"
    return None


def _check_same(old: RunConfig, cfg: RunConfig, what: str, free=_RESUME_FREE) -> None:
    diff = [k for k, v in cfg.to_dict().items() if k not in free and old.to_dict()[k] != v]
    if diff:
        raise UserError(f"{what}: the config differs from the run's in {', '.join(diff)}; "
                        f"continue with the same settings (only --rounds may grow)")


def _tensorboard(cfg: RunConfig, out):
    """--tensorboard: TensorBoard's SummaryWriter class (imported only when asked for), else None."""
    if not cfg.tensorboard or out is None:
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise UserError("--tensorboard: the tensorboard package is not installed; pip install -e .[tensorboard]") \
            from None
    return SummaryWriter


def _log_scalars(tb, row: dict) -> None:
    for k, v in row.items():
        if k != "round" and isinstance(v, (int, float)) and not isinstance(v, bool):
            tb.add_scalar(k, v, row["round"])


def train(cfg: RunConfig, out: str | os.PathLike | None = None, resume: bool = False, callbacks=(),
          dataset=None, init: dict | None = None, run: Run | None = None, overwrite: bool = False,
          batcher=None) -> Run:
    """Run ``cfg.rounds`` rounds; with ``out``: config.json, metrics.jsonl, ckpt/round_XXXX.pt, ckpt/last.pt.
    ``dataset``: a Dataset (e.g. ``Dataset.from_tensors``) instead of ``cfg.dataset``; ``init``: start weights
    as a state dict (name -> tensor) instead of the seeded initialisation (``cfg.init`` is its file form).
    ``run``: continue this Run (from an earlier ``train``) in memory up to ``cfg.rounds``, exactly as one longer
    run would; only what ``--resume`` lets change may differ. ``run.advance(k)`` is the short form.
    ``out`` is locked while this runs; a non-empty ``out`` is refused unless resumed, continued or ``overwrite``
    (which clears it). Non-finite parameters or loss raise ``Diverged`` at that round (``cfg.on_divergence ==
    'stop'``) after marking it in metrics.jsonl; last.pt keeps the last finite checkpoint. Under 'continue' the
    round is marked once and the run goes on, checkpoints included; a resume goes on from that non-finite state.
    ``batcher``: the run is one of a pack (trainers/pack.py), whose gradient calls it joins; its own progress bar
    is off."""
    out = rundir.check_dir(out) if out is not None else None
    prior = None
    if run is not None:
        if resume or dataset is not None or init is not None:
            raise UserError("train(run=...): a run object continues as it is; drop resume=, dataset= and init=")
        cfg = with_dataset(cfg, run.ds)
        _check_same(run.cfg, cfg, "train(run=...)", _RESUME_FREE - {"device"})
        run.cfg = cfg.validate()
    cfg = with_dataset(cfg, dataset)
    if resume:
        if out is None or not (out / "ckpt" / "last.pt").exists():
            raise UserError(f"--resume: no checkpoint at {out}/ckpt/last.pt; start a new run with --out")
        prior = checkpoint.load(out / "ckpt" / "last.pt", finite=cfg.on_divergence == "stop")
        _check_same(RunConfig.from_dict(prior["config"], f"{out}/ckpt/last.pt: config"), cfg, "--resume")
        if cfg.rounds < prior["round"]:
            raise UserError(f"--rounds: {cfg.rounds} is fewer than the {prior['round']} rounds {out} has done; "
                            f"give --rounds {prior['round']} or more")
    if run is None:
        run = Run(cfg, dataset=dataset, init=False if prior is not None else init)   # validates before any write
    run.trainer = train                              # Run.advance continues with this loop (engine.py cannot import it)
    run.batcher = batcher
    tb_writer = _tensorboard(cfg, out)              # a missing tensorboard is refused before any write
    run.callbacks.extend(cb for cb in callbacks if cb not in run.callbacks)
    if prior is not None:
        restore(run, prior)
    continued = resume or run.t > 0                  # --resume, or a run object continued in memory
    kept = [r for r in rundir.read_metrics(out / "metrics.jsonl") if r["round"] <= run.t] \
        if continued and out is not None and (out / "metrics.jsonl").exists() else []
    lock = rundir.prepare(out, continued, overwrite) if out is not None else None
    try:
        return _loop(run, cfg, out, prior, kept, tb_writer)
    finally:
        if lock is not None:
            lock.release()


def _loop(run: Run, cfg: RunConfig, out: Path | None, prior: dict | None, kept: list, tb_writer=None) -> Run:
    tb = None
    if out is not None:
        (out / "ckpt").mkdir(parents=True, exist_ok=True)
        rundir.write_text(out / "config.json", json.dumps(run.cfg.to_dict(), indent=1) + "\n")   # choices resolved
        rundir.write_text(out / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in kept))
        if tb_writer is not None:                    # a continued run drops the events of rounds it will redo
            tb = tb_writer(log_dir=str(out / "tb"), purge_step=run.t + 1 if run.t else None)
    run.out = out
    show = not cfg.quiet and run.batcher is None and sys.stderr.isatty()     # a pack shows one bar of its own
    from tqdm import tqdm                         # tqdm.auto would warn in Jupyter without ipywidgets
    bar = tqdm(total=cfg.rounds, initial=run.t, desc=cfg.algo, disable=not show, unit="round")
    row = prior["metrics"] if prior else getattr(run, "last_row", None)
    hooks = list(run.callbacks)                      # with a continued run, the hooks of earlier calls too
    consumed = [len(getattr(cb, "rows", None) or []) for cb in hooks]   # rows of earlier calls are written
    saved = None                                     # the checkpoint of the latest round, if one was saved
    run.marked = run.marked or any("diverged" in r for r in kept)     # a divergence is marked once (continue)
    while run.t < cfg.rounds:
        t0 = time.perf_counter()
        ctx = run.round()
        seconds = time.perf_counter() - t0
        probed = []
        for j, cb in enumerate(hooks):               # probes watching training: their new rows go to metrics.jsonl
            rows = getattr(cb, "rows", None) or []
            probed.extend(rows[consumed[j]:])
            consumed[j] = len(rows)
        run.release(ctx)                             # the round's [n, P] buffers: not held through evaluation
        full = run.t % cfg.eval_every == 0 or run.t == cfg.rounds
        if full or probed or cfg.eval_samples:       # --eval-samples: a fixed test subsample in between
            row = run.metrics(seconds, ctx, full=full or not cfg.eval_samples)
            row.update({"probes": probed} if probed else {})
            bar.set_postfix(test_acc=f"{row['test_acc']:.3f}", loss=f"{row['train_loss']:.3f}")
        why = None if run.marked else _diverged(run, row)
        if why is not None:
            run.marked = True
            row = {**(row if row is not None and row.get("round") == run.t else
                      {"round": run.t, "lr": ctx.lr, "n_active": ctx.n, "seconds": seconds}), "diverged": why}
        if out is not None and row is not None and row.get("round") == run.t:
            with open(out / "metrics.jsonl", "a") as fh:
                fh.write(json.dumps(row) + "\n")
            if tb is not None:
                _log_scalars(tb, row)
        if why is not None and cfg.on_divergence == "stop":
            bar.close()
            run.last_row = row
            where = saved_round(out) if out is not None else "nothing was saved"
            raise Diverged(f"training diverged at round {run.t}: {why} ({where}); lower --lr, add --clip, or pass "
                           f"--on-divergence continue", run.t)
        if why is not None:
            print(f"warning: training diverged at round {run.t}: {why}; going on (--on-divergence continue)",
                  file=sys.stderr)
        saved = None                                 # last.pt follows every checkpoint, so --resume works
        if out is not None and cfg.ckpt_every and run.t % cfg.ckpt_every == 0:   # after an interruption too
            saved = _save(run, row, out / "ckpt")
        bar.update(1)
    bar.close()
    if tb is not None:
        tb.close()
    if out is not None and saved is None:            # the final round was not saved above
        checkpoint.save(to_checkpoint(run, row), out / "ckpt" / "last.pt")
    run.last_row = row
    return run


def _save(run: Run, row: dict | None, ckpt: Path) -> Path:
    """--ckpt-every's save: last.pt with all a resume needs; with --ckpt-keep all also round_XXXX.pt, the model
    checkpoint (the same file, hard-linked, where nothing per-client is left out)."""
    last = ckpt / "last.pt"
    if run.cfg.ckpt_keep == "last":
        return checkpoint.save(to_checkpoint(run, row), last)
    name = ckpt / f"round_{run.t:04d}.pt"
    if not tables(run) and (run.last_local is None or run.cfg.keep_clients):
        return checkpoint.alias(checkpoint.save(to_checkpoint(run, row), name), last)
    checkpoint.save(to_checkpoint(run, row, lean=True), name)
    return checkpoint.save(to_checkpoint(run, row), last)


def saved_round(out: Path) -> str:
    """Where the last finite state is: the round last.pt holds, or that none was saved."""
    try:
        return f"{out}/ckpt/last.pt keeps round {checkpoint.load(out / 'ckpt' / 'last.pt')['round']}"
    except CheckpointError:
        return "no checkpoint was saved before it; --ckpt-every 1 keeps one every round"
