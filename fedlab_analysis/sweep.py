"""python -m fedlab_analysis.sweep SWEEP.yaml [--backend local|ray] [--address ADDR] [--workers N] [--gpus 0,1]
                                             [--out DIR]

A sweep is a grid of ordinary runs. The YAML file names ``base:`` (RunConfig fields), ``grid:`` (any RunConfig
key -> a list of values; the runs are the Cartesian product, ``seed`` included; an entry may be a mapping that sets
several keys together, e.g. ``algo: [fedavg, {algo: fedsam, rho: 0.01}]``) and optional ``probes:`` (probe
command lines such as ``"hessian --top-k 1"``, run on each final checkpoint) and ``resources:`` (``num_cpus``,
``num_gpus`` per run, for Ray). Every run is one directory (config.json, metrics.jsonl, ckpt/) named by a short
hash of its resolved config, so the same run is never trained twice: an interrupted or extended sweep resumes
where it stopped. A run that raises is recorded in RUN/failed.json and retried only with --retry-failed; finished
runs hold RUN/done.json; probe results go to RUN/probes/LABEL.json; OUT/sweep.json lists every cell. Bad sweep
files are one line and exit 2 before anything is written.

Where runs go: the local backend runs ``--workers`` processes (default 2 on a CPU, or the cores if fewer: torch
runs use several threads each, so one per core oversubscribes the machine). ``--gpus 0,1`` (or ``all``) gives each
listed GPU one worker process of its own (``--workers`` more cycle over them) and puts every run that is not
``device: cpu`` on its worker's GPU (``cuda:i``; the device never enters a run's name). The Ray backend gives each
run the ``resources:`` of the sweep file (``num_gpus: 1``: Ray picks the GPU and hides the others from the run).

Notebook use: ``sweep.run("sweeps/fedsmoo_table2.yaml", out="runs/t2")`` returns a pandas DataFrame (one row
per run); ``report.table("runs/t2")`` turns it into the mean +- std table. In a script, call it under
``if __name__ == "__main__":`` (the local pool spawns fresh processes, which import the script again).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import itertools
import json
import math
import os
import shlex
import sys
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

from . import algos, provenance
from .config import EXECUTION, RunConfig
from .cli import guard, out_dir
from .errors import UserError
from .options import ArgParser

SWEEP_KEYS = ("base", "grid", "probes", "resources")
HASH_FREE = EXECUTION                    # never change a run's numbers, so never its name
RESOURCES = {"num_cpus": 1, "num_gpus": 0}
DEFAULT_CONFIG = RunConfig().to_dict()
FINAL = ("test_acc", "test_loss", "train_acc", "train_loss")
MAX_CELLS = 10000                        # a grid beyond it is refused before its cells are listed


# ---- reading and validating a sweep file ----------------------------------------------------------------
def _reads(d: dict) -> dict:
    """The hyper-parameters the algorithm of cell ``d`` reads in its setting (all of them for an unknown name,
    which validation then refuses)."""
    setting = SimpleNamespace(**{**DEFAULT_CONFIG, **d})
    if setting.algo not in algos.NAMES:
        return dict.fromkeys(algos.HYPER)
    return algos.uses(setting.algo, bool(setting.ri), setting)


def _set_by_grid(key: str, combo, grid: dict) -> bool:
    """Does this grid point set ``key`` itself (as an axis, or inside a mapping entry)?"""
    return any(k == key or (isinstance(v, dict) and key in _dash(v)) for k, v in zip(grid, combo))


def validate_config(d: dict, source: str) -> RunConfig:
    """One resolved cell -> a validated RunConfig through the one validation layer (``config.validate_dict``:
    types, ranges, the algorithm's parameters), or one UserError naming ``source`` (the sweep file and cell)."""
    from .config import validate_dict
    return validate_dict(d, source)


def _probe_parser():
    """The probe line's parser, raising UserError instead of printing usage and exiting."""
    from .probes import line

    class Strict(ArgParser):
        def error(self, message):
            raise UserError(message)
    return line.parser(cls=Strict)


def parse_probes(spec, source: str) -> dict[str, list[str]]:
    """``["hessian --top-k 1", "trace"]`` or ``{label: command}`` -> ``{label: argv}``; flags checked by the
    probe CLI's own parser against a placeholder checkpoint."""
    if spec is None:
        return {}
    if isinstance(spec, list):
        if not all(isinstance(s, str) for s in spec):
            raise UserError(f"{source}: probes must be a list of command lines such as \"hessian --top-k 1\"")
        labels = [s.split()[0] if s.split() else "" for s in spec]
        dup = sorted({lab for lab in labels if labels.count(lab) > 1})
        if dup:
            raise UserError(f"{source}: probe {dup[0]!r} is given twice; name them, e.g. probes: "
                            f"{{{dup[0]}_a: \"{dup[0]} ...\", {dup[0]}_b: \"{dup[0]} ...\"}}")
        spec = dict(zip(labels, spec))
    if not isinstance(spec, dict):
        raise UserError(f"{source}: probes must be a list of command lines or a mapping label -> command line")
    from .probes import PROBES
    p, out = _probe_parser(), {}
    for label, line in spec.items():
        if not isinstance(line, str) or not line.split():
            raise UserError(f"{source}: probe {label!r} must be a command line such as \"hessian --top-k 1\"")
        if not str(label).replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise UserError(f"{source}: probe label {label!r}: use letters, digits, '-', '_' and '.' (it names a file)")
        if "\0" in line:
            raise UserError(f"{source}: probe {label!r} holds a NUL byte, which no path or value can hold; remove it")
        try:
            argv = shlex.split(line)
        except ValueError as e:
            raise UserError(f"{source}: probe {line!r}: {e}") from None
        if argv[0] not in PROBES:
            raise UserError(f"{source}: unknown probe {argv[0]!r}; choose one of {', '.join(PROBES)}")
        if any(a.split("=")[0] in ("--json", "--plot", "-h", "--help") for a in argv):
            raise UserError(f"{source}: probe {line!r}: drop --json/--plot/--help; the sweep writes RUN/probes/"
                            f"{label}.json")
        try:
            check_probe(p.parse_args([argv[0], "CKPT", *argv[1:]]))
        except UserError as e:
            raise UserError(f"{source}: probe {line!r}: {e}") from None
        out[str(label)] = argv
    return out


def check_probe(args) -> None:
    """A probe line's flags by the probe's own rules, without a checkpoint: the command line's checks of every
    value (``probes.line.check_args``), then the probe's own refusals of flags that cannot act, which it makes before
    it reads the checkpoint (its ``compute`` is called with no checkpoint; reaching the checkpoint ends the
    check)."""
    from .probes import PROBES, line, runner
    line.check_args(args, outputs=False)
    opts = line.options_of(args)
    runner.precheck(args.probe, opts)
    try:
        PROBES[args.probe].compute(None, opts)
    except UserError:
        raise
    except Exception:               # noqa: BLE001  the flags passed; the probe went on to need the checkpoint
        pass


INPUTS = ("directions", "other")        # probe options naming a file the probe reads


def check_machine(tasks: list[dict], gpus: list[int] | None) -> None:
    """What only this machine can say, before anything trains: each run's --device exists here (unless --gpus
    places it), and each probe line's --device and the files it reads exist. Outputs were tried at plan time."""
    from .device import resolve
    from .probes.line import options_of
    p, devices, seen = _probe_parser(), set(), set()
    for t in tasks:
        if not gpus and t["config"].get("device") not in devices:
            devices.add(t["config"].get("device"))
            try:
                resolve(t["config"].get("device"))
            except UserError as e:
                raise UserError(f"{t['name']} {t['cell']}: the run's {e}") from None
        for label, argv in t["probes"].items():
            if label in seen:
                continue
            seen.add(label)
            args = p.parse_args([argv[0], "CKPT", *argv[1:]])
            try:
                if "--device" in argv:
                    resolve(args.device)
                for k in INPUTS:
                    v = getattr(options_of(args), k, None)
                    if v is not None and not Path(v).is_file():
                        raise UserError(f"--{k} {v}: no such file")
            except UserError as e:
                raise UserError(f"probe {label!r} ({shlex.join(argv)}): {e}") from None


def _dash(m: dict) -> dict:
    """YAML keys may be spelled as flags (``dir-alpha``) or as fields (``dir_alpha``)."""
    return {str(k).replace("-", "_"): v for k, v in m.items()}


def load(path) -> dict:
    """Read a sweep file: ``{"base", "grid", "probes", "resources"}``."""
    from .options import read_yaml
    return read_yaml(str(path), flag="SWEEP.yaml", what="base:, grid: and optional probes:, resources:")


def plan(sweep: dict, out, source: str = "sweep") -> tuple[list[dict], dict]:
    """Validate a sweep (a dict as in the YAML file) and list its runs; writes nothing."""
    unknown = sorted(set(sweep) - set(SWEEP_KEYS))
    if unknown:
        raise UserError(f"{source}: unknown top-level key {unknown[0]!r}; a sweep has {', '.join(SWEEP_KEYS)}")
    base, grid = sweep.get("base") or {}, sweep.get("grid")
    if not isinstance(base, dict):
        raise UserError(f"{source}: base must be a mapping of RunConfig fields")
    if not isinstance(grid, dict) or not grid:
        raise UserError(f"{source}: grid must map at least one config key to a list of values")
    base, grid = _dash(base), _dash(grid)
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise UserError(f"{source}: grid {key} must be a non-empty list (got {values!r})")
        for v in values:
            if isinstance(v, dict) and key not in _dash(v):
                raise UserError(f"{source}: grid {key}: an entry that sets several keys must set {key} too (got {v})")
    cells = math.prod(len(v) for v in grid.values())
    if cells > MAX_CELLS:                                # counted, not enumerated
        raise UserError(f"{source}: the grid has {cells} cells ({' x '.join(str(len(v)) for v in grid.values())}); "
                        f"a sweep takes at most {MAX_CELLS}: split it into several sweep files")
    resources = {**RESOURCES, **_dash(sweep.get("resources") or {})}
    if set(resources) != set(RESOURCES) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
                                                   for v in resources.values()):
        raise UserError(f"{source}: resources takes num_cpus and num_gpus, numbers >= 0 (got {resources})")
    probes = parse_probes(sweep.get("probes"), source)
    out, tasks, names, unused_base = Path(out).resolve(), [], {}, []
    for combo in itertools.product(*grid.values()):
        cell = {k: _label(k, v, grid[k]) for k, v in zip(grid, combo)}
        where = f"{source} [{', '.join(f'{k}={v}' for k, v in cell.items())}]"
        d = dict(base)
        for k, v in zip(grid, combo):
            d.update(_dash(v) if isinstance(v, dict) else {k: v})
        used = _reads(d)                                                     # a base shared across algorithms:
        shared = {k for k in base if k in algos.HYPER and k not in used and not _set_by_grid(k, combo, grid)}
        unused_base.append(shared)                                           # its parameters go to the cells
        cfg = validate_config({**{k: v for k, v in d.items() if k not in shared}, "quiet": True}, where)
        name = run_name(cfg)
        if name in names:
            continue                      # two grid points that resolve to the same run: train it once
        names[name] = cell
        tasks.append({"name": name, "path": str(out / name), "cell": cell, "config": cfg.to_dict(),
                      "probes": probes})
    never = sorted(set.intersection(*unused_base)) if unused_base else []
    if never:                                                   # read by no cell: it would do nothing at all
        raise UserError(f"{source}: base {never[0]}: none of the sweep's algorithms uses {never[0]}; it is used by "
                        f"{', '.join(algos.users(never[0]))}")
    return tasks, {"base": base, "grid": grid, "probes": {k: shlex.join(v) for k, v in probes.items()},
                   "resources": resources}


