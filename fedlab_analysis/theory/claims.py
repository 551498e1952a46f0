"""The claim table shared by every paper's check module.

A check measures something on a toy problem and turns the measurement into a verdict with
one of the helpers below; the verdict is never typed in. ``over_seeds`` runs a paper's checks on
several seeds (a fresh toy instance and fresh noise each) and folds the per-seed rows into one row
that says in how many seeds the verdict came out each way. ``theory/__main__.py`` prints the table
and writes it as Markdown and JSON.

Each row also carries
- ``kind``: ``finding`` (a measurement the paper could have got wrong), ``sanity check`` (true by
  construction: an algebraic identity of the update, an inequality that holds for every input; it checks
  our code, not the paper) or ``observation`` (a comparison the paper does not state as a theorem);
- ``regime``: whether the toy satisfies the theorem's assumptions, naming the condition;
- ``slack``: bound / measured for every bound (1 is tight; 100 means the bound is 100x loose);
- ``mistakes``: for a finding, the plausible implementation mistakes it is expected to catch (theory/mistakes.py);
  ``caught``: those it does catch (theory/power.py measures it; None: not measured). A row that catches none is
  ``loose at this scale`` (a bound with slack N > 1: "loose by xN") or ``vacuous at this scale``, counted
  apart from the findings; a finding with an empty measured ``caught`` is refused (``check_kind``).
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

HOLDS, VIOLATED, OUTSIDE, INCONCLUSIVE = "holds", "violated", "outside the proven regime", "inconclusive"
MIXED, NOT_CHECKED = "mixed", "not checked"
VERDICTS = (HOLDS, VIOLATED, OUTSIDE, INCONCLUSIVE, MIXED, NOT_CHECKED)
FINDING, SANITY, OBSERVATION, VACUOUS = "finding", "sanity check", "observation", "vacuous at this scale"
LOOSE = "loose at this scale"
KINDS = (FINDING, SANITY, OBSERVATION, LOOSE, VACUOUS)


def regime_text(condition, inside: bool) -> str:
    """``inside the proven regime (cond)`` / ``outside the proven regime (cond fails)``."""
    if isinstance(condition, dict):
        fails = [k for k, ok in condition.items() if not ok]
        condition = ", ".join(fails if fails and not inside else condition)
    return f"inside the proven regime ({condition})" if inside else f"outside the proven regime ({condition} fails)"


@dataclass
class Claim:
    paper: str            # "fedsmoo", "fedlesam", "fedcm", "fedals", "fedinit"
    id: str               # short stable key, e.g. "T3-dual-mean"
    claim: str            # what the paper says, in one line
    where: str            # "Lemma 4.1", "Thm 4.3 / Eq. (12)"
    expected: str         # what the paper (or a closed form derived from it) predicts
    measured: str         # what we measured, with numbers
    verdict: str          # one of VERDICTS
    value: float | None = None                        # the headline number (error, slope, ratio)
    details: dict = field(default_factory=dict)       # constants, regime conditions, raw series
    figure: str | None = None                         # file name of the figure, if any
    kind: str = FINDING                               # one of KINDS
    regime: str = ""                                  # regime_text(...), or "" where no condition is stated
    slack: float | None = None                        # bound / measured, for a bound
    seeds: list = field(default_factory=list)         # the seeds this row folds (over_seeds)
    tally: dict = field(default_factory=dict)         # verdict -> number of seeds
    spread: dict = field(default_factory=dict)        # {"value": [min, max], "slack": [min, max]} over seeds
    mistakes: list = field(default_factory=list)      # the mistakes a finding is expected to catch (mistakes.py)
    caught: list | None = None                        # those it catches (theory/power.py; None: not measured)
    power: dict = field(default_factory=dict)         # mistake -> caught / not caught / inherited / diverged

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")
        if self.kind not in KINDS:
            raise ValueError(f"kind {self.kind!r} is not one of {KINDS}")
        if not self.regime and "regime" in self.details and "in_regime" in self.details:
            self.regime = regime_text(self.details["regime"], bool(self.details["in_regime"]))
        if self.verdict == OUTSIDE and not self.regime.startswith("outside"):
            self.regime = "outside the proven regime" + (f" ({self.regime})" if self.regime else "")
        check_kind(self)

    @property
    def label(self) -> str:
        """The kind as the table shows it: ``loose by x12 at this scale`` for a loose row."""
        slack = self.details.get("power_slack", self.slack)
        if self.kind == LOOSE and slack is not None:
            return f"loose by x{_g(slack)} at this scale"
        return self.kind

    @property
    def outcome(self) -> str:
        """``holds in 5/5``, ``mixed: holds 3/5, violated 2/5`` (a single run: the verdict)."""
        n = sum(self.tally.values())
        if not n or self.verdict == NOT_CHECKED:
            return self.verdict
        parts = ", ".join(f"{v} {k}/{n}" for v, k in sorted(self.tally.items(), key=lambda kv: -kv[1]))
        return f"{self.verdict} in {n}/{n}" if len(self.tally) == 1 else f"mixed: {parts}"


def check_kind(c: "Claim") -> None:
    """A finding must catch a mistake: refuse one whose measured catches are empty (label it loose or vacuous)."""
    if c.kind == FINDING and c.caught is not None and not c.caught:
        raise ValueError(f"{c.paper} / {c.id}: a finding must catch at least one of its declared mistakes "
                         f"({', '.join(c.mistakes) or 'none declared'}); label it loose or vacuous (theory/power.py)")


def identity(err: float, tol: float = 1e-10) -> str:
    """An identity that must hold to machine precision."""
    return HOLDS if err <= tol else VIOLATED if math.isfinite(err) else INCONCLUSIVE


def bound(measured: float, limit: float, in_regime: bool = True, rtol: float = 1e-9) -> str:
    """measured <= limit, judged only where the theorem's assumptions hold. Two-sided: a measured value above
    the bound is "violated", and so is a measured side that diverged (inf / nan) under a finite bound."""
    if not math.isfinite(limit):
        return INCONCLUSIVE
    if not math.isfinite(measured):
        return OUTSIDE if not in_regime else VIOLATED
    ok = measured <= limit * (1 + rtol) + rtol
    if not in_regime:
        return OUTSIDE
    return HOLDS if ok else VIOLATED


def slack(measured: float, limit: float) -> float | None:
    """bound / measured (inf when the measured side is <= 0; None when not finite)."""
    if not (math.isfinite(measured) and math.isfinite(limit)):
        return None
    return limit / measured if measured > 0 else math.inf


def slope(measured: float, expected: float, tol: float, in_regime: bool = True) -> str:
    """A log-log rate: |measured - expected| <= tol."""
    if not math.isfinite(measured):
        return INCONCLUSIVE
    if not in_regime:
        return OUTSIDE
    return HOLDS if abs(measured - expected) <= tol else VIOLATED


# ---------------------------------------------------------------------------------------------------
# tolerances from noise: every ordering / monotonicity check reads its tolerance here
# ---------------------------------------------------------------------------------------------------
Z_NOISE = 3.0            # a difference counts only beyond 3 standard errors
ROUNDOFF = 1e-9          # relative float64 round-off allowance of a deterministic comparison


def noise_tol(se: float = 0.0, scale: float = 0.0) -> float:
    """The tolerance of an ordering: Z_NOISE standard errors of the compared difference (``se``: from seeds or
    replicates; 0 for a deterministic run) plus round-off relative to the compared values' ``scale``."""
    return Z_NOISE * se + ROUNDOFF * abs(scale)


