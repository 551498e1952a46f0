"""The settings tables (paper_figures/settings.py): generated from the tier's code, committed under
paper_figures/out/settings/, and stale the moment a tier config value changes without regenerating them."""
from __future__ import annotations

import json
import shutil

import pytest

from paper_figures import common as C
from paper_figures import settings as S
from paper_figures.tier import ORDER

FIX = "run `python -m paper_figures.settings`"


def test_committed_tables_are_current():
    bad = S.stale()
    assert not bad, f"stale settings tables {bad}: {FIX}"


def test_a_tier_config_change_makes_the_committed_tables_stale(monkeypatch):
    monkeypatch.setitem(C.MNIST_BASE, "lr", 0.05)               # the tier's lr changed, the tables not regenerated
    bad = S.stale()
    assert "paper_figures/out/settings/fedsmoo_table2.md" in bad, bad
    assert "paper_figures/out/settings/fedals_table2.md" not in bad     # FedALS sets its own lr
    lr = next(r for r in S.rows("fedsmoo_table2") if r["knob"] == "local learning rate eta_l")
    assert (lr["paper"], lr["ours"], lr["mark"]) == ("0.1", "0.05", "differs")


def test_an_edited_or_missing_committed_table_is_stale(tmp_path):
    copy = tmp_path / "settings"
    shutil.copytree(S.OUT, copy)
    assert S.stale(copy) == []
    p = copy / "fedcm_table3_alpha.md"
    p.write_text(p.read_text().replace("| 4000 |", "| 300 |"))
    assert S.stale(copy) == [str(p)]
    (copy / "controls.md").unlink()
    assert S.stale(copy) == [str(p), str(copy / "controls.md")]


def test_the_check_command(capsys):
    assert S.main(["--check"]) == 0
    assert "current" in capsys.readouterr().out


def test_every_script_of_the_tier_has_a_table_and_every_difference_a_reason():
    assert set(S.OWN) <= set(ORDER) and {s.split("_")[0] for s in ORDER} <= set(S.PAPERS)
    for s in ORDER:
        assert (S.OUT / f"{s}.md").exists(), s
        rows = S.rows(s)
        assert {r["mark"].split(":")[0] for r in rows} <= {"same", "differs", "not stated", "paper form only",
                                                            "both forms"}
        for r in rows:
            if r["mark"] != "same":
                assert r["why"], (s, r)


def test_the_decay_and_code_forms_are_read_from_the_runs():
    rows = {r["knob"]: r for r in S.rows("fedsmoo_table2")}
    assert rows["learning-rate decay per round (fedsmoo)"]["mark"] == "same"           # 0.9995, as the paper
    assert rows["learning-rate decay per round (fedsmoo)"]["ours"] == "0.9995"
    assert rows["learning-rate decay per round (fedsam)"]["mark"] == "same"
    assert rows["gradient clipping (norm)"]["mark"] == "same"                          # 10, as the authors' code
    cm = {r["knob"]: r for r in S.rows("fedcm_table3_alpha")}
    assert (cm["gradient clipping (norm)"]["ours"], cm["gradient clipping (norm)"]["mark"]) == ("0", "not stated")
    assert rows["server perturbation s"]["mark"] == "both forms"                        # --smoo-server code too
    als = {r["knob"]: r for r in S.rows("fedals_table2")}
    assert als["local momentum"]["mark"] == als["local learning rate"]["mark"] == "same"      # FedALS Sec. 7
    assert "6,000 training images" in als["data the learning rate is chosen on"]["ours"]
    noise = next(r for r in S.rows("fedinit_table6") if r["knob"] == "heterogeneity noise")
    assert "s = 0.2" in noise["ours"] and "adapted" in noise["why"]                  # FedInit Sec. 5.1, run
    t6 = {r["knob"]: r["mark"] for r in S.rows("fedinit_table6")}
    assert t6["aggregation with RI (fedavg +RI (delta_from_init), feddyn +RI (delta_from_init))"] == "both forms"


