"""What both behavioural fingerprints share (:mod:`paper_figures.fingerprint`, the training code's;
:mod:`paper_figures.hooks_fingerprint`, the hooks'): the battery's base config and numbers rounded to DIGITS
significant digits, hashed."""
from __future__ import annotations

import hashlib
import json

DIGITS = 9
BASE = dict(model="mlp", model_kwargs={"widths": [12, 10]}, dtype="float64", device="cpu", client_parallel="vmap",
            clients=7, partition="labeldir", dir_alpha=0.6, min_size=10, sampling="bernoulli", active_ratio=0.6,
            batch_size=16, local_epochs=1, lr=0.1, lr_decay=0.998, wd=1e-3, rounds=3, eval_every=2,
            eval_train_samples=100, on_divergence="continue", quiet=True, seed=0, threads=1)
# per algorithm: what it needs to exercise its own paths in 3 rounds (FedALS: its protocol, phi synced at round 2)
OWN = {"fedals": dict(partition="sorted", clients=5, active_ratio=1.0, tau=3, alpha=2),
       "fedals-scaffold": dict(partition="sorted", clients=5, active_ratio=1.0, tau=3, alpha=2)}


def _num(x) -> str:
    """A number as 9 significant digits (-0 as 0); anything else as JSON."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return json.dumps(x, sort_keys=True)
    s = f"{float(x):.{DIGITS}g}"
    return "0" if s == "-0" else s


def _rounded(obj):
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in sorted(obj.items())}
    if isinstance(obj, (list, tuple)):
        return [_rounded(v) for v in obj]
    return _num(obj)


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def _summary(named: dict) -> dict:
    """Per tensor (name -> tensor): sum, sum of squares and a projection on fixed uniform(-1, 1) weights (seed 0)."""
    import torch
    out = {}
    for name, v in sorted(named.items()):
        v = v.detach().double().flatten().cpu()
        r = torch.rand(v.numel(), generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 2 - 1
        out[name] = [list(v.shape), float(v.sum()), float(v @ v), float(v @ r)]
    return out
