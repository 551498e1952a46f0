"""Verdicts of two tiers side by side: ``python -m paper_figures.compare_tiers [--tiers quick mnist] [--changed]``.

Reads the committed results (``common.out_dir(name, tier)/data.json``) of every script that has both, joins the
rows by script and comparison (every script states the same comparisons in every tier), and prints one Markdown
table: script, comparison, the verdict in each tier, and "changed" where they differ; then the counts. Trains and
computes nothing.

``controls:<paper>`` stands for a paper's controls (``settings.controls``: arms from two scripts' committed outputs),
in the current tiers only; a control whose arms ran under two protocols, or whose ledger records show other
settings beyond the methods (``settings.unequal``), reads "not compared".

A tier may name a git revision, ``TIER@REV``: its results as committed there. ``--tiers mnist@REV mnist`` lists
what a change of settings did to a tier's verdicts (a script not redrawn since REV shows no change).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

from fedlab_analysis.cli import guard
from paper_figures import common as C

CONTROLS = "controls:"                  # controls:<paper>, a paper's controls as one more script
NOT_COMPARED = "not compared"           # a control whose two arms ran under other protocols or settings


def key(row: str) -> str:
    """A comparison's label without what its tier measured inside it (the matched-fit rung, the best other arm), so
    the same comparison joins across tiers: "... at matched train loss (0.1)" -> "... at matched train loss"."""
    return re.sub(r"best other \([^)]*\)", "best other", re.sub(r" at matched train loss \([^)]*\)",
                                                                " at matched train loss", row))


def _git(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(C.OUT), *args], capture_output=True, text=True)


def at(name: str, tier: str) -> dict | None:
    """A script's committed result in ``tier``, or in ``TIER@REV`` as git revision REV holds it (None where there is
    none)."""
    tier, _, rev = tier.partition("@")
    if not rev:
        return C.committed(name, tier)
    d = C.committed_dir(name, tier)
    got = _git("show", f"{rev}:./{d.relative_to(C.OUT).as_posix()}/data.json")
    return json.loads(got.stdout) if got.returncode == 0 else None


def rows(name: str, tier: str) -> dict | None:
    """{comparison (``key``): verdict} of a script's committed result in ``tier`` (None where there is none)."""
    if name.startswith(CONTROLS):
        return _controls(name[len(CONTROLS):], tier)
    data = at(name, tier)
    return None if data is None else {key(t["row"]): t["verdict"] for t in data["table"]}


def _controls(paper: str, tier: str) -> dict | None:
    """{comparison: verdict} of ``paper``'s controls in ``tier`` (None where it has none, or at a revision)."""
    from paper_figures import settings as S
    if "@" in tier:
        return None
    got = {key(f"control: {r['row']}"): r["verdict"]["verdict"] if r["verdict"] else NOT_COMPARED
           for r in S.controls(tier=tier) if C.CLAIMS[r["claim"]].paper == paper}
    return got or None


def compare(names, a: str = "quick", b: str = "mnist") -> list[tuple[str, str, str, str]]:
    """(script, comparison, verdict in a, verdict in b) for every comparison of the scripts that have both."""
    out = []
    for name in names:
        ra, rb = rows(name, a), rows(name, b)
        if ra is None or rb is None:
            continue
        out += [(name, row, ra.get(row, "absent"), rb.get(row, "absent")) for row in dict.fromkeys([*ra, *rb])]
    return out


def table(pairs, a: str, b: str, changed_only: bool = False) -> str:
    lines = [f"| script | comparison | {a} | {b} | |", "|---|---|---|---|---|"]
    for name, row, va, vb in pairs:
        if changed_only and va == vb:
            continue
        lines.append(f"| {name} | {row.replace('|', '/')} | {va} | {vb} | {'changed' if va != vb else ''} |")
    n = sum(va != vb for _, _, va, vb in pairs)
    scripts = len({p[0] for p in pairs})
    return "\n".join(lines) + f"\n\n{n} of {len(pairs)} comparisons ({scripts} scripts) change verdict from {a} to {b}."


