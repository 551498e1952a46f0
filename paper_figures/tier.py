"""Train every run a tier needs, once, in priority order: ``python -m paper_figures.tier --tier mnist [--plan]``.

Each script that trains exposes ``run_list(tier, seeds) -> [(overrides, seed, tag), ...]``; this collects them in
:data:`ORDER` (each paper's main comparison first, so partial progress still yields whole comparisons), drops the
runs two scripts share (the same resolved config and tag is one run), and trains the rest through the resumable
pool of ``--workers``, each training packs of up to ``--pack`` runs together (paper_figures.runs; a GPU where one
is present). ``--plan`` prints the run table and the estimated time (the full tier: GPU-hours from a measured
round, naming the card) and trains nothing; it needs no data. Scripts not in ORDER check identities, counts or toy
models and train no tier runs (TOY).
"""
from __future__ import annotations

import importlib
import sys
from collections import OrderedDict

from fedlab_analysis.cli import guard
from paper_figures import common
from paper_figures.claims import TOY  # noqa: F401  (re-exported: the Makefile reads tier.TOY)
from paper_figures import probed
from paper_figures import runs as R

ORDER = ("fedsmoo_table2", "fedlesam_fig2_drift", "fedcm_table3_alpha", "fedinit_table6", "fedals_table2",
         "fedsmoo_fig3_surface", "fedlesam_fig3_surface", "fedlesam_fig4_rho", "fedcm_fedadam_oscillation",
         "fedcm_dispersion", "fedinit_fig2_consensus", "fedals_fig1_consensus", "fedinit_fig1_sensitivity",
         "fedsmoo_table8_ablation")


def collect(tier: str, seeds: int, only=None) -> tuple[list[dict], dict]:
    """(the union of the scripts' tasks in priority order, {script: [its task paths]}); with ``only``, those
    scripts in the order given."""
    tasks, per = OrderedDict(), {}
    for name in dict.fromkeys(only) if only else ORDER:
        mod = importlib.import_module(f"paper_figures.{name}")
        ts = R.tasks(mod.run_list(tier, seeds), tier)
        per[name] = [t["path"] for t in ts]
        for t in ts if getattr(mod, "WEIGHTS", False) else ():   # measured after training (module probed); a
            t["measure"], t["weights"] = [name], not probed.marked(t["path"], name)   # light run it measured does
        for t in ts:
            m = tasks.setdefault(t["path"], t)
            if m is not t:                          # one script reading weights is enough
                m["weights"], m["measure"] = m["weights"] or t["weights"], m.get("measure", []) + t.get("measure", [])
    return list(tasks.values()), per


def plan_table(tasks: list[dict], per: dict, workers: int, tier: str = "mnist") -> str:
    """Markdown: script, new runs (not trained for an earlier script), shared runs, their rounds, the estimated
    time: CPU minutes (one thread) and hours with ``workers``, or for the full tier GPU-hours on ``runs.CARD``."""
    gpu = tier == "full"
    unit = "GPU-hours (new)" if gpu else "est. minutes (new, 1 thread)"
    first, lines = set(), [f"| script | runs | new | shared with earlier | rounds (new) | {unit} | "
                           f"done after (h, {workers} {'GPUs' if gpu else 'workers'}) |",
                           "|---|---|---|---|---|---|---|"]
    est, rounds, cum = {t["path"]: t["est"] for t in tasks}, {t["path"]: t["config"]["rounds"] for t in tasks}, 0.0
    scale = 3600 if gpu else 60
    for name, paths in per.items():
        new = [p for p in paths if p not in first]
        first.update(paths)
        cum += sum(est[p] for p in new)
        lines.append(f"| {name} | {len(paths)} | {len(new)} | {len(paths) - len(new)} | "
                     f"{sum(rounds[p] for p in new):,} | {sum(est[p] for p in new) / scale:.{1 if gpu else 0}f} | "
                     f"{cum / 3600 / workers:.1f} |")
    total = sum(est.values())
    for name in TOY:
        lines.append(f"| {name} | 0 (identity, count or toy: no tier runs) | 0 | 0 | 0 | 0 | |")
    lines.append(f"| **total** | | **{len(tasks)}** | | **{sum(rounds.values()):,}** | "
                 f"**{total / scale:.{1 if gpu else 0}f}** | **{total / 3600 / workers:.1f}** |")
    if gpu:
        lines.append(f"\nGPU-hours from the measured per-round cost on {R.CARD}.")
    else:
        lines.append(f"\nCPU minutes from the per-step cost measured on the reference machines, times this machine's "
                     f"measured step time over theirs ({R.machine_factor():.2f}; `runs.machine_factor`).")
    return "\n".join(lines)


@guard("paper_figures.tier")
def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--plan", action="store_true")
    ap.add_argument("--only", nargs="+", default=None)
    own, rest = ap.parse_known_args(argv)
    if "-h" in rest or "--help" in rest:
        print(__doc__ + "\n--plan: print the run table and the estimated time, train nothing; --only SCRIPT ...: "
              "only these scripts' runs, in the order given; and the scripts' flags:")
    args = common.parse_args(__doc__.split("\n\n")[0], rest, need_data=not own.plan)
    plan, only = own.plan, own.only
    if only and set(only) - set(ORDER):
        print(f"error: --only: unknown script {sorted(set(only) - set(ORDER))[0]!r}; choose from "
              f"{', '.join(ORDER)}", file=sys.stderr)
        return 2
    tasks, per = collect(args.tier, args.seeds, only)
    print(plan_table(tasks, per, args.workers, args.tier))
    if plan:
        for t in tasks:                               # what a killed worker or a full disk left: trained again
            why = R.damaged(t)
            if why:
                print(f"damaged: {t['path']}: {why}; it will be trained again")
        left = [t for t in tasks if R.status(t) != "done"]
        hours = sum(t["est"] for t in left) / 3600 / args.workers
        print(f"{len(tasks) - len(left)} of {len(tasks)} runs done; {hours:.1f} h left with {args.workers} "
              f"{'GPUs' if args.tier == 'full' else 'workers'}")
        return 0
    recs = R.train_pool(tasks, args.workers, quiet=args.quiet, desc=f"tier {args.tier}", pack=args.pack)
    bad = [r for r in recs if r["status"] == "failed"]
    print(f"{len(tasks) - len(bad)} of {len(tasks)} runs done" + (f"; {len(bad)} failed (see their failed.json)"
                                                                  if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
