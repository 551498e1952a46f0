"""Probes that watch training from inside (DESIGN.md decision 6): ``--probe consensus,drift,sharpness,gap``.

The entry points (train.py) build the callbacks here and hand them to the trainer, which calls them at every
local step and round end and moves each hook's ``rows`` into metrics.jsonl; the engine never imports a probe.
"""
from __future__ import annotations

import importlib

from ..errors import UserError

HOOKS = {"consensus": "consensus", "drift": "drift", "sharpness": "sharpness", "gap": "stability",
         "stability": "stability"}
MAX_STEPS = 10_000


def parse_steps(spec: str | None):
    """'0,5,10' -> [0, 5, 10]; 'all' -> every local step (up to 10,000); None -> the probe's default."""
    if spec is None:
        return None
    if spec == "all":
        return list(range(MAX_STEPS))
    try:
        return sorted({int(s) for s in spec.split(",") if s.strip()})
    except ValueError:
        raise UserError(f"--probe-steps: expected 'all' or step numbers like '0,5,10', got {spec!r}") from None


def build(cfg) -> list:
    """The callbacks for ``cfg.probe`` (comma-separated names), each with a ``rows`` list."""
    if not cfg.probe:
        return []
    steps = parse_steps(cfg.probe_steps)
    out = []
    for name in [s.strip() for s in cfg.probe.split(",") if s.strip()]:
        if name not in HOOKS:
            raise UserError(f"--probe: unknown {name!r}; choose from {', '.join(HOOKS)}")
        mod = importlib.import_module(f"fedlab_analysis.probes.{HOOKS[name]}")
        kw = {} if steps is None or name in ("gap", "stability") else {"steps": steps}
        out.append(mod.make_hook(name, cfg.probe_every, **kw))
    return out
