"""Probe speed: torch threads for the Hessian probe, and the stability probe's coupled rounds against the trainer's.

    python benchmarks/bench_probes.py [--repeats 5]

1. Seconds per Hessian-vector product with 1 and 2 torch threads, interleaved in one process (so machine load hits
   both alike), on the demo's MLP (all 1437 digits training samples) and a ResNet-20 with BatchNorm (256 samples,
   train mode). The probe command line's --threads default follows the faster one.
2. One round of the stability probe (the base run and one coupled neighbouring run) against two rounds of the
   trainer's engine alone (the same work without the probe), interleaved. A ratio near 1 means the coupled runs
   are as fast as the trainer's rounds.
3. ``--resnet N``: the hessian and trace probes on a ResNet-18-GN (11.2 M parameters, the papers' CIFAR model) at
   N CIFAR-10-shaped samples (3x32x32; Gaussian images and random labels, since no CIFAR-10 files are on this
   machine; the model at its initialisation), through the Python entry points (fedlab_analysis.hessian / .trace),
   ours beside PyHessian 0.1 (``--backend pyhessian``, ``make extras-hessian``) on the same module and data: Hessian-
   vector products, seconds, and the answers with their error (Lanczos residual bound; trace standard error).
   PyHessian's trace stops when |mean_k - mean_{k-1}| / (mean_{k-1} + 1e-6) < tol, which a negative running mean
   always meets, so a row with tol = -inf (never met) runs every probe.
   On a GPU (gpu_check) the same function runs at full size; where none was lent the rows say "not measured".
Prints Markdown tables for benchmarks/RESULTS.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import time

import torch

from fedlab_analysis.config import RunConfig
from fedlab_analysis.probes.curvature import HessianOperator
from fedlab_analysis.provenance import machine
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


def resnet_beside_pyhessian(n: int, products: int, device: str = "cpu") -> None:
    import fedlab_analysis as fl
    from fedlab_analysis.models import build_model
    model = build_model("resnet18gn", (3, 32, 32), 10).to(device)
    g = torch.Generator().manual_seed(0)
    data = (torch.randn(n, 3, 32, 32, generator=g).to(device), torch.randint(0, 10, (n,), generator=g).to(device))
    P = sum(p.numel() for p in model.parameters())
    print(f"ResNet-18-GN, P = {P:,}, {n} samples 3x32x32, {device}, {torch.get_num_threads()} thread(s)\n")
    print("| question | tool | HVPs | s total | s / HVP | answer |\n|---|---|---|---|---|---|")
    rows = {}
    for tool, kw in (("ours (Lanczos, tol 1e-3)", {}), ("PyHessian 0.1 (power, tol 1e-3)", {"backend": "pyhessian"})):
        t0 = time.perf_counter()
        r = fl.hessian(model, data, top_k=1, normalised="off", tol=1e-3, **kw)
        s = time.perf_counter() - t0
        lam = r["eigenvalues"][0]
        err = f" +- {r['residuals'][0]:.2g} (residual bound)" if "residuals" in r else ""
        rows[("eig", tool)] = lam
        print(f"| top eigenvalue | {tool} | {r['n_products']} | {s:.1f} | {s / r['n_products']:.2f} | "
              f"{lam:.5g}{err} |")
    for tool, kw in ((f"ours (Hutch++, {products} products)", {}),
                     (f"ours (Hutchinson, {products} products)", {"method": "hutchinson"}),
                     (f"PyHessian 0.1 (Hutchinson, maxIter {products}, tol 1e-3: its default stop)",
                      {"backend": "pyhessian", "tol": 1e-3}),
                     (f"PyHessian 0.1 (Hutchinson, maxIter {products}, tol -inf: every probe)",
                      {"backend": "pyhessian", "tol": float("-inf")})):
        t0 = time.perf_counter()
        r = fl.trace(model, data, products=products, **kw)
        s = time.perf_counter() - t0
        se = r.get("stderr")
        rows[("trace", tool)] = (r["trace"], se)
        print(f"| trace | {tool} | {r['n_products']} | {s:.1f} | {s / r['n_products']:.2f} | {r['trace']:.5g}"
              + (f" +- {se:.2g} ({r.get('n_probes')} probes)" if se else "") + " |")
    (a, b) = [v for k, v in rows.items() if k[0] == "eig"]
    print(f"\ntop eigenvalue: ours vs PyHessian differ by {abs(a - b) / abs(a):.1e} (relative)")
    t = [v for k, v in rows.items() if k[0] == "trace"]
    for i, what in ((2, "its default stop"), (3, "every probe")):
        z = abs(t[0][0] - t[i][0]) / (t[0][1] ** 2 + t[i][1] ** 2) ** 0.5
        print(f"trace: ours (Hutch++) vs PyHessian ({what}) differ by {z:.2f} combined standard errors")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--resnet", type=int, default=0, metavar="N", help="only part 3, at N samples")
    p.add_argument("--products", type=int, default=30, help="part 3: trace products")
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    print(f"{machine(a.device)}, {torch.get_num_threads()} threads at start\n")
    if a.resnet:
        torch.set_num_threads(1)
        resnet_beside_pyhessian(a.resnet, a.products, a.device)
        raise SystemExit
    hvp_threads(a.repeats)
    print()
    stability_rounds(a.repeats)
