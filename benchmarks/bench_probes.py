"""Probe speed: torch threads for the Hessian probe, and the stability probe's coupled rounds against the trainer's.

    python benchmarks/bench_probes.py [--repeats 5]

1. Seconds per Hessian-vector product with 1 and 2 torch threads, interleaved in one process (so machine load hits
   both alike), on the demo's MLP (all 1437 digits training samples) and a ResNet-20 with BatchNorm (256 samples,
   train mode). The probe command line's --threads default follows the faster one.
2. One round of the stability probe (the base run and one coupled neighbouring run) against two rounds of the
   trainer's engine alone (the same work without the probe), interleaved. A ratio near 1 means the coupled runs
   are as fast as the trainer's rounds.
Prints Markdown tables for benchmarks/RESULTS.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import platform
import time

import torch

from fedlab_analysis.config import RunConfig
from fedlab_analysis.probes.curvature import HessianOperator
from fedlab_analysis.probes.common import functional, has_batchnorm
from fedlab_analysis.trainers.engine import Run


def _bundle(model: str, n: int):
    cfg = RunConfig(algo="fedavg", dataset="digits", model=model, clients=10, rounds=1, local_steps=2,
                    batch_size=32, seed=0, quiet=True)
    run = Run(cfg)
    f = functional(run.model, run.space, "train" if has_batchnorm(run.model) else "eval", 32)
    return f, run.w.clone(), run.X[:n], run.Y[:n]


def hvp_threads(repeats: int) -> None:
    print("| model | samples | s / HVP, 1 thread | s / HVP, 2 threads | 2 threads / 1 thread |\n|---|---|---|---|---|")
    for model, n in (("mlp", 1437), ("resnet20", 256)):
        f, theta, X, y = _bundle(model, n)
        op = HessianOperator(f, theta, (X, y), batch_size=1000)
        v = torch.randn(1, op.dim, generator=torch.Generator().manual_seed(0))
        t = {1: [], 2: []}
        for _ in range(repeats):
            for k in (1, 2):
                torch.set_num_threads(k)
                t0 = time.perf_counter()
                op.matmat(v)
                t[k].append(time.perf_counter() - t0)
        best = {k: min(ts) for k, ts in t.items()}
        print(f"| {model} | {n} | {best[1]:.4f} | {best[2]:.4f} | {best[2] / best[1]:.2f} |")
    torch.set_num_threads(1)


def stability_rounds(repeats: int) -> None:
    from fedlab_analysis.studies.stability import make_hook
    cfg = RunConfig(algo="fedavg", dataset="digits", model="mlp", clients=20, active_ratio=0.5, batch_size=10,
                    local_epochs=1, lr=0.1, rounds=repeats + 1, seed=0, quiet=True)
    base, alone = Run(cfg), Run(cfg)
    other = Run(dataclasses.replace(cfg, seed=1))
    hook = make_hook("stability", every=10**9, pairs=1, seed=0)
    base.callbacks.append(hook)
    base.round()                                  # the hook builds the neighbouring run in round 1
    alone.round()
    other.round()
    tp, tt = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        base.round()                              # base run + coupled neighbour
        tp.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        alone.round()
        other.round()                             # two plain trainer rounds
        tt.append(time.perf_counter() - t0)
    print("| work | s (best of %d) |\n|---|---|" % repeats)
    print(f"| stability probe: one coupled round (2 runs) | {min(tp):.3f} |")
    print(f"| trainer: two rounds | {min(tt):.3f} |")
    print(f"| ratio | {min(tp) / min(tt):.2f} |")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    print(f"torch {torch.__version__}, {platform.machine()}, {torch.get_num_threads()} threads at start\n")
    hvp_threads(a.repeats)
    print()
    stability_rounds(a.repeats)
