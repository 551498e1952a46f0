"""One style for every figure (matplotlib + seaborn, Agg backend safe). Each helper takes plain data (the
dicts that probes return, metrics rows) and returns a Figure; ``save(fig, path)`` writes it."""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt


def style():
    import seaborn as sns
    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind", font_scale=0.9)


def figure(ncols=1, nrows=1, w=4.2, h=3.2, **kw):
    style()
    return plt.subplots(nrows, ncols, figsize=(w * ncols, h * nrows), squeeze=False, **kw)


def save(fig, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return path


def read_metrics(run_dir) -> list[dict]:
    return [json.loads(s) for s in (Path(run_dir) / "metrics.jsonl").read_text().splitlines() if s.strip()]


def learning_curves(runs: dict[str, list[dict]], title: str | None = None):
    """Test accuracy and train loss against rounds, one line per run ({label: metrics rows})."""
    fig, ax = figure(ncols=2)
    for label, rows in runs.items():
        r = [row["round"] for row in rows]
        ax[0, 0].plot(r, [row["test_acc"] for row in rows], label=label)
        ax[0, 1].plot(r, [row["train_loss"] for row in rows], label=label)
    ax[0, 0].set(xlabel="round", ylabel="test accuracy")
    ax[0, 1].set(xlabel="round", ylabel="train loss", yscale="log")
    ax[0, 0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def curve_bands(panels: dict[str, dict[str, list[list[dict]]]], metric: str = "test_acc", title: str | None = None):
    """Mean over seeds with a +-1 std band, against rounds: ``{panel title: {line label: [rows of each seed]}}``
    (metrics rows as in metrics.jsonl; only rounds that every seed evaluated are drawn)."""
    import numpy as np
    fig, ax = figure(ncols=len(panels), sharey=True)
    for a, (name, lines) in zip(ax[0], panels.items()):
        for label, seeds in lines.items():
            common = sorted(set.intersection(*({r["round"] for r in rows if metric in r} for rows in seeds)))
            v = np.array([[{r["round"]: r[metric] for r in rows}[t] for t in common] for rows in seeds])
            mean, std = v.mean(0), (v.std(0, ddof=1) if len(v) > 1 else np.zeros(v.shape[1]))
            a.plot(common, mean, label=f"{label} (n={len(v)})")
            a.fill_between(common, mean - std, mean + std, alpha=0.25)
        a.set(xlabel="round", ylabel=metric.replace("_", " "), title=name)
        a.xaxis.get_major_locator().set_params(integer=True)
        a.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
