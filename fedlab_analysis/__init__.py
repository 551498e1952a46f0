"""fedlab_analysis: one compact federated trainer for the FedSMOO / FedLESAM / FedCM / FedALS /
FedInit family, self-describing checkpoints, and probes that put them under a microscope.

For notebooks, the public names below are importable from the package itself, grouped by wing
(``from fedlab_analysis import RunConfig, train_run, rebuild, compute_hessian``); the probes that need no federation
also take a plain ``nn.Module`` and data: ``fedlab_analysis.hessian(model, (x, y), top_k=3)`` (probes/plain.py).
Each is imported on first use only (module ``__getattr__``), so ``import fedlab_analysis`` loads neither torch
nor matplotlib.
No public name equals a submodule's name (``train`` is the command line's module ``fedlab_analysis.train``,
so the trainer's function is ``train_run``; ``plots.save`` is ``save_figure``): a submodule, once
imported, would take that attribute of the package.
"""
from __future__ import annotations

__version__ = "0.1.0"

# group -> {public name: (module relative to this package, attribute)}
GROUPS: dict[str, dict[str, tuple[str, str]]] = {
    "train": {
        "RunConfig": ("config", "RunConfig"),
        "train_run": ("trainers.loop", "train"),
        "Run": ("trainers.engine", "Run"),
        "ALGOS": ("algos", "TABLE"),
        "load_dataset": ("data", "load_dataset"),
        "ParamSpace": ("params", "ParamSpace"),
        "functional": ("params", "functional"),
        "read_metrics": ("rundir", "read_metrics"),
        "load_checkpoint": ("checkpoint", "load"),
    },
    "probes": {
        "PROBES": ("probes", "PROBES"),
        "register_probe": ("probes", "register"),
        "Bundle": ("probes.common", "Bundle"),
        "rebuild": ("probes.common", "rebuild"),
        **{f"compute_{p}": (f"probes.{p}", "compute") for p in (
            "hessian", "trace", "density", "landscape", "consensus", "sharpness", "drift", "stability", "margin")},
        **{p: ("probes.plain", p) for p in ("hessian", "trace", "density", "landscape", "sharpness", "margin")},
    },
    "studies": {
        "uniform_stability": ("studies.stability", "uniform_stability"),
        "run_sweep": ("sweep", "run"),
        "report_runs": ("report", "runs"),
        "report_summary": ("report", "summary"),
        "report_table": ("report", "table"),
        "report_curves": ("report", "curves"),
        "compare_frame": ("compare", "frame"),
    },
    "theory": {
        "theory_paper": ("theory.__main__", "load"),
        "over_seeds": ("theory.claims", "over_seeds"),
        "to_markdown": ("theory.claims", "to_markdown"),
        "VERDICTS": ("theory.claims", "VERDICTS"),
    },
    "plots": {
        "style": ("plots", "style"),
        "figure": ("plots", "figure"),
        "save_figure": ("plots", "save"),
        "learning_curves": ("plots", "learning_curves"),
        "curve_bands": ("plots", "curve_bands"),
    },
}
_WHERE = {name: where for group in GROUPS.values() for name, where in group.items()}
__all__ = list(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    module, attr = _WHERE[name]
    value = getattr(importlib.import_module(f".{module}", __name__), attr)
    globals()[name] = value                 # later reads skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
