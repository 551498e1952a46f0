"""What every reproduction script shares: the QUICK and FULL settings, the command line, cached multi-seed
training, mean ± std, the claims table, and how a figure and its numbers are saved (the one verdict rule is
paper_figures/verdict.py, the claims it judges paper_figures/claims.py).

QUICK (the default) trains on scikit-learn's digits (embedded, nothing downloaded) with a small MLP, so a
notebook runs in minutes on a 2-core CPU; FedAvg reaches about 94% test accuracy there, above the 85% bar a
model must meet before it is probed. FULL uses the papers' setting (CIFAR-10 from --data-dir, ResNet-18-GN,
100 clients at 10%, 800 rounds) and wants a GPU.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from fedlab_analysis import plots
from fedlab_analysis.config import EXECUTION, RunConfig
from fedlab_analysis.errors import UserError
from paper_figures import verdict as V
from paper_figures.claims import CLAIMS

OUT = Path(__file__).parent / "out"

# digits, MLP [64]: FedAvg reaches ~0.94 test accuracy in 30 rounds (~3 s on one CPU thread)
QUICK_BASE = dict(dataset="digits", model="mlp", model_kwargs={"widths": [64]}, clients=20, partition="dirichlet",
                  dir_alpha=0.3, active_ratio=0.5, batch_size=20, local_epochs=2, lr=0.1, lr_decay=1.0, wd=0.0,
                  rounds=30, quiet=True)
# the papers' setting (FedSMOO Sec. 5.1, FedLESAM Sec. 5.1, FedCM Sec. 5): CIFAR-10, ResNet-18-GN, 10% of 100
FULL_BASE = dict(dataset="cifar10", model="resnet18gn", model_kwargs={}, clients=100, partition="dirichlet",
                 dir_alpha=0.6, active_ratio=0.1, batch_size=50, local_epochs=5, lr=0.1, lr_decay=0.998, wd=1e-3,
                 augment=True, rounds=800, quiet=True)

VERDICTS = V.OUTCOMES
_ARGS = {"out": OUT, "data_dir": None, "device": "cpu"}   # set by parse_args; read by config and save_result


def parse_args(description: str, argv=None) -> argparse.Namespace:
    """--full, --seeds N (default 3), --out DIR, --data-dir, --quiet. Bad input: one `error:` line, exit 2."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--full", action="store_true",
                    help="the papers' setting (CIFAR-10 from --data-dir, ResNet-18-GN, 100 clients at 10%%, "
                         "800 rounds; wants a GPU) instead of QUICK (digits, MLP, minutes on a CPU)")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per configuration (default 3)")
    ap.add_argument("--out", default=str(OUT), help=f"output root; results go to OUT/<name>/ (default {OUT})")
    ap.add_argument("--data-dir", default=None, help="directory with the official CIFAR-10/100 files (--full)")
    ap.add_argument("--quiet", action="store_true", help="print only the final summary")
    args = ap.parse_args(argv)
    err = None
    if args.seeds < 1:
        err = f"--seeds: must be >= 1 (got {args.seeds})"
    elif args.full and not args.data_dir:
        err = "--data-dir: --full reads CIFAR-10 from a local directory; give --data-dir DIR"
    elif args.data_dir and not Path(args.data_dir).is_dir():
        err = f"--data-dir: no directory {args.data_dir!r}"
    if err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2)
    from fedlab_analysis.device import resolve, set_threads
    set_threads(1)                                   # the QUICK MLP is fastest on one thread; shares the machine
    _ARGS.update(out=Path(args.out), data_dir=args.data_dir, device=str(resolve("auto")) if args.full else "cpu")
    return args


def run_script(name: str, compute, doc: str, argv=None, plot=None, summary=None) -> dict:
    """Every script's main: parse the command line, compute (and plot), save data.json + fig.png, print the verdicts.
    ``compute(seeds, full)`` returns (data, fig), or the data alone when ``plot(data)`` draws the figure;
    ``summary(data)`` is what is printed (default: the table's rows and the counts per verdict)."""
    args = parse_args(doc.split("\n\n")[0], argv)
    out = compute(args.seeds, args.full)
    data, fig = (out, plot(out)) if plot is not None else out
    save_result(name, data, fig)
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


