"""FedLESAM Fig. 4: test accuracy of FedLESAM-S against rho / eta_l, with FedAvg as the reference.

Paper: Fan et al., "Locally Estimated Global Perturbations are Better than Local Perturbations for Federated
Sharpness-aware Minimization" (ICML 2024), Sec. 6.3, Fig. 4 (CIFAR-10, eta_l = 0.1): accuracy first rises with
rho and then drops sharply; FedLESAM-S beats FedAvg over a broad range of rho/eta_l (10^-2 .. 10^2); from random
initialisation the best rho is about 0.1 eta_l.

Measured: final test accuracy of FedLESAM-S on the QUICK base (Dirichlet 0.1, eta_l = 0.1) for rho/eta_l in
10^-2 .. 10^2, 3 seeds; each rho's gain over FedAvg is seed-paired (same partition and client draws), under the one
rule of paper_figures/verdict.py. The paper states the range 10^-2 .. 10^2 for its pre-trained models (OfficeHome,
DomainNet); from random initialisation, as here, it recommends rho about 0.1 eta_l and gives no range, so "beats
FedAvg" is tested at rho/eta_l = 0.01, 0.1 and 1 and the two larger ratios are reported outside the paper's regime
(no verdict). "Rises then drops": the best interior ratio (by mean) above the smallest and above the largest;
"best about 0.1": no other ratio better than 0.1 by more than a margin of ours (two seed sd of the 0.1 arm; ties
count as 0.1 being best).
Comparisons: 3 + 2 + 1 = 6. The real tiers also judge FedLESAM-S in the released code's form (`--lesam-s-scale
code --lesam-source last_global_update`, labelled "code form") at the same ratios, 12 in all.

    python -m paper_figures.fedlesam_fig4_rho [--full --data-dir DIR] [--seeds 3]
"""
from __future__ import annotations

import numpy as np

from paper_figures import common as C
from paper_figures import verdict as V

NAME = "fedlesam_fig4_rho"
RATIOS = (0.01, 0.1, 1.0, 10.0, 100.0)            # rho / eta_l
IN_REGIME = (0.01, 0.1, 1.0)                      # from scratch; 10 and 100: the pre-trained models' range
HP = dict(dir_alpha=0.1, lamb=0.1)
# real tiers: the whole grid. "Then sharply declines" needs 10 and 100; they are reported outside the proven regime
# (Sec. 6.3 states them for pre-trained models) and enter the rise-and-drop claim, as in the paper's Fig. 4
MNIST_RATIOS = RATIOS
# the real tiers also run FedLESAM-S in the released code's form (its correction scaled by lamb, `--lesam-s-scale
# code`, and its perturbation along the last global update, `--lesam-source last_global_update`; the paper's numbers
# came from that code) at the same ratios, judged in its own rows labelled "code form"
CODE = {"code": C.code_form("fedlesam-s", "FedLESAM-S", lesam_s_scale="code", lesam_source="last_global_update")}


def forms(tier) -> dict:
    """{suffix: overrides}: the paper's form (""), and in the real tiers the code's."""
    return {"": {}, **{f: CODE[f][2] for f in C.code_arms(CODE, tier)}}


def ratios(tier) -> tuple:
    return MNIST_RATIOS if C.protocol(tier) == "mnist" else RATIOS


def run_list(tier, seeds) -> list:
    lr = C.TIERS[C.tier_of(tier)]["lr"]
    ovs = [{"algo": "fedavg", **HP}] + [{"algo": "fedlesam-s", "rho": q * lr, **HP, **ex} for ex in forms(tier).values()
                                        for q in ratios(tier)]
    return [(ov, s, C.main_tag(tier)) for ov in ovs for s in C.seed_list(seeds)]


