"""Seconds per round of the trainer (--client-parallel loop and vmap) against a per-client loop written the way the
authors' FL-Simulator works (benchmarks/reference_sim.py: a fresh model, optimizer and DataLoader per client per
round, per-sample numpy augmentation, gradient clipping at 10), timed in the same process, interleaved, best of N,
evaluation excluded on both sides.

    python benchmarks/round_speed.py                       # CPU, 1 thread: mlp, cnn, resnet18gn x 7 algorithms
    python benchmarks/round_speed.py --device cuda --threads 8 --rounds 5
    python benchmarks/round_speed.py --models mlp --algos fedavg,fedsam --no-write

Setting: 100 clients, 10 active (fixed sampling), 50 local steps of batch 50, lr 0.1, wd 1e-3, clip 10;
(a) the 784-200-200-10 MLP on MNIST-shaped data, (b) LeNet (``cnn``) and (c) ResNet-18-GN on CIFAR-shaped data with
flip + crop augmentation on both sides. The data are random tensors of the real shapes (speed does not depend on the
pixel values). ``--steps model=K`` lowers the local steps of a model (the CPU default does for cnn and resnet18gn,
and the table says so). Peak memory of a round: CUDA max_memory_allocated, CPU peak RSS above the RSS before it.
Prints one Markdown table and replaces its section in benchmarks/RESULTS.md (unless --no-write).
"""
from __future__ import annotations

import argparse
import os
import platform
import re
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
from fedlab_analysis.trainers.engine import Run  # noqa: E402

MODELS = {"mlp": (1, 28, 28), "cnn": (3, 32, 32), "resnet18gn": (3, 32, 32)}
ALGOS = ["fedavg", "scaffold", "feddyn", "fedcm", "fedsam", "fedsmoo", "fedlesam"]
CPU_STEPS = {"cnn": 2, "resnet18gn": 1}           # CPU default: fewer local steps for the conv nets (said in the table)
SECTION = "## round_speed.py"


def dataset(shape, clients: int, per_client: int, seed: int = 0) -> Dataset:
    g = torch.Generator().manual_seed(seed)
    n = clients * per_client
    x = torch.randn(n, *shape, generator=g)
    y = torch.randint(0, 10, (n,), generator=g)
    parts = [np.arange(i * per_client, (i + 1) * per_client) for i in range(clients)]
    return Dataset("random", x, y, x[:500], y[:500], 10, tuple(shape), natural_clients=parts,
                   augmentable=len(shape) == 3 and shape[0] == 3)


class Peak:
    """Peak memory of a block: CUDA max_memory_allocated above the allocation at its start; on the CPU the peak
    RSS (VmHWM, reset through /proc/self/clear_refs) above the RSS at its start, after glibc's malloc_trim has
    returned the free heap to the system (so memory the round reuses from earlier rounds counts). MiB."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"

    @staticmethod
    def _status(key):
        with open("/proc/self/status") as fh:
            return next(int(s.split()[1]) for s in fh if s.startswith(key)) / 1024

    def __enter__(self):
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated() / 2 ** 20
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
            torch.cuda.synchronize()
            self.mb = torch.cuda.max_memory_allocated() / 2 ** 20 - self.base
        else:
            self.mb = self._status("VmHWM") - self.base


MODES = ("loop", "vmap", "compile")


def runners(model, algo, ds, steps, device, augment, modes=("loop", "vmap")):
    """{name: round function} for ours (``modes``) and the reference, in the same setting."""
    from reference_sim import ReferenceSim
    cfg = dict(algo=algo, dataset="cifar10" if ds.augmentable else "mnist", model=model,
               clients=len(ds.natural_clients), active_ratio=10 / len(ds.natural_clients),
               sampling="fixed", partition="natural", local_steps=steps, batch_size=50, lr=0.1, lr_decay=1.0,
               wd=1e-3, clip=10.0, augment=augment, rho=0.1, lamb=0.1, alpha=0.1, device=str(device),
               keep_clients=False, quiet=True)
    out = {}
    for mode in modes:                               # "compile": the vmapped step under torch.compile
        run = Run(RunConfig(**cfg, client_parallel="vmap" if mode == "compile" else mode,
                            compile=mode == "compile"), dataset=ds)
        out[mode] = run.round                        # measure()'s warm-up round pays the compilation
    shape = ds.input_shape
    clients = [(ds.x_train[ix].numpy(), ds.y_train[ix].numpy()) for ix in ds.natural_clients]
    ref = ReferenceSim(algo, lambda: build_model(model, shape, 10), clients, active=10, local_steps=steps,
                       batch_size=50, lr=0.1, augment=augment, clip=10.0, rho=0.1, lamb=0.1, alpha=0.1, wd=1e-3,
                       seed=0, device=str(device))
    out["reference"] = ref.round
    out["floor"] = floor(model, ds, steps, device, passes=2 if algo in ("fedsam", "fedsmoo") else 1)
    return out


def floor(model, ds, steps, device, passes):
    """The compute floor of a round: 10 clients x K steps x ``passes`` bare forward + backward passes of one
    persistent module on one resident batch of 50 (no optimizer, no data movement, no algorithm)."""
    import torch.nn.functional as F
    m = build_model(model, ds.input_shape, 10).to(device)
    x, y = ds.x_train[:50].to(device), ds.y_train[:50].to(device)

    def f():
        for _ in range(10 * steps * passes):
            m.zero_grad(set_to_none=True)
            F.cross_entropy(m(x), y).backward()
    return f


def measure(fns: dict, rounds: int, device) -> dict:
    """Best-of-``rounds`` seconds per runner, interleaved after one warm-up round each; then one more round each
    for the peak memory (apart, so that trimming the heap does not slow the timed rounds)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    clock = time.perf_counter if device.type == "cuda" else time.process_time     # CPU: this process's seconds
    best = {k: float("inf") for k in fns}
    peak = {k: 0.0 for k in fns}
    for f in fns.values():
        f()
    for _ in range(rounds):
        for k, f in fns.items():
            sync()
            t0 = clock()
            f()
            sync()
            best[k] = min(best[k], clock() - t0)
    for k, f in fns.items():
        with Peak(device) as p:
            f()
        peak[k] = p.mb
    return {"s": best, "mb": peak}


