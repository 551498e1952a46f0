"""The one verdict rule of every paper_figures script: a claim (paper_figures/claims.py) against per-seed effects.

Effects are paired: effect_s = (measurement of the paper's method) - (measurement of the baseline) on the same seed,
so the same partition, client draws and minibatches, and signed so that > 0 is the direction the paper claims
(each claim states its effect). Over n seeds the 95% interval is Student's t interval on the paired differences,

    mean +- t_{0.975, n-1} * sd / sqrt(n)        (sd with ddof = 1; n = 1 gives (-inf, inf)),

chosen over a bootstrap because with 3-5 seeds a percentile bootstrap is too narrow (it can only resample the
few values seen). The rule, in the order it is checked:

    diverged        a run of the comparison went non-finite (its flag, or a non-finite effect): reported as such,
                    with how many runs; never dropped and never read as "no divergence". Checked before "not
                    converged" because a diverged run is also unconverged and would otherwise hide the divergence.
    collapsed to chance
                    a finite run of the comparison ended at chance: final test accuracy below chance + CHANCE_MARGIN
                    (one tenth) of the way to 100% (19% for 10 classes). A run flat at chance is a plateau, yet its
                    effect is no measurement of the method, so this comes before "not converged"
    predicted failure
                    where the paper predicts that the effect's second arm fails to train (``Claim.predicts_failure``:
                    FedInit Fig. 1(b), beta past its threshold "will diverge quickly"; FedLESAM Fig. 4, the largest
                    rho, as "larger perturbations hinder convergence"), runs of that arm that diverged or collapsed
                    to chance are evidence for the claim: "reproduced", with the count, outside the family. A
                    failure of the first arm (the one the paper expects to train) is no such evidence: the rows
                    above apply
    not converged   a run of the comparison failed the convergence gate (the note counts them); only for claims
                    about the trained model (``Claim.at_convergence``): a claim about the course of training (a
                    per-round dispersion, drift, consensus, divergence term or oscillation) is judged as it is.
                    The gate (``flag``, ``plateau``) reads the claim's own curve (``Claim.measure``): test accuracy
                    for a test-accuracy effect, the training loss for a claim about the trained model's curvature,
                    flatness or state. A run passes when the mean of that curve over its last 10% of evaluations
                    (GATE_WINDOW) differs from the mean over the 10% before by less than GATE_FRACTION (a quarter)
                    of the interval's half-width plus twice the standard error of the difference (the spread about
                    a line fitted to the two windows: jitter is not a trend, a steady trend does not hide in it).
                    The training loss's drift is relative (over its level), against the half-width of a relative
                    effect (every loss-gated claim's effect is a relative gap). So a run still moving by a quarter
                    of what the interval can resolve is not certified; the tolerance shrinks as the effect sharpens
    directional claims ("A is smaller than B", "+RI adds 2-5 points"):
      reproduced      the interval excludes 0 on the paper's side and, where the paper states a size, the mean
                      effect reaches the claim's target = SIZE_FRACTION (one half) of the lower end of the stated
                      size (a verbal size such as "much smaller" is read once in the claim, with fraction 1)
      direction only  the interval excludes 0 on the paper's side, the size target is not reached
      opposite        the interval excludes 0 on the other side
      inconclusive    the interval covers 0 (ties included: identical per-seed results give effects of 0)
    null claims ("changes little", "is not flatter than"), with an equivalence margin: the paper's number where its
    words give one ("paper"); otherwise ours, NOISE_MULTIPLE (two) seed standard deviations (ddof = 1) of the
    baseline arm, in the effect's units (the arm the effect is measured against: the subtracted arm of a
    difference; for a relative gap, the reference arm over its mean), or of the effect itself where it is one
    arm's statistic (``Claim.noise`` "effect": FedCM's dispersion slope). The row says which ("margin_from") and
    stores the baseline's seeds ("baseline"). A difference smaller than two seeds' spread is what a second seed
    could make; with one seed there is no margin and the row is inconclusive:
      reproduced      the interval lies inside the margin (|effect| <= margin, or effect <= margin one-sided)
      opposite        the interval lies wholly outside it (beyond +margin, or beyond -margin for two-sided)
      inconclusive    otherwise
    exact checks (an identity, a count, a printed column): reproduced or violated, no interval.

With fewer than MIN_SEEDS seeds the rule still runs; every row carries ``n_seeds`` and its text says how many.

Family-wise statement, one per paper and tier (``family``): the comparisons judged by an interval are one family,
each counted once. The 95% rule above is the raw verdict; the adjusted verdict holds the family-wise error rate at
ALPHA = 5% by Holm's step-down method (chosen over Benjamini-Hochberg: a referee reads each verdict as a claim of
its own, so the rate is of any false verdict, not of a proportion). A row's p-value (``p_value``) is the smallest
alpha at which the (1 - alpha) interval decides it; the raw verdict is decisive exactly when p < ALPHA. Holm
keeps a decisive verdict when its adjusted p is below ALPHA, and reads it "inconclusive" otherwise. Rows with the
same per-seed effects (up to sign) and the same test are one effect (the same runs and measure under two scripts
or claims): they name each other and count once in their paper's family (in each paper's, where two papers claim
it). One claim's rows in one script are its grid points and stay apart. Exact checks, "not measured", "not
converged", "diverged" and "collapsed to chance" rows are no tests and are outside the family.

Controls (claims whose ``where`` starts with "Control"): the toolkit's comparisons that isolate a component the
paper credits (FedLESAM-S against SCAFFOLD, FedLESAM-D and FedSMOO against FedDyn, FedAvg +RI against FedAvg at
equal rounds), judged by the same rule and in their paper's family.

Audit: each row of a trained comparison names its runs (``runs``) with each run's flag (``flags``) and the gate's
measure and tolerance (``gate``); its script commits curves.json beside data.json, the compact curves of those
runs (test accuracy and training loss per evaluated round, 5 significant digits; ``runs.curve``), and the gate
reads those rounded curves, so ``audit`` re-derives every flag and verdict from the committed files alone. A row
written before curves were committed (the mnist tier's outputs until it is regenerated) is re-derived from its
per-seed effects and the run counts its note states; verdicts.md lists those rows per script as lacking curves.

Relative size (``relative``), beside the points for test-accuracy effects: the relative reduction of test error,
mean_s(acc_a - acc_b) / mean_s(1 - acc_b), b the comparison's subtracted arm. It transfers between tasks where
points do not (0.5 points is 17% of a 3% error, and 2% of a 25% one).
"""
from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path

