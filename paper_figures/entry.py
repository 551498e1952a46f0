"""One entry of the run cache (:mod:`paper_figures.runs`): its key (the resolved config, the hooks' tag and the
hashes of the sources that determine its numbers), the hooks it carries, training prepared entries as one pack, and
reading a done one back. Below the cache's bookkeeping (status, the behavioural fingerprints, the pool), so the
fingerprints' batteries (:mod:`paper_figures.fingerprint`, :mod:`paper_figures.hooks_fingerprint`) train through
it without an import circle."""
from __future__ import annotations

import importlib
import json
import os
import time
from pathlib import Path

from paper_figures import verdict as V
from paper_figures.hooks import SHARP_RHO  # noqa: F401  (the one radius of the sharpness hooks)

PKG = Path(__file__).resolve().parents[1] / "fedlab_analysis"
# the files whose code determines a run's numbers (training_source_hash)
TRAINING_SOURCES = ("trainers/*.py", "models.py", "params.py", "algos.py", "data/*.py")
RUNGS = (0.3, 0.1, 0.03, 0.01, 0.003)        # matched-fit ladder of train losses

HOOKS = {                                     # tag -> "module:function(seed) -> [hooks]"
    "mnist": "paper_figures.hooks:mnist_hooks",
    "consensus-every-step": "paper_figures.fedals_fig1_consensus:hooks",
    "consensus-rounds": "paper_figures.fedinit_fig2_consensus:hooks",
    "consensus": "paper_figures.fedsmoo_table2:consensus_hooks",
    "drift,sharpness-ascent5-rho0.1": "paper_figures.fedlesam_fig2_drift:hooks",
}
# seconds per round of FedAvg with one thread, as a function of the client-steps of a round (n_active x local steps,
# batch 50) and an evaluation; from the measurement on this machine (MNIST MLP, 100 clients at 10%, batch 50,
# 5 epochs: ~0.7 s a round) and the digits QUICK runs (~0.1 s); SAM-type methods take two gradients a step
# full: the papers' CIFAR-10 setting on one GPU, from the measured FedAvg round (ResNet-18-GN, 100 clients, Bernoulli
# 10%, 5 epochs: ~500 client-steps of batch 50; compiled, fp32) in benchmarks/gpu_check.md; an evaluation (12,000
# images, forward only) as a third of the same number of training steps' cost: derived, not measured
MATCHED = "matched/rounds.json"      # a light entry keeps its matched-fit rounds here (paper_figures.ledger)


def _hash_files(files, root: Path = PKG) -> str:
    """provenance.files_hash (the package's one hashing rule), shortened to 12 hex digits for run names."""
    from fedlab_analysis.provenance import files_hash
    return files_hash(files, root)[:12]


def training_source_hash() -> str:
    """Hash of the source files that determine training numerics: fedlab_analysis/trainers/*.py, models.py,
    params.py, algos.py and data/*.py (path and bytes of each). Part of every run key."""
    return _hash_files({f for pat in TRAINING_SOURCES for f in PKG.glob(pat)})


def hook_sources(tag: str) -> set:
    """The files whose code defines the hooks of ``tag``: ``paper_figures/hooks.py`` (the tier's hooks and the one
    radius SHARP_RHO), every probe module (``fedlab_analysis/probes/*.py``: the hooks' measurements), the helpers
    they call outside probes/ (``linalg.py``: unit vectors, cosines, the rho-ball; ``studies/*.py``: the stability
    hooks' coupled retraining) and the module
    that :data:`HOOKS` names for the tag
    (a script's ``hooks`` and the constants they read, e.g. FedLESAM Fig. 2's ``SHARP_RHO``), found without
    importing it."""
    import importlib.util
    mod = importlib.util.find_spec(HOOKS[tag].split(":")[0]).origin
    return {Path(__file__).resolve().with_name("hooks.py"), Path(mod).resolve(), *PKG.glob("probes/*.py"),
            *PKG.glob("linalg.py"), *PKG.glob("studies/*.py")}


def hooks_source_hash(tag: str) -> str:
    """Hash of :func:`hook_sources` (path relative to the repository, and bytes, of each). Part of a tagged run's
    key beside :func:`training_source_hash`: a change to a hook's code recomputes the runs that carry it."""
    return _hash_files(hook_sources(tag), PKG.parent)


def hooks_for(tag: str, seed: int) -> list:
    if not tag:
        return []
    if tag not in HOOKS:
        raise ValueError(f"hooks tag {tag!r} is not registered in paper_figures.runs.HOOKS")
    mod, fn = HOOKS[tag].split(":")
    return list(getattr(importlib.import_module(mod), fn)(seed))


