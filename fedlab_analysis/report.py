"""python -m fedlab_analysis.report DIR [--format md|csv|latex] [--metric test_acc] [--rows algo --cols dir_alpha]

Mean +- std over seeds for every cell of a sweep, laid out as the papers' tables (rows x columns): the final
value of ``--metric``, its best value over the last ``--last-k`` rounds (the highest accuracy, the lowest loss),
and each probe's numbers. Also draws the learning curves, the mean over seeds with a +-1 std band. Tables are
printed and written to ``--out`` (default DIR/report.md|csv|tex); curves to DIR/curves_METRIC.png.

DIR is a sweep's output directory (its sweep.json lists the runs) or any directory of run directories.
The std is the sample standard deviation over seeds (ddof = 1); a cell with one seed shows its value alone.
Notebook use: ``report.table(DIR, rows="algo", cols="dir_alpha")`` is a DataFrame of "mean ± std" strings;
``report.summary(DIR)`` holds the numbers (mean, std, n per cell and quantity).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .cli import guard, out_file, read_json
from .errors import UserError
from .options import ArgParser
from .rundir import read_config, read_metrics
from .sweep import HASH_FREE

FORMATS = {"md": ".md", "csv": ".csv", "latex": ".tex"}


# ---- reading the runs ---------------------------------------------------------------------------------
def _run_dirs(d: Path) -> list[Path]:
    return [p for p, _ in _entries(d)]


def _entries(d: Path) -> list[tuple[Path, dict | None]]:
    """(run directory, its grid cell) for each finished run; the cell is None outside a sweep. A folder holding
    metrics.jsonl without config.json is no run (a stray copy) and is passed over."""
    if (d / "sweep.json").exists():
        index = read_json(d / "sweep.json", "DIR", "a sweep index", "run the sweep again to rewrite it")
        try:
            return [(Path(r["path"]) if Path(r["path"]).exists() else d / r["name"], r["cell"])
                    for r in index["runs"] if r["status"] == "done"]
        except (KeyError, TypeError):
            raise UserError(f"DIR: {d / 'sweep.json'} is not a sweep index (runs with name, path, cell, status); "
                            f"run the sweep again to rewrite it") from None
    return [(p.parent, None) for p in sorted(d.glob("*/metrics.jsonl")) if (p.parent / "config.json").is_file()]


def runs(d) -> "pd.DataFrame":  # noqa: F821
    """One row per finished run: the keys that vary across runs (a sweep's grid keys, else config keys), then
    seed, name, path."""
    import pandas as pd
    d = Path(d)
    if not d.is_dir():
        raise UserError(f"DIR: {str(d)!r} is not a directory")
    entries = _entries(d)
    if not entries:
        raise UserError(f"DIR: no finished runs in {str(d)!r} (expected a sweep.json or run directories)")
    configs = [read_config(p / "config.json", flag="DIR") for p, _ in entries]
    cells = [cell if cell is not None else c for (_, cell), c in zip(entries, configs)]
    keys = [k for k in cells[0] if len({json.dumps(c.get(k), sort_keys=True) for c in cells}) > 1
            and k not in ("seed", *HASH_FREE)]
    rows = [{**{k: _hashable(cell.get(k)) for k in keys}, "seed": c["seed"], "name": p.name, "path": str(p)}
            for (p, _), cell, c in zip(entries, cells, configs)]
    return pd.DataFrame(rows)


def _hashable(v):
    return json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v


def cell_keys(df) -> list[str]:
    return [c for c in df.columns if c not in ("seed", "name", "path", "quantity", "value", "mean", "std", "n")]


def values(d, metric: str = "test_acc", last_k: int = 5) -> "pd.DataFrame":  # noqa: F821
    """Long table, one row per run and quantity: the final metric, its best of the last ``last_k`` rounds, and
    every number of every probe's summary (``hessian.eigenvalues.0``, ``trace.trace``, ...)."""
    import pandas as pd

    from .sweep import probe_values
    meta, long = runs(d), []
    better = min if "loss" in metric else max
    for _, r in meta.iterrows():
        rows = [x for x in read_metrics(r["path"]) if metric in x]
        if not rows:
            raise UserError(f"--metric: {r['name']}/metrics.jsonl has no {metric!r}; try test_acc, test_loss, "
                            "train_acc or train_loss")
        last = rows[-1]["round"]
        q = {metric: rows[-1][metric],
             f"{metric} (best of last {last_k})": better(x[metric] for x in rows if x["round"] > last - last_k)}
        for f in sorted(Path(r["path"], "probes").glob("*.json")):
            q.update(probe_values({f.stem: read_json(f, "DIR", "a probe result", "run the sweep again with "
                                                "--retry-failed, or delete it").get("summary") or {}}))
        long += [{**r.to_dict(), "quantity": k, "value": v} for k, v in q.items()]
    return pd.DataFrame(long)


def summary(d, metric: str = "test_acc", last_k: int = 5) -> "pd.DataFrame":  # noqa: F821
    """Mean, std (ddof = 1) and n over seeds for each cell and quantity."""
    v = values(d, metric, last_k)
    keys = [*cell_keys(v), "quantity"]
    g = v.groupby(keys, sort=False, dropna=False)["value"]
    return g.agg(mean="mean", std="std", n="count").reset_index()


# ---- tables in the papers' layout ---------------------------------------------------------------------
def _layout(keys: list[str], rows, cols) -> tuple[list[str], list[str]]:
    split = lambda s: [x for x in (s.split(",") if isinstance(s, str) else s or []) if x]   # noqa: E731
    rows, cols = split(rows), split(cols)
    for k in (*rows, *cols):
        if k not in keys:
            raise UserError(f"--rows/--cols: {k!r} does not vary in this sweep; choose from {', '.join(keys) or '-'}")
    if not rows and not cols:
        rows, cols = keys[:-1] if len(keys) > 1 else keys, keys[-1:] if len(keys) > 1 else []
    rows += [k for k in keys if k not in rows and k not in cols]       # every varying key gets a place
    return rows, cols


def fmt(mean: float, std: float, n: int, digits: int = 4) -> str:
    return f"{mean:.{digits}f}" if n < 2 else f"{mean:.{digits}f} ± {std:.{digits}f}"


def tables(d, metric: str = "test_acc", rows=None, cols=None, last_k: int = 5, digits: int = 4) -> dict:
    """``{quantity: DataFrame of "mean ± std" strings, rows x cols}`` for every quantity of the sweep."""
    s = summary(d, metric, last_k)
    r, c = _layout(cell_keys(s), rows, cols)
    s["text"] = [fmt(m, sd, n, digits) for m, sd, n in zip(s["mean"], s["std"], s["n"])]
    out = {}
    for q, part in s.groupby("quantity", sort=False):
        if not r and not c:
            t = part.set_index("quantity")[["text"]].rename(columns={"text": q})
        elif not c:
            t = part.set_index(r)[["text"]].rename(columns={"text": q})
        else:
            t = part.pivot_table(index=r or None, columns=c, values="text", aggfunc="first", sort=False)
        out[q] = t
    return out


def table(d, metric: str = "test_acc", rows=None, cols=None, last_k: int = 5, quantity: str | None = None,
          digits: int = 4):
    """One table (default: the final ``metric``) as a DataFrame of "mean ± std" strings, rows x cols."""
    t = tables(d, metric, rows, cols, last_k, digits)
    q = quantity or metric
    if q not in t:
        raise UserError(f"quantity {q!r} not in this sweep; choose from {', '.join(t)}")
    return t[q]


def _flat(df) -> tuple[list[str], list[list[str]]]:
    """Header and body rows of a table with (multi-)index and (multi-)columns, as plain strings."""
    names = [n or "" for n in df.index.names]
    label = lambda x: " / ".join(map(str, x)) if isinstance(x, tuple) else str(x)     # noqa: E731
    cols = [label(c) for c in df.columns]
    if df.columns.names and any(df.columns.names) and len(names) == 1:
        names = [f"{names[0]} \\ {' / '.join(map(str, df.columns.names))}"]
    body = [[*(map(str, i if isinstance(i, tuple) else (i,))), *("" if v != v else str(v) for v in row)]
            for i, row in zip(df.index, df.itertuples(index=False))]
    return [*names, *cols], body


def markdown(df) -> str:
    head, body = _flat(df)
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in body])


