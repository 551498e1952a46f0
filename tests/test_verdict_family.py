"""paper_figures/verdict.py's family-wise statement: p-values that agree with the interval rule, Holm's step-down
correction, collapse to chance, the relative size, one row per effect, and every committed verdict (raw and
adjusted) re-derived from the committed data.json files alone (paper_figures/out/verdicts.md is that re-derivation;
a changed stored number is caught)."""
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from fedlab_analysis.errors import UserError
from paper_figures import verdict as V
from paper_figures import family as F
from paper_figures.claims import CLAIMS, Claim

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "paper_figures" / "out"
PLAIN = Claim("t.plain", "fedsmoo", "x", "quote", "effect")
EQUIV = Claim("t.equiv", "fedinit", "x", "quote", "points", kind="equivalent", margin=0.01)
ATMOST = Claim("t.atmost", "fedlesam", "x", "quote", "flatter", kind="at_most", margin=0.1)
OK = {"converged": True, "diverged": None}


@pytest.mark.parametrize("claim", [PLAIN, EQUIV, ATMOST])
def test_p_below_alpha_exactly_when_the_interval_decides(claim):
    rng = np.random.default_rng(0)
    decisive = 0
    for _ in range(400):
        n = int(rng.integers(2, 7))
        x = rng.normal(rng.normal(0, 0.02), rng.uniform(0.001, 0.03), n)
        v, p = V.decide(claim, x)["verdict"], V.p_value(claim, x)
        assert (v in V.DECISIVE) == (p < V.ALPHA), (x, v, p)
        decisive += v in V.DECISIVE
    assert 10 < decisive < 390                                       # both sides of the boundary were visited
    t975 = 4.302652729749464                                          # Student's t, 97.5%, 2 degrees of freedom
    x = np.array([-1.0, 0.0, 1.0]) + t975 / np.sqrt(3)                # mean / (sd / sqrt 3) = t975: p = 5%
    assert V.p_value(PLAIN, x) == pytest.approx(0.05, rel=1e-9)
    assert V.interval(x)[1] == pytest.approx(0.0, abs=1e-12)          # ... where the interval touches 0
    assert V.p_value(PLAIN, [0.5]) == 1.0 and V.p_value(PLAIN, [0.0, 0.0, 0.0]) == 1.0
    assert V.p_value(PLAIN, [0.25, 0.25, 0.25]) == 0.0 and V.p_value(ATMOST, [0.0, 0.0]) == 0.0


def test_holm_step_down():
    assert V.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert V.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])            # capped at 1, never decreasing with rank
    assert V.holm([]) == []
    assert V.adjusted(V.REPRODUCED, 0.049) == V.REPRODUCED and V.adjusted(V.OPPOSITE, 0.05) == V.INCONCLUSIVE
    assert V.adjusted(V.NOT_CONVERGED, 0.9) == V.NOT_CONVERGED and V.adjusted(V.VIOLATED, None) == V.VIOLATED


def test_collapse_to_chance_is_an_outcome_before_not_converged():
    runs = [{**OK, "test_acc": a} for a in (0.97, 0.12, 0.98, 0.97)]
    r = V.decide(PLAIN, [0.3, 0.31, 0.29], runs)
    assert r["verdict"] == V.COLLAPSED
    assert r["note"] == "1 of 4 runs collapsed to chance (final test accuracy below 19%)"
    runs[1] = {"converged": False, "diverged": None, "test_acc": 0.1}   # flat at chance: also "not converged"
    assert V.decide(PLAIN, [0.3, 0.31, 0.29], runs)["verdict"] == V.COLLAPSED
    runs[1] = {"converged": False, "diverged": "nan", "test_acc": 0.098}
    assert V.decide(PLAIN, [0.3, 0.31, 0.29], runs)["verdict"] == V.DIVERGED   # diverged first, never collapsed
    runs[1] = {**OK, "test_acc": 0.2}                                 # above chance + a tenth of the way: a run
    assert V.decide(PLAIN, [0.3, 0.31, 0.29], runs)["verdict"] == V.REPRODUCED
    assert V.at_chance(0.549, n_classes=2) and not V.at_chance(0.55, n_classes=2)
    assert not V.at_chance(float("nan")) and not V.at_chance(None)


