"""FedALS Fig. 1: per-layer consensus distance over local iterations for FedAvg with tau = 50.

Paper (Gholami & Seferoglu, "Improved Generalization Bounds for Communication Efficient Federated Learning",
Sec. 1, Example 1 and Fig. 1): ResNet-20 trained by FedAvg with tau = 50 local steps on CIFAR-10, 5 clients
holding 2 classes each; "the early layers responsible for extracting representations exhibit lower levels of
consensus distance". CD_l(t) = (1/K) sum_k ||theta_bar^l_t - theta^l_{k,t}||^2, measured at every local
iteration (it is 0 right after each synchronisation) and averaged over time.

QUICK: the same protocol (FedAvg, tau = 50, 5 clients, label-sorted contiguous split = 2 classes per client)
on scikit-learn's digits with a 4-layer MLP (fc1-fc3 extract features, fc4 is the head), 3 seeds. CD is logged
in three forms because raw CD grows with a layer's size: raw (the paper's), per parameter, and relative to the
layer's squared norm. FULL: ResNet-20 on CIFAR-10 as in the paper. One rule (paper_figures/verdict.py), per seed:
log10 of the head's time-averaged CD over the first layer's, > 0 as the paper says; one row per form.
Comparisons: 3.

    python -m paper_figures.fedals_fig1_consensus [--full --data-dir DIR] [--seeds 3]
"""
from __future__ import annotations

import numpy as np

from fedlab_analysis.plots import figure
from fedlab_analysis.probes import consensus
from paper_figures import common
from paper_figures import verdict as V

NAME = "fedals_fig1_consensus"
CLAIM = "FedALS Fig. 1: early layers have a lower consensus distance than later layers and the head"
QUICK = dict(algo="fedavg", clients=5, active_ratio=1.0, partition="sorted", local_steps=50, batch_size=32,
             lr=0.05, wd=1e-4, model_kwargs={"widths": [64, 64, 64]}, rounds=100, eval_every=10)
FULL = dict(algo="fedavg", model="resnet20", clients=5, active_ratio=1.0, partition="sorted", local_steps=50,
            batch_size=64, lr=0.025, wd=1e-4, lr_decay=1.0, clip=0.0, augment=False, rounds=400, eval_every=10,
            local_momentum=0.9)
# mnist tier: the same protocol (FedAvg, tau = 50, 5 clients x 2 classes) on MNIST with the 784-200-200-10 MLP
# (fc1, fc2 extract features, fc3 is the head), 300 rounds x 50 steps at batch 64 (FedALS Sec. 2: SGD, wd 1e-4)
MNIST = dict(algo="fedavg", clients=5, active_ratio=1.0, partition="sorted", local_steps=50, batch_size=64,
             lr=0.025, wd=1e-4, lr_decay=1.0, clip=0.0, rounds=300, eval_every=10, eval_train_samples=10000,
             local_momentum=0.9)
# the real tiers: SGD with momentum 0.9 as FedALS Sec. 7 trains; the rate is the FedALS Table 2 probe's best (0.025,
# fedals_table2.LR_GRID's middle), not searched for this illustration
DEFS = {"quick": QUICK, "mnist": MNIST, "full": FULL}


def hooks(seed):
    return [consensus.make_hook(steps=1)]


def run_list(tier, seeds) -> list:
    return [(DEFS[common.protocol(tier)], s, "consensus-every-step") for s in common.seed_list(seeds)]


FORMS = {"fedals_cd": "raw (the paper's)", "fedals_cd_per_param": "per parameter",
         "fedals_cd_relative": "relative to ||layer||^2"}


def steps_table(rows: list[dict], form: str) -> tuple[list[str], dict]:
    """{layer: array [rounds, K + 1]} of one CD form from the consensus hook's step rows (k = 0: the start)."""
    steps = [p for r in rows for p in r.get("probes", []) if p["event"] == "step"]
    layers = [k.split(".", 1)[1] for k in steps[0] if k.startswith("fedals_cd.")]
    R = max(p["round"] for p in steps)
    return layers, {lab: np.array([p[f"{form}.{lab}"] for p in steps]).reshape(R, -1) for lab in layers}


