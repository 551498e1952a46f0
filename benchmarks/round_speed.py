"""Seconds per round of the trainer (--client-parallel loop and vmap, and vmap under --compile) against a per-client
loop written the way the authors' FL-Simulator works (benchmarks/reference_sim.py: a fresh model, optimizer and
DataLoader per client per round, per-sample numpy augmentation, gradient clipping at 10; on CUDA the simulator's
train.py switches, deterministic cuDNN and TF32), timed in the same process, interleaved, evaluation excluded.

    python benchmarks/round_speed.py                       # CPU, 1 thread: mlp, cnn, resnet18gn x 7 algorithms
    python benchmarks/round_speed.py --device cuda:1 --threads 8 --rounds 5
    python benchmarks/round_speed.py --models mlp --algos fedavg,fedsam --settings papers --no-write
    python benchmarks/round_speed.py --device cuda --models resnet18gn --algos fedavg --modes compile \
        --precision tf32,bf16 --no-reference    # ours at lower precision (the run's --precision)

Two settings (``--settings equal,papers``), both 100 clients, batch 50, lr 0.1, wd 1e-3, clip 10:
  equal   10 active clients (fixed sampling), K local steps each, equal client sizes; best of N rounds.
  papers  the papers' protocol: Bernoulli sampling with p = 0.1 (about 10 active, a different number each round),
          E local epochs over clients of unequal size (label-Dirichlet 0.6, ``labeldir``: the simulator's own
          Dirichlet rule gives every client the same size), so K_i = E ceil(n_i / 50) differs between clients;
          E = K * 50 / 500 (E = 5 at K = 50), so the mean K_i is about K. Every runner trains the same clients
          with the same K_i in the same rounds (the reference takes the trainer's sampled clients), and the table
          gives the MEAN over those rounds (best-of would pick different workloads per runner).
Models: (a) the 784-200-200-10 MLP on MNIST-shaped data, (b) LeNet (``cnn``) and (c) ResNet-18-GN on CIFAR-shaped
data with flip + crop augmentation on both sides. The data are random tensors of the real shapes (speed does not
depend on the pixel values), 500 samples per client on average (at least 10 K). ``--steps model=K`` sets a
model's local steps (the CPU default lowers them for cnn and resnet18gn, and the table says so).
Timing: CUDA wall seconds with the run's own device synchronised (``torch.cuda.synchronize(device)``, not the
default device); on the CPU, this process's CPU seconds. Peak memory of a round: CUDA max_memory_allocated of the
device above its allocation before the round, CPU peak RSS above the RSS before it.
Prints one Markdown table and replaces its section in benchmarks/RESULTS.md (unless --no-write).
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fedlab_analysis.config import RunConfig  # noqa: E402
from fedlab_analysis.data import Dataset  # noqa: E402
from fedlab_analysis.device import resolve, set_threads  # noqa: E402
from fedlab_analysis.models import build_model  # noqa: E402
from fedlab_analysis.errors import UserError  # noqa: E402
from fedlab_analysis.provenance import machine  # noqa: E402
from fedlab_analysis.trainers.engine import Run, check_precision  # noqa: E402

MODELS = {"mlp": (1, 28, 28), "cnn": (3, 32, 32), "resnet18gn": (3, 32, 32)}
ALGOS = ["fedavg", "scaffold", "feddyn", "fedcm", "fedsam", "fedsmoo", "fedlesam"]
CPU_STEPS = {"cnn": 5, "resnet18gn": 10}          # CPU default: fewer local steps for the conv nets (said in the table)
SETTINGS = ("equal", "papers")
PER_CLIENT = 500                                  # mean samples per client (CIFAR-10 / 100 clients)
SECTION = "## round_speed.py"


def dataset(shape, clients: int, per_client: int, seed: int = 0) -> Dataset:
    g = torch.Generator().manual_seed(seed)
    n = clients * per_client
    x = torch.randn(n, *shape, generator=g)
    y = torch.randint(0, 10, (n,), generator=g)
    parts = [np.arange(i * per_client, (i + 1) * per_client) for i in range(clients)]
    return Dataset("random", x, y, x[:500], y[:500], 10, tuple(shape), natural_clients=parts,
                   augmentable=len(shape) == 3 and shape[0] == 3)


def sync_of(device):
    """Waits for the run's own device (a CUDA run on cuda:1 is not timed by synchronising cuda:0)."""
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


