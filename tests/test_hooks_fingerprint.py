"""paper_figures/hooks_fingerprint.py and the rule of runs.status that uses it: a cached tagged run whose key differs
from the task's in ``hooks_source`` (and/or ``source``) is current when the memo records one fingerprint for the old and
the new source of each.

The hooks fingerprint is deterministic and blind to the hooks' source hash; a hook that measures elsewhere (the
sharpness radius scaled by 1 + 1e-6, the drift subsample drawn with another seed) changes it. status() keeps a tagged
entry whose hooks fingerprint is equal, retrains one whose fingerprint differs or is missing (an old memo of training
entries only: the runs whose hooks_source is unchanged are still kept), and ensure() neither deletes nor retrains a
kept one.
"""
import json
import shutil
from pathlib import Path

import pytest

from paper_figures import common as C
from paper_figures import tiers as T_
from paper_figures import entry as E
from paper_figures import fingerprint as F
from paper_figures import hooks
from paper_figures import hooks_fingerprint as H
from paper_figures import runs as R

TINY = {"algo": "fedavg", "clients": 4, "rounds": 4, "eval_train_samples": 100}
TAG = "consensus"                                    # cheap hooks (one consensus row a round)
OLD_MEMO = {"9afbf6e3787c": "9905bcdd9f071990", "9d92411d5e03": "9905bcdd9f071990"}   # the mnist tier's, 26 Nov 2026


@pytest.fixture(autouse=True)
def _own_args(monkeypatch, tmp_path):
    monkeypatch.setattr(T_, "_ARGS", dict(T_._ARGS, out=tmp_path / "out"))
    monkeypatch.setattr(R, "_UNFINGERPRINTED", set())


# ---- the fingerprint -------------------------------------------------------------------------------------------
def test_deterministic_blind_to_the_source_hash_and_sees_a_scaled_radius(monkeypatch):
    parts = {}
    a = H.hooks_fingerprint("mnist", cases=["fedavg"], parts=parts)
    assert len(a) == 16 and int(a, 16) >= 0 and parts["fired"]["fedavg"]["sharpness:round"] >= 2
    monkeypatch.setattr(E, "hooks_source_hash", lambda tag: "another-string")
    assert H.hooks_fingerprint("mnist", cases=["fedavg"]) == a          # same code: same fingerprint
    monkeypatch.setattr(hooks, "SHARP_RHO", hooks.SHARP_RHO * (1 + 1e-6))   # mnist_hooks reads it at call time
    assert H.hooks_fingerprint("mnist", cases=["fedavg"]) != a          # a radius scaled by 1e-6 is seen


def test_another_drift_subsample_changes_it(monkeypatch):
    from fedlab_analysis.probes import drift
    parts = {}
    a = H.hooks_fingerprint("mnist", cases=["fedavg"], parts=parts)
    assert parts["fired"]["fedavg"]["drift:round"] >= 2                # the round's estimators read the subsample
    make = drift.make_hook
    monkeypatch.setattr(drift, "make_hook", lambda *a, **kw: make(*a, **{**kw, "seed": kw.get("seed", 0) + 1}))
    assert H.hooks_fingerprint("mnist", cases=["fedavg"]) != a


def test_bad_tags_and_cases_are_refused():
    with pytest.raises(ValueError, match="not registered"):
        H.hooks_fingerprint("nope")
    with pytest.raises(ValueError, match="fedfoo"):
        H.hooks_fingerprint("mnist", cases=["fedfoo"])


PROBES = {"mnist": {"consensus", "drift", "sharpness"}, "consensus-every-step": {"consensus"},
          "consensus-rounds": {"consensus"}, "consensus": {"consensus"}, "drift,sharpness-ascent5-rho0.1":
          {"drift", "sharpness"}}


@pytest.mark.slow
@pytest.mark.parametrize("tag", sorted(R.HOOKS))
def test_every_hook_fires_twice_in_the_whole_battery_and_it_is_deterministic(tag):
    parts = {}
    a = H.hooks_fingerprint(tag, parts=parts)
    assert a == H.hooks_fingerprint(tag)
    assert len(set(parts["cases"].values())) == len(H.CASES)
    for case, fired in parts["fired"].items():
        assert fired and min(fired.values()) >= 2, (case, fired)
        assert {k.split(":")[0] for k in fired} == PROBES[tag], (case, fired)
    if "drift" in PROBES[tag]:                           # the perturbation drift at local steps: SAM-type methods
        assert all(parts["fired"][c]["drift:step"] >= 2 for c in ("fedsam", "fedlesam", "fedsmoo"))
    assert any(parts["matched"].values())               # the matched-fit checkpoints are in the hash


