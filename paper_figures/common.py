"""What every reproduction script shares: the tiers, the command line, cached multi-seed training, mean ± std, the
claims table, and how a figure and its numbers are saved (the one verdict rule is paper_figures/verdict.py, the
claims it judges paper_figures/claims.py).

Tiers (``TIERS``, ``--tier``):
- quick (the default): scikit-learn's digits (embedded, nothing downloaded) with a small MLP, so a notebook runs in
  minutes on a 2-core CPU (CI); FedAvg reaches about 94% test accuracy there.
- mnist: the real-data tier. MNIST (``make data``) with the 784-200-200-10 MLP in the papers' federated protocol
  (100 clients, 10% per round, Dirichlet 0.6 or 0.1, batch 50, 5 local epochs, FL-Simulator's local lr 0.1, decay
  0.998 per round and weight decay 1e-3), 300 rounds, 5 seeds; FedALS in its own protocol (5 clients, 2 classes
  each). Every run of the tier is trained once for every script that uses it, through a resumable process pool
  (``python -m paper_figures.tier``; the plan is in paper_figures/README_TIER.md).
- full: the papers' setting (CIFAR-10 from --data-dir, ResNet-18-GN, 800 rounds); wants a GPU.

Run cache (:mod:`paper_figures.runs`): one directory per run under ``<out>/runs/<tier>/``, keyed by the resolved
config, the hooks' ``tag``, :func:`~paper_figures.runs.training_source_hash` and, for a tagged run,
:func:`~paper_figures.runs.hooks_source_hash`; a run whose key differs is trained again, a killed run resumes from
its last checkpoint. Convergence: :func:`converged`. Matched fit: :func:`matched_checkpoints`. A comparison this
tier's grid does not hold: :func:`not_in_tier`. The released code's form of a method, run beside the paper's in
the real tiers: :func:`code_form`.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

import numpy as np

from fedlab_analysis import plots
from fedlab_analysis.errors import UserError
from paper_figures import runs
from paper_figures import tiers as T
from paper_figures import verdict as V
from paper_figures.claims import CLAIMS
from paper_figures.verdict import converged  # noqa: F401  (re-exported: scripts and tests read C.converged)
from paper_figures.tiers import (FMNIST_BASE, FULL_BASE, MNIST_BASE, OUT, PER_METHOD, PROTOCOL,  # noqa: F401
                                 QUICK_BASE, REAL, REAL_UNCLIPPED, SEEDS, TIERS, config, protocol, tier_of)

VERDICTS = V.OUTCOMES


def __getattr__(name):
    """``common._ARGS``: the options parse_args set, kept in :mod:`paper_figures.tiers` (the run cache reads them)."""
    if name == "_ARGS":
        return T._ARGS
    raise AttributeError(f"module 'paper_figures.common' has no attribute {name!r}")


def parse_args(description: str, argv=None, need_data: bool = True) -> argparse.Namespace:
    """--tier quick|mnist|full (--full = --tier full), --seeds N (default 3 quick, 5 mnist), --workers N (default
    2), --pack N (default 4), --out DIR, --data-dir, --quiet. Bad input: one `error:` line, exit 2. ``args.full`` is
    ``tier == "full"``; ``need_data`` False: --tier full without --data-dir (a plan reads no data)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--tier", default=None, help="quick (digits, minutes on a CPU; default), mnist (the real-data "
                    "tier: MNIST, the papers' protocol, 5 seeds; `make data` first) or full (CIFAR-10 from "
                    "--data-dir, ResNet-18-GN; wants a GPU)")
    ap.add_argument("--full", action="store_true", help="the same as --tier full")
    ap.add_argument("--seeds", type=int, default=None, help="seeds per configuration (default 3; 5 for mnist)")
    ap.add_argument("--workers", type=int, default=2, help="runs trained side by side, one torch thread each "
                    "(default 2)")
    ap.add_argument("--pack", type=int, default=4, help="runs of one model trained together in each worker "
                    "(fedlab_analysis.trainers.pack; each still its own run directory, equal to the run alone); "
                    "1: one run at a time (default 4)")
    ap.add_argument("--out", default=os.environ.get("PAPER_FIGURES_OUT") or str(OUT),
                    help=f"output root; results go to OUT/<name>/ (default $PAPER_FIGURES_OUT, else {OUT})")
    ap.add_argument("--data-dir", default=None, help="directory with the official dataset files (--tier full: "
                    "CIFAR-10; --tier mnist: optional, else the `make data` cache)")
    ap.add_argument("--quiet", action="store_true", help="print only the final summary")
    args = ap.parse_args(argv)
    err = None
    if args.tier is not None and args.tier not in TIERS:
        err = f"--tier: unknown {args.tier!r}; choose one of {', '.join(TIERS)}"
    elif args.full and args.tier not in (None, "full"):
        err = f"--full: means --tier full; it contradicts --tier {args.tier}"
    args.tier = "full" if args.full else (args.tier or "quick")
    if err is None and args.seeds is None:
        args.seeds = SEEDS[args.tier]
    if err is not None:
        pass
    elif args.seeds < 1:
        err = f"--seeds: must be >= 1 (got {args.seeds})"
    elif args.workers < 1:
        err = f"--workers: must be >= 1 (got {args.workers})"
    elif args.pack < 1:
        err = f"--pack: must be >= 1 (got {args.pack})"
    elif args.tier == "full" and not args.data_dir and need_data:
        err = "--data-dir: --tier full reads CIFAR-10 from a local directory; give --data-dir DIR"
    elif args.data_dir and not Path(args.data_dir).is_dir():
        err = f"--data-dir: no directory {args.data_dir!r}"
    if err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2)
    from fedlab_analysis.cli import out_dir as writable_dir
    writable_dir(args.out, "--out")                  # before any work: one line (a UserError) if it cannot be
    args.full = args.tier == "full"
    from fedlab_analysis.device import resolve, set_threads
    set_threads(1)                                   # the MLPs are fastest on one thread; shares the machine
    T._ARGS.update(out=Path(args.out), data_dir=args.data_dir, workers=args.workers, tier=args.tier, pack=args.pack,
                 device=str(resolve("auto")) if args.tier != "quick" else "cpu")   # real tiers: the GPU if any
    return args


