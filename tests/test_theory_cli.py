"""The theory CLI end to end, and a verdict that follows its theorem's regime."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fedlab_analysis.theory import __main__ as cli
from fedlab_analysis.theory import claims, fedcm
from fedlab_analysis.theory.claims import HOLDS, NOT_CHECKED, OUTSIDE, VERDICTS

ROOT = Path(__file__).resolve().parents[1]




def test_cli_quick_writes_report(tmp_path):
    out = tmp_path / "tmp"
    cmd = [sys.executable, "-m", "fedlab_analysis.theory", "fedals", "--quick", "--seeds", "2", "--out", str(out)]
    p = subprocess.run(cmd,
                       cwd=ROOT, capture_output=True, text=True, check=False, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "| paper | claim | where | kind | expected | measured | regime | slack | seeds | verdict |" in p.stdout
    md, claims = (out / "report.md").read_text(), json.loads((out / "report.json").read_text())
    assert md.startswith("# Theory checks: FedALS (quick)")
    assert len(claims) >= 10 and {c["paper"] for c in claims} == {"fedals"}
    assert all(c["verdict"] in VERDICTS and c["measured"] for c in claims)
    checked = [c for c in claims if c["verdict"] != NOT_CHECKED]
    assert all(c["details"] and c["seeds"] == [0, 1] and sum(c["tally"].values()) == 2 for c in checked)
    assert all(c["outcome"] == (f"{c['verdict']} in 2/2" if c["verdict"] != "mixed" else c["outcome"])
               for c in checked)
    assert all(c["measured"].startswith("not checked: ") for c in claims if c not in checked)
    assert len({c["id"] for c in claims}) == len(claims)
    by_id = {c["id"]: c for c in claims}
    for key in ("eq22-avg-stability", "C.1-C.2-identities", "eq71-gap-fixed"):
        assert by_id[key]["verdict"] == HOLDS and by_id[key]["value"] <= 1e-10
        assert all(r["value"] <= 1e-10 for r in by_id[key]["details"]["per_seed"])
    assert by_id["thm41-bound"]["slack"] > 1 and by_id["eq22-avg-stability"]["kind"] == "sanity check"
    figs = [c["figure"] for c in claims if c["figure"]]
    assert len(figs) >= 2 and all((out / f).is_file() for f in figs)
    assert all(f"({f})" in md for f in figs)


def test_seeds_fold_into_one_row_per_claim():
    def run(seed, out_dir=None, quick=False):
        return [fedcm.check_drift_B8(T=5, R=2, seed=seed, eta_scale=0.5),
                claims.Claim("fedcm", "toy", "c", "w", "e", "m", claims.HOLDS if seed % 2 else claims.VIOLATED,
                             float(seed), {}, slack=1.0 + seed)]
    rows = claims.over_seeds(run, [0, 1, 2])
    drift, toy = rows
    assert drift.seeds == [0, 1, 2] and drift.tally == {HOLDS: 3} and drift.outcome == "holds in 3/3"
    assert [r["seed"] for r in drift.details["per_seed"]] == [0, 1, 2]
    assert drift.slack == min(r["slack"] for r in drift.details["per_seed"]) > 1
    assert toy.verdict == claims.MIXED and toy.outcome == "mixed: violated 2/3, holds 1/3"
    assert toy.slack == 1.0 and toy.spread == {"value": [0.0, 2.0], "slack": [1.0, 3.0]}


def test_cli_seeds_must_be_positive(capsys):
    with pytest.raises(SystemExit) as e:                 # argparse's own check: one line, exit 2
        cli.main(["fedcm", "--seeds", "0"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("error: ") and "--seeds" in err and len(err.splitlines()) == 1


def test_cli_unknown_paper_is_one_line_exit_2(capsys):
    assert cli.main(["fedfoo"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "fedfoo" in err and "fedcm" in err


def test_cli_out_must_be_a_folder(tmp_path, capsys):
    f = tmp_path / "file.txt"
    f.write_text("x")
    assert cli.main(["fedcm", "--out", str(f)]) == 2
    assert "folder" in capsys.readouterr().err


def test_missing_paper_module_is_one_line(capsys):
    assert cli.load("fednotwritten") is None
    assert capsys.readouterr().out.strip().count("\n") == 0


def test_claim_flips_when_moved_outside_regime():
    inside = fedcm.check_drift_B8(T=10, R=2, eta_scale=0.5)             # eta_l = 0.5/(4LK): Lemma B.8 applies
    outside = fedcm.check_drift_B8(T=10, R=2, eta_scale=3.0)            # eta_l = 3/(4LK): it does not
    assert inside.id == outside.id
    assert inside.verdict == HOLDS and outside.verdict == OUTSIDE


def test_same_seed_same_numbers():
    a = fedcm.check_participation(Ns=(20, 40), T=10, K=2, R=2, seed=3)
    b = fedcm.check_participation(Ns=(20, 40), T=10, K=2, R=2, seed=3)
    c = fedcm.check_participation(Ns=(20, 40), T=10, K=2, R=2, seed=4)
    assert a.details["errors"] == b.details["errors"] != c.details["errors"]


@pytest.mark.slow
def test_cli_all_quick(tmp_path):
    cmd = [sys.executable, "-m", "fedlab_analysis.theory", "all", "--quick", "--out", str(tmp_path)]
    p = subprocess.run(cmd,
                       cwd=ROOT, capture_output=True, text=True, check=False, timeout=600)
    assert p.returncode == 0, p.stderr
    papers = {c["paper"] for c in json.loads((tmp_path / "report.json").read_text())}
    assert {"fedcm", "fedinit", "fedals"} <= papers


def test_report_round_trips(tmp_path):
    rows = [fedcm.check_drift_B8(T=5, R=2), claims.Claim("fedcm", "x", "c", "w", "e", "m", HOLDS, 1.0, {},
                                                         slack=float("inf"))]
    claims.write_report(rows, tmp_path)
    back = claims.read_report(tmp_path / "report.json")
    assert [c.id for c in back] == [c.id for c in rows] and back[1].slack == float("inf")
    assert claims.to_markdown(back) == claims.to_markdown(rows)
