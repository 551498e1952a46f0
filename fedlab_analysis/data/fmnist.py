"""Fashion-MNIST offline: the four official IDX files inside Debian's ``dataset-fashion-mnist`` package, cached
once as a uint8 ``.npz`` beside MNIST's.

``make data`` (= ``python -m fedlab_analysis.data.fmnist``) runs ``apt-get download`` of the pinned version into a
temporary folder (the package is never installed) and checks the .deb's sha256. It reads the .deb's ar and tar
members in Python, checks each decompressed IDX file (header: magic, 60,000 or 10,000 items, 28 x 28; content:
the sha256 of the official release's bytes), and writes ``fmnist.npz`` (a temp file, then a rename). Debian
re-compressed the ``.gz`` files, so their checksums differ from Zalando's; what is inside is checked instead.
A second call finds the ``.npz`` and does nothing. Without apt: ``--deb FILE`` (the same .deb, fetched from
``POOL_URL``), or train with ``--data-dir`` holding the official IDX files.
"""
import gzip
import hashlib
import io
import lzma
import struct
import subprocess
import sys
import tarfile
import tempfile
import zlib
from pathlib import Path

import numpy as np

from fedlab_analysis.cli import guard
from fedlab_analysis.data.cache import read_npz, root, write_npz
from fedlab_analysis.errors import DataError
from fedlab_analysis.options import ArgParser

PACKAGE, VERSION = "dataset-fashion-mnist", "0.0~git20200523.55506a9-1"
DEB = f"{PACKAGE}_{VERSION}_all.deb"
DEB_SHA256 = "39e172fe32dd318ebb3e512220c3beea2fa47d7e20bab348fb4e0922d6beefc0"
POOL_URL = f"https://deb.debian.org/debian/pool/main/d/{PACKAGE}/{DEB.replace('~', '%7E')}"
MEMBER_DIR = "usr/share/datasets/fashion-mnist/"  # in the .deb's data.tar.*, each file gzipped
# sha256 of the decompressed IDX files; the same bytes as Zalando's release (its .gz files' md5s in the
# fashion-mnist README decompress to these)
IDX_SHA256 = {
    "train-images-idx3-ubyte": "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
    "train-labels-idx1-ubyte": "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
    "t10k-images-idx3-ubyte": "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
    "t10k-labels-idx1-ubyte": "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
}
KEYS = ("x_train", "y_train", "x_test", "y_test")  # in IDX_SHA256's order
SIZES = (60000, 10000)  # train, test
NPZ = "fmnist.npz"
FIX = (f"run `make data` (apt-get download {PACKAGE}={VERSION}, 31 MB, never installed; without apt: "
       f"python -m fedlab_analysis.data.fmnist --deb FILE, FILE from {POOL_URL})")


def idx_bytes(a: np.ndarray) -> bytes:
    """An IDX file of unsigned bytes: magic 0x0000 08 ndim, ndim big-endian int32 sizes, the data."""
    return struct.pack(f">i{a.ndim}i", 0x800 + a.ndim, *a.shape) + a.tobytes()


def _shapes():
    n_train, n_test = SIZES
    return dict(zip(KEYS, ((n_train, 28, 28), (n_train,), (n_test, 28, 28), (n_test,))))


def parse(files: dict, fix: str = FIX) -> dict:
    """IDX file name -> its decompressed bytes  ->  ``KEYS`` uint8 arrays; each header and sha256 checked (a
    mismatch is one ``DataError`` line ending in ``fix``)."""
    arrays = {}
    for (f, sha), (k, shape) in zip(IDX_SHA256.items(), _shapes().items()):
        data = files[f]
        header = struct.pack(f">i{len(shape)}i", 0x800 + len(shape), *shape)
        if data[:len(header)] != header:
            got = data[:len(header)].hex()
            raise DataError(f"fmnist: {f} has the header {got}, expected {header.hex()} (magic {0x800 + len(shape)}"
                            f", shape {list(shape)}); {fix}")
        digest = hashlib.sha256(data).hexdigest()
        if digest != sha:
            raise DataError(f"fmnist: {f} has sha256 {digest}, expected {sha} (the official release); {fix}")
        arrays[k] = np.frombuffer(data, np.uint8, offset=len(header)).reshape(shape)
    return arrays


def _ar(data: bytes) -> dict:
    """The members of an ar archive (a .deb): ``!<arch>\\n``, then per member a 60-byte header (name 16, ...,
    size 10 at 48, ``\\x60\\n``) and the data, padded to an even length."""
    if data[:8] != b"!<arch>\n":
        raise ValueError("not an ar archive")
    members, i = {}, 8
    while i + 60 <= len(data):
        head = data[i:i + 60]
        if head[58:60] != b"`\n":
            raise ValueError(f"bad ar member header at byte {i}")
        size = int(head[48:58])
        members[head[:16].decode("ascii").strip().rstrip("/")] = data[i + 60:i + 60 + size]
        i += 60 + size + size % 2
    return members


