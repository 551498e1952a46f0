"""The run ledger outlives the machine: a done run's record (key, done, config, metrics) is written once, in the same
bytes every time; a fresh cache gets the entry back from it with the same rows and no training; a script that reads
weights trains it again, to the same numbers; a record made by other code is not trusted without a fingerprint; the
tier runner asks for weights where one of the scripts sharing a run reads them. Real training on digits (the quick
tier, made a ledger tier here)."""
import gzip
import json
import shutil
from pathlib import Path

import pytest

from fedlab_analysis import provenance
from paper_figures import common as C
from paper_figures import ledger as L
from paper_figures import runs as R
from paper_figures import tier as T
from paper_figures import tiers as T_
from test_guard import call

TINY = {"algo": "fedavg", "clients": 4, "rounds": 6, "eval_every": 1, "eval_train_samples": 100}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """--out at a new folder, the quick tier kept in the ledger; one run trained: (its task, its first result)."""
    monkeypatch.setattr(T_, "_ARGS", dict(T_._ARGS, out=tmp_path / "out"))
    monkeypatch.setattr(L, "TIERS", ("quick",))
    first = C.train_seeds(TINY, [0], tier="quick")[0]
    return R.tasks([(TINY, 0, "")], "quick")[0], first


def fresh_machine(task):
    """What a new machine has: the ledger (in git), no run cache."""
    shutil.rmtree(Path(task["path"]).parent)


def test_a_done_run_is_recorded_once_in_stable_bytes(cache):
    task, _ = cache
    rec = L.folder("quick") / f"{Path(task['path']).name}.json.gz"
    assert rec.exists(), "ensure_pack keeps the record of a run it finished"
    body = json.loads(gzip.decompress(rec.read_bytes()))
    assert set(body) == {*L.FILES, L.MATCHED} and "ckpt" not in str(body.keys())   # the matched-fit rounds, no file
    assert json.loads(body["done.json"])["machine"] == provenance.machine("cpu")     # float32 differs between CPUs
    was = rec.read_bytes()
    rec.unlink()
    assert L.keep(task["path"]) == rec and rec.read_bytes() == was      # gzip without a time stamp: same bytes


def test_a_fresh_machine_gets_the_run_back_without_training(cache):
    task, first = cache
    fresh_machine(task)
    assert R.status(task) == "new"
    again = C.train_seeds(TINY, [0], tier="quick")[0]                  # restored by runs.tasks, nothing trained
    entry = Path(task["path"])
    assert L.light(entry) and not (entry / "run" / "ckpt").exists() and not (entry / "matched" / "loss_0.3.pt").exists()
    assert again["rows"] == first["rows"] and again["test_acc"] == first["test_acc"] and again["id"] == first["id"]


def test_a_script_that_reads_weights_trains_a_light_run_again_to_the_same_numbers(cache):
    task, first = cache
    fresh_machine(task)
    R.tasks([(TINY, 0, "")], "quick")                                   # restored, light
    assert R.status({**task, "weights": True}) == "new" and R.status(task) == "done"
    again = C.train_seeds(TINY, [0], tier="quick", weights=True)[0]
    entry = Path(task["path"])
    assert not L.light(entry) and (entry / "run" / "ckpt" / "last.pt").exists() and again["matched"]
    strip = lambda rows: [{k: v for k, v in r.items() if k != "seconds"} for r in rows]   # noqa: E731
    assert strip(again["rows"]) == strip(first["rows"])


def test_a_record_from_other_code_is_not_trusted_without_its_fingerprint_and_is_replaced(cache):
    task, _ = cache
    rec = L.folder("quick") / f"{Path(task['path']).name}.json.gz"
    good = rec.read_bytes()
    body = json.loads(gzip.decompress(good))
    body["key.json"] = json.dumps({**json.loads(body["key.json"]), "source": "0" * 12})
    rec.write_bytes(gzip.compress(json.dumps(body).encode()))
    fresh_machine(task)
    R.tasks([(TINY, 0, "")], "quick")
    assert L.light(task["path"]) and R.status(task) == "new"           # no memo for that source: trained again
    assert L.keep(task["path"]) and rec.read_bytes() != good           # a light entry writes no record
    C.train_seeds(TINY, [0], tier="quick")
    assert json.loads(gzip.decompress(rec.read_bytes()))["key.json"] == good_key(good)    # the new key's record


def good_key(record: bytes) -> str:
    return json.loads(gzip.decompress(record))["key.json"]


def test_no_ledger_outside_the_tiers_it_keeps_or_a_caller_s_own_cache(cache, tmp_path, monkeypatch):
    task, _ = cache
    assert L.keep(tmp_path / "elsewhere" / "quick" / Path(task["path"]).name) is None
    monkeypatch.setattr(L, "TIERS", ("mnist",))
    fresh_machine(task)
    R.tasks([(TINY, 0, "")], "quick")
    assert not Path(task["path"]).exists()


def test_the_fingerprint_memo_travels_with_the_ledger(cache):
    task, _ = cache
    root = Path(task["path"]).parent
    (root / "fingerprints.json").write_text(json.dumps({"abc": "fp1"}))
    L.keep(task["path"])
    fresh_machine(task)
    R.tasks([(TINY, 0, "")], "quick")
    assert json.loads((root / "fingerprints.json").read_text()) == {"abc": "fp1"}


def test_the_tier_runner_asks_for_weights_where_a_sharing_script_reads_them():
    tasks, _ = T.collect("quick", 3, ["fedcm_table3_alpha", "fedcm_dispersion"])
    w = {t["config"]["alpha"]: t["weights"] for t in tasks}
    assert w[0.1] is True and not any(v for a, v in w.items() if a != 0.1), w
    alone, _ = T.collect("quick", 3, ["fedcm_table3_alpha"])
    assert not any(t["weights"] for t in alone)


def test_the_ledger_command_records_a_cache_and_refuses_a_tier_it_does_not_keep(cache, tmp_path):
    task, _ = cache
    shutil.rmtree(L.folder("quick"))
    code, err, out = call(L.main, ["--tier", "quick", "--out", tmp_path / "out"])
    assert code == 0 and out.startswith("1 done runs of the quick tier recorded"), (err, out)
    assert (L.folder("quick") / f"{Path(task['path']).name}.json.gz").exists()
    code, err, _ = call(L.main, ["--tier", "digits", "--out", tmp_path / "out"])
    assert code == 2 and len(err.strip().splitlines()) == 1 and "invalid choice" in err


def test_a_pack_s_run_is_done_and_recorded_as_it_ends_not_when_the_pack_does(cache, monkeypatch):
    """On a CPU a pack's runs often train one after the other, so a session cut off mid-pack must keep the runs that
    ended: the short run's done.json and record exist while the long run still trains."""
    from paper_figures import entry as E
    short, long_ = ({**TINY, "rounds": 2}, 5), ({**TINY, "rounds": 6}, 6)
    ts = R.tasks([(short[0], short[1], ""), (long_[0], long_[1], "")], "quick")
    rec = L.folder("quick") / f"{Path(ts[0]['path']).name}.json.gz"
    seen = []

    def watch(event, run, step, x):            # in the long run: is the short one done and recorded yet?
        if event == "round":
            seen.append((Path(ts[0]["path"]) / "done.json").exists() and rec.exists())

    monkeypatch.setattr(E, "hooks_for", lambda tag, seed: [watch] if seed == long_[1] else [])
    assert [r["status"] for r in R.ensure_pack(ts)] == ["done", "done"]
    assert len(seen) == 6 and seen[-1], seen
    assert json.loads((Path(ts[1]["path"]) / "done.json").read_text())["diverged"] is None
