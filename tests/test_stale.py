"""Nothing committed is older than the code, and every figure follows the figure rules.

- The README's demo transcript is what `python -m fedlab_analysis.demo` prints (slow: the demo trains two models).
  Normalised: the timings in parentheses ("(43.8 s)", "(158 s in all)") and the output folder; every other word must
  be equal, and every number equal to within one unit of its last printed digit (3 decimals: 0.001).
- No absolute machine path in a committed notebook's outputs or in paper_figures/out/**/data.json.
- The cached theory report is keyed by its command and by the package's source (fedlab_analysis.provenance).
- plots.check refuses bars on a log axis and twin axes; surface panels share one labelled (log) colour scale.
Each check is also run on a deliberately stale or broken input, which it must catch.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedlab_analysis import plots, provenance

ROOT = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------------------------------------------
# the README's demo transcript

_TIMING = re.compile(r" \((?:\d+(?:\.\d+)?) s(?: in all)?\)")
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def readme_transcript(text: str) -> str:
    """The code block after "It prints:" in the README."""
    m = re.search(r"It prints[^\n]*:\s*\n```[^\n]*\n(.*?)\n```", text, re.S)
    assert m, "README: no demo transcript (a ``` block after 'It prints:')"
    return m.group(1)


def normalise(text: str) -> list[str]:
    """Lines without timings and with the output folder written OUT."""
    lines = [_TIMING.sub(" (T s)", s.rstrip()) for s in text.strip().splitlines()]
    return [re.sub(r"^wrote \S+/:", "wrote OUT/:", s) for s in lines]


def transcript_diff(readme: str, printed: str) -> list[str]:
    """Where the README's transcript and the demo's output disagree (empty: they agree)."""
    a, b = normalise(readme), normalise(printed)
    if len(a) != len(b):
        return [f"README has {len(a)} lines, the demo printed {len(b)}"]
    out = []
    for i, (x, y) in enumerate(zip(a, b)):
        if _NUMBER.sub("#", x) != _NUMBER.sub("#", y):
            out.append(f"line {i + 1} words: {x!r} != {y!r}")
            continue
        for u, v in zip(_NUMBER.findall(x), _NUMBER.findall(y)):
            if abs(float(u) - float(v)) > _unit(u) * (1 + 1e-9):
                out.append(f"line {i + 1}: README {u} != printed {v}")
    return out


def _unit(token: str) -> float:
    """One unit of a printed number's last digit: '0.9611' -> 1e-4, '1420' -> 1, '1.5e-3' -> 1e-4."""
    mantissa, _, exp = token.lower().partition("e")
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    return 10.0 ** (int(exp or 0) - decimals)


PRINTED = """\
FedAvg on digits, 20 clients, Dirichlet 0.3: final test accuracy 0.9611 after 30 rounds (43.8 s)
FedSMOO (rho 0.05, lamb 0.1): final test accuracy 0.9750 (67.5 s)
FedSMOO: top Hessian eigenvalues 1.145, 1.054, 0.639 (12 Hessian-vector products); trace 7.09 +- 0.22
wrote /tmp/x/demo/: learning_curve.png (158 s in all)"""


def test_transcript_diff_catches_a_stale_transcript():
    assert transcript_diff(PRINTED.replace("/tmp/x/demo", "out/demo").replace("43.8", "12.0"), PRINTED) == []
    assert transcript_diff(PRINTED.replace("1.145", "1.146"), PRINTED) == []        # one unit of the last digit
    stale = PRINTED.replace("1.145, 1.054, 0.639", "2.157, 1.048, 0.770").replace("7.09", "9.12")   # issue 22
    assert len(transcript_diff(stale, PRINTED)) == 4
    assert transcript_diff(PRINTED.replace("0.9750", "0.9722"), PRINTED)          # one test image is caught
    assert transcript_diff(PRINTED.replace("lamb 0.1", "lambda 0.1"), PRINTED)     # words too
    assert transcript_diff("\n".join(PRINTED.splitlines()[:-1]), PRINTED)           # and a missing line


