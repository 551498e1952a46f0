"""Carry the real data sets to the GPU machine inside its 64 MiB tree: ``python benchmarks/gpu_data.py pack|unpack``.

The cached ``mnist.npz`` and ``fmnist.npz`` are uncompressed (55 MB each: they load in tens of ms), too large to
travel together. ``pack`` (here) writes compressed copies to ``data/<name>.z.npz`` (11 and 29 MB); name ``data`` in
the device call's ``carry``. ``unpack`` (there, ``benchmarks/gpu_tier.sh`` calls it) writes each back as the
uncompressed cache file under ``$FEDLAB_DATA`` (``cache.write_npz``), where the loaders read and check it as usual.
The arrays are the same bytes either way: ``unpack`` checks each against the sha256 ``pack`` recorded beside it.
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from fedlab_analysis.data import cache

NAMES = ("mnist", "fmnist")
HERE = Path("data")


def digest(arrays: dict) -> str:
    h = hashlib.sha256()
    for k in sorted(arrays):
        h.update(k.encode() + str(arrays[k].shape).encode() + arrays[k].dtype.str.encode() + arrays[k].tobytes())
    return h.hexdigest()


def pack(names=NAMES) -> None:
    HERE.mkdir(exist_ok=True)
    for n in names:
        src = cache.folder("data") / f"{n}.npz"
        if not src.exists():
            sys.exit(f"gpu_data: {src} is missing; run `make data` first")
        arrays = dict(np.load(src))
        np.savez_compressed(HERE / f"{n}.z.npz", **arrays)
        (HERE / f"{n}.z.json").write_text(json.dumps({"sha256": digest(arrays)}))
        print(f"{HERE / f'{n}.z.npz'}: {(HERE / f'{n}.z.npz').stat().st_size / 2**20:.1f} MiB")


def unpack() -> None:
    dest = cache.folder("data")
    for z in sorted(HERE.glob("*.z.npz")):
        n = z.name[:-len(".z.npz")]
        arrays = dict(np.load(z))
        want = json.loads((HERE / f"{n}.z.json").read_text())["sha256"]
        if digest(arrays) != want:
            sys.exit(f"gpu_data: {z} does not hold the arrays packed (sha256 differs); pack it again")
        cache.write_npz(dest / f"{n}.npz", arrays)
        print(f"{dest / f'{n}.npz'}: unpacked, sha256 {want[:12]} checked")


if __name__ == "__main__":
    verb = sys.argv[1] if len(sys.argv) > 1 else ""
    if verb not in ("pack", "unpack"):
        sys.exit("usage: python benchmarks/gpu_data.py pack [NAME ...] | unpack")
    pack(sys.argv[2:] or NAMES) if verb == "pack" else unpack()
