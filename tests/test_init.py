"""--init CKPT and train(cfg, init=state_dict): the run starts bit-identically from the given weights; bad weights are
one line naming --init, exit 2, nothing written."""
from dataclasses import replace

import pytest
import torch

from fedlab_analysis import checkpoint, train as train_cli
from fedlab_analysis.config import RunConfig
from fedlab_analysis.errors import UserError
from fedlab_analysis.trainers.engine import Run
from fedlab_analysis.trainers.loop import train

FLAGS = ["--dataset", "digits", "--model", "mlp", "--model-kwargs", '{"widths": [8]}', "--clients", "4",
         "--local-steps", "2", "--batch-size", "16", "--eval-train-samples", "100", "--quiet"]


def named(run):
    return {k: v.clone() for k, v in run.space.unflatten(run.w).items()}


def test_start_is_bit_identical_from_a_checkpoint_and_a_state_dict(tmp_path, tiny_cfg):
    a = train(tiny_cfg(seed=1, rounds=2), tmp_path / "a")              # weights after two rounds of run a
    for src in (tmp_path / "a", tmp_path / "a/ckpt/last.pt"):
        assert torch.equal(Run(tiny_cfg(seed=2, init=str(src))).w, a.w)
    sd_file = tmp_path / "sd.pt"
    torch.save(named(a), sd_file)                                     # a plain state_dict file
    assert torch.equal(Run(tiny_cfg(seed=2, init=str(sd_file))).w, a.w)
    b = Run(tiny_cfg(seed=2, keep_clients=True), init=named(a))
    assert torch.equal(b.w, a.w) and torch.equal(b.last_local, a.w.expand(b.m, -1))


def test_a_run_from_its_own_initial_weights_follows_the_same_trajectory(tiny_cfg):
    """Exporting the seeded initialisation and starting from it loses nothing: the same rounds, bit for bit."""
    ref = Run(tiny_cfg(algo="scaffold"))
    b = Run(tiny_cfg(algo="scaffold"), init=named(ref))
    other = Run(tiny_cfg(algo="scaffold", seed=7))
    c = Run(tiny_cfg(algo="scaffold"), init=named(other))              # same data and draws, other start
    for _ in range(3):
        ref.round(), b.round(), c.round()
    assert torch.equal(ref.w, b.w)
    assert not torch.equal(ref.w, c.w)


def test_float64_run_from_float32_weights_is_exact(tiny_cfg):
    a = Run(tiny_cfg())
    b = Run(tiny_cfg(dtype="float64"), init=named(a))
    assert b.w.dtype == torch.float64 and torch.equal(b.w, a.w.double())


def test_cli_init_records_the_source_and_starts_there(tmp_path):
    assert train_cli.main([*FLAGS, "--rounds", "2", "--out", str(tmp_path / "a")]) == 0
    assert train_cli.main([*FLAGS, "--rounds", "1", "--seed", "3", "--init", str(tmp_path / "a"),
                           "--out", str(tmp_path / "b")]) == 0
    a, b = checkpoint.load(tmp_path / "a"), checkpoint.load(tmp_path / "b")
    assert b["config"]["init"] == str(tmp_path / "a")
    cfg = RunConfig.from_dict(b["config"])
    assert torch.equal(Run(cfg).w, Run(replace(cfg, init=None), init=a["global"]).w)
    assert train_cli.main(["--resume", str(tmp_path / "b"), "--rounds", "2", "--quiet"]) == 0   # resume ignores init


@pytest.mark.parametrize("make, needle", [
    (lambda p: None, "no file"),
    (lambda p: p.write_text("not torch"), "not a readable torch file"),
    (lambda p: torch.save([1, 2], p), "neither"),
    (lambda p: torch.save({"fc.weight": torch.zeros(3, 3)}, p), "lacks"),
    (lambda p: torch.save({**named(Run(RunConfig(model="mlp", model_kwargs={"widths": [8]}, clients=4))),
                           "extra.weight": torch.zeros(1)}, p), "unknown extra.weight"),
    (lambda p: torch.save({k: v[..., :1] for k, v in named(Run(RunConfig(
        model="mlp", model_kwargs={"widths": [8]}, clients=4))).items()}, p), "wrong shapes"),
    (lambda p: torch.save({k: torch.full_like(v, float("nan")) for k, v in named(Run(RunConfig(
        model="mlp", model_kwargs={"widths": [8]}, clients=4))).items()}, p), "non-finite"),
])
def test_bad_init_one_line_exit_2_nothing_written(tmp_path, capsys, make, needle):
    src = tmp_path / "w.pt"
    make(src)
    out = tmp_path / "run"
    code = train_cli.main([*FLAGS, "--rounds", "1", "--init", str(src), "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("error: --init") and needle in err, err
    assert not out.exists()


def test_init_given_twice_is_refused(tiny_cfg, tmp_path):
    a = Run(tiny_cfg())
    torch.save(named(a), tmp_path / "w.pt")
    with pytest.raises(UserError, match="--init: given twice"):
        Run(tiny_cfg(init=str(tmp_path / "w.pt")), init=named(a))