def run_script(name: str, compute, doc: str, argv=None, plot=None, summary=None) -> dict:
    """Every script's main: parse the command line, train the script's runs (``run_list(tier, seeds)`` of its
    module, through the pool of ``--workers``), compute (and plot), save data.json + fig.png, print the verdicts.
    ``compute(seeds, tier)`` returns (data, fig), or the data alone when ``plot(data)`` draws the figure;
    ``summary(data)`` is what is printed (default: the table's rows and the counts per verdict). Under the commands'
    guard (``fedlab_analysis.cli.guard``): bad input one line, exit 2; a defect one line, exit 1 (--debug: the
    traceback)."""
    from fedlab_analysis.cli import guard
    done = {}

    @guard(f"paper_figures.{name}")
    def guarded(argv):
        done["data"] = _run_script(name, compute, doc, argv, plot, summary)
        return 0
    code = guarded(sys.argv[1:] if argv is None else [str(a) for a in argv])
    if code:
        raise SystemExit(code)
    return done["data"]


def _run_script(name: str, compute, doc: str, argv, plot, summary) -> dict:
    args = parse_args(doc.split("\n\n")[0], argv)
    from paper_figures import probed
    mod = sys.modules.get(getattr(compute, "__module__", ""), None)
    listed = mod is not None and hasattr(mod, "run_list")
    weights = getattr(mod, "WEIGHTS", False)

    def train(strict: bool):
        if listed:
            runs.train_pool(runs.tasks(mod.run_list(args.tier, args.seeds), args.tier, weights=strict), args.workers,
                            quiet=args.quiet, pack=args.pack)
    try:
        try:                                          # a weights script: first from what the ledger kept
            with probed.lenient() if weights else contextlib.nullcontext():
                train(False)
                out = compute(args.seeds, args.tier)
        except probed.NeedWeights as e:               # then its light runs are trained again (module probed)
            print(f"{name}: {e}; training its runs restored from the ledger again", file=sys.stderr)
            train(True)
            out = compute(args.seeds, args.tier)
        if weights and listed:
            probed.mark([t["path"] for t in runs.tasks(mod.run_list(args.tier, args.seeds), args.tier)], name)
    except UserError as e:
        run_error(e)
    data, fig = (out, plot(out)) if plot is not None else out
    save_result(name, data, fig, args.tier)
    if summary is not None:
        if not args.quiet:
            print(name, summary(data))
        return data
    if not args.quiet:
        for t in data["table"]:
            print(f"{t['verdict']:15s} {t['row']}: {t['measured']} [{t['claim']}]")
    print(f"{name}: {data['summary']}")
    return data


