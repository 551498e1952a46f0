"""The one verdict rule of every paper_figures script: a claim (paper_figures/claims.py) against per-seed effects.

Effects are paired: effect_s = (measurement of the paper's method) - (measurement of the baseline) on the same seed,
so the same partition, client draws and minibatches, and signed so that > 0 is the direction the paper claims
(each claim states its effect). Over n seeds the 95% interval is Student's t interval on the paired differences,

    mean +- t_{0.975, n-1} * sd / sqrt(n)        (sd with ddof = 1; n = 1 gives (-inf, inf)),

chosen over a bootstrap because with 3-5 seeds a percentile bootstrap is too narrow (it can only resample the
few values seen). The rule, in the order it is checked:

    diverged        a run of the comparison went non-finite (its flag, or a non-finite effect): reported as such,
                    with how many runs; never dropped and never read as "no divergence". Checked before "not
                    converged" because a diverged run is also unconverged and would otherwise hide the divergence
    not converged   a run of the comparison did not meet the tier's convergence criterion (the note counts them);
                    only for claims about the trained model (``Claim.at_convergence``): a claim about the course
                    of training (a per-round dispersion, drift, consensus or oscillation) is judged as it is
    directional claims ("A is smaller than B", "+RI adds 2-5 points"):
      reproduced      the interval excludes 0 on the paper's side and, where the paper states a size, the mean
                      effect reaches the claim's target = SIZE_FRACTION (one half) of the lower end of the stated
                      size (a verbal size such as "much smaller" is read once in the claim, with fraction 1)
      direction only  the interval excludes 0 on the paper's side, the size target is not reached
      opposite        the interval excludes 0 on the other side
      inconclusive    the interval covers 0 (ties included: identical per-seed results give effects of 0)
    null claims ("changes little", "is not flatter than"), with an equivalence margin stated once in the claim:
      reproduced      the interval lies inside the margin (|effect| <= margin, or effect <= margin one-sided)
      opposite        the interval lies wholly outside it (beyond +margin, or beyond -margin for two-sided)
      inconclusive    otherwise
    exact checks (an identity, a count, a printed column): reproduced or violated, no interval.

With fewer than MIN_SEEDS seeds the rule still runs; every row carries ``n_seeds`` and its text says how many.
"""
from __future__ import annotations

import math
from collections import Counter

import numpy as np

MIN_SEEDS = 5
SIZE_FRACTION = 0.5
REPRODUCED, DIRECTION, OPPOSITE, INCONCLUSIVE = "reproduced", "direction only", "opposite", "inconclusive"
NOT_CONVERGED, DIVERGED, VIOLATED, NOT_MEASURED = "not converged", "diverged", "violated", "not measured"
OUTCOMES = (REPRODUCED, DIRECTION, OPPOSITE, INCONCLUSIVE, NOT_CONVERGED, DIVERGED, VIOLATED, NOT_MEASURED)
COLOURS = {REPRODUCED: "#d9f0d3", DIRECTION: "#e5f5e0", OPPOSITE: "#fcbba1", INCONCLUSIVE: "#fee8c8",
           NOT_CONVERGED: "#deebf7", DIVERGED: "#fcbba1", VIOLATED: "#fcbba1", NOT_MEASURED: "#f0f0f0"}


