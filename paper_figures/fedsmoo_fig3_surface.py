"""FedSMOO Fig. 3: loss surfaces of the final global models, FedSMOO against FedAvg, SCAFFOLD and MoFedSAM.

Paper: Sun et al., "Dynamic Regularized Sharpness Aware Minimization in Federated Learning" (ICML 2023), Sec. 5.2,
Fig. 3: 3-D loss landscapes of the final ResNet-18-GN models on CIFAR-10, Dirichlet 0.1; FedSMOO's minimum is
lower and its surface smoother and flatter than each baseline's.

Measured, per seed, on a random filter-normalised plane (Li et al. 2018; the same direction seed for every model)
around each final global model, on 1000 training samples: the centre loss (lower is the first claim) and the mean
rise of the loss over the plane above the centre (flatter is the second). Each verdict compares FedSMOO with a
baseline seed by seed (relative gap, the one rule in common.verdict). The panels show seed 0 on one colour scale.
:func:`surfaces` is shared with the FedLESAM Fig. 3 script.

    python paper_figures/fedsmoo_fig3_surface.py [--full --data-dir DIR] [--seeds 3]
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from paper_figures import common as C                                   # noqa: E402

NAME = "fedsmoo_fig3_surface"
ALGOS = {"fedavg": "FedAvg", "scaffold": "SCAFFOLD", "mofedsam": "MoFedSAM", "fedsmoo": "FedSMOO"}
HP = dict(dir_alpha=0.1, rho=0.05, lamb=0.1)
# mnist tier: FedSMOO Sec. 5.1's SAM lr per method (FedSMOO 0.1, lamb 0.1) at Dirichlet 0.1; FedAvg and FedSMOO are
# the FedLESAM Fig. 2 / Table 2 runs; MoFedSAM (two gradients a step, r = 0.01) is dropped to fit the budget
MNIST = {"fedavg": {}, "scaffold": {}, "fedsmoo": dict(rho=0.1, lamb=0.1)}


def per_algo(algos: dict, overrides: dict, tier, mnist: dict) -> dict:
    """{algo: overrides}: the script's HP in the quick and full tiers, each method's own rho in the mnist tier."""
    if C.tier_of(tier) != "mnist":
        return {a: {"algo": a, **overrides} for a in algos}
    return {a: {"algo": a, "dir_alpha": overrides["dir_alpha"], **mnist[a]} for a in algos}


def run_list(tier, seeds) -> list:
    return [(ov, s, C.main_tag(tier)) for ov in per_algo(tier_algos(ALGOS, tier, MNIST), HP, tier, MNIST).values()
            for s in C.seed_list(seeds)]


def tier_algos(algos: dict, tier, mnist: dict) -> dict:
    """The methods of a tier: in the mnist tier those ``mnist`` lists."""
    return {a: n for a, n in algos.items() if a in mnist} if C.tier_of(tier) == "mnist" else algos
SAMPLES, GRID, RANGE = 1000, 21, 0.5


def plane(run_dir: str, samples: int = SAMPLES, grid: int = GRID, span: float = RANGE) -> dict:
    """The loss on a random filter-normalised plane (direction seed 0) around the run's final global model."""
    from fedlab_analysis import checkpoint
    from fedlab_analysis.probes import landscape
    from fedlab_analysis.probes.common import rebuild
    b = rebuild(checkpoint.load(Path(run_dir) / "ckpt" / "last.pt"), data="train", samples=samples, seed=0,
                dtype=torch.float64)
    d1, d2 = landscape.plane_random(b.space, b.theta, seed=0)
    s = landscape.surface(b.f, b.theta, d1, d2, (b.X, b.y), grid=grid, range_=(-span, span))
    s.pop("seconds"), s.pop("seconds_per_point")                        # data.json holds no timings
    s["rise"] = float(np.mean(s["loss"]) - s["center_loss"])
    return s