def _label(key, v, values):
    """A grid entry's name in tables: the value, or for ``{algo: fedsam, rho: 0.01}`` (keys set together) the
    value of ``key``, with the other keys added where two entries share it."""
    if not isinstance(v, dict):
        return v
    v = _dash(v)
    if sum((_dash(u)[key] if isinstance(u, dict) else u) == v[key] for u in values) == 1:
        return v[key]
    return f"{v[key]} ({', '.join(f'{k}={x}' for k, x in v.items() if k != key)})"


# ---- names: a short hash of the resolved config ----------------------------------------------------------
def resolved(cfg: RunConfig) -> dict:
    """The config with every paper default filled in (``rho: null`` and ``rho: 0.1`` are the same FedSAM run)."""
    d = cfg.to_dict()
    for k in algos.defaulted():
        d[k] = cfg.hp(k)
    return {k: v for k, v in d.items() if k not in HASH_FREE}


def run_name(cfg: RunConfig) -> str:
    h = hashlib.sha1(json.dumps(resolved(cfg), sort_keys=True, default=str).encode()).hexdigest()[:10]
    return f"{cfg.algo}-s{cfg.seed}-{h}"


# ---- one run (in a worker process or a Ray task) ---------------------------------------------------------
def status(path) -> str:
    path = Path(path)
    return "done" if (path / "done.json").exists() else "failed" if (path / "failed.json").exists() else "pending"


