"""The federated probes' command-line table: consensus and drift (consensus.py, drift.py), sharpness,
stability and margin (sharpness.py, stability.py, margin.py). Each module exposes its own ``CLI`` dict."""
from __future__ import annotations

import importlib

CLI: dict = {}
for _name in ("consensus", "drift", "sharpness", "stability", "margin"):
    try:
        CLI.update(getattr(importlib.import_module(f"fedlab_analysis.probes.{_name}"), "CLI", {}))
    except ImportError:          # a probe module missing from this build: the CLI says it is unavailable
        pass
