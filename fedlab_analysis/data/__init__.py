"""Data: data sets (embedded, or real from a local folder), client partitions, batched augmentation.

    ds = load_dataset("digits")                      # Dataset: x/y train/test tensors, n_classes, input_shape
    part = partition("dirichlet", ds.y_train.numpy(), n_clients=10, n_classes=ds.n_classes, seed=0, alpha=0.3)
    plot_partition(part.counts)                      # clients x classes heat map
    xb = augment(xb, gen)                            # flip + pad-4 crop, per sample, on xb's device
"""
import inspect

from fedlab_analysis.data.augment import augment
from fedlab_analysis.data.embedded import Dataset, load_digits, load_gaussian, load_mnist1d, load_synthetic
from fedlab_analysis.data.noise import heterogeneity_noise
from fedlab_analysis.data.partitions import PARTITIONS, Partition, partition, plot_partition
from fedlab_analysis.data.real import (
    MEAN_STD,
    load_cifar10,
    load_cifar100,
    load_fmnist,
    load_mnist,
    load_svhn,
)
from fedlab_analysis.errors import UserError

# name -> loader(data_dir, seed, **options) -> Dataset
DATASETS = {
    "digits": load_digits,
    "mnist1d": load_mnist1d,
    "synthetic": load_synthetic,
    "gaussian": load_gaussian,
    "cifar10": load_cifar10,
    "cifar100": load_cifar100,
    "mnist": load_mnist,
    "fmnist": load_fmnist,
    "svhn": load_svhn,
}
SEEDED = {"synthetic", "gaussian"}                  # the loaders that draw their data from ``seed``


def load_dataset(name: str, data_dir: str | None = None, seed: int = 0, **options) -> Dataset:
    """Load data set ``name``. Embedded ones (digits, mnist1d, synthetic, gaussian) need no files; the real
    ones read the official files under ``data_dir`` (mnist and fmnist, where there are none: the ``make data``
    cache).
    ``seed`` draws the generated ones (synthetic, gaussian); the others are fixed. ``options`` are the loader's
    keyword options (e.g. synthetic: alpha, beta)."""
    if name.startswith("memory:"):
        raise UserError(f"--dataset: {name!r} was given in memory (Dataset.from_tensors) and is not stored; pass "
                        f"it again as dataset= to train() or to the probe functions")
    if name not in DATASETS:
        raise UserError(f"--dataset: unknown '{name}'; choose one of {', '.join(DATASETS)}")
    loader = DATASETS[name]
    valid = [p.name for p in inspect.signature(loader).parameters.values() if p.kind is p.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise UserError(f"--dataset {name}: unknown option(s) {', '.join(unknown)}; "
                        f"valid: {', '.join(valid) or 'none'}")
    return loader(data_dir, seed, **options)


__all__ = [
    "DATASETS",
    "SEEDED",
    "MEAN_STD",
    "PARTITIONS",
    "Dataset",
    "Partition",
    "augment",
    "heterogeneity_noise",
    "load_dataset",
    "partition",
    "plot_partition",
]