def test_horizon_rule(monkeypatch):
    assert S._lr_last(0.1, 0.998, 300) == pytest.approx(0.1 * 0.998 ** 299)
    assert [S.horizon_ok(s) for s in ("fedcm_table3_alpha", "fedcm_fedadam_oscillation", "fedcm_dispersion")] == \
        [False] * 3
    assert S.horizon_ok("fedsmoo_table2") is True and S.horizon_ok("fedinit_table6") is True
    assert S.horizon_ok("fedals_table2") is None                  # FedALS states no schedule
    p, o, ok = S.horizon("fedcm_table3_alpha")["fedcm"]
    assert o / p > 1000 and not ok
    monkeypatch.setitem(C.MNIST_BASE, "rounds", 4000)             # the paper's horizon: within the factor
    assert S.horizon_ok("fedcm_table3_alpha") is True


def test_controls_agree_with_the_scripts_own_rows():
    """FedInit's RI control is Table 6's own row, recomputed from the committed per-seed numbers."""
    t6 = json.loads((C.OUT / "mnist" / "fedinit_table6" / "data.json").read_text())
    own = next(r for r in t6["table"] if r["row"] == "fedavg +RI (Alg. 1) minus fedavg")
    ri = next(r for r in S.controls() if r["row"] == "FedAvg +RI (ri) minus FedAvg")
    assert ri["mean"] == pytest.approx(100 * own["mean"], abs=1e-9)
    assert (ri["lo"], ri["hi"]) == pytest.approx((100 * own["interval"][0], 100 * own["interval"][1]), abs=1e-9)


def test_a_control_is_gated_on_its_runs_curves(tmp_path):
    """Fashion-MNIST's RI control names its runs (Table 6's ``run_ids``) and is gated on their curves, as Table 6's own
    control row. With every run's last rounds made flat the gate passes; with one run's last fifth made a 20-point ramp
    it reads "not converged"; without the run ids (an output written before them) there is no gate."""
    src = C.OUT / "fmnist" / "fedinit_table6"
    own = next(r for r in json.loads((src / "data.json").read_text())["table"]
               if r["row"] == "control: fedavg +RI (Alg. 1) minus fedavg, equal rounds and local steps")
    ri = lambda root: next(r for r in S.controls(root, "fmnist")                               # noqa: E731
                           if r["row"] == "FedAvg +RI (ri) minus FedAvg")["verdict"]
    got = ri(None)
    assert got["verdict"] == own["verdict"] and got["note"] == own["note"]
    assert sorted(got["runs"]) == sorted(own["runs"]) and sorted(got["flags"]) == sorted(own["flags"])
    dst = tmp_path / "fmnist" / "fedinit_table6"
    dst.mkdir(parents=True)
    data = json.loads((src / "data.json").read_text())
    (dst / "data.json").write_text(json.dumps(data))

    def curves_with(edit):                         # edit(k, curve): the k-th of the control's runs
        curves = json.loads((src / "curves.json").read_text())
        for k, i in enumerate(got["runs"]):
            edit(k, curves["runs"][i]["test_acc"])
        (dst / "curves.json").write_text(json.dumps(curves))

    def flat(k, c):
        c[:] = [c[-1]] * len(c)

    def ramp(k, c):                                # the first run: flat, then a 20-point rise over its last fifth
        flat(k, c)
        if k == 0:
            n = len(c) // 5
            c[-n:] = [c[-1] - 0.2 * (n - 1 - j) / (n - 1) for j in range(n)]

    curves_with(flat)
    ungated = ri(tmp_path)["verdict"]
    assert ungated not in ("not converged", "not measured")
    curves_with(ramp)
    assert ri(tmp_path)["verdict"] == "not converged"
    del data["run_ids"]
    (dst / "data.json").write_text(json.dumps(data))
    assert ri(tmp_path)["verdict"] == ungated and "runs" not in ri(tmp_path)