def seed_list(seeds) -> list[int]:
    """3 -> [0, 1, 2]; a list stays as it is."""
    return list(range(seeds)) if isinstance(seeds, int) else list(seeds)


def setting(tier="quick", **shown) -> str:
    """One line naming the run for a figure title: model, data, clients, rounds and the given hyper-parameters."""
    b = TIERS[tier_of(tier)]
    extra = "".join(f", {k}={v}" for k, v in shown.items())
    return (f"{b['model']} on {b['dataset']}, {b['clients']} clients at {b['active_ratio']:.0%}, "
            f"{b['rounds']} rounds{extra}")


def main_tag(tier, quick_tag: str = "") -> str:
    """The hooks tag of a run in the papers' main protocol: in the mnist tier every such run carries the same hooks
    (``runs.HOOKS["mnist"]``: consensus, drift and global sharpness at rho 0.1, every 5 rounds), so one run serves
    every script that trains that config; in the other tiers the script's own ``quick_tag``."""
    return "mnist" if protocol(tier) == "mnist" else quick_tag


def train_seeds(cfg_overrides: dict, seeds, out_root=None, tier="quick", callbacks_fn=None, tag: str = "",
                weights: bool = False) -> list:
    """One run per seed from the tier's run cache (``runs.ensure``: trained once, resumed when killed, trained again
    when its key changes). ``tag`` names the hooks the runs carry (``runs.HOOKS[tag](seed) -> [hooks]``, so they
    also work in pool workers); ``callbacks_fn`` is accepted only for a registered tag. ``out_root`` (default
    ``<out>/runs/<tier>``) is the cache directory. Returns [{"seed", "run_dir", "test_acc", "rows", "converged",
    "diverged", "matched"}, ...]: rows are the metrics.jsonl rows (with the hooks' probe rows), ``diverged`` the
    reason training went non-finite (None if it did not; such a run is an outcome, never dropped), ``matched``
    {rung: checkpoint path} of the matched-fit ladder. ``weights``: the caller reads the checkpoints (its module's
    ``WEIGHTS``), so a run restored from the ledger without them is trained again, except in ``run_script``'s first,
    lenient pass, which measures from what :mod:`paper_figures.probed` kept."""
    t = tier_of(tier)
    if callbacks_fn is not None and tag not in runs.HOOKS:
        raise ValueError(f"train_seeds: tag {tag!r} is not in paper_figures.runs.HOOKS; register its hooks there "
                         f"so that pool workers can build them")
    tasks = runs.tasks([(cfg_overrides, s, tag) for s in seed_list(seeds)], t, out_root, weights)
    return [runs.result(runs.ensure(task)) for task in tasks]


def matched_checkpoints(runs_: list) -> dict:
    """The lowest rung of the matched-fit ladder (``runs.RUNGS``: train loss 0.3, 0.1, 0.03, 0.01, 0.003) that every
    run of ``runs_`` (train_seeds results) reached, and each run's model-only checkpoint there (saved the first
    time its train loss fell below the rung): ``{"rung": r or None, "paths": [...], "rounds": [...]}`` in the
    order of ``runs_``. A comparison probes each algorithm at this common rung."""
    from paper_figures import probed
    if any(x.get("matched", {}) is None for x in runs_):      # a light entry recorded before its rounds were kept
        raise probed.NeedWeights("a run restored from the ledger does not keep its matched-fit rounds")
    common_rungs = [r for r in runs.RUNGS if all(str(r) in x.get("matched", {}) for x in runs_)]
    if not common_rungs or not runs_:
        return {"rung": None, "paths": [], "rounds": []}
    r = min(common_rungs)
    hits = [x["matched"][str(r)] for x in runs_]
    return {"rung": r, "paths": [h["path"] for h in hits], "rounds": [h["round"] for h in hits]}