def latex(df) -> str:
    head, body = _flat(df)
    esc = lambda s: s.replace(" \\ ", " / ").replace("_", r"\_").replace("±", r"$\pm$").replace("%", r"\%")   # noqa: E731
    lines = [r"\begin{tabular}{" + "l" * len(df.index.names) + "c" * len(df.columns) + "}", r"\toprule",
             " & ".join(map(esc, head)) + r" \\", r"\midrule"]
    lines += [" & ".join(map(esc, r)) + r" \\" for r in body]
    return "\n".join(lines + [r"\bottomrule", r"\end{tabular}"])


# ---- learning curves ----------------------------------------------------------------------------------
def curves(d, metric: str = "test_acc", rows=None, cols=None):
    """The learning curves of every cell, mean over seeds with a +-1 std band: one panel per column value."""
    from .plots import curve_bands
    meta = runs(d)
    r, c = _layout(cell_keys(meta), rows, cols)
    name = lambda keys, x: ", ".join(f"{k}={v}" for k, v in zip(keys, x)) or "all"    # noqa: E731
    panels: dict = {}
    for _, run in meta.iterrows():
        panel = panels.setdefault(name(c, [run[k] for k in c]), {})
        panel.setdefault(name(r, [run[k] for k in r]), []).append(read_metrics(run["path"]))
    return curve_bands(panels, metric, title=f"{Path(d).resolve().name}: mean ± std over seeds")