def interval(effects, level: float = 0.95) -> tuple[float, float, float]:
    """(mean, lo, hi): Student's t interval of the mean of paired effects; (mean, -inf, inf) for one effect."""
    from scipy import stats
    x = np.asarray(effects, dtype=float)
    m = float(x.mean())
    if x.size < 2:
        return m, -math.inf, math.inf
    h = float(stats.t.ppf(0.5 + level / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return m, m - h, m + h


def _flags(runs) -> tuple[int, int, int]:
    """(runs, diverged, not converged) from ``common.train_seeds`` run dicts (their ``diverged`` reason or None,
    their ``converged`` flag by ``common.converged``)."""
    runs = list(runs or [])
    return len(runs), sum(bool(r["diverged"]) for r in runs), sum(not r["converged"] for r in runs)


def decide(claim, effects, runs=()) -> dict:
    """The verdict row of ``claim`` (a claims.Claim) for per-seed ``effects`` (signed as the claim states) and the
    comparison's run dicts ``runs`` (``common.train_seeds`` results: their ``converged`` / ``diverged`` flags; no
    runs for an effect that is not trained, e.g. a toy). Returns a plain dict: claim, effect (per seed), n_seeds,
    mean, interval, size_target, margin, verdict, note."""
    x = np.asarray(list(effects), dtype=float)
    n_runs, n_div, n_nc = _flags(runs)
    finite = np.isfinite(x)
    row = {"claim": claim.id, "effect": [float(v) if np.isfinite(v) else None for v in x], "n_seeds": int(x.size),
           "mean": None, "interval": None, "size_target": claim.target, "margin": claim.margin}
    if x.size == 0:
        return {**row, "verdict": NOT_MEASURED, "note": "no effect measured"}
    if n_div or not finite.all():
        k = max(n_div, int((~finite).sum()))
        nc = f"; {n_nc} not converged" if n_nc > k else ""      # a diverged run is also unconverged
        return {**row, "verdict": DIVERGED, "note": f"{k} of {max(n_runs, x.size)} runs diverged (non-finite){nc}"}
    m, lo, hi = interval(x)
    row.update(mean=m, interval=[lo, hi])
    if n_nc and claim.at_convergence:
        return {**row, "verdict": NOT_CONVERGED, "note": f"{n_nc} of {n_runs} runs not converged"}
    if claim.margin is not None:
        v = _null(lo, hi, claim.margin, claim.kind)
    elif lo > 0:
        v = REPRODUCED if claim.target is None or m >= claim.target else DIRECTION
    elif hi < 0:
        v = OPPOSITE
    else:
        v = INCONCLUSIVE
    during = f"; {n_nc} of {n_runs} runs not converged (a claim about the course of training)" if n_nc else ""
    return {**row, "verdict": v, "note": seeds_note(x.size) + during}


def _null(lo: float, hi: float, margin: float, kind: str) -> str:
    if kind == "at_most":                              # the claim: effect <= margin
        return REPRODUCED if hi <= margin else OPPOSITE if lo > margin else INCONCLUSIVE
    if -margin <= lo and hi <= margin:                 # kind "equivalent": |effect| <= margin
        return REPRODUCED
    return OPPOSITE if lo > margin or hi < -margin else INCONCLUSIVE


def exact(claim, holds: bool, n_seeds: int = 1, measured=None) -> dict:
    """An exact check (identity, count, printed column): reproduced when it holds, violated otherwise."""
    return {"claim": claim.id, "effect": measured, "n_seeds": int(n_seeds), "mean": None, "interval": None,
            "size_target": None, "margin": None, "verdict": REPRODUCED if holds else VIOLATED,
            "note": "exact check"}


def not_measured(claim, why: str, n_seeds: int = 0) -> dict:
    """A row the script cannot measure on this tier (e.g. matched fit without the tier's loss ladder)."""
    return {"claim": claim.id, "effect": None, "n_seeds": int(n_seeds), "mean": None, "interval": None,
            "size_target": claim.target, "margin": claim.margin, "verdict": NOT_MEASURED, "note": why}


def seeds_note(n: int) -> str:
    return f"{n} seeds" + (f" (fewer than {MIN_SEEDS}: a wide interval)" if n < MIN_SEEDS else "")


def fmt(row: dict, scale: float = 1.0, unit: str = "") -> str:
    """'mean [lo, hi] unit (n seeds)' of a row's effect, times ``scale``."""
    if row["mean"] is None:
        return row["note"]
    lo, hi = row["interval"]
    return f"{scale * row['mean']:+.3g} [{scale * lo:+.3g}, {scale * hi:+.3g}]{unit} ({row['n_seeds']} seeds)"


def summary(rows) -> str:
    """Counts per verdict: '3 reproduced, 2 opposite, 1 inconclusive of 6 comparisons', never one word."""
    vs = [r["verdict"] if isinstance(r, dict) else r for r in rows]
    c = Counter(vs)
    parts = ", ".join(f"{c[v]} {v}" for v in OUTCOMES if c[v])
    return f"{parts} of {len(vs)} comparison{'s' if len(vs) != 1 else ''}"


def colour(rows) -> str:
    """A summary box's colour: the verdict's when all rows agree, neutral grey over mixed rows."""
    vs = {r["verdict"] if isinstance(r, dict) else r for r in rows}
    return COLOURS[vs.pop()] if len(vs) == 1 else "#f0f0f0"
