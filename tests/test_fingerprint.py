"""paper_figures/fingerprint.py and the rule of runs.status that uses it: a cached run whose key differs from the task's
in the training source hash alone is current when the memo records one behavioural fingerprint for both sources.

The fingerprint is deterministic; a real behaviour change (a flipped SCAFFOLD correction or relaxed-initialisation
sign, another lr decay, a 1e-7 change of the learning rate, another partition rule) changes it; a change of the
source hash alone, or a reordering that moves float64 round-off (loop vs vmap clients), does not. status() keeps an
equivalent entry, refuses one whose fingerprint differs or is missing, and ensure() neither deletes nor retrains it.
"""
import json
from pathlib import Path

import pytest
import torch
from conftest import kill_in_round

from paper_figures import tiers as T_
from paper_figures import entry as E
from paper_figures import fingerprint as F
from paper_figures import runs as R

TINY = {"algo": "fedavg", "clients": 4, "rounds": 4, "eval_train_samples": 100, "ckpt_every": 2}


@pytest.fixture(autouse=True)
def _own_args(monkeypatch, tmp_path):
    monkeypatch.setattr(T_, "_ARGS", dict(T_._ARGS, out=tmp_path / "out"))


def fp(algos, **kw):
    return F.training_fingerprint(algos=algos, mnist=False, **kw)


# ---- the fingerprint -------------------------------------------------------------------------------------------
def test_the_same_code_gives_the_same_fingerprint():
    parts = {}
    a = fp(["fedavgm", "fedinit"], parts=parts)
    core, _, noise = a.partition(F.NOISE)
    assert a == fp(["fedavgm", "fedinit"]) and len(core) == 16 and int(core, 16) >= 0 and int(noise, 16) >= 0
    assert set(parts["cases"]) == {"fedavgm", "fedinit", "fedinit-delta-from-init-beta-neg0.1"}
    assert parts["data"]["mnist"] == "absent"
    assert fp(["fedavgm"]) != a                                  # the battery is part of what is hashed
    assert {"fedavg", "fedavg-loop", "fedavg-digits-by-name"} <= {n for n, (algo, _) in F.cases(["fedavg"]).items()}
    with pytest.raises(ValueError, match="fedfoo"):
        F.cases(["fedfoo"])


def test_every_algorithm_is_in_the_battery():
    from fedlab_analysis import algos
    assert {algo for algo, _ in F.cases().values()} == set(algos.NAMES)


def test_a_changed_source_hash_alone_keeps_the_fingerprint(monkeypatch):
    a = fp(["scaffold"])
    monkeypatch.setattr(E, "training_source_hash", lambda: "another-string")
    assert fp(["scaffold"]) == a


def test_round_off_from_a_reordering_does_not_change_it(tmp_path):
    """loop and vmap clients reorder float64 sums: the weights differ in the last bits (asserted, so the test
    means something), the 9-digit digests do not."""
    from fedlab_analysis.config import RunConfig
    from fedlab_analysis.trainers.loop import train
    ds = F._dataset()
    ws = [train(RunConfig(**{**F.BASE, "algo": "fedsmoo", "client_parallel": p}).validate(), dataset=ds).w
          for p in ("vmap", "loop")]
    assert not torch.equal(*ws) and torch.allclose(*ws, rtol=0, atol=1e-13)
    assert F.run_case("fedsmoo", {"client_parallel": "vmap"}, ds, tmp_path / "v") == \
        F.run_case("fedsmoo", {"client_parallel": "loop"}, ds, tmp_path / "l")


@pytest.mark.parametrize("algo,change", [
    ("scaffold", "scaffold_sign"), ("fedinit", "ri_sign"), ("fedprox", "lr_decay"), ("fedprox", "lr_1e-7"),
    ("fedprox", "partition")])
