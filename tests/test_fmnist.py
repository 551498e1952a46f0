"""Fashion-MNIST from Debian's dataset-fashion-mnist .deb: reading the .deb, the content checks, the cache, the
one-line refusals. Generated .debs have the real layout (ar: debian-binary, control.tar.xz, data.tar.xz holding
``./usr/share/datasets/fashion-mnist/*.gz``) with a few images; one test reads the real cache where ``make data``
has made it."""
import gzip
import hashlib
import io
import os
import tarfile

import numpy as np
import pytest
import torch

from fedlab_analysis import train
from fedlab_analysis.data import fmnist, load_dataset
from fedlab_analysis.errors import DataError

SIZES = (5, 3)


def arrays(seed=0):
    rng = np.random.default_rng(seed)
    return {"x_train": rng.integers(0, 256, (5, 28, 28), dtype=np.uint8), "y_train": rng.integers(0, 10, 5, np.uint8),
            "x_test": rng.integers(0, 256, (3, 28, 28), dtype=np.uint8), "y_test": rng.integers(0, 10, 3, np.uint8)}


def idx_files(a):
    return {f: fmnist.idx_bytes(a[k]) for f, k in zip(fmnist.IDX_SHA256, fmnist.KEYS)}


def ar(members):
    out = b"!<arch>\n"
    for name, data in members.items():
        out += f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode() + data + b"\n" * (len(data) % 2)
    return out


def deb(path, files):
    """A .deb holding ``files`` (IDX name -> bytes), gzipped, where Debian's package has them."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        for f, data in files.items():
            info = tarfile.TarInfo(f"./{fmnist.MEMBER_DIR}{f}.gz")
            gz = gzip.compress(data)
            info.size = len(gz)
            tar.addfile(info, io.BytesIO(gz))
    path.write_bytes(ar({"debian-binary": b"2.0\n", "control.tar.xz": b"", "data.tar.xz": buf.getvalue()}))
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def small(tmp_path, monkeypatch):
    """An empty FEDLAB_DATA folder; the checks expect the generated arrays' sizes and hashes."""
    a = arrays()
    monkeypatch.setenv("FEDLAB_DATA", str(tmp_path / "cache"))
    monkeypatch.setattr(fmnist, "SIZES", SIZES)
    monkeypatch.setattr(fmnist, "IDX_SHA256", {f: hashlib.sha256(b).hexdigest() for f, b in idx_files(a).items()})
    return a


def test_deb_round_trip_equals_the_data_dir_route(small, tmp_path):
    path, sha = deb(tmp_path / "p.deb", idx_files(small))
    out = tmp_path / "cache" / fmnist.NPZ
    fmnist.build(path, out, sha)
    assert not list(out.parent.glob("*.part*"))
    assert all(np.array_equal(x, small[k]) for x, k in zip(fmnist.load(), fmnist.KEYS))
    via_npz = load_dataset("fmnist")                                 # no --data-dir: the cache
    (tmp_path / "idx").mkdir()
    for f, b in idx_files(small).items():
        (tmp_path / "idx" / f).write_bytes(b)
    via_idx = load_dataset("fmnist", str(tmp_path / "idx"))
    for k in ("x_train", "y_train", "x_test", "y_test"):
        assert torch.equal(getattr(via_npz, k), getattr(via_idx, k)), k
    assert via_npz.n_classes == 10 and via_npz.input_shape == (1, 28, 28)


def test_damaged_deb_is_one_line_exit_2_and_nothing_written(small, tmp_path, capsys):
    path, sha = deb(tmp_path / "p.deb", idx_files(small))
    assert fmnist.main(["--deb", str(path)]) == 2                   # not the pinned .deb
    err = capsys.readouterr().err
    assert err.startswith("error: fmnist: ") and err.count("\n") == 1
    assert f"has sha256 {sha}, expected {fmnist.DEB_SHA256}" in err
    assert not (tmp_path / "cache").exists()
    data = bytearray(path.read_bytes())
    data[-100] ^= 1                                                   # one bit in the xz stream
    path.write_bytes(bytes(data))
    with pytest.raises(DataError, match="cannot read the IDX files in .*LZMAError"):
        fmnist.read_deb(path, hashlib.sha256(data).hexdigest())


