"""The run cache of the paper figures: one directory per run, shared by every script of a tier, resumable, pooled.

A run is (resolved config, hooks ``tag``). Its entry ``<out>/runs/<tier>/<algo>-<hash>-s<seed>/`` holds
``key.json`` (the run key), ``run/`` (the trainer's config.json, metrics.jsonl, ckpt/last.pt), ``matched/`` (the
matched-fit checkpoints) and ``done.json`` or ``failed.json``. The run key is the resolved config without the
execution fields (``config.EXECUTION``) and ``data_dir``, the ``tag``, :func:`training_source_hash` and, for a
tagged run, :func:`hooks_source_hash` (the hooks write the probe rows the scripts read, so a change to a hook's
code, e.g. the radius it measures sharpness at, recomputes the tagged runs; untagged runs are unaffected); an entry
whose key differs is trained again from scratch; one with the same key and no done.json resumes from its last
checkpoint (bit-identical, ``train(resume=True)``); a done one is never touched. Keys that differ in
:func:`training_source_hash` and/or :func:`hooks_source_hash` alone count as equal when ``<root>/fingerprints.json``
records one behavioural fingerprint for the old and the new source of each (:mod:`paper_figures.fingerprint`: a
float64 battery of every algorithm whose numbers, to 9 digits, and data agree; :mod:`paper_figures.hooks_fingerprint`:
the tag's hooks on a float64 battery, their rows to 9 digits), so an edit that changes no number keeps every run, and
the entry keeps its key.json; a source with no recorded fingerprint cannot be verified, and its runs are trained
again. A run that raises is
recorded in failed.json and the others go on; a run whose loss goes non-finite is done, with ``diverged`` set (an
outcome).

Each done entry of a real tier is also recorded in git (:mod:`paper_figures.ledger`), and :func:`tasks` restores a
missing one from that record, without checkpoints; a caller that reads weights (``weights=True``) trains it again.

Hooks are named by ``tag`` in :data:`HOOKS` ("module:function" -> ``function(seed) -> [hooks]``) so that a pool
worker (a fresh process) builds the same ones. Every run also carries :class:`MatchedFit`.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

from paper_figures import entry as E
from paper_figures import ledger, probed, tiers
from paper_figures.entry import (HOOKS, PKG, RUNGS, TRAINING_SOURCES, MatchedFit, curve, hook_sources,  # noqa: F401
                                 hooks_for, hooks_source_hash, key_of, result, training_source_hash)
from paper_figures.entry import CURVE_DIGITS, CURVES  # noqa: F401  (re-exported: the cache's public names)
from paper_figures.hooks import SHARP_RHO  # noqa: E402,F401  (the one radius of the sharpness hooks)

CARD = "one NVIDIA H200 (benchmarks/gpu_check.md, 27 Nov 2026: FedAvg 2.258 s a round, compiled, fp32)"
COST = {"mnist": (0.7 / 600, 0.15), "quick": (0.1 / 140, 0.01), "full": (2.258 / 500, 2.258 / 500 * 240 / 3)}
TWO_GRADS = ("fedsam", "mofedsam", "fedgamma", "fedsmoo", "fedspeed")
COST["fmnist"] = COST["mnist"]                       # one model and protocol
HOOK_COST = {"mnist": 1.2, "consensus-every-step": 1.5, "drift,sharpness-ascent5-rho0.1": 2.5}
# The CPU costs above were measured on the machines of 27-29 Nov. CPUs differ: 30 Nov's (AVX2 only) trained the same
# FedLESAM-S Fashion-MNIST rounds 2.85x slower (2.2 s against 0.77 s, the ledger's records) and ran `make test` 2.85x
# slower. So the plan scales them by this machine's time of one fixed step (machine_factor). MICRO_REF is that step's
# time on the reference machines, inferred: 2.11 ms measured on 30 Nov's machine (idle), divided by 2.85.
MICRO_REF = 0.74e-3
_UNFINGERPRINTED: set = set()                 # sources whose fingerprint failed in this process (same_behaviour)


def root(tier: str) -> Path:
    return Path(tiers._ARGS["out"]) / "runs" / tier


@functools.cache
def machine_factor() -> float:
    """This CPU's time of one client-step of the tiers' MLP (784-200-200-10, batch 50, ten clients vmapped, one
    thread) over :data:`MICRO_REF`: the factor on :data:`COST`'s CPU costs. The fastest of 30 calls, so that other
    work on the machine moves it little (two training workers on two cores: 12% more than idle, where the median
    doubled). Measured once per process, in about half a second."""
    import torch
    from torch.func import grad, vmap
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        g = torch.Generator().manual_seed(0)
        shapes = ((200, 784), (200,), (200, 200), (200,), (10, 200), (10,))
        ps = [torch.randn(10, *s, generator=g) * 0.05 for s in shapes]
        x, y = torch.randn(10, 50, 784, generator=g), torch.randint(0, 10, (10, 50), generator=g)

        def loss(p, xb, yb):
            h = torch.relu(torch.relu(xb @ p[0].T + p[1]) @ p[2].T + p[3])
            return torch.nn.functional.cross_entropy(h @ p[4].T + p[5], yb)
        f, times = vmap(grad(loss)), []
        for _ in range(35):
            t = time.perf_counter()
            f(ps, x, y)
            times.append(time.perf_counter() - t)
        return min(times[5:]) / 10 / MICRO_REF
    finally:
        torch.set_num_threads(threads)


def estimate(cfg, tag: str, tier: str) -> float:
    """Estimated seconds of one run (one CPU thread; the full tier: one GPU, ``CARD``): rounds x (client-steps x
    per-step cost x gradients + eval); a CPU tier's costs scaled by :func:`machine_factor`."""
    per_step, per_eval = COST.get(tier, COST["quick"])
    if tier != "full":
        per_step, per_eval = per_step * machine_factor(), per_eval * machine_factor()
    n = max(1, round(cfg.clients * cfg.active_ratio))
    from fedlab_analysis.plan import SHAPES
    sizes = SHAPES.get(cfg.dataset, (1437,))[0] / cfg.clients
    steps = cfg.local_steps or cfg.local_epochs * max(1, round(sizes / cfg.batch_size))
    grads = 2 if cfg.algo in TWO_GRADS else 1
    per_round = n * steps * per_step * grads * cfg.batch_size / 50 + per_eval / cfg.eval_every
    return cfg.rounds * per_round * HOOK_COST.get(tag, 1.0)


