"""Run directories and output paths: checked before anything is written, locked while a trainer writes.

    DIR/.lock            fcntl.flock by the writing process (pid, host, start time inside); the kernel
                         releases it when the process ends, also by kill -9
    DIR/config.json      the run's RunConfig
    DIR/metrics.jsonl    one JSON object per evaluated round
    DIR/ckpt/*.pt        checkpoints; a kill mid-write leaves a .NAME.XXXX.tmp, removed at the next start

``prepare(out, resume, overwrite)`` is the one gate: a path that is a file or lies below a file, a directory in use
by another writer, and a non-empty directory that is neither resumed nor ``--overwrite`` are refused in one line;
``--overwrite`` only clears a directory that holds a run (config.json), never an arbitrary folder.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path

from .errors import UserError

try:
    import fcntl
except ImportError:                                 # no flock (Windows): runs are not protected from a second writer
    fcntl = None


def check_dir(path, flag: str = "--out") -> Path:
    """``path`` can be (or become) a folder: neither it nor a parent is a file."""
    p = Path(path)
    for q in (p, *p.parents):
        if q.exists() or q.is_symlink():
            if not q.is_dir():
                below = "" if q == p else f" (it lies below {q}, a file)"
                raise UserError(f"{flag} {path}: is not a folder{below}; give a folder path")
            if not os.access(q, os.W_OK | os.X_OK):
                raise UserError(f"{flag} {path}: {q} is not writable")
            break
    return p


def writable(folder: Path, flag: str, path) -> None:
    """``folder`` (it exists) accepts a new entry: tried with a temporary file that is removed at once, since
    permission bits do not tell (root, read-only mounts, /proc)."""
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".fedlab-check.")
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise UserError(f"{flag} {path}: nothing can be written in {folder} ({e.strerror or e})") from None


def check_file(path, flag: str) -> Path:
    """``path`` can be written as a file: its folder exists, accepts writes, and ``path`` is not itself a folder."""
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{flag} {path}: is a folder; give a file name")
    parent = p.parent
    if not parent.is_dir():
        what = "does not exist" if not parent.exists() else "is a file"
        raise UserError(f"{flag} {path}: its folder {parent} {what}; create the folder first")
    if not os.access(parent, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise UserError(f"{flag} {path}: cannot be written (permission denied)")
    writable(parent, flag, path)
    return p


def _temporary(p: Path) -> bool:
    """A killed write's leftover (``.NAME.XXXX.tmp``), or a folder holding nothing else."""
    if p.is_dir() and not p.is_symlink():
        return all(_temporary(q) for q in p.iterdir())
    return p.name.startswith(".") and p.name.endswith(".tmp")


def killed_before_checkpoint(path) -> bool:
    """``path`` holds a run (config.json) killed before it wrote a checkpoint: ckpt/ holds temporaries at most."""
    p = Path(path)
    return (p / "config.json").is_file() and (not (p / "ckpt").exists() or _temporary(p / "ckpt"))


def _holder(fd) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, 300).decode("utf-8", "replace").strip() or "another process"


def _try_lock(fd, out: Path) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise UserError(f"--out {out}: in use by {holder}; wait for that run to end, or pick another --out") from None