def reference_doc() -> str:
    """The first line of the reference's docstring, so the table says which reference it timed."""
    import reference_sim
    return (reference_sim.__doc__ or "no docstring").strip().splitlines()[0].rstrip(".")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--algos", default=",".join(ALGOS))
    p.add_argument("--rounds", type=int, default=2, help="timed rounds per runner (best of), after one warm-up")
    p.add_argument("--steps", default=None, help="local steps per model, e.g. 'cnn=5,resnet18gn=1' (default: 50; "
                   "on CPU cnn=2, resnet18gn=1)")
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--modes", default="loop,vmap,compile", help="ours to time: loop, vmap, compile (vmap under "
                   "--compile); vmap of a conv net on a CPU is slow; the table says 'not run' for a mode left out")
    p.add_argument("--no-write", action="store_true", help="print the table only")
    a = p.parse_args(argv)
    device = resolve(a.device)
    set_threads(a.threads)
    steps = {} if device.type == "cuda" else dict(CPU_STEPS)
    if a.steps:
        steps.update({k: int(v) for k, v in (s.split("=") for s in a.steps.split(","))})
    machine = torch.cuda.get_device_name(device) if device.type == "cuda" else \
        f"{platform.machine()} CPU, {os.cpu_count()} cores"
    head = (f"{machine}, torch {torch.__version__}, {a.threads} thread(s), device {device}; 10 of {a.clients} "
            f"clients x K local steps x batch 50, best of {a.rounds} interleaved rounds, evaluation excluded; "
            f"reference = benchmarks/reference_sim.py ({reference_doc()}); "
            + ("wall seconds" if device.type == "cuda" else "CPU seconds of this process (the machine is shared; "
               "one thread, so CPU time is the round's cost without the wait for a core)"))
    rows = ["| model | P | algorithm | K | reference s/round | loop s/round | vmap s/round | vmap+compile s/round "
            "| floor s/round | client-steps/s (best) | speed-up loop | speed-up vmap | speed-up compile "
            "| best possible (reference / floor) | peak MiB ref / loop / vmap / compile |", "|" + "---|" * 15]
    print(head)
    print("\n".join(rows), flush=True)
    for model in a.models.split(","):
        K = steps.get(model, 50)
        ds = dataset(MODELS[model], a.clients, max(250, 50 * K // 5))
        P = sum(t.numel() for t in build_model(model, MODELS[model], 10).parameters())
        for algo in a.algos.split(","):
            modes = a.modes.split(",")
            r = measure(runners(model, algo, ds, K, device, ds.augmentable, modes), a.rounds, device)
            s, mb = r["s"], r["mb"]
            sec = {m: f"{s[m]:.3f}" if m in s else "not run" for m in MODES}
            up = {m: f"{s['reference'] / s[m]:.2f}x" if m in s else "" for m in MODES}
            mem = " / ".join(f"{mb[m]:.0f}" if m in mb else "-" for m in ("reference", *MODES))
            ours = min(s[m] for m in modes)
            row = (f"| {model} | {P:,} | {algo} | {K}{'' if K == 50 else ' (of 50)'} | {s['reference']:.3f} | "
                   + " | ".join(sec[m] for m in MODES) + f" | {s['floor']:.3f} | {10 * K / ours:.0f} | "
                   + " | ".join(up[m] for m in MODES) + f" | {s['reference'] / s['floor']:.2f}x | {mem} |")
            rows.append(row)
            print(row, flush=True)
    if device.type != "cuda":
        rows.append("| GPU rows | | | | not measured (no GPU in this session) |" + " |" * 10)
    if not a.no_write:
        write(head, rows, device)


def write(head, rows, device):
    path = Path(__file__).resolve().parent / "RESULTS.md"
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    models = dict.fromkeys(f"{c[0][2:]} K={c[3].split()[0]}" for c in (r.split(" | ") for r in rows[2:])
                           if not c[0].startswith("| GPU"))
    title = f"{SECTION} ({'CUDA' if device.type == 'cuda' else 'CPU'}: {', '.join(models)})"
    block = f"{title}\n\n{head}\n\n" + "\n".join(rows) + "\n"
    pat = re.compile(rf"^{re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    text = pat.sub(lambda _: block + "\n", text) if pat.search(text) else text.rstrip("\n") + "\n\n" + block
    path.write_text(text)
    print(f"-> {path}")


if __name__ == "__main__":
    main()
