"""theory.toys.save_figure lays its figure out with fixed margins (no constrained layout): every label, tick
label, title and legend entry must still lie inside the saved 5 x 4 inch canvas, the legend clear of the axes."""
import matplotlib
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from fedlab_analysis import plots
from fedlab_analysis.theory.toys import save_figure

CASES = {
    "log y under one decade (minor tick labels '2 x 10^-1')": dict(
        series={"eps, final_avg": ([0.0, 0.05, 0.1], [0.159, 0.184, 0.22]),
                "eps, delta_from_init": ([0.0, 0.05, 0.1], [0.159, 0.159, 0.159])},
        logx=False, ylabel="sup_z |f(w;z) - f(w~;z)|"),
    "log y over five decades, five legend entries": dict(
        series={f"series {i}": ([100, 400, 1600], [10.0 ** -i, 10.0 ** (-i - 1), 10.0 ** (-i - 2)])
                for i in range(4)},
        ref=(-0.5, [100, 400, 1600], [1.0, 0.5, 0.25]), ylabel="(1/T) sum ||grad F(w^{t+1})||"),
    "linear y": dict(series={"a": ([1, 2, 5, 10, 25, 50], [0.3, 0.35, 0.5, 1.1, 2.2, 2.7])}, logy=False,
                     ylabel="value"),
}


@pytest.mark.parametrize("themed", [False, True], ids=["", "after plots.style()"])
@pytest.mark.parametrize("case", CASES)
def test_every_artist_lies_inside_the_saved_canvas(case, themed, tmp_path, monkeypatch):
    """Also after the package's seaborn theme was applied process-wide (a notebook that drew a plot first, or an
    earlier test): the theory figure keeps matplotlib's own style, which its margins are measured for (without
    that, all three cases put the legend over the x label)."""
    saved = []
    real = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: (saved.append(fig), real(fig, *a, **k))[1])
    kw = dict(CASES[case])
    with matplotlib.rc_context():                                     # restores the caller's style after
        if themed:
            plots.style()
        assert save_figure(tmp_path, "f.png", kw.pop("series"), xlabel="x", title="a title", **kw) == "f.png"
    assert (tmp_path / "f.png").stat().st_size > 0
    (fig,) = saved
    renderer = FigureCanvasAgg(fig).get_renderer()
    box = fig.get_tightbbox(renderer)                                 # inches, every artist drawn
    w, h = fig.get_size_inches()
    assert box.x0 >= 0 and box.y0 >= 0 and box.x1 <= w and box.y1 <= h, (case, box.bounds)
    (ax,), (legend,) = fig.axes, fig.legends                          # the legend sits below the x label
    assert legend.get_window_extent(renderer).y1 <= ax.get_tightbbox(renderer).y0, case


def test_no_out_dir_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)                                       # a stray relative write would land here
    assert save_figure(None, "f.png", {"a": ([1, 2], [1, 2])}, xlabel="x", ylabel="y") is None
    assert not list(tmp_path.iterdir())
    assert save_figure(".", "f.png", {"a": ([1, 2], [1, 2])}, xlabel="x", ylabel="y") == "f.png"
    assert [p.name for p in tmp_path.iterdir()] == ["f.png"]         # the check sees a write