def read_deb(deb: Path, sha256: str = DEB_SHA256) -> dict:
    """The decompressed IDX files of ``deb`` (file name -> bytes), the .deb's sha256 checked first."""
    try:
        data = Path(deb).read_bytes()
    except OSError as e:
        raise DataError(f"fmnist: cannot read {deb} ({e.strerror or e}); {FIX}") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise DataError(f"fmnist: {deb} has sha256 {digest}, expected {sha256} ({DEB}); {FIX}")
    try:
        members = _ar(data)
        name = next(n for n in members if n.startswith("data.tar"))
        with tarfile.open(fileobj=io.BytesIO(members[name]), mode="r:*") as tar:
            files = {}
            for f in IDX_SHA256:
                files[f] = gzip.decompress(tar.extractfile(tar.getmember(f"./{MEMBER_DIR}{f}.gz")).read())
    except (ValueError, StopIteration, KeyError, tarfile.TarError, OSError, EOFError, zlib.error,
            lzma.LZMAError) as e:
        raise DataError(f"fmnist: cannot read the IDX files in {deb} ({type(e).__name__}: "
                        f"{' '.join(str(e).split())}); {FIX}") from None
    return files


def load(path: Path | None = None):
    """``(x_train [60000, 28, 28], y_train, x_test [10000, 28, 28], y_test)`` uint8 from the cached ``.npz``
    (default ``data.cache.root() / NPZ``), every array checked against the official IDX bytes; a missing or damaged file
    is a one-line ``DataError``."""
    path = Path(path) if path is not None else root("fmnist") / NPZ
    if not path.is_file():
        raise DataError(f"fmnist: found neither the IDX files (--data-dir) nor the cached copy {path}; {FIX}; or "
                        f"pass --data-dir holding the IDX files from https://github.com/zalandoresearch/fashion-mnist")
    arrays = read_npz(path, "fmnist", FIX)
    if set(arrays) != set(KEYS) or any(arrays[k].dtype != np.uint8 for k in KEYS):
        got = ", ".join(f"{k} {a.dtype} {list(a.shape)}" for k, a in arrays.items())
        raise DataError(f"fmnist: {path} holds {got or 'nothing'}, expected uint8 {', '.join(KEYS)}; delete it and "
                        f"{FIX}")
    parse({f: idx_bytes(arrays[k]) for f, k in zip(IDX_SHA256, KEYS)}, fix=f"delete {path} and {FIX}")
    return tuple(arrays[k] for k in KEYS)


def build(deb: Path, out: Path, sha256: str = DEB_SHA256) -> dict:
    """Verify ``deb`` and its IDX files, write their arrays to ``out`` atomically (a temp file, then a rename)."""
    arrays = parse(read_deb(deb, sha256))
    out.parent.mkdir(parents=True, exist_ok=True)
    write_npz(out, arrays)
    return arrays


def _download(folder: Path) -> Path:
    cmd = ["apt-get", "download", f"{PACKAGE}={VERSION}"]
    print(f"fmnist: {' '.join(cmd)}", file=sys.stderr)
    try:
        done = subprocess.run(cmd, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    except FileNotFoundError:
        raise DataError(f"fmnist: apt-get is not installed here; download {POOL_URL} elsewhere and run "
                        f"python -m fedlab_analysis.data.fmnist --deb FILE, or pass --data-dir holding the IDX "
                        f"files from https://github.com/zalandoresearch/fashion-mnist") from None
    errors = [line for line in done.stderr.splitlines() if line.startswith("E:")] or done.stderr.splitlines()
    if done.returncode != 0 or not (folder / DEB).is_file():
        raise DataError(f"fmnist: {' '.join(cmd)} failed (exit {done.returncode}: "
                        f"{errors[-1] if errors else 'no message'}); try `apt-get update` first, or download "
                        f"{POOL_URL} and pass it as --deb")
    return folder / DEB


@guard("python -m fedlab_analysis.data.fmnist")
def main(argv=None):
    p = ArgParser(prog="python -m fedlab_analysis.data.fmnist", description=__doc__.split("\n")[0])
    p.add_argument("--deb", type=Path, help=f"use this {DEB} instead of apt-get downloading it")
    args = p.parse_args(argv)
    out = root("fmnist") / NPZ
    if out.is_file():
        load(out)
        print(f"fmnist: {out} is in place; nothing to do")
        return 0
    if args.deb is not None:
        arrays = build(args.deb, out)
    else:
        with tempfile.TemporaryDirectory(prefix="fedlab-fmnist-") as tmp:
            arrays = build(_download(Path(tmp)), out)
    print(f"fmnist: wrote {out} ({out.stat().st_size / 1e6:.1f} MB; train {len(arrays['y_train'])}, "
          f"test {len(arrays['y_test'])}) from {args.deb or DEB}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
