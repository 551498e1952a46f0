"""FedInit Fig. 1: sensitivity of the test accuracy to the local interval K and the relaxation coefficient beta.

Paper (Sun, Shen, Tao, "Understanding How Consistency Works in Federated Learning via Stage-wise Relaxed
Initialization", Sec. 5, Fig. 1): on CIFAR-10, (a) accuracy rises and then falls as the local interval K grows,
so there is an optimal K; (b) accuracy is "stable within its valid range" of beta and training "diverges
quickly" above a threshold.

QUICK: FedInit (Algorithm 1) on digits with an MLP, 20 clients, Dirichlet 0.1, 20% per round, 40 rounds;
(a) K in {1, 3, 10, 30} local steps at beta = 0.1, (b) beta in {0, 0.1, 0.3, 0.6, 1, 1.5, 3} at K = 10;
3 seeds. Accuracy = mean test accuracy of the last 10 rounds. FULL: ResNet-18-GN on CIFAR-10, 10% of 100.

    python paper_figures/fedinit_fig1_sensitivity.py [--full --data-dir DIR] [--seeds 3]
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from fedlab_analysis.plots import figure
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # `python paper_figures/x.py` from the root
from paper_figures import common  # noqa: E402

NAME = "fedinit_fig1_sensitivity"
# the FedInit QUICK setting shared by the FedInit scripts: FedAvg reaches ~0.95 test accuracy here
QUICK = dict(algo="fedinit", beta=0.1, clients=20, active_ratio=0.2, dir_alpha=0.1, local_steps=10, rounds=40)
FULL = dict(algo="fedinit", beta=0.1, dir_alpha=0.1, local_epochs=5, local_steps=None, rounds=500)
KS = (1, 3, 10, 30)
BETAS = (0.0, 0.1, 0.3, 0.6, 1.0, 1.5, 3.0)
# mnist tier: FedInit in the paper's protocol (Sec. 5: 10% of 100 clients, Dirichlet 0.1, 5 local epochs, beta 0.1);
# K in {1, 2, 5} local epochs (an interior optimum needs three points; 10 epochs would double a run) and beta in
# {0, 0.1, 3} (two stable points, then past the divergence threshold)
MNIST = dict(algo="fedinit", beta=0.1, dir_alpha=0.1)
DEFS = {"quick": QUICK, "mnist": MNIST, "full": FULL}
MNIST_KS, MNIST_BETAS = (1, 2, 5), (0.0, 0.1, 3.0)


def grids(tier) -> tuple:
    """(K key, K grid, beta grid) of the tier."""
    t = common.tier_of(tier)
    if t == "mnist":
        return "local_epochs", MNIST_KS, MNIST_BETAS
    return ("local_steps" if t == "quick" else "local_epochs"), KS, BETAS


def run_list(tier, seeds) -> list:
    k_key, ks, betas = grids(tier)
    base = {**DEFS[common.tier_of(tier)], "on_divergence": "continue"}
    ovs = [{**base, k_key: k} for k in ks] + [{**base, "beta": b} for b in betas]
    return [(ov, s, common.main_tag(tier)) for ov in ovs for s in common.seed_list(seeds)]


def late_acc(run: dict, last: int = 10) -> float:
    """Mean test accuracy over the last ``last`` evaluated rounds (the paper reports the best smoothed accuracy
    of the last 50 rounds)."""
    return float(np.mean([r["test_acc"] for r in run["rows"][-last:]]))


def sweep(overrides: list[dict], seeds, tier, out_root) -> tuple[list[list[float]], list[list[bool]]]:
    """Late accuracy [setting, seed], and whether each run went non-finite: a run that diverges is a data point
    of this figure, so it goes on (--on-divergence continue) and its rounds are marked."""
    base = {**DEFS[common.tier_of(tier)], "on_divergence": "continue"}
    runs = [common.train_seeds({**base, **o}, seeds, out_root, tier, tag=common.main_tag(tier))
            for o in overrides]
    return ([[late_acc(r) for r in rs] for rs in runs],
            [[any("diverged" in row for row in r["rows"]) for r in rs] for rs in runs])


def compute(seeds=3, tier="quick", out_root=None) -> dict:
    k_key, KS, BETAS = grids(tier)
    acc_k, _ = sweep([{k_key: k} for k in KS], seeds, tier, out_root)
    acc_b, nonfinite = sweep([{"beta": b} for b in BETAS], seeds, tier, out_root)
    acc_k, acc_b = np.nan_to_num(np.array(acc_k)), np.nan_to_num(np.array(acc_b))   # [K | beta, seed]
    i = 1 + int(np.argmax(acc_k[1:-1].mean(1)))                       # best interior K
    edge = acc_k[[0, -1]][np.argmax(acc_k[[0, -1]].mean(1))]           # the better end
    rise_fall = common.mean_std(acc_k[i] - edge)
    m = acc_b.mean(1)
    stable = [b for b, a in zip(BETAS, m) if a >= m[0] - 0.02]          # no more than 2 points worse
    diverged = [b for b, a in zip(BETAS, m) if a < m[0] - 0.10]
    flat_then_diverge = bool(diverged) and len(stable) >= 2 and all(b in stable for b in BETAS if b < min(diverged))
    return {"config": common.config(DEFS[common.tier_of(tier)], 0, tier).to_dict(), "seeds": seeds,
            "K": list(KS), "acc_K": acc_k.tolist(), "beta": list(BETAS), "acc_beta": acc_b.tolist(),
            "nonfinite_runs": {str(b): int(sum(n)) for b, n in zip(BETAS, nonfinite)},
            "claims": {"optimal_interior_K": {"best_K": KS[i], "effect": rise_fall,
                                              "verdict": common.verdict(*rise_fall)},
                       "flat_then_diverges": {"stable_betas": stable, "diverged_betas": diverged,
                                              "verdict": common.verdict(None, 0, flat_then_diverge)}},
            "verdict": common.verdict(*rise_fall)}


def plot(res: dict):
    fig, ax = figure(ncols=2, w=4.4, h=3.3)
    for j, (x, key, lab) in enumerate([(res["K"], "acc_K", "local steps K"), (res["beta"], "acc_beta", "beta")]):
        a = np.array(res[key])
        ax[0, j].errorbar(x, a.mean(1), yerr=a.std(1, ddof=1), fmt="o-", capsize=3)
        ax[0, j].set(xlabel=lab, ylabel="test accuracy (last 10 rounds)", xscale="log" if j == 0 else "linear",
                     title=f"({'ab'[j]}) accuracy vs {lab}")
    c = res["config"]
    fig.suptitle(f"FedInit Fig. 1 — FedInit on {c['dataset']} ({c['model']}), {c['clients']} clients at "
                 f"{c['active_ratio']:.0%}, Dir-{c['dir_alpha']}, {c['rounds']} rounds, mean ± std over "
                 f"{res['seeds']} seeds", fontsize=9.5)
    fig.tight_layout()
    k, b = res["claims"]["optimal_interior_K"], res["claims"]["flat_then_diverges"]
    common.annotate_verdict(fig, f"an interior K is best: {k['verdict']} (K={k['best_K']}, "
                                 f"{k['effect'][0]:+.3f} ± {k['effect'][1]:.3f} over the better end); flat in beta, "
                                 f"then diverges: {b['verdict']} (at most 2 points below beta=0: {b['stable_betas']}; "
                                 f"10+ points worse: {b['diverged_betas']}); runs whose loss went non-finite: "
                                 + (", ".join(f"beta={k} ({n} of {res['seeds']})" for k, n in
                                              res["nonfinite_runs"].items() if n) or "none"))
    return fig


def main(argv=None):
    return common.run_script(NAME, compute, __doc__, argv, plot,
                             lambda res: {k: v["verdict"] for k, v in res["claims"].items()})


if __name__ == "__main__":
    main()