def test_relative_reduction_of_test_error():
    a, b = np.array([0.98, 0.97]), np.array([0.97, 0.96])             # errors 3% and 4% -> 2% and 3%
    assert V.relative(a - b, b) == pytest.approx(0.01 / 0.035)
    data = {"acc": {"x": a.tolist(), "y": b.tolist()}, "other": [0.5, 0.5], "table": [{"effect": [9, 9]}]}
    got = V.arms(data, a - b)
    assert np.array_equal(got[0], a) and np.array_equal(got[1], b)
    assert V.arms(data, [0.02, 0.0]) is None


def write(root: Path, name: str, data: dict) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "data.json").write_text(json.dumps(data))


def test_every_outcome_round_trips_through_a_data_json_and_duplicates_count_once(tmp_path, monkeypatch):
    monkeypatch.setattr("paper_figures.claims.TOY", ())
    acc = {"m": [0.981, 0.983, 0.982], "b": [0.97, 0.971, 0.969], "chance": [0.1, 0.97, 0.98]}
    e = (np.array(acc["m"]) - np.array(acc["b"])).tolist()
    c = CLAIMS["fedinit.t6.fedavg"]
    runs = lambda accs: [{**OK, "test_acc": a} for a in accs]             # noqa: E731
    rows = [V.decide(c, e), V.decide(c, e), V.decide(CLAIMS["fedinit.t6.scaffold"], e),
            V.decide(c, (np.array(acc["b"]) - np.array(acc["chance"])).tolist(), runs(acc["b"] + acc["chance"])),
            V.decide(c, [0.01, np.nan, 0.02], [OK, {"converged": False, "diverged": "nan"}, OK]),
            V.decide(c, e, [{"converged": False, "diverged": None}] + [OK] * 5),
            V.decide(CLAIMS["fedinit.fig2.lowers"], [0.004, 0.001, -0.002]),
            V.not_measured(c, "not measured in this tier")]
    table = [{"row": f"r{i}", **r} for i, r in enumerate(rows)]
    write(tmp_path, "fedinit_table6", {"acc": acc, "table": table})
    write(tmp_path, "fedinit_fig2_consensus", {"table": [{"row": "dup", **V.decide(c, e)}]})
    fam = F.family(tmp_path)["quick"]
    got = {(r["script"], r["row"]): r for r in fam}
    assert [got["fedinit_table6", f"r{i}"]["raw"] for i in range(8)] == [
        V.DIRECTION, V.DIRECTION, V.REPRODUCED, V.COLLAPSED, V.DIVERGED, V.NOT_CONVERGED, V.INCONCLUSIVE,
        V.NOT_MEASURED]
    assert got["fedinit_table6", "r0"]["relative"] == pytest.approx(np.mean(e) / np.mean(1 - np.array(acc["b"])))
    # r0, r1: the same claim in one script (two grid points), two tests even with equal numbers; r2 (another claim)
    # and the other script's row (read first: files in name order): the same effect and test as r0, so the three
    # name each other and share one Holm p; the family counts that effect, r1 and r6
    dup = got["fedinit_fig2_consensus", "dup"]
    assert dup["same_as"] == ["fedinit_table6: r0", "fedinit_table6: r2"] and dup["counted"]
    assert got["fedinit_table6", "r1"]["same_as"] == [] and got["fedinit_table6", "r1"]["counted"]
    p = [got[k]["p"] for k in (("fedinit_fig2_consensus", "dup"), ("fedinit_table6", "r1"), ("fedinit_table6", "r6"))]
    assert dup["p_holm"] == got["fedinit_table6", "r2"]["p_holm"] == got["fedinit_table6", "r0"]["p_holm"]
    assert [got[k]["p_holm"] for k in (("fedinit_fig2_consensus", "dup"), ("fedinit_table6", "r1"),
                                       ("fedinit_table6", "r6"))] == pytest.approx(V.holm(p))
    assert "| quick | fedinit | 5 | 3 |" in F.render({"quick": fam})