import numpy as np

from paper_figures.claims import SIZE_FRACTION  # noqa: F401  (the rule's constant, kept with the claims it sizes)

MIN_SEEDS = 5
ALPHA = 0.05          # 1 - the intervals' level; the family-wise error rate of the adjusted verdicts
CHANCE_MARGIN = 0.1   # a run is at chance below chance + CHANCE_MARGIN * (1 - chance) final test accuracy
GATE_FRACTION = 0.25  # the convergence gate's plateau tolerance: this fraction of the interval's half-width
GATE_WINDOW = 0.1     # ... over the last 10% of the evaluated rounds against the 10% before
NOISE_MULTIPLE = 2.0  # a margin of ours: this many seed standard deviations of the baseline arm
REPRODUCED, DIRECTION, OPPOSITE, INCONCLUSIVE = "reproduced", "direction only", "opposite", "inconclusive"
NOT_CONVERGED, DIVERGED, VIOLATED, NOT_MEASURED = "not converged", "diverged", "violated", "not measured"
COLLAPSED = "collapsed to chance"
OUTCOMES = (REPRODUCED, DIRECTION, OPPOSITE, INCONCLUSIVE, NOT_CONVERGED, DIVERGED, COLLAPSED, VIOLATED,
            NOT_MEASURED)
