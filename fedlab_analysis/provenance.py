"""What a cached result was computed by: a hash of the package's source, so that a code change invalidates it.

``source_hash()`` is the sha256 over every ``.py`` file of the package (relative path and bytes, in sorted order),
so editing, adding, removing or renaming a module changes it, and two checkouts of the same code agree. A cache
stores it beside its configuration (``stamp``) and is reused only when both match (``matches``).

``machine(device)`` names what a run's float32 numbers also depend on: the GPU, or the CPU and the vector
instructions torch uses on it. Two CPUs can agree to 7 digits early in a run and to 2 digits later.
A run's record stores it; no cache key holds it.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def _add(h, f: Path, base: Path) -> None:
    h.update(f.relative_to(base).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")


def files_hash(files, root) -> str:
    """sha256 (hex) of ``files`` in sorted order, each as its path relative to ``root`` and its bytes: the one
    hashing rule of every cache key (the package's source here, the training and hook sources of the paper figures'
    run cache)."""
    h, root = hashlib.sha256(), Path(root).resolve()
    for f in sorted(Path(f).resolve() for f in files):
        _add(h, f, root)
    return h.hexdigest()


def source_hash(paths=None) -> str:
    """sha256 (hex) of the given files or folders (default: the package), each folder's ``.py`` files read in
    sorted order; a file's path relative to its folder goes into the hash too, so a rename changes it."""
    h = hashlib.sha256()
    for root in [PACKAGE] if paths is None else [Path(p).resolve() for p in paths]:
        for f in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
            _add(h, f, root if root.is_dir() else root.parent)
    return h.hexdigest()


def stamp(config) -> dict:
    """The key a cached result is stored with: its configuration (JSON-able) and the source hash."""
    return {"config": json.loads(json.dumps(config, sort_keys=True)), "source": source_hash()}


def matches(path, config) -> bool:
    """True when ``path`` (a stamp written by ``write``) holds this configuration and this source."""
    path = Path(path)
    try:
        return json.loads(path.read_text()) == stamp(config)
    except (OSError, ValueError):
        return False


def write(path, config) -> None:
    Path(path).write_text(json.dumps(stamp(config), indent=1, sort_keys=True) + "\n")


def cpu_model() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else the architecture."""
    import platform
    try:
        with open("/proc/cpuinfo") as f:
            return next(s.split(":", 1)[1].strip() for s in f if s.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def machine(device="cpu") -> str:
    """The machine a run computes on, as its record stores it: the GPU's name, or the CPU's model with the widest
    vector instructions torch uses there (``AVX2``, ``AVX512``), then torch's version. ``device`` as a run's
    config gives it (``auto`` included)."""
    import torch

    from .device import resolve
    device = resolve(device)
    if device.type == "cuda":
        where = torch.cuda.get_device_name(device)
    else:
        where = f"{cpu_model()}, {torch.backends.cpu.get_cpu_capability()}"
        where += "" if device.type == "cpu" else f" ({device.type})"
    return f"{where}; torch {torch.__version__}"
