"""Flatness of a checkpoint as every curvature comparison between algorithms also reports it (issue: flatness is
confounded with fit — a model that fits its data more tightly has a saturated softmax and a smaller cross-entropy
Hessian, and weight scale alone changes plain sharpness):

(a) at matched fit: each run's model-only checkpoint at the lowest train-loss rung every run of the comparison
    reached (``common.matched_checkpoints``, the tier's ladder 0.3 / 0.1 / 0.03 / 0.01 / 0.003); where the tier
    has no ladder the row says "not measured at matched fit" instead;
(b) scale-invariant: adaptive sharpness (Kwon et al. 2021, ASAM; ``probes.sharpness.adaptive_sharpness``),
    max_{||T_w^{-1} eps|| <= RHO} L(w + eps) - L(w), T_w = diag(|w| + ETA), by ``STEPS`` steps of projected ascent
    from ASAM's one-step point, float64, on ``SAMPLES`` training samples. ETA = 0.01 is ASAM's; RHO = 0.5 is this
    toolkit's choice (the ellipsoid's radius in units of |w|), the same for every algorithm compared.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from paper_figures import common as C
from paper_figures import probed
from paper_figures import verdict as V

RHO, ETA, STEPS, SAMPLES = 0.5, 0.01, 5, 1000
NO_LADDER = "not measured at matched fit: the runs reached no common rung of the train-loss ladder"


def bundle(path, samples: int = SAMPLES):
    from fedlab_analysis import checkpoint
    from fedlab_analysis.probes.common import rebuild
    return rebuild(checkpoint.load(Path(path)), data="train", samples=samples, seed=0, dtype=torch.float64)


def last(run: dict) -> Path:
    return Path(run["run_dir"]) / "ckpt" / "last.pt"


@probed.memo
def adaptive(path, samples: int = SAMPLES, rho: float = RHO, eta: float = ETA, steps: int = STEPS) -> float:
    """Adaptive sharpness of the checkpoint's global model on its first ``samples`` training samples."""
    from fedlab_analysis.probes.sharpness import adaptive_sharpness
    b = bundle(path, samples)
    return adaptive_sharpness(b.f, b.theta, b.X, b.y, rho, eta=eta, method="ascent", steps=steps)["sharpness"]


@probed.memo
def lam1(path, samples: int = SAMPLES) -> float:
    """Top eigenvalue of the training cross-entropy Hessian at the checkpoint (Lanczos, float64)."""
    from fedlab_analysis.probes.curvature import HessianOperator, top_eigenvalues
    b = bundle(path, samples)
    return top_eigenvalues(HessianOperator(b.f, b.theta, (b.X, b.y)), k=1, tol=1e-4, seed=0)["eigenvalues"][0]


@probed.memo
def train_loss(path, samples: int = SAMPLES) -> float:
    import torch.nn.functional as F
    b = bundle(path, samples)
    with torch.no_grad():
        return float(F.cross_entropy(b.f(b.theta, b.X), b.y))


def at_rungs(run: dict, probe) -> list:
    """``probe`` at every matched-fit checkpoint the run has (what a comparison at any common rung may ask)."""
    return [probe(m["path"]) for m in (run["matched"] or {}).values()]


def rel_gap(base, mine) -> np.ndarray:
    """(base - mine) / base per seed: > 0 when ``mine`` is the smaller (flatter, lower)."""
    base, mine = np.asarray(base, dtype=float), np.asarray(mine, dtype=float)
    return (base - mine) / base


def matched(runs_base: list, runs_mine: list) -> dict | None:
    """The common rung of both run lists and each run's checkpoint there (``common.matched_checkpoints``), or None
    where no rung of the ladder was reached by every run."""
    m = C.matched_checkpoints(list(runs_base) + list(runs_mine))
    if m["rung"] is None:
        return None
    n = len(runs_base)
    return {"rung": m["rung"], "base": m["paths"][:n], "mine": m["paths"][n:]}


def matched_row(claim_id: str, label: str, runs_base: list, runs_mine: list, probe=lam1, what: str = "lam1") -> dict:
    """A verdict row comparing ``probe`` (default the top Hessian eigenvalue) of the two algorithms' checkpoints at
    their common train-loss rung, seed by seed (relative gap), or "not measured" where there is no common rung."""
    m = matched(runs_base, runs_mine)
    if m is None:
        return C.row(claim_id, f"{label} at matched train loss", NO_LADDER,
                     V.not_measured(C.CLAIMS[claim_id], NO_LADDER, len(runs_base)))
    base = [probe(p) for p in m["base"]]
    mine = [probe(p) for p in m["mine"]]
    res = V.decide(C.CLAIMS[claim_id], rel_gap(base, mine), list(runs_base) + list(runs_mine),
                   base=V.rel_base(base))
    return C.row(claim_id, f"{label} at matched train loss ({m['rung']:g})",
                 f"{what} {np.mean(mine):.3g} vs {np.mean(base):.3g}; gap {V.fmt(res, 100, '%')}", res,
                 rung=m["rung"], base=base, mine=mine)


def adaptive_row(claim_id: str, label: str, runs_base: list, runs_mine: list) -> dict:
    """A verdict row comparing adaptive sharpness of the two algorithms' final models, seed by seed."""
    base = [adaptive(last(r)) for r in runs_base]
    mine = [adaptive(last(r)) for r in runs_mine]
    res = V.decide(C.CLAIMS[claim_id], rel_gap(base, mine), list(runs_base) + list(runs_mine),
                   base=V.rel_base(base))
    return C.row(claim_id, f"{label}, adaptive sharpness (rho={RHO}, eta={ETA})",
                 f"{np.mean(mine):.3g} vs {np.mean(base):.3g}; gap {V.fmt(res, 100, '%')}", res,
                 base=base, mine=mine)