def compute(seeds=3, tier="quick"):
    seeds = C.seed_list(seeds)
    lr = C.TIERS[C.tier_of(tier)]["lr"]
    RATIOS = ratios(tier)
    got = {}                                                  # run dicts (their convergence flags) per setting

    def acc(key, ov):
        got[key] = C.train_seeds({**HP, **ov}, seeds, None, tier, tag=C.main_tag(tier))
        return np.array([r["test_acc"] for r in got[key]])
    avg = acc("fedavg", {"algo": "fedavg"})
    table, by_form = [], {}
    for form, extra in forms(tier).items():
        tail, mark = C.code_mark(form, CODE)
        les = by_form[form] = {q: acc((form, q), {"algo": "fedlesam-s", "rho": q * lr, **extra}) for q in RATIOS}
        runs = {q: got[form, q] for q in RATIOS}
        for q in IN_REGIME:
            if q not in RATIOS:
                table.append(C.not_in_tier("fedlesam.fig4.beats_fedavg", f"FedLESAM-S beats FedAvg at rho/eta_l = "
                                           f"{q:g}{tail}", [f"rho/eta_l {q:g}"], tier, ratio=q, **mark))
                continue
            v = V.decide(C.CLAIMS["fedlesam.fig4.beats_fedavg"], les[q] - avg, runs[q] + got["fedavg"])
            table.append(C.row("fedlesam.fig4.beats_fedavg", f"FedLESAM-S beats FedAvg at rho/eta_l = {q:g}{tail}",
                               f"gain {V.fmt(v, 100, ' points')}", v, ratio=q, **mark))
        _, means, rows = C.interior_peak(RATIOS, les, runs, ("fedlesam.fig4.rise", "fedlesam.fig4.drop"),
                                         "accuracy at rho/eta_l = {peak:g} (best interior) above {end:g}" + tail,
                                         "ratio")
        table += [r | mark for r in rows]
        other = max((q for q in RATIOS if q != 0.1), key=means.get)
        v = V.decide(C.CLAIMS["fedlesam.fig4.best"], les[other] - les[0.1], runs[other] + runs[0.1], base=les[0.1])
        table.append(C.row("fedlesam.fig4.best", f"rho/eta_l = 0.1 about best (from scratch): best other "
                                                 f"({other:g}) minus 0.1{tail}", V.fmt(v, 100, ' points'), v,
                           ratio=other, **mark))
    les = by_form[""]
    outside = {f"{q:g}": dict(zip(("mean", "lo", "hi"), V.interval(les[q] - avg))) for q in RATIOS
               if q not in IN_REGIME}
    setting = C.setting(tier, dir_alpha=HP["dir_alpha"], eta_l=lr)
    data = {"claim": "FedLESAM Fig. 4: accuracy rises with rho then drops; FedLESAM-S beats FedAvg over a broad "
                     "range of rho/eta_l; from random initialisation the best rho is about 0.1 eta_l",
            "setting": setting, "seeds": seeds, "table": table, **C.finish(table),
            "outside_regime": {"ratios": outside, "why": C.CLAIMS["fedlesam.fig4.beats_fedavg"].regime},
            "fedavg": avg.tolist(), "fedlesam_s": {f"{q:g}": les[q].tolist() for q in RATIOS},
            "run_ids": C.run_ids({"fedavg": got["fedavg"], **{f"fedlesam_s/{q:g}": got["", q] for q in RATIOS}}),
            **{f"fedlesam_s_{f}": {f"{q:g}": v[q].tolist() for q in RATIOS} for f, v in by_form.items() if f}}

    fig, ax = C.plots.figure(w=6.4, h=3.4)
    a = ax[0, 0]
    ms = np.array([C.mean_std(100 * les[q]) for q in RATIOS])
    a.errorbar(RATIOS, ms[:, 0], ms[:, 1], marker="o", capsize=3, color="k", label="FedLESAM-S")
    for f in (f for f in by_form if f):                       # the released code's form, where run
        mc = np.array([C.mean_std(100 * by_form[f][q]) for q in RATIOS])
        a.errorbar(RATIOS, mc[:, 0], mc[:, 1], marker="s", capsize=3, color="C9", ls=":", label=CODE[f][1])
    m0, s0 = C.mean_std(100 * avg)
    a.axhline(m0, color="0.5", ls="--", label=f"FedAvg {m0:.1f} ± {s0:.1f}")
    a.axhspan(m0 - s0, m0 + s0, color="0.5", alpha=0.15, lw=0)
    a.set(xscale="log", xlabel="rho / eta_l", ylabel="test accuracy (%)",
          title=f"FedLESAM-S, {len(seeds)} seeds (mean ± std)")
    if outside:                                               # ratios this tier trains beyond the from-scratch range
        a.axvspan(3, 300, color="0.85", alpha=0.5, lw=0,      # in the legend: a label here would cross the curves
                  label="FedAvg comparison not judged:\nthe paper states 10^-2..10^2\nfor pre-trained models only")
    a.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    fig.suptitle(f"FedLESAM Fig. 4 at small scale: {setting}", fontsize=9)
    fig.tight_layout()
    C.annotate_verdict(fig, f"{data['summary']} over {len(seeds)} seeds (95% t intervals)\n" + "; ".join(
        f"{t['row']}: {t['verdict']}" for t in table))
    return data, fig


def main(argv=None):
    return C.run_script(NAME, compute, __doc__, argv)


if __name__ == "__main__":
    main()