def mean_std(xs) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1; 0 for a single value)."""
    x = np.asarray(list(xs), dtype=float)
    return float(x.mean()), float(x.std(ddof=1)) if x.size > 1 else 0.0


def pm(xs, digits: int = 3) -> str:
    """'mean ± std' of xs to ``digits`` significant digits."""
    m, s = mean_std(xs)
    return f"{m:.{digits}g} ± {s:.2g}"


def row(claim_id: str, label: str, measured: str, result: dict, **extra) -> dict:
    """One table row: the verdict.decide/exact/not_measured ``result`` of claim ``claim_id`` with the row's label,
    the measured text (which states the seeds) and the paper's words and place from the claim registry."""
    c = CLAIMS[claim_id]
    return {"row": label, "claim": claim_id, "paper": c.cite(), "measured": measured, **result, **extra}


def not_in_tier(claim_id: str, label: str, missing, tier, **extra) -> dict:
    """The row of a comparison whose configs this tier's grid does not hold (the mnist tier trims grids to fit its
    budget): verdict "not measured", its text "not measured in this tier" naming what is missing; never a value
    filled in."""
    why = f"not measured in this tier: {', '.join(map(str, missing))} not in the {tier_of(tier)} tier's grid"
    return row(claim_id, label, why, V.not_measured(CLAIMS[claim_id], why), **extra)


# Code forms. Where the authors' released code differs from the paper's text and the paper's numbers came from that
# code, a script runs the code's form beside the paper's in the real tiers (never in quick, whose CI outputs keep the
# paper's form alone) and judges it by the same rows, each labelled "code form" and marked form="code". A script's
# CODE = {arm: code_form(...)} lists them.
CODE_FORM = "code form"


def code_form(base: str, label: str, **knobs) -> tuple:
    """One code-form arm: (the paper-form arm it changes, its label "<label> (code form)", the knobs that give the
    released code's form, e.g. ``smoo_server="code"``)."""
    return base, f"{label} ({CODE_FORM})", knobs


def code_base(arm: str, code: dict) -> str:
    """The paper-form arm a code form changes; a paper-form arm is its own base."""
    return code[arm][0] if arm in code else arm


def code_arms(code: dict, tier) -> dict:
    """{arm: label} of the code forms in ``code`` that ``tier`` trains: all of them in every tier but quick."""
    return {k: v[1] for k, v in code.items()} if tier_of(tier) != "quick" else {}


def code_hp(arm: str, code: dict, hp) -> dict:
    """``arm``'s run overrides: ``hp(arm)`` for a paper-form arm; for a code form, its base's ``hp(base)`` with the
    code's knobs."""
    return {**hp(code_base(arm, code)), **(code[arm][2] if arm in code else {})}


def code_mark(arm: str, code: dict) -> tuple[str, dict]:
    """(the row label's tail, the row's extra fields) of a comparison made with ``arm``: ("", {}) for the paper's
    form, (" [<label>]", {"form": "code"}) for a code form."""
    return (f" [{code[arm][1]}]", {"form": "code"}) if arm in code else ("", {})


def interior_peak(grid, acc: dict, runs: dict, claims: tuple[str, str], label: str, key: str):
    """The rise-then-drop rows of a sweep over ``grid`` (FedCM Table 3's alpha, FedLESAM Fig. 4's rho/eta_l): the
    best interior point against each end, one claim each (``claims`` = (low end, high end)), on the per-seed values
    ``acc[g]`` of the runs ``runs[g]``. ``label`` is formatted with ``peak`` and ``end``; ``key`` names the row's
    grid field. Returns (peak, means per grid point, rows)."""
    means = {g: acc[g].mean() for g in grid}
    peak = max(grid[1:-1], key=means.get)
    rows = []
    for cid, end in zip(claims, (grid[0], grid[-1])):
        v = V.decide(CLAIMS[cid], acc[peak] - acc[end], runs[peak] + runs[end])
        rows.append(row(cid, label.format(peak=peak, end=end), f"{V.fmt(v, 100, ' points')}", v, **{key: end}))
    return peak, means, rows


def run_ids(arms: dict) -> dict:
    """``{path: [each run's id]}`` for a data.json's ``run_ids``: ``path`` names where the arm's per-seed accuracies
    sit in it ("acc/fedavg"), so a control across scripts (``settings.CONTROLS``) finds the runs, then their curves,
    and gates on them like any claim."""
    return {path: [V.run_id(r) for r in rs] for path, rs in arms.items()}


