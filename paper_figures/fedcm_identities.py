"""FedCM Lemma 4.1 and the alpha = 1 identity, on the trained network in float64.

Paper: Xu et al., "FedCM: Federated Learning with Client-level Momentum" (2021), Sec. 4, Lemma 4.1: the server's
Delta_{t+1} = alpha Delta~_t + (1 - alpha) Delta_t, with Delta~_t the average of the minibatch gradients the active
clients used in round t (each client's own average over its K_i steps), so Delta_t is an exponential moving
average of client gradients; and with alpha = 1 (Algorithm 2, line 8) FedCM is FedAvg.

Measured: FedCM (alpha 0.1) for 5 rounds of the QUICK base in float64, 3 seeds. A callback recomputes each step's
minibatch gradient at the point where it was taken (the engine draws minibatches from (seed, round, client), so it
is the same minibatch) and checks the lemma every round by its relative error. FedCM with alpha = 1 and FedAvg run
from the same seed: the largest absolute difference of their global models after every round (0 means bit for
bit). Both are exact checks (paper_figures/verdict.py): reproduced when the error is below 1e-12, else violated.
Comparisons: 2.

    python -m paper_figures.fedcm_identities [--seeds 3]
"""
from __future__ import annotations

from paper_figures import common as C
from paper_figures import verdict as V

NAME = "fedcm_identities"
ROUNDS, ALPHA, TOL = 5, 0.1, 1e-12     # an exact identity: checked on the QUICK network in every tier


def _base(tier) -> str:
    """The QUICK network in every tier but full (an exact check needs no MNIST runs)."""
    return "full" if C.tier_of(tier) == "full" else "quick"


def lemma41(seed: int, tier="quick") -> list[float]:
    """Relative error of Lemma 4.1 in each of ROUNDS rounds of float64 FedCM."""
    from fedlab_analysis.trainers.engine import Run
    run = Run(C.config({"algo": "fedcm", "alpha": ALPHA, "dtype": "float64", "rounds": ROUNDS}, seed, _base(tier)))
    mem, errs = {}, []

    def hook(event, r, ctx, x):
        if event == "step":
            if ctx.k == 0:
                mem.update(D=r.state["D"].clone(), prev=ctx.x0.clone(), gsum=0.0)
            mem["gsum"] = mem["gsum"] + r.grads(ctx, mem["prev"], ctx.k)    # zero rows for finished clients
            mem["prev"] = x.clone()
        else:
            tilde = (mem["gsum"] / ctx.K.to(x)[:, None]).mean(0)           # Delta~_t
            want = ALPHA * tilde + (1 - ALPHA) * mem["D"]
            errs.append(float((r.state["D"] - want).norm() / want.norm()))
    run.callbacks.append(hook)
    for _ in range(ROUNDS):
        run.round()
    return errs


def alpha1(seed: int, tier="quick") -> list[float]:
    """max |w_FedCM(alpha=1) - w_FedAvg| after each of ROUNDS rounds, float64, one seed."""
    from fedlab_analysis.trainers.engine import Run
    a, b = (Run(C.config({"dtype": "float64", "rounds": ROUNDS, **ov}, seed, _base(tier)))
            for ov in ({"algo": "fedcm", "alpha": 1.0}, {"algo": "fedavg"}))
    out = []
    for _ in range(ROUNDS):
        a.round(), b.round()
        out.append(float((a.w - b.w).abs().max()))
    return out


def compute(seeds=3, tier="quick"):
    seeds = C.seed_list(seeds)
    lem = {s: lemma41(s, tier) for s in seeds}
    ide = {s: alpha1(s, tier) for s in seeds}
    worst_l, worst_i = max(max(v) for v in lem.values()), max(max(v) for v in ide.values())
    n = len(seeds)
    table = [C.row("fedcm.lemma41", "Lemma 4.1: Delta_{t+1} = alpha Delta~_t + (1 - alpha) Delta_t",
                   f"max relative error {worst_l:.1e} over {ROUNDS} rounds x {n} seeds (tolerance {TOL:g})",
                   V.exact(C.CLAIMS["fedcm.lemma41"], worst_l < TOL, n, worst_l)),
             C.row("fedcm.alpha1", "FedCM(alpha = 1) = FedAvg",
                   f"max |w difference| {worst_i:.1e} over {ROUNDS} rounds x {n} seeds (tolerance {TOL:g})",
                   V.exact(C.CLAIMS["fedcm.alpha1"], worst_i < TOL, n, worst_i))]
    data = {"claim": "FedCM Lemma 4.1 (Delta_t is an EMA of the client gradients) and alpha = 1 is FedAvg",
            "seeds": seeds, "rounds": ROUNDS, "alpha": ALPHA, "tolerance": TOL, "table": table,
            **C.finish(table), "lemma41_rel_error": {str(s): v for s, v in lem.items()},
            "alpha1_max_abs_diff": {str(s): v for s, v in ide.items()}}

    fig, ax = C.plots.figure(w=5.4, h=3.2)
    a = ax[0, 0]
    for i, s in enumerate(seeds):
        a.plot(range(1, ROUNDS + 1), lem[s], "o-", color=f"C{i}", ms=4, label=f"Lemma 4.1, seed {s}")
    a.axhline(TOL, color="k", ls="--", lw=1, label=f"tolerance {TOL:g}")
    a.set(yscale="log", xlabel="round", ylabel="relative error", ylim=(1e-18, 1e-10), xticks=range(1, ROUNDS + 1),
          title=f"FedCM alpha={ALPHA}, float64")
    a.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    fig.suptitle("FedCM Lemma 4.1 and the alpha = 1 identity on the QUICK network", fontsize=9)
    fig.tight_layout()
    C.annotate_verdict(fig, f"{data['summary']} (exact checks)\n" + "\n".join(
        f"{t['row']}: {t['measured']}: {t['verdict']}" for t in table))
    return data, fig


def main(argv=None):
    return C.run_script(NAME, compute, __doc__, argv)


if __name__ == "__main__":
    main()
