"""The ``Dataset`` record and the data sets that need no download: ``digits`` (scikit-learn),
``mnist1d`` (generated locally by the ``mnist1d`` package), ``synthetic`` (FedProx Synthetic(alpha, beta))
and ``gaussian`` (2-D class mixtures for classroom pictures)."""
import functools
import random
from dataclasses import dataclass

import numpy as np
import torch

from fedlab_analysis.errors import UserError


@dataclass(repr=False)
class Dataset:
    name: str
    x_train: torch.Tensor  # float32, already normalised, shape [N, *input_shape]
    y_train: torch.Tensor  # int64 [N]
    x_test: torch.Tensor
    y_test: torch.Tensor
    n_classes: int
    input_shape: tuple[int, ...]
    natural_clients: list[np.ndarray] | None = None  # per-client train indices when the data defines clients
    augmentable: bool = False  # True for image data where flip/crop make sense (cifar, svhn)

    def __post_init__(self):
        for split, x, y in (("train", self.x_train, self.y_train), ("test", self.x_test, self.y_test)):
            if x.dtype != torch.float32 or y.dtype != torch.int64 or tuple(x.shape[1:]) != tuple(self.input_shape) \
                    or y.shape != (len(x),):
                raise UserError(f"Dataset {self.name!r}: {split} needs x float32 [N, *{tuple(self.input_shape)}] "
                                f"and y int64 [N], got {x.dtype} {tuple(x.shape)} and {y.dtype} {tuple(y.shape)}")

    def __repr__(self):
        clients = "" if self.natural_clients is None else f", {len(self.natural_clients)} natural clients"
        return (f"Dataset({self.name!r}: train {len(self.y_train)}, test {len(self.y_test)}, "
                f"{self.n_classes} classes, input {self.input_shape}{clients})")


def _tensors(x_train, y_train, x_test, y_test):
    """numpy -> (float32 x, int64 y) tensors for train and test."""
    x_train, x_test = (torch.tensor(x, dtype=torch.float32) for x in (x_train, x_test))
    y_train, y_test = (torch.tensor(y, dtype=torch.int64) for y in (y_train, y_test))
    return x_train, y_train, x_test, y_test


def load_digits(data_dir=None, seed=0, *, test_fraction=0.2):
    """scikit-learn's 1,797 8x8 digits as [N, 1, 8, 8]: pixels / 16, then standardised with the train
    split's mean and std. The stratified split uses a fixed seed (0), so every run sees the same test set;
    ``seed`` is unused."""
    from sklearn.datasets import load_digits as sk_digits
    from sklearn.model_selection import train_test_split

    if not 0 < test_fraction < 1:
        raise UserError(f"--dataset digits: test_fraction must be in (0, 1), got {test_fraction}")
    x, y = sk_digits(return_X_y=True)
    x = x.reshape(-1, 1, 8, 8) / 16.0
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=test_fraction, stratify=y, random_state=0)
    mean, std = x_tr.mean(), x_tr.std()
    return Dataset("digits", *_tensors((x_tr - mean) / std, y_tr, (x_te - mean) / std, y_te),
                   n_classes=10, input_shape=(1, 8, 8))


@functools.lru_cache(maxsize=1)
def _mnist1d_arrays():
    """``mnist1d.data.make_dataset`` with its default arguments (4,000 train / 1,000 test, seed 42), never
    its download path. It seeds the global ``random``/``np.random`` state, which is restored afterwards."""
    from mnist1d.data import get_dataset_args, make_dataset

    np_state, py_state = np.random.get_state(), random.getstate()
    try:
        d = make_dataset(get_dataset_args())
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)
    return d["x"], d["y"], d["x_test"], d["y_test"]


def load_mnist1d(data_dir=None, seed=0):
    """MNIST-1D (Greydanus 2020) as [N, 1, 40]; ``make_dataset`` already centres and scales it to std 1.
    The data set is fixed (the package's seed 42); ``seed`` is unused."""
    x_tr, y_tr, x_te, y_te = _mnist1d_arrays()
    return Dataset("mnist1d", *_tensors(x_tr[:, None], y_tr, x_te[:, None], y_te),
                   n_classes=10, input_shape=(1, 40))