def se_of(samples) -> float:
    """Standard error of the mean of independent replicates (0 for fewer than two)."""
    import numpy as np
    x = np.asarray(samples, float).ravel()
    return float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else 0.0


def compare(diff: float, tol: float) -> str:
    """An ordering ``diff > 0`` judged against its noise tolerance: HOLDS above ``tol``, VIOLATED below
    ``-tol``, else INCONCLUSIVE."""
    return judge(diff, tol, -tol)


def trend(values, step_tols, total_tol: float) -> str:
    """``values`` decreasing, judged with noise tolerances: HOLDS when the first-to-last fall exceeds ``total_tol``
    and no step rises beyond its ``step_tols``; VIOLATED when the first-to-last rise exceeds ``total_tol`` and no
    step falls beyond its tolerance; else INCONCLUSIVE."""
    import numpy as np
    v = np.asarray(values, float)
    steps = np.diff(v)
    tols = np.broadcast_to(np.asarray(step_tols, float), steps.shape)
    if v[0] - v[-1] > total_tol and not (steps > tols).any():
        return HOLDS
    if v[-1] - v[0] > total_tol and not (steps < -tols).any():
        return VIOLATED
    return INCONCLUSIVE


def judge(x: float, good: float, bad: float) -> str:
    """HOLDS above ``good``, VIOLATED below ``bad``, else INCONCLUSIVE (negate x if smaller is better)."""
    return HOLDS if x > good else VIOLATED if x < bad else INCONCLUSIVE


def loglog_slope(x, y) -> float:
    """Least-squares slope of log y against log x."""
    return loglog_fit(x, y)[0]


