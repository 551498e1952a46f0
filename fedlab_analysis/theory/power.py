"""Power of the claim table: which plausible mistakes each finding catches (theory/mistakes.py).

Every paper module keeps
- ``DESIGNS = {name: run(seed, **switch) -> list[Claim]}``: a check at quick sizes (restricted, where a row is
  violated as a whole, to the part of its design where the correct algorithm does not come out "violated");
- ``POWER = {row_id: (design, (mistake, ...))}``: the mistakes the row is expected to catch, by name, from
  ``mistakes.LIBRARY`` or the module's own ``MISTAKES`` (switches of its checks);
- ``TIGHTER = {row_id: ((regime, design, kwargs), ...)}`` for a loose bound: other instances the theorem's
  conditions allow (a larger step, fewer participants, a longer horizon...), each a design called with
  ``kwargs``; ``regime`` says in words what changed and why the theorem still applies.

``measure`` runs each design once unperturbed (the control) and once per mistake. Per row and mistake the
outcome is
- ``caught``: the control is not violated and the row with the mistake comes out "violated";
- ``diverged``: it comes out "violated" because the run blew up (a non-finite value, a value BLOWUP times the
  control's, or the run failed): any monitor sees that;
- ``inherited``: the control is already violated, so the mistake shows nothing;
- ``not caught``: otherwise.
Only ``caught`` is power. ``label`` then keeps a row a finding only if it catches one of its mistakes; a row
that catches none is *loose by xN at this scale* (it has a slack N > 1) or *vacuous at this scale*, and is
counted apart (claims.py refuses a finding whose measured catches are empty).
"""
from __future__ import annotations

import math

from . import mistakes as M
from .claims import FINDING, LOOSE, MIXED, NOT_CHECKED, OUTSIDE, VACUOUS, VIOLATED, Claim

CAUGHT, DIVERGED, INHERITED, MISSED = "caught", "diverged", "inherited", "not caught"


def declared(mod) -> dict:
    """{row_id: (design, mistake names)} of a paper module (empty when it declares none)."""
    return getattr(mod, "POWER", {})


def mistake_table(mod) -> dict:
    """Every mistake a paper's rows may declare: the library and the paper's own."""
    return {**M.LIBRARY, **getattr(mod, "MISTAKES", {})}


BLOWUP = 1e6             # a perturbed value this many times the control's (or non-finite) is a diverged run


def _diverged(control: Claim, c: Claim) -> bool:
    if c.value is None:
        return any(tok.strip(",;()") in ("nan", "inf") for tok in c.measured.split())
    ref = abs(control.value) if control.value is not None and math.isfinite(control.value) else 0.0
    return not math.isfinite(c.value) or abs(c.value) > BLOWUP * max(ref, 1.0)


def outcome(control: Claim, perturbed: Claim) -> str:
    if control.verdict in (VIOLATED, MIXED):
        return INHERITED
    if perturbed.verdict != VIOLATED:
        return MISSED
    return DIVERGED if _diverged(control, perturbed) else CAUGHT


def measure(mod, seed: int = 0, rows=None, cache: dict | None = None, control_slack: dict | None = None) -> dict:
    """{row_id: {mistake: outcome}} for the declared rows (``rows``: only those), each design run once per
    mistake it needs, on one seed (``cache``: shared between calls; ``control_slack``, a dict, receives each
    row's slack on its power design without a mistake)."""
    table, cache, slacks = mistake_table(mod), {} if cache is None else cache, {}

    def rows_of(design: str, name: str | None) -> dict | None:
        """The design's rows with the mistake on; None when the broken run failed (diverged, a solver gave up)."""
        if (design, name) not in cache:
            m = None if name is None else M.resolve([name], table)[0]
            try:
                cache[design, name] = {c.id: c for c in M.run(mod.DESIGNS[design], m, seed)}
            except (RuntimeError, ValueError, FloatingPointError):
                if m is None:
                    raise                                  # the control must run
                cache[design, name] = None
        return cache[design, name]

    out = {}
    for rid, (design, names) in declared(mod).items():
        if rows is not None and rid not in rows:
            continue
        ctl = rows_of(design, None)
        if rid not in ctl:
            raise KeyError(f"{mod.__name__}: design {design!r} returns no row {rid!r}")
        out[rid] = {n: DIVERGED if (r := rows_of(design, n)) is None else outcome(ctl[rid], r[rid]) for n in names}
        slacks[rid] = ctl[rid].slack
    return out if control_slack is None else (control_slack.update(slacks) or out)