def _write_json(path: Path, obj) -> None:
    from .rundir import write_text
    write_text(path, json.dumps(obj, indent=1, default=float) + "\n")


def _probe(argv: list[str], run_dir: Path, label: str) -> dict:
    """One probe line on the run's last checkpoint, in process (``probes.line.run``: the probe's ``compute``); the
    result written to RUN/probes/LABEL.json as the probe command line writes it."""
    from .probes import line
    (run_dir / "probes").mkdir(exist_ok=True)
    target = run_dir / "probes" / f"{label}.json"
    p = _probe_parser()
    try:
        args = p.parse_args([argv[0], str(run_dir), *argv[1:], "--json", str(target)])      # as the CLI writes it
        result = line.run(p, args, outputs=False)
    except UserError as e:
        raise RuntimeError(f"probe {shlex.join(argv)!r} failed: error: {e}") from None
    return line.write_json(result, target)


def run_one(task: dict) -> dict | list[dict]:
    """Train one run (resuming from its last checkpoint if one is there), run its probes, and record the outcome
    in RUN/done.json or RUN/failed.json. Never raises: a failure is a record, so the sweep goes on. A pack task
    (``{"pack": [task, ...]}``: ``packs``) trains its runs together (trainers/pack.py) and returns their records."""
    return run_pack(task["pack"]) if "pack" in task else run_pack([task])[0]


