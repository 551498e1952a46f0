"""Peak memory and checkpoint size of one round in the papers' setting, measured on the CPU.

    python benchmarks/memory.py [--algos fedavg,scaffold,fedsmoo,fedlesam] [--code DIR ...] [--local-steps 2]

ResNet-18-GN, 100 clients, 10% active (fixed sampling: exactly 10), one round, default flags otherwise. CIFAR-10
is not needed: the data is a synthetic stand-in of its size (50,000 + 10,000 images 3x32x32, 10 classes, float32,
Dirichlet 0.6 partition). Each run is a fresh subprocess (``--code DIR`` imports fedlab_analysis from DIR, e.g. a
checkout of main for the 'before' rows); its peak RSS is ``resource.getrusage`` ru_maxrss, and the checkpoint
size that of ckpt/last.pt. Memory does not depend on the number of local steps, so a few keep it short. A run is
skipped (and says so) when its plan exceeds the available RAM, and each run's address space is capped at the
available RAM (+2 GiB) so that one outgrowing it fails alone ("failed: ...") instead of pushing the shared machine
into swap or the OOM killer. Prints a Markdown table.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
GiB = 2 ** 30


def setting(algo: str, local_steps: int) -> dict:
    return dict(algo=algo, dataset="cifar10", model="resnet18gn", clients=100, active_ratio=0.1, sampling="fixed",
                rounds=1, local_steps=local_steps, batch_size=50, partition="dirichlet", dir_alpha=0.6, seed=0,
                quiet=True, eval_train_samples=2000)


def one(algo: str, local_steps: int) -> dict:
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
        train(RunConfig(**setting(algo, local_steps)), out, dataset=ds)
        size = os.path.getsize(os.path.join(out, "ckpt", "last.pt"))
    return {"peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "last_pt": size}


def estimate(algo: str, local_steps: int) -> float:
    from fedlab_analysis.config import RunConfig
    from fedlab_analysis.plan import plan
    return plan(RunConfig(**setting(algo, local_steps)).validate()).peak


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--algos", default="fedavg,scaffold,fedsmoo,fedlesam")
    ap.add_argument("--code", action="append", help="[LABEL=]DIR: a checkout whose fedlab_analysis to measure "
                    "(repeatable; e.g. before=/tmp/main-before); default: this one")
    ap.add_argument("--plan-only", action="store_true", help="print the plan for each algorithm; measure nothing")
    ap.add_argument("--local-steps", type=int, default=2)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one, args.local_steps)))
        return 0
    sys.path.insert(0, os.path.dirname(HERE))
    from fedlab_analysis.plan import free_memory
    import torch
    if args.plan_only:
        print("| algorithm | plan (this code) |\n|---|---|")
        for algo in args.algos.split(","):
            print(f"| {algo} | {estimate(algo, args.local_steps) / GiB:.2f} GiB |")
        return 0
    codes = [c.split("=", 1) if "=" in c else (os.path.basename(os.path.abspath(c)), c)
             for c in args.code or [os.path.dirname(HERE)]]
    print(f"# ResNet-18-GN, 100 clients, 10 active, 1 round of {args.local_steps} local steps, synthetic "
          f"CIFAR-10-sized data; torch {torch.__version__}, {platform.machine()}, 1 thread")
    print("| algorithm | code | peak RSS | last.pt | plan (this code) |")
    print("|---|---|---|---|---|")
    for algo in args.algos.split(","):
        est = estimate(algo, args.local_steps)
        for label, code in codes:
            avail = free_memory("cpu")
            if est > 0.95 * avail:
                print(f"| {algo} | {label} | not run: needs ~{est / GiB:.1f} GiB, {avail / GiB:.1f} GiB available | "
                      f"| {est / GiB:.2f} GiB |", flush=True)
                continue
            env = {**os.environ, "PYTHONPATH": os.path.abspath(code), "OMP_NUM_THREADS": "1"}
            cap = int(0.95 * avail) + 2 * GiB             # address-space cap: a run that outgrows RAM fails alone
            r = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", algo, "--local-steps",
                                str(args.local_steps)], env=env, capture_output=True, text=True, cwd=code,
                               preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (cap, cap)))
            if r.returncode:
                tail = (r.stderr.strip().splitlines() or ["?"])[-1][:80]
                print(f"| {algo} | {label} | failed: {tail} | | {est / GiB:.2f} GiB |", flush=True)
                continue
            m = json.loads(r.stdout.strip().splitlines()[-1])
            print(f"| {algo} | {label} | {m['peak_rss'] / GiB:.2f} GiB | {m['last_pt'] / 1e9:.2f} GB | "
                  f"{est / GiB:.2f} GiB |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
