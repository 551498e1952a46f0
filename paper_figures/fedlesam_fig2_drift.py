"""FedLESAM Fig. 2 at small scale: perturbation drift (left) and global sharpness (right) over rounds.

Paper (Fan et al. 2024, Sec. 4.1 and Fig. 2): CIFAR-10, Dirichlet 0.1, 100 clients at 10%;
PD^t = (1/(2KE)) sum_k sum_i ||delta_{g,k} - delta_{i,k}|| with unit directions, delta_{g,k} along grad F at the
virtual global model w_{g,k} = w^t - eta_g mean_i (w^t - w_{i,k}). Claims: FedLESAM's drift and global sharpness
are "much smaller than others" (FedSAM, MoFedSAM, FedGAMMA, FedSMOO); FedSAM's global sharpness is not better than
FedAvg's.

Here: mnist1d, CNN1d, Dirichlet 0.1 over 20 clients at 25% (Bernoulli), 10 local steps of 50 samples, lr 0.1,
rho = 0.1 for every method (matched; the config default), 30 rounds. PD by the drift hook at every other local step
against grad F on a fixed 1000-sample subset of the clients' data; global sharpness of w^{t+1} on the same subset
by the sharpness probe ``probes.sharpness.global_sharpness`` (5-step projected ascent from the one-step SAM point, rho
matched to training). A third panel shows the stored direction estimators against grad F(w^{t+1}): FedLESAM's
cos(w_i^old - w, grad F) (mean over clients), FedSMOO's cos(s, grad F), MoFedSAM's cos(Delta, grad F).
Writes paper_figures/out/fedlesam_fig2_drift/{fig.png, data.json}.

    python paper_figures/fedlesam_fig2_drift.py [--rounds 30]
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
from fedlab_analysis.probes import drift
from fedlab_analysis.trainers.engine import Run

OUT = Path(__file__).parent / "out" / "fedlesam_fig2_drift"
ALGOS = ("fedavg", "fedsam", "mofedsam", "fedgamma", "fedsmoo", "fedlesam")
CLAIM = ("FedLESAM Fig. 2 claims: FedLESAM's perturbation drift and global sharpness are much smaller than FedSAM's, "
         "MoFedSAM's, FedGAMMA's and FedSMOO's; FedSAM is not flatter than FedAvg")
SAMPLES, RHO = 1000, 0.1


def sharpness_hook(rows: list, samples_idx):
    """After every round: global sharpness of w^{t+1} (the sharpness probe), or nothing when it is missing."""
    try:
        from fedlab_analysis.probes.sharpness import global_sharpness
    except ImportError:
        return None

    def hook(event, run, ctx, x):
        if event != "round":
            return
        was = run.model.training
        run.model.eval()
        ix = samples_idx(run)
        r = global_sharpness(run.forward, run.w, run.X[ix], run.Y[ix], RHO, method="ascent", steps=5)
        run.model.train(was)
        rows.append({"round": ctx.t + 1, "sharpness": r["sharpness"], "loss": r["loss"]})
    return hook


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.1, help="local learning rate (the simulator's 0.1)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    # one fixed subset of the union of the clients' data, shared by the drift and sharpness probes
    pick = lambda run: torch.cat(run.idx)[torch.randperm(sum(map(len, run.idx)),   # noqa: E731
                                                         generator=torch.Generator().manual_seed(0))[:SAMPLES]]
    runs, t0 = {}, time.perf_counter()
    for algo in ALGOS:
        cfg = RunConfig(algo=algo, dataset="mnist1d", model="cnn1d", clients=20, active_ratio=0.25,
                        partition="dirichlet", dir_alpha=0.1, local_steps=10, batch_size=50, lr=args.lr, rho=RHO,
                        rounds=args.rounds, seed=args.seed, quiet=True)
        dh = drift.make_hook(steps=2, samples=SAMPLES, seed=0)
        sharp: list = []
        sh = sharpness_hook(sharp, pick)
        s0 = time.perf_counter()
        run = Run(cfg)
        run.callbacks += [dh] + ([sh] if sh else [])
        for _ in range(cfg.rounds):
            run.round()
        rounds = [r for r in dh.rows if r["event"] == "round"]
        runs[algo] = {"drift": rounds, "sharpness": sharp, "test_acc": run.evaluate(run.Xte, run.Yte)[1],
                      "seconds": time.perf_counter() - s0}
        print(f"{algo:9s} {runs[algo]['seconds']:5.1f}s  test acc {runs[algo]['test_acc']:.3f}", flush=True)
    have_sharp = bool(runs["fedavg"]["sharpness"])

    mean_pd = {a: float(np.nanmean([r["pd"] if r["pd"] is not None else np.nan for r in v["drift"]]))
               for a, v in runs.items() if a != "fedavg"}
    last = max(1, args.rounds // 3)            # the last third of training
    late_sharp = {a: float(np.mean([r["sharpness"] for r in v["sharpness"][-last:]])) for a, v in runs.items()} \
        if have_sharp else {}
    others = [a for a in mean_pd if a != "fedlesam"]
    verdict_pd = all(mean_pd["fedlesam"] < mean_pd[a] for a in others)
    verdict_sh = all(late_sharp["fedlesam"] < late_sharp[a] for a in others) if have_sharp else None

    fig, ax = figure(ncols=3 if have_sharp else 2, w=4.4, h=3.4)
    for a, v in runs.items():
        rr = [r["round"] for r in v["drift"]]
        if a != "fedavg":
            ax[0, 0].plot(rr, [r["pd"] if r["pd"] is not None else np.nan for r in v["drift"]],
                          label=f"{a}: mean {mean_pd[a]:.3f} (acc {v['test_acc']:.2f})")
        if have_sharp:
            ax[0, 1].plot([r["round"] for r in v["sharpness"]], [r["sharpness"] for r in v["sharpness"]],
                          label=f"{a}: last third {late_sharp[a]:.3g} (acc {v['test_acc']:.2f})")
    ax[0, 0].set(xlabel="round", ylabel="perturbation drift (unit directions)", ylim=(0, 1),
                 title="drift PD^t (left panel of Fig. 2)")
    ax[0, 0].legend(fontsize=7)
    if have_sharp:
        ax[0, 1].set(xlabel="round", ylabel=f"global sharpness, rho={RHO}", yscale="log",
                     title="global sharpness (right panel)")
        ax[0, 1].legend(fontsize=7)
    est = ax[0, -1]
    for a, key, lab in (("fedlesam", "lesam_cos", "FedLESAM cos(w_i^old - w, grad F(w))"),
                        ("fedlesam", "update_cos_start", "FedLESAM cos(w^t - w^{t+1}, grad F(w^t))"),
                        ("fedsmoo", "smoo_cos_s_grad", "FedSMOO cos(s, grad F(w))"),
                        ("mofedsam", "fedcm_cos_D_grad", "MoFedSAM cos(Delta, grad F(w))")):
        rows = runs[a]["drift"]
        est.plot([r["round"] for r in rows], [r.get(key) if r.get(key) is not None else np.nan for r in rows],
                 label=lab)
    est.set(xlabel="round", ylabel="cosine", ylim=(-1, 1), title="direction estimators at w = w^{t+1}")
    est.legend(fontsize=6.5)
    cos_les = {k: float(np.nanmean([r.get(k) if r.get(k) is not None else np.nan for r in runs["fedlesam"]["drift"]]))
               for k in ("lesam_cos", "update_cos_start", "update_cos_end")}
    measured = (f"mean PD: FedLESAM {mean_pd['fedlesam']:.3f} vs "
                + ", ".join(f"{a} {mean_pd[a]:.3f}" for a in others)
                + f" -> {'lowest' if verdict_pd else 'NOT lowest'}")
    measured += (f".\nFedLESAM's estimate: mean cos(w_i^old - w, grad F(w)) {cos_les['lesam_cos']:+.2f}; its last "
                 f"global update has cos {cos_les['update_cos_start']:+.2f} with grad F at the round's start, "
                 f"{cos_les['update_cos_end']:+.2f} at its end")
    if have_sharp:
        measured += (f"; late global sharpness FedLESAM {late_sharp['fedlesam']:.3g} "
                     f"{'lowest of the SAM family' if verdict_sh else 'NOT lowest of the SAM family'}, "
                     f"FedSAM {late_sharp['fedsam']:.3g} vs FedAvg {late_sharp['fedavg']:.3g}")
    else:
        measured += "; global sharpness not drawn: probes.sharpness.global_sharpness is not available"
    fig.suptitle(f"{CLAIM}.\nMeasured (CNN1d on mnist1d, Dir-0.1, 20 clients at 25%, 10 local steps, rho={RHO}, "
                 f"lr={args.lr}, {args.rounds} rounds): {measured}", fontsize=8)
    fig.tight_layout()
    OUT.mkdir(parents=True, exist_ok=True)
    save(fig, OUT / "fig.png")
    data = {"claim": CLAIM, "measured": measured, "mean_pd": mean_pd, "late_sharpness": late_sharp,
            "fedlesam_cosines": cos_les, "lr": args.lr,
            "fedlesam_lowest_pd": verdict_pd, "fedlesam_lowest_sharpness": verdict_sh,
            "seconds": time.perf_counter() - t0, "runs": runs}
    (OUT / "data.json").write_text(json.dumps(data, indent=1) + "\n")
    print(measured)


if __name__ == "__main__":
    main()
