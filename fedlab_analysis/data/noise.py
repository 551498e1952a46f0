"""FedInit's heterogeneity noise (Sec. 5.1, "Models and Dataset"), for image data sets.

FedInit enlarges heterogeneity with two Gaussian noises: per client, the strength of the RGB channels; per class, the
brightness. It gives no magnitudes. Here one strength ``s`` (``RunConfig.het_noise``) sets both:
- each client ``i`` draws a gain ``g[i, ch] ~ N(1, s^2)`` per channel (a grey image has one channel: its contrast);
- each class ``c`` draws an offset ``b[c] ~ N(0, s^2)``, added to every pixel;
- a training image of class ``c`` held by client ``i`` becomes ``p' = g[i, ch] p + b[c]``, with ``p`` in [0, 1].

The images are then normalised as their loader does (``MEAN_STD``). Only the training images change; the test set is
the data set's own. The caller passes the generator (the engine: the run's seed, purpose "noise").
"""
from __future__ import annotations

import dataclasses

import torch

from fedlab_analysis.data.embedded import Dataset
from fedlab_analysis.data.real import MEAN_STD
from fedlab_analysis.errors import UserError


def draws(strength: float, n_clients: int, n_classes: int, channels: int, g: torch.Generator):
    """(gain [n_clients, channels], offset [n_classes]) in float64, drawn from ``g``."""
    gain = 1.0 + strength * torch.randn(n_clients, channels, generator=g, dtype=torch.float64)
    offset = strength * torch.randn(n_classes, generator=g, dtype=torch.float64)
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
    p = gain[client[held]].view(-1, gain.shape[1], *rest) * p + offset[ds.y_train[held]].view(-1, 1, *rest)
    out = x.clone()
    out[held] = ((p - mean) / std).to(x.dtype)
    return dataclasses.replace(ds, x_train=out)