@contextlib.contextmanager
def _threads(task: dict):
    """A task's config, whether it resumes (killed before a checkpoint: start that run again) and its hooks, with
    the run's torch threads and GPU set for the block (restored after: workers=1 runs in the caller's process)."""
    import torch

    from .device import set_threads
    from .probes.hooks import build
    path = Path(task["path"])
    (path / "failed.json").unlink(missing_ok=True)
    cfg = RunConfig.from_dict(task["config"])
    threads = torch.get_num_threads()
    set_threads(cfg.threads)
    if cfg.device.startswith("cuda:") and torch.cuda.is_available():
        torch.cuda.set_device(int(cfg.device[5:]))          # this run's GPU is also the default one in its process
    try:
        yield cfg, (path / "ckpt" / "last.pt").exists(), build(cfg)
    finally:
        torch.set_num_threads(threads)


def _finish(task: dict, run, t0: float) -> dict:
    """After training: the task's probe lines, where the run trained unless a line names a --device, and
    RUN/done.json."""
    path, cfg = Path(task["path"]), run.cfg
    results = {label: _probe(argv if "--device" in argv else [*argv, "--device", cfg.device], path, label)
               for label, argv in task["probes"].items()}
    record = {"status": "done", "round": run.t, "final": run.last_row or {}, "seconds": time.perf_counter() - t0,
              "device": str(run.device), "machine": provenance.machine(run.device),
              "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
              "probes": {label: r.get("summary") for label, r in results.items()}}
    _write_json(path / "done.json", record)
    return {**task, "status": "done"}


def run_pack(tasks: list[dict]) -> list[dict]:
    """``run_one`` for runs that share one program (trainers/pack.py): trained together, then each one's probes
    and record; a run that diverges or fails is recorded and the others go on."""
    from .trainers.pack import Job, train_pack
    t0, todo, out = time.perf_counter(), [], []
    for t in tasks:
        if (Path(t["path"]) / "done.json").exists():
            out.append({**t, "status": "done"})
        else:
            todo.append(t)
    try:
        with contextlib.ExitStack() as stack:
            setups = [stack.enter_context(_threads(t)) for t in todo]
            jobs = [Job(cfg, Path(t["path"]), resume=resume, overwrite=not resume, callbacks=hooks)
                    for t, (cfg, resume, hooks) in zip(todo, setups)]
            outcomes = train_pack(jobs)
    except Exception as e:                    # noqa: BLE001  (the pack could not start: each run records it)
        return out + [failed(t, e, time.perf_counter() - t0) for t in todo]
    for t, o in zip(todo, outcomes):
        try:
            if o.status != "done":
                raise o.exc
            out.append(_finish(t, o.run, t0))
        except Exception as e:                # noqa: BLE001
            out.append(failed(t, e, time.perf_counter() - t0))
    return out