@pytest.mark.slow
def test_readme_demo_transcript_is_what_the_demo_prints(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    p = subprocess.run([sys.executable, "-m", "fedlab_analysis.demo", "--out", str(tmp_path / "demo")],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800)
    assert p.returncode == 0, p.stderr[-2000:]
    diff = transcript_diff(readme_transcript((ROOT / "README.md").read_text()), p.stdout)
    assert not diff, "the README's demo transcript is stale; paste the demo's output:\n" + "\n".join(diff) + \
        "\n" + p.stdout


# --------------------------------------------------------------------------------------------------------------
# no absolute machine paths in committed outputs

_MACHINE = re.compile(r"(?:/work/|/home/|/root/|/tmp/|\b[A-Za-z]:\\)")


def _strings(x):
    if isinstance(x, str):
        yield x
    elif isinstance(x, dict):
        for v in x.values():
            yield from _strings(v)
    elif isinstance(x, list):
        for v in x:
            yield from _strings(v)


def notebook_output_text(nb: dict):
    """Every text a notebook's outputs show (stream, text/*, errors); images are skipped (base64 holds '/')."""
    for cell in nb["cells"]:
        for o in cell.get("outputs", []):
            yield from _strings(o.get("text", ""))
            yield from _strings(o.get("traceback", []))
            for mime, v in o.get("data", {}).items():
                if mime.startswith("text/") or mime.endswith("json"):
                    yield from _strings(v)


def machine_paths(texts) -> list[str]:
    return sorted({m.group(0) + re.match(r"\S{0,40}", t[m.end():]).group(0) for t in texts
                   for m in _MACHINE.finditer(t)})


def _committed():
    files = subprocess.run(["git", "ls-files", "notebooks/*.ipynb", "paper_figures/out/*data.json"], cwd=ROOT,
                           capture_output=True, text=True).stdout.split()
    return [ROOT / f for f in files] or sorted(ROOT.glob("notebooks/*.ipynb")) + \
        sorted(ROOT.glob("paper_figures/out/**/data.json"))


def test_machine_paths_are_caught():
    nb = {"cells": [{"cell_type": "code", "outputs": [
        {"output_type": "stream", "text": ["QUICK - figures, runs under /work/wt-repro2/paper_figures/out\n"]},
        {"output_type": "display_data", "data": {"image/png": "iVBOR/tmp/xx", "text/plain": ["<Figure>"]}}]}]}
    assert machine_paths(notebook_output_text(nb)) == ["/work/wt-repro2/paper_figures/out"]
    assert machine_paths(_strings({"run_dir": "C:\\Users\\me\\runs", "x": ["/home/me/a", "/root/b"]}))
    assert not machine_paths(["paper_figures/out/fedcm", "notebooks/out/nb01", "a ratio 1/2, w/tmp"])


@pytest.mark.parametrize("path", _committed(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_machine_paths_in_committed_outputs(path):
    data = json.loads(path.read_text())
    found = machine_paths(notebook_output_text(data) if path.suffix == ".ipynb" else _strings(data))
    assert not found, f"{path.relative_to(ROOT)} holds machine paths: {found}"


# --------------------------------------------------------------------------------------------------------------
# caches keyed by their configuration and the package source

def test_source_hash_follows_the_code(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text("y = 2\n")
    (tmp_path / "notes.txt").write_text("not code")
    h = provenance.source_hash([tmp_path])
    assert h == provenance.source_hash([tmp_path]) and len(h) == 64
    (tmp_path / "notes.txt").write_text("changed, not code")
    assert provenance.source_hash([tmp_path]) == h
    for change in (lambda: (tmp_path / "sub" / "b.py").write_text("y = 3\n"),             # an edit
                   lambda: (tmp_path / "sub" / "b.py").rename(tmp_path / "sub" / "c.py"),  # a rename
                   lambda: (tmp_path / "d.py").write_text("")):                            # a new module
        change()
        assert provenance.source_hash([tmp_path]) != h
        h = provenance.source_hash([tmp_path])
    assert provenance.source_hash() == provenance.source_hash([ROOT / "fedlab_analysis"])


def test_theory_cache_is_recomputed_after_a_code_change(tmp_path, monkeypatch):
    from paper_figures import common
    calls = []

    def fake_run(argv, **kw):                   # the theory command, without the minutes it takes
        out = Path(argv[argv.index("--out") + 1])
        out.mkdir(parents=True, exist_ok=True)
        calls.append(argv)
        (out / "report.json").write_text(json.dumps([{"id": "c", "claim": "x", "where": "Thm 1", "expected": "e",
                                                      "measured": f"run {len(calls)}", "verdict": "holds"}]))
        (out / f"fig{len(calls)}.png").write_text("png")

    monkeypatch.setattr(subprocess, "run", fake_run)
    d = tmp_path / "theory_quick" / "fedcm"
    assert common.theory_rows("fedcm", d)[0]["measured"] == "run 1"
    assert common.theory_rows("fedcm", d)[0]["measured"] == "run 1" and len(calls) == 1     # reused
    assert calls[0][1:] == ["-m", "fedlab_analysis.theory", "fedcm", "--quick", "--out", str(d)]
    monkeypatch.setattr(provenance, "source_hash", lambda paths=None: "0" * 64)            # the code changed
    assert common.theory_rows("fedcm", d)[0]["measured"] == "run 2" and len(calls) == 2
    assert not (d / "fig1.png").exists()                                      # nothing of the old report is left
    (d / "provenance.json").unlink()                                          # a report from before the key: stale
    assert common.theory_rows("fedcm", d)[0]["measured"] == "run 3"
    key = json.loads((d / "provenance.json").read_text())
    key["config"]["command"][1] = "fedals"                                    # another command's report
    (d / "provenance.json").write_text(json.dumps(key))
    assert common.theory_rows("fedcm", d)[0]["measured"] == "run 4"


def test_make_notebooks_starts_from_a_clean_cache():
    text = (ROOT / "Makefile").read_text()
    target = text[text.index("\nnotebooks:"):].split("\n\n")[0]
    caches = re.search(r"^NB_CACHES := (.*)$", text, re.M).group(1).split()
    assert "rm -rf $(NB_CACHES)" in target and target.index("rm -rf") < target.index("jupyter-execute")
    assert {"paper_figures/out/theory_quick", "paper_figures/out/runs/quick", "notebooks/out"} <= set(caches)


# --------------------------------------------------------------------------------------------------------------
# figure rules

def test_figure_rules_refuse_bars_on_log_axes_and_twin_axes(tmp_path):
    fig, ax = plots.figure(ncols=2)
    ax[0, 0].bar([0, 1], [1.0, 100.0])
    ax[0, 0].set_yscale("log")
    with pytest.raises(ValueError, match="bars on a log y axis"):
        plots.save(fig, tmp_path / "a.png")
    fig, ax = plots.figure()
    ax[0, 0].barh([0, 1], [1.0, 100.0], log=True)
    with pytest.raises(ValueError, match="bars on a log x axis"):
        plots.check(fig)
    fig, ax = plots.figure()
    ax[0, 0].plot([1, 2])
    ax[0, 0].twinx().plot([3, 1])
    with pytest.raises(ValueError, match="twin axes"):
        plots.check(fig)
    fig, ax = plots.figure(ncols=2, sharey=True)                              # allowed: dots on a log axis,
    plots.dots(ax[0, 0], ["fc1", "fc2"], [1e-3, 1.0], errors=[1e-4, 0.1], xlabel="CD")
    ax[0, 1].bar([0, 1], [1.0, 2.0])                                          # bars on a linear one, shared y
    plots.save(fig, tmp_path / "ok.png")
    assert (tmp_path / "ok.png").exists() and fig.dpi == plots.DPI >= 110


def test_surface_panels_share_one_labelled_log_scale():
    from matplotlib.colors import LogNorm, Normalize

    from fedlab_analysis.probes import landscape
    g = np.linspace(-1, 1, 5)
    flat = {"a": g, "b": g, "loss": 0.01 + 0.001 * np.add.outer(g ** 2, g ** 2), "center_loss": 0.01}
    sharp = {"a": g, "b": g, "loss": 0.01 + 5.0 * np.add.outer(g ** 2, g ** 2), "center_loss": 0.01}
    norm, log = plots.shared_norm([flat["loss"], sharp["loss"]])
    assert log and isinstance(norm, LogNorm) and norm.vmin == pytest.approx(0.01) and norm.vmax == pytest.approx(10.01)
    norm, log = plots.shared_norm([flat["loss"], flat["loss"] * 2])            # within 20x: linear
    assert not log and isinstance(norm, Normalize) and not isinstance(norm, LogNorm)
    for kind in ("contour", "surface"):
        fig = landscape.plot_panel([flat, sharp], ["flat", "sharp"], kind=kind)
        bar = fig.axes[-1]
        assert "one log scale for all panels" in bar.get_ylabel(), bar.get_ylabel()
        plots.check(fig)
    z = fig.axes[0].get_zlim()                                                # 3-D: the height is log10(loss)
    assert z == pytest.approx((np.log10(0.01), np.log10(10.01)))


# ---- the README's gallery: each figure's verdict counts are its data.json's ---------------------------------------
GALLERY_ROW = re.compile(r"^\| \[<img src=\"paper_figures/out/(?P<name>(?:mnist/)?\w+)/fig\.png\".* — (?P<summary>[^—|]+?) \|$")


def gallery_mismatches(readme: str) -> list[str]:
    """Gallery rows whose trailing verdict counts differ from paper_figures/out/[mnist/]<name>/data.json's summary."""
    bad = []
    for line in readme.splitlines():
        m = GALLERY_ROW.match(line)
        if m:
            data = json.loads((ROOT / "paper_figures" / "out" / m["name"] / "data.json").read_text())
            if m["summary"].strip() != data["summary"]:
                bad.append(f"{m['name']}: README says {m['summary'].strip()!r}, data.json {data['summary']!r}")
    return bad


def test_readme_gallery_counts_are_the_committed_results():
    readme = (ROOT / "README.md").read_text()
    assert len([ln for ln in readme.splitlines() if GALLERY_ROW.match(ln)]) >= 15
    assert not gallery_mismatches(readme)
    row = next(ln for ln in readme.splitlines() if GALLERY_ROW.match(ln))
    stale = readme.replace(row, row[:-2] + " (stale) |", 1)
    assert stale != readme and gallery_mismatches(stale)            # a stale count is caught
