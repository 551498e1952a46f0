"""The claim table shared by every paper's check module.

A check measures something on a toy problem and turns the measurement into a verdict with
one of the helpers below; the verdict is never typed in. ``theory/__main__.py`` prints the
table and writes it as Markdown and JSON.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

HOLDS, VIOLATED, OUTSIDE, INCONCLUSIVE = "holds", "violated", "outside the proven regime", "inconclusive"
VERDICTS = (HOLDS, VIOLATED, OUTSIDE, INCONCLUSIVE)


@dataclass
class Claim:
    paper: str            # "fedsmoo", "fedlesam", "fedcm", "fedals", "fedinit"
    id: str               # short stable key, e.g. "T3-dual-mean"
    claim: str            # what the paper says, in one line
    where: str            # "Lemma 4.1", "Thm 4.3 / Eq. (12)", "notes/seed_002 section 6.2"
    expected: str         # what the paper (or the note's closed form) predicts
    measured: str         # what we measured, with numbers
    verdict: str          # one of VERDICTS
    value: float | None = None                        # the headline number (error, slope, ratio)
    details: dict = field(default_factory=dict)       # constants, regime conditions, raw series
    figure: str | None = None                         # file name of the figure, if any

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")


def identity(err: float, tol: float = 1e-10) -> str:
    """An identity that must hold to machine precision."""
    return HOLDS if err <= tol else VIOLATED if math.isfinite(err) else INCONCLUSIVE


def bound(measured: float, limit: float, in_regime: bool = True, rtol: float = 1e-9) -> str:
    """measured <= limit, judged only where the theorem's assumptions hold."""
    if not (math.isfinite(measured) and math.isfinite(limit)):
        return INCONCLUSIVE
    ok = measured <= limit * (1 + rtol) + rtol
    if not in_regime:
        return OUTSIDE
    return HOLDS if ok else VIOLATED


def slope(measured: float, expected: float, tol: float, in_regime: bool = True) -> str:
    """A log-log rate: |measured - expected| <= tol."""
    if not math.isfinite(measured):
        return INCONCLUSIVE
    if not in_regime:
        return OUTSIDE
    return HOLDS if abs(measured - expected) <= tol else VIOLATED


def loglog_slope(x, y) -> float:
    """Least-squares slope of log y against log x."""
    import numpy as np
    x, y = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    return float(np.polyfit(x, y, 1)[0])


def to_markdown(claims: list[Claim]) -> str:
    rows = ["| paper | claim | where | expected | measured | verdict |", "|---|---|---|---|---|---|"]
    for c in claims:
        cells = [c.paper, c.claim, c.where, c.expected, c.measured, f"**{c.verdict}**"]
        rows.append("| " + " | ".join(s.replace("|", "\\|").replace("\n", " ") for s in cells) + " |")
    return "\n".join(rows) + "\n"


def write_report(claims: list[Claim], out_dir: str | Path, title: str = "Theory checks") -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    counts = {v: sum(c.verdict == v for c in claims) for v in VERDICTS}
    md = [f"# {title}", "", ", ".join(f"{n} {v}" for v, n in counts.items()), "", to_markdown(claims)]
    figs = [c for c in claims if c.figure]
    if figs:
        md += ["", "## Figures", ""] + [f"- {c.paper} / {c.id}: ![{c.id}]({c.figure})" for c in figs]
    (out / "report.md").write_text("\n".join(md) + "\n")
    (out / "report.json").write_text(json.dumps([asdict(c) for c in claims], indent=1, default=float))
    return out / "report.md"
