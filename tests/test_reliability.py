"""What happens when a run diverges, is killed, meets a second writer, or reads damaged files."""
import gzip
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from fedlab_analysis import algos, checkpoint, train as train_cli
from fedlab_analysis.config import RunConfig
from fedlab_analysis.data import load_dataset
from fedlab_analysis.errors import EXIT_DIVERGED, DataError, Diverged, UserError
from fedlab_analysis.trainers.engine import Run
from fedlab_analysis.trainers.loop import train

BASE = ["--dataset", "digits", "--model", "logreg", "--clients", "4", "--local-steps", "1", "--quiet"]


def rows(out):
    return [json.loads(s) for s in (out / "metrics.jsonl").read_text().splitlines()]


# ---- divergence ---------------------------------------------------------------------------------------------
def test_divergence_stops_names_the_round_and_keeps_the_last_finite_checkpoint(tmp_path, capsys):
    out = tmp_path / "r"
    code = train_cli.main([*BASE, "--rounds", "6", "--lr", "1e30", "--ckpt-every", "1", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == EXIT_DIVERGED == 3
    assert len(err) == 1 and err[0].startswith("error: training diverged at round 2:"), err
    assert "last.pt keeps round 1" in err[0]
    r = rows(out)
    assert [x["round"] for x in r] == [1, 2] and "diverged" in r[1] and "diverged" not in r[0]
    ck = checkpoint.load(out)                        # finite, loadable: the round before the divergence
    assert ck["round"] == 1
    assert sorted(p.name for p in (out / "ckpt").iterdir()) == ["last.pt", "round_0001.pt"]


def test_divergence_continue_marks_the_round_and_runs_on(tmp_path, tiny_cfg):
    with pytest.raises(Diverged) as e:
        train(tiny_cfg(lr=1e30, rounds=4), tmp_path / "stop")
    assert f"round {e.value.round}:" in str(e.value) and "no checkpoint was saved" in str(e.value)
    assert not (tmp_path / "stop/ckpt/last.pt").exists()          # nothing finite to keep: no NaN checkpoint
    run = train(tiny_cfg(lr=1e30, rounds=4, on_divergence="continue"), tmp_path / "go")
    assert run.t == 4
    marked = [x["round"] for x in rows(tmp_path / "go") if "diverged" in x]
    assert marked == [e.value.round]
    run.advance(2)                                                # continued in memory: no second mark
    assert [x["round"] for x in rows(tmp_path / "go") if "diverged" in x] == marked and run.t == 6


def test_a_run_gone_on_through_a_divergence_resumes_under_continue(tmp_path, capsys):
    """--on-divergence continue saves the run's non-finite state. --resume goes on from it under that choice (marking
    the divergence once, to an unbroken run's rows and weights); under stop it refuses it in one line."""
    go = [*BASE, "--lr", "1e30", "--on-divergence", "continue", "--ckpt-every", "2"]
    assert train_cli.main([*go, "--rounds", "6", "--out", str(tmp_path / "whole")]) == 0
    assert train_cli.main([*go, "--rounds", "4", "--out", str(tmp_path / "cut")]) == 0
    cut = tmp_path / "cut"
    last = torch.load(cut / "ckpt/last.pt", weights_only=True)
    assert last["round"] == 4 and not all(torch.isfinite(v).all() for v in last["global"].values())
    before = (cut / "metrics.jsonl").read_bytes()
    capsys.readouterr()
    assert train_cli.main(["--resume", str(cut), "--rounds", "6", "--on-divergence", "stop"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "non-finite" in err[0], err
    assert (cut / "metrics.jsonl").read_bytes() == before
    assert train_cli.main(["--resume", str(cut), "--rounds", "6"]) == 0         # config.json: continue
    drop = lambda r: {k: v for k, v in r.items() if k != "seconds"}          # noqa: E731
    assert json.dumps([drop(r) for r in rows(cut)]) == json.dumps([drop(r) for r in rows(tmp_path / "whole")])
    assert sum("diverged" in r for r in rows(cut)) == 1 and rows(cut)[-1]["round"] == 6
    a, b = (torch.load(d / "ckpt/last.pt", weights_only=True)["global"] for d in (cut, tmp_path / "whole"))
    for k in b:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, equal_nan=True)


# ---- two writers, a kill, resume ----------------------------------------------------------------------------
def test_lock_kill_and_bit_identical_resume(tmp_path, capsys):
    """A real trainer process holds the run directory: a second writer is refused naming its pid; kill -9 frees
    the lock, leaves a loadable last.pt (and perhaps a temporary, removed on resume), and the resumed run ends
    bit-identical to one never interrupted."""
    out = tmp_path / "r"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    args = [*BASE, "--ckpt-every", "1", "--eval-every", "1000"]
    proc = subprocess.Popen([sys.executable, "-m", "fedlab_analysis.train", *args, "--rounds", "100000",
                             "--out", str(out)], env=env, stderr=subprocess.PIPE)
    try:
        while not (out / "ckpt" / "last.pt").exists() and proc.poll() is None:   # its first round's checkpoint
            time.sleep(0.2)
        assert proc.poll() is None, proc.stderr.read().decode()
        for argv in ([*args, "--rounds", "3", "--out", str(out), "--overwrite"],
                     ["--resume", str(out), "--rounds", "1000000"]):
            code = train_cli.main(argv)
            err = capsys.readouterr().err
            assert code == 2 and f"in use by pid {proc.pid} on " in err and len(err.strip().splitlines()) == 1, err
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    done = checkpoint.load(out)["round"]             # loadable after kill -9
    assert done >= 1
    (out / "ckpt" / ".last.pt.stale.tmp").write_bytes(b"half a checkpoint")
    assert train_cli.main(["--resume", str(out), "--rounds", str(done + 2)]) == 0
    assert not list(out.rglob("*.tmp"))
    ref = tmp_path / "ref"
    assert train_cli.main([*args, "--rounds", str(done + 2), "--out", str(ref)]) == 0
    a, b = checkpoint.load(out), checkpoint.load(ref)
    assert a["round"] == b["round"] == done + 2
    assert all(torch.equal(a["global"][k], b["global"][k]) for k in a["global"])


def test_second_writer_in_process_is_refused_and_lock_released(tmp_path, tiny_cfg):
    from fedlab_analysis import rundir
    out = tmp_path / "r"
    lock = rundir.prepare(out)
    with pytest.raises(UserError, match=f"in use by pid {os.getpid()} on "):
        train(tiny_cfg(rounds=1), out, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == [".lock"]
    lock.release()
    train(tiny_cfg(rounds=1), out)                   # free again: an empty directory (but its .lock) is fine


def test_overwrite_clears_the_old_run_and_stale_temporaries_go(tmp_path, tiny_cfg):
    out = tmp_path / "r"
    train(tiny_cfg(rounds=3, ckpt_every=1), out)
    with pytest.raises(UserError, match="not empty"):
        train(tiny_cfg(rounds=1, ckpt_every=1), out)
    (out / "ckpt" / ".round_0002.pt.x1.tmp").write_bytes(b"x")
    (out / ".metrics.jsonl.x2.tmp").write_text("x")
    train(tiny_cfg(rounds=1, ckpt_every=1), out, overwrite=True)
    assert sorted(p.name for p in (out / "ckpt").iterdir()) == ["last.pt", "round_0001.pt"]
    assert [x["round"] for x in rows(out)] == [1]
    assert sorted(p.name for p in out.iterdir()) == [".lock", "ckpt", "config.json", "metrics.jsonl"]


def test_resume_removes_stale_temporaries_and_drops_a_cut_metrics_line(tmp_path, tiny_cfg):
    out = tmp_path / "r"
    train(tiny_cfg(rounds=2, ckpt_every=1), out)
    (out / "ckpt" / ".last.pt.abc123.tmp").write_bytes(b"x" * 1000)
    with open(out / "metrics.jsonl", "a") as fh:
        fh.write('{"round": 3, "train_lo')          # a kill in the middle of an append
    train(tiny_cfg(rounds=3, ckpt_every=1), out, resume=True)
    assert not list(out.rglob("*.tmp"))
    assert [x["round"] for x in rows(out)] == [1, 2, 3]


# ---- the algorithms' declared parameters are the ones they read ---------------------------------------------
CHANGED = {"server_lr": 0.5, "rho": 0.3, "alpha": 0.5, "beta": 0.5, "lamb": 0.5, "mu": 0.5, "tau": 3,
           "phi_layers": 1, "server_momentum": 0.5, "beta1": 0.5, "beta2": 0.5, "eps": 0.5,
           "ri_agg": "delta_from_init", "lesam_source": "last_global_update", "lesam_s_scale": "code",
           "lesam_first": "global_update", "smoo_server": "code", "k_rule": "client0", "fedcm_wd": "outside"}
FEDALS = {"alpha": 2}


def _final(algo, ds, **kw):
    base = dict(algo=algo, dataset="digits", model="mlp", model_kwargs={"widths": [8, 8]}, clients=4,
                active_ratio=1.0 if algo.startswith("fedals") else 0.5, rounds=3, local_epochs=0.1,
                batch_size=16, wd=1e-3, seed=3, eval_train_samples=50, dtype="float64", quiet=True)
    return train(RunConfig(**{**base, **kw}), dataset=ds).w


QUICK = ("fedavg", "fedcm", "fedlesam-s", "fedals", "fedinit")     # the conditional and narrowed declarations


@pytest.mark.parametrize("algo", [a if a in QUICK else pytest.param(a, marks=pytest.mark.slow) for a in algos.NAMES])
def test_undeclared_parameters_do_nothing_declared_ones_act(algo):
    """Refusing '--rho with fedavg' is honest only if rho really does nothing there: every hyper-parameter an
    algorithm does not declare leaves its run bit-identical; every one it declares changes it."""
    assert set(CHANGED) == set(algos.HYPER)
    ds = load_dataset("digits")
    ref = _final(algo, ds)
    for name, v in CHANGED.items():
        v = FEDALS.get(name, v) if algo.startswith("fedals") else v
        same = torch.equal(_final(algo, ds, **{name: v}), ref)
        used = name in algos.uses(algo, cfg=RunConfig(algo=algo))       # (the base setting: epochs, paper forms)
        assert same == (not used), (algo, name, "changes nothing" if same else "acts")


# ---- damaged real data files --------------------------------------------------------------------------------
def _idx(arr):
    import struct
    return struct.pack(f">i{arr.ndim}i", 0x800 + arr.ndim, *arr.shape) + arr.tobytes()


def _mnist(folder, gz=True):
    rng = np.random.default_rng(0)
    arrays = {"train-images-idx3-ubyte": rng.integers(0, 256, (5, 28, 28), dtype=np.uint8),
              "train-labels-idx1-ubyte": rng.integers(0, 10, 5, dtype=np.uint8),
              "t10k-images-idx3-ubyte": rng.integers(0, 256, (3, 28, 28), dtype=np.uint8),
              "t10k-labels-idx1-ubyte": rng.integers(0, 10, 3, dtype=np.uint8)}
    folder.mkdir(parents=True, exist_ok=True)
    for name, arr in arrays.items():
        (folder / (name + (".gz" if gz else ""))).write_bytes(gzip.compress(_idx(arr)) if gz else _idx(arr))
    return folder


@pytest.mark.parametrize("damage, needle", [
    ("truncated gzip", "damaged gzip"), ("corrupt gzip", "damaged gzip"), ("short header", "short header"),
    ("negative size", "negative size")])
def test_damaged_idx_files_are_data_errors(tmp_path, damage, needle):
    d = _mnist(tmp_path / "m")
    f = d / "train-images-idx3-ubyte.gz"
    raw = f.read_bytes()
    if damage == "truncated gzip":
        f.write_bytes(raw[: len(raw) // 2])
    elif damage == "corrupt gzip":
        f.write_bytes(raw[:20] + bytes(len(raw) - 28) + raw[-8:])
    elif damage == "short header":
        f.write_bytes(gzip.compress(_idx(np.zeros((2, 28, 28), np.uint8))[:9]))
    else:
        import struct
        f.write_bytes(gzip.compress(struct.pack(">4i", 0x803, -1, 28, 28)))
    with pytest.raises(DataError) as e:
        load_dataset("mnist", str(d))
    msg = str(e.value)
    assert needle in msg and "train-images-idx3-ubyte" in msg and "\n" not in msg


@pytest.mark.parametrize("damage", ["zero bytes", "wrong shape", "not uint8", "label count", "no X"])
def test_damaged_svhn_files_are_data_errors(tmp_path, damage):
    import scipy.io
    rng = np.random.default_rng(1)
    for split in ("train", "test"):
        X, y = rng.integers(0, 256, (32, 32, 3, 4), dtype=np.uint8), rng.integers(1, 11, (4, 1)).astype(np.uint8)
        scipy.io.savemat(tmp_path / f"{split}_32x32.mat", {"X": X, "y": y})
    f = tmp_path / "train_32x32.mat"
    bad = {"wrong shape": {"X": rng.integers(0, 256, (28, 28, 4), dtype=np.uint8), "y": np.ones((4, 1))},
           "not uint8": {"X": rng.random((32, 32, 3, 4)), "y": np.ones((4, 1))},
           "label count": {"X": rng.integers(0, 256, (32, 32, 3, 4), dtype=np.uint8), "y": np.ones((3, 1))},
           "no X": {"Y": np.ones((4, 1))}}
    if damage == "zero bytes":
        f.write_bytes(b"")
    else:
        scipy.io.savemat(f, bad[damage])
    with pytest.raises(DataError) as e:
        load_dataset("svhn", str(tmp_path))
    assert "train_32x32.mat" in str(e.value) and "\n" not in str(e.value)


def test_phi_layers_is_checked_against_the_model_before_a_file_is_written(tmp_path, tiny_cfg):
    for L in (2, 5):
        cfg = tiny_cfg(algo="fedals", active_ratio=1.0, model="mlp", model_kwargs={"widths": [8]}, phi_layers=L)
        with pytest.raises(UserError, match="--phi-layers: must be in 1..1"):
            train(cfg, tmp_path / "r")
        assert not (tmp_path / "r").exists()
    Run(tiny_cfg(algo="fedals", active_ratio=1.0, model="mlp", model_kwargs={"widths": [8]}, phi_layers=1))


# ---- crafted checkpoints ------------------------------------------------------------------------------------
class _Crafted:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):                            # unpickling would create a file
        return (open, (self.path, "w"))


def test_crafted_pickle_checkpoint_is_refused_and_runs_no_code(tmp_path, capsys):
    from fedlab_analysis import probe
    from fedlab_analysis.errors import CheckpointError
    torch.save({"format": checkpoint.FORMAT, "version": 1, "metrics": _Crafted(str(tmp_path / "pwned"))},
               tmp_path / "evil.pt")
    with pytest.raises(CheckpointError, match="holds an object .*open.*refused unread"):
        checkpoint.load(tmp_path / "evil.pt")
    assert probe.main(["hessian", str(tmp_path / "evil.pt")]) == 2
    assert "refused unread" in capsys.readouterr().err
    assert not (tmp_path / "pwned").exists()


def test_validate_dict_is_the_layer_for_a_sweep_cell():
    from fedlab_analysis.config import validate_dict
    cfg = validate_dict({"algo": "fedcm", "alpha": 1, "lr": 1, "local-steps": 3}, "sweep.yaml cell 4")
    assert cfg.alpha == 1.0 and isinstance(cfg.lr, float) and cfg.local_steps == 3
    for cell, needle in [({"algo": "fedavg", "rho": 0.1}, "sweep.yaml cell 4: rho: fedavg does not use rho"),
                         ({"algo": "fedcm", "alpha": 2}, "sweep.yaml cell 4: alpha: must be in (0, 1] for fedcm"),
                         ({"algo": "fedlesam-s", "lamb": 0.5}, "fedlesam-s uses lamb only with --lesam-s-scale code"),
                         ({"rounds": 2.5}, "sweep.yaml cell 4: rounds: must be a whole number"),
                         ({"lr": float("nan")}, "lr: must be a finite number"), ({"lrr": 1}, "did you mean 'lr'")]:
        with pytest.raises(UserError, match=needle.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
            validate_dict(cell, "sweep.yaml cell 4")
