"""Local random streams: every draw comes from a generator derived from (seed, round, client, purpose),
so results never depend on client order or on which clients ran before (DESIGN.md decision 4)."""
from __future__ import annotations

import numpy as np
import torch

PURPOSES = {"init": 0, "sample": 1, "batch": 2, "augment": 3, "eval": 4, "algo": 5, "noise": 6, "holdout": 7}


def seed_of(seed: int, round: int = -1, client: int = -1, purpose: str = "init") -> int:
    ss = np.random.SeedSequence(entropy=int(seed), spawn_key=(round + 1, client + 1, PURPOSES[purpose]))
    return int(ss.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


def generator(seed: int, round: int = -1, client: int = -1, purpose: str = "init", device="cpu") -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed_of(seed, round, client, purpose))