def finish(table: list[dict]) -> dict:
    """The verdict fields every data.json carries: ``n_comparisons``, ``counts`` per verdict and ``summary`` (the
    counts in words: "3 reproduced, 2 opposite of 5 comparisons", never one word over mixed rows)."""
    counts = {v: sum(t["verdict"] == v for t in table) for v in V.OUTCOMES}
    return {"n_comparisons": len(table), "counts": {v: n for v, n in counts.items() if n},
            "summary": V.summary(table)}


def claims_table(rows: list[dict], theory: list[dict] | None = None) -> str:
    """Markdown: claim (the paper's words and place) / we measured / verdict, one line per comparison (the scripts'
    table rows), then the theory command's claims on convex toys (their own verdict words)."""
    out = ["| comparison | paper says (where) | we measured | verdict |", "|---|---|---|---|"]
    cell = lambda x: str(x).replace("|", "\\|")                                     # noqa: E731
    for r in rows:
        out.append(f"| {cell(r['row'])} | {cell(r['paper'])} | {cell(r['measured'])} | **{r['verdict']}** |")
    for c in theory or []:
        out.append(f"| {cell(c['claim'])} ({cell(c['where'])}; convex toy) | {cell(c['expected'])} | "
                   f"{cell(c['measured'])} | **{c['verdict']}** |")
    return "\n".join(out)


def reading(data: dict) -> str:
    """Markdown: what a script's result says, written from its own table (``data``: a script's data.json or its
    ``compute`` result) and never typed into a notebook, so it holds in every tier and after every re-run: the counts
    per verdict, each verdict with the comparisons that got it, a line on what "not converged" / "diverged" mean
    where a row has one, the interval width where a comparison has fewer than MIN_SEEDS seeds, and the data's own
    caveat (a sentence its script computes, with its numbers) where it has one. No bold: the verdict tables are
    the notebook's bold cells."""
    table = data.get("table") or []
    verdicts = {r["verdict"] for r in table}
    out = [f"*Reading of this table* ({V.summary(table)}" + ("; every row the same verdict)." if len(verdicts) == 1
                                                          else "):\n")]
    label = lambda r: str(r["row"]) + (f" ({r['note']})" if r["verdict"] == V.NOT_CONVERGED else "")   # noqa: E731
    for v in V.OUTCOMES if len(verdicts) > 1 else ():
        hit = [label(r) for r in table if r["verdict"] == v]
        if hit:
            out.append(f"- {v} ({len(hit)}): " + "; ".join(hit))
    if V.NOT_CONVERGED in verdicts:
        out.append(f"\n\"{V.NOT_CONVERGED}\": a run of the comparison still moved over its last rounds on the "
                   "claim's own curve (test accuracy, or the training loss for a curvature or flatness claim) by more "
                   "than a quarter of the interval's half-width (`verdict.flag`), so its measured column is shown "
                   "without a verdict.")
    if V.DIVERGED in verdicts:
        out.append(f"\n\"{V.DIVERGED}\": a run of the comparison went non-finite; it is an outcome, not a dropped run.")
    if V.COLLAPSED in verdicts:
        out.append(f"\n\"{V.COLLAPSED}\": a run of the comparison ended at chance accuracy; its effect measures no "
                   "trained model.")
    few = sorted({r["n_seeds"] for r in table if r.get("interval") and r.get("n_seeds", V.MIN_SEEDS) < V.MIN_SEEDS})
    if few:
        out.append(f"\nWith {' or '.join(map(str, few))} seeds (fewer than {V.MIN_SEEDS}) the 95% intervals are wide.")
    if data.get("caveat"):
        out.append(f"\nCaveat: {data['caveat'].rstrip('.')}.")
    return "\n".join(out)


def committed_dir(name: str, tier=None) -> Path:
    """Where the repository keeps a script's committed result: out_dir under this package's own out/ (OUT),
    whatever --out or $PAPER_FIGURES_OUT point at, so a notebook run with a scratch output root (as the tests run
    them) still shows what is committed."""
    return out_dir(name, tier, root=OUT)


def committed(name: str, tier=None) -> dict | None:
    """A script's committed result in ``tier`` (committed_dir(name, tier)/data.json), None where there is none."""
    p = committed_dir(name, tier) / "data.json"
    return json.loads(p.read_text()) if p.exists() else None


