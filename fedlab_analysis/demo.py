"""`make demo`: the main job on embedded data, a few minutes on 2 CPU cores.

1. FedAvg on scikit-learn's digits (MLP, 20 clients, Dirichlet 0.3, half active, batch 10, 5 local epochs,
   lr 0.1, 30 rounds): the final test accuracy, the learning curve and the partition heat map.
2. FedSMOO on the same clients, for the FedAvg-vs-FedSMOO comparison of FedSMOO's Table 2 and Fig. 3.
3. The probes on both final checkpoints, through the same command line a user runs: the top Hessian eigenvalues
   and trace (printed), the spectral density (plotted), a filter-normalised 2-D loss surface, and both surfaces side
   by side on one colour scale.
Everything goes to --out (default out/demo).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from . import plots
from .cli import guard, out_dir
from .config import RunConfig
from .errors import UserError
from .options import ArgParser
from .rules import arg_type
from .trainers.loop import train

DEMO = dict(algo="fedavg", dataset="digits", model="mlp", clients=20, partition="dirichlet", dir_alpha=0.3,
            active_ratio=0.5, batch_size=10, local_epochs=5, lr=0.1, lr_decay=1.0, wd=0.0, rounds=30, seed=0,
            keep_clients=True)     # the consensus probe and `landscape --plane clients` read the last local models
PROBE = ["--data", "train", "--samples", "1000", "--seed", "0"]


def probe(name, ckpt, *argv) -> dict:
    """Probe ``name`` on ``ckpt`` in process with the flags of its command line (``--json FILE``, ``--plot FILE``):
    the probe's ``compute`` through ``probes.runner.measure``; its result written and returned as the command
    line writes it."""
    from .probes import line
    p = line.parser()
    args = p.parse_args([str(a) for a in (name, ckpt, *argv)])
    try:
        result = line.run(p, args)
    except UserError as e:
        raise SystemExit(f"demo: the probe {name} failed: {e}") from None
    return line.write_json(result, args.json)


@guard("demo")
def main(argv=None) -> int:
    p = ArgParser(prog="python -m fedlab_analysis.demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="out/demo")
    p.add_argument("--rounds", type=arg_type(int, lo=1), default=DEMO["rounds"])
    p.add_argument("--grid", type=arg_type(int, lo=2), default=21, help="loss-surface grid size")
    p.add_argument("--seed", type=arg_type(int, lo=0), default=DEMO["seed"], help="seed of both runs (the split "
                   "of the clients included; the probes' 1000-sample subset keeps seed 0)")
    args = p.parse_args(argv)
    try:
        out = out_dir(args.out)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    import torch
    torch.set_num_threads(1)                # the demo MLP runs several times faster on one thread than two
    t0 = time.perf_counter()

    # ---- 1. FedAvg -------------------------------------------------------------------------------------------
    cfg = RunConfig(**{**DEMO, "rounds": args.rounds, "seed": args.seed})
    run = train(cfg, out / "fedavg", overwrite=True)          # make demo regenerates its runs
    rows = {"FedAvg": plots.read_metrics(out / "fedavg")}
    print(f"FedAvg on digits, {cfg.clients} clients, Dirichlet {cfg.dir_alpha}: final test accuracy "
          f"{rows['FedAvg'][-1]['test_acc']:.4f} after {run.t} rounds ({time.perf_counter() - t0:.1f} s)")
    from .data import plot_partition
    plots.save(plot_partition(run.part.counts, title=f"digits, Dirichlet {cfg.dir_alpha}, {cfg.clients} clients"),
               out / "partition.png")

    # ---- 2. FedSMOO on the same clients ----------------------------------------------------------------------
    t1 = time.perf_counter()
    train(RunConfig(**{**DEMO, "rounds": args.rounds, "seed": args.seed, "algo": "fedsmoo", "rho": 0.05}),
          out / "fedsmoo",
          overwrite=True)
    rows["FedSMOO"] = plots.read_metrics(out / "fedsmoo")
    print(f"FedSMOO (rho 0.05, lamb 0.1): final test accuracy {rows['FedSMOO'][-1]['test_acc']:.4f} "
          f"({time.perf_counter() - t1:.1f} s)")
    plots.save(plots.learning_curves(rows, "digits, MLP, Dirichlet 0.3"), out / "learning_curve.png")

    # ---- 3. probes on the final checkpoints ------------------------------------------------------------------
    summary = {"FedAvg": {"final": rows["FedAvg"][-1]}, "FedSMOO": {"final": rows["FedSMOO"][-1]}}
    for name in ("fedavg", "fedsmoo"):
        ck, tag = out / name / "ckpt" / "last.pt", name.replace("fedavg", "FedAvg").replace("fedsmoo", "FedSMOO")
        h = probe("hessian", ck, *PROBE, "--top-k", "3", "--json", out / f"{name}_hessian.json")
        tr = probe("trace", ck, *PROBE, "--products", "60", "--deflate", "3", "--json", out / f"{name}_trace.json")
        summary[tag].update(top_eigenvalues=h["eigenvalues"], trace=tr["trace"], trace_stderr=tr.get("stderr"),
                            n_samples=h["n_samples"], n_available=h["n_available"])
        print(f"{tag}: top Hessian eigenvalues {', '.join(f'{v:.3f}' for v in h['eigenvalues'])} "
              f"({h['n_products']} Hessian-vector products); trace {tr['trace']:.2f} +- {tr.get('stderr', 0):.2f}; "
              f"on {h['n_samples']} of the {h['n_available']} training samples")
    print(f"(The demo probes a seeded {h['n_samples']}-sample subset to stay fast. `python -m fedlab_analysis.probe "
          f"hessian CKPT` uses all {h['n_available']} samples by default, so its numbers differ; add "
          f"{' '.join(PROBE[2:])} to reproduce the ones above.)")
    probe("density", out / "fedavg/ckpt/last.pt", *PROBE, "--json", out / "fedavg_density.json",
          "--plot", out / "density.png")
    probe("landscape", out / "fedavg/ckpt/last.pt", *PROBE, "--grid", args.grid, "--json",
          out / "fedavg_landscape.json", "--plot", out / "landscape.png")
    side_by_side(out, args.grid)
    summary["seconds"] = time.perf_counter() - t0
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=float) + "\n")
    print(f"wrote {out}/: learning_curve.png, partition.png, density.png, landscape.png, "
          f"fedavg_vs_fedsmoo_landscape.png, *.json, fedavg/ and fedsmoo/ run directories "
          f"({summary['seconds']:.0f} s in all)")
    return 0


def side_by_side(out: Path, grid: int) -> None:
    """FedSMOO Fig. 3 style: both final models' surfaces on one colour scale, each on its own random
    filter-normalised plane (the same seed), evaluated on the same 1000 training samples."""
    from . import checkpoint
    from .probes.common import rebuild
    from .probes.landscape import plane_random, plot_panel, surface
    results = []
    for name in ("fedavg", "fedsmoo"):
        b = rebuild(checkpoint.load(out / name / "ckpt" / "last.pt"), data="train", samples=1000, seed=0)
        d1, d2 = plane_random(b.space, b.theta, seed=0)
        results.append(surface(b.f, b.theta, d1, d2, (b.X, b.y), grid=grid))
    fig = plot_panel(results, [f"FedAvg, round {b.ckpt['round']}", f"FedSMOO, round {b.ckpt['round']}"],
                     kind="contour")
    plots.title(fig, f"mlp on digits: train loss around each final global model, random filter-normalised plane "
                 f"(seed 0), {grid} x {grid} grid, {results[0]['n_samples']} training samples, shared colour scale")
    plots.save(fig, out / "fedavg_vs_fedsmoo_landscape.png")


if __name__ == "__main__":
    raise SystemExit(main())