def tasks(items, tier: str, out_root=None, weights: bool = False) -> list[dict]:
    """(overrides, seed, tag) items -> task dicts (config, tag, key, path, est, weights), duplicates dropped, order
    kept. ``weights``: the caller reads the runs' checkpoints, so a light entry will not do. A missing entry is
    restored from the ledger where it holds the run (:mod:`paper_figures.ledger`)."""
    base, out, seen = Path(out_root) if out_root is not None else root(tier), [], set()
    for overrides, seed, tag in items:
        cfg = tiers.config(overrides, seed, tier)
        key = key_of(cfg, tag)
        h = hashlib.sha1(json.dumps([key["config"], tag], sort_keys=True, default=str).encode()).hexdigest()[:10]
        path = base / f"{key['config']['algo']}-{h}-s{seed}"
        if str(path) in seen:
            continue
        seen.add(str(path))
        ledger.restore(path)
        out.append({"config": cfg.to_dict(), "tag": tag, "key": key, "path": str(path), "seed": seed,
                    "est": estimate(cfg, tag, tier), "weights": weights})
    return out


def same_behaviour(old: dict, key: dict, root: Path) -> bool:
    """``old`` and ``key`` differ in ``source`` and/or ``hooks_source`` alone, and the memo at ``root`` gives the old
    and the new source of each that differs one fingerprint (training: the source hash; hooks:
    ``fingerprint.hooks_key(tag, hooks_source)``; a run without FedInit's noise compares the training fingerprints
    without the noise's part, ``fingerprint.same``). An old source without a memoised fingerprint cannot be verified:
    False, and nothing is computed; the current sources' fingerprints are computed then, once, if not yet there."""
    from paper_figures import fingerprint
    differ = {k for k in {*old, *key} if old.get(k) != key.get(k)}
    if not differ or not differ <= {"source", "hooks_source"} or \
            ("hooks_source" in differ and not (old.get("hooks_source") and key.get("hooks_source"))):
        return False
    checks = []                                       # (old memo key, new memo key, what, compute the new one,
    if "source" in differ:                            #  whether the run's data carries FedInit's noise)
        checks.append((old["source"], key["source"], "the training code",
                       lambda: fingerprint.recorded(root, key["source"], progress=True),
                       bool((key.get("config") or {}).get("het_noise"))))
    if "hooks_source" in differ:
        tag = key["tag"]
        checks.append((fingerprint.hooks_key(tag, old["hooks_source"]), fingerprint.hooks_key(tag, key["hooks_source"]),
                       f"the hooks of {tag!r}",
                       lambda: fingerprint.recorded_hooks(root, tag, key["hooks_source"], progress=True), False))
    try:
        memo = fingerprint.read_memo(root)
    except ValueError:                                # an unreadable memo verifies nothing
        return False
    if any(memo.get(was) is None or now in _UNFINGERPRINTED for was, now, *_ in checks):
        return False
    for was, now, what, compute, noisy in checks:
        try:
            if not fingerprint.same(memo[was], compute(), noisy):
                return False
        except Exception as e:                        # noqa: BLE001  (code that cannot be fingerprinted keeps nothing)
            _UNFINGERPRINTED.add(now)                 # tried once per process
            print(f"warning: cannot fingerprint {what} ({type(e).__name__}: {e}); runs trained by other code are "
                  f"trained again", file=sys.stderr)
            return False
    return True