def test_the_rows_the_horizon_rule_marks_are_the_fedcm_scripts_judged_rows():
    """Every marked row is judged and from a FedCM script (their horizon is short of the paper's 4,000 rounds). A
    claim about the trained model is judged there only in an output written before the rule (protocol 1): one
    written now says "not measured" (past_horizon)."""
    marked = S.horizon_marked()
    assert marked and {r["script"] for r in marked} <= {"fedcm_table3_alpha", "fedcm_fedadam_oscillation",
                                                        "fedcm_dispersion"}
    assert all(r["verdict"] != "not measured" for r in marked)
    for r in marked:
        assert not (r["trained model"] and C.trained_under(r["script"], r["tier"])[0]), r


# ---- provenance: which settings a committed output ran under ---------------------------------------------------
def test_each_committed_mnist_output_is_said_to_be_from_the_settings_it_ran_under():
    """One written before the settings record existed carries none: protocol 1, and every table says so. One
    written since carries it: current where it matches what the code runs now, else "earlier settings" too. Its
    settings table and the index say the same line."""
    for s in ORDER:
        data = json.loads((C.OUT / "mnist" / s / "data.json").read_text())
        current, line = C.trained_under(s, "mnist")
        assert current == (data.get("settings") == C.settings_record(s, "mnist")), s
        if current:
            assert line.startswith("committed output trained under these settings"), s
        else:
            assert "earlier settings (protocol" in line and "make figures TIER=mnist" in line, s
            assert "settings" in data or "(protocol 1)" in line, s
        assert line in (S.OUT / f"{s}.md").read_text() and line in (S.OUT / "README.md").read_text()


def test_a_change_of_the_noise_form_makes_a_fedinit_output_not_current(monkeypatch):
    """FedInit's noise form (data/noise.py FORM) is part of its scripts' settings record: an output written under
    another form is not current; a script without the noise is untouched."""
    from fedlab_analysis.data import noise as N
    before = {s: C.settings_record(s, "mnist") for s in ("fedinit_table6", "fedcm_table3_alpha")}
    monkeypatch.setattr(N, "FORM", "per-class brightness offset N(0, s^2)")
    assert C.settings_record("fedinit_table6", "mnist") != before["fedinit_table6"]
    assert C.settings_record("fedcm_table3_alpha", "mnist") == before["fedcm_table3_alpha"]


def test_an_output_written_now_records_its_settings_and_a_change_of_them_is_seen(tmp_path, monkeypatch):
    monkeypatch.setitem(C._ARGS, "out", tmp_path)
    name, data = "fedcm_table3_alpha", {"summary": "0 of 0 comparisons", "table": []}
    for tier in ("quick", "mnist"):
        C.save_result(name, dict(data), C.plots.figure()[0], tier)
    assert "settings" not in json.loads((tmp_path / name / "data.json").read_text())     # quick: as before
    written = json.loads((tmp_path / "mnist" / name / "data.json").read_text())
    assert written["settings"] == {"protocol": C.PROTOCOL,
                                   "fingerprint": C.settings_record(name, "mnist")["fingerprint"]}
    assert C.trained_under(name, "mnist", written) == (True, "committed output trained under these settings "
                                                             f"(protocol {C.PROTOCOL})")
    assert not C.trained_under(name, "mnist", {**written, "settings": {**written["settings"], "protocol": 1}})[0]
    assert not C.trained_under(name, "mnist", {k: v for k, v in written.items() if k != "settings"})[0]
    monkeypatch.setitem(C.MNIST_BASE, "wd", 1e-4)                  # a setting of its runs changed: not current
    assert not C.trained_under(name, "mnist", written)[0]
    monkeypatch.setitem(C.MNIST_BASE, "wd", 1e-3)
    monkeypatch.setitem(C.PER_METHOD, "fedsmoo", {"lr_decay": 0.998})   # a method it does not run: still current
    assert C.trained_under(name, "mnist", written)[0]


