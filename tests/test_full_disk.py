"""A full disk at any write: one ``error:`` line, exit 2, the previous checkpoint stays the run's last.pt (and
resumes bit-identically), no empty or partial file left behind. The disk is a real small tmpfs where the machine
allows one; elsewhere ENOSPC is injected at the checkpoint's write."""
import errno
import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import fill
from fedlab_analysis import checkpoint, probe, train as train_cli
from test_guard import call

BASE = ["--dataset", "digits", "--model", "logreg", "--clients", "4", "--local-steps", "1", "--quiet"]


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    return lines[0]


def same_weights(a, b):
    a, b = checkpoint.load(a), checkpoint.load(b)
    assert a["round"] == b["round"]
    assert all(torch.equal(a["global"][k], b["global"][k]) for k in a["global"])


def test_a_disk_that_fills_while_training_is_one_line_and_last_pt_resumes(tmp_path, small_disk):
    disk = small_disk(4096)
    out = disk / "r"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    args = [*BASE, "--ckpt-every", "1", "--ckpt-keep", "last", "--eval-every", "1000"]
    proc = subprocess.Popen([sys.executable, "-m", "fedlab_analysis.train", *args, "--rounds", "100000",
                             "--out", str(out)], env=env, stderr=subprocess.PIPE, text=True)
    try:
        while not (out / "ckpt" / "last.pt").exists() and proc.poll() is None:
            time.sleep(0.1)
        time.sleep(0.3)
        fill(disk)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 2, err
    line = one_error_line(err)
    assert "no space left on device" in line.lower() and "last.pt" in line, line
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    done = checkpoint.load(out)["round"]             # the previous good checkpoint
    assert done >= 1
    (disk / "filler").unlink()
    assert train_cli.main(["--resume", str(out), "--rounds", str(done + 2)]) == 0
    assert train_cli.main([*args, "--rounds", str(done + 2), "--out", str(tmp_path / "ref")]) == 0
    same_weights(out, tmp_path / "ref")


class _FullDisk(io.FileIO):
    """A file on a disk with ``room`` bytes left: the next write beyond it fails with ENOSPC, as the kernel's does."""
    room = 1000

    def write(self, b):
        if self.tell() + len(b) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().write(b)


def test_enospc_injected_at_the_checkpoint_write_is_one_line(tmp_path, monkeypatch, capsys):
    """Where no tmpfs can be mounted this is the proof: torch.save turns the OSError into a RuntimeError, which the
    checkpoint writer turns back into one line."""
    out = tmp_path / "r"
    args = [*BASE, "--ckpt-every", "1", "--ckpt-keep", "last"]
    assert train_cli.main([*args, "--rounds", "2", "--out", str(out)]) == 0
    before = (out / "ckpt" / "last.pt").read_bytes()
    monkeypatch.setattr(checkpoint, "open", lambda p, mode: _FullDisk(p, mode.replace("b", "")), raising=False)
    capsys.readouterr()
    assert train_cli.main(["--resume", str(out), "--rounds", "4"]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "no space left on device" in line.lower() and "last.pt" in line, line
    assert (out / "ckpt" / "last.pt").read_bytes() == before
    assert not list(out.rglob("*.tmp"))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("fd") / "run"
    assert train_cli.main([*BASE, "--rounds", "1", "--out", str(out)]) == 0
    return out


def test_probe_json_on_a_full_disk_leaves_no_file(run, small_disk):
    disk = small_disk(256)
    fill(disk)
    code, err, _ = call(probe.main, ["hessian", run, "--top-k", "1", "--max-iter", "5", "--samples", "50",
                                     "--quiet", "--json", disk / "h.json"])
    assert code == 2, err
    assert "no space left on device" in one_error_line(err).lower()
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="no /proc")
def test_landscape_unwritable_h5_refused_before_the_plane_is_written(run, tmp_path, unwritable_dir):
    """A read-only mount (or a folder without write permission) and /proc, where root's permission bits say yes."""
    plane = tmp_path / "plane.pt"
    cases = [(bad, argv) for bad in (unwritable_dir, Path("/proc"))
             for argv in (["--save-directions", plane, "--h5", bad / "s.h5"], ["--save-directions", bad / "p.pt"])]
    for bad, argv in cases:
        code, err, _ = call(probe.main, ["landscape", run, "--grid", "3", "--samples", "50", "--quiet", *argv])
        assert code == 2, err
        line = one_error_line(err)
        assert str(bad) in line and "written" in line, line
        assert not plane.exists()
