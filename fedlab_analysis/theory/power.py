"""Power of the claim table: the perturbation each finding must catch, and whether it does.

Every paper module keeps ``PERTURBATIONS = {row_id: (text, run)}``: ``text`` says what is broken (an
algorithm: a sign flip, a wrong aggregation weight, a skipped correction; an assumption; or a shrunk
constant) and ``run(seed)`` re-runs that row's check, at quick sizes, with the perturbation switched on and
returns its claims. The perturbation is *caught* when the row comes out "violated" (for a rate: the
expected exponent rejected). ``tests/test_theory_power.py`` asserts it for every declared perturbation;
``theory/__main__.py`` writes the text and the result into the report. A finding with no perturbation it
can catch at feasible sizes is re-labelled *vacuous at this scale* by its check (``VACUOUS``); its declared
perturbation documents that: the test asserts it is NOT caught.
"""
from __future__ import annotations

from .claims import FINDING, VIOLATED, Claim


def declared(mod) -> dict:
    """{row_id: (text, run)} of a paper module (empty when it declares none)."""
    return getattr(mod, "PERTURBATIONS", {})


def perturbed_row(mod, row_id: str, seed: int = 0) -> Claim:
    """The row ``row_id`` of the perturbed run."""
    _, run = declared(mod)[row_id]
    rows = [c for c in run(seed) if c.id == row_id]
    if not rows:
        raise KeyError(f"{mod.__name__}: the perturbed run of {row_id!r} returned no such row")
    return rows[0]


def caught(mod, row_id: str, seed: int = 0) -> bool:
    return perturbed_row(mod, row_id, seed).verdict == VIOLATED


def annotate(claims: list[Claim], mod, seed: int = 0, run: bool = True) -> list[Claim]:
    """Fill ``perturbation`` (and, with ``run``, ``caught``) on the paper's rows; findings without one say so."""
    table = declared(mod)
    for c in claims:
        if c.id in table:
            c.perturbation = table[c.id][0]
            c.caught = caught(mod, c.id, seed) if run else None
        elif c.kind == FINDING and c.verdict != "not checked" and not c.perturbation:
            c.perturbation = "none declared yet"
    return claims
