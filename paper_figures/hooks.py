"""The tier's training hooks, apart from the run cache's own code (``runs.py``), so that a change to the pool,
the plan or the cache keeps every trained run: a run key holds the hash of this file, of the probes and of the
module its tag names (``runs.hook_sources``), never of ``runs.py``.
"""
from __future__ import annotations

SHARP_RHO = 0.1                              # the one radius global sharpness hooks measure at, for every method


def mnist_hooks(seed: int) -> list:
    """The hooks of every main-protocol run in the mnist tier, every 5 rounds: the consensus forms (FedSMOO Table
    2's consistency, FedInit Fig. 2's divergences; ~3 s a call over 100 clients, so not every round), the
    perturbation drift at local steps 0, 10, ..., 50 and the global sharpness (5 ascent steps) at one radius
    SHARP_RHO = 0.1 for every method, whatever rho it trains with (FedLESAM Fig. 2 compares methods at one
    radius), both on 1000 training samples (FedLESAM Fig. 2). Measured: about +10-20% on a round."""
    from fedlab_analysis.probes import consensus, drift, sharpness
    return [consensus.make_hook(every=5), drift.make_hook(every=5, steps=list(range(0, 60, 10)), samples=1000, seed=0),
            sharpness.make_hook(every=5, method="ascent", ascent_steps=5, samples=1000, rho=SHARP_RHO)]