# ---- tasks: what a run is and where it lives -------------------------------------------------------------
def key_of(cfg, tag: str) -> dict:
    from fedlab_analysis import algos
    from fedlab_analysis.sweep import resolved
    used = algos.uses(cfg.algo, bool(cfg.ri), cfg)        # a hyper-parameter the algorithm never reads is no part
    conf = {k: v for k, v in resolved(cfg).items() if k != "data_dir" and (k not in algos.HYPER or k in used)}
    if conf["algo"] == "fedinit":                       # FedInit is FedAvg + relaxed initialisation (one spec)
        conf.update(algo="fedavg", ri=True)
    key = {"config": conf, "tag": tag, "source": training_source_hash()}
    return {**key, "hooks_source": hooks_source_hash(tag)} if tag else key


class MatchedFit:
    """Saves a model-only checkpoint ``matched/loss_<rung>.pt`` (config, model, global, layers, partition; no
    algorithm or client state) the first time the global model's train loss (metrics.jsonl's ``train_loss``: the
    fixed eval_train subset, every evaluated round) falls below each rung of :data:`RUNGS`. It costs no evaluation:
    at round t+1 it reads round t's row and, on a crossing, saves its copy of w^t. The last round is checked by
    :func:`ensure` after training. Also deletes ckpt/round_*.pt (last.pt, a hard link, keeps the latest state)."""

    def __init__(self, entry: Path):
        self.entry, self.prev = Path(entry), None
        (self.entry / "matched").mkdir(parents=True, exist_ok=True)

    def done_rungs(self) -> set:
        return {float(p.stem.split("_", 1)[1]) for p in (self.entry / "matched").glob("loss_*.pt")}

    def check(self, run, row: dict | None, w, buf, t: int) -> None:
        from fedlab_analysis import checkpoint
        from fedlab_analysis.trainers.loop import to_checkpoint
        loss = (row or {}).get("train_loss")
        if loss is None or row.get("round") != t or not loss == loss:
            return
        new = [r for r in RUNGS if loss < r and r not in self.done_rungs()]
        if not new:
            return
        ck = to_checkpoint(run, row)
        ck.update(round=t, algo_state={}, clients=None)
        ck["global"] = {k: v.detach().cpu().clone() for k, v in run.space.unflatten(w).items()}
        if buf is not None and run.bspace.P:
            ck["buffers"] = {k: v.detach().cpu().clone() for k, v in run.bspace.unflatten(buf).items()}
        for r in new:
            checkpoint.save(ck, self.entry / "matched" / f"loss_{r:g}.pt")

    def __call__(self, event, run, ctx, x):
        if event != "round":
            return
        for f in (self.entry / "run" / "ckpt").glob("round_*.pt"):
            f.unlink(missing_ok=True)
        if self.prev is not None:
            self.check(run, _last_row(self.entry / "run" / "metrics.jsonl"), *self.prev, run.t - 1)
        self.prev = (run.w.clone(), run.buf.clone() if run.bspace.P else None)   # w^t for the next call


def _last_row(path: Path) -> dict | None:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 65536))
            lines = fh.read().decode(errors="replace").strip().splitlines()
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None


# ---- one run -------------------------------------------------------------------------------------------------
def _write(path: Path, obj) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=str) + "\n")
    os.replace(tmp, path)


def _finish(task: dict, outcome, resume: bool, fit, t0: float, machine: str) -> dict:
    """After training: the last round's matched-fit check, the round checkpoints removed, done.json (a divergence
    is an outcome: done and marked; ``machine`` as provenance.machine names it); a failed run raises its error."""
    if isinstance(outcome, BaseException) or outcome.status == "failed":
        raise outcome if isinstance(outcome, BaseException) else outcome.exc
    entry, diverged = Path(task["path"]), None
    if outcome.status == "done":
        run = outcome.run
        fit.check(run, run.last_row, run.w, run.buf if run.bspace.P else None, run.t)
    else:
        diverged = outcome.error
    for f in (entry / "run" / "ckpt").glob("round_*.pt"):
        f.unlink(missing_ok=True)
    _write(entry / "done.json", {"diverged": diverged, "resumed": resume, "seconds": time.perf_counter() - t0,
                                 "machine": machine})
    return {"path": str(entry), "status": "done"}


def _failed(task: dict, e: BaseException) -> dict:
    import traceback
    entry = Path(task["path"])
    err = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
    entry.mkdir(parents=True, exist_ok=True)
    _write(entry / "failed.json", {"error": err, "traceback": "".join(traceback.format_exception(e))})
    return {"path": str(entry), "status": "failed", "error": err}