def show_tier_results(names, tier: str = "mnist") -> dict:
    """Display in a notebook each script's committed result in ``tier`` (committed_dir(name, tier): data.json and
    fig.png, written by ``python -m paper_figures.NAME --tier TIER`` from the run cache): a heading with its counts
    per verdict, its figure, its claims table and its reading (``reading``); a script without a committed result says
    so and how to make it. Reads files only (nothing is trained). Returns {name: data or None}."""
    from IPython.display import Image, Markdown, display
    shown = {}
    for name in names:
        data = shown[name] = committed(name, tier)
        if data is None:
            display(Markdown(f"### {name}\n\n*Not in the committed {tier} results yet.* `python -m "
                             f"paper_figures.tier --tier {tier} --only {name}` trains its runs (resumable), then "
                             f"`python -m paper_figures.{name} --tier {tier}` writes its figure and numbers."))
            continue
        display(Markdown(f"### {name}: {data['summary']}"))
        current, line = trained_under(name, tier, data)
        if not current:
            display(Markdown(f"*Note: {line}; the settings table shows what the code runs now.*"))
        display(Image(filename=str(committed_dir(name, tier) / "fig.png")))
        display(Markdown(claims_table(data["table"])))
        display(Markdown(reading(data)))
    return shown


def annotate_verdict(fig, text: str) -> None:
    """The verdict under the axes, in a box coloured by the verdict word it starts with (off the data)."""
    colour = next((c for v, c in sorted(V.COLOURS.items(), key=lambda kv: -len(kv[0]))
                   if text.lower().startswith(v)), "#f0f0f0")      # a count summary starts with a digit: grey
    import textwrap

    from matplotlib.transforms import offset_copy
    width = max(60, int(fig.get_figwidth() * 15))                         # ~ characters of 8.5 pt per line
    text = "\n".join(textwrap.fill(line, width) for line in text.split("\n"))
    below = offset_copy(fig.transFigure, fig=fig, y=-12, units="points")   # clear of the x labels
    fig.text(0.5, 0.0, text, ha="center", va="top", fontsize=8.5, transform=below,
             bbox=dict(boxstyle="round,pad=0.4", fc=colour, ec="0.6"))


def show(fig) -> None:
    """Display a figure once in a notebook (pyplot figures would be drawn again at the cell's end)."""
    import matplotlib.pyplot as plt
    from IPython.display import display
    display(fig)
    plt.close(fig)


def out_dir(name: str, tier=None, root=None) -> Path:
    """Where a script's figure and numbers go: <--out>/<name>/ for the QUICK tier, <--out>/<tier>/<name>/ for the
    others (so the committed MNIST results and the QUICK ones CI regenerates sit side by side); ``tier`` defaults
    to the one parse_args read; ``root`` to --out."""
    tier, root = tier_of(tier or T._ARGS.get("tier")), Path(root or T._ARGS["out"])
    return root / name if tier == "quick" else root / tier / name


_MACHINE = ("seed", "device", "data_dir", "client_chunk", "threads", "quiet")


def settings_record(name: str, tier) -> dict:
    """What a real tier's output records of the settings it ran under: ``{"protocol": PROTOCOL, "fingerprint": ...}``,
    the fingerprint a hash of the resolved configs of the script's ``run_list`` (each config's fields that differ
    from RunConfig's defaults, the seed and the machine's fields left out), so any change of a run's settings
    changes it."""
    import dataclasses
    import hashlib
    import importlib

    from fedlab_analysis.data.noise import FORM
    mod = importlib.import_module(f"paper_figures.{name}")
    cfgs = set()
    for ov, _, tag in (mod.run_list(tier, 1) if hasattr(mod, "run_list") else ()):
        c = config(ov, 0, tier)
        form = {"het_noise_form": FORM} if c.het_noise else {}     # a change of the noise's form is a change too
        cfgs.add(json.dumps({**{f.name: getattr(c, f.name) for f in dataclasses.fields(c)
                                if f.name not in _MACHINE and getattr(c, f.name) != f.default}, **form, "tag": tag},
                            sort_keys=True, default=str))
    return {"protocol": PROTOCOL,
            "fingerprint": hashlib.sha256("\n".join(sorted(cfgs)).encode()).hexdigest()[:16]}


