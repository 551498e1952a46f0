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
            if x.dtype not in (torch.float32, torch.float64) or y.dtype != torch.int64 \
                    or tuple(x.shape[1:]) != tuple(self.input_shape) or y.shape != (len(x),):
                raise UserError(f"Dataset {self.name!r}: {split} needs x float32/float64 [N, "
                                f"*{tuple(self.input_shape)}] and y int64 [N], got {x.dtype} {tuple(x.shape)} and "
                                f"{y.dtype} {tuple(y.shape)}")

    @classmethod
    def from_tensors(cls, x_train, y_train, x_test, y_test, *, name: str = "custom", n_classes: int | None = None,
                     natural_clients=None, augmentable: bool = False) -> "Dataset":
        """A data set from arrays in memory (numpy or torch), for ``train(cfg, dataset=...)`` without registering a
        name. x: any float dtype, [N, *input_shape], already normalised; float64 is kept (exact float64 runs),
        float16/bfloat16/float32 become float32. y: integer labels in [0, n_classes) (default: max label + 1).
        ``natural_clients``: per-client train index lists for ``--partition natural``; ``augmentable``: images
        [N, C, H, W] that flip/crop augmentation may touch. Every problem is one UserError line. The run's config
        records the data set as ``memory:<name>``."""
        where = "Dataset.from_tensors"
        xs, ys = [], []
        for split, x, y in (("x_train", x_train, y_train), ("x_test", x_test, y_test)):
            x, y = _as_tensor(x, split, where), _as_tensor(y, "y" + split[1:], where)
            if not x.is_floating_point():
                raise UserError(f"{where}: {split} must hold floats (float16/32/64), got {x.dtype}")
            if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
                raise UserError(f"{where}: y{split[1:]} must hold integer class labels, got {y.dtype}")
            if x.dim() < 2 or len(x) == 0:
                raise UserError(f"{where}: {split} must be [N, *input_shape] with N >= 1, got {tuple(x.shape)}")
            if y.shape != (len(x),):
                raise UserError(f"{where}: y{split[1:]} must be [N] = [{len(x)}] to match {split}, "
                                f"got {tuple(y.shape)}")
            x = x.detach().to(torch.float64 if x.dtype == torch.float64 else torch.float32).cpu()
            if not torch.isfinite(x).all():
                raise UserError(f"{where}: {split} holds NaN or infinite values")
            xs.append(x), ys.append(y.detach().to(torch.int64).cpu())
        if xs[0].shape[1:] != xs[1].shape[1:] or xs[0].dtype != xs[1].dtype:
            raise UserError(f"{where}: x_train {xs[0].dtype} {tuple(xs[0].shape)} and x_test {xs[1].dtype} "
                            f"{tuple(xs[1].shape)} must share dtype and sample shape")
        lo, hi = int(min(y.min() for y in ys)), int(max(y.max() for y in ys))
        n_classes = hi + 1 if n_classes is None else n_classes
        if not isinstance(n_classes, int) or isinstance(n_classes, bool) or n_classes < 1 or lo < 0 \
                or hi >= n_classes:
            raise UserError(f"{where}: labels must lie in [0, n_classes) with an integer n_classes >= 1; got labels "
                            f"in [{lo}, {hi}] and n_classes={n_classes!r}")
        if augmentable and xs[0].dim() != 4:
            raise UserError(f"{where}: augmentable=True needs images [N, C, H, W], got {tuple(xs[0].shape)}")
        if natural_clients is not None:
            natural_clients = [np.asarray(ix, dtype=np.int64) for ix in natural_clients]
            if any(len(ix) and (ix.min() < 0 or ix.max() >= len(xs[0])) for ix in natural_clients):
                raise UserError(f"{where}: natural_clients indices must lie in [0, {len(xs[0])})")
        return cls(f"memory:{name}", xs[0], ys[0], xs[1], ys[1], n_classes=n_classes,
                   input_shape=tuple(xs[0].shape[1:]), natural_clients=natural_clients, augmentable=augmentable)

    def __repr__(self):
        clients = "" if self.natural_clients is None else f", {len(self.natural_clients)} natural clients"
        return (f"Dataset({self.name!r}: train {len(self.y_train)}, test {len(self.y_test)}, "
                f"{self.n_classes} classes, input {self.input_shape}{clients})")


def _as_tensor(a, what: str, where: str) -> torch.Tensor:
    if torch.is_tensor(a):
        return a
    try:
        return torch.from_numpy(np.ascontiguousarray(a)) if isinstance(a, np.ndarray) else torch.as_tensor(a)
    except (TypeError, ValueError, RuntimeError) as e:
        raise UserError(f"{where}: {what} must be a numpy array or torch tensor ({str(e).splitlines()[0]})") from None


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
