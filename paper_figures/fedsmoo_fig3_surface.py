"""FedSMOO Fig. 3: loss surfaces of the final global models, FedSMOO against FedAvg, SCAFFOLD and MoFedSAM.

Paper: Sun et al., "Dynamic Regularized Sharpness Aware Minimization in Federated Learning" (ICML 2023), Sec. 5.2,
Fig. 3: 3-D loss landscapes of the final ResNet-18-GN models on CIFAR-10, Dirichlet 0.1; FedSMOO's minimum is
lower and its surface smoother and flatter than each baseline's.

Measured, per seed, on a random filter-normalised plane (Li et al. 2018; the same direction seed for every model)
around each final global model, on 1000 training samples: the centre loss (lower is the first claim) and the mean
rise of the loss over the plane above the centre (flatter is the second). Each verdict compares FedSMOO with a
baseline seed by seed (relative gap, the one rule of paper_figures/verdict.py); flatness is also compared by
adaptive sharpness and at matched training loss (paper_figures/flatness.py). Comparisons: 3 baselines x (lower,
flatter, flatter by adaptive sharpness, flatter at matched fit) = 12. The real tiers also judge FedSMOO in the
released code's form (`--smoo-server code`, labelled "code form") by the same rows, 24 in all. The panels show seed 0
on one colour scale.
:func:`surfaces` is shared with the FedLESAM Fig. 3 script.

    python -m paper_figures.fedsmoo_fig3_surface [--full --data-dir DIR] [--seeds 3]
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from paper_figures import common as C
from paper_figures import flatness as FL
from paper_figures import probed
from paper_figures import verdict as V

NAME = "fedsmoo_fig3_surface"
WEIGHTS = True                                       # reads checkpoints: measurements kept by paper_figures.probed
ALGOS = {"fedavg": "FedAvg", "scaffold": "SCAFFOLD", "mofedsam": "MoFedSAM", "fedsmoo": "FedSMOO"}
HP = dict(dir_alpha=0.1, rho=0.05, lamb=0.1)
# mnist tier: FedSMOO Sec. 5.1's SAM lr per method (FedSMOO 0.1, lamb 0.1) at Dirichlet 0.1; FedAvg and FedSMOO are
# the FedLESAM Fig. 2 / Table 2 runs; MoFedSAM (two gradients a step, r = 0.01) is dropped to fit the budget
MNIST = {"fedavg": {}, "scaffold": {}, "fedsmoo": dict(rho=0.1, lamb=0.1)}
# the real tiers also run FedSMOO in the released code's form (its server perturbation averages mu_i alone,
# `--smoo-server code`; the paper's numbers came from that code), judged by the same rows, labelled; in the mnist
# tier these are FedSMOO Table 2's code-form runs at Dirichlet 0.1
CODE = {"fedsmoo-code": C.code_form("fedsmoo", "FedSMOO", smoo_server="code")}


def tier_overrides(algos: dict, overrides: dict, tier, mnist: dict, per_algo: dict | None = None,
                   code: dict | None = None) -> dict:
    """{algo: overrides}: the script's HP (and ``per_algo``'s own hyper-parameters of a method) in the quick and
    full tiers, each method's own rho (``mnist``) in the mnist tier; a code form of ``code``: its base's with the
    code's knobs."""
    def one(a):
        if C.protocol(tier) != "mnist":
            return {"algo": a, **overrides, **(per_algo or {}).get(a, {})}
        return {"algo": a, "dir_alpha": overrides["dir_alpha"], **mnist[a]}
    return {a: C.code_hp(a, code or {}, one) for a in algos}


def run_list(tier, seeds) -> list:
    return [(ov, s, C.main_tag(tier)) for ov in tier_overrides(tier_algos(ALGOS, tier, MNIST, CODE), HP, tier,
                                                               MNIST, code=CODE).values() for s in C.seed_list(seeds)]