def _json_dict(path: Path, what: str) -> dict:
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{what} cannot be read ({type(e).__name__}: {' '.join(str(e).split())[:80]})") from None
    if not isinstance(d, dict):
        raise ValueError(f"{what} holds a {type(d).__name__}, not a mapping")
    return d


def _torch_dict(path: Path, what: str) -> dict:
    import torch
    try:
        d = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:                            # noqa: BLE001  truncated zips fail in many ways
        raise ValueError(f"{what} cannot be read ({type(e).__name__}: {' '.join(str(e).split())[:80]})") from None
    if not isinstance(d, dict) or isinstance(d.get("round"), bool) or not isinstance(d.get("round"), int):
        raise ValueError(f"{what} is not a checkpoint (no round number)")
    return d


def damaged(task: dict) -> str | None:
    """Why the task's entry cannot be used as it is (a file empty, garbage, a list or a folder; a checkpoint cut
    short), or None: what a killed worker or a full disk can leave. Such an entry is trained again."""
    from fedlab_analysis.errors import UserError
    from fedlab_analysis.rundir import read_metrics
    p = Path(task["path"])
    try:
        if not p.exists():
            return None
        _json_dict(p / "key.json", "key.json")
        for name in ("done.json", "failed.json", "run/config.json"):
            if (p / name).exists() or (p / name).is_symlink():
                _json_dict(p / name, name)
        if (p / "done.json").exists() and not (p / "run" / "config.json").exists():
            raise ValueError("done.json is there but run/config.json is missing")
        try:
            if (p / "run" / "metrics.jsonl").is_dir():
                raise ValueError("metrics.jsonl is a folder")
            if not read_metrics(p / "run" / "metrics.jsonl") and (p / "done.json").exists():
                raise ValueError("metrics.jsonl holds no rows, yet done.json says the run is done")
        except UserError as e:
            raise ValueError(f"metrics.jsonl: {e}") from None
        for f in [p / "run" / "ckpt" / "last.pt", *sorted((p / "matched").glob("loss_*.pt"))]:
            if f.exists() or f.is_symlink():
                _torch_dict(f, str(f.relative_to(p)))
    except ValueError as e:
        return str(e)
    return None