def test_a_behaviour_change_changes_the_fingerprint(monkeypatch, algo, change):
    from fedlab_analysis.data import partitions
    from fedlab_analysis.trainers import engine, parts
    before = fp([algo])
    if change == "scaffold_sign":            # SCAFFOLD's correction c - c_i subtracted instead of added
        monkeypatch.setattr(parts.Scaffold, "direction",
                            lambda self, run, ctx, x, d, decay: (d.sub_(self.corr), decay))
    elif change == "ri_sign":                # FedInit's relaxed start moved the other way
        monkeypatch.setattr(parts.RelaxedInit, "start",
                            lambda self, run, ctx, x: x - self.beta * (ctx.w - run.rows(run.last_local, ctx.S)))
    elif change == "lr_decay":               # eta_l decayed from round 1 instead of round 0
        monkeypatch.setattr(engine.Run, "lr_at", lambda self, t: self.cfg.lr * self.cfg.lr_decay ** (t + 1))
    elif change == "lr_1e-7":                # a real change far below a percent still shows in 9 digits
        monkeypatch.setattr(engine.Run, "lr_at", lambda self, t: self.cfg.lr * (1 + 1e-7) * self.cfg.lr_decay ** t)
    else:                                    # the Dirichlet rule's clients dealt in reverse order (the digits' own)
        rule, allowed = partitions._RULES["dirichlet"]
        monkeypatch.setitem(partitions._RULES, "dirichlet", (lambda *a, **kw: rule(*a, **kw)[::-1], allowed))
    assert fp([algo]) != before


def test_the_data_fingerprint_sees_a_changed_loader(monkeypatch):
    from fedlab_analysis import data
    before = F.data_fingerprint(mnist=False)
    assert before == F.data_fingerprint(mnist=False) and before["mnist"] == "absent"
    load = data.DATASETS["digits"]

    def shifted(*a, **kw):                   # the loader's normalisation moved by one float32 step
        ds = load(*a, **kw)
        ds.x_train = torch.nextafter(ds.x_train, torch.tensor(2.0))
        return ds
    monkeypatch.setitem(data.DATASETS, "digits", shifted)
    after = F.data_fingerprint(mnist=False)
    assert after["digits"]["arrays"] != before["digits"]["arrays"]
    assert after["digits"]["partition"] == before["digits"]["partition"]


