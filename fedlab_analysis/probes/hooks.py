"""Probes that watch training from inside (DESIGN.md decision 6): ``--probe consensus,drift,sharpness,gap``.

The probes that offer one name it in ``HOOK_NAMES`` (the registry, probes/__init__.py, lists them).
The entry points (train.py) build the callbacks here and hand them to the trainer, which calls them at every
local step and round end and moves each hook's ``rows`` into metrics.jsonl; the engine never imports a probe.
"""
from __future__ import annotations

from ..errors import UserError

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
    from . import hook_modules
    hooks = hook_modules()
    steps = parse_steps(cfg.probe_steps)
    out = []
    for name in [s.strip() for s in cfg.probe.split(",") if s.strip()]:
        if name not in hooks:
            raise UserError(f"--probe: unknown {name!r}; choose from {', '.join(hooks)}")
        mod = hooks[name]
        kw = {} if steps is None else {"steps": steps}          # every make_hook takes steps
        out.append(mod.make_hook(name, cfg.probe_every, **kw))
    return out