def status(task: dict) -> str:
    """new / damaged / partial / failed / done. An entry is current when its key.json equals the task's key, or when the
    two differ in ``source`` and/or ``hooks_source`` alone and the memo ``<root>/fingerprints.json`` gives the old and
    the new source of each the same behavioural fingerprint (:func:`same_behaviour`, :mod:`paper_figures.fingerprint`,
    :mod:`paper_figures.hooks_fingerprint`)."""
    p = Path(task["path"])
    if not (p / "key.json").exists() and not (p / "key.json").is_symlink():
        return "new"
    if damaged(task):
        return "damaged"
    old = json.loads((p / "key.json").read_text())
    if old != task["key"] and not same_behaviour(old, task["key"], p.parent):
        return "new"
    if task.get("weights") and ledger.light(p) and not probed.is_lenient():   # restored without checkpoints; this
        return "new"                                                         # caller reads them (module probed)
    return "done" if (p / "done.json").exists() else "failed" if (p / "failed.json").exists() else \
        "partial" if (p / "run" / "ckpt" / "last.pt").exists() else "new"


# ---- matched fit and checkpoint pruning (training hooks) -------------------------------------------------------
def ensure(task: dict) -> dict:
    """Make the task's run done (train, resume, or nothing); returns {"path", "status", "error"?}. Never raises for
    a failing run: failed.json records it. Runs in pool workers and in the scripts' own process."""
    return ensure_pack([task])[0]


def ensure_pack(tasks: list[dict]) -> list[dict]:
    """``ensure`` for runs trained together in one program (fedlab_analysis.trainers.pack): each entry prepared,
    the pending ones trained as one pack, each one's matched-fit check, done.json (or failed.json) and ledger record
    as it ends. A run that diverges is done and marked; one that fails is recorded; the others go on."""
    t0, recs, todo = time.perf_counter(), {}, []
    for i, task in enumerate(tasks):
        try:
            if status(task) == "done":
                recs[i] = {"path": task["path"], "status": "done"}
            else:
                todo.append((i, task, *_prepare(task)))
        except Exception as e:                    # noqa: BLE001  (one failing run is recorded, not fatal)
            recs[i] = E._failed(task, e)
    for rec in recs.values():                         # done before: a cache trained before the ledger is recorded
        if rec["status"] == "done":
            _keep(rec["path"])
    recs.update(E.train_entries(todo, t0, on_done=_keep))      # each trained run recorded as it ends
    for i, task in enumerate(tasks):                  # the weights scripts' measurements, kept while the weights are
        if recs[i]["status"] == "done" and probed.unmeasured(task):
            try:
                probed.measure(task)
            except Exception as e:                    # noqa: BLE001  (costs the measurement: the script redoes it)
                print(f"warning: measuring {task['path']}: {type(e).__name__}: {e}", file=sys.stderr)
    return [recs[i] for i in range(len(tasks))]


def _keep(path) -> None:
    """The ledger's record of the done run at ``path``; a full disk costs the record, not the run."""
    try:
        ledger.keep(path)
    except OSError as e:
        print(f"warning: ledger: {path}: {e}", file=sys.stderr)


def _prepare(task: dict):
    """A pending entry made ready to train: (whether it resumes, its RunConfig, its MatchedFit hook)."""
    from fedlab_analysis.config import RunConfig
    entry = Path(task["path"])
    st = status(task)
    if st == "damaged":                           # healed: trained again from scratch
        print(f"warning: damaged cache entry {entry}: {damaged(task)}; training it again", file=sys.stderr)
        st = "new"
    if st == "new" and entry.exists():
        shutil.rmtree(entry)                      # a stale key: nothing of it is reused
    entry.mkdir(parents=True, exist_ok=True)
    if st == "new":                               # an equivalent entry keeps the source that trained it
        E._write(entry / "key.json", task["key"])
    (entry / "failed.json").unlink(missing_ok=True)
    return (entry / "run" / "ckpt" / "last.pt").exists(), RunConfig.from_dict(task["config"]), E.MatchedFit(entry)


