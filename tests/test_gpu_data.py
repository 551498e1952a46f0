"""benchmarks/gpu_data.py: the cached data sets travel compressed to the GPU machine and come back as the same
uncompressed cache files; a packed copy whose arrays changed is refused in one line."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from fedlab_analysis.data import cache

spec = importlib.util.spec_from_file_location("gpu_data", Path(__file__).parents[1] / "benchmarks" / "gpu_data.py")
gpu_data = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_data)


def arrays(seed=0):
    g = np.random.default_rng(seed)
    return {"x_train": g.integers(0, 256, (50, 28, 28), dtype=np.uint8), "y_train": g.integers(0, 10, 50, np.uint8),
            "x_test": g.integers(0, 256, (20, 28, 28), dtype=np.uint8), "y_test": g.integers(0, 10, 20, np.uint8)}


@pytest.fixture
def packed(tmp_path, monkeypatch):
    here, there = tmp_path / "here", tmp_path / "there"
    monkeypatch.setenv(cache.ENV, str(here))
    original = cache.write_npz(cache.folder("data") / "mnist.npz", arrays())
    monkeypatch.chdir(tmp_path)
    gpu_data.pack(["mnist"])
    monkeypatch.setenv(cache.ENV, str(there))
    return original, there / "mnist.npz"


def test_unpack_writes_the_same_cache_file(packed):
    original, unpacked = packed
    assert Path("data/mnist.z.npz").stat().st_size < original.stat().st_size     # it travels smaller
    gpu_data.unpack()
    assert unpacked.read_bytes() == original.read_bytes()


def test_a_changed_array_is_refused_and_nothing_is_written(packed):
    _, unpacked = packed
    a = arrays()
    a["y_test"][0] = (a["y_test"][0] + 1) % 10
    np.savez_compressed("data/mnist.z.npz", **a)
    with pytest.raises(SystemExit, match="does not hold the arrays packed"):
        gpu_data.unpack()
    assert not unpacked.exists()