def test_committed_verdicts_are_rederived_and_verdicts_md_is_current():
    """Every row of every committed data.json: its stored verdict, mean and interval recompute from its per-seed
    effects (exact checks from what their script stores), and paper_figures/out/verdicts.md, the raw and adjusted
    verdicts, is what the committed files give now. Regenerate: python -m paper_figures.family"""
    fam = F.family(OUT)
    n_rows = sum(len(json.loads(p.read_text())["table"]) for p in OUT.glob("*/data.json") if p.parent.name != "mnist")
    assert len(fam["quick"]) == n_rows and len(fam["mnist"]) > 100
    assert (OUT / "verdicts.md").read_text() == F.render(fam), "run python -m paper_figures.family"
    rows = {(r["script"], r["row"]): r for r in fam["fmnist"]}            # both scripts under one protocol there
    flatter = "FedSMOO vs FedAvg: flatter (mean rise over the plane)"      # the same runs under two papers' claims
    a, b = rows["fedsmoo_fig3_surface", flatter], rows["fedlesam_fig3_surface", flatter]
    assert a["same_as"] == [f"fedlesam_fig3_surface: {flatter}"] and a["counted"] and b["counted"]
    quick = {(r["script"], r["row"]): r for r in fam["quick"]}
    once = quick["fedcm_table3_alpha", "alpha = 0.3 (best interior) above alpha = 1"]   # two claims, one effect
    assert once["same_as"] == ["fedcm_table3_alpha: alpha = 0.3 better than alpha = 1 (FedAvg)"]
    assert not once["counted"] and once["p_holm"] == quick["fedcm_table3_alpha", once["same_as"][0].split(": ")[1]][
        "p_holm"]
    mnist = [r for r in fam["mnist"] if r["p"] is not None]
    changed = sum(r["raw"] != r["adjusted"] for r in mnist)
    page = " ".join((ROOT / "docs" / "reproductions.md").read_text().split())
    assert f"On MNIST, Holm turns {changed} of {len(mnist)} judged verdicts inconclusive" in page
    for tier, name in (("fmnist", "Fashion-MNIST"),):
        if tier in fam:                                                  # a further real tier, once committed
            judged = [r for r in fam[tier] if r["p"] is not None]
            changed = sum(r["raw"] != r["adjusted"] for r in judged)
            assert f"On {name}, Holm turns {changed} of {len(judged)} judged verdicts inconclusive" in page