def compute(seeds=3, tier="quick", out_root=None) -> dict:
    base = DEFS[common.protocol(tier)]
    runs = common.train_seeds(base, seeds, out_root, tier, tag="consensus-every-step")
    res = {"claim": CLAIM, "seeds": len(runs), "config": common.config(base, 0, tier).to_dict(),
           "test_acc": [r["test_acc"] for r in runs], "forms": {}}
    for form, label in FORMS.items():
        per_seed, curves = [], []
        for r in runs:
            layers, cd = steps_table(r["rows"], form)
            per_seed.append([float(cd[lab][:, 1:].mean()) for lab in layers])   # time average over local steps
            curves.append(np.stack([cd[lab][:, 1:].mean(0) for lab in layers]))  # [layer, k]
        a = np.array(per_seed)                                                   # [seed, layer]
        ratio = np.log10(a[:, -1] / a[:, 0])                   # > 0: the head's CD above the first layer's
        res["forms"][form] = {
            "label": label, "layers": layers, "time_average": a.tolist(),
            "mean": a.mean(0).tolist(), "std": a.std(0, ddof=1).tolist() if len(a) > 1 else [0.0] * len(layers),
            "increasing_with_depth": [bool(np.all(np.diff(x) > 0)) for x in a],
            "log10_head_over_first": common.mean_std(ratio), "log10_ratio_per_seed": ratio.tolist(),
            "cd_by_step": np.mean(curves, 0).round(8).tolist()}
    res["after_sync_max"] = max(float(cd[lab][:, 0].max()) for lab in layers)
    table = []
    for form, f in res["forms"].items():          # one row per form: raw is the paper's; the others normalise size
        v = V.decide(common.CLAIMS["fedals.fig1.cd"], f["log10_ratio_per_seed"], runs)
        table.append(common.row("fedals.fig1.cd", f"head's CD above the first layer's, {f['label']}",
                                f"log10(head / first) {V.fmt(v)}", v, form=form))
    res.update(table=table, **common.finish(table))
    return res


def plot(res: dict):
    acc_m, acc_s = common.mean_std(res["test_acc"])
    fig, ax = figure(ncols=3, nrows=2, w=4.0, h=3.0)
    for j, (form, f) in enumerate(res["forms"].items()):
        x = np.arange(len(f["layers"]))
        for i in x:                      # dots, not bars: the values are compared on a log axis
            ax[0, j].errorbar([i], [f["mean"][i]], yerr=[f["std"][i]], fmt="o", color=f"C{i}", capsize=3)
        ax[0, j].set(xticks=x, xticklabels=f["layers"], yscale="log", title=f["label"], xlim=(-0.5, len(x) - 0.5))
        for i, curve in enumerate(f["cd_by_step"]):
            ax[1, j].plot(np.arange(1, len(curve) + 1), curve, color=f"C{i}", label=f["layers"][i])
        ax[1, j].set(yscale="log", xlabel="local step k since the last synchronisation")
    ax[0, 0].set_ylabel(f"time-averaged CD\n(mean ± std, {res['seeds']} seeds)")
    ax[1, 0].set_ylabel("CD at step k, mean over rounds")
    ax[1, 2].legend(title="layer", fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    c = res["config"]
    fig.suptitle(f"FedALS Fig. 1 — FedAvg, tau={c['local_steps']}, {c['clients']} clients x 2 classes, "
                 f"{c['model']} on {c['dataset']}, {c['rounds']} rounds; test acc {acc_m:.3f} ± {acc_s:.3f}",
                 fontsize=10)
    fig.tight_layout()
    pp = res["forms"]["fedals_cd_per_param"]
    common.annotate_verdict(fig, f"{res['summary']} (95% t intervals): " + "; ".join(
        f"{t['form'].replace('fedals_cd', 'CD')}: {t['measured']}: {t['verdict']}" for t in res["table"])
        + f"\nmonotone in depth on {sum(pp['increasing_with_depth'])}/{res['seeds']} seeds per parameter")
    return fig


def main(argv=None):
    return common.run_script(NAME, compute, __doc__, argv, plot,
                             lambda res: f"{res['summary']}; test acc {res['test_acc']}")


if __name__ == "__main__":
    main()
