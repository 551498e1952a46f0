"""Seconds per grid point of a 21x21 random plane: fedlab_analysis vs loss-landscapes' ``random_plane``.

Same model, same evaluation data (scikit-learn digits, 1797 x 64, the whole set), filter-normalised
directions. Rows: the floor (one ``model(X)`` per point, nothing else; then the same plus ``F.cross_entropy``),
loss-landscapes 3.0.6 (``not installed`` when absent), and ours with 1, 8 and 32 grid points per vmapped
call and with 'auto'. The methods run in interleaved rounds (A B C .. A B C ..) and each keeps its best
round, so a load change on a shared machine hits all of them alike. The centre column is the value each
reports at the middle of the grid, against the true loss at the checkpoint: loss-landscapes' grid has no
point at the centre (its serpentine walk starts half a step off), ours is the checkpoint itself.
On a GPU (``--device cuda``) the "1 pts/call" row is the point-by-point loop the batched rows are
compared with.

    python benchmarks/bench_landscape.py [--grid 21] [--rounds 5] [--threads 1] [--device cpu] [--samples N]
"""
from __future__ import annotations

import argparse
import copy
import time

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn

from fedlab_analysis.params import ParamSpace, functional
from fedlab_analysis.probes.landscape import plane_random, surface


def models():
    mlp = nn.Sequential(nn.Linear(64, 200), nn.ReLU(), nn.Linear(200, 10))
    cnn = nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(),
                        nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(256, 10))
    return {"mlp 64-200-10": mlp, "cnn 8-16": cnn}


def train(model, X, y, steps=150, lr=0.1):
    """A few full-batch SGD steps so the centre is a low-loss point, not the initialisation."""
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(model(X), y).backward()
        opt.step()
    return model.eval()


def methods(model, X, y, grid, dev):
    """{name: () -> (centre value, caller's model unchanged?)}: one full grid per call."""
    n, mid = grid ** 2, grid // 2
    out = {}

    def forward_only():
        with torch.inference_mode():
            outs = [model(X) for _ in range(n)]
        return nn.functional.cross_entropy(outs[0], y).item(), "-"
    out["forward only (model(X) per point)"] = forward_only

    def floor():
        with torch.inference_mode():
            vals = [nn.functional.cross_entropy(model(X), y).item() for _ in range(n)]
        return vals[0], "-"
    out["forward + F.cross_entropy per point"] = floor

    try:
        from loss_landscapes import random_plane
        from loss_landscapes.metrics import Loss
    except ImportError:
        out["loss-landscapes 3.0.6 random_plane"] = None
    else:
        metric = Loss(nn.CrossEntropyLoss(), X, y)

        def ll():  # a fresh copy every round: random_plane leaves the model it is given moved
            victim = copy.deepcopy(model)
            Z = random_plane(victim, metric, distance=1, steps=grid, normalization="filter", deepcopy_model=False)
            same = all(torch.equal(p, q) for p, q in zip(model.parameters(), victim.parameters()))
            return Z[mid, mid], "yes" if same else "NO (left moved)"
        out["loss-landscapes 3.0.6 random_plane"] = ll

    space = ParamSpace.of_model(model)
    f = functional(model, space)
    theta = space.flatten(dict(model.named_parameters())).detach()
    d1, d2 = plane_random(space, theta, seed=0)
    for bp in (1, 8, 32, "auto"):
        def ours(bp=bp):
            before = [p.detach().clone() for p in model.parameters()]
            r = surface(f, theta, d1, d2, (X, y), grid=grid, batch_points=bp)
            same = all(torch.equal(p, q) for p, q in zip(before, model.parameters()))
            return r["loss"][mid][mid], "yes" if same else "NO"
        out[f"fedlab_analysis surface, {bp} pts/call"] = ours
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", type=int, default=21)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="1: the dev machines share 2 cores")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--samples", type=int, default=None, help="evaluate on the first N samples (default all)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dev, n = torch.device(a.device), a.grid ** 2
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    d = load_digits()
    X = torch.tensor(d.data / 16.0, dtype=torch.float32)
    y = torch.tensor(d.target)
    with torch.random.fork_rng():  # PyTorch's default initialisation, seeded, without touching the caller's RNG
        torch.manual_seed(0)
        nets = models()
    rows = []
    for name, model in nets.items():
        model = train(model, X, y).to(dev)
        Xd, yd = X[:a.samples].to(dev), y[:a.samples].to(dev)
        with torch.no_grad():
            true = nn.functional.cross_entropy(model(Xd), yd).item()
        table = methods(model, Xd, yd, a.grid, dev)
        best = {k: (float("inf"), float("nan"), "not installed") for k in table}
        for _ in range(a.rounds):
            for k, fn in table.items():
                if fn is None:
                    continue
                sync()
                t = time.perf_counter()
                centre, same = fn()
                sync()
                best[k] = (min(best[k][0], time.perf_counter() - t), float(centre), same)
        rows += [(name, k, t / n, c, true, same) for k, (t, c, same) in best.items()]

    print(f"{a.grid}x{a.grid} grid, digits {len(Xd)} samples, device {dev}, {a.threads} threads, "
          f"best of {a.rounds} interleaved rounds")
    print("| model | method | ms / point | speed-up vs 1 pt/call | centre value | true loss | centre - true "
          "| caller's model unchanged |")
    print("|---|---|---|---|---|---|---|---|")
    loop = {name: s for name, meth, s, *_ in rows if meth.endswith(", 1 pts/call")}
    for name, meth, s, c, true, same in rows:
        ms = "-" if np.isinf(s) else f"{1e3 * s:.3f}"
        diff = "-" if np.isnan(c) else f"{c - true:+.2e}"
        up = f"{loop[name] / s:.2f}x" if meth.startswith("fedlab_analysis") and not np.isinf(s) else "-"
        print(f"| {name} | {meth} | {ms} | {up} | {c:.6f} | {true:.6f} | {diff} | {same} |")


if __name__ == "__main__":
    main()