def packed(pending: list[dict], size: int) -> list[list[dict]]:
    """The pending tasks as packs of at most ``size`` runs that can share a program (same model and data, vmapped
    local steps: ``trainers.pack.packable``; the same number of rounds, so none waits long for another), in the
    order given: a pack goes when it is full, or at the end."""
    from fedlab_analysis.config import RunConfig
    from fedlab_analysis.trainers.pack import pack_key, packable
    out, open_ = [], {}
    for t in pending:
        cfg = RunConfig.from_dict(t["config"])
        if size <= 1 or not packable(cfg):
            out.append([t])
            continue
        k = (pack_key(cfg), cfg.rounds)
        if k not in open_:
            open_[k] = []
            out.append(open_[k])
        open_[k].append(t)
        if len(open_[k]) == size:
            del open_[k]
    return out


# ---- the pool ------------------------------------------------------------------------------------------------
def train_pool(todo: list[dict], workers: int = 2, quiet: bool = False, desc: str = "runs",
               pack: int = 1) -> list[dict]:
    """Make every task done, ``workers`` packs of up to ``pack`` runs side by side (``packed``; spawned processes,
    one torch thread each; 1 worker: in this process), in the given order; a tqdm bar weighted by the estimated
    seconds (so its ETA is meaningful). Returns the records (status done/failed) in completion order."""
    from tqdm import tqdm
    pending = [t for t in todo if status(t) != "done" or probed.unmeasured(t)]
    if not pending:
        return []
    bar = tqdm(total=round(sum(t["est"] for t in todo)), initial=round(sum(t["est"] for t in todo if t not in
               pending)), unit="s", desc=f"{desc}: {len(pending)} runs to train", disable=quiet or not
               sys.stderr.isatty(), file=sys.stderr)
    out = []
    work = packed(pending, pack)
    if not quiet and len(work) < len(pending):
        sizes = [len(w) for w in work]
        bar.write(f"{desc}: {len(pending)} runs in {len(work)} packs (largest {max(sizes)}; "
                  f"{sizes.count(1)} alone)", file=sys.stderr)

    def done(tasks, recs):
        for task, rec in zip(tasks, recs):
            out.append(rec)
            bar.update(round(task["est"]))
            if rec["status"] == "failed":
                bar.write(f"failed: {rec['path']}: {rec.get('error')}", file=sys.stderr)
    try:
        if workers <= 1 or len(work) == 1:
            for w in work:
                done(w, ensure_pack(w))
        else:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor, as_completed
            ctx = multiprocessing.get_context("spawn")
            counter = ctx.Value("i", 0)                # each worker takes the next GPU (one per GPU where present)
            with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init_worker,
                                     initargs=(_out_root(), counter)) as pool:
                futures = {pool.submit(ensure_pack, w): w for w in work}
                try:
                    for f in as_completed(futures):
                        w = futures[f]
                        try:
                            done(w, f.result())
                        except Exception as e:          # noqa: BLE001  (the worker process died)
                            done(w, [{"path": t["path"], "status": "failed", "error": f"{type(e).__name__}: {e}"}
                                     for t in w])
                except KeyboardInterrupt:
                    pool.shutdown(cancel_futures=True)
                    raise
    finally:
        bar.close()
    return out


def _out_root() -> str:
    return str(tiers._ARGS["out"])


def _init_worker(out: str, counter=None) -> None:
    """A pool worker: one torch thread, the driver's output root, and on a machine with GPUs the next one of them
    as its default device (a run with device "cuda" trains there)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    tiers._ARGS["out"] = Path(out)
    import torch
    if counter is not None and torch.cuda.is_available():
        with counter.get_lock():
            i, counter.value = counter.value, counter.value + 1
        torch.cuda.set_device(i % torch.cuda.device_count())