def packs(tasks: list[dict], n: int, pack: str = "auto") -> list[dict]:
    """The tasks as the workers take them: with ``pack`` auto, the runs that can share a program
    (``trainers.pack.packable``: same model and data, vmapped local steps) in ``n`` packs per kind, one per
    worker; the others, and every run with ``pack`` off, alone."""
    from .trainers.pack import groups, packable
    if pack == "off":
        return list(tasks)
    cfgs = [RunConfig.from_dict(t["config"]) for t in tasks]
    able = [i for i, c in enumerate(cfgs) if packable(c)]
    packed = set(able)
    out = [t for i, t in enumerate(tasks) if i not in packed]
    for g in groups([cfgs[i] for i in able], n):
        out.append({"pack": [tasks[able[j]] for j in g]} if len(g) > 1 else tasks[able[g[0]]])
    return out


def packing_line(work: list[dict]) -> str:
    """How the sweep packed its runs, in one line."""
    sizes = [len(w["pack"]) for w in work if "pack" in w]
    alone = len(work) - len(sizes)
    return (f"sweep: {sum(sizes) + alone} runs to train: " + (f"{len(sizes)} pack(s) of {'+'.join(map(str, sizes))} "
            f"runs trained together" if sizes else "no packs") + (f", {alone} alone" if alone else ""))


def failed(task: dict, e: BaseException, seconds: float | None = None) -> dict:
    """Record ``e`` in RUN/failed.json (also for a worker process that died, from the driver)."""
    path = Path(task["path"])
    path.mkdir(parents=True, exist_ok=True)
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    error = f"{type(e).__name__}: {msg}"
    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    _write_json(path / "failed.json", {"status": "failed", "error": error, "traceback": tb, "seconds": seconds})
    return {**task, "status": "failed", "error": error}


# ---- where runs go: workers and GPUs ---------------------------------------------------------------------
def visible_gpus() -> list[int]:
    """The CUDA devices this process sees (tests replace this function)."""
    import torch
    return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []


def parse_gpus(spec) -> list[int] | None:
    """``--gpus``: None, ``all``, ``0,1`` or a list of ints -> the GPU indices, each one this machine has."""
    if spec is None or spec == "" or spec == []:
        return None
    seen = visible_gpus()
    if not seen:
        raise UserError(f"--gpus {spec}: this torch sees no CUDA device; drop --gpus (or install a CUDA build of "
                        "torch, see the README's GPU section)")
    if spec == "all":
        return seen
    try:
        ids = [int(g) for g in (spec.split(",") if isinstance(spec, str) else spec)]
    except ValueError:
        raise UserError(f"--gpus: {spec!r} is not a list of GPU numbers; use e.g. 0,1 or all") from None
    bad = [g for g in ids if g not in seen]
    if bad or len(set(ids)) != len(ids):
        raise UserError(f"--gpus: {spec!r} names {'a GPU twice' if not bad else f'GPU {bad[0]}'}; this machine has "
                        f"cuda:{seen[0]} to cuda:{seen[-1]}")
    return ids


def default_workers(gpus: list[int] | None) -> int:
    """One worker per listed GPU; on a CPU, 2 (or the cores, if fewer): each torch run uses threads of its own."""
    if gpus:
        return len(gpus)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(2, cores))


def slots(workers: int, gpus: list[int] | None) -> list[str | None]:
    """The device of each worker: the GPUs in turn (``cuda:i``), or None (each run's own device)."""
    return [f"cuda:{gpus[i % len(gpus)]}" if gpus else None for i in range(workers)]


def placed(task: dict, slot: str | None) -> dict:
    """The task with its run put on the worker's GPU ``slot`` (runs asking for ``device: cpu`` stay there)."""
    if "pack" in task:
        return {"pack": [placed(t, slot) for t in task["pack"]]}
    if slot is None or task["config"].get("device") == "cpu":
        return task
    return {**task, "config": {**task["config"], "device": slot}}