# ---- command line -------------------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    p = ArgParser(prog="python -m fedlab_analysis.report", description=__doc__.split("\n\n")[1],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("dir", metavar="DIR", help="a sweep's output directory, or a directory of run directories")
    p.add_argument("--format", choices=tuple(FORMATS), default="md", help="table format of the written file")
    p.add_argument("--metric", default="test_acc", help="a metrics.jsonl column")
    p.add_argument("--rows", default=None, help="config key(s) down the table, comma-separated (default: all "
                   "varying keys but the last)")
    p.add_argument("--cols", default=None, help="config key(s) across the table (default: the last varying key)")
    p.add_argument("--last-k", type=int, default=5, help="best-of-last-k: the best value over the last k rounds")
    p.add_argument("--digits", type=int, default=4, help="decimals shown")
    p.add_argument("--out", default=None, help="table file (default: DIR/report.md|csv|tex)")
    p.add_argument("--no-plot", action="store_true", help="do not draw DIR/curves_METRIC.png")
    return p


@guard("report")
def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.last_k < 1:
            raise UserError(f"--last-k: must be >= 1 (got {args.last_k})")
        if not args.dir.strip() or not Path(args.dir).is_dir():
            raise UserError(f"DIR: {args.dir!r} is not a directory")
        if args.digits < 0:
            raise UserError(f"--digits: must be >= 0 (got {args.digits})")
        out = out_file(Path(args.dir) / f"report{FORMATS[args.format]}" if args.out is None else args.out, "--out")
        curves_png = None if args.no_plot else out_file(Path(args.dir) / f"curves_{args.metric}.png", "--metric")
        t = tables(args.dir, args.metric, args.rows, args.cols, args.last_k, args.digits)
        s = summary(args.dir, args.metric, args.last_k) if args.format == "csv" else None
        fig = None if args.no_plot else curves(args.dir, args.metric, args.rows, args.cols)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    text = "\n\n".join(f"### {q}\n\n{markdown(df)}" for q, df in t.items())
    print(text)
    if args.format == "md":
        out.write_text(text + "\n")
    elif args.format == "latex":
        out.write_text("\n\n".join(f"% {q}\n{latex(df)}" for q, df in t.items()) + "\n")
    else:
        s.to_csv(out, index=False)
    print(f"\ntable -> {out}")
    if fig is not None:
        from .plots import save
        print(f"curves -> {save(fig, curves_png)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