def loglog_fit(x, y, level: float = 0.95) -> tuple[float, float, float]:
    """Least-squares slope of log y on log x and its ``level`` confidence interval. ``y`` [len(x)]: Student t
    on the residuals (two points: no interval); ``y`` [len(x), R] (R independent replicates): the slope of
    the replicate mean, with the Student-t interval of the R per-replicate slopes (Monte-Carlo error)."""
    import numpy as np
    from scipy import stats
    x, y = np.log(np.asarray(x, float)), np.asarray(y, float)
    if y.ndim == 2:
        k = float(np.polyfit(x, np.log(y.mean(1)), 1)[0])
        ks = np.polyfit(x, np.log(y), 1)[0]                       # one slope per replicate
        h = float(stats.t.ppf(0.5 + level / 2, len(ks) - 1)) * float(ks.std(ddof=1)) / math.sqrt(len(ks))
        return k, k - h, k + h
    y = np.log(y)
    k, c = np.polyfit(x, y, 1)
    n = len(x)
    if n < 3:
        return float(k), float(k), float(k)
    s2 = float(((y - (k * x + c)) ** 2).sum()) / (n - 2)
    se = math.sqrt(s2 / float(((x - x.mean()) ** 2).sum()))
    h = float(stats.t.ppf(0.5 + level / 2, n - 2)) * se
    return float(k), float(k - h), float(k + h)


def rate(fit: tuple, expected: float, tol: float, in_regime: bool = True) -> str:
    """A fitted exponent (k, lo, hi) agrees with ``expected`` when [lo - tol, hi + tol] contains it."""
    k, lo, hi = fit
    if not math.isfinite(k):
        return INCONCLUSIVE
    if not in_regime:
        return OUTSIDE
    return HOLDS if lo - tol <= expected <= hi + tol else VIOLATED


# ---------------------------------------------------------------------------------------------------
# several seeds -> one row per claim
# ---------------------------------------------------------------------------------------------------
def _span(xs: list) -> list | None:
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return [min(xs), max(xs)] if xs else None


def fold(rows: list[Claim]) -> Claim:
    """One claim measured on several seeds (rows[0] is the first seed) -> one row. The verdict is the
    common verdict, or ``mixed`` when the seeds disagree; value is the first seed's, with the span over
    seeds in ``spread``; slack is the worst (smallest) over seeds; measured is the first seed's text."""
    first = rows[0]
    tally: dict = {}
    for r in rows:
        for v, k in (r.tally or {r.verdict: 1}).items():
            tally[v] = tally.get(v, 0) + k
    seeds = [s for r in rows for s in (r.seeds or [r.details.get("seed")])]
    slacks = [r.slack for r in rows if r.slack is not None]
    spread = {"value": _span([r.value for r in rows]), "slack": _span(slacks)}
    regimes = {r.regime for r in rows}
    return Claim(first.paper, first.id, first.claim, first.where, first.expected, first.measured,
                 next(iter(tally)) if len(tally) == 1 else MIXED, first.value,
                 {**first.details, "per_seed": [{"seed": s, "verdict": r.verdict, "value": r.value,
                                                 "slack": r.slack, "measured": r.measured}
                                                for s, r in zip(seeds, rows)]},
                 first.figure or next((r.figure for r in rows if r.figure), None), first.kind,
                 first.regime if len(regimes) == 1 else "; ".join(sorted(regimes)),
                 min(slacks) if slacks else None, seeds, tally, spread, first.mistakes, first.caught, first.power)


def each_seed(check):
    """A step of ``run_steps`` from a per-seed ``check(seed, out_dir) -> list[Claim]`` (figures: first seed)."""
    return lambda seeds, out_dir: [check(s, out_dir if i == 0 else None) for i, s in enumerate(seeds)]


def run_steps(steps, seeds: list[int], out_dir=None) -> list[list[Claim]]:
    """A paper's checks in order, each ``step(seeds, out_dir) -> one claim list per seed`` (a check that stacks
    the seeds in one simulation, or ``each_seed``): one claim list per seed, rows in the order of the steps."""
    per_seed: list[list[Claim]] = [[] for _ in seeds]
    for step in steps:
        for rows, new in zip(per_seed, step(list(seeds), out_dir), strict=True):
            rows += new
    return per_seed