DECISIVE = (REPRODUCED, DIRECTION, OPPOSITE)
COLOURS = {REPRODUCED: "#d9f0d3", DIRECTION: "#e5f5e0", OPPOSITE: "#fcbba1", INCONCLUSIVE: "#fee8c8",
           NOT_CONVERGED: "#deebf7", DIVERGED: "#fcbba1", COLLAPSED: "#fcbba1", VIOLATED: "#fcbba1",
           NOT_MEASURED: "#f0f0f0"}


def interval(effects, level: float = 0.95) -> tuple[float, float, float]:
    """(mean, lo, hi): Student's t interval of the mean of paired effects; (mean, -inf, inf) for one effect."""
    from scipy import stats
    x = np.asarray(effects, dtype=float)
    m = float(x.mean())
    if x.size < 2:
        return m, -math.inf, math.inf
    h = float(stats.t.ppf(0.5 + level / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return m, m - h, m + h


def at_chance(acc, n_classes: int = 10) -> bool:
    """A final test accuracy within CHANCE_MARGIN of chance (1 / n_classes) on the way to 1; NaN or None is not."""
    c = 1 / n_classes
    return acc is not None and bool(np.isfinite(acc)) and acc < c + CHANCE_MARGIN * (1 - c)


def plateau(curve, tol: float, relative: bool = False, frac: float = GATE_WINDOW) -> bool:
    """The plateau test of the convergence gate: the mean of ``curve`` over its last ``frac`` (10%) of evaluations
    differs from the mean over the 10% before it by less than ``tol`` plus twice the standard error of that
    difference (from the spread about a straight line fitted to those 2 windows, so a trend is not counted as
    noise); ``relative``: both divided by the last window's mean (the training loss). At least 10 finite values."""
    a = np.asarray([np.nan if v is None else v for v in curve], dtype=float)
    if a.size < 10 or not np.all(np.isfinite(a)):
        return False
    w = max(1, int(round(frac * a.size)))
    tail = a[-2 * w:]
    se = 0.0
    if tail.size > 2:                                  # residual spread about the windows' linear trend
        t = np.arange(tail.size)
        resid = tail - np.polyval(np.polyfit(t, tail, 1), t)
        se = float(np.sqrt(resid @ resid / (tail.size - 2) * 2 / w))
    drift = abs(tail[w:].mean() - tail[:w].mean())
    if relative:
        level = abs(tail[w:].mean())
        if level == 0:
            return drift == 0
        drift, se = drift / level, se / level
    return bool(drift < tol + 2 * se)


def converged(test_accs, frac: float = GATE_WINDOW, tol: float = 0.003) -> bool:
    """A run's test-accuracy curve is a plateau within ``tol`` (0.3 points): ``verdict.plateau``, the convergence
    gate's test, at a fixed tolerance. The flag ``train_seeds`` reports beside each run; a verdict gates on the
    claim's own curve and a tolerance tied to its interval (``verdict.flag``)."""
    return plateau(test_accs, tol, frac=frac)


def run_id(run) -> str | None:
    """A run's name in its script's curves.json (``runs.result``'s ``id``: its cache entry's name), or None."""
    return run.get("id")


def flag(run, claim, tol: float, n_classes: int = 10) -> str:
    """One run of a comparison, by the rule above: "diverged" (its ``diverged`` reason), "collapsed" (its final test
    accuracy at chance), "not converged" (the gate: its ``curve`` of ``claim.measure`` is no plateau within ``tol``;
    a run without a curve: its ``converged`` flag), else "ok"."""
    if run["diverged"]:
        return "diverged"
    curve = run.get("curve")
    if at_chance(curve["test_acc"][-1] if curve else run.get("test_acc"), n_classes):
        return "collapsed"
    if curve is None:
        ok = run["converged"]
    else:
        m = claim.measure
        ok = m is None or plateau(curve[m], tol, relative=m == "train_loss")
    return "ok" if ok else "not converged"


def noise_margin(values) -> float | None:
    """A margin of ours: NOISE_MULTIPLE seed standard deviations (ddof = 1) of ``values``; None under 2 seeds."""
    v = np.asarray(list(values), dtype=float)
    return NOISE_MULTIPLE * float(v.std(ddof=1)) if v.size > 1 and np.isfinite(v).all() else None


def decide(claim, effects, runs=(), n_classes: int = 10, base=None) -> dict:
    """The verdict row of ``claim`` (a claims.Claim) for per-seed ``effects`` (signed as the claim states) and the
    comparison's run dicts ``runs`` (``common.train_seeds`` results: their ``diverged`` reason, their ``curve`` and
    ``id``, or for runs without a curve their ``converged`` flag and final ``test_acc``; on a task of ``n_classes``;
    no runs for an effect that is not trained, e.g. a toy). ``base``: the baseline arm's per-seed values in the
    effect's units, whose noise sets a margin of ours. Returns a plain dict: claim, effect (per seed), n_seeds, mean,
    interval, size_target, margin (and margin_from, baseline for a null claim), verdict, note; with runs that carry
    ids, also runs (their ids), flags (each one's, by ``flag``) and gate (the measure and tolerance it used)."""
    x = np.asarray(list(effects), dtype=float)
    runs = list(runs or [])
    finite = np.isfinite(x)
    row = {"claim": claim.id, "effect": [float(v) if np.isfinite(v) else None for v in x], "n_seeds": int(x.size),
           "mean": None, "interval": None, "size_target": claim.target, "margin": claim.margin}
    margin = claim.margin
    if claim.margin_from == "ours":
        noise = x if claim.noise == "effect" else None if base is None else np.asarray(list(base), dtype=float)
        margin = None if noise is None else noise_margin(noise)
        row.update(margin=margin, margin_from=f"ours: {NOISE_MULTIPLE:g} seed sd of the "
                   + ("effect" if claim.noise == "effect" else "baseline arm"))
        if claim.noise != "effect" and noise is not None:
            row["baseline"] = [float(v) for v in noise]
    elif claim.margin_from == "paper":
        row["margin_from"] = "paper"
    if x.size == 0:
        return {**row, "verdict": NOT_MEASURED, "note": "no effect measured"}
    fx = x[finite]
    half = (lambda i: (i[2] - i[1]) / 2)(interval(fx)) if fx.size else math.inf
    tol = GATE_FRACTION * half
    flags = [flag(r, claim, tol, n_classes) for r in runs]
    ids = [run_id(r) for r in runs]
    if runs and all(ids):
        row.update(runs=ids, flags=flags, gate={"measure": claim.measure, "tol": tol})
    n_runs, c, legacy = len(runs), Counter(flags), "runs" not in row
    n_div, n_col, n_nc = c["diverged"], c["collapsed"], c["not converged"]
    if legacy:                                         # a run without a curve: a diverged one is also unconverged
        n_nc += sum(f == "diverged" and not r.get("converged", False) for f, r in zip(flags, runs))
    failed = [f in ("diverged", "collapsed") for f in flags]
    predicted = claim.predicts_failure and not any(failed[:n_runs // 2])     # only the second arm's runs failed
    if n_div or not finite.all():
        k = max(n_div, int((~finite).sum()))
        if predicted:
            return {**row, "verdict": REPRODUCED,
                    "note": f"{k} of {max(n_runs, x.size)} runs diverged (non-finite), as the paper predicts"}
        nc = f"; {n_nc} not converged" if (n_nc > k if legacy else n_nc) else ""
        return {**row, "verdict": DIVERGED, "note": f"{k} of {max(n_runs, x.size)} runs diverged (non-finite){nc}"}
    m, lo, hi = interval(x)
    row.update(mean=m, interval=[lo, hi])
    if n_col:
        bar = 1 / n_classes + CHANCE_MARGIN * (1 - 1 / n_classes)
        note = f"{n_col} of {n_runs} runs collapsed to chance (final test accuracy below {bar:.0%})"
        if predicted:
            return {**row, "verdict": REPRODUCED, "note": note + ", as the paper predicts"}
        return {**row, "verdict": COLLAPSED, "note": note}
    if n_nc and claim.at_convergence:
        what = "" if legacy else f" ({claim.measure.replace('_', ' ')} drifts more than {tol:.3g})"
        return {**row, "verdict": NOT_CONVERGED, "note": f"{n_nc} of {n_runs} runs not converged{what}"}
    if claim.null and margin is None:
        v = INCONCLUSIVE
    elif claim.null:
        v = _null(lo, hi, margin, claim.kind)
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
    """'mean [lo, hi] unit (n seeds)' of a row's effect, times ``scale``; a null claim's row adds its margin and
    where it comes from ("margin 0.31 points, ours" / "paper")."""
    if row["mean"] is None:
        return row["note"]
    lo, hi = row["interval"]
    m = row.get("margin_from") and (f"; margin {scale * row['margin']:.3g}{unit}, {row['margin_from'].split(':')[0]}"
                                   if row["margin"] is not None else "; no margin (one seed)")
    return f"{scale * row['mean']:+.3g} [{scale * lo:+.3g}, {scale * hi:+.3g}]{unit} ({row['n_seeds']} seeds{m or ''})"


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


# ---- the family-wise statement, the relative size, one row per effect (module docstring) ---------------------
def p_value(claim, effects, margin=None) -> float:
    """The smallest alpha at which the (1 - alpha) Student's t interval of ``effects`` decides ``claim`` by the
    rule above (1 where none does, and for fewer than two or non-finite effects): directional, the interval
    excludes 0; equivalent, it lies inside +-margin or wholly outside; at_most, its upper end is at most the margin
    or its lower end above it. ``margin``: the row's (a margin of ours), else the claim's."""
    from scipy import stats
    x = np.asarray(list(effects), dtype=float)
    if x.size < 2 or not np.isfinite(x).all():
        return 1.0
    m, se = float(x.mean()), float(x.std(ddof=1)) / math.sqrt(x.size)
    c = claim.margin if margin is None else margin
    if claim.null and c is None:                       # a margin of ours from under 2 seeds: nothing decides
        return 1.0
    if se == 0:                                        # a zero-width interval at the mean
        decisive = m != 0 if c is None else _null(m, m, c, claim.kind) != INCONCLUSIVE
        return 0.0 if decisive else 1.0
    gaps = ([abs(m)] if c is None else [c - m, m - c] if claim.kind == "at_most"
            else [min(m + c, c - m), max(m - c, -c - m)])    # how far the interval's centre is past each boundary
    return min(float(min(1.0, 2 * stats.t.sf(g / se, x.size - 1))) for g in gaps)


def holm(ps) -> list[float]:
    """Holm's step-down adjusted p-values: the j-th smallest of m is max over i <= j of min(1, (m - i + 1) p_(i))."""
    out, run = [1.0] * len(ps), 0.0
    for j, i in enumerate(np.argsort(ps, kind="stable")):
        run = max(run, min(1.0, (len(ps) - j) * ps[i]))
        out[i] = run
    return out


def adjusted(verdict: str, p_holm: float | None) -> str:
    """The verdict under the family-wise statement: a decisive one stands when its Holm p is below ALPHA; a row
    outside the family (``p_holm`` None: an exact check, not measured, ...) keeps its verdict."""
    return INCONCLUSIVE if verdict in DECISIVE and p_holm is not None and not p_holm < ALPHA else verdict


def is_accuracy(claim) -> bool:
    """The claim's effect is a difference of test accuracies (the registry's words say so)."""
    return "test accuracy" in claim.effect


def rel_base(values) -> np.ndarray:
    """A reference arm's per-seed values in the units of a relative gap against it: each over their mean."""
    v = np.asarray(list(values), dtype=float)
    return v / v.mean()


def relative(effects, base) -> float:
    """Relative reduction of test error of arm a against arm b: mean(acc_a - acc_b) / mean(1 - acc_b), where
    ``effects`` = acc_a - acc_b per seed and ``base`` = acc_b per seed."""
    return float(np.mean(effects) / np.mean(1 - np.asarray(base, dtype=float)))


def same_test(a, b, sign: int, margins=None) -> bool:
    """Claims ``a`` and ``b`` test the same hypothesis on effects equal up to ``sign``: both directional (the test
    of 0 does not depend on the sign), or the same null claim and margin on the same effect (``margins``: the two
    rows' margins, else the claims')."""
    ma, mb = margins or (a.margin, b.margin)
    return (not a.null and not b.null) or (a.kind == b.kind and ma == mb and sign == 1)


# ---- the committed results, re-derived: python -m paper_figures.family writes out/verdicts.md -----------------
_RUNS = re.compile(r"(\d+) of (\d+) runs (not converged|diverged|collapsed)(?: \(non-finite\); (\d+) not converged)?")


def _runs_of(note: str, n_seeds: int) -> list[dict]:
    """Run flags a stored row's note states ("k of N runs not converged", "k of N runs diverged (non-finite)[; j not
    converged]", "k of N runs collapsed to chance"): N runs, the last k flagged (``decide`` counts them; the note
    does not say which runs they are, so a failure the claim predicts is placed in its second arm, the one it
    predicts to fail). A note without counts: every run converged, 2 arms per seed."""
    m = _RUNS.search(note)
    if not m:
        return [{"converged": True, "diverged": None} for _ in range(2 * n_seeds)]
    k, n = int(m[1]), int(m[2])
    n_nc = {"not converged": k, "diverged": int(m[4] or k), "collapsed": 0}[m[3]]
    return [{"converged": i < n - n_nc, "diverged": "stored" if m[3] == "diverged" and i >= n - k else None,
             "test_acc": 0.0 if m[3] == "collapsed" and i >= n - k else None} for i in range(n)]


def _vectors(x, n: int):
    """Every list of ``n`` finite numbers in [0, 1] inside ``x`` (per-seed accuracies and the like)."""
    if isinstance(x, dict):
        for v in x.values():
            yield from _vectors(v, n)
    elif isinstance(x, list):
        if len(x) == n and all(isinstance(v, (int, float)) and 0 <= v <= 1 for v in x):
            yield np.asarray(x, dtype=float)
        else:
            for v in x:
                yield from _vectors(v, n)


def _numbers(x, n: int):
    """Every list of ``n`` finite numbers inside ``x``, and every column of a list of ``n`` dicts (per-seed records)."""
    if isinstance(x, dict):
        for v in x.values():
            yield from _numbers(v, n)
    elif isinstance(x, list):
        if len(x) == n and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                               for v in x):
            yield np.asarray(x, dtype=float)
        elif len(x) == n and all(isinstance(v, dict) for v in x):
            for k in x[0]:
                col = [v.get(k) for v in x]
                if all(isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c) for c in col):
                    yield np.asarray(col, dtype=float)
        for v in x:
            yield from _numbers(v, n)


def reference(data: dict, effects) -> np.ndarray | None:
    """The reference arm b per seed of a relative gap (b - a) / b = ``effects``, from the stored vectors of ``data``
    (its table aside); None where no pair, or no single b, gives it."""
    e = np.asarray(effects, dtype=float)
    vs = [v for v in _numbers({k: v for k, v in data.items() if k != "table"}, e.size) if np.all(v != 0)]
    hits = {tuple(b): b for a in vs for b in vs if np.allclose((b - a) / b, e, rtol=1e-9, atol=1e-12)}
    return next(iter(hits.values())) if len(hits) == 1 else None


def arms(data: dict, effects) -> tuple | None:
    """(acc_a, acc_b) per seed: the stored vectors of ``data`` (a data.json, its table aside) whose difference is
    ``effects``; None where no pair, or no single b, gives it."""
    e = np.asarray(effects, dtype=float)
    vs = list(_vectors({k: v for k, v in data.items() if k != "table"}, e.size))
    hits = {tuple(b): (a, b) for a in vs for b in vs if np.allclose(a - b, e, rtol=0, atol=1e-12)}
    return next(iter(hits.values())) if len(hits) == 1 else None


# an exact row's check, restated from what its script stores beside it: does it hold?
EXACT = {
    "fedlesam_cost": lambda d, t: t["effect"] == float(re.search(r"\(paper ([\d.]+)x\)", t["measured"])[1]),
    "fedcm_identities": lambda d, t: t["effect"] < d["tolerance"],
    "fedals_table2_comm": lambda d, t: t["effect"] == {k: round(v / 1e9, 3) for k, v in d["paper"].items()},
}


def _close(a, b) -> bool:
    return a is None and b is None or a is not None and b is not None and (
        a == b or math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15))


def _same(stored: dict, fresh: dict) -> bool:
    """The stored row says what ``fresh`` (recomputed) says: verdict, note, mean, interval and, where the row names
    its runs, the runs, their flags, the gate's tolerance and the margin."""
    if stored["verdict"] != fresh["verdict"] or stored["note"] != fresh["note"]:
        return False
    nums = lambda r: [r["mean"], *(r["interval"] or [])]                            # noqa: E731
    a, b = nums(stored), nums(fresh)
    if len(a) != len(b) or not all(_close(x, y) for x, y in zip(a, b)):
        return False
    if "runs" in stored or "runs" in fresh:
        keys = ("runs", "flags", "margin_from", "baseline")
        same = lambda k: json.dumps(stored.get(k)) == json.dumps(fresh.get(k))        # noqa: E731  (NaN == NaN)
        if not all(map(same, keys)) or stored.get("gate", {}).get("measure") != fresh.get("gate", {}).get("measure"):
            return False
        return _close(stored["gate"]["tol"], fresh["gate"]["tol"]) and _close(stored["margin"], fresh["margin"])
    return True


CURVES = "curves.json"


def curve_runs(curves: dict, ids, where: str) -> list[dict]:
    """The run dicts ``decide`` reads, rebuilt from a script's curves.json for the run ``ids`` a row names."""
    from fedlab_analysis.errors import UserError
    missing = [i for i in ids if i not in curves]
    if missing:
        raise UserError(f"{where} names runs that {CURVES} does not hold: {', '.join(missing[:3])}")
    return [{"id": i, "diverged": curves[i]["diverged"], "curve": curves[i]} for i in ids]


def audit(path: Path, tier: str, script: str, data: dict | None = None) -> list[dict]:
    """The rows of one committed data.json, each stored verdict re-derived from what is committed beside it by
    ``decide`` (a row that does not recompute is a UserError naming it), then under the current rule with its
    p-value and relative size. A row that names its runs is re-derived from its script's curves.json: each run's
    flag from its curves (the gate, collapse, divergence) and the margin from the baseline seeds it stores
    (``curves``: "checked"). A row written before curves were committed is re-derived from its per-seed effects and
    the run counts its note states, with the margin it stores (``curves``: "absent"), and its current-rule verdict
    takes a margin of ours from the baseline arm's accuracies where the data.json stores them (else "not
    measured"). ``data``: the rows of ``path`` as read elsewhere (the controls of ``settings.control_data``, with
    their runs' curves as ``run_curves``)."""
    from paper_figures.claims import TOY
    from dataclasses import replace

    from fedlab_analysis.errors import UserError
    from paper_figures.claims import CLAIMS
    data = json.loads(path.read_text()) if data is None else data
    curves = data.get("run_curves")                 # the controls carry their runs' curves (settings.control_data)
    out = []
    for i, t in enumerate(data["table"]):
        c = CLAIMS[t["claim"]]
        e = {"tier": tier, "script": script, "index": i, "row": t["row"], "claim": c.id, "paper": c.paper,
             "stored": t["verdict"], "raw": t["verdict"], "p": None, "relative": None, "same_as": [],
             "margin": t.get("margin"), "curves": None}
        out.append(e)
        where = f"{path}: row {i} ({t['row']})"
        if t["note"] == "exact check":
            if script not in EXACT:
                raise UserError(f"{where} is an exact check that verdict.EXACT does not restate")
            if (REPRODUCED if EXACT[script](data, t) else VIOLATED) != t["verdict"]:
                raise UserError(f"{where} is stored {t['verdict']}; its check, restated, says otherwise")
            e["curves"] = "exact check, restated"
            continue
        if t["effect"] is None:
            if t["verdict"] != NOT_MEASURED:
                raise UserError(f"{where} is stored {t['verdict']} without an effect")
            continue
        x = [np.nan if v is None else v for v in t["effect"]]
        ab = arms(data, x) if is_accuracy(c) and np.isfinite(x).all() else None
        if "runs" in t:
            if curves is None:
                f = path.parent / CURVES
                if not f.is_file():
                    raise UserError(f"{where} names its runs, but {f} is missing")
                curves = json.loads(f.read_text())["runs"]
            runs = curve_runs(curves, t["runs"], where)
            fresh = decide(c, x, runs, base=t.get("baseline"))
            e["curves"] = "checked"
        else:
            runs = _runs_of(t["note"], len(x))
            stored_rule = replace(c, margin=t["margin"], predicts_failure=False) if c.null else \
                replace(c, predicts_failure=False)
            fresh = decide(stored_rule, x, runs)
            e["curves"] = "no runs (not trained)" if script in TOY else \
                "arms from committed accuracies" if script == "controls" else "absent (written before curves.json)"
        if not _same(t, fresh):
            raise UserError(f"{where} does not recompute from the committed files: stored {t['verdict']} "
                            f"{t['mean']} {t['interval']}, recomputed {fresh['verdict']} {fresh['mean']} "
                            f"{fresh['interval']}")
        if ab is not None:
            e["relative"] = relative(x, ab[1])
            if len(runs) == 2 * len(x) and "runs" not in t:
                runs = [{**r, "test_acc": acc} for r, acc in zip(runs, [*ab[0], *ab[1]])]   # the stored accuracies
        if "runs" in t:
            now = fresh
        else:
            base = None if c.margin_from != "ours" or c.noise == "effect" else ab[1] if ab is not None else \
                None if is_accuracy(c) or not np.isfinite(x).all() else \
                reference({"data": data, "row": {k: v for k, v in t.items() if k != "effect"}}, x)
            if c.margin_from == "ours" and c.noise != "effect" and base is None:
                now = {"verdict": NOT_MEASURED, "margin": None}
                e["why"] = "a margin of ours needs the baseline arm's seeds, which this data.json does not store"
            else:
                now = decide(c, x, runs, base=None if base is None or ab is not None else rel_base(base)) \
                    if ab is None else decide(c, x, runs, base=base)
        e["raw"], e["margin"] = now["verdict"], now["margin"]
        predicted = now.get("note", "").endswith("as the paper predicts")        # a failure: no test
        if e["raw"] in (*DECISIVE, INCONCLUSIVE) and np.isfinite(x).all() and not predicted:
            e["p"], e["effect"] = p_value(c, x, e["margin"]), np.asarray(x)
            if (e["raw"] in DECISIVE) != (e["p"] < ALPHA):                  # a defect of p_value, not of the file
                raise RuntimeError(f"{where}: p = {e['p']:.3g} disagrees with its verdict {e['raw']}")
    return out