def setting(full: bool, **shown) -> str:
    """One line naming the run for a figure title: model, data, clients, rounds and the given hyper-parameters."""
    b = FULL_BASE if full else QUICK_BASE
    extra = "".join(f", {k}={v}" for k, v in shown.items())
    return (f"{b['model']} on {b['dataset']}, {b['clients']} clients at {b['active_ratio']:.0%}, "
            f"{b['rounds']} rounds{extra}")


def config(cfg_overrides: dict, seed: int = 0, full: bool = False) -> RunConfig:
    """The resolved RunConfig: the QUICK or FULL base, then the overrides, then the seed."""
    base = dict(FULL_BASE, data_dir=_ARGS["data_dir"], device=_ARGS["device"]) if full else QUICK_BASE
    return RunConfig(**{**base, **cfg_overrides, "seed": seed}).validate()


def train_seeds(cfg_overrides: dict, seeds, out_root, full: bool = False, callbacks_fn=None, tag: str = "") -> list:
    """One run per seed, cached: a run directory named by a hash of the resolved config (and ``tag``, which
    names what ``callbacks_fn(seed) -> [hooks]`` records) is reused when its last.pt and config.json match.
    Returns [{"seed", "run_dir", "test_acc", "rows"}, ...]; rows are the metrics.jsonl rows (with the hooks'
    probe rows when callbacks were given)."""
    from fedlab_analysis.trainers.loop import train
    seeds = range(seeds) if isinstance(seeds, int) else seeds
    out = []
    for s in seeds:
        cfg = config(cfg_overrides, s, full)
        d = cfg.to_dict()
        key = {k: v for k, v in d.items() if k not in (*EXECUTION, "seed", "data_dir")}
        h = hashlib.sha1(json.dumps([key, tag], sort_keys=True).encode()).hexdigest()[:10]
        run_dir = Path(out_root) / f"{cfg.algo}-{h}-s{s}"
        cached = run_dir / "ckpt" / "last.pt"
        same = cached.exists() and _computes(json.loads((run_dir / "config.json").read_text())) == _computes(d)
        if not same:                                 # a stale or half-written run directory is replaced
            train(cfg, run_dir, callbacks=callbacks_fn(s) if callbacks_fn else (), overwrite=True)
        rows = plots.read_metrics(run_dir)
        out.append({"seed": s, "run_dir": str(run_dir), "test_acc": rows[-1]["test_acc"], "rows": rows})
    return out


def _computes(d: dict) -> dict:
    """What a config computes: without the fields that say only how and where it ran."""
    return {k: v for k, v in d.items() if k not in EXECUTION}


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


def out_dir(name: str) -> Path:
    """<--out>/<name>/: the figure, its numbers and (git-ignored) runs/ cache."""
    return Path(_ARGS["out"]) / name


def save_result(name: str, data: dict, fig) -> Path:
    """<--out>/<name>/data.json (sorted keys, no timings, so reruns compare equal) and fig.png; --out defaults to
    paper_figures/out."""
    if "summary" not in data:
        raise ValueError(f"save_result({name!r}): data has no 'summary' (common.finish)")
    d = out_dir(name)
    d.mkdir(parents=True, exist_ok=True)
    (d / "data.json").write_text(json.dumps(data, indent=1, sort_keys=True, default=_plain) + "\n")
    plots.save(fig, d / "fig.png")
    return d


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
    --out DIR` (its report.json: id, claim, where, expected, measured, verdict), reused when DIR has one."""
    import subprocess
    out_dir = Path(out_dir or Path(_ARGS["out"]) / "theory_quick" / paper)
    report = out_dir / "report.json"
    if not report.exists():
        subprocess.run([sys.executable, "-m", "fedlab_analysis.theory", paper, "--quick", "--out", str(out_dir)],
                       check=True, stdout=subprocess.DEVNULL)
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
