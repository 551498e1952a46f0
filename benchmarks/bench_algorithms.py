"""Smoke benchmark: every algorithm on digits (MLP, 20 clients, Dirichlet 0.1), one table of final test
accuracy and seconds per round. A script, not a test: `python benchmarks/bench_algorithms.py [--rounds 30]`.

FedALS runs with full participation and tau local steps per round (its definition), so its seconds per round
are not comparable with the others'; the table says so.
"""
from __future__ import annotations

import argparse
import time

import torch

from fedlab_analysis.config import RunConfig
from fedlab_analysis.provenance import machine
from fedlab_analysis.trainers import ALGORITHMS
from fedlab_analysis.trainers.loop import train


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--algos", nargs="*", default=list(ALGORITHMS))
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    base = dict(dataset="digits", model="mlp", clients=20, partition="dirichlet", dir_alpha=0.1, active_ratio=0.5,
                batch_size=20, local_epochs=2, lr=0.1, lr_decay=0.998, wd=1e-3, rounds=args.rounds,
                seed=args.seed, eval_every=args.rounds, quiet=True, keep_clients=False)
    print(f"# digits, mlp(200,200), 20 clients, Dir 0.1, active 0.5, bs 20, 2 local epochs, lr 0.1, "
          f"{args.rounds} rounds; {machine()}, 1 thread")
    print(f"| {'algorithm':<16}| final test acc | s / round | grads / round | note |")
    print("|---|---|---|---|---|")
    for name in args.algos:
        kw = dict(base, algo=name)
        note = ""
        if name.startswith("fedals"):
            kw.update(active_ratio=1.0, tau=5, alpha=10)
            note = "full participation, tau=5 steps per round"
        t0 = time.perf_counter()
        run = train(RunConfig(**kw))
        sec = (time.perf_counter() - t0) / args.rounds
        print(f"| {name:<16}| {run.last_row['test_acc']:.4f} | {sec:.3f} | {run.n_grads / args.rounds:.0f} | {note} |",
              flush=True)


if __name__ == "__main__":
    main()
