"""The memory and disk plan (fedlab_analysis/plan.py): its estimate against measured peak RSS (fresh subprocesses),
its disk figure against the checkpoint written, train/sweep --dry-run, and train's one-line refusal."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fedlab_analysis import plan as planning
from fedlab_analysis.train import main as train_main
from fedlab_analysis.trainers.loop import train

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import json, resource, sys, tempfile, torch
torch.set_num_threads(1)
from fedlab_analysis.data import Dataset
from fedlab_analysis.config import RunConfig
from fedlab_analysis.plan import plan
from fedlab_analysis.trainers.loop import train
kw = json.loads(sys.argv[1])
ds = None
if kw.pop("images", None):                    # a synthetic image set, channels-last as the trainer keeps it
    g = torch.Generator().manual_seed(0)
    x, xt = (torch.randn(n, 32, 32, 3, generator=g).permute(0, 3, 1, 2) for n in (3000, 500))
    y, yt = (torch.randint(0, 10, (n,), generator=g) for n in (3000, 500))
    ds = Dataset.from_tensors(x, y, xt, yt, name="img", augmentable=True)
    del x, xt
cfg = RunConfig(**kw)
est = plan(cfg.validate(), dataset=ds).peak
with tempfile.TemporaryDirectory() as out:
    train(cfg, out, dataset=ds)
print(json.dumps({"peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "estimate": est}))
"""
CASES = {   # three models where the planned items (tables, working set, activations) dominate the runtime; a chunked
    #         round (--client-chunk: [C, P] buffers and the server's sums)
    "mlp-scaffold-tables": dict(algo="scaffold", dataset="digits", model="mlp", model_kwargs={"widths": [512, 512]},
                                clients=300, active_ratio=0.2, sampling="fixed", local_steps=2, batch_size=16),
    "mlp-fedsmoo-vmap": dict(algo="fedsmoo", dataset="digits", model="mlp", model_kwargs={"widths": [1024, 512]},
                             clients=120, active_ratio=0.5, sampling="fixed", local_steps=2, batch_size=32,
                             client_parallel="vmap"),
    "mlp-fedsmoo-vmap-chunked": dict(algo="fedsmoo", dataset="digits", model="mlp",
                                     model_kwargs={"widths": [1024, 512]}, clients=120, active_ratio=0.5,
                                     sampling="fixed", local_steps=2, batch_size=32, client_parallel="vmap",
                                     client_chunk=8),
    "resnet18gn-fedavg": dict(algo="fedavg", model="resnet18gn", images=True, clients=20, active_ratio=0.5,
                              sampling="fixed", local_steps=1, batch_size=32, eval_train_samples=200),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_estimate_within_25_percent_of_measured_peak(case):
    kw = {"rounds": 1, "seed": 0, "quiet": True, "partition": "iid", **CASES[case]}
    if not kw.get("images"):
        kw.setdefault("eval_train_samples", 200)
    r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(kw)], capture_output=True, text=True, cwd=ROOT,
                       env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    m = json.loads(r.stdout.strip().splitlines()[-1])
    assert abs(m["estimate"] - m["peak"]) <= 0.25 * m["peak"], (case, m["estimate"] / 2**20, m["peak"] / 2**20)


def test_tables_and_disk_from_the_declaration(tiny_cfg, tmp_path):
    """FedAvg plans no per-client table; SCAFFOLD one [m, P] table, and last.pt's size is what the plan says (the
    tables dominate it here), with and without --keep-clients."""
    assert "tables" not in planning.plan(tiny_cfg().validate()).memory or \
        planning.plan(tiny_cfg().validate()).memory["tables"] == 0
    for keep in (False, True):
        cfg = tiny_cfg(algo="scaffold", model="mlp", model_kwargs={"widths": [256]}, clients=200, rounds=1,
                       keep_clients=keep)
        p = planning.plan(cfg.validate())
        P = 64 * 256 + 256 + 256 * 10 + 10
        assert p.memory["tables"] == (1 + keep) * 200 * P * 4
        train(cfg, tmp_path / f"k{keep}")
        size = (tmp_path / f"k{keep}/ckpt/last.pt").stat().st_size
        assert abs(p.disk["last.pt"] - size) <= 0.05 * size, (p.disk, size)


def test_disk_follows_ckpt_keep(tiny_cfg):
    base = dict(algo="fedsmoo", rounds=800, ckpt_every=100, clients=50)
    keep_all = planning.plan(tiny_cfg(**base).validate())
    keep_last = planning.plan(tiny_cfg(**base, ckpt_keep="last").validate())
    assert keep_last.disk_total == keep_all.disk["last.pt"] < keep_all.disk_total
    assert keep_all.disk["round checkpoints"] == 8 * (keep_all.disk["last.pt"] - 2 * 50 * 650 * 4)   # model only


def test_train_dry_run_prints_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    rc = train_main(["--algo", "fedsmoo", "--dataset", "cifar10", "--model", "resnet18gn", "--clients", "100",
                     "--active-ratio", "0.1", "--rounds", "800", "--ckpt-every", "100", "--out", str(out),
                     "--dry-run"])
    text = capsys.readouterr().out
    assert rc == 0 and not out.exists()
    assert "tables 8.33 GiB" in text and "last.pt 9.08 GB" in text and "free:" in text      # 2 x 100 x 11.18M x 4 B


def test_refusal_is_one_line_naming_the_biggest_item(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(planning, "free_memory", lambda device: 2**30)
    out = tmp_path / "run"
    rc = train_main(["--algo", "scaffold", "--dataset", "digits", "--model", "mlp", "--model-kwargs",
                     '{"widths": [2048, 2048]}', "--clients", "200", "--active-ratio", "0.05", "--rounds", "1",
                     "--out", str(out), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and not out.exists()
    assert err[0].startswith("error:") and "biggest item is tables" in err[0] and "--clients" in err[0]
    monkeypatch.setattr(planning, "free_disk", lambda path: 10**6)
    monkeypatch.setattr(planning, "free_memory", lambda device: 2**40)
    rc = train_main(["--algo", "scaffold", "--dataset", "digits", "--clients", "20", "--rounds", "1", "--out",
                     str(out), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--ckpt-keep last" in err[0] and not out.exists()


def test_sweep_dry_run(tmp_path, capsys):
    from fedlab_analysis.sweep import main as sweep_main
    rc = sweep_main([str(ROOT / "sweeps" / "fedsmoo_table2_full.yaml"), "--dry-run", "--out", str(tmp_path / "s")])
    text = capsys.readouterr().out
    assert rc == 0 and not (tmp_path / "s").exists()
    last = text.strip().splitlines()[-1]
    assert last.startswith("sweep: 18 runs, disk ") and float(last.split("disk ")[1].split(" GB")[0]) <= 100


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_free_memory_is_read():
    assert 0 < planning.free_memory("cuda") <= torch.cuda.get_device_properties(0).total_memory