# ---- the memo and runs.status ----------------------------------------------------------------------------------
def _mtimes(root: Path) -> dict:
    return {str(p): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def trained():
    """A done TINY run of the quick tier; returns (task, its source hash)."""
    task = R.tasks([(TINY, 0, "")], "quick")[0]
    assert R.ensure(task)["status"] == "done"
    return task, task["key"]["source"]


@pytest.fixture
def computed(monkeypatch):
    """training_fingerprint replaced by a counter returning "same" (the real one is tested above)."""
    calls = []
    monkeypatch.setattr(F, "training_fingerprint", lambda **kw: calls.append(kw) or "same")
    return calls


def _edited(monkeypatch):
    monkeypatch.setattr(E, "training_source_hash", lambda: "edited")
    return R.tasks([(TINY, 0, "")], "quick")[0]


def test_an_entry_with_an_equal_fingerprint_is_kept_and_not_retrained(trained, computed, monkeypatch):
    task, old = trained
    entry, root = Path(task["path"]), Path(task["path"]).parent
    F.record(root, old, "same")
    before = _mtimes(entry)
    again = _edited(monkeypatch)
    assert again["path"] == task["path"] and again["key"] != task["key"]
    assert R.status(again) == "done" and len(computed) == 1           # the current source's, computed lazily ...
    assert F.read_memo(root) == {old: "same", "edited": "same"}
    assert R.status(again) == "done" and len(computed) == 1           # ... once
    assert R.ensure(again)["status"] == "done" and R.train_pool([again], workers=1, quiet=True) == []
    assert _mtimes(entry) == before                                   # nothing rewritten, key.json included
    assert json.loads((entry / "key.json").read_text())["source"] == old
    assert R.status(task) == "done"                                   # the old code still reads it as its own


def test_an_entry_with_a_different_or_missing_fingerprint_is_stale(trained, computed, monkeypatch):
    task, old = trained
    root = Path(task["path"]).parent
    again = _edited(monkeypatch)
    assert R.status(again) == "new" and computed == []               # no memo for the old source: nothing computed
    F.record(root, "edited", "same")
    assert R.status(again) == "new" and computed == []
    F.record(root, old, "other")
    assert R.status(again) == "new"                                   # recorded, and it differs
    (root / F.MEMO).write_text("{not json")
    assert R.status(again) == "new"                                   # an unreadable memo verifies nothing
    (root / F.MEMO).unlink()
    F.record(root, old, "same")
    F.record(root, "edited", "same")
    monkeypatch.setattr(E, "hooks_source_hash", lambda tag: "h")
    tagged = dict(again, key={**again["key"], "hooks_source": "h"})
    assert R.status(tagged) == "new"                                  # more than the source differs
    R.ensure(again)                                                   # an accepted entry stays; a stale one ...
    R.ensure(tagged)
    assert json.loads((Path(task["path"]) / "key.json").read_text()) == tagged["key"]   # ... is trained again


def test_a_change_of_the_noise_alone_keeps_the_runs_without_it(trained, monkeypatch):
    """Fingerprints that differ in FedInit's noisy data alone: a run without the noise is kept, one with it is
    stale; a core that differs makes both stale; a fingerprint recorded before the split compares whole."""
    task, old = trained
    root = Path(task["path"]).parent
    F.record(root, old, "core" + F.NOISE + "noise1")
    now = {"fp": "core" + F.NOISE + "noise2"}
    monkeypatch.setattr(F, "training_fingerprint", lambda **kw: now["fp"])
    again = _edited(monkeypatch)
    noisy = dict(again, key={**again["key"], "config": {**again["key"]["config"], "het_noise": 0.2}})
    monkeypatch.setattr(R, "_UNFINGERPRINTED", set())
    assert R.same_behaviour(task["key"], again["key"], root)
    assert not R.same_behaviour({**task["key"], "config": noisy["key"]["config"]}, noisy["key"], root)
    assert F.same("a+noise:x", "a+noise:y", False) and not F.same("a+noise:x", "b+noise:x", False)
    assert not F.same("a+noise:x", "a+noise:y", True) and F.same("a+noise:x", "a+noise:x", True)
    assert not F.same("a", "a+noise:x", False) and F.same("a", "a", True)
    parts = {}
    got = fp(["fedavg"], parts=parts)                                   # the real one: core, then the noise's part
    assert got.count(F.NOISE) == 1 and got == fp(["fedavg"])


def test_code_that_cannot_be_fingerprinted_keeps_nothing(trained, monkeypatch, capsys):
    task, old = trained
    F.record(Path(task["path"]).parent, old, "same")
    calls = []

    def broken(**kw):
        calls.append(1)
        raise RuntimeError("boom")
    monkeypatch.setattr(F, "training_fingerprint", broken)
    monkeypatch.setattr(R, "_UNFINGERPRINTED", set())
    again = _edited(monkeypatch)
    assert R.status(again) == "new" and R.status(again) == "new" and len(calls) == 1     # tried once
    assert capsys.readouterr().err.count("warning: cannot fingerprint the training code (RuntimeError: boom)") == 1


def test_a_partial_entry_of_an_equivalent_source_resumes(computed, monkeypatch):
    task = R.tasks([(TINY, 0, "")], "quick")[0]
    kill_in_round(monkeypatch, task, 3)
    entry = Path(task["path"])
    F.record(entry.parent, task["key"]["source"], "same")
    again = _edited(monkeypatch)
    assert R.status(again) == "partial"
    assert R.ensure(again)["status"] == "done"
    assert json.loads((entry / "done.json").read_text())["resumed"] is True
    assert json.loads((entry / "key.json").read_text())["source"] == task["key"]["source"]


def test_the_common_path_computes_nothing(trained, computed):
    task, _ = trained
    assert R.status(task) == "done" and computed == []
    assert not (Path(task["path"]).parent / F.MEMO).exists()


def test_the_command_records_and_prints(tmp_path, computed, capsys):
    assert F.main(["--tier", "mnist", "--out", str(tmp_path / "o")]) == 0
    src = R.training_source_hash()
    assert F.read_memo(tmp_path / "o" / "runs" / "mnist") == {src: "same"}
    assert f"source {src} fingerprint same" in capsys.readouterr().out
    assert F.main(["--tier", "mnist", "--out", str(tmp_path / "o")]) == 0 and len(computed) == 1
    (tmp_path / "o" / "runs" / "quick").mkdir(parents=True)
    (tmp_path / "o" / "runs" / "quick" / F.MEMO).write_text("[1]")
    assert F.main(["--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "not a mapping" in err[0]
    with pytest.raises(SystemExit) as e:
        F.main(["--tier", "full"])
    assert e.value.code == 2


@pytest.mark.slow
def test_the_whole_battery_is_deterministic():
    parts = {}
    a = F.training_fingerprint(parts=parts)
    assert a == F.training_fingerprint()
    assert parts["cases"]["fedavg-loop"] == parts["cases"]["fedavg"]         # round-off only: same digest
    assert parts["cases"]["fedsmoo-resume"] == parts["cases"]["fedsmoo"]     # a resume is bit-identical
    assert len(set(parts["cases"].values())) == len(parts["cases"]) - 2