def tasks(names, tiers=C.REAL, fam=None) -> list[dict]:
    """Per comparison of the scripts ``names``, its verdict on each real task (tier) with committed results, and on
    how many of those it holds: [{"script", "row", "verdicts": {tier: verdict}, "raw", "relative", "holds", "of"}].
    The verdict is the Holm-adjusted one where the row is in its paper's family (``family.family``; ``fam``: its
    result, read once), else the raw one; "raw" keeps the raw verdicts (the family's, re-derived from the committed
    files), "stored" the data.json's (they differ where a rule changed since), "relative" the relative error
    reductions.
    It holds where it is reproduced. A tier whose results are absent, or where the comparison was not measured,
    is left out of "of" (not counted against the claim)."""
    from paper_figures.family import family
    fam = family() if fam is None else fam
    judged = {(t, r["script"], key(r["row"])): r for t, rs in fam.items() for r in rs if r.get("p") is not None}
    out = []
    for name in names:
        got = {t: r for t in tiers if (r := rows(name, t)) is not None}
        script = name.split(":")[0]                               # controls:<paper> -> the family's "controls"
        for row in dict.fromkeys(r for v in got.values() for r in v):
            stored = {t: got[t].get(row, "absent") for t in got}
            hit = {t: judged.get((t, script, row)) for t in got}
            raw = {t: hit[t].get("raw", stored[t]) if hit[t] else stored[t] for t in got}
            verdicts = {t: hit[t]["adjusted"] if hit[t] else raw[t] for t in got}
            relative = {t: hit[t].get("relative") if hit[t] else None for t in got}
            tested = [v for v in verdicts.values() if v not in ("absent", "not measured", NOT_COMPARED)]
            out.append({"script": script, "row": row, "verdicts": verdicts, "raw": raw, "stored": stored,
                        "relative": relative, "of": len(tested),
                        "holds": sum(v == "reproduced" for v in verdicts.values())})
    return out


def _cell(r: dict, t: str) -> str:
    v, raw, rel = r["verdicts"].get(t, "absent"), r["raw"].get(t, "absent"), r["relative"].get(t)
    stored = r["stored"].get(t, raw)
    return ((f"**{v}** (raw: {raw})" if v != raw else v) + ("" if rel is None else f", {100 * rel:+.3g}% of the error")
            + (f"; stored: {stored}, under an earlier rule" if stored != raw else ""))


def tasks_table(names, tiers=C.REAL, fam=None) -> str:
    """Markdown: each comparison's verdict per real task (Holm-adjusted in its paper's family, the raw one beside
    it where they differ; the relative reduction of test error), "holds on k of n", then the tiers not yet trained
    with the command that trains them."""
    got = tasks(names, tiers, fam)
    has = lambda n, t: (rows(n, t) if n.startswith(CONTROLS) else C.committed(n, t)) is not None   # noqa: E731
    trained = [t for t in tiers if any(has(n, t) for n in names)]
    head = ["| script | comparison | " + " | ".join(C.TIERS[t]["dataset"] for t in trained) + " | holds on |",
            "|---|---|" + "---|" * len(trained) + "---|"]
    body = [f"| {r['script']} | {r['row'].replace('|', '/')} | " + " | ".join(_cell(r, t) for t in trained)
            + f" | {r['holds']} of {r['of']} |" for r in got]
    missing = [t for t in tiers if t not in trained]
    note = "".join(f"\n\n*Not yet trained in the {t} tier ({C.TIERS[t]['dataset']}):* {', '.join(gap)} (their rows "
                   f"read absent there; `python -m paper_figures.tier --tier {t} --plan` says how long)."
                   for t in trained if (gap := [n for n in names if not has(n, t)]))
    note += "".join(f"\n\n*The {t} tier ({C.TIERS[t]['dataset']}) is not trained yet:* `make figures TIER={t}` "
                   f"trains it (resumable; `python -m paper_figures.tier --tier {t} --plan` says how long)."
                   for t in missing)
    return ("\n".join(head + body) if got else "*No real tier has committed results for these scripts yet.*") + note


@guard("paper_figures.compare_tiers")
def main(argv=None) -> int:
    import argparse

    from paper_figures.tier import ORDER, TOY
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tiers", nargs=2, default=["quick", "mnist"], metavar=("A", "B"),
                    help="two tiers, each TIER or TIER@REV (as committed at git revision REV)")
    ap.add_argument("--changed", action="store_true", help="only the comparisons whose verdict changed")
    args = ap.parse_args(argv)
    bad = [t for t in args.tiers if t.partition("@")[0] not in C.TIERS]
    if bad:
        print(f"error: --tiers: unknown {bad[0]!r}; choose from {', '.join(C.TIERS)} (or TIER@REV)", file=sys.stderr)
        return 2
    for t in args.tiers:
        rev = t.partition("@")[2]
        if "@" in t and _git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").returncode:
            print(f"error: --tiers: {t!r}: no git revision {rev!r} in {C.OUT}", file=sys.stderr)
            return 2
    a, b = args.tiers
    pairs = compare([*ORDER, *TOY], a, b)
    if not pairs:
        print(f"no script has committed results in both {a} and {b}")
        return 0
    print(table(pairs, a, b, args.changed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
