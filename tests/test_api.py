"""The Python API for extensions: in-memory data in any float dtype (Dataset.from_tensors) and continuing a run
object (run.advance / train(cfg, run=run)) exactly as one longer run."""
from dataclasses import replace

import numpy as np
import pytest
import torch

from fedlab_analysis import checkpoint
from fedlab_analysis.data import Dataset, load_dataset
from fedlab_analysis.errors import UserError
from fedlab_analysis.probes.common import rebuild
from fedlab_analysis.trainers.loop import train


def digits_arrays():
    ds = load_dataset("digits")
    return ds.x_train, ds.y_train, ds.x_test, ds.y_test


# ---- custom data --------------------------------------------------------------------------------------------
def test_in_memory_digits_train_bit_identically_to_the_registered_name(tiny_cfg):
    xtr, ytr, xte, yte = digits_arrays()
    ds = Dataset.from_tensors(xtr.double().numpy(), ytr.numpy().astype(np.int32), xte.double().numpy(),
                              yte.numpy(), name="my-digits")
    assert ds.x_train.dtype == torch.float64 and ds.n_classes == 10 and ds.input_shape == (1, 8, 8)
    a = train(tiny_cfg(algo="scaffold"), dataset=ds)
    b = train(tiny_cfg(algo="scaffold"))
    assert a.cfg.dataset == "memory:my-digits"
    assert torch.equal(a.w, b.w) and torch.equal(a.state["c_i"], b.state["c_i"])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, torch.float16, torch.bfloat16, torch.float64])
def test_any_float_dtype_numpy_or_torch(tiny_cfg, dtype):
    xtr, ytr, xte, yte = digits_arrays()
    conv = (lambda x: x.numpy().astype(dtype)) if isinstance(dtype, type) else (lambda x: x.to(dtype))
    ds = Dataset.from_tensors(conv(xtr), ytr, conv(xte), yte)
    kept = torch.float64 if dtype in (np.float64, torch.float64) else torch.float32
    assert ds.x_train.dtype == kept
    assert torch.equal(ds.x_train, torch.as_tensor(conv(xtr)).to(kept))          # values as given, no rescaling
    run = train(tiny_cfg(rounds=1, dtype="float64"), dataset=ds)
    assert torch.equal(run.X, ds.x_train.double()) and torch.isfinite(run.w).all()


def test_memory_data_resumes_and_is_named_in_the_checkpoint(tmp_path, tiny_cfg):
    ds = Dataset.from_tensors(*digits_arrays(), name="d")
    train(tiny_cfg(rounds=2), tmp_path / "r", dataset=ds)
    full = train(tiny_cfg(rounds=3), dataset=ds)
    resumed = train(tiny_cfg(rounds=3), tmp_path / "r", resume=True, dataset=ds)
    assert torch.equal(resumed.w, full.w)
    assert checkpoint.load(tmp_path / "r")["config"]["dataset"] == "memory:d"
    with pytest.raises(UserError, match="memory:d.*dataset="):
        load_dataset("memory:d")
    b = rebuild(checkpoint.load(tmp_path / "r"), dataset=ds)          # probes take the same object again
    assert torch.equal(b.theta, resumed.w) and len(b.y) == len(torch.cat(resumed.idx).unique())


def _bad(**kw):
    x, y = torch.randn(6, 3), torch.tensor([0, 1, 2, 0, 1, 2])
    args = dict(x_train=x, y_train=y, x_test=x[:2], y_test=y[:2])
    args.update(kw)
    return args


@pytest.mark.parametrize("kw, needle", [
    (dict(x_train=torch.arange(18).reshape(6, 3)), "x_train must hold floats"),
    (dict(y_train=torch.zeros(6)), "integer class labels"),
    (dict(y_train=torch.tensor([0, 1, 2])), "y_train must be [N] = [6]"),
    (dict(x_test=torch.randn(2, 4)), "share dtype and sample shape"),
    (dict(x_test=torch.randn(2, 3).double()), "share dtype and sample shape"),
    (dict(x_train=torch.randn(6)), "x_train must be [N, *input_shape]"),
    (dict(x_train=torch.full((6, 3), float("nan"))), "x_train holds NaN"),
    (dict(x_test=torch.tensor([[0.0, float("inf"), 0.0]] * 2)), "x_test holds NaN or infinite"),
    (dict(y_test=torch.tensor([0, -1])), "labels must lie in [0, n_classes)"),
    (dict(n_classes=2), "labels must lie in [0, n_classes)"),
    (dict(augmentable=True), "augmentable=True needs images"),
    (dict(natural_clients=[[0, 1], [6]]), "natural_clients indices"),
    (dict(x_train=[["a"]]), "x_train must be a numpy array or torch tensor"),
])
def test_bad_custom_data_is_one_line(kw, needle):
    with pytest.raises(UserError) as e:
        Dataset.from_tensors(**_bad(**kw))
    msg = str(e.value)
    assert msg.startswith("Dataset.from_tensors:") and needle in msg and "\n" not in msg, msg


# ---- continuing a run object --------------------------------------------------------------------------------
def _same(a, b):
    assert a.t == b.t and torch.equal(a.w, b.w)
    assert (a.last_local is None and b.last_local is None) or torch.equal(a.last_local, b.last_local)
    assert a.state.keys() == b.state.keys() and all(torch.equal(a.state[k], b.state[k]) for k in a.state)


@pytest.mark.parametrize("algo", ["fedsmoo", "fedlesam"])
def test_advance_three_twice_equals_six_rounds(tiny_cfg, algo):
    six = train(tiny_cfg(algo=algo, rounds=6))
    run = train(tiny_cfg(algo=algo, rounds=3))
    assert run.advance(3) is run
    _same(run, six)
    assert run.cfg.rounds == 6 and run.last_row["round"] == 6
    again = train(tiny_cfg(algo=algo, rounds=3))
    _same(train(tiny_cfg(algo=algo, rounds=6), run=again), six)      # the train(cfg, run=run) form


def test_advance_keeps_writing_the_run_directory(tmp_path, tiny_cfg):
    run = train(tiny_cfg(algo="scaffold", rounds=3, eval_every=1), tmp_path / "r")
    run.advance(3)
    lines = (tmp_path / "r/metrics.jsonl").read_text().split("\n")[:-1]
    rows = [r["round"] for r in map(__import__("json").loads, lines)]
    assert rows == [1, 2, 3, 4, 5, 6]
    ck = checkpoint.load(tmp_path / "r")
    assert ck["round"] == 6 and ck["config"]["rounds"] == 6
    six = train(tiny_cfg(algo="scaffold", rounds=6))
    assert torch.equal(run.space.flatten(ck["global"]), six.w)


def test_continuing_with_other_settings_is_refused(tiny_cfg):
    run = train(tiny_cfg(rounds=1))
    with pytest.raises(UserError, match="differs from the run's in lr"):
        train(replace(run.cfg, rounds=2, lr=0.5), run=run)
    with pytest.raises(UserError, match="advance: rounds"):
        run.advance(0)
    assert run.t == 1
