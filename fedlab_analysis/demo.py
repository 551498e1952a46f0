"""`make demo`: the main job on embedded data, in about a minute on 2 CPU cores.

FedAvg on scikit-learn's digits (MLP, 20 clients, Dirichlet 0.3, half active, batch 10, 5 local epochs,
lr 0.1, 30 rounds): prints the final test accuracy and writes to --out the learning curve, the partition heat
map, the run directory (config, metrics.jsonl, checkpoints) and the probes' results on the final checkpoint.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from . import plots
from .config import RunConfig
from .trainers.loop import train

DEMO = dict(algo="fedavg", dataset="digits", model="mlp", clients=20, partition="dirichlet", dir_alpha=0.3,
            active_ratio=0.5, batch_size=10, local_epochs=5, lr=0.1, lr_decay=1.0, wd=0.0, rounds=30, seed=0)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fedlab_analysis.demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="out/demo")
    p.add_argument("--rounds", type=int, default=DEMO["rounds"])
    args = p.parse_args(argv)
    out = Path(args.out)
    import torch
    torch.set_num_threads(1)                # the demo MLP runs several times faster on one thread than two
    t0 = time.perf_counter()
    cfg = RunConfig(**{**DEMO, "rounds": args.rounds, "quiet": False})
    run = train(cfg, out / "fedavg")
    rows = plots.read_metrics(out / "fedavg")
    print(f"FedAvg on digits, {cfg.clients} clients, Dirichlet {cfg.dir_alpha}: "
          f"final test accuracy {rows[-1]['test_acc']:.4f} after {run.t} rounds ({time.perf_counter() - t0:.1f} s)")
    plots.save(plots.learning_curves({"FedAvg": rows}, "FedAvg on digits (MLP, Dir 0.3)"), out / "learning_curve.png")
    from .data import plot_partition
    plots.save(plot_partition(run.part.counts, title=f"digits, Dirichlet {cfg.dir_alpha}, {cfg.clients} clients"),
               out / "partition.png")
    summary = {"final": rows[-1], "seconds": time.perf_counter() - t0}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"wrote {out}/learning_curve.png, {out}/partition.png, {out}/fedavg/ (metrics.jsonl, ckpt/last.pt)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
