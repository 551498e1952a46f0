"""FedInit Fig. 2 at small scale: accuracy and divergence over rounds for several beta of relaxed initialisation.

Paper (Sun, Shen, Tao, Fig. 2): FedAvg+RI on CIFAR-10 (ResNet-18-GN), Dir-0.6 10%-100 and
Dir-0.1 5%-200, beta = 0, two negative and positive values. Claims: beta > 0 lowers the divergence and gains at
least 2% accuracy in every setup; negative beta gives larger divergence and worse accuracy "in most cases"; RI
makes the divergence fluctuate early. The curves are the released code's divergence (1/|S|) sum_{i in S}
||w^t_{i,K} - w^{t+1}||^2 over the selected clients (the authors' released code); the theory's Delta^{t+1} =
(1/C) sum_{i in C} ||w_{i,K}^{last} - w^{t+1}||^2 averages over ALL clients, stale ones included.

Here: mnist1d, CNN1d, Dirichlet 0.1 over 20 clients at 20% (Bernoulli, the simulator), 10 local steps of 50
samples, lr 0.1, 40 rounds, beta in {-0.2, -0.1, 0, 0.1, 0.3}, both aggregations: Algorithm 1's mean of the final
local models (final_avg) and the code's update measured from the RI start (delta_from_init); both divergences by the
consensus hook. Writes paper_figures/out/fedinit_fig2_consensus/{fig.png, data.json}.

    python paper_figures/fedinit_fig2_consensus.py [--rounds 40]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from fedlab_analysis.config import RunConfig
from fedlab_analysis.plots import figure, save
from fedlab_analysis.probes import consensus
from fedlab_analysis.trainers.engine import Run

OUT = Path(__file__).parent / "out" / "fedinit_fig2_consensus"
BETAS = (-0.2, -0.1, 0.0, 0.1, 0.3)
AGGS = {"final_avg": "Alg. 1: mean of final models", "delta_from_init": "code: update from the RI start"}
CLAIM = ("FedInit Fig. 2 claims: beta > 0 lowers the divergence and gains >= 2% accuracy; beta < 0 raises the "
         "divergence and lowers accuracy")
PANELS = (("test_acc", "test accuracy"), ("divergence", "code: (1/|S|) sum_S ||w_i,K - w^{t+1}||^2"),
          ("fedinit_delta", "paper: (1/C) sum_C ||w_i^last - w^{t+1}||^2"))


def accuracy_hook(rows: list):
    def hook(event, run, ctx, x):
        if event == "round":
            rows.append(run.evaluate(run.Xte, run.Yte)[1])
    return hook


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    t0, curves = time.perf_counter(), {}
    for agg in AGGS:
        for beta in BETAS:
            cfg = RunConfig(algo="fedinit", beta=beta, ri_agg=agg, dataset="mnist1d", model="cnn1d", clients=20,
                            active_ratio=0.2, partition="dirichlet", dir_alpha=0.1, local_steps=10, batch_size=50,
                            lr=0.1, rounds=args.rounds, seed=args.seed, quiet=True)
            run, hook, acc = Run(cfg), consensus.make_hook(), []
            run.callbacks += [hook, accuracy_hook(acc)]
            for _ in range(cfg.rounds):
                run.round()
            curves[agg, beta] = {"test_acc": acc, **{k: [r[k] for r in hook.rows] for k, _ in PANELS[1:]}}
            print(f"{agg:15s} beta={beta:+.1f}  acc {np.mean(acc[-5:]):.3f}  divergence "
                  f"{np.mean(curves[agg, beta]['divergence'][args.rounds // 2:]):.3f}", flush=True)

    late = slice(args.rounds // 2, None)         # second half of training
    summary = {agg: {beta: {k: float(np.mean(curves[agg, beta][k][late])) for k, _ in PANELS} for beta in BETAS}
               for agg in AGGS}
    fig, ax = figure(ncols=3, nrows=2, w=4.3, h=3.0)
    for i, agg in enumerate(AGGS):
        for j, (k, title) in enumerate(PANELS):
            for beta in BETAS:
                ax[i, j].plot(np.arange(1, args.rounds + 1), curves[agg, beta][k], lw=1.1,
                              label=f"beta={beta:+.1f}: {summary[agg][beta][k]:.3g}")
            ax[i, j].set(xlabel="round", title=f"{title}" if i == 0 else None,
                         yscale="log" if k == "fedinit_delta" else "linear")
            ax[i, j].legend(fontsize=6, title="late mean", title_fontsize=6)
        ax[i, 0].set_ylabel(AGGS[agg], fontsize=8)
    lines = [f"beta = {' / '.join(f'{b:+.1f}' for b in BETAS)}"]
    for agg in AGGS:
        s = summary[agg]
        lines.append(f"{agg}: " + "; ".join(f"{name} " + " / ".join(f"{s[b][k]:.3g}" for b in BETAS)
                                            for k, name in (("divergence", "code divergence"),
                                                            ("fedinit_delta", "paper Delta"), ("test_acc", "acc"))))
    fig.suptitle(f"{CLAIM}.\nMeasured (CNN1d on mnist1d, Dir-0.1, 20 clients at 20%, 10 local steps, second-half "
                 f"means; a round that draws one client has code divergence 0 under final_avg):\n" + "\n".join(lines),
                 fontsize=8)
    fig.tight_layout()
    OUT.mkdir(parents=True, exist_ok=True)
    save(fig, OUT / "fig.png")
    data = {"claim": CLAIM, "measured": lines, "summary": {a: {str(b): v for b, v in s.items()} for a, s in
                                                          summary.items()},
            "curves": {f"{a}/beta={b}": c for (a, b), c in curves.items()}, "seconds": time.perf_counter() - t0}
    (OUT / "data.json").write_text(json.dumps(data, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