class Peak:
    """Peak memory of a block: CUDA max_memory_allocated of ``device`` above its allocation at the start; on the
    CPU the peak RSS (VmHWM, reset through /proc/self/clear_refs) above the RSS at its start, after glibc's
    malloc_trim has returned the free heap to the system (so memory the round reuses from earlier rounds counts).
    MiB."""

    def __init__(self, device):
        self.device, self.cuda = device, device.type == "cuda"

    @staticmethod
    def _status(key):
        with open("/proc/self/status") as fh:
            return next(int(s.split()[1]) for s in fh if s.startswith(key)) / 1024

    def __enter__(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base = torch.cuda.memory_allocated(self.device) / 2 ** 20
        else:
            try:
                import ctypes
                ctypes.CDLL("libc.so.6").malloc_trim(0)
                with open("/proc/self/clear_refs", "w") as fh:
                    fh.write("5")
            except OSError:                      # not Linux/glibc: the number is only an upper-bound guess
                pass
            self.base = self._status("VmRSS")
        return self

    def __exit__(self, *a):
        if self.cuda:
            torch.cuda.synchronize(self.device)
            self.mb = torch.cuda.max_memory_allocated(self.device) / 2 ** 20 - self.base
        else:
            self.mb = self._status("VmHWM") - self.base


MODES = ("loop", "vmap", "compile")


def config(model, algo, ds, steps, device, augment, setting) -> dict:
    """The RunConfig fields of a benchmark run in ``setting`` (module docstring)."""
    cfg = dict(algo=algo, dataset="cifar10" if ds.augmentable else "mnist", model=model,
               clients=len(ds.natural_clients), active_ratio=10 / len(ds.natural_clients), batch_size=50, lr=0.1,
               lr_decay=1.0, wd=1e-3, clip=10.0, augment=augment, rho=0.1, lamb=0.1, alpha=0.1, device=str(device),
               keep_clients=False, quiet=True)
    if setting == "equal":
        return {**cfg, "sampling": "fixed", "partition": "natural", "local_steps": steps}
    return {**cfg, "sampling": "bernoulli", "partition": "labeldir", "dir_alpha": 0.6, "min_size": 10,
            "local_epochs": epochs(steps)}


def epochs(steps: int) -> float:
    """E of the papers' setting whose mean K_i is about ``steps``: E = K * B / (mean n_i)."""
    return steps * 50 / PER_CLIENT


class Schedule:
    """The clients and K_i of each round of a Run, shared by every runner of a row (same work in the same round)."""

    def __init__(self, run):
        self.run, self.cache = run, {}

    def __call__(self, t: int):
        if t not in self.cache:
            S = self.run.sample_clients(t)
            self.cache[t] = (S.tolist(), [self.run.local_steps(int(i)) for i in S])
        return self.cache[t]


def runners(model, algo, ds, steps, device, augment, modes=("loop", "vmap"), setting="equal", reference=True,
            precision="fp32"):
    """({name: round function} for ours (``modes``, at the run's ``precision``), the reference and the floor
    (``reference``) in ``setting``, the Schedule)."""
    from reference_sim import ReferenceSim
    cfg = {**config(model, algo, ds, steps, device, augment, setting), "precision": precision}
    out, run = {}, None
    for mode in modes:                               # "compile": the vmapped step under torch.compile
        run = Run(RunConfig(**cfg, client_parallel="vmap" if mode == "compile" else mode,
                            compile=mode == "compile"), dataset=ds)
        out[mode] = run.round                        # measure()'s warm-up round pays the compilation
    if run is None:
        run = Run(RunConfig(**cfg), dataset=ds)
    sched = Schedule(run)
    if not reference:
        return out, sched
    shape = ds.input_shape
    idx = [ix.cpu() for ix in run.idx]
    clients = [(ds.x_train[ix].numpy(), ds.y_train[ix].numpy()) for ix in idx]

    class SameClients(ReferenceSim):
        def sample(self):
            return sched(self.t)[0]

    ref = SameClients(algo, lambda: build_model(model, shape, 10), clients, active=10,
                      local_steps=steps if setting == "equal" else None,
                      local_epochs=None if setting == "equal" else cfg["local_epochs"], batch_size=50, lr=0.1,
                      augment=augment, clip=10.0, rho=0.1, lamb=0.1, alpha=0.1, wd=1e-3, seed=0, device=str(device))
    out["reference"] = ref.round
    out["floor"] = floor(model, ds, sched, device, passes=2 if algo in ("fedsam", "fedsmoo") else 1)
    return out, sched


def floor(model, ds, sched, device, passes):
    """The compute floor of a round: sum_S K_i x ``passes`` bare forward + backward passes of one persistent
    module on one resident batch of 50 (no optimizer, no data movement, no algorithm), round by round as
    ``sched`` gives them."""
    import torch.nn.functional as F
    m = build_model(model, ds.input_shape, 10).to(device)
    x, y = ds.x_train[:50].to(device), ds.y_train[:50].to(device)
    t = [0]

    def f():
        for _ in range(sum(sched(t[0])[1]) * passes):
            m.zero_grad(set_to_none=True)
            F.cross_entropy(m(x), y).backward()
        t[0] += 1
    f.t = t
    return f


def measure(fns: dict, rounds: int, device, cold=()) -> dict:
    """Seconds per runner over ``rounds`` interleaved rounds after one warm-up round each (every runner does
    round t of the same schedule at the same time; the runners named in ``cold`` skip the warm-up, and then all
    runners skip round 0 of the schedule alike: the warm-ups of the others warm the device): the best and the
    mean. Peak memory: on CUDA over the timed rounds (the device is synchronised around them anyway); on the CPU
    in one more round each (apart, so that trimming the heap does not slow the timed rounds)."""
    sync, cuda = sync_of(device), device.type == "cuda"
    clock = time.perf_counter if cuda else time.process_time     # CPU: this process's seconds
    times = {k: [] for k in fns}
    peak = {k: 0.0 for k in fns}
    for k, f in fns.items():
        f() if k not in cold else skip(f)
    for _ in range(rounds):
        for k, f in fns.items():
            with Peak(device) if cuda else contextlib.nullcontext() as p:
                sync()
                t0 = clock()
                f()
                sync()
                times[k].append(clock() - t0)
            if cuda:
                peak[k] = max(peak[k], p.mb)
    for k, f in fns.items() if not cuda else ():
        with Peak(device) as p:
            f()
        peak[k] = p.mb
    return {"best": {k: min(v) for k, v in times.items()}, "mean": {k: sum(v) / len(v) for k, v in times.items()},
            "mb": peak}


def skip(f):
    """Advance a runner's round counter without training (the cold runners of ``measure``)."""
    owner = getattr(f, "__self__", None)
    if owner is not None and hasattr(owner, "t"):
        owner.t += 1
    elif hasattr(f, "t"):
        f.t[0] += 1
    else:
        f()


def reference_doc() -> str:
    """The first line of the reference's docstring, so the table says which reference it timed."""
    import reference_sim
    return (reference_sim.__doc__ or "no docstring").strip().splitlines()[0].rstrip(".")


HEADER = ["| model | P | algorithm | setting | K | reference s/round | loop s/round | vmap s/round "
          "| vmap+compile s/round | floor s/round | client-steps/s (best) | speed-up loop | speed-up vmap "
          "| speed-up compile | best possible (reference / floor) | peak MiB ref / loop / vmap / compile |",
          "|" + "---|" * 16]


def row(model, P, algo, setting, K, sched, rounds, r, modes, precision="fp32") -> str:
    """One table row: best-of seconds in the equal setting, the mean over the same rounds in the papers' one."""
    s, mb = r["best" if setting == "equal" else "mean"], r["mb"]
    ref = s.get("reference")
    sec = {m: f"{s[m]:.3f}" if m in s else "not run" for m in (*MODES, "reference", "floor")}
    up = {m: f"{ref / s[m]:.2f}x" if m in s and ref else "" for m in MODES}
    mem = " / ".join(f"{mb[m]:.0f}" if m in mb else "-" for m in ("reference", *MODES))
    ours = min(s[m] for m in modes)
    if setting == "equal":
        steps, k = 10 * K, f"{K}{'' if K == 50 else ' (of 50)'}"
        where = "equal: 10 fixed"
    else:
        timed = [sched(t) for t in range(1, rounds + 1)]
        steps = sum(sum(k) for _, k in timed) / rounds
        ks = [k for _, kk in timed for k in kk]
        k = f"E={epochs(K):g}: K_i {min(ks)}-{max(ks)}, {steps:.0f}/round"
        where = f"papers: {'/'.join(str(len(S)) for S, _ in timed)} active"
    best = f"{ref / s['floor']:.2f}x" if ref else ""
    name = algo if precision == "fp32" else f"{algo} ({precision})"
    return (f"| {model} | {P:,} | {name} | {where} | {k} | {sec['reference']} | "
            + " | ".join(sec[m] for m in MODES) + f" | {sec['floor']} | {steps / ours:.0f} | "
            + " | ".join(up[m] for m in MODES) + f" | {best} | {mem} |")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--algos", default=",".join(ALGOS))
    p.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated: equal, papers (module docstring)")
    p.add_argument("--rounds", type=int, default=2, help="timed rounds per runner, after one warm-up")
    p.add_argument("--steps", default=None, help="local steps per model, e.g. 'cnn=5,resnet18gn=10' (default: 50; "
                   "on CPU cnn=5, resnet18gn=10); the papers' setting uses E = K / 10 epochs")
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--modes", default="loop,vmap,compile", help="ours to time: loop, vmap, compile (vmap under "
                   "--compile); vmap of a conv net on a CPU is slow; the table says 'not run' for a mode left out")
    p.add_argument("--precision", default="fp32", help="comma-separated: fp32, tf32, bf16 (the run's --precision; "
                   "one row each; the reference and the floor run only in the fp32 row)")
    p.add_argument("--no-reference", action="store_true", help="time ours only (no reference, no floor)")
    p.add_argument("--cold-reference", action="store_true", help="no warm-up round for the reference and the "
                   "floor (ours still get one; the reference builds everything afresh each round anyway)")
    p.add_argument("--no-write", action="store_true", help="print the table only")
    p.add_argument("--baseline", default=None, help="a checkout of this repository (a directory) whose trainer "
                   "(fedlab_analysis/trainers) is timed beside ours in the same process, interleaved, with the default "
                   "--client-parallel: a before/after comparison, printed below each row (not written)")
    a = p.parse_args(argv)
    device = resolve(a.device)
    set_threads(a.threads)
    steps = {} if device.type == "cuda" else dict(CPU_STEPS)
    if a.steps:
        steps.update({k: int(v) for k, v in (s.split("=") for s in a.steps.split(","))})
    precisions = [s for s in a.precision.split(",") if s] or p.error("--precision: empty")
    for prec in precisions:                          # the run's own rules, before any row is timed
        try:
            RunConfig(precision=prec).validate()
            check_precision(prec, device)
        except UserError as e:
            p.error(str(e).removeprefix("error: "))
    settings = [s for s in a.settings.split(",") if s]
    bad = [s for s in settings if s not in SETTINGS]
    if bad or not settings:
        p.error(f"--settings: unknown {bad}; a comma-separated list of equal, papers")
    flags = ("; the reference under the simulator's train.py switches (cudnn.deterministic, TF32), ours in fp32 "
             "unless the algorithm cell names tf32 or bf16") if device.type == "cuda" else ""
    head = (f"{machine(device)}; {os.cpu_count()} cores, {a.threads} thread(s), device {device}; {a.clients} clients, "
            f"batch 50, {a.rounds} timed rounds per runner, interleaved after a warm-up, evaluation excluded; "
            f"equal: best of the rounds; papers: mean over the same rounds; "
            f"reference = benchmarks/reference_sim.py ({reference_doc()}){flags}; "
            + ("wall seconds" if device.type == "cuda" else "CPU seconds of this process (the machine is shared; "
               "one thread, so CPU time is the round's cost without the wait for a core)"))
    rows = list(HEADER)
    print(head)
    print("\n".join(rows), flush=True)
    modes = a.modes.split(",")
    for model in a.models.split(","):
        K = steps.get(model, 50)
        ds = dataset(MODELS[model], a.clients, max(PER_CLIENT, 10 * K))
        P = sum(t.numel() for t in build_model(model, MODELS[model], 10).parameters())
        for algo in a.algos.split(","):
            for setting in settings:
                for precision in precisions:
                    with tf32_restored():        # --precision tf32 sets a process-wide switch: undo it per row
                        fns, sched = runners(model, algo, ds, K, device, ds.augmentable, modes, setting,
                                             reference=not a.no_reference and precision == "fp32",
                                             precision=precision)
                        if a.baseline:
                            cfg = config(model, algo, ds, K, device, ds.augmentable, setting)
                            base = baseline_run(a.baseline)(RunConfig(**cfg, precision=precision), dataset=ds)
                            fns["baseline"] = base.round
                        r = measure(fns, a.rounds, device, cold=("reference", "floor") if a.cold_reference else ())
                    rows.append(row(model, P, algo, setting, K, sched, a.rounds, r, modes, precision))
                    print(rows[-1], flush=True)
                    if a.baseline:
                        s = r["best" if setting == "equal" else "mean"]
                        ref = s.get("reference")
                        print(f"  baseline {a.baseline}: {s['baseline']:.3f} s/round"
                              + (f", speed-up {ref / s['baseline']:.2f}x" if ref else ""), flush=True)
                    del fns, sched               # a Run and its callbacks form cycles: free each row's runs now
                    gc.collect()                 # (CIFAR-shaped rows held ~2 GB each until the OOM killer came)
    if device.type != "cuda":
        rows.append("| GPU rows | | | | | not measured here (benchmarks/gpu_check.sh runs them on a GPU) |"
                    + " |" * 10)
    if not a.no_write:
        write(head, rows, device)


def baseline_run(checkout: str):
    """The Run class of another checkout's trainer, loaded as ``fedlab_analysis.trainers_baseline`` (its relative
    imports resolve against this checkout's package; only the trainer is swapped)."""
    name = "fedlab_analysis.trainers_baseline"
    if name not in sys.modules:
        where = Path(checkout) / "fedlab_analysis" / "trainers"
        spec = importlib.util.spec_from_file_location(name, where / "__init__.py",
                                                      submodule_search_locations=[str(where)])
        sys.modules[name] = mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    return importlib.import_module(name + ".engine").Run


@contextlib.contextmanager
def tf32_restored():
    b = torch.backends
    old = (b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32)
    try:
        yield
    finally:
        b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32 = old


def write(head, rows, device):
    from results import write_section
    models = dict.fromkeys(f"{c[0][2:]} K={c[4].split()[0]}" for c in (r.split(" | ") for r in rows[2:])
                           if not c[0].startswith("| GPU") and c[3].startswith("equal"))
    title = f"{SECTION} ({'CUDA' if device.type == 'cuda' else 'CPU'}: {', '.join(models) or 'papers setting'})"
    write_section(title, f"{head}\n\n" + "\n".join(rows))


if __name__ == "__main__":
    main()