# ---- backends --------------------------------------------------------------------------------------------
def _worker():
    """run_one by reference to this module (also when the driver runs as ``python -m``)."""
    return importlib.import_module("fedlab_analysis.sweep").run_one


def _pool():
    """One worker process (spawn: no forked torch state) that ends with this one; tests replace this with a
    thread."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_end_with, initargs=(os.getpid(),))


def _end_with(parent: int) -> None:
    """A worker's initializer: end when the sweep's process ends, also by kill -9 (Linux: the kernel's
    PR_SET_PDEATHSIG; elsewhere a thread that watches the parent's pid)."""
    import signal
    import threading
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)     # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass

    def watch():
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)
    if os.getppid() != parent:                       # the sweep ended before the signal was asked for
        os._exit(1)
    threading.Thread(target=watch, daemon=True).start()


def _local(tasks, devices: list, done):
    """One worker process per entry of ``devices`` (``slots``), each taking the next run when its last one ends
    and putting it on its device; a single worker without a device runs in this process."""
    if devices == [None]:
        for t in tasks:
            done(_worker()(t), t)
        return
    from concurrent.futures import FIRST_COMPLETED, wait
    pools = [_pool() for _ in devices]
    free, queue, running = list(range(len(devices))), list(tasks), {}
    try:
        while queue or running:
            while queue and free:
                w = free.pop(0)
                t = placed(queue.pop(0), devices[w])
                running[pools[w].submit(_worker(), t)] = (t, w)
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for f in finished:
                t, w = running.pop(f)
                free.append(w)
                try:
                    done(f.result(), t)
                except Exception as e:        # noqa: BLE001  (a worker process died: out of memory, a crash)
                    done(None, t, e)
    except KeyboardInterrupt:
        for p in pools:
            p.shutdown(cancel_futures=True)
        raise
    for p in pools:
        p.shutdown()


def _ray_start(address, workers):
    """Ray, started here unless this process already holds a runtime: ``ray.init(address)``, or a local runtime
    with ``workers`` CPUs when no address is given. Returns (ray, whether we started it)."""
    try:
        import ray
    except ImportError:
        raise UserError("--backend ray: ray is not installed; pip install -e .[ray] (or use --backend local)") \
            from None
    host, _, port = (address or "").rpartition(":")
    if host and port.isdigit() and "://" not in address:      # HOST:PORT: fail in seconds, not after Ray's retries
        import socket
        try:
            socket.create_connection((host, int(port)), timeout=10).close()
        except OSError as e:
            raise UserError(f"--address: nothing answers at {address} ({e}); start the head with "
                            "`ray start --head --port=6379`") from None
    if ray.is_initialized():
        return ray, False
    kw = {} if address else {"num_cpus": workers}
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, **kw)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise UserError(f"--address: cannot reach a Ray cluster at {address!r} ({str(e).splitlines()[0]}); "
                        "start one with `ray start --head`") from None
    return ray, True


def _ray(ray, tasks, resources, done):
    """One Ray task per run, each holding ``resources`` (num_cpus, num_gpus)."""
    # workers import this package from where the driver found it (a source checkout on PYTHONPATH is inherited
    # by a local runtime; on a cluster, install the package on every machine)
    root = str(Path(__file__).resolve().parents[1])
    inherited = root in os.environ.get("PYTHONPATH", "").split(os.pathsep)
    env = {} if inherited else {"runtime_env": {"env_vars": {"PYTHONPATH": root + os.pathsep + "${PYTHONPATH}"}}}
    remote = ray.remote(_worker()).options(max_retries=0, **env, **resources)
    pending = {remote.remote(t): t for t in tasks}
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        for ref in ready:
            task = pending.pop(ref)
            try:
                done(ray.get(ref), task)
            except ray.exceptions.RayError as e:      # the worker died (out of memory, machine lost)
                done(None, task, e)


# ---- the sweep -------------------------------------------------------------------------------------------
def _summary(tasks) -> "pd.DataFrame":  # noqa: F821
    """One row per run: its grid cell, name, status, final metrics and probe summary numbers."""
    import pandas as pd
    rows = []
    for t in tasks:
        row = {**t["cell"], "name": t["name"], "status": t["status"], "path": t["path"]}
        if t["status"] == "done":
            rec = json.loads((Path(t["path"]) / "done.json").read_text())
            row.update({k: rec["final"].get(k) for k in FINAL})
            row.update(probe_values(rec.get("probes") or {}))
        elif t.get("error"):
            row["error"] = t["error"]
        rows.append(row)
    return pd.DataFrame(rows)


