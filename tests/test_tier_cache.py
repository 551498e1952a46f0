"""The tier cache heals: each file of an entry (key.json, done.json, run/config.json, run/metrics.jsonl, a matched-fit
checkpoint, run/ckpt/last.pt) made empty, garbage, a list or a folder (and a checkpoint cut short) is named in one
line and the entry is trained again; ``paper_figures.tier --plan`` names it with the reason and trains nothing.
The scripts and the tier runner are under the commands' guard: fedals_table2_comm --out to a place nothing can be
written is one line, exit 2."""
import shutil
from pathlib import Path

import pytest
import torch

from paper_figures import common as C
from paper_figures import tiers as T_
from paper_figures import runs as R
from paper_figures import tier as T
from test_guard import call

TINY = {"algo": "fedavg", "clients": 4, "rounds": 8, "eval_every": 1, "eval_train_samples": 100}
FILES = ("key.json", "done.json", "run/config.json", "run/metrics.jsonl", "matched", "run/ckpt/last.pt")


def damage(path: Path, how: str) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()
    if how == "folder":
        path.mkdir()
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "garbage":
        path.write_bytes(b"\x00\xffnot this file at all\n")
    elif how == "list":
        if path.suffix == ".pt":
            torch.save([1, 2], path)
        else:
            path.write_text("[1, 2]\n")


CASES = [(f, how) for f in FILES for how in ("empty", "garbage", "list", "folder")] + \
        [("matched", "truncated"), ("run/ckpt/last.pt", "truncated")]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    base = tmp_path_factory.mktemp("tier")
    args = dict(C._ARGS)
    C._ARGS.update(out=base / "out")
    try:
        task = R.tasks([(TINY, 0, "")], "quick")[0]
        assert R.ensure(task)["status"] == "done"
        matched = sorted((Path(task["path"]) / "matched").glob("loss_*.pt"))
        assert matched, "digits FedAvg reaches train loss 0.3 in 8 rounds"
    finally:
        C._ARGS.clear()
        C._ARGS.update(args)
    return base / "out", Path(task["path"]).name, matched[0].name


@pytest.fixture
def entry(trained, tmp_path, monkeypatch):
    """A fresh copy of the trained cache, with --out pointing at it; returns (task, entry path, matched name)."""
    src, name, matched = trained
    shutil.copytree(src, tmp_path / "out")
    monkeypatch.setattr(T_, "_ARGS", dict(T_._ARGS, out=tmp_path / "out"))
    task = R.tasks([(TINY, 0, "")], "quick")[0]
    assert Path(task["path"]).name == name
    return task, Path(task["path"]), matched


@pytest.mark.parametrize("file, how", CASES)
def test_a_damaged_entry_is_named_and_trained_again(entry, file, how, capsys, monkeypatch):
    task, path, matched = entry
    target = path / (f"matched/{matched}" if file == "matched" else file)
    if how == "truncated":
        target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])
    else:
        damage(target, how)
    capsys.readouterr()
    monkeypatch.setattr(T, "collect", lambda tier, seeds, only=None: ([task], {"tiny": [task["path"]]}))
    assert T.main(["--plan", "--out", str(C._ARGS["out"])]) == 0     # named with its reason, nothing trained
    out = capsys.readouterr().out
    assert f"damaged: {path}" in out and file.split("/")[-1] in out.split(f"damaged: {path}")[1].splitlines()[0], out
    assert "0 of 1 runs done" in out
    res = C.train_seeds(TINY, [0], tier="quick")               # healed: trained again from scratch
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"warning: damaged cache entry {path}") and "Traceback" not in err[0]
    assert R.status(task) == "done" and res[0]["matched"] and len(res[0]["rows"]) == TINY["rounds"]


def test_fedals_table2_comm_out_unwritable_is_one_line(tmp_path):
    from paper_figures import fedals_table2_comm
    (tmp_path / "afile").write_text("x")
    for out in (tmp_path / "afile", Path("/proc/fedlab")):
        code, err, _ = call(fedals_table2_comm.main, ["--out", out])
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: --out"), err


def test_a_defect_in_a_script_is_one_line_and_debug_shows_the_traceback(tmp_path, monkeypatch):
    from paper_figures import fedals_table2_comm
    monkeypatch.setattr(fedals_table2_comm, "compute", lambda: 1 / 0)
    code, err, _ = call(fedals_table2_comm.main, ["--out", tmp_path])
    assert code == 1 and len(err.strip().splitlines()) == 1 and "ZeroDivisionError" in err and "--debug" in err
    code, err, _ = call(fedals_table2_comm.main, ["--out", tmp_path, "--debug"])
    assert code == 1 and "Traceback" in err


@pytest.mark.parametrize("module, patch, argv", [("paper_figures.tier", "collect", ["--plan"]),
                                                 ("paper_figures.compare_tiers", "compare", []),
                                                 ("paper_figures.fingerprint", "recorded", [])])
def test_every_paper_figures_entry_point_is_under_the_guard(module, patch, argv, monkeypatch, tmp_path):
    import importlib
    mod = importlib.import_module(module)
    monkeypatch.setattr(mod, patch, lambda *a, **k: 1 / 0)
    code, err, _ = call(mod.main, [*argv, *(["--out", tmp_path] if module != "paper_figures.compare_tiers" else [])])
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and "ZeroDivisionError" in lines[0] and module in lines[0], err