def tier_algos(algos: dict, tier, mnist: dict, code: dict | None = None) -> dict:
    """The methods of a tier: in the mnist tier those ``mnist`` lists; in the real tiers also the code forms of
    ``code`` whose base it trains (common.code_arms)."""
    out = {a: n for a, n in algos.items() if a in mnist} if C.protocol(tier) == "mnist" else algos
    return {**out, **{k: n for k, n in C.code_arms(code or {}, tier).items() if C.code_base(k, code) in out}}
SAMPLES, GRID, RANGE = 1000, 21, 0.5
LABEL = {"center_loss": "lower minimum (centre loss)", "rise": "flatter (mean rise over the plane)",
         "adaptive": f"flatter (adaptive sharpness, rho={FL.RHO}, eta={FL.ETA})",
         "rise_matched": "flatter (mean rise over the plane) at matched train loss"}


@probed.memo
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


def measure_run(run: dict) -> None:
    """What :func:`surfaces` measures on one run's weights (kept by paper_figures.probed)."""
    plane(run["run_dir"]), FL.adaptive(FL.last(run)), FL.at_rungs(run, plane_at)


def surfaces(name: str, algos: dict, overrides: dict, comparisons: list, seeds, tier="quick",
             claim: str = "", per_algo: dict | None = None, mnist: dict | None = None,
             code: dict | None = None) -> tuple[dict, object]:
    """Train every algorithm of ``algos`` that the tier trains (``tier_algos``) for every seed (cached), probe its
    plane and its adaptive sharpness, and make each of ``comparisons`` = [(claim id, baseline algo, method algo,
    key), ...] seed by seed by the relative gap (baseline - method) / baseline of ``key`` ("center_loss" or
    "rise"). A "rise" comparison (flatness) is also made by adaptive sharpness and at matched training loss
    (paper_figures/flatness.py), each its own row. ``per_algo`` {algo: overrides} adds an algorithm's own
    hyper-parameters in the quick and full tiers, ``mnist`` {algo: overrides} is the mnist tier's methods and
    hyper-parameters. A comparison with a method the tier does not train gets its rows as "not measured in this
    tier". ``code`` {arm: common.code_form(...)}: the released code's forms the real tiers also train; each
    comparison whose method is a code form's base is made again with the code form, its rows labelled. Returns
    (data, figure)."""
    from fedlab_analysis.probes import landscape
    seeds = C.seed_list(seeds)
    per, shown, runs = {}, {}, {}
    code = code or {}
    trained = tier_algos(algos, tier, mnist, code) if mnist is not None else algos
    algos = {**algos, **{k: v[1] for k, v in code.items()}}                       # labels, the code forms' too
    comparisons = comparisons + [(cid, b, k, key) for k in trained if k in code
                                 for cid, b, m, key in comparisons if m == C.code_base(k, code)]
    for algo in trained:
        runs[algo] = C.train_seeds(tier_overrides(trained, overrides, tier, mnist, per_algo, code)[algo], seeds,
                                   None, tier, tag=C.main_tag(tier), weights=WEIGHTS)
        per[algo] = []
        for r in runs[algo]:
            s = plane(r["run_dir"])
            per[algo].append({"seed": r["seed"], "test_acc": r["test_acc"], "center_loss": s["center_loss"],
                              "rise": s["rise"], "adaptive": FL.adaptive(FL.last(r))})
            if r["seed"] == seeds[0]:
                shown[algo] = s
    table = []
    for cid, base_a, mine_a, key in comparisons:
        tail, form = C.code_mark(mine_a, code)
        label = f"{algos[C.code_base(mine_a, code)]} vs {algos[base_a]}"
        keys = [key] if key == "center_loss" else [key, "adaptive", "rise_matched"]
        missing = [algos[a] for a in (base_a, mine_a) if a not in trained]
        if missing:
            table += [C.not_in_tier(cid, f"{label}: {LABEL[k]}{tail}", missing, tier, key=k, base=base_a,
                                    method=mine_a, **form) for k in keys]
            continue
        for k in keys[:2]:
            base, mine = ([r[k] for r in per[a]] for a in (base_a, mine_a))
            v = V.decide(C.CLAIMS[cid], FL.rel_gap(base, mine), runs[base_a] + runs[mine_a],
                         base=V.rel_base(base))
            table.append(C.row(cid, f"{label}: {LABEL[k]}{tail}", f"{algos[mine_a]} {C.pm(mine)} vs "
                                                                   f"{algos[base_a]} {C.pm(base)}; gap "
                                                                   f"{V.fmt(v, 100, '%')}", v, key=k,
                               base=base_a, method=mine_a, **form))
        if key == "rise":
            table.append(FL.matched_row(cid, f"{label}: {LABEL['rise']}{tail}", runs[base_a], runs[mine_a],
                                        probe=lambda p: plane_at(p)["rise"], what="rise")
                         | {"key": "rise_matched", "base": base_a, "method": mine_a, **form})
    acc = {a: C.mean_std([r["test_acc"] for r in per[a]]) for a in trained}
    setting = C.setting(tier, dir_alpha=overrides["dir_alpha"])
    data = {"claim": claim, "setting": setting, "seeds": seeds, "table": table, **C.finish(table),
            "test_acc": acc, "runs": per, "run_ids": C.run_ids({f"runs/{a}": runs[a] for a in trained}),
            "plane": {"samples": SAMPLES, "grid": GRID, "range": RANGE}}
    titles = [f"{algos[a]} (test acc {acc[a][0]:.2f})" for a in trained]
    fig = landscape.plot_panel([shown[a] for a in trained], titles, kind="contour")
    for ax in fig.axes[:len(trained)]:
        ax.set_aspect("equal")
        ax.set(xlabel="a (d1)", ylabel="b (d2)")
    fig.suptitle(f"Train loss around the final global models, seed {seeds[0]} ({setting}; random filter-"
                 f"normalised plane, one colour scale)", fontsize=9)
    short = {"center_loss": "lower", "rise": "flatter (rise)", "adaptive": "flatter (adaptive)",
             "rise_matched": "flatter at matched fit"}
    pairs = {}
    for t in table:
        pairs.setdefault((t["method"], t["base"]), []).append(f"{short[t['key']]} {t['verdict']}")
    lines = [f"{algos[m]} vs {algos[b]}: {', '.join(v)}" for (m, b), v in pairs.items()]
    C.annotate_verdict(fig, f"{data['summary']} over {len(seeds)} seeds (95% t intervals)\n" + "\n".join(lines))
    return data, fig