def prepare(out, resume: bool = False, overwrite: bool = False):
    """Check, lock and clean ``out`` for writing; returns the lock (``release()`` it when done, or let the
    process end). Nothing is written unless every check passes."""
    out = check_dir(out)
    lockfile = out / ".lock"
    fd = None
    if fcntl is not None and lockfile.exists():     # an existing lock is taken before looking further
        fd = os.open(lockfile, os.O_RDWR)
        _try_lock(fd, out)
    try:
        present = sorted(p.name for p in out.iterdir() if p.name != ".lock" and not _temporary(p)) \
            if out.is_dir() else []                 # a killed write's temporaries are no run: removed below
        if present and not resume:
            if not overwrite:
                raise UserError(f"--out {out}: is not empty ({', '.join(present[:4])}"
                                f"{', ...' if len(present) > 4 else ''}); --resume it, pick another --out, or "
                                f"pass --overwrite to delete its run")
            if "config.json" not in present:
                raise UserError(f"--overwrite: {out} holds files but no run (no config.json); refusing to delete "
                                f"them; pick another --out")
        out.mkdir(parents=True, exist_ok=True)
        if fcntl is not None and fd is None:
            fd = os.open(lockfile, os.O_RDWR | os.O_CREAT, 0o644)
            _try_lock(fd, out)
    except BaseException:
        if fd is not None:
            os.close(fd)
        raise
    if fd is not None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {stamp}\n".encode(), 0)
    if present and not resume:                      # --overwrite, checked above
        for name in present:
            p = out / name
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    for tmp in [*out.glob(".*.tmp"), *out.glob("ckpt/.*.tmp")]:   # a killed write's leftovers (ours: locked)
        tmp.unlink(missing_ok=True)
    for d in [out / "ckpt"]:                                          # a folder that held nothing else
        if d.is_dir() and not any(d.iterdir()):
            d.rmdir()
    return _Lock(fd)


class _Lock:
    def __init__(self, fd):
        self.fd = fd

    def release(self):
        if self.fd is not None:
            os.close(self.fd)                       # closing the descriptor drops the flock
            self.fd = None


def atomic(path: Path, write) -> Path:
    """``write(tmp)`` fills a temp file beside ``path``, which then replaces ``path`` in one step: a kill leaves
    the old file or the new one, never half of one (and at worst a stale .NAME.XXXX.tmp that ``prepare`` removes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        cause = os_error(e)
        if cause is not None and not isinstance(e, UserError):       # a full disk, a quota, an I/O error
            kept = "the previous file is kept" if path.exists() else "nothing was written"
            raise UserError(f"{path}: cannot be written ({cause.strerror or cause}); {kept}; free some space "
                            f"(or pick another disk) and run again{RESUME if path.name == 'last.pt' else ''}") from e
        raise
    return path


RESUME = " (a run: --resume continues from its last.pt)"


def os_error(e: BaseException) -> OSError | None:
    """The OSError behind ``e``: itself, or the one a library wrapped (torch.save raises a RuntimeError whose
    context is the file object's OSError)."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, OSError):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def write_text(path: Path, text: str) -> Path:
    return atomic(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def read_config(path, flag: str = "--resume") -> dict:
    """DIR/config.json as a dict (not yet checked against RunConfig); one line if it is unreadable."""
    try:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{flag}: {path} does not exist; is this a run directory?") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{flag}: {path} is damaged ({' '.join(str(e).split())[:120]}); restore it from the "
                        f"checkpoint's config or start a new run") from None
    if not isinstance(d, dict):
        raise UserError(f"{flag}: {path} does not hold a mapping of RunConfig fields")
    return d


def read_metrics(path) -> list[dict]:
    """The rows of metrics.jsonl (``path`` is the file or the run directory holding it); [] when there is no such
    file. A last line cut short by a kill (no newline) is dropped; any other damage is one UserError line naming
    the file and the line. The one reader of metrics rows (plots, report, compare, demo and the trainer's resume)."""
    if Path(path).is_dir():
        path = Path(path) / "metrics.jsonl"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: cannot be read ({' '.join(str(e).split())[:120]})") from None
    lines = text.split("\n")
    complete, rows = lines[:-1], []                 # lines[-1] is "" or a row cut short by a kill
    for i, s in enumerate(complete, 1):
        try:
            row = json.loads(s)
        except json.JSONDecodeError as e:
            raise UserError(f"{path}: line {i} is not JSON ({e.msg}); fix or delete that line") from None
        if not isinstance(row, dict) or isinstance(row.get("round"), bool) or not isinstance(row.get("round"), int):
            raise UserError(f"{path}: line {i} is not a metrics row (no whole-number 'round'); fix or delete it")
        rows.append(row)
    return rows