# ---- the memo and runs.status ----------------------------------------------------------------------------------
def _mtimes(root: Path) -> dict:
    return {str(p): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def trained():
    """A done TINY run carrying the hooks of TAG; returns its task."""
    task = R.tasks([(TINY, 0, TAG)], "quick")[0]
    assert R.ensure(task)["status"] == "done" and task["key"]["hooks_source"]
    return task


@pytest.fixture
def computed(monkeypatch):
    """Both fingerprints replaced by counters returning "same" (the real ones are tested above)."""
    calls = {"training": [], "hooks": []}
    monkeypatch.setattr(F, "training_fingerprint", lambda **kw: calls["training"].append(kw) or "same")
    monkeypatch.setattr(H, "hooks_fingerprint", lambda tag, **kw: calls["hooks"].append(tag) or "same")
    return calls


def _edited(monkeypatch, hooks_source="edited-h", source=None, tag=TAG):
    monkeypatch.setattr(E, "hooks_source_hash", lambda t: hooks_source)
    if source is not None:
        monkeypatch.setattr(E, "training_source_hash", lambda: source)
    return R.tasks([(TINY, 0, tag)], "quick")[0]


def test_a_hooks_only_change_with_an_equal_fingerprint_keeps_the_run(trained, computed, monkeypatch):
    entry, root = Path(trained["path"]), Path(trained["path"]).parent
    old = trained["key"]["hooks_source"]
    F.record(root, F.hooks_key(TAG, old), "same")
    before = _mtimes(entry)
    again = _edited(monkeypatch)
    assert again["path"] == trained["path"] and again["key"] == {**trained["key"], "hooks_source": "edited-h"}
    assert R.status(again) == "done" and computed == {"training": [], "hooks": [TAG]}   # the new one, lazily ...
    assert F.read_memo(root) == {F.hooks_key(TAG, old): "same", F.hooks_key(TAG, "edited-h"): "same"}
    assert R.status(again) == "done" and computed["hooks"] == [TAG]                   # ... once
    assert R.ensure(again)["status"] == "done" and R.train_pool([again], workers=1, quiet=True) == []
    assert _mtimes(entry) == before                                   # nothing rewritten, key.json included
    assert json.loads((entry / "key.json").read_text())["hooks_source"] == old


def test_a_change_of_both_sources_needs_both_fingerprints_equal(trained, computed, monkeypatch):
    root = Path(trained["path"]).parent
    F.record(root, F.hooks_key(TAG, trained["key"]["hooks_source"]), "same")
    again = _edited(monkeypatch, source="edited-s")
    assert R.status(again) == "new" and computed == {"training": [], "hooks": []}   # no training entry for the old
    F.record(root, trained["key"]["source"], "other")
    assert R.status(again) == "new" and computed == {"training": [{"progress": True}], "hooks": []}   # differs:
    F.record(root, trained["key"]["source"], "same")                                  # hooks not computed
    assert R.status(again) == "done" and computed["hooks"] == [TAG]


def test_a_different_hooks_fingerprint_retrains(trained, computed, monkeypatch):
    root = Path(trained["path"]).parent
    F.record(root, F.hooks_key(TAG, trained["key"]["hooks_source"]), "other")
    again = _edited(monkeypatch)
    assert R.status(again) == "new" and computed["hooks"] == [TAG]
    assert R.ensure(again)["status"] == "done"
    assert json.loads((Path(trained["path"]) / "key.json").read_text()) == again["key"]   # trained again


def test_hooks_that_cannot_be_fingerprinted_keep_nothing(trained, monkeypatch, capsys):
    F.record(Path(trained["path"]).parent, F.hooks_key(TAG, trained["key"]["hooks_source"]), "same")
    calls = []

    def broken(tag, **kw):
        calls.append(tag)
        raise RuntimeError("boom")
    monkeypatch.setattr(H, "hooks_fingerprint", broken)
    again = _edited(monkeypatch)
    assert R.status(again) == "new" and R.status(again) == "new" and calls == [TAG]      # tried once
    assert capsys.readouterr().err.count(f"warning: cannot fingerprint the hooks of {TAG!r} (RuntimeError: boom)") == 1


def test_an_old_memo_without_hooks_entries(trained, computed, monkeypatch):
    """The mnist tier's memo as it is today (training entries only, two sources with one fingerprint) reads as
    before: it keeps a run whose training source changed to an equivalent one and whose hooks_source did not, and
    retrains one whose hooks_source changed (it cannot be verified), computing and recording nothing."""
    entry, root = Path(trained["path"]), Path(trained["path"]).parent
    (root / F.MEMO).write_text(json.dumps(OLD_MEMO, indent=1, sort_keys=True) + "\n")
    assert F.read_memo(root) == OLD_MEMO
    (entry / "key.json").write_text(json.dumps({**trained["key"], "source": "9afbf6e3787c"}))   # trained by old code
    monkeypatch.setattr(E, "training_source_hash", lambda: "9d92411d5e03")
    same_hooks = R.tasks([(TINY, 0, TAG)], "quick")[0]
    assert R.status(same_hooks) == "done" and computed == {"training": [], "hooks": []}
    changed = _edited(monkeypatch)
    assert R.status(changed) == "new" and computed == {"training": [], "hooks": []}
    assert F.read_memo(root) == OLD_MEMO


def test_a_tag_change_or_a_lost_hooks_source_is_never_equal(trained, computed, monkeypatch):
    root = Path(trained["path"]).parent
    F.record(root, F.hooks_key(TAG, trained["key"]["hooks_source"]), "same")
    F.record(root, F.hooks_key("mnist", "edited-h"), "same")
    assert not R.same_behaviour(trained["key"], {**trained["key"], "tag": "mnist", "hooks_source": "edited-h"}, root)
    untagged = {k: v for k, v in trained["key"].items() if k != "hooks_source"}
    assert not R.same_behaviour(trained["key"], untagged, root) and not R.same_behaviour(untagged, trained["key"], root)
    assert computed == {"training": [], "hooks": []}


def test_the_command_records_the_hooks_of_the_cached_tags(trained, computed, capsys):
    out = C._ARGS["out"]
    (out / "runs" / "mnist").mkdir(parents=True)
    shutil.copytree(trained["path"], out / "runs" / "mnist" / Path(trained["path"]).name)
    assert F.main(["--tier", "mnist", "--out", str(out)]) == 0
    h = R.hooks_source_hash(TAG)
    assert F.read_memo(out / "runs" / "mnist") == {R.training_source_hash(): "same", F.hooks_key(TAG, h): "same"}
    assert f"hooks {TAG} source {h} fingerprint same" in capsys.readouterr().out
    assert F.main(["--tier", "mnist", "--out", str(out)]) == 0 and computed["hooks"] == [TAG]   # recorded once


@pytest.mark.slow
def test_real_fingerprints_keep_an_unchanged_hook_and_retrain_a_scaled_radius(monkeypatch):
    """End to end with the real battery (one case): a hooks-only edit that changes no number keeps a tagged run; one
    that scales the sharpness radius retrains it."""
    monkeypatch.setattr(H, "CASES", {"fedsam": H.CASES["fedsam"]})
    task = R.tasks([(TINY, 0, "mnist")], "quick")[0]
    assert R.ensure(task)["status"] == "done"
    root = Path(task["path"]).parent
    F.recorded_hooks(root, "mnist", task["key"]["hooks_source"])             # recorded while that code is out
    assert R.status(_edited(monkeypatch, "edited-h", tag="mnist")) == "done"
    monkeypatch.setattr(hooks, "SHARP_RHO", hooks.SHARP_RHO * (1 + 1e-6))
    scaled = _edited(monkeypatch, "edited-rho", tag="mnist")
    assert R.status(scaled) == "new"
    memo = F.read_memo(root)
    assert memo[F.hooks_key("mnist", "edited-h")] == memo[F.hooks_key("mnist", task["key"]["hooks_source"])] != \
        memo[F.hooks_key("mnist", "edited-rho")]
