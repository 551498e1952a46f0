"""A sweep holds the line: probe lines are checked against this machine before anything trains (a device it lacks,
an output it cannot write, an input that is missing, a NUL byte), a cell that still fails at run time is one line in
its failed.json and on stderr (also with --quiet) with the count at the end and a non-zero exit, and a sweep killed
with -9 leaves no worker process behind."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from fedlab_analysis import sweep
from test_guard import call, refused

BASE = {"dataset": "digits", "model": "logreg", "clients": 2, "rounds": 1, "local_steps": 1}


def write(tmp_path, probes=(), base=None, grid=None):
    spec = {"base": {**BASE, **(base or {})}, "grid": grid or {"seed": [0]}, "probes": list(probes)}
    (tmp_path / "s.yaml").write_text(json.dumps(spec))
    return tmp_path / "s.yaml"


@pytest.mark.parametrize("line, base, needle", [
    ("hessian --top-k 1 --device cuda", {}, "--device"),
    ("landscape --grid 3 --h5 /proc/fedlab/s.h5", {}, "--h5"),
    ("landscape --grid 3 --h5 /proc/s.h5", {}, "--h5"),
    ("landscape --grid 3 --save-directions /proc/p.pt", {}, "--save-directions"),
    ("landscape --grid 3 --directions missing.pt", {}, "--directions"),
    ("hessian --top-k 1 --data-dir a\0b", {}, "NUL"),
    ("hessian --top-k 1", {"data_dir": "a\0b"}, "NUL"),
    ("hessian --top-k 1", {"device": "cuda"}, "device"),
])
def test_probe_lines_are_checked_against_the_machine_before_training(tmp_path, monkeypatch, line, base, needle):
    if "cuda" in line + str(base) and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    refused(sweep.main, [write(tmp_path, [line], base), "--out", tmp_path / "out", "--workers", "1"], needle,
            tmp_path, monkeypatch)


def test_a_cell_failing_at_run_time_is_one_line_counted_and_exits_non_zero(tmp_path, monkeypatch):
    """landscape --plane pca needs four checkpoints of the run: known only once the run has trained."""
    monkeypatch.chdir(tmp_path)
    s = write(tmp_path, ["landscape --grid 3 --plane pca"], grid={"seed": [0, 1]})
    code, err, out = call(sweep.main, [s, "--out", tmp_path / "out", "--workers", "1", "--quiet"])
    lines = err.strip().splitlines()
    assert code == 1, (code, err)
    assert len(lines) == 3 and all("--plane pca needs" in x for x in lines[:2]), err
    assert lines[2].startswith("error: 2 of 2 runs failed"), err
    for d in (tmp_path / "out").iterdir():
        if d.is_dir():
            rec = json.loads((d / "failed.json").read_text())
            assert "\n" not in rec["error"] and "--plane pca needs" in rec["error"]


def children(pid: int) -> list[int]:
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as fh:
                    if int(fh.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(p))
            except (OSError, IndexError, ValueError):
                pass
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_killed_sweep_leaves_no_worker_behind(tmp_path):
    s = write(tmp_path, base={"rounds": 100000, "eval_every": 100000}, grid={"seed": [0, 1, 2]})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    main = subprocess.Popen([sys.executable, "-m", "fedlab_analysis.sweep", str(s), "--out", str(tmp_path / "o"),
                             "--workers", "2", "--quiet"], env=env, stderr=subprocess.DEVNULL)
    workers = []
    try:
        deadline = time.time() + 120
        while time.time() < deadline and len(list((tmp_path / "o").glob("*/config.json"))) < 2:
            time.sleep(0.2)
        workers = [w for c in children(main.pid) for w in [c, *children(c)]]
        assert workers, "no worker started"
        main.send_signal(signal.SIGKILL)
        main.wait()
        deadline = time.time() + 20
        while time.time() < deadline and any(alive(w) for w in workers):
            time.sleep(0.2)
        assert not [w for w in workers if alive(w)], "workers outlived the sweep"
    finally:
        main.kill()
        for w in workers:                       # the processes this test started, by id
            if alive(w):
                os.kill(w, signal.SIGKILL)
