"""One style for every figure (matplotlib + seaborn, Agg backend safe). Each helper takes plain data (the
dicts that probes return, metrics rows) and returns a Figure; ``save(fig, path)`` writes it.

The rules every figure follows, written once here: ``style()`` (seaborn whitegrid, colorblind palette, normal
font sizes, ``DPI`` for figures shown in a notebook and saved to a file alike), ``title(fig, text)`` (the run and
the probe's settings, wrapped), ``integer_ticks(axis)`` on an index axis, ``layer_bars`` (horizontal bars that stay
readable for tens of layers), ``dots`` (a dot plot, for values compared on a log axis, where bars would mislead),
``levels(Z)`` (contour levels for the range: log-spaced when it spans more than a factor of 20) and
``shared_norm(Zs)`` (one colour scale for several panels, log when the values span more than a factor of 20).
``check(fig)``, run by ``save``, refuses a bar on a log axis and a twin axis (two quantities on two y scales)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

import matplotlib.pyplot as plt

from .rundir import read_metrics  # noqa: F401  (the one reader; demo, notebooks and paper_figures read it here)

DPI = 120   # every figure: in a notebook (figure.dpi) and in a file (savefig.dpi)


def style():
    import seaborn as sns
    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind", font_scale=0.9)
    plt.rcParams.update({"figure.dpi": DPI, "savefig.dpi": DPI})


def figure(ncols=1, nrows=1, w=4.2, h=3.2, **kw):
    style()
    return plt.subplots(nrows, ncols, figsize=(w * ncols, h * nrows), squeeze=False, **kw)


def title(fig, text: str | None) -> None:
    """The figure's title (the run and the probe's settings), wrapped to the figure's width."""
    if text:
        import textwrap
        width = max(40, int(fig.get_figwidth() * 11))
        fig.suptitle("\n".join(textwrap.fill(line, width) for line in text.split("\n")), fontsize="medium")
        from matplotlib.layout_engine import ConstrainedLayoutEngine
        if not isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine):
            fig.tight_layout()


def integer_ticks(axis) -> None:
    """Integer ticks on an index axis (``ax.xaxis``)."""
    from matplotlib.ticker import MaxNLocator
    axis.set_major_locator(MaxNLocator(integer=True))


def layer_bars(ax, labels, values, errors=None, xlabel: str = "", color="C0") -> None:
    """One horizontal bar per layer, the first layer on top, labels at the normal font size."""
    import numpy as np
    y = np.arange(len(labels))
    ax.barh(y, values, xerr=errors, color=color, capsize=2 if errors is not None else 0)
    ax.set_yticks(y, labels)
    if not ax.yaxis_inverted():             # shared y axes: invert once
        ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.grid(axis="y", visible=False)


def layer_figure(n_layers: int, ncols: int = 1, w: float = 4.6, **kw):
    """A figure whose height grows with the number of layers (about 0.28 inch per bar)."""
    return figure(ncols=ncols, w=w, h=max(2.6, 0.28 * n_layers + 1.4), sharey=True, **kw)


def dots(ax, labels, values, errors=None, xlabel: str = "", log: bool = True, color="C0") -> None:
    """A horizontal dot plot (the first label on top), with error bars when given: the form for values compared
    on a log axis, where a bar's length from an arbitrary floor means nothing."""
    import numpy as np
    y = np.arange(len(labels))
    ax.errorbar(values, y, xerr=errors, fmt="o", color=color, capsize=3 if errors is not None else 0)
    ax.set_yticks(y, labels)
    if not ax.yaxis_inverted():
        ax.invert_yaxis()
    ax.set(xlabel=xlabel, xscale="log" if log else "linear")
    ax.grid(axis="y", visible=False)


def shared_norm(Zs, log: bool | None = None):
    """One colour scale for several panels of the same quantity: ``(norm, is_log)`` over the finite values of all
    of ``Zs``, logarithmic when ``log`` (default: when all are positive and span more than a factor of 20), so a
    panel whose values are small is not one uniform colour next to a sharp one."""
    import numpy as np
    from matplotlib.colors import LogNorm, Normalize
    Z = np.ma.concatenate([np.ma.masked_invalid(np.asarray(z, dtype=float)).ravel() for z in Zs])
    lo, hi = float(Z.min()), float(Z.max())
    log = (lo > 0 and hi / lo > 20) if log is None else (log and hi > 0)
    return (LogNorm(max(lo, hi * 1e-12), hi), True) if log else (Normalize(lo, hi), False)


def check(fig) -> None:
    """The figure rules that can be checked on a drawn figure: no bar on a log axis (a bar's length from an
    arbitrary floor misleads; use ``dots``) and no twin axes (two quantities on two y scales over one x axis:
    draw two panels). Raises ValueError naming the axes."""
    for ax in fig.axes:
        name = ax.get_title() or ax.get_ylabel() or ax.get_xlabel() or "an axes"
        bars = [c for c in ax.containers if c.__class__.__name__ == "BarContainer"]
        for xy, scale in (("x", ax.get_xscale()), ("y", ax.get_yscale())):
            if scale != "linear" and any((c.orientation == "horizontal") == (xy == "x") for c in bars):
                raise ValueError(f"figure rule: bars on a {scale} {xy} axis ({name!r}); use plots.dots")
        if len(ax._twinned_axes.get_siblings(ax)) > 1:
            raise ValueError(f"figure rule: twin axes ({name!r}): two quantities on two y scales; draw two panels")


def levels(Z, n: int = 12, log: bool | None = None) -> tuple[np.ndarray, bool]:
    """Contour levels at round values inside Z's finite range: on a log scale (``log``; default when the values
    are positive and span more than a factor of 20) the 1-2-5 sequence (0.05, 0.1, 0.2, 0.5, 1, ...; every mantissa
    1-9 when that gives fewer than 4), else matplotlib's MaxNLocator steps (0.1, 0.15, 0.2, ...). Returns
    (levels, is_log)."""
    from matplotlib.ticker import MaxNLocator
    Z = np.ma.masked_invalid(np.asarray(Z, dtype=float))
    lo, hi = float(Z.min()), float(Z.max())
    if not hi > lo:
        return np.array([lo]), False
    log = (lo > 0 and hi / lo > 20) if log is None else (bool(log) and lo > 0)
    if log:
        decades = 10.0 ** np.arange(np.floor(np.log10(lo)), np.ceil(np.log10(hi)) + 1)
        for mant in ((1, 2, 5), tuple(range(1, 10))):
            lv = np.unique(np.round((decades[:, None] * np.array(mant)).ravel(), 12))
            lv = lv[(lv > lo) & (lv < hi)]
            if len(lv) >= 4:
                break
        return lv, True
    lv = MaxNLocator(n, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi)
    return lv[(lv > lo) & (lv < hi)], False


def save(fig, path) -> Path:
    """Write ``fig`` at ``DPI`` after ``check(fig)``; the figure is closed."""
    check(fig)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return path


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
