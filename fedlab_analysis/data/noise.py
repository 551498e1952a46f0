"""FedInit's heterogeneity noise (Sec. 5.1, "Models and Dataset"), for image data sets.

FedInit enlarges heterogeneity with two Gaussian noises: per client, the strength of the RGB channels; per category,
"different brightness perturbations to the samples in each category". It gives no magnitudes. Here one strength
``s`` (``RunConfig.het_noise``) sets both:
- each client ``i`` draws a gain ``g[i, ch] ~ N(1, s^2)`` per channel (a grey image has one channel: its contrast);
- each client ``i`` draws an offset ``b[i, c] ~ N(0, s^2)`` per class ``c``, added to every pixel;
- a training image of class ``c`` held by client ``i`` becomes ``p' = g[i, ch] p + b[i, c]``, with ``p`` in [0, 1].

The offset is per (client, class), not per class. One offset per class, shared by every client, writes the label
into every pixel of the training images: on MNIST one background pixel then names the class of every training image,
the test images carry no offset, and FedAvg learns the shortcut (97.7% on the noisy training images, 53% on the test
set after 60 rounds at s = 0.2, Dir-0.1). Per (client, class), a class's offset has mean 0 over the clients: the
label is not readable from the brightness across the federation, yet each client's categories are shifted its own
way, which is the heterogeneity the paper enlarges. ``background_decodes`` measures the shortcut.

The images are then normalised as their loader does (``MEAN_STD``). Only the training images change; the test set is
the data set's own. The caller passes the generator (the engine: the run's seed, purpose "noise").
"""
from __future__ import annotations

import dataclasses

import torch

from fedlab_analysis.data.embedded import Dataset
from fedlab_analysis.data.real import MEAN_STD
from fedlab_analysis.errors import UserError


FORM = "per-client channel gain N(1, s^2) and per-(client, class) brightness offset N(0, s^2)"


def draws(strength: float, n_clients: int, n_classes: int, channels: int, g: torch.Generator):
    """(gain [n_clients, channels], offset [n_clients, n_classes]) in float64, drawn from ``g``."""
    gain = 1.0 + strength * torch.randn(n_clients, channels, generator=g, dtype=torch.float64)
    offset = strength * torch.randn(n_clients, n_classes, generator=g, dtype=torch.float64)
    return gain, offset


def heterogeneity_noise(ds: Dataset, indices, strength: float, g: torch.Generator) -> Dataset:
    """``ds`` with its training images changed as the module docstring says (a new x_train; ``ds`` is untouched).
    ``indices``: each client's training-sample indices; a sample may sit on one client only."""
    if ds.name not in MEAN_STD:
        raise UserError(f"--het-noise: needs an image data set normalised from [0, 1] pixels ({', '.join(MEAN_STD)}); "
                        f"{ds.name!r} is not one")
    allx = torch.cat([torch.as_tensor(ix, dtype=torch.long) for ix in indices])
    if len(allx.unique()) != len(allx):
        raise UserError("--het-noise: the partition puts a sample on more than one client (--replacement); the "
                        "per-client gain needs each sample on one client")
    x = ds.x_train
    shape = (1, -1) + (1,) * (x.dim() - 2)                          # per channel: [N, C, H, W] or [N, C]
    mean, std = (torch.tensor(v, dtype=torch.float64).view(shape) for v in MEAN_STD[ds.name])
    gain, offset = draws(strength, len(indices), ds.n_classes, mean.numel(), g)
    client = torch.full((len(x),), -1, dtype=torch.long)
    for i, ix in enumerate(indices):
        client[torch.as_tensor(ix, dtype=torch.long)] = i
    held = client >= 0
    p = x[held].to(torch.float64) * std + mean                      # pixels in [0, 1]
    rest = (1,) * (x.dim() - 2)
    i, c = client[held], ds.y_train[held]
    p = gain[i].view(-1, gain.shape[1], *rest) * p + offset[i, c].view(-1, 1, *rest)
    out = x.clone()
    out[held] = ((p - mean) / std).to(x.dtype)
    return dataclasses.replace(ds, x_train=out)


def background_decodes(ds: Dataset, indices) -> float:
    """The share of the clients' training images whose class the first pixel names (background in every image of
    these data sets): each class's median of that pixel over the federation, the nearest median taken.
    With 100 clients at Dir-0.1 and s = 0.2: 0.10 on clean images (chance); 0.18 on MNIST and 0.19 on Fashion-MNIST
    with per-(client, class) offsets (a class lives on few clients there); 1.0 where one offset per class is shared
    by every client (the label written into the image)."""
    held = torch.cat([torch.as_tensor(ix, dtype=torch.long) for ix in indices])
    v, y = ds.x_train[held].reshape(len(held), -1)[:, 0].to(torch.float64), ds.y_train[held]
    med = torch.stack([v[y == c].median() if (y == c).any() else v.new_tensor(float("inf"))
                       for c in range(ds.n_classes)])
    return ((v[:, None] - med[None]).abs().argmin(1) == y).double().mean().item()