@probed.memo
def plane_at(path, samples: int = SAMPLES, grid: int = GRID, span: float = RANGE) -> dict:
    """The plane of :func:`plane` around a checkpoint file (a matched-fit checkpoint)."""
    from fedlab_analysis import checkpoint
    from fedlab_analysis.probes import landscape
    from fedlab_analysis.probes.common import rebuild
    b = rebuild(checkpoint.load(Path(path)), data="train", samples=samples, seed=0, dtype=torch.float64)
    d1, d2 = landscape.plane_random(b.space, b.theta, seed=0)
    s = landscape.surface(b.f, b.theta, d1, d2, (b.X, b.y), grid=grid, range_=(-span, span))
    return {"rise": float(np.mean(s["loss"]) - s["center_loss"])}


COMPARISONS = [(cid, base, "fedsmoo", key) for base in ("fedavg", "scaffold", "mofedsam")
               for cid, key in (("fedsmoo.fig3.lower", "center_loss"), ("fedsmoo.fig3.flatter", "rise"))]


def compute(seeds=3, tier="quick"):
    return surfaces(NAME, ALGOS, HP, COMPARISONS, seeds, tier, mnist=MNIST, code=CODE,
                    claim="FedSMOO Fig. 3: FedSMOO's final model sits in a lower and flatter minimum than FedAvg's, "
                          "SCAFFOLD's and MoFedSAM's (CIFAR-10, Dirichlet 0.1)")


def main(argv=None):
    return C.run_script(NAME, compute, __doc__, argv)


if __name__ == "__main__":
    main()
