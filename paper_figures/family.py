"""The family-wise statement: every committed verdict re-derived (``verdict.audit``) and judged in its paper's family
with Holm's correction (the rule is written once, in paper_figures/verdict.py's docstring).

    python -m paper_figures.family [--root DIR] [--out FILE]      # writes paper_figures/out/verdicts.md

It sits above the rule, the tier list and the settings tables it reads, so nothing below imports it.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from paper_figures.tier import ORDER
from paper_figures.tiers import REAL
from paper_figures.verdict import (ALPHA, CHANCE_MARGIN, COLLAPSED, CURVES, DECISIVE, NOISE_MULTIPLE, OUTCOMES,  # noqa: F401
                                   adjusted, audit, holm, is_accuracy, same_test)


def _label(r: dict) -> str:
    return f"{r['script']}: {r['row']}"


def _duplicate(a: dict, b: dict) -> bool:
    """Rows ``a`` and ``b`` (audited) hold the same per-seed effects, up to sign, under the same test."""
    from paper_figures.claims import CLAIMS
    if a["effect"].shape != b["effect"].shape or (a["script"], a["claim"]) == (b["script"], b["claim"]):
        return False
    sign = next((s for s in (1, -1) if np.allclose(a["effect"], s * b["effect"], rtol=0, atol=1e-12)), 0)
    return bool(sign) and same_test(CLAIMS[a["claim"]], CLAIMS[b["claim"]], sign, (a["margin"], b["margin"]))


def _current(rows: list, path: Path, tier: str) -> list:
    """``rows`` of a real tier's trained script, each marked ``current``: whether its output was trained under the
    settings the code runs now (``common.trained_under``); None elsewhere (quick, toys, controls)."""
    import json

    from paper_figures.common import trained_under
    now = trained_under(path.parent.name, tier, json.loads(path.read_text()))[0] \
        if tier in REAL and path.parent.name in ORDER else None
    return [{**r, "current": now} for r in rows]


def family(root=None) -> dict:
    """{tier: rows} over the committed data.json files under ``root`` (paper_figures/out): the quick tier's
    ``<name>/``, the mnist tier's ``mnist/<name>/`` and, in every tier, the scripts that train no tier runs
    (tier.TOY), and in each real tier the controls that pair two scripts' committed arms (``settings.control_data``,
    script "controls"). Each row gains ``same_as`` (the rows with the same effect and test), ``p_holm`` (Holm within its
    paper's family, one effect counted once: ``counted`` marks its first row) and ``adjusted``."""
    from paper_figures.claims import TOY
    root = Path(root) if root is not None else Path(__file__).parent / "out"
    tiers = {"quick": sorted(p for p in root.glob("*/data.json") if p.parent.name not in REAL),
             "mnist": sorted(root.glob("mnist/*/data.json")) + [root / t / "data.json" for t in TOY]}
    for t in REAL[1:]:                              # a further real tier, once it has committed results
        if any(root.glob(f"{t}/*/data.json")):
            tiers[t] = sorted(root.glob(f"{t}/*/data.json")) + [root / x / "data.json" for x in TOY]
    out = {}
    for tier, paths in tiers.items():
        rows = [r for p in paths if p.is_file() for r in _current(audit(p, tier, p.parent.name), p, tier)]
        if tier in REAL and rows:
            from paper_figures.settings import OUT as SETTINGS, control_data
            rows += audit(SETTINGS / "controls.md", tier, "controls", control_data(root, tier))
        tested = [r for r in rows if r["p"] is not None]
        groups = []                                 # one effect each: its rows, the first one heading it
        for i, a in enumerate(tested):
            match = [b for b in tested[:i] if _duplicate(a, b)]
            a["same_as"] += [_label(b) for b in match if b["paper"] != a["paper"]]   # named, counted in each paper
            for b in match:
                if b["paper"] != a["paper"]:
                    b["same_as"].append(_label(a))
            # the first earlier effect it matches that holds no row of its own (script, claim): the same claim's
            # rows in one script are its grid points, distinct tests even where their numbers coincide
            g = next((g for g in groups if any(b is m and b["paper"] == a["paper"] for b in match for m in g)
                      and all((m["script"], m["claim"]) != (a["script"], a["claim"]) for m in g)), None)
            if g is None:
                groups.append([a])
            else:
                for m in g:
                    m["same_as"].append(_label(a))
                    a["same_as"].append(_label(m))
                g.append(a)
        for paper in sorted({r["paper"] for r in tested}):
            heads = [g for g in groups if g[0]["paper"] == paper]
            for g, ph in zip(heads, holm([g[0]["p"] for g in heads])):
                for r in g:
                    r["p_holm"], r["counted"] = ph, r is g[0]
        for r in rows:
            r["adjusted"] = adjusted(r["raw"], r.get("p_holm"))
        out[tier] = rows
    return out


def _counts(vs) -> str:
    c = Counter(vs)
    return ", ".join(f"{c[v]} {v}" for v in OUTCOMES if c[v]) or "none"


def render(fam: dict) -> str:
    """verdicts.md: the family-wise counts per tier and paper, the rows whose stored verdict the current rule
    changes, and per paper each judged comparison with its raw and adjusted verdict, p, Holm p, relative size."""
    from paper_figures.claims import CLAIMS, PAPERS
    out = ["# Verdicts under one family-wise statement per paper", "",
           "Generated by `python -m paper_figures.family` from the committed `paper_figures/out/**/data.json` files "
           "(nothing is trained); the rule is stated once in `paper_figures/verdict.py`.", "",
           "- *raw*: each comparison's 95% interval, the verdict in its script's table.",
           f"- *adjusted*: Holm's step-down correction within each paper's family in each tier, family-wise error "
           f"rate {ALPHA:.0%}. A decisive raw verdict whose Holm p is not below {ALPHA} reads *inconclusive*.",
           "- *p*: the smallest alpha at which the (1 - alpha) interval decides the row; the raw verdict is decisive "
           f"exactly when p < {ALPHA}.",
           "- One row per effect: rows with the same per-seed effects and the same test name each other and count "
           "once in their paper's family.",
           "- *relative*: the relative reduction of test error, mean(acc_a - acc_b) / mean(1 - acc_b), beside the "
           "points, for test-accuracy effects whose arms' per-seed accuracies the data.json stores.",
           f"- A null claim's *margin*: *paper* where its words give one, else *ours*: {NOISE_MULTIPLE:g} seed "
           "standard deviations of the baseline arm (verdict.py).",
           f"- *{COLLAPSED}*: a finite run ended below chance + {CHANCE_MARGIN:g} of the way to 100% test accuracy; "
           "an outcome, outside the family like exact checks and rows not measured, not converged or diverged.", ""]
    out += ["## Family-wise counts", "",
            "| tier | paper | judged rows | distinct effects | raw verdicts | adjusted (Holm) | changed by Holm |",
            "|---|---|---|---|---|---|---|"]
    for tier, rows in fam.items():
        for paper in PAPERS:
            judged = [r for r in rows if r["paper"] == paper and r["p"] is not None]
            if judged:
                distinct = sum(r["counted"] for r in judged)
                changed = sum(r["raw"] != r["adjusted"] for r in judged)
                out.append(f"| {tier} | {paper} | {len(judged)} | {distinct} | {_counts(r['raw'] for r in judged)} | "
                           f"{_counts(r['adjusted'] for r in judged)} | {changed} |")
    for tier, rows in fam.items():
        if tier in REAL:
            have = {r["script"] for r in rows} & set(ORDER)
            out.append(f"\n{tier}: {len(have)} of {len(ORDER)} trained scripts committed" + (
                "." if len(have) == len(ORDER) else " (" + ", ".join(s for s in ORDER if s in have) + "); its families "
                "hold only these scripts' rows (and the toys'), so each grows, and its Holm p-values with it, as the "
                "rest are committed."))
            judged = [r for r in rows if r["p"] is not None and r.get("current") is not None]
            old = sorted({r["script"] for r in judged if not r["current"]})
            out.append(f"{sum(not r['current'] for r in judged)} of its {len(judged)} judged rows of trained scripts "
                       "come from outputs trained under earlier settings (their settings tables say which): "
                       f"{', '.join(old)}." if old else f"Each of its {len(judged)} judged rows of trained scripts "
                       "comes from an output trained under the current settings.")
            unjudged = sorted({r["script"] for r in rows if r.get("current") is False} - set(old))
            if unjudged:
                out.append(f"Trained under earlier settings, with no judged row: {', '.join(unjudged)}.")
    out += ["", "## What each verdict is re-derived from", "",
            f"Every row is recomputed from the committed files by `verdict.audit` (tests/test_verdict_family.py). "
            f"*curves*: the row names its runs; each run's flag (the convergence gate, collapse, divergence) is "
            f"recomputed from its script's `{CURVES}` and the verdict from those flags. *absent*: written before "
            f"curves were committed; the verdict is recomputed from its per-seed effects and the run counts its note "
            f"states. *arms*: a control paired from two scripts' committed accuracies. *not trained*: a toy's row.", "",
            "| tier | script | rows re-derived | from curves | curves absent | other |", "|---|---|---|---|---|---|"]
    for tier, rows in fam.items():
        for s in sorted({r["script"] for r in rows}):
            rs = [r for r in rows if r["script"] == s and r["curves"]]
            n = lambda k: sum(r["curves"].startswith(k) for r in rs)          # noqa: E731
            out.append(f"| {tier} | {s} | {len(rs)} | {n('checked')} | {n('absent')} | "
                       f"{len(rs) - n('checked') - n('absent')} |")
    out += ["", "## Stored verdicts the current rule changes", ""]
    moved = [(t, r) for t, rows in fam.items() for r in rows if r["raw"] != r["stored"]]
    out += [f"- {t}, {_label(r)}: stored *{r['stored']}*, now *{r['raw']}*" + (f" ({r['why']})" if r.get("why")
                                                                            else "") for t, r in moved] or ["None."]
    cell = lambda x: str(x).replace("|", "\\|")                                      # noqa: E731
    for tier, rows in fam.items():
        for paper in PAPERS:
            judged = [r for r in rows if r["paper"] == paper and r["p"] is not None]
            if not judged:
                continue
            out += ["", f"## {tier}: {paper} ({PAPERS[paper]})", "",
                    "| script | comparison | mean effect | relative | raw | p | Holm p | adjusted | same effect as |",
                    "|---|---|---|---|---|---|---|---|---|"]
            for r in judged:
                m = float(np.mean(r["effect"]))
                c = CLAIMS[r["claim"]]
                k = 100 if is_accuracy(c) else 1
                eff = f"{k * m:+.3g}" + (" points" if k == 100 else "") + (
                    f" (margin {k * r['margin']:.3g}, {c.margin_from})" if c.null and r["margin"] is not None else "")
                rel = "" if r["relative"] is None else f"{100 * r['relative']:+.3g}% of the error"
                adj = r["adjusted"] if r["adjusted"] == r["raw"] else f"**{r['adjusted']}**"
                out.append(f"| {r['script']} | {cell(r['row'])} | {eff} | {rel} | {r['raw']} | {r['p']:.3g} | "
                           f"{r['p_holm']:.3g} | {adj} | {cell('; '.join(r['same_as']))} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    from fedlab_analysis.cli import guard, out_file
    from fedlab_analysis.options import ArgParser
    from fedlab_analysis.rundir import write_text

    @guard("python -m paper_figures.family")
    def run(argv):
        p = ArgParser(prog="python -m paper_figures.family",
                      description="Re-derive every committed verdict and write the family-wise statement (Markdown)")
        here = Path(__file__).parent / "out"
        p.add_argument("--root", type=Path, default=here, help="the folder holding the committed results")
        p.add_argument("--out", default=str(here / "verdicts.md"), help="the Markdown file to write")
        args = p.parse_args(argv)
        dest = out_file(args.out, "--out")
        text = render(family(args.root))
        write_text(dest, text)
        print(f"wrote {dest}")
        return 0
    return run(argv)


if __name__ == "__main__":
    raise SystemExit(main())
