"""Peak memory and checkpoint size of one round in the papers' setting, measured on the CPU.

    python benchmarks/memory.py [--algos fedavg,scaffold,fedsmoo,fedlesam] [--code DIR ...] [--local-steps 2]
                                [--budget 11]

ResNet-18-GN, 100 clients, 10% active (fixed sampling: exactly 10), one round, default flags otherwise. CIFAR-10
is not needed: the data is a synthetic stand-in of its size (50,000 + 10,000 images 3x32x32, 10 classes, float32,
Dirichlet 0.6 partition). Each run is a fresh subprocess (``--code DIR`` imports fedlab_analysis from DIR, e.g. a
checkout of main for the 'before' rows); its peak RSS is ``resource.getrusage`` ru_maxrss, and the checkpoint
size that of ckpt/last.pt. Memory does not depend on the number of local steps, so a few keep it short. A run is
skipped (and says so) when its plan exceeds the available RAM, and each run's address space is capped at the
available RAM (+2 GiB) so that one outgrowing it fails alone ("failed: ...") instead of pushing the shared machine
into swap or the OOM killer. Where the plan (fedlab_analysis/plan.py) would not fit an algorithm's round of all
10 active clients at once into ``--budget`` GiB, a second row runs it in the chunks the plan picks for that budget
(``--client-chunk``): what a machine with that much memory gets by default. Prints a Markdown table.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
GiB = 2 ** 30


def setting(algo: str, local_steps: int, chunk: int | None = None) -> dict:
    return dict(algo=algo, dataset="cifar10", model="resnet18gn", clients=100, active_ratio=0.1, sampling="fixed",
                rounds=1, local_steps=local_steps, batch_size=50, partition="dirichlet", dir_alpha=0.6, seed=0,
                quiet=True, eval_train_samples=2000, client_chunk=chunk)


def one(algo: str, local_steps: int, chunk: int | None = None) -> dict:
    """In this process: one round, then peak RSS and last.pt's size (JSON on stdout)."""
    import torch
    from fedlab_analysis.config import RunConfig
    from fedlab_analysis.data import Dataset
    from fedlab_analysis.trainers.loop import train
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    x, xt = (torch.randn(n, 32, 32, 3, generator=g).permute(0, 3, 1, 2) for n in (50000, 10000))  # channels-last,
    y, yt = (torch.randint(0, 10, (n,), generator=g) for n in (50000, 10000))   # as the trainer keeps images
    ds = Dataset.from_tensors(x, y, xt, yt, name="cifar10-synthetic", augmentable=True)
    assert ds.x_train.data_ptr() == x.data_ptr(), "the stand-in data was copied"
    del x, xt
    with tempfile.TemporaryDirectory() as out:
        run = train(RunConfig(**setting(algo, local_steps, chunk)), out, dataset=ds)
        size = os.path.getsize(os.path.join(out, "ckpt", "last.pt"))
    return {"peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "last_pt": size,
            "chunk": run.chunk}


def estimate(algo: str, local_steps: int, chunk: int | None = None, budget: float | None = None):
    """The plan of the setting: (its peak, its chunk), with ``budget`` bytes to fit instead of what is free."""
    from fedlab_analysis.config import RunConfig
    from fedlab_analysis.plan import plan
    p = plan(RunConfig(**setting(algo, local_steps, chunk)).validate(), budget=budget)
    return p.peak, p.chunk


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--algos", default="fedavg,scaffold,fedsmoo,fedlesam")
    ap.add_argument("--code", action="append", help="[LABEL=]DIR: a checkout whose fedlab_analysis to measure "
                    "(repeatable; e.g. before=/tmp/main-before); default: this one")
    ap.add_argument("--plan-only", action="store_true", help="print the plan for each algorithm; measure nothing")
    ap.add_argument("--local-steps", type=int, default=2)
    ap.add_argument("--budget", type=float, default=11.0, help="GiB: also run each algorithm in the chunks the plan "
                    "picks to fit this much, where it picks any")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--chunk", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.budget <= 0:
        print(f"error: --budget must be > 0 GiB (got {args.budget})", file=sys.stderr)
        return 2
    if args.one:
        print(json.dumps(one(args.one, args.local_steps, args.chunk)))
        return 0
    sys.path.insert(0, os.path.dirname(HERE))
    from fedlab_analysis.plan import free_memory
    from fedlab_analysis.provenance import machine
    if args.plan_only:
        print(f"| algorithm | plan (this code) | chunk for {args.budget:g} GiB | its plan |\n|---|---|---|---|")
        for algo in args.algos.split(","):
            C = estimate(algo, args.local_steps, budget=args.budget * GiB)[1]
            print(f"| {algo} | {estimate(algo, args.local_steps, budget=2**60)[0] / GiB:.2f} GiB | {C or 'all'} | "
                  f"{estimate(algo, args.local_steps, C)[0] / GiB:.2f} GiB |")
        return 0
    codes = [c.split("=", 1) if "=" in c else (os.path.basename(os.path.abspath(c)), c)
             for c in args.code or [os.path.dirname(HERE)]]
    print(f"# ResNet-18-GN, 100 clients, 10 active, 1 round of {args.local_steps} local steps, synthetic "
          f"CIFAR-10-sized data; {machine()}, 1 thread")
    print("| algorithm | code | clients at once | peak RSS | last.pt | plan (this code) |")
    print("|---|---|---|---|---|---|")
    runs = []
    for algo in args.algos.split(","):
        C = estimate(algo, args.local_steps, budget=args.budget * GiB)[1]
        runs += [(algo, None), *([(algo, C)] if C else [])]
    for algo, C in runs:
        est = estimate(algo, args.local_steps, C, budget=None if C else 2**60)[0]
        at_once = f"{C} (plan for {args.budget:g} GiB)" if C else "all 10"
        for label, code in codes:
            avail = free_memory("cpu")
            if est > 0.95 * avail:
                print(f"| {algo} | {label} | {at_once} | not run: needs ~{est / GiB:.1f} GiB, {avail / GiB:.1f} GiB "
                      f"available | | {est / GiB:.2f} GiB |", flush=True)
                continue
            env = {**os.environ, "PYTHONPATH": os.path.abspath(code), "OMP_NUM_THREADS": "1"}
            cap = int(0.95 * avail) + 2 * GiB             # address-space cap: a run that outgrows RAM fails alone
            r = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", algo, "--local-steps",
                                str(args.local_steps), "--chunk", str(C or 10)], env=env,
                               capture_output=True, text=True, cwd=code,
                               preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (cap, cap)))
            if r.returncode:
                tail = (r.stderr.strip().splitlines() or ["?"])[-1][:80]
                print(f"| {algo} | {label} | {at_once} | failed: {tail} | | {est / GiB:.2f} GiB |", flush=True)
                continue
            m = json.loads(r.stdout.strip().splitlines()[-1])
            at_once = f"{at_once}" if m["chunk"] == C else f"{m['chunk'] or 'all 10'} (the run's own choice)"
            print(f"| {algo} | {label} | {at_once} | {m['peak_rss'] / GiB:.2f} GiB | {m['last_pt'] / 1e9:.2f} GB | "
                  f"{est / GiB:.2f} GiB |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