def over_seeds(run, seeds: list[int], **kw) -> list[Claim]:
    """``run(seed=s, out_dir=...)`` for every seed (figures from the first seed only), folded by claim id. When
    ``run`` is a paper module's ``run`` and that module has ``run_seeds(seeds, quick=, out_dir=)`` (one claim
    list per seed, as ``run`` gives each), that is called once instead: it stacks seeds where it can."""
    import sys
    out_dir = kw.pop("out_dir", None)
    mod = sys.modules.get(getattr(run, "__module__", ""))
    if getattr(mod, "run", None) is run and hasattr(mod, "run_seeds"):
        per_seed = mod.run_seeds(list(seeds), out_dir=out_dir, **kw)
    else:
        per_seed = [run(seed=s, out_dir=out_dir if i == 0 else None, **kw) for i, s in enumerate(seeds)]
    for s, claims in zip(seeds, per_seed, strict=True):
        for c in claims:
            c.seeds = c.seeds or [s]
    order, rows = [], {}
    for claims in per_seed:
        for c in claims:
            key = (c.paper, c.id)
            if key not in rows:
                order.append(key)
                rows[key] = []
            rows[key].append(c)
    return [fold(rows[k]) for k in order]


# ---------------------------------------------------------------------------------------------------
# the table
# ---------------------------------------------------------------------------------------------------
COLUMNS = ("paper", "claim", "where", "kind", "expected", "measured", "regime", "slack", "seeds", "verdict",
           "mistakes caught")


def _g(x: float | None) -> str:
    return "" if x is None else "inf" if x == math.inf else f"{x:.3g}"


def _slack_cell(c: Claim) -> str:
    if c.slack is None:
        return ""
    lo, hi = (c.spread or {}).get("slack") or (c.slack, c.slack)
    return _g(c.slack) if lo == hi else f"{_g(lo)} (up to {_g(hi)})"


def _seeds_cell(c: Claim) -> str:
    if c.verdict == NOT_CHECKED:
        return ""
    n = sum(c.tally.values()) if c.tally else 1
    v = (c.spread or {}).get("value")
    span = f"; value {_g(v[0])}..{_g(v[1])}" if v and n > 1 and v[0] != v[1] else ""
    return f"{n}{span}"


def cells(c: Claim) -> list[str]:
    return [c.paper, c.claim, c.where, c.label, c.expected, c.measured, c.regime or "no condition stated",
            _slack_cell(c), _seeds_cell(c), f"**{c.outcome}**", _caught_cell(c)]


def _caught_cell(c: Claim) -> str:
    if c.caught is None:
        return "not measured" if c.mistakes else ""
    return ", ".join(c.caught) if c.caught else f"**none** of {len(c.mistakes)}"


def to_markdown(claims: list[Claim]) -> str:
    rows = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for c in claims:
        rows.append("| " + " | ".join(s.replace("|", "\\|").replace("\n", " ") for s in cells(c)) + " |")
    return "\n".join(rows) + "\n"


def counts(claims: list[Claim]) -> str:
    """``40 holds, 3 violated, ...`` over findings, then the sanity checks and observations apart."""
    out = []
    for kind in KINDS:
        sub = [c for c in claims if c.kind == kind and c.verdict != NOT_CHECKED]
        if sub:
            per = ", ".join(f"{n} {v}" for v in VERDICTS if (n := sum(c.verdict == v for c in sub)))
            out.append(f"{len(sub)} {'rows ' + kind if kind in (LOOSE, VACUOUS) else kind + 's'}: {per}")
    if measured := [c for c in claims if c.caught is not None]:
        n = sum(len(c.mistakes) for c in measured)
        out.append(f"mistakes caught {sum(len(c.caught) for c in measured)}/{n} over {len(measured)} rows")
    if n := sum(c.verdict == NOT_CHECKED for c in claims):
        out.append(f"{n} claims not checked (reason in the row)")
    return "; ".join(out)


LEGEND = """Verdicts: **holds** / **violated** in n/n seeds (each seed a fresh toy instance and fresh noise);
**mixed** when seeds disagree (the split is given); **outside the proven regime** when the toy breaks an
assumption of the theorem (named in the regime column), so the number is reported but not judged;
**inconclusive** when the effect is within the noise; **not checked** with the reason. Kinds: a *finding* is a
check that catches at least one plausible implementation mistake (the power table below; measured on the first
seed at quick sizes); a row that catches none of its declared mistakes is *loose by xN at this scale* (a bound
N times above the measured value) or *vacuous at this scale*, counted apart; a *sanity check* is true by
construction and checks our code; an *observation* is a comparison the paper does not state as a theorem.
Slack = bound / measured (worst over seeds; 1 is tight). A mistake counts as caught only when the correct
algorithm's row is not violated on the same design and the broken one's is, on a finite (not diverged) run;
rescaling the row's own bound is never a mistake."""


def _finite(x):
    """JSON has no inf / nan: write them as strings."""
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return x