def probe_values(summaries: dict) -> dict:
    """``{"hessian": {"eigenvalues": [4.1], "seconds": ..}}`` -> ``{"hessian.eigenvalues.0": 4.1}`` (numbers only,
    timings left out)."""
    out = {}

    def walk(prefix, v):
        if isinstance(v, dict):
            for k, x in v.items():
                if "second" not in str(k) and k != "n_products":
                    walk(f"{prefix}.{k}", x)
        elif isinstance(v, (list, tuple)):
            for i, x in enumerate(v):
                walk(f"{prefix}.{i}", x)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[prefix] = float(v)
    for label, s in summaries.items():
        walk(label, s)
    return out


def run(sweep, out=None, backend: str = "local", address: str | None = None, workers: int | None = None,
        retry_failed: bool = False, quiet: bool = False, gpus=None, pack: str = "auto"):
    """Run every cell of ``sweep`` (a YAML path or a dict) that has not finished yet; returns a DataFrame with one
    row per run (grid keys, name, status, path, final metrics, probe values). Raises UserError on a bad sweep."""
    source = str(sweep) if not isinstance(sweep, dict) else "sweep"
    spec = load(sweep) if not isinstance(sweep, dict) else sweep
    if out is None:
        if isinstance(sweep, dict):
            raise UserError("--out: give the sweep's output directory")
        out = Path("runs") / Path(sweep).stem
    if backend not in ("local", "ray"):
        raise UserError(f"--backend: unknown {backend!r}; choose local or ray")
    if pack not in ("auto", "off"):
        raise UserError(f"--pack: unknown {pack!r}; choose auto or off")
    if address and backend != "ray":
        raise UserError("--address: only with --backend ray")
    if workers is not None and workers < 1:
        raise UserError(f"--workers: must be >= 1 (got {workers})")
    if gpus is not None and backend == "ray":
        raise UserError("--gpus: only with --backend local; Ray places runs on GPUs by the sweep file's "
                        "resources: num_gpus")
    gpus = parse_gpus(gpus)
    ray_cpus = workers or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
    workers = workers or default_workers(gpus)
    out_dir(out, "--out")
    tasks, meta = plan(spec, out, source)
    if backend == "local":                           # Ray runs elsewhere: its machines answer for themselves
        check_machine(tasks, gpus)
    for t in tasks:
        t["status"] = status(t["path"])
        if t["status"] == "failed":                 # failed in an earlier session: keep its error in the index
            t["error"] = json.loads((Path(t["path"]) / "failed.json").read_text()).get("error")
    todo = [t for t in tasks if t["status"] == "pending" or (retry_failed and t["status"] == "failed")]

    ray, started = _ray_start(address, ray_cpus) if backend == "ray" else (None, False)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    by_name = {t["name"]: t for t in tasks}

    def index():
        _write_json(out / "sweep.json", {"sweep": source, **meta, "runs": [
            {k: t.get(k) for k in ("name", "status", "path", "cell", "error") if t.get(k) is not None}
            for t in tasks]})
    index()
    from tqdm import tqdm
    bar = tqdm(total=len(tasks), initial=len(tasks) - len(todo), unit="run", desc=f"sweep {out.name}",
               disable=quiet, file=sys.stderr)

    def done(result, task, error=None):
        """A worker's record (a pack's: a list of them), or the ``error`` that ended its process."""
        if error is not None:
            result = [failed(t, error) for t in task.get("pack", [task])]
        for record in result if isinstance(result, list) else [result]:
            by_name[record["name"]].update(status=record["status"], error=record.get("error"))
            bar.update(1)
            if record["status"] == "failed":        # also with --quiet: a failure is never silent
                bar.write(f"failed: {record['name']} {record['cell']}: {record.get('error')}", file=sys.stderr)
        index()
    n = min(workers, max(len(todo), 1)) if backend == "local" else ray_cpus
    work = packs(todo, n, pack)
    if not quiet and todo:
        bar.write(packing_line(work), file=sys.stderr)
    try:
        if backend == "local":
            _local(work, slots(min(workers, max(len(work), 1)), gpus), done)
        else:
            _ray(ray, work, meta["resources"], done)
    finally:
        bar.close()
        if started:
            ray.shutdown()
    return _summary(tasks)


