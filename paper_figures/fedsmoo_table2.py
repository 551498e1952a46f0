"""FedSMOO Table 2: consistency, top Hessian eigenvalue and Hessian trace of FedSAM's and FedSMOO's final models.

Paper: Sun, Shen, Chen, Ding, Tao, "Dynamic Regularized Sharpness Aware Minimization in Federated Learning:
Approaching Global Consistency and Smooth Landscape" (ICML 2023), Sec. 5.2, Table 2: ResNet-18-GN on CIFAR-10,
10% of 100 clients, Dirichlet 0.6 and 0.1. FedSMOO's final model has a better consistency (0.821 vs 0.866 at 0.6,
1.061 vs 1.245 at 0.1), a smaller top eigenvalue (91.46 vs 142.65, 107.44 vs 177.18) and a smaller trace
(1783.3 vs 3104.1, 2689.4 vs 3842.3) than FedSAM's, and both get sharper from Dirichlet 0.6 to 0.1.

Measured: the consistency row as labelled, (1/n) sum_{i in S} ||w_i - w^t||^2 over the active clients' final
local models, averaged over the last 5 probed rounds (every round in QUICK, every 5th in the mnist tier; one
round's value depends on which clients were drawn); the top
eigenvalue (Lanczos) and trace (Hutch++, 100 products) of the Hessian of the training cross-entropy (no weight
decay) at the final global model, float64, on 1000 training samples. Every verdict compares FedSMOO with FedSAM
seed by seed (the same partition and client draws), by the relative gap (FedSAM - FedSMOO) / FedSAM.

    python paper_figures/fedsmoo_table2.py [--full --data-dir DIR] [--seeds 3]
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from paper_figures import common as C                                   # noqa: E402

NAME = "fedsmoo_table2"
ALPHAS = (0.6, 0.1)
ALGOS = {"fedsam": "FedSAM", "fedsmoo": "FedSMOO"}
HP = dict(rho=0.05, lamb=0.1)                    # FedSMOO Table 5's r and 1/beta scaled to the MLP (rho as the demo)
# mnist tier: the paper's own values (Sec. 5.1 / Table 5): SAM lr r = 0.01 for FedSAM, 0.1 for FedSMOO, lamb = 0.1
# (1/beta, CIFAR-10); both Dirichlet 0.6 and 0.1 are needed (the claim is at both, and "sharper at 0.1").
MNIST = {"fedsam": dict(rho=0.01), "fedsmoo": dict(rho=0.1, lamb=0.1)}
ROWS = {"consistency": "consistency (1/n) sum ||w_i - w^t||^2", "lam1": "Hessian top eigenvalue",
        "trace": "Hessian trace"}
PAPER = {"consistency": {0.6: (0.866, 0.821), 0.1: (1.245, 1.061)},      # (FedSAM, FedSMOO)
         "lam1": {0.6: (142.65, 91.46), 0.1: (177.18, 107.44)},
         "trace": {0.6: (3104.1, 1783.3), 0.1: (3842.3, 2689.4)}}
SAMPLES, LAST = 1000, 5


def consensus_hooks(seed):
    from fedlab_analysis.probes import consensus
    return [consensus.make_hook(by="group")]


def hessian(run_dir: str, samples: int = SAMPLES) -> dict:
    """Top eigenvalue and trace of the train CE Hessian at the run's final global model (float64)."""
    from fedlab_analysis import checkpoint
    from fedlab_analysis.probes.common import rebuild
    from fedlab_analysis.probes.curvature import HessianOperator, top_eigenvalues, trace
    ck = checkpoint.load(Path(run_dir) / "ckpt" / "last.pt")
    b = rebuild(ck, data="train", samples=samples, seed=0, dtype=torch.float64)
    op = HessianOperator(b.f, b.theta, (b.X, b.y))
    lam = top_eigenvalues(op, k=1, tol=1e-4, seed=0)["eigenvalues"][0]
    tr = trace(op, 100, method="hutch++", seed=0)
    return {"lam1": lam, "trace": tr["trace"], "w_norm2": float(b.theta.pow(2).sum())}


def hp(algo: str, tier) -> dict:
    return MNIST[algo] if C.tier_of(tier) == "mnist" else HP


def run_list(tier, seeds) -> list:
    """FedSAM and FedSMOO at Dirichlet 0.6 and 0.1: 4 configs x seeds."""
    return [({"algo": g, "dir_alpha": a, **hp(g, tier)}, s, C.main_tag(tier, "consensus"))
            for a in ALPHAS for g in ALGOS for s in C.seed_list(seeds)]


def measure(algo: str, alpha: float, seeds, tier="quick") -> list[dict]:
    """One dict per seed: test accuracy, train loss, consistency (last-5-round mean), lam1, trace."""
    out = []
    for r in C.train_seeds({"algo": algo, "dir_alpha": alpha, **hp(algo, tier)}, seeds, None, tier,
                           tag=C.main_tag(tier, "consensus")):
        cons = [p["fedsmoo_table2"] for row in r["rows"] for p in row.get("probes", [])
                if p["event"] == "round" and p["probe"] == "consensus"]
        out.append({"seed": r["seed"], "test_acc": r["test_acc"], "train_loss": r["rows"][-1]["train_loss"],
                    "consistency": float(np.mean(cons[-LAST:])), **hessian(r["run_dir"])})
    return out