def test_a_trained_model_claim_short_of_the_paper_horizon_is_not_judged(monkeypatch):
    """FedCM Table 3 in the mnist tier: its accuracy claims (about the trained model) become "not measured" with the
    reason; its oscillation claim (the course of training) stays judged; the quick tier and a script at the paper's
    horizon are untouched."""
    rows = json.loads((C.OUT / "fedcm_table3_alpha" / "data.json").read_text())["table"]   # quick tier
    out = S.past_horizon("fedcm_table3_alpha", rows, "mnist")
    for r, o in zip(rows, out):
        if C.CLAIMS[r["claim"]].at_convergence and r["verdict"] != "not measured":
            assert o["verdict"] == "not measured" and S.SHORT in o["note"] and o["measured"] == r["measured"]
        else:
            assert o == r
    assert any(C.CLAIMS[r["claim"]].at_convergence for r in rows) and any(o != r for r, o in zip(rows, out))
    assert S.past_horizon("fedcm_table3_alpha", rows, "quick") == rows
    monkeypatch.setitem(C.MNIST_BASE, "rounds", 4000)             # the paper's horizon: judged
    assert S.past_horizon("fedcm_table3_alpha", rows, "mnist") == rows


def test_a_control_pairs_only_arms_trained_under_one_protocol(tmp_path):
    """FedLESAM-S (fedlesam_fig4_rho) against SCAFFOLD (fedsmoo_fig3_surface): both arms written under one protocol
    are compared; with one arm's output from another protocol the row says so, has no verdict, and leaves the family's
    control rows (``control_data``)."""
    for s in ("fedlesam_fig4_rho", "fedsmoo_fig3_surface"):
        src, dst = C.OUT / "fmnist" / s, tmp_path / "fmnist" / s
        dst.mkdir(parents=True)
        for f in ("data.json", "curves.json"):
            (dst / f).write_text((src / f).read_text())
    pair = "fedlesam_fig4_rho / fedsmoo_fig3_surface"
    rows = lambda: [r for r in S.controls(tmp_path, "fmnist") if r["from"] == pair]                   # noqa: E731
    assert len(rows()) == 3 and all(r["verdict"] and "protocols" not in r for r in rows())
    judged = len(S.control_data(tmp_path, "fmnist")["table"])
    f = tmp_path / "fmnist" / "fedsmoo_fig3_surface" / "data.json"
    d = json.loads(f.read_text())
    d["settings"] = {**d["settings"], "protocol": 1}
    f.write_text(json.dumps(d))
    assert len(rows()) == 3 and all(r["verdict"] is None and r["protocols"] == [1, 2] for r in rows())
    assert len(S.control_data(tmp_path, "fmnist")["table"]) == judged - 3


def test_a_control_compares_only_arms_with_the_same_settings_beyond_the_methods(tmp_path):
    """FedAvg +RI against FedAvg (fedinit_table6, MNIST): the arms' ledger records agree seed by seed beyond the
    methods, so the rows say "same"; a base run with another decay is not compared and names the knob; a knob only
    one arm reads (beta) does not count; a missing record leaves the rows judged but "not checked"."""
    import gzip
    dst = tmp_path / "mnist" / "fedinit_table6"
    dst.mkdir(parents=True)
    for f in ("data.json", "curves.json"):
        (dst / f).write_text((C.OUT / "mnist" / "fedinit_table6" / f).read_text())
    d = json.loads((dst / "data.json").read_text())
    ids = d["run_ids"]["acc/fedavg"] + d["run_ids"]["acc/fedavg+ri"] + d["run_ids"]["acc/fedavg+ri-code"]
    (tmp_path / "ledger" / "mnist").mkdir(parents=True)
    for i in ids:
        shutil.copy(C.OUT / "ledger" / "mnist" / f"{i}.json.gz", tmp_path / "ledger" / "mnist")
    rows = lambda: [r for r in S.controls(tmp_path, "mnist") if r["claim"] == "fedinit.ctrl.ri"]      # noqa: E731
    assert len(rows()) == 2 and all(r["verdict"] and r["settings"] == "same" for r in rows())

    def edit(run, **knobs):
        path = tmp_path / "ledger" / "mnist" / f"{run}.json.gz"
        rec = json.loads(gzip.decompress(path.read_bytes()))
        key = json.loads(rec["key.json"])
        key["config"].update(knobs)
        rec["key.json"] = json.dumps(key)
        path.write_bytes(gzip.compress(json.dumps(rec).encode()))
    edit(d["run_ids"]["acc/fedavg+ri"][2], beta=0.7)                 # RI's own knob: the base does not read it
    assert all(r["settings"] == "same" for r in rows())
    edit(d["run_ids"]["acc/fedavg"][3], lr_decay=0.9995)            # the base's schedule: no longer a control
    assert all(r["verdict"] is None and r["unequal"] == ["lr_decay 0.998 vs 0.9995"] for r in rows())
    (tmp_path / "ledger" / "mnist" / f"{d['run_ids']['acc/fedavg'][3]}.json.gz").unlink()
    assert len(rows()) == 2 and all(r["verdict"] and r["settings"] == "not checked" for r in rows())