def loose_or_vacuous(slack: float | None) -> str:
    return LOOSE if slack is not None and math.isfinite(slack) and slack > 1 else VACUOUS


def label(c: Claim, result: dict | None, control_slack: float | None = None) -> Claim:
    """Set a finding's mistakes, catches and kind from its measured power (``result``: {mistake: outcome};
    None: nothing declared). A row that catches nothing is loose by the slack of its power design (where the
    correct algorithm is not violated: ``control_slack``; else the row's own) or vacuous. Rows of other kinds,
    and rows not checked, are left as they are."""
    if c.verdict == NOT_CHECKED or c.kind not in (FINDING, LOOSE, VACUOUS):
        return c
    c.mistakes = list(result or {})
    c.power = dict(result or {})
    caught = [n for n, o in (result or {}).items() if o == CAUGHT]
    slack = c.slack if control_slack is None else control_slack
    if not caught and slack is not None:
        c.details["power_slack"] = slack                   # the slack Claim.label reports for a loose row
    c.kind = FINDING if caught else loose_or_vacuous(slack)
    c.caught = caught
    return c


def tighter(mod, seed: int = 0, rows=None) -> dict:
    """{row_id: {"tried": [(regime, slack, verdict)], "regime", "slack", "power"}} for the rows of
    ``mod.TIGHTER``: each regime run once without a mistake (a violated run, or one outside the theorem's
    conditions, has no slack to report: None), the one of smallest slack then run with the row's declared
    mistakes, so the report says whether the tightest instance catches any."""
    table, out = mistake_table(mod), {}
    for rid, regimes in getattr(mod, "TIGHTER", {}).items():
        if rows is not None and rid not in rows:
            continue
        tried, ctl = [], {}
        for regime, design, kw in regimes:
            run = lambda s, _d=mod.DESIGNS[design], _kw=kw, **sw: _d(s, **_kw, **sw)      # noqa: E731
            c = {r.id: r for r in M.run(run, None, seed)}[rid]
            ok = (c.verdict not in (VIOLATED, MIXED, OUTSIDE) and not c.regime.startswith("outside")
                  and c.slack is not None and math.isfinite(c.slack))
            tried.append((regime, c.slack if ok else None, c.verdict))
            if ok and (not ctl or c.slack < ctl["slack"]):
                ctl = {"regime": regime, "slack": c.slack, "run": run, "claim": c}
        res = {}
        for name in (declared(mod).get(rid, (None, ()))[1] if ctl else ()):
            try:
                broken = {r.id: r for r in M.run(ctl["run"], M.resolve([name], table)[0], seed)}[rid]
                res[name] = outcome(ctl["claim"], broken)
            except (RuntimeError, ValueError, FloatingPointError):
                res[name] = DIVERGED
        out[rid] = {"tried": tried, "regime": ctl.get("regime"), "slack": ctl.get("slack"), "power": res}
    return out


def annotate(claims: list[Claim], mod, seed: int = 0, run: bool = True) -> list[Claim]:
    """Declared mistakes on every row; with ``run``, measure them and label each finding by what it catches."""
    table = declared(mod)
    ids = {c.id for c in claims}
    slacks: dict = {}
    result = measure(mod, seed, rows=ids, control_slack=slacks) if run else {}
    tight = tighter(mod, seed, rows=ids) if run else {}
    for c in claims:
        if c.id in table:
            c.mistakes = list(table[c.id][1])
        if run:
            label(c, result.get(c.id), slacks.get(c.id))
        if c.id in tight:
            c.details["tighter"] = tight[c.id]
    return claims