def compute(seeds=3, tier="quick") -> tuple[dict, object]:
    seeds = C.seed_list(seeds)
    res = {(a, g): measure(g, a, seeds, tier) for a in ALPHAS for g in ALGOS}
    table, verdicts = [], {}
    for key, label in ROWS.items():
        for a in ALPHAS:
            sam = np.array([r[key] for r in res[a, "fedsam"]])
            smoo = np.array([r[key] for r in res[a, "fedsmoo"]])
            m, s = C.mean_std((sam - smoo) / sam)
            v = C.verdict(m, s)
            verdicts[f"{key}/dir{a}"] = v
            p_sam, p_smoo = PAPER[key][a]
            table.append({"row": f"{label}, Dir-{a}", "dir": a, "paper": f"FedSAM {p_sam:g} > FedSMOO {p_smoo:g} "
                                                           f"(gap {(p_sam - p_smoo) / p_sam:.0%})",
                          "fedsam": C.mean_std(sam), "fedsmoo": C.mean_std(smoo), "gap": (m, s), "verdict": v,
                          "measured": f"FedSAM {C.pm(sam)} > FedSMOO {C.pm(smoo)} (gap {m:.0%} ± {s:.0%})"})
    for key in ("lam1", "trace"):                # both algorithms sharper at Dirichlet 0.1 than at 0.6
        for g in ALGOS:
            hi = np.array([r[key] for r in res[0.1, g]])
            lo = np.array([r[key] for r in res[0.6, g]])
            m, s = C.mean_std((hi - lo) / lo)
            v = C.verdict(m, s)
            verdicts[f"{key}/{g}/sharper_at_0.1"] = v
            table.append({"row": f"{ALGOS[g]}: {ROWS[key]} grows from Dir-0.6 to Dir-0.1", "dir": "0.6 -> 0.1",
                          "paper": "grows", "fedsam": None, "fedsmoo": None, "gap": (m, s), "verdict": v,
                          "measured": f"{m:+.0%} ± {s:.0%}"})
    rows = [v for k, v in verdicts.items() if "/dir" in k]
    n_rep = rows.count("reproduced")
    verdicts["overall"] = C.overall(rows)
    overall = (f"{n_rep} of 6 Table 2 comparisons reproduced (FedSMOO below FedSAM by more than one std over "
               f"{len(seeds)} seeds)")
    loss = {g: C.mean_std([r["train_loss"] for a in ALPHAS for r in res[a, g]])[0] for g in ALGOS}
    caveat = (f"Final train loss FedSAM {loss['fedsam']:.3g}, FedSMOO {loss['fedsmoo']:.3g}: a model that fits "
              f"its training data more tightly has a saturated softmax and a smaller cross-entropy Hessian, so "
              f"lam1 and trace also track the training loss, not only flatness")
    data = {"claim": "FedSMOO Table 2: FedSMOO's final model has better consistency, a smaller top Hessian "
                     "eigenvalue and a smaller trace than FedSAM's, at Dirichlet 0.6 and 0.1",
            "setting": _setting(tier), "seeds": seeds, "table": table, "verdict": verdicts, "overall": overall,
            "caveat": caveat, "runs": {f"dir{a}/{g}": r for (a, g), r in res.items()}}
    return data, figure(data, res)


def _setting(tier) -> str:
    return C.setting(tier, **(HP if C.tier_of(tier) != "mnist" else {a: MNIST[a] for a in ALGOS}))


def figure(data: dict, res: dict):
    fig, ax = C.plots.figure(ncols=3, w=3.6, h=3.0)
    x = np.arange(len(ALPHAS))
    for a_, key in zip(ax.flat, ROWS):
        for j, (g, name) in enumerate(ALGOS.items()):
            ms = [C.mean_std([r[key] for r in res[a, g]]) for a in ALPHAS]
            acc = "/".join(f"{C.mean_std([r['test_acc'] for r in res[a, g]])[0]:.2f}" for a in ALPHAS)
            a_.bar(x + (j - 0.5) * 0.38, [m for m, _ in ms], 0.38, yerr=[s for _, s in ms], capsize=3,
                   label=f"{name} (test acc {acc})")
        a_.set_xticks(x, [f"Dir-{a}" for a in ALPHAS])
        a_.set_title(ROWS[key].replace(" (1/n)", "\n(1/n)"), fontsize=9)
        for i, a in enumerate(ALPHAS):
            v = data["verdict"][f"{key}/dir{a}"]
            a_.annotate({"reproduced": "✓", "opposite": "✗"}.get(v, "~"), (x[i], 0), xytext=(0, -28),
                        textcoords="offset points", ha="center", fontsize=10)
    h, lab = ax[0, 0].get_legend_handles_labels()
    fig.legend(h, lab, loc="upper center", bbox_to_anchor=(0.5, 1.0), ncol=2, fontsize=8, frameon=False)
    fig.suptitle(f"FedSMOO Table 2 at small scale: {data['setting']}; mean ± std over {len(data['seeds'])} seeds",
                 fontsize=9, y=1.07)
    fig.tight_layout()
    C.annotate_verdict(fig, f"{data['verdict']['overall']}: {data['overall']} (✓ reproduced, ~ not at this scale, "
                            f"✗ opposite).\n" + data["caveat"])
    return fig


def main(argv=None):
    return C.run_script(NAME, compute, __doc__, argv)


if __name__ == "__main__":
    main()
