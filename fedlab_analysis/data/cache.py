"""The data cache that ``make data`` fills: where it is, and writes that never leave a partial entry.

``root(what)``               that folder, unchecked (what a reader of the cache needs)
``folder(what)``             ``$FEDLAB_DATA``, else ``$HOME/.cache/fedlab_analysis``: checked to be (or become) a
                             folder this process can write; neither variable set, a file in the way or no write
                             permission is one ``DataError`` line naming ``what`` (e.g. "mnist")
``staging(root)``            a temporary folder inside ``root`` for a download, removed at the end whatever happens;
                             move what it produced into place with ``os.replace`` (one step, same disk)
``write_npz(path, arrays)``  an uncompressed ``.npz`` written to a temporary file, then renamed into place
``read_npz(path, what, fix)`` every member's header (shape, dtype) checked against the bytes the member holds
                             before an array is read: a header claiming 10^12 entries is one line, not a MemoryError
"""
from __future__ import annotations

import contextlib
import math
import os
import shutil
import tempfile
import zipfile
import zlib
from pathlib import Path

import numpy as np

from fedlab_analysis.errors import DataError

ENV = "FEDLAB_DATA"


def root(what: str = "data") -> Path:
    """``$FEDLAB_DATA``, else ``$HOME/.cache/fedlab_analysis`` (never a home folder guessed from elsewhere)."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV]).expanduser()
    if os.environ.get("HOME"):
        return Path(os.environ["HOME"]) / ".cache" / "fedlab_analysis"
    raise DataError(f"{what}: neither {ENV} nor HOME is set, so there is no data cache folder; set {ENV}=/a/folder "
                    f"(where `make data` writes and runs read)")


def folder(what: str) -> Path:
    """``root()``, checked writable (created if missing): one DataError line naming ``what`` otherwise."""
    from fedlab_analysis.rundir import check_dir, writable
    from fedlab_analysis.errors import UserError
    path = root(what)
    flag = f"{what}: the data cache ({ENV} or HOME)"
    try:
        check_dir(path, flag)
        path.mkdir(parents=True, exist_ok=True)
        writable(path, flag, path)
    except UserError as e:
        raise DataError(f"{e}; set {ENV} to a folder you can write") from None
    except OSError as e:
        raise DataError(f"{flag} {path}: cannot be created ({e.strerror or e}); set {ENV} to a folder you can "
                        f"write") from None
    return path


@contextlib.contextmanager
def staging(where: Path):
    """A fresh temporary folder inside ``where`` (same disk, so ``os.replace`` out of it is one step)."""
    tmp = Path(tempfile.mkdtemp(dir=where, prefix=".staging.", suffix=".tmp"))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_npz(path: Path, arrays: dict) -> Path:
    """``np.savez`` to a temporary file beside ``path``, renamed into place (``rundir.atomic``: a full disk is one
    line, a kill leaves the old file or none)."""
    from fedlab_analysis.rundir import atomic

    def write(tmp):
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)                   # uncompressed: tens of ms to load
    return atomic(Path(path), write)


def read_npz(path: Path, what: str, fix: str) -> dict:
    """The arrays of ``path`` (no pickles), each header checked against its member's size first."""
    try:
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                if info.filename.endswith(".npy"):
                    with z.open(info) as fh:
                        _check_header(fh, info, path, what, fix)
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except DataError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as e:
        raise DataError(f"{what}: {path} is not a readable .npz ({' '.join(str(e).split())[:200]}); delete it and "
                        f"{fix}") from None


def _check_header(fh, info, path, what, fix) -> None:
    version = np.lib.format.read_magic(fh)
    shape, _, dtype = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)(fh)
    name = info.filename[:-4]
    if dtype.hasobject:
        raise DataError(f"{what}: {path}: {name} holds Python objects, which a data cache never does; delete it and "
                        f"{fix}")
    need, held = math.prod(shape) * dtype.itemsize, info.file_size - fh.tell()
    if need != held:
        raise DataError(f"{what}: {path}: {name} claims {list(shape)} {dtype} = {need} bytes but holds {held}; it is "
                        f"damaged, delete it and {fix}")
