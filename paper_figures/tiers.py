"""The tiers: each one's base settings, the papers' per-method schedules, the protocol a tier runs, and the
resolved RunConfig of a run (``config``). The options the scripts' command line sets (``_ARGS``) live here too, so
the run cache (:mod:`paper_figures.runs`) reads them without the script plumbing above it
(:mod:`paper_figures.common`, which re-exports every name)."""
from __future__ import annotations

from pathlib import Path

from fedlab_analysis.config import RunConfig

OUT = Path(__file__).parent / "out"

# digits, MLP [64]: FedAvg reaches ~0.94 test accuracy in 30 rounds (~3 s on one CPU thread)
QUICK_BASE = dict(dataset="digits", model="mlp", model_kwargs={"widths": [64]}, clients=20, partition="dirichlet",
                  dir_alpha=0.3, active_ratio=0.5, batch_size=20, local_epochs=2, lr=0.1, lr_decay=1.0, wd=0.0,
                  rounds=30, quiet=True)
# the papers' federated protocol on MNIST (FedSMOO Sec. 5.1, FedLESAM Sec. 6.1, FedCM Sec. 6, FedInit Sec. 5) with
# FL-Simulator's defaults (local lr 0.1, lr decay 0.998 per round, weight decay 1e-3, batch 50, 5 local epochs) and
# its mnist_2NN; 300 rounds (FedAvg ~97.5% at Dirichlet 0.6). Train loss on a fixed 10,000-sample train subset
# (the matched-fit rungs read it), test accuracy on all 10,000 test images, both every 2 rounds; a checkpoint every
# 25 rounds (a killed run resumes from it); a run that goes non-finite goes on and is marked (divergence is an
# outcome, and FedInit Fig. 1 needs the rounds after it).
# The local gradient is clipped at norm 10 (clip=10), as the authors' released code of FedSMOO, FedLESAM and FedInit
# clips it (none of the papers states it); FedCM's and FedALS' scripts turn it off (REAL_UNCLIPPED).
MNIST_BASE = dict(dataset="mnist", model="mlp", model_kwargs={"widths": [200, 200]}, clients=100,
                  partition="dirichlet", dir_alpha=0.6, active_ratio=0.1, batch_size=50, local_epochs=5, lr=0.1,
                  lr_decay=0.998, wd=1e-3, clip=10.0, rounds=300, eval_every=2, eval_train_samples=10000,
                  ckpt_every=25, on_divergence="continue", quiet=True)
# the papers' setting (FedSMOO Sec. 5.1, FedLESAM Sec. 5.1, FedCM Sec. 5): CIFAR-10, ResNet-18-GN, 10% of 100
FULL_BASE = dict(dataset="cifar10", model="resnet18gn", model_kwargs={}, clients=100, partition="dirichlet",
                 dir_alpha=0.6, active_ratio=0.1, batch_size=50, local_epochs=5, lr=0.1, lr_decay=0.998, wd=1e-3,
                 clip=10.0, augment=True, rounds=800, quiet=True)
# fmnist: the mnist tier on Fashion-MNIST (`make data`): the same model, settings and grids, so each claim meets a
# second real task; FedAvg sits near 88% there (MNIST: 98%), so accuracy effects have room to show.
FMNIST_BASE = {**MNIST_BASE, "dataset": "fmnist"}
TIERS = {"quick": QUICK_BASE, "mnist": MNIST_BASE, "fmnist": FMNIST_BASE, "full": FULL_BASE}
REAL = ("mnist", "fmnist")                           # the real-data tiers on 28x28 grey images: one protocol
# Per method, in every tier but quick (whose CI outputs keep one schedule): the FedDyn family decays its learning
# rate by 0.9995 a round, the others by the base's 0.998 (FedSMOO Sec. 5.1 and App. B.4: "proxy-type methods";
# FedLESAM App. E.1; FedCM App. C.2; FedInit Sec. 5.1). FedSpeed, FedSMOO Table 8's "FedDyn + local SAM", is
# proxy-type too (our reading: the ablation then changes one module a row). A script's own override wins.
PER_METHOD = {a: {"lr_decay": 0.9995} for a in ("feddyn", "fedspeed", "fedsmoo", "fedlesam-d")}
# the real tiers' override of a paper whose released code does not clip (FedCM, FedALS): merged into its runs
REAL_UNCLIPPED = {"clip": 0.0}
# The settings protocol of the real tiers: 1 = every committed output before it was recorded (one decay 0.998 for
# every method, no clipping, FedInit without its noise); 2 = the per-paper schedule above. save_result stores it
# with the script's settings fingerprint (settings_record); a committed output whose record differs from the code's
# was trained under other settings (trained_under).
PROTOCOL = 2
SEEDS = {"quick": 3, "mnist": 5, "fmnist": 5, "full": 3}          # default --seeds per tier

_ARGS = {"out": OUT, "data_dir": None, "device": "cpu", "workers": 2, "tier": "quick", "pack": 4}   # set by parse_args


def tier_of(tier) -> str:
    """A tier name; ``True``/``False`` (the old ``full`` flag) read as "full"/"quick"."""
    if isinstance(tier, bool) or tier is None:
        return "full" if tier else "quick"
    if tier not in TIERS:
        raise ValueError(f"unknown tier {tier!r}; choose one of {', '.join(TIERS)}")
    return tier


def protocol(tier) -> str:
    """The protocol a tier runs: "quick", "mnist" (every tier of ``REAL``: one model, settings and grids) or
    "full". Scripts key their settings by it, so a real tier added to ``REAL`` takes the mnist tier's."""
    t = tier_of(tier)
    return "mnist" if t in REAL else t


def config(cfg_overrides: dict, seed: int = 0, tier="quick") -> RunConfig:
    """The resolved RunConfig: the tier's base, then (but in the quick tier) the method's PER_METHOD settings, then
    the overrides, then the seed."""
    t = tier_of(tier)
    base = dict(TIERS[t])
    if t != "quick":
        base.update(PER_METHOD.get(cfg_overrides.get("algo", base.get("algo", RunConfig.algo)), {}))
    if t == "full":
        base.update(data_dir=_ARGS["data_dir"], device=_ARGS["device"])
    elif t in REAL:
        base.update(device=_ARGS["device"], **({"data_dir": _ARGS["data_dir"]} if _ARGS["data_dir"] else {}))
    return RunConfig(**{**base, **cfg_overrides, "seed": seed}).validate()