@pytest.mark.parametrize("damage, needle", [
    (lambda a: {**a, "y_test": a["y_test"] ^ 1}, "t10k-labels-idx1-ubyte has sha256"),
    (lambda a: {**a, "x_train": a["x_train"].reshape(5, 784)}, "train-images-idx3-ubyte has the header"),
    (lambda a: {**a, "x_test": a["x_test"][:2]}, "t10k-images-idx3-ubyte has the header .* shape \\[3, 28, 28\\]"),
])
def test_idx_content_is_checked_in_the_deb_and_in_the_cache(small, tmp_path, damage, needle):
    bad = damage(small)
    path, sha = deb(tmp_path / "p.deb", idx_files(bad))
    with pytest.raises(DataError, match=needle) as e:
        fmnist.build(path, tmp_path / "cache" / fmnist.NPZ, sha)
    assert "\n" not in str(e.value) and not (tmp_path / "cache").exists()
    (tmp_path / "cache").mkdir()
    np.savez(tmp_path / "cache" / fmnist.NPZ, **bad)                 # a cache damaged after it was written
    with pytest.raises(DataError, match=needle + ".*delete .*fmnist.npz and run `make data`") as e:
        load_dataset("fmnist")
    assert "\n" not in str(e.value)


def test_make_data_cli_idempotent(small, tmp_path, capsys):
    path, sha = deb(tmp_path / "p.deb", idx_files(small))
    fmnist.build(path, tmp_path / "cache" / fmnist.NPZ, sha)
    before = (tmp_path / "cache" / fmnist.NPZ).stat().st_mtime_ns
    assert fmnist.main(["--deb", str(tmp_path / "absent.deb")]) == 0  # in place: the .deb is not even looked at
    assert "nothing to do" in capsys.readouterr().out
    assert (tmp_path / "cache" / fmnist.NPZ).stat().st_mtime_ns == before


def test_missing_data_says_which_command_to_run(small, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    assert train.main(["--algo", "fedavg", "--dataset", "fmnist", "--rounds", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: fmnist: found neither the IDX files (--data-dir) nor")
    assert "run `make data`" in err and "--data-dir holding the IDX files" in err and not out.exists()
    monkeypatch.setenv("PATH", str(tmp_path))                        # no apt-get on this PATH
    assert fmnist.main([]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "error: fmnist: apt-get is not installed here" in err  # the command, the error
    assert fmnist.POOL_URL in err and not (tmp_path / "cache").exists()


def need_cache() -> None:
    """The real cache, where ``make data`` has made it: absent, skip (an offline machine), or fail where CI ran
    ``make data`` first (FEDLAB_REQUIRE_DATA)."""
    npz = fmnist.root("fmnist") / fmnist.NPZ
    if not npz.is_file():
        if os.environ.get("FEDLAB_REQUIRE_DATA"):
            pytest.fail(f"{npz} absent although FEDLAB_REQUIRE_DATA is set (`make data` did not make it)")
        pytest.skip(f"{npz} absent (run `make data`)")


def test_real_cached_copy():
    """The real files, where ``make data`` has made them: every array's IDX bytes have the official release's
    sha256 (``load`` checks them); sizes, Fashion-MNIST's balanced classes and first labels, and the mean/std
    the loader normalises with."""
    need_cache()
    x_tr, y_tr, x_te, y_te = fmnist.load()
    assert x_tr.shape == (60000, 28, 28) and x_te.shape == (10000, 28, 28)
    assert np.bincount(y_tr).tolist() == [6000] * 10 and np.bincount(y_te).tolist() == [1000] * 10
    assert y_tr[:5].tolist() == [9, 0, 0, 3, 0] and y_te[:5].tolist() == [9, 2, 1, 1, 6]
    assert abs(x_tr.mean() / 255 - 0.2860) < 5e-4 and abs(x_tr.std() / 255 - 0.3530) < 5e-4
    ds = load_dataset("fmnist")
    assert len(ds.y_train) == 60000 and ds.n_classes == 10


def test_train_reads_the_cache_with_no_data_dir(tmp_path):
    """`make data` then `python -m fedlab_analysis.train --dataset fmnist ...` with no --data-dir: one round trains on
    the cached 60,000 images and evaluates on the 10,000 test images."""
    import json

    from fedlab_analysis import train
    from fedlab_analysis.plots import read_metrics
    need_cache()
    out = tmp_path / "run"
    assert train.main(["--algo", "fedavg", "--dataset", "fmnist", "--clients", "10", "--local-steps", "2",
                       "--rounds", "1", "--quiet", "--out", str(out)]) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["dataset"] == "fmnist" and not cfg.get("data_dir")
    row = read_metrics(out)[-1]
    assert row["round"] == 1 and 0.1 < row["test_acc"] < 1.0
