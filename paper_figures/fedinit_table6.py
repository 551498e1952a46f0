"""FedInit Table 6: relaxed initialisation (RI) plugged into other algorithms.

Paper (Sun, Shen, Tao, "Understanding How Consistency Works in Federated Learning via Stage-wise Relaxed
Initialization", Sec. 5, Table 6, ResNet-18-GN on CIFAR-10): "+RI" (start local training at
w + beta (w - w_i^last)) adds 2-5 points to FedAvg, FedAdam, FedSAM and SCAFFOLD (e.g. FedAvg 72.53 -> 75.95 at
10%-100 Dir-0.1) and about nothing (within ±0.5) to FedDyn and FedCM, which already carry cross-round state.

QUICK: digits, MLP, 20 clients at 20%, Dirichlet 0.1, 10 local steps, 40 rounds, beta = 0.1, 3 seeds; accuracy
= mean test accuracy of the last 10 rounds. FULL: ResNet-18-GN on CIFAR-10, 10% of 100 clients.

    python paper_figures/fedinit_table6.py [--full --data-dir DIR] [--seeds 3]
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from fedlab_analysis.plots import figure
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # `python paper_figures/x.py` from the root
from paper_figures import common  # noqa: E402
from paper_figures.fedinit_fig1_sensitivity import DEFS, late_acc  # noqa: E402

NAME = "fedinit_table6"
# Table 6, 10%-100 Dir-0.1 column: (vanilla, +RI); RI helps the first four, not FedDyn and FedCM
PAPER = {"fedavg": (72.53, 75.95), "fedadam": (70.44, 72.55), "fedsam": (72.89, 76.34),
         "scaffold": (75.06, 77.30), "feddyn": (75.08, 75.11), "fedcm": (73.93, 73.71)}
HELPED = ("fedavg", "fedadam", "fedsam", "scaffold")
# mnist tier: FedAvg (RI helps: +3.42 points) against FedDyn (RI neutral: +0.03), the contrast the table draws;
# FedAdam, FedSAM, SCAFFOLD and FedCM are dropped to fit the budget
MNIST_ALGOS = ("fedavg", "feddyn")


def algos(tier) -> tuple:
    return MNIST_ALGOS if common.tier_of(tier) == "mnist" else tuple(PAPER)


def run_list(tier, seeds) -> list:
    base = {k: v for k, v in DEFS[common.tier_of(tier)].items() if k != "algo"}
    return [({**base, "algo": a, "ri": ri}, s, common.main_tag(tier)) for a in algos(tier) for ri in (False, True)
            for s in common.seed_list(seeds)]


def compute(seeds=3, tier="quick", out_root=None) -> dict:
    base = {k: v for k, v in DEFS[common.tier_of(tier)].items() if k != "algo"}
    names = algos(tier)
    acc = {(a, ri): [late_acc(r) for r in common.train_seeds({**base, "algo": a, "ri": ri}, seeds, out_root, tier,
                                                             tag=common.main_tag(tier))]
           for a in names for ri in (False, True)}
    gain = {a: np.subtract(acc[a, True], acc[a, False]) for a in names}
    rows = {}
    for a in names:
        m, s = common.mean_std(gain[a])
        # helped rows: the gain is > 0; neutral rows: |gain| stays within half a point (or the seed noise)
        v = common.verdict(m, s) if a in HELPED else common.verdict(None, 0, abs(m) <= max(0.005, s))
        rows[a] = {"vanilla": common.mean_std(acc[a, False]), "ri": common.mean_std(acc[a, True]),
                   "gain": (m, s), "paper": PAPER[a], "verdict": v}
    asym = common.mean_std(np.mean([gain[a] for a in HELPED if a in names], 0)
                           - np.mean([gain[a] for a in names if a not in HELPED], 0))
    return {"config": common.config({**base, "algo": "fedavg"}, 0, tier).to_dict(), "seeds": seeds, "rows": rows,
            "acc": {f"{a}{'+ri' if ri else ''}": v for (a, ri), v in acc.items()},
            "asymmetry": asym, "verdict": common.verdict(*asym)}


def plot(res: dict):
    fig, ax = figure(ncols=2, w=4.6, h=3.3)
    names = list(res["rows"])
    x = np.arange(len(names))
    for off, key, lab in ((-0.2, "vanilla", "vanilla"), (0.2, "ri", "+RI")):
        ax[0, 0].bar(x + off, [res["rows"][a][key][0] for a in names], 0.4,
                     yerr=[res["rows"][a][key][1] for a in names], capsize=2, label=lab)
    lo = min(res["rows"][a]["vanilla"][0] for a in names)
    ax[0, 0].set(xticks=x, xticklabels=names, ylim=(max(0.0, lo - 0.08), 1.01), ylabel="test accuracy (last 10 rounds)",
                 title=f"measured, mean ± std over {res['seeds']} seeds")
    ax[0, 0].legend(fontsize=7, loc="upper left", ncol=2)        # above the bars (accuracy < 1)
    ours = [100 * res["rows"][a]["gain"][0] for a in names]
    paper = [res["rows"][a]["paper"][1] - res["rows"][a]["paper"][0] for a in names]
    ax[0, 1].bar(x - 0.2, ours, 0.4, yerr=[100 * res["rows"][a]["gain"][1] for a in names], capsize=2,
                 label="measured")
    ax[0, 1].bar(x + 0.2, paper, 0.4, color="0.6", label="paper (CIFAR-10, 10%-100, Dir-0.1)")
    ax[0, 1].axhline(0, color="k", lw=0.8)
    ax[0, 1].set(xticks=x, xticklabels=names, ylabel="gain from +RI (points)", title="+RI minus vanilla")
    ax[0, 1].legend(fontsize=7, loc="best")
    for a in (ax[0, 0], ax[0, 1]):
        a.tick_params(axis="x", labelsize=8, rotation=30)
    c = res["config"]
    fig.suptitle(f"FedInit Table 6 — +RI (beta={c['beta']}) on {c['dataset']} ({c['model']}), {c['clients']} "
                 f"clients at {c['active_ratio']:.0%}, Dir-{c['dir_alpha']}, {c['rounds']} rounds", fontsize=9.5)
    fig.tight_layout()
    m, s = res["asymmetry"]
    per = ", ".join(f"{a} {res['rows'][a]['verdict']}" for a in names)
    common.annotate_verdict(fig, f"RI helps FedAvg/FedAdam/FedSAM/SCAFFOLD more than FedDyn/FedCM: {res['verdict']} "
                                 f"({100 * m:+.2f} ± {100 * s:.2f} points)\nper row: {per}")
    return fig


def main(argv=None):
    return common.run_script(NAME, compute, __doc__, argv, plot,
                             lambda res: (res["verdict"],
                                          {a: (r["gain"], r["verdict"]) for a, r in res["rows"].items()}))


if __name__ == "__main__":
    main()
