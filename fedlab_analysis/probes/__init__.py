"""Probes: each one module with ``Options`` (its flags), ``compute(bundle, opts) -> dict``, ``plot(result, path)``,
one-line ``HELP``, a ``DESCRIBE`` paragraph and a ``COST`` line, optionally ``make_hook`` (named by ``HOOK_NAMES``)
to watch training from inside. ``PROBES`` below is the one list of them: the command line (probe.py), the
training hooks (hooks.py), the sweep and the demo read it. Adding a probe = one new module + one line here
(or ``register`` at run time).
"""
from __future__ import annotations

from . import consensus, density, drift, hessian, landscape, margin, sharpness, stability, trace

PROBES = {
    "hessian": hessian,
    "trace": trace,
    "density": density,
    "landscape": landscape,
    "consensus": consensus,
    "sharpness": sharpness,
    "drift": drift,
    "stability": stability,
    "margin": margin,
}


def hook_modules() -> dict:
    """Training-hook name -> the probe module whose ``make_hook`` builds it."""
    return {h: m for m in PROBES.values() for h in getattr(m, "HOOK_NAMES", ())}


def register(name: str, module) -> None:
    """Add a probe at run time (a test's tiny probe, a notebook's own)."""
    PROBES[name] = module
