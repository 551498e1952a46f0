"""Mistakes a real implementation could make, applied to the update rules the toys run.

A finding is a check that catches a plausible mistake (theory/power.py). The library below changes one
update rule of ``theory/rules.py`` for the duration of a call: the toys' simulators look each rule up as
``rules.NAME`` at every step, so replacing the module attribute (and restoring it afterwards) is the one seam.
The trainer's Parts (``trainers/parts.py``) are not touched: rows computed on the engine see no rule mistake.

A paper module may add mistakes of parts that have no rule copy (FedSMOO's dual update and server step, a
server average's weights, a misread table): those are switches of its own checks, ``Mistake(switch=...)``.
Rescaling a row's own bound is not a mistake (it only measures the slack), so none is declared.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

from . import rules


@dataclass(frozen=True)
class Mistake:
    name: str
    text: str                                          # what the broken implementation does, in one line
    rule: str | None = None                            # the rules.<rule> replaced for the call
    make: Callable | None = None                       # original rule -> broken rule
    switch: dict = field(default_factory=dict)         # or: keyword arguments of the paper's check


@contextmanager
def applied(m: Mistake | None):
    """``rules.<m.rule>`` replaced by ``m.make(original)`` inside the block, restored on exit (even on error)."""
    if m is None or m.rule is None:
        yield
        return
    orig = getattr(rules, m.rule)
    setattr(rules, m.rule, m.make(orig))
    try:
        yield
    finally:
        setattr(rules, m.rule, orig)


def run(design: Callable, m: Mistake | None, seed: int):
    """``design(seed)`` with the mistake on (None: the control)."""
    with applied(m):
        return design(seed, **(m.switch if m else {}))


def _mu_sign(f):
    def broken(g, mu, s, r):
        shat, mu_new = f(g, mu, s, r)
        return shat, 2 * mu - mu_new                    # mu - (s_hat - s) instead of mu + (s_hat - s)
    return broken


LIBRARY = {m.name: m for m in (
    Mistake("step-x2", "local step size doubled (x - 2 eta d)", "sgd_step",
            lambda f: lambda x, eta, d: f(x, 2 * eta, d)),
    Mistake("weight-decay", "weight decay 0.1 left on in the local step (d + 0.1 x)", "sgd_step",
            lambda f: lambda x, eta, d: f(x, eta, d + 0.1 * x)),
    Mistake("ri-sign", "relaxed start sign-flipped: w - beta (w - w_i^last) (FedInit Alg. 1 line 6)",
            "relaxed_start", lambda f: lambda w, last, beta: f(w, last, -beta)),
    Mistake("ri-x2", "relaxed start with beta doubled (FedInit Alg. 1 line 6)", "relaxed_start",
            lambda f: lambda w, last, beta: f(w, last, 2 * beta)),
    Mistake("ri-missing", "relaxed start dropped: every client starts at w (FedAvg's start)", "relaxed_start",
            lambda f: lambda w, last, beta: f(w, last, 0 * beta)),
    Mistake("cm-alpha-missing", "FedCM direction without alpha on the gradient: g + (1 - alpha) Delta (Alg. 2 l. 8)",
            "cm_direction", lambda f: lambda g, D, a: g + (1 - a) * D),
    Mistake("cm-alpha-ignored", "FedCM direction is the plain gradient g: alpha ignored, FedAvg steps (Alg. 2 l. 8)",
            "cm_direction", lambda f: lambda g, D, a: f(g, D, 1.0)),
    Mistake("cm-server-K", "FedCM's Delta not divided by K: -mean_S Delta_i / eta (Alg. 2 l. 13)", "cm_server",
            lambda f: lambda dy, eta, K: f(dy, eta, 1)),
    Mistake("scaffold-sign", "SCAFFOLD correction sign-flipped: g + c_i - c", "scaffold_direction",
            lambda f: lambda g, ci, c: f(g, -ci, -c)),
    Mistake("sam-sign", "SAM ascent sign-flipped: -rho g / ||g||", "sam_ascent",
            lambda f: lambda g, rho: f(g, -rho)),
    Mistake("sam-unnormalised", "SAM ascent not normalised: rho g", "sam_ascent",
            lambda f: lambda g, rho: rho * g),
    Mistake("smoo-ascent-sign", "FedSMOO corrected ascent sign-flipped: -r unit(g - mu_i - s) (Alg. 1 l. 8)",
            "smoo_ascent", lambda f: lambda g, mu, s, r: f(g, mu, s, -r)),
    Mistake("smoo-dual-sign", "FedSMOO perturbation dual updated with the wrong sign: mu_i - (s_hat_i - s) (l. 9)",
            "smoo_ascent", _mu_sign),
    Mistake("smoo-dual-missing", "FedSMOO's perturbation dual mu_i never updated (Alg. 1 l. 9 skipped)",
            "smoo_ascent", lambda f: lambda g, mu, s, r: (f(g, mu, s, r)[0], mu)),
    Mistake("smoo-server-sign", "FedSMOO global perturbation sign-flipped: -r unit(...) (Alg. 1 l. 17)",
            "smoo_server", lambda f: lambda mu, shat, a, r, paper=True: f(mu, shat, a, -r, paper)),
    Mistake("dyn-dual-missing", "FedDyn's lambda_i dropped from the local direction (FedSMOO Alg. 1 l. 11)",
            "dyn_direction", lambda f: lambda g, x, w, lam, beta: f(g, x, w, 0 * lam, beta)),
    Mistake("lesam-sign", "FedLESAM's estimate sign-flipped: rho unit(w - w_i^old) (eq. 3)", "lesam_estimate",
            lambda f: lambda wo, w, rho: f(wo, w, -rho)),
)}


def resolve(names, local: dict | None = None) -> list[Mistake]:
    """The Mistake of each name, from the paper's own ``local`` table or the library."""
    table = {**LIBRARY, **(local or {})}
    missing = [n for n in names if n not in table]
    if missing:
        raise KeyError(f"unknown mistakes {missing}; known: {sorted(table)}")
    return [table[n] for n in names]
