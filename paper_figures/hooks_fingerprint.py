"""A behavioural fingerprint of the probe hooks a tagged run carries, so that the run cache keeps a tagged run when
the hooks' code changed (paper_figures/hooks.py, the tag's hook module, fedlab_analysis/probes/*.py:
``runs.hooks_source_hash``) but the numbers they write did not.

:func:`hooks_fingerprint` trains a small float64 battery through the run cache's own path (``entry.train_new``, as
``runs.ensure`` trains a new entry: the tag's hooks from ``runs.hooks_for(tag, 0)`` followed by ``runs.MatchedFit``, as
a tier run gets them) on all 1,437 training digits (loaded by name, so the hooks' 1,000-sample subsets are drawn from
more than 1,000), MLP 64-12-10-10, 7 clients at 60%, unequal client sizes (about 13 local steps, so the drift hook's
steps 0 and 10 are both probed), 11 rounds: every hook with ``every`` <= 5 fires at least twice. Its cases are FedAvg,
FedSAM, FedLESAM, FedSMOO (the perturbation drift reads their ``delta``), FedAvg with relaxed initialisation (FedInit)
and FedALS (persistent local models). It hashes, per case, the metrics rows (``seconds`` aside; the hooks' ``probes``
rows included), the final global weights and each matched-fit checkpoint's round and weights, every number rounded to 9
significant digits as :mod:`paper_figures.fingerprint` does (same reasoning: float64 round-off crosses a 9-digit
boundary with a chance of about 1e-6 per number, a real change moves numbers far more), with ``torch.__version__``.

Its numbers pass through the trainer, so a hooks fingerprint recorded under training code of another behaviour
differs too: the runs are then trained again (safe), never kept wrongly. The memo records it under
``hooks:<tag>:<hooks_source>`` (:func:`paper_figures.fingerprint.hooks_key`).
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from paper_figures.digest import BASE, OWN, _digest, _rounded, _summary

HOOKS_BASE = {**BASE, "dataset": "digits", "rounds": 11, "eval_train_samples": 1200, "client_parallel": "loop"}
CASES = {"fedavg": ("fedavg", {}), "fedsam": ("fedsam", dict(rho=0.05)), "fedlesam": ("fedlesam", dict(rho=0.05)),
         "fedsmoo": ("fedsmoo", dict(rho=0.05)), "fedinit": ("fedavg", dict(ri=True, beta=0.1)),
         "fedals": ("fedals", OWN["fedals"])}


def hooks_case(tag: str, algo: str, overrides: dict, work: Path) -> tuple[str, dict]:
    """Train one case with the hooks of ``tag`` as ``runs.ensure`` trains a tier run, in ``work``; its digest and
    how many rows each probe wrote ({"<probe>:<event>": n})."""
    import torch

    from fedlab_analysis import checkpoint
    from fedlab_analysis.config import RunConfig
    from fedlab_analysis.plots import read_metrics
    from paper_figures import entry
    cfg = RunConfig(**{**HOOKS_BASE, **overrides, "algo": algo}).validate()
    rec = entry.train_new({"path": str(work), "key": {"hooks_fingerprint": tag}, "config": cfg.to_dict(), "tag": tag})
    if rec["status"] != "done":
        raise RuntimeError(f"hooks fingerprint case {algo} {overrides}: {rec.get('error')}")
    rows = [{k: v for k, v in r.items() if k != "seconds"} for r in read_metrics(work / "run")]
    fired: dict = {}
    for p in (p for r in rows for p in r.get("probes", [])):
        name = f"{p.get('probe')}:{p.get('event')}"
        fired[name] = fired.get(name, 0) + 1
    last = checkpoint.load(work / "run" / "ckpt" / "last.pt")
    matched = {p.stem: [int(ck["round"]), _summary(ck["global"])] for p in sorted((work / "matched").glob("*.pt"))
               for ck in [torch.load(p, weights_only=True)]}
    return _digest({"rows": _rounded(rows), "weights": _rounded(_summary(last["global"])),
                    "matched": _rounded(matched)}), fired


def hooks_fingerprint(tag: str, cases=None, progress: bool = False, parts: dict | None = None) -> str:
    """A 16-hex-digit hash of what the hooks of ``tag`` write (module docstring; ``cases``: only these of
    :data:`CASES`), with torch's version. ``parts``, if given, receives the per-case digests (``cases``), the rows
    each probe wrote per case (``fired``) and the matched-fit rungs reached (``matched``)."""
    import torch
    from tqdm import tqdm

    from paper_figures import entry
    if tag not in entry.HOOKS:
        raise ValueError(f"hooks_fingerprint: tag {tag!r} is not registered in paper_figures.runs.HOOKS")
    unknown = sorted(set(cases or ()) - set(CASES))
    if unknown:
        raise ValueError(f"hooks_fingerprint: unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    todo = {n: c for n, c in CASES.items() if cases is None or n in cases}
    threads = torch.get_num_threads()
    got, fired, matched = {}, {}, {}
    try:
        with tempfile.TemporaryDirectory(prefix="hooks-fingerprint-") as tmp:
            bar = tqdm(todo.items(), desc=f"hooks fingerprint {tag}", unit="run", file=sys.stderr,
                       disable=not (progress and sys.stderr.isatty()))
            for name, (algo, over) in bar:
                got[name], fired[name] = hooks_case(tag, algo, over, Path(tmp) / name)
                matched[name] = sorted(p.stem for p in (Path(tmp) / name / "matched").glob("*.pt"))
    finally:
        torch.set_num_threads(threads)
    if parts is not None:
        parts.update(cases=got, fired=fired, matched=matched)
    return _digest({"torch": torch.__version__, "cases": got})[:16]