def read_report(path: str | Path) -> list[Claim]:
    """The claims of a report.json written by ``write_report`` (e.g. to merge per-paper runs)."""
    import dataclasses
    names = {f.name for f in dataclasses.fields(Claim)}
    back = lambda v: float(v) if v in ("inf", "-inf", "nan") else v          # noqa: E731
    rows = json.loads(Path(path).read_text())
    return [Claim(**{k: back(v) if k in ("slack", "value") else v for k, v in r.items() if k in names})
            for r in rows]


def power_table(claims: list[Claim], texts: dict | None = None) -> str:
    """One line per row with declared mistakes: each mistake and its outcome; then what each mistake is."""
    rows = [c for c in claims if c.mistakes]
    if not rows:
        return ""
    md = ["| paper | row | kind | caught | not caught (why) |", "|---|---|---|---|---|"]
    for c in rows:
        if not c.power:
            md.append(f"| {c.paper} | {c.id} | {c.label} | not measured | {', '.join(c.mistakes)} |")
            continue
        miss = ", ".join(f"{n} ({o})" for n, o in c.power.items() if o != "caught")
        md.append(f"| {c.paper} | {c.id} | {c.label} | {', '.join(c.caught or []) or '**none**'} | {miss} |")
    used = sorted({n for c in rows for n in c.mistakes})
    if texts:
        md += ["", "Mistakes:", ""] + [f"- `{n}`: {texts[n]}" for n in used if n in texts]
    return "\n".join(md) + "\n"


def tighter_table(claims: list[Claim]) -> str:
    """One line per loose row searched for a tighter instance (theory/power.py ``tighter``): its slack at the
    committed design, the smallest found, in which regime, and what the row's mistakes do there."""
    rows = [c for c in claims if "tighter" in c.details]
    if not rows:
        return ""
    fmt = lambda x, v="violated": f"{v} (no slack)" if x is None else f"x{x:.3g}"         # noqa: E731
    md = ["| paper | row | slack (the row, worst seed; its power design) | smallest slack found | its regime | "
          "regimes tried | mistakes caught there |", "|---|---|---|---|---|---|---|"]
    for c in rows:
        t = c.details["tighter"]
        tried = "; ".join(f"{r}: {fmt(s, v)}" for r, s, v in t["tried"])
        caught = [n for n, o in t["power"].items() if o == "caught"]
        there = ", ".join(caught) or ("none of " + ", ".join(t["power"]) if t["power"] else "not run")
        best = "none (every regime violated or outside)" if t["slack"] is None else fmt(t["slack"])
        own = fmt(c.slack) + (f"; {fmt(c.details['power_slack'])}" if "power_slack" in c.details else "")
        md.append(f"| {c.paper} | {c.id} | {own} | {best} | {t['regime'] or '-'} | {tried} | {there} |")
    broken = [f"{c.paper} {c.id} ({'; '.join(r for r, _, v in c.details['tighter']['tried'] if v == VIOLATED)})"
              for c in rows if any(v == VIOLATED for *_, v in c.details["tighter"]["tried"])]
    if broken:
        md += ["", "Counterexamples: the correct algorithm breaks the bound inside the theorem's conditions in "
               + ", ".join(broken) + "."]
    return "\n".join(md) + "\n"


def write_report(claims: list[Claim], out_dir: str | Path, title: str = "Theory checks",
                 mistakes: dict | None = None) -> Path:
    """report.md (counts, legend, the claim table, the power table, figures) and report.json; ``mistakes``:
    {name: text} of the mistakes the rows declare."""
    for c in claims:
        check_kind(c)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md = [f"# {title}", "", counts(claims), "", LEGEND, "", to_markdown(claims)]
    if table := power_table(claims, mistakes):
        md += ["", "## Power: the mistakes each row catches", "", table]
    if table := tighter_table(claims):
        md += ["", "## Tighter instances: the loose bounds in the regimes their theorems allow", "",
               "Each row is run, on the first seed, in other instances its theorem's conditions allow; the "
               "smallest slack is reported with its regime, and the row's declared mistakes are run there.",
               "", table]
    figs = [c for c in claims if c.figure]
    if figs:
        md += ["", "## Figures", ""] + [f"- {c.paper} / {c.id}: ![{c.id}]({c.figure})" for c in figs]
    (out / "report.md").write_text("\n".join(md) + "\n")
    rows = [{**asdict(c), "outcome": c.outcome, "label": c.label} for c in claims]
    (out / "report.json").write_text(json.dumps(_finite(rows), indent=1, default=float))
    return out / "report.md"