def surfaces(name: str, algos: dict, overrides: dict, target: str, seeds, tier="quick",
             claim: str = "", mnist: dict | None = None) -> tuple[dict, object]:
    """Train every algorithm for every seed (cached), probe its plane, compare ``target`` with each other one on
    centre loss and mean rise; returns (data, figure)."""
    from fedlab_analysis.probes import landscape
    seeds = C.seed_list(seeds)
    per, shown = {}, {}
    for algo in algos:
        runs = C.train_seeds(per_algo(algos, overrides, tier, mnist)[algo], seeds, None, tier, tag=C.main_tag(tier))
        per[algo] = []
        for r in runs:
            s = plane(r["run_dir"])
            per[algo].append({"seed": r["seed"], "test_acc": r["test_acc"], "center_loss": s["center_loss"],
                              "rise": s["rise"]})
            if r["seed"] == seeds[0]:
                shown[algo] = s
    table, verdicts = [], {}
    for algo in algos:
        if algo == target:
            continue
        for key, what in (("center_loss", "lower minimum"), ("rise", "flatter (smaller mean rise)")):
            base = np.array([r[key] for r in per[algo]])
            mine = np.array([r[key] for r in per[target]])
            m, s = C.mean_std((base - mine) / base)
            v = verdicts[f"{key}/vs_{algo}"] = C.verdict(m, s)
            table.append({"row": f"{algos[target]} {what} than {algos[algo]}", "paper": "yes",
                          algos[algo]: C.mean_std(base), algos[target]: C.mean_std(mine), "gap": (m, s),
                          "verdict": v, "measured": f"{algos[target]} {C.pm(mine)} vs {algos[algo]} {C.pm(base)}"})
    vs = list(verdicts.values())
    verdicts["overall"] = C.overall(vs)
    acc = {a: C.mean_std([r["test_acc"] for r in per[a]]) for a in algos}
    setting = C.setting(tier, dir_alpha=overrides["dir_alpha"])
    data = {"claim": claim, "setting": setting, "seeds": seeds, "table": table, "verdict": verdicts,
            "test_acc": acc, "runs": per, "plane": {"samples": SAMPLES, "grid": GRID, "range": RANGE}}
    titles = [f"{algos[a]} (test acc {acc[a][0]:.2f})" for a in algos]
    fig = landscape.plot_panel([shown[a] for a in algos], titles, kind="contour")
    for ax in fig.axes[:len(algos)]:
        ax.set_aspect("equal")
        ax.set(xlabel="a (d1)", ylabel="b (d2)")
    fig.suptitle(f"Train loss around the final global models, seed {seeds[0]} ({setting}; random filter-"
                 f"normalised plane, one colour scale)", fontsize=9)
    n_rep = vs.count("reproduced")
    short = {"reproduced": "reproduced", "not reproduced at this scale": "not at this scale", "opposite": "opposite"}
    per_base = "; ".join(f"vs {algos[a]}: lower {short[verdicts[f'center_loss/vs_{a}']]}, "
                         f"flatter {short[verdicts[f'rise/vs_{a}']]}" for a in algos if a != target)
    C.annotate_verdict(fig, f"{verdicts['overall']}: {algos[target]} lower and flatter in {n_rep} of {len(vs)} "
                            f"comparisons over {len(seeds)} seeds\n{per_base}")
    return data, fig


def compute(seeds=3, tier="quick"):
    return surfaces(NAME, tier_algos(ALGOS, tier, MNIST), HP, "fedsmoo", seeds, tier, mnist=MNIST,
                    claim="FedSMOO Fig. 3: FedSMOO's final model sits in a lower and flatter minimum than FedAvg's, "
                          "SCAFFOLD's and MoFedSAM's (CIFAR-10, Dirichlet 0.1)")


def main(argv=None):
    return C.run_script(NAME, compute, __doc__, argv)


if __name__ == "__main__":
    main()
