"""Checkpoints are plain data (DESIGN.md decision 5): a dict of tensors, numbers, strings, lists and dicts,
written atomically (temp file + os.replace) and read only with ``torch.load(weights_only=True)``.

Schema (version 1): format, version, config (RunConfig dict), round, model (name, kwargs, input_shape,
n_classes), global (param name -> tensor), buffers (name -> tensor), layers (ParamSpace table), algo_state
(name -> tensor), clients (ids, models [m, P], rounds [m] last round each client trained, -1 = never; or None),
partition (indices: list of tensors, counts), rng (the seeding scheme), metrics (last row).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch

from .errors import CheckpointError
from .rundir import atomic

FORMAT, VERSION = "fedlab_analysis.ckpt", 1
REQUIRED = ("config", "round", "model", "global", "layers", "algo_state", "partition")


def save(ckpt: dict, path: str | os.PathLike) -> Path:
    ckpt = {"format": FORMAT, "version": VERSION, **ckpt}
    return atomic(Path(path), lambda tmp: torch.save(ckpt, tmp))


def alias(src: str | os.PathLike, path: str | os.PathLike) -> Path:
    """Make ``path`` (e.g. last.pt) the same checkpoint as the saved ``src``: a hard link, or a byte copy where
    the file system has none; atomic, and the checkpoint is not serialised again."""
    def write(tmp):
        os.unlink(tmp)
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)
    return atomic(Path(path), write)


def load(path: str | os.PathLike, map_location="cpu") -> dict:
    """Load and validate; any problem is one CheckpointError line naming the file and the fix."""
    path = Path(path)
    if path.is_dir():
        for cand in (path / "ckpt" / "last.pt", path / "last.pt"):
            if cand.exists():
                path = cand
                break
    if not path.exists():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist (give a .pt file or a run directory "
                              f"holding ckpt/last.pt)")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # noqa: BLE001  truncated zips fail as KeyError, EOFError, BadZipFile, ...
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        raise CheckpointError(f"{str(path)!r} is truncated or not a torch checkpoint ({first}); "
                              f"re-run or point at another file") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        what = ckpt.get("format") if isinstance(ckpt, dict) else type(ckpt).__name__
        raise CheckpointError(f"{str(path)!r} is not a fedlab_analysis checkpoint (format={what!r}); "
                              f"probes read files written by `python -m fedlab_analysis.train`")
    if not isinstance(ckpt.get("version"), int) or ckpt["version"] > VERSION:
        raise CheckpointError(f"{str(path)!r} has format version {ckpt.get('version')!r}, newer than this "
                              f"fedlab_analysis reads ({VERSION}); upgrade fedlab_analysis")
    missing = [k for k in REQUIRED if k not in ckpt]
    if missing:
        raise CheckpointError(f"{str(path)!r} lacks {', '.join(missing)}; it is incomplete, re-run training")
    return ckpt