def copy_results(tmp_path) -> Path:
    for p in [*OUT.glob("**/data.json"), *OUT.glob(f"**/{V.CURVES}")]:
        if "runs" not in p.relative_to(OUT).parts:
            (tmp_path / p.relative_to(OUT)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(p, tmp_path / p.relative_to(OUT))
    return tmp_path


@pytest.mark.parametrize("change, needle", [
    (lambda d: d["table"][0]["effect"].__setitem__(2, d["table"][0]["effect"][2] + 1e-6), "does not recompute"),
    (lambda d: d["table"][0].__setitem__("verdict", "reproduced"), "does not recompute"),
    (lambda d: d["table"][0]["interval"].__setitem__(1, d["table"][0]["interval"][1] * 1.01), "does not recompute"),
    (lambda d: d["test_acc"]["1"].__setitem__(0, d["test_acc"]["1"][0] - 0.001), None),   # an arm: relative moves
])
def test_one_changed_stored_number_is_caught(tmp_path, change, needle):
    """A judged row of the quick tier's FedCM Table 3 (its rows do not move when a real tier is trained again),
    moved to the front: one stored number changed is named by its row."""
    root = copy_results(tmp_path)
    f = root / "fedcm_table3_alpha" / "data.json"
    d = json.loads(f.read_text())
    i = next(i for i, r in enumerate(d["table"]) if r["verdict"] in ("reproduced", "opposite", "inconclusive"))
    d["table"].insert(0, d["table"].pop(i))
    f.write_text(json.dumps(d))
    assert F.family(root)                                            # reordered rows still recompute
    change(d)
    f.write_text(json.dumps(d))
    if needle:
        with pytest.raises(UserError, match=f"fedcm_table3_alpha/data.json: row 0 .*{needle}"):
            F.family(root)
    else:
        assert F.render(F.family(root)) != (OUT / "verdicts.md").read_text()
    assert F.render(F.family(copy_results(tmp_path / "fresh"))) == (OUT / "verdicts.md").read_text()


def test_a_changed_exact_row_is_caught(tmp_path):
    root = copy_results(tmp_path)
    f = root / "fedlesam_cost" / "data.json"
    d = json.loads(f.read_text())
    d["table"][0]["effect"] = 2.0                                     # FedAvg memory: 2x, the paper says 1x
    f.write_text(json.dumps(d))
    with pytest.raises(UserError, match=r"row 0 \(FedAvg memory\) is stored reproduced; its check, restated"):
        F.family(root)


def test_command_writes_the_file_and_refuses_bad_output_in_one_line(tmp_path, capsys):
    assert F.main(["--out", str(tmp_path / "v.md")]) == 0
    assert (tmp_path / "v.md").read_text() == (OUT / "verdicts.md").read_text()
    assert F.main(["--out", str(tmp_path / "no" / "v.md")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out") and err.count("\n") == 1 and not (tmp_path / "no").exists()
    assert re.search(r"\| quick \| fedcm \| 8 \| 7 \|", (tmp_path / "v.md").read_text())


def test_the_statement_says_how_many_judged_rows_come_from_earlier_settings(tmp_path):
    """Per real tier: the judged rows of trained scripts whose output was trained under other settings than the code
    runs now (common.trained_under, counted here apart), and which scripts. An output without its settings record
    joins the count."""
    from paper_figures import common as C
    from paper_figures.tier import ORDER
    fam = F.family(OUT)
    page = (OUT / "verdicts.md").read_text()
    for tier in ("mnist", "fmnist"):
        stale = {s for s in ORDER if not C.trained_under(s, tier)[0]}
        judged = [r for r in fam[tier] if r["p"] is not None and r["script"] in ORDER]
        n = sum(r["script"] in stale for r in judged)
        line = (f"{n} of its {len(judged)} judged rows of trained scripts come from outputs trained under earlier"
                if n else f"Each of its {len(judged)} judged rows of trained scripts comes from an output trained "
                "under the current settings.")
        assert line in page, tier
        # and every stale script is named, judged rows or none (FedInit Fig. 1's rows are exact or not converged)
        named = [ln for ln in page.splitlines() if "earlier settings" in ln and "judged row" in ln]
        for s in stale & {r["script"] for r in fam[tier]}:
            assert any(s in ln for ln in named), (tier, s)
    root = copy_results(tmp_path)
    current = "fedsmoo_table2"                           # a committed mnist output trained under today's settings
    assert C.trained_under(current, "mnist")[0]
    f = root / "mnist" / current / "data.json"
    d = json.loads(f.read_text())
    f.write_text(json.dumps({k: v for k, v in d.items() if k != "settings"}))    # as if written under protocol 1
    before = sum(r["p"] is not None and r.get("current") is False for r in fam["mnist"])
    moved = sum(r["p"] is not None for r in fam["mnist"] if r["script"] == current)
    assert moved and f"\n{before + moved} of its " in F.render(F.family(root))
