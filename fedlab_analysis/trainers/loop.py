"""The run loop: rounds, evaluation, metrics.jsonl, checkpoints, resume (nanoGPT's train.py, as a function)."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

from .. import checkpoint
from ..config import RunConfig
from ..errors import UserError
from .engine import Run


def to_checkpoint(run: Run, row: dict | None) -> dict:
    cfg = run.cfg
    c = lambda t: t.detach().cpu().clone()          # noqa: E731  (own storage per tensor: plain data)
    clients = None
    if run.last_local is not None:
        clients = {"ids": list(range(run.m)), "models": c(run.last_local), "rounds": c(run.last_round)}
    return {
        "config": cfg.to_dict(), "round": run.t, "model": run.spec(),
        "global": {k: c(v) for k, v in run.space.unflatten(run.w).items()},
        "buffers": {k: c(v) for k, v in run.bspace.unflatten(run.buf).items()} if run.bspace.P else {},
        "layers": run.space.table(),
        "algo_state": {k: c(v) for k, v in run.state.items()},
        "clients": clients,
        "partition": {"indices": [torch.as_tensor(ix) for ix in run.part.indices],
                      "counts": torch.as_tensor(run.part.counts)},
        "rng": {"seed": cfg.seed, "scheme": "SeedSequence(seed, spawn_key=(round+1, client+1, purpose))"},
        "metrics": row or {},
    }


def restore(run: Run, ck: dict) -> None:
    dev = dict(device=run.device, dtype=run.dtype)
    run.w = run.space.flatten(ck["global"]).to(**dev)
    if run.bspace.P:
        run.buf = run.bspace.flatten(ck["buffers"]).to(**dev)
    for k, v in ck["algo_state"].items():
        run.state[k] = v.to(run.device, dtype=v.dtype if not v.is_floating_point() else run.dtype)
    if ck.get("clients"):
        run.last_local = ck["clients"]["models"].to(**dev)
        run.last_round = ck["clients"]["rounds"].to(run.device)
    run.space = run.space.from_table(ck["layers"])
    run.t = int(ck["round"])


_RESUME_FREE = {"rounds", "quiet", "ckpt_every", "eval_every", "device", "threads", "tensorboard"}


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
          dataset=None) -> Run:
    """Run ``cfg.rounds`` rounds; with ``out``: config.json, metrics.jsonl, ckpt/round_XXXX.pt, ckpt/last.pt."""
    out = Path(out) if out is not None else None
    prior = None
    if resume:
        if out is None or not (out / "ckpt" / "last.pt").exists():
            raise UserError(f"--resume: no checkpoint at {out}/ckpt/last.pt; start a new run with --out")
        prior = checkpoint.load(out / "ckpt" / "last.pt")
        old = RunConfig.from_dict(prior["config"])
        diff = [k for k, v in cfg.to_dict().items() if k not in _RESUME_FREE and old.to_dict()[k] != v]
        if diff:
            raise UserError(f"--resume: the config differs from the run's in {', '.join(diff)}; "
                            f"resume with the same settings (only --rounds may grow)")
    run = Run(cfg, dataset=dataset)                  # validates everything before a file is written
    tb_writer, tb = _tensorboard(cfg, out), None
    run.callbacks.extend(callbacks)
    if prior is not None:
        restore(run, prior)
    if out is not None:
        (out / "ckpt").mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps(cfg.to_dict(), indent=1) + "\n")
        mpath = out / "metrics.jsonl"
        rows = [json.loads(s) for s in mpath.read_text().splitlines()] if resume and mpath.exists() else []
        mpath.write_text("".join(json.dumps(r) + "\n" for r in rows if r["round"] <= run.t))
        if tb_writer is not None:                    # a resumed run drops the events of rounds it will redo
            tb = tb_writer(log_dir=str(out / "tb"), purge_step=run.t + 1 if resume else None)
    show = not cfg.quiet and sys.stderr.isatty()
    from tqdm import tqdm                         # tqdm.auto would warn in Jupyter without ipywidgets
    bar = tqdm(total=cfg.rounds, initial=run.t, desc=cfg.algo, disable=not show, unit="round")
    row = prior["metrics"] if prior else None
    consumed = [0] * len(callbacks)
    saved = None                                     # the checkpoint of the latest round, if one was saved
    while run.t < cfg.rounds:
        t0 = time.perf_counter()
        ctx = run.round()
        seconds = time.perf_counter() - t0
        probed = []
        for j, cb in enumerate(callbacks):           # probes watching training: their new rows go to metrics.jsonl
            rows = getattr(cb, "rows", None) or []
            probed.extend(rows[consumed[j]:])
            consumed[j] = len(rows)
        if run.t % cfg.eval_every == 0 or run.t == cfg.rounds or probed:
            row = {**run.metrics(seconds, ctx), **({"probes": probed} if probed else {})}
            bar.set_postfix(test_acc=f"{row['test_acc']:.3f}", loss=f"{row['train_loss']:.3f}")
            if out is not None:
                with open(out / "metrics.jsonl", "a") as fh:
                    fh.write(json.dumps(row) + "\n")
                if tb is not None:
                    _log_scalars(tb, row)
        saved = None                                 # last.pt follows every checkpoint, so --resume works
        if out is not None and cfg.ckpt_every and run.t % cfg.ckpt_every == 0:   # after an interruption too
            saved = checkpoint.save(to_checkpoint(run, row), out / "ckpt" / f"round_{run.t:04d}.pt")
            checkpoint.alias(saved, out / "ckpt" / "last.pt")
        bar.update(1)
    bar.close()
    if tb is not None:
        tb.close()
    if out is not None and saved is None:            # the final round was not saved above
        checkpoint.save(to_checkpoint(run, row), out / "ckpt" / "last.pt")
    run.last_row = row
    return run