def test_a_paper_s_controls_read_as_one_more_script_in_the_tasks_table(monkeypatch):
    """``controls:fedlesam`` gives FedLESAM's controls on both tasks and no other paper's; a control whose arms ran
    under two protocols reads "not compared" and does not count in "holds on ... of"."""
    from paper_figures import compare_tiers as CT
    real = S._protocol
    monkeypatch.setattr(S, "_protocol", lambda s, root, tier: 1 if (s, tier) == ("fedsmoo_fig3_surface", "mnist")
                        else real(s, root, tier))
    got = CT.tasks([CT.CONTROLS + "fedlesam"])
    want = {f"control: {r['row']}" for t in C.REAL for r in S.controls(tier=t) if r["claim"].startswith("fedlesam.")}
    assert {r["row"] for r in got} == want and len(want) == 4
    assert all(r["script"] == "controls" for r in got)
    scaffold = [r for r in got if "SCAFFOLD" in r["row"]]
    assert len(scaffold) == 3 and all(r["verdicts"]["mnist"] == CT.NOT_COMPARED for r in scaffold)
    assert all(r["of"] == sum(v not in ("absent", "not measured", CT.NOT_COMPARED) for v in r["verdicts"].values())
               for r in got)
    assert "not compared" in CT.tasks_table([CT.CONTROLS + "fedlesam"])
    assert not any("RI" in r["row"] or "FedSMOO" in r["row"] for r in got)


def test_the_runs_of_an_output_are_counted_by_the_machine_their_ledger_records_name(tmp_path):
    """Float32 numbers differ between CPUs, so each table counts the machines its output's runs trained on."""
    import gzip
    script, tier = "fedinit_table6", "fmnist"
    shutil.copytree(C.OUT / tier / script, tmp_path / tier / script)
    runs = sorted(json.loads((tmp_path / tier / script / "curves.json").read_text())["runs"])
    (tmp_path / "ledger" / tier).mkdir(parents=True)
    for i in runs:
        shutil.copy(C.OUT / "ledger" / tier / f"{i}.json.gz", tmp_path / "ledger" / tier)
    assert S.machines(script, tier, tmp_path) == f"not recorded (before 30 Nov): {len(runs)}"
    rec = tmp_path / "ledger" / tier / f"{runs[0]}.json.gz"
    body = json.loads(gzip.decompress(rec.read_bytes()))
    body["done.json"] = json.dumps({**json.loads(body["done.json"]), "machine": "CPU X, AVX512; torch 2.13.0+cpu"})
    rec.write_bytes(gzip.compress(json.dumps(body).encode()))
    (tmp_path / "ledger" / tier / f"{runs[1]}.json.gz").unlink()
    assert S.machines(script, tier, tmp_path) == (f"not recorded (before 30 Nov): {len(runs) - 2}, "
                                                  "CPU X, AVX512; torch 2.13.0+cpu: 1, no ledger record: 1")
    (tmp_path / tier / script / "curves.json").unlink()
    assert S.machines(script, tier, tmp_path).startswith("not counted")