def train_entries(todo: list, t0: float, on_done=None) -> dict:
    """Train prepared entries ``todo`` = [(i, task, resume, RunConfig, MatchedFit)] as one pack
    (fedlab_analysis.trainers.pack), each with its tag's hooks; as each run ends (not when the pack does), its
    matched-fit check and done.json, or failed.json, then ``on_done(path)`` for a done one (the ledger's record). A
    session cut off mid-pack so keeps the pack's finished runs. Returns {i: record}."""
    recs: dict = {}
    if not todo:
        return recs
    import torch

    from fedlab_analysis.device import set_threads
    from fedlab_analysis.provenance import machine
    from fedlab_analysis.trainers.pack import Job, train_pack
    where = machine(todo[0][3].device)        # a pack's runs share one device

    def end(r: int, outcome) -> None:
        i, task, resume, _, fit = todo[r]
        try:
            recs[i] = _finish(task, outcome, resume, fit, t0, where)
        except Exception as e:                # noqa: BLE001
            recs[i] = _failed(task, e)
        if on_done is not None and recs[i]["status"] == "done":
            on_done(recs[i]["path"])

    threads = torch.get_num_threads()
    set_threads(todo[0][3].threads)
    try:
        outcomes = train_pack([Job(cfg, Path(task["path"]) / "run", resume=resume, overwrite=not resume,
                                   callbacks=[*hooks_for(task["tag"], cfg.seed), fit])
                               for _, task, resume, cfg, fit in todo], on_end=end)
    except Exception as e:                    # noqa: BLE001  (the pack could not start: each run records it)
        outcomes = [e] * len(todo)
    finally:
        torch.set_num_threads(threads)
    for r, o in enumerate(outcomes):          # runs that never ended: the pack could not start
        if todo[r][0] not in recs:
            end(r, o)
    return recs


def train_new(task: dict) -> dict:
    """Train ``task`` into its new, empty entry (no cache status to consult: the fingerprints' batteries use it)."""
    from fedlab_analysis.config import RunConfig
    entry = Path(task["path"])
    entry.mkdir(parents=True, exist_ok=True)
    _write(entry / "key.json", task["key"])
    return train_entries([(0, task, False, RunConfig.from_dict(task["config"]), MatchedFit(entry))],
                         time.perf_counter())[0]


CURVE_DIGITS = 5     # significant digits of the committed curves (curves.json)
CURVES: dict = {}    # run id -> its compact curve, for every run this process read (common.save_result writes them)


def curve(rows, seed: int, diverged) -> dict:
    """A run's compact curve, what its script commits in curves.json and what the convergence gate reads: the
    evaluated rounds' test accuracy and training loss to CURVE_DIGITS significant digits (None where non-finite),
    with the seed and the divergence reason (None if it did not diverge)."""
    import math
    ev = [r for r in rows if "test_acc" in r]
    sig = lambda v: None if v is None or not math.isfinite(v) else float(f"{v:.{CURVE_DIGITS}g}")   # noqa: E731
    return {"seed": seed, "diverged": diverged, "round": [r["round"] for r in ev],
            "test_acc": [sig(r["test_acc"]) for r in ev], "train_loss": [sig(r.get("train_loss")) for r in ev]}


def matched_rounds(entry) -> dict:
    """{rung: round} of the entry's matched-fit checkpoints (``matched/loss_<rung>.pt``); a light entry keeps the
    map alone (``matched/rounds.json``), so a comparison at matched fit finds the same rung without the files."""
    import torch
    entry = Path(entry)
    if (entry / MATCHED).exists():
        return json.loads((entry / MATCHED).read_text())
    return {p.stem.split("_", 1)[1]: int(torch.load(p, weights_only=True)["round"])
            for p in sorted((entry / "matched").glob("loss_*.pt"))}


def result(rec: dict) -> dict:
    """A done entry as train_seeds returns it (a failed one raises its error); its ``id`` (the entry's name) and
    ``curve`` (:func:`curve`) are also kept in :data:`CURVES`."""
    from fedlab_analysis import plots
    from fedlab_analysis.errors import UserError
    entry = Path(rec["path"])
    if rec["status"] != "done":
        raise UserError(f"run {entry} failed: {rec.get('error')} (see {entry}/failed.json)")
    done = json.loads((entry / "done.json").read_text())
    rows = plots.read_metrics(entry / "run")
    cfg = json.loads((entry / "run" / "config.json").read_text())
    acc = [r["test_acc"] for r in rows if "test_acc" in r]
    # a light entry has the rounds alone (or nothing, from an older record: None, so a comparison cannot miss them)
    rounds = matched_rounds(entry) if not done.get("light") or (entry / MATCHED).exists() else None
    matched = None if rounds is None else \
        {r: {"path": str(entry / "matched" / f"loss_{r}.pt"), "round": n} for r, n in rounds.items()}
    diverged = done.get("diverged") or next((r["diverged"] for r in rows if r.get("diverged")), None)
    CURVES[entry.name] = cur = curve(rows, cfg["seed"], diverged)
    return {"seed": cfg["seed"], "run_dir": str(entry / "run"), "test_acc": acc[-1] if acc else float("nan"),
            "rows": rows, "converged": V.converged(acc), "diverged": diverged, "matched": matched, "id": entry.name,
            "curve": cur}