def load_synthetic(data_dir=None, seed=0, *, alpha=1.0, beta=1.0, n_clients=30, test_fraction=0.1):
    """FedProx Synthetic(alpha, beta) (Li et al. 2020, Sec. 5.1 and their ``generate_synthetic``), 60 features,
    10 classes. For client k:  u_k ~ N(0, alpha^2), B_k ~ N(0, beta^2), v_k ~ N(B_k, I),
    W_k ~ N(u_k, 1) [60 x 10], b_k ~ N(u_k, 1) [10], x ~ N(v_k, diag(j^-1.2)), y = argmax softmax(W_k^T x + b_k),
    with n_k = floor(LogNormal(4, 2)) + 50 samples (alpha, beta are standard deviations, as in their code).
    Each client keeps its first (1 - test_fraction) share for training (FedProx: 90 %); the test set pools
    the held-out rest. ``natural_clients[k]`` are client k's train indices. ``seed`` draws the data."""
    if alpha < 0 or beta < 0 or n_clients < 1 or not 0 < test_fraction < 1:
        raise UserError(f"--dataset synthetic: need alpha >= 0, beta >= 0, n_clients >= 1 and 0 < test_fraction "
                        f"< 1, got alpha={alpha}, beta={beta}, n_clients={n_clients}, test_fraction={test_fraction}")
    d, C = 60, 10
    rng = np.random.default_rng(seed)
    sizes = rng.lognormal(4, 2, n_clients).astype(np.int64) + 50
    u = rng.normal(0, alpha, n_clients)
    B = rng.normal(0, beta, n_clients)
    sd = np.arange(1, d + 1) ** -0.6  # sqrt of diag(j^-1.2)
    parts = []
    for k in range(n_clients):
        v = rng.normal(B[k], 1, d)
        W = rng.normal(u[k], 1, (d, C))
        b = rng.normal(u[k], 1, C)
        x = v + rng.standard_normal((sizes[k], d)) * sd
        y = np.argmax(x @ W + b, axis=1)
        n_tr = int((1 - test_fraction) * sizes[k])
        parts.append((x[:n_tr], y[:n_tr], x[n_tr:], y[n_tr:]))
    x_tr, y_tr, x_te, y_te = (np.concatenate(a) for a in zip(*parts))
    ends = np.cumsum([len(p[1]) for p in parts])
    clients = [np.arange(e - len(p[1]), e, dtype=np.int64) for e, p in zip(ends, parts)]
    return Dataset("synthetic", *_tensors(x_tr, y_tr, x_te, y_te), n_classes=C, input_shape=(d,),
                   natural_clients=clients)


def load_gaussian(data_dir=None, seed=0, *, n_classes=3, n_per_class=100, spread=0.35):
    """2-D Gaussian mixture for classroom pictures: class c ~ N(m_c, spread^2 I) with the means m_c evenly
    spaced on the unit circle; n_per_class train and n_per_class test points per class, drawn from ``seed``."""
    if n_classes < 2 or n_per_class < 1 or not spread > 0:
        raise UserError(f"--dataset gaussian: need n_classes >= 2, n_per_class >= 1 and spread > 0, got "
                        f"n_classes={n_classes}, n_per_class={n_per_class}, spread={spread}")
    rng = np.random.default_rng(seed)
    angle = 2 * np.pi * np.arange(n_classes) / n_classes
    means = np.stack([np.cos(angle), np.sin(angle)], 1)
    y = np.repeat(np.arange(n_classes), n_per_class)
    x_tr = means[y] + spread * rng.standard_normal((y.size, 2))
    x_te = means[y] + spread * rng.standard_normal((y.size, 2))
    return Dataset("gaussian", *_tensors(x_tr, y, x_te, y), n_classes=n_classes, input_shape=(2,))