def parser() -> argparse.ArgumentParser:
    p = ArgParser(prog="python -m fedlab_analysis.sweep", description=__doc__.split("\n\n")[1],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("sweep", metavar="SWEEP.yaml", help="sweep file (base:, grid:, probes:, resources:)")
    p.add_argument("--backend", choices=("local", "ray"), default="local",
                   help="local: a process pool on this machine; ray: one Ray task per run")
    p.add_argument("--address", default=None, help="Ray cluster address (e.g. auto or HEAD_IP:6379); "
                   "default: a local Ray runtime")
    p.add_argument("--workers", type=int, default=None, help="parallel runs of the local backend (default: one "
                   "per --gpus GPU, else 2, or the cores if fewer); Ray: the CPUs of a local runtime (default: the "
                   "cores)")
    p.add_argument("--gpus", default=None, metavar="0,1|all", help="local backend: one worker per listed GPU, each "
                   "run on its worker's GPU (cuda:i)")
    p.add_argument("--out", default=None, help="output directory (default: runs/<sweep file name>)")
    p.add_argument("--pack", choices=("auto", "off"), default="auto", help="auto: runs of one model and data set "
                   "whose local steps are vmapped train together, one pack per worker (trainers/pack.py; each run "
                   "still writes its own directory, equal to the run alone); off: one run per worker at a time")
    p.add_argument("--retry-failed", action="store_true", help="run again the runs recorded as failed")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no table")
    p.add_argument("--dry-run", action="store_true", help="print each run's memory and disk plan, the sweep's disk "
                   "and the free memory, and stop (nothing is trained or written)")
    return p


def dry_run(path, out=None, workers: int | None = None, pack: str = "auto") -> list[str]:
    """Each run's plan (fedlab_analysis.plan), each pack's (the runs trained together: plan.pack), the sweep's disk
    total and the largest peak of what a worker holds at once."""
    from . import plan as planning
    out = Path(out) if out is not None else Path("runs") / Path(path).stem
    tasks, _ = plan(load(path), out, str(path))
    n = min(len(tasks), workers or os.cpu_count() or 1)
    plans = {t["name"]: planning.plan(RunConfig.from_dict(t["config"], t["name"]), name=t["name"]) for t in tasks}
    lines, disk, peak, dev = [], 0, 0, "cpu"
    for p in plans.values():
        lines.extend(p.lines())
        disk, dev = disk + p.disk_total, p.device
    for w in packs(tasks, n, pack):
        if "pack" in w:
            p = planning.pack([plans[t["name"]] for t in w["pack"]], f"pack of {len(w['pack'])} runs")
            lines.append(p.lines()[0])
        else:
            p = plans[w["name"]]
        peak = max(peak, p.peak)
    lines.append(f"sweep: {len(tasks)} runs, disk {planning.gb(disk)}; largest peak {planning.gib(peak)} per worker "
                 f"({n} at a time here: {planning.gib(n * peak)}); free: {planning.gib(planning.free_memory(dev))} "
                 f"on {dev}, {planning.gb(planning.free_disk(out))} disk at {out}")
    return lines


@guard("sweep")
def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.dry_run:
        try:
            print("\n".join(dry_run(args.sweep, args.out, args.workers, args.pack)))
        except UserError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        return 0
    try:
        df = run(args.sweep, out=args.out, backend=args.backend, address=args.address, workers=args.workers,
                 retry_failed=args.retry_failed, quiet=args.quiet, gpus=args.gpus, pack=args.pack)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    failed = df[df["status"] == "failed"]
    if not args.quiet:
        import pandas as pd
        cols = [c for c in df.columns if c not in ("path", "error")]
        with pd.option_context("display.width", 160, "display.max_columns", 30):
            print(df[cols].to_string(index=False))
    out = args.out or Path("runs") / Path(args.sweep).stem
    print(f"{len(df) - len(failed)} of {len(df)} runs done -> {out}")
    if len(failed):
        print(f"error: {len(failed)} of {len(df)} runs failed (each: RUN/failed.json; --retry-failed runs them "
              f"again)", file=sys.stderr)
    return 1 if len(failed) else 0


if __name__ == "__main__":
    sys.exit(main())