def trained_under(name: str, tier="mnist", data: dict | None = None) -> tuple[bool, str]:
    """(whether the committed output of ``name`` in ``tier`` was written under the code's current settings, a line
    saying so). A data.json without a ``settings`` record was written before the record existed: protocol 1 (one
    decay 0.998 for every method, no clipping, FedInit without its noise, FedALS with plain SGD at one rate)."""
    data = committed(name, tier) if data is None else data
    if data is None:
        return False, "no committed output"
    got = data.get("settings") or {"protocol": 1}
    if got == settings_record(name, tier):
        return True, f"committed output trained under these settings (protocol {got['protocol']})"
    return False, (f"committed outputs trained under the earlier settings (protocol {got['protocol']}); retrain "
                   f"with make figures TIER={tier_of(tier)}")


def save_result(name: str, data: dict, fig, tier=None) -> Path:
    """:func:`out_dir` /data.json (sorted keys, no timings, so reruns compare equal) and fig.png; --out defaults
    to paper_figures/out. In every tier but quick, data.json records the settings it ran under
    (``settings_record``)."""
    if "summary" not in data:
        raise ValueError(f"save_result({name!r}): data has no 'summary' (common.finish)")
    if tier_of(tier or T._ARGS.get("tier")) != "quick":
        data = {**data, "settings": settings_record(name, tier_of(tier or T._ARGS.get("tier")))}
    d = out_dir(name, tier)
    d.mkdir(parents=True, exist_ok=True)
    (d / "data.json").write_text(json.dumps(data, indent=1, sort_keys=True, default=_plain) + "\n")
    write_curves(d, data)
    plots.save(fig, d / "fig.png")
    return d


def write_curves(d: Path, data: dict) -> None:
    """``d``/curves.json: the compact curve (``runs.curve``) of every run a row of ``data``'s table names, what
    ``verdict.audit`` re-derives the rows' flags and verdicts from; none (and an old one removed) where no row
    names runs."""
    ids = sorted({i for t in data.get("table", []) for i in t.get("runs", [])})
    f = d / V.CURVES
    if not ids:
        f.unlink(missing_ok=True)
        return
    missing = [i for i in ids if i not in runs.CURVES]
    if missing:
        raise ValueError(f"write_curves: runs {missing[:3]} named by the table were not read in this process")
    f.write_text(json.dumps({"digits": runs.CURVE_DIGITS, "runs": {i: runs.CURVES[i] for i in ids}},
                            sort_keys=True, separators=(",", ":")) + "\n")


def _plain(x):
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if hasattr(x, "tolist"):                        # torch tensors
        return x.tolist()
    raise TypeError(f"not JSON-serialisable: {type(x).__name__}")


def theory_rows(paper: str, out_dir=None) -> list[dict]:
    """The paper's convex-toy claims, by the public command `python -m fedlab_analysis.theory PAPER --quick
    --out DIR` (its report.json: id, claim, where, expected, measured, verdict). DIR is a cache keyed by the
    command and the package's source (provenance.json): reused only when both match, otherwise emptied and
    recomputed, so a code change never shows an old report."""
    import shutil
    import subprocess

    from fedlab_analysis import provenance
    out_dir = Path(out_dir or Path(T._ARGS["out"]) / "theory_quick" / paper)
    report, key = out_dir / "report.json", {"command": ["fedlab_analysis.theory", paper, "--quick"]}
    if not (report.exists() and provenance.matches(out_dir / "provenance.json", key)):
        if report.exists():                                     # an older report: none of its figures is kept
            shutil.rmtree(out_dir)
        subprocess.run([sys.executable, "-m", *key["command"], "--out", str(out_dir)],
                       check=True, stdout=subprocess.DEVNULL)
        provenance.write(out_dir / "provenance.json", key)
    keys = ("id", "claim", "expected", "measured", "verdict")
    return [{**{k: c[k] for k in keys}, "where": _paper_only(c["where"])} for c in json.loads(report.read_text())]


def _paper_only(where: str) -> str:
    """The paper's own references of a theory claim's 'where' (developer reading notes are not cited)."""
    import re
    parts = [p.strip() for p in re.split(r"[,;]", where)]
    keep = [p for p in parts if p and "notes" not in p and not re.match(r"s\d", p)]
    return ", ".join(keep) or "a consequence the toolkit checks (not stated in the paper)"


def run_error(err: UserError) -> None:
    """A UserError from the library as the one `error:` line and exit 2."""
    print(f"error: {err}", file=sys.stderr)
    raise SystemExit(2)
