"""Sweeps: one run directory per resolved config, the local pool and a real Ray runtime agree bit for bit,
an interrupted sweep resumes without retraining, a failing run is recorded and the sweep goes on, and bad sweep
files are one line with exit 2 before anything is written."""
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

import torch

from fedlab_analysis import checkpoint, provenance, sweep
from fedlab_analysis.config import RunConfig

TINY = dict(dataset="digits", model="logreg", clients=4, active_ratio=0.5, rounds=2, local_steps=2, batch_size=16,
            eval_train_samples=200)
SPEC = {"base": TINY, "grid": {"algo": ["fedavg", "fedsam"], "dir_alpha": [0.3, 1.0], "seed": [0, 1]},
        "probes": ["hessian --top-k 1 --max-iter 20"]}


def _strip(x):
    """A run's numbers without wall-clock timings or absolute paths."""
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items() if "second" not in k and k != "checkpoint"}
    if isinstance(x, (list, tuple)):
        return [_strip(v) for v in x]
    return x


def numbers(out: Path) -> dict:
    """{run name: (config, metrics rows, probe results)} for every run directory of a sweep."""
    res = {}
    for d in sorted(p for p in out.iterdir() if p.is_dir()):
        rows = [json.loads(s) for s in (d / "metrics.jsonl").read_text().splitlines()]
        probes = {f.name: json.loads(f.read_text()) for f in sorted((d / "probes").glob("*.json"))}
        res[d.name] = _strip((json.loads((d / "config.json").read_text()), rows, probes))
    return res


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "local"
    df = sweep.run(SPEC, out=out, backend="local", workers=1, quiet=True)     # in this process
    return out, df


@pytest.fixture(scope="module")
def ray_runtime():
    import ray
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)   # two GPUs as Ray resources
    yield ray
    ray.shutdown()


def test_local_sweep_layout(local_sweep):
    out, df = local_sweep
    assert len(df) == 8 and (df["status"] == "done").all()
    index = json.loads((out / "sweep.json").read_text())
    assert sorted(r["name"] for r in index["runs"]) == sorted(df["name"]) and len(set(df["name"])) == 8
    for _, r in df.iterrows():
        d = out / r["name"]
        assert (d / "config.json").exists() and (d / "ckpt" / "last.pt").exists() and (d / "done.json").exists()
        assert json.loads((d / "done.json").read_text())["machine"] == provenance.machine("cpu")
        cfg = json.loads((d / "config.json").read_text())
        assert (cfg["algo"], cfg["dir_alpha"], cfg["seed"]) == (r["algo"], r["dir_alpha"], r["seed"])
        assert r["name"] == sweep.run_name(RunConfig.from_dict(cfg))
        rows = [json.loads(s) for s in (d / "metrics.jsonl").read_text().splitlines()]
        assert [x["round"] for x in rows] == [1, 2] and r["test_acc"] == rows[-1]["test_acc"]
        hess = json.loads((d / "probes" / "hessian.json").read_text())
        assert r["hessian.eigenvalues.0"] == hess["eigenvalues"][0] > 0


def test_ray_backend_matches_local(local_sweep, ray_runtime, tmp_path):
    out, df = local_sweep
    dr = sweep.run(SPEC, out=tmp_path / "ray", backend="ray", quiet=True)
    assert (dr["status"] == "done").all()
    assert sorted(dr["name"]) == sorted(df["name"])
    assert numbers(tmp_path / "ray") == numbers(out)            # same directories, same numbers, bit for bit


@pytest.mark.slow
def test_local_process_pool_matches_in_process(local_sweep, tmp_path):
    out, df = local_sweep
    dp = sweep.run(SPEC, out=tmp_path / "pool", backend="local", workers=2, quiet=True)     # spawn pool
    assert sorted(dp["name"]) == sorted(df["name"]) and numbers(tmp_path / "pool") == numbers(out)


def test_interrupted_sweep_resumes_without_retraining(local_sweep, tmp_path):
    src, df = local_sweep
    out = tmp_path / "resume"
    shutil.copytree(src, out)                                   # copy2: modification times kept
    names = sorted(df["name"])
    gone, partial, kept = names[:2], names[2], names[3:]
    for n in gone:                                              # never started
        shutil.rmtree(out / n)
    (out / partial / "done.json").unlink()                      # killed after its first round (no checkpoint yet)
    shutil.rmtree(out / partial / "ckpt")
    shutil.rmtree(out / partial / "probes")
    m = out / partial / "metrics.jsonl"
    m.write_text(m.read_text().splitlines()[0] + "\n")
    files = [f for n in kept for f in (out / n).rglob("*") if f.is_file()]
    before = {f: (f.stat().st_mtime_ns, f.read_bytes()) for f in files}

    dr = sweep.run(SPEC, out=out, backend="local", workers=1, quiet=True)
    assert (dr["status"] == "done").all() and len(dr) == 8
    assert {f: (f.stat().st_mtime_ns, f.read_bytes()) for f in files} == before      # finished runs untouched
    assert numbers(out) == numbers(src)                         # the redone runs reproduce the originals


def test_failing_run_is_recorded_and_the_sweep_goes_on(tmp_path, capsys):
    # digits has too few samples for 5000 clients: that run raises at start-up, after validation passed
    spec = {"base": {**TINY, "partition": "iid", "rounds": 1}, "grid": {"clients": [5000, 4]}}
    path = tmp_path / "fail.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    assert sweep.main([str(path), "--out", str(out), "--workers", "1", "--quiet"]) == 1
    assert "error: 1 of 2 runs failed" in capsys.readouterr().err         # the count, on stderr
    index = {r["cell"]["clients"]: r for r in json.loads((out / "sweep.json").read_text())["runs"]}
    assert index[4]["status"] == "done" and index[5000]["status"] == "failed"
    assert "--clients" in index[5000]["error"]
    failed = Path(index[5000]["path"]) / "failed.json"
    assert "--clients" in json.loads(failed.read_text())["error"]
    stamp = failed.stat().st_mtime_ns
    assert sweep.main([str(path), "--out", str(out), "--workers", "1", "--quiet"]) == 1
    assert failed.stat().st_mtime_ns == stamp                   # not retried without --retry-failed
    index = {r["cell"]["clients"]: r for r in json.loads((out / "sweep.json").read_text())["runs"]}
    assert index[5000]["status"] == "failed" and "--clients" in index[5000]["error"]
    assert sweep.main([str(path), "--out", str(out), "--workers", "1", "--quiet", "--retry-failed"]) == 1
    assert failed.stat().st_mtime_ns != stamp                   # retried (and fails again)


def test_names_hash_the_resolved_config():
    a = RunConfig(algo="fedsam", rho=None, quiet=True)
    assert sweep.run_name(a) == sweep.run_name(RunConfig(algo="fedsam", rho=0.01, threads=3))    # paper default
    assert sweep.run_name(a) != sweep.run_name(RunConfig(algo="fedsam", rho=0.2))
    assert sweep.run_name(a) != sweep.run_name(RunConfig(algo="fedsam", seed=1))


def test_grid_entries_that_set_several_keys(tmp_path):
    spec = {"base": TINY, "grid": {"algo": ["fedavg", {"algo": "fedsam", "rho": 0.01}, {"algo": "fedsmoo", "rho": 0.1},
                                            {"algo": "fedsmoo", "rho": 0.2}], "seed": [0, 1]}}
    tasks, _ = sweep.plan(spec, tmp_path)
    cells = [(t["cell"]["algo"], t["config"]["algo"], t["config"]["rho"]) for t in tasks[::2]]
    assert cells == [("fedavg", "fedavg", None), ("fedsam", "fedsam", 0.01), ("fedsmoo (rho=0.1)", "fedsmoo", 0.1),
                     ("fedsmoo (rho=0.2)", "fedsmoo", 0.2)]
    assert not list(tmp_path.iterdir())                         # planning writes nothing


BAD = {
    "unknown base key": ({"base": {**TINY, "lrr": 0.1}, "grid": {"seed": [0]}}, "lrr"),
    "unknown grid key": ({"base": TINY, "grid": {"algoo": ["fedavg"]}}, "algoo"),
    "empty grid list": ({"base": TINY, "grid": {"algo": []}}, "grid algo"),
    "no grid": ({"base": TINY}, "grid"),
    "grid not a list": ({"base": TINY, "grid": {"seed": 3}}, "grid seed"),
    "type error in base": ({"base": {**TINY, "clients": "four"}, "grid": {"seed": [0]}}, "clients"),
    "type error in grid": ({"base": TINY, "grid": {"lr": [0.1, "fast"]}}, "lr"),
    "text for a number": ({"base": {**TINY, "wd": "1e-3x"}, "grid": {"seed": [0]}}, "wd"),
    "base parameter no algorithm reads": ({"base": {**TINY, "tau": 5}, "grid": {"algo": ["fedavg", "fedsam"]}},
                                          "tau"),
    "bool for an int": ({"base": {**TINY, "rounds": True}, "grid": {"seed": [0]}}, "rounds"),
    "out of range": ({"base": TINY, "grid": {"lr": [0.1, -1.0]}}, "lr"),
    "unknown algo": ({"base": TINY, "grid": {"algo": ["fedavg", "fedfoo"]}}, "fedfoo"),
    "unknown probe": ({"base": TINY, "grid": {"seed": [0]}, "probes": ["hesian"]}, "hesian"),
    "bad probe flag": ({"base": TINY, "grid": {"seed": [0]}, "probes": ["hessian --top-kk 1"]}, "--top-kk"),
    "bad probe value": ({"base": TINY, "grid": {"seed": [0]}, "probes": ["trace --products x"]}, "--products"),
    "unknown top-level key": ({"base": TINY, "grid": {"seed": [0]}, "seeds": [0, 1]}, "seeds"),
    "entry without its key": ({"base": TINY, "grid": {"algo": [{"rho": 0.1}]}}, "grid algo"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_sweep_files_one_line_exit_2_nothing_written(case, tmp_path, capsys):
    spec, needle = BAD[case]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    assert sweep.main([str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and len(err.splitlines()) == 1 and needle in err, err
    assert not out.exists()


def test_example_sweeps_parse():
    files = sorted(Path(__file__).parents[1].joinpath("sweeps").glob("*.yaml"))
    assert len(files) >= 10
    for f in files:
        tasks, meta = sweep.plan(sweep.load(f), "/nonexistent/out", str(f))
        assert tasks and len({t["name"] for t in tasks}) == len(tasks)
        if f.stem.endswith("_full"):
            assert all(t["config"]["dataset"] == "cifar10" and t["config"]["device"] == "cuda" for t in tasks)
            assert meta["resources"]["num_gpus"] >= 1
        else:
            assert (f.parent / f"{f.stem}_full.yaml").exists(), f"{f.name} has no full-scale variant"


def test_report_on_the_sweep_matches_metrics_jsonl(local_sweep, capsys):
    import numpy as np

    from fedlab_analysis import report
    out, _ = local_sweep
    assert report.main([str(out), "--last-k", "2", "--no-plot"]) == 0
    printed = capsys.readouterr().out
    s = report.summary(out, last_k=2)
    cells = {}
    for d in out.iterdir():
        if d.is_dir():
            cfg = json.loads((d / "config.json").read_text())
            rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
            hess = json.loads((d / "probes" / "hessian.json").read_text())["eigenvalues"][0]
            cells.setdefault((cfg["algo"], cfg["dir_alpha"]), []).append(
                (rows[-1]["test_acc"], max(r["test_acc"] for r in rows[-2:]), hess))
    assert len(cells) == 4
    for (algo, a), seeds in cells.items():
        v = np.array(seeds)                                     # [seed, (final, best of last 2, hessian)]
        for j, q in enumerate(("test_acc", "test_acc (best of last 2)", "hessian.eigenvalues.0")):
            got = s[(s["algo"] == algo) & (s["dir_alpha"] == a) & (s["quantity"] == q)].iloc[0]
            assert got["n"] == 2
            np.testing.assert_allclose([got["mean"], got["std"]], [v[:, j].mean(), v[:, j].std(ddof=1)], rtol=1e-12)
            assert report.fmt(v[:, j].mean(), v[:, j].std(ddof=1), 2) in printed


def test_unreachable_ray_address_is_one_line(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"base": TINY, "grid": {"seed": [0]}}))
    out = tmp_path / "out"
    assert sweep.main([str(path), "--out", str(out), "--backend", "ray", "--address", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --address") and len(err.splitlines()) == 1 and not out.exists()


def test_base_parameter_goes_to_the_algorithms_that_read_it(tmp_path):
    # one base for FedAvg and FedALS: tau reaches FedALS, and FedAvg's run is the plain FedAvg run (same name)
    spec = {"base": {**TINY, "active_ratio": 1.0, "local_steps": 5, "tau": 5}, "grid": {"algo": ["fedavg", "fedals"]}}
    tasks, _ = sweep.plan(spec, tmp_path)
    by = {t["config"]["algo"]: t for t in tasks}
    assert by["fedals"]["config"]["tau"] == 5 and by["fedavg"]["config"]["tau"] is None
    plain, _ = sweep.plan({"base": {**TINY, "active_ratio": 1.0, "local_steps": 5}, "grid": {"algo": ["fedavg"]}},
                          tmp_path)
    assert plain[0]["name"] == by["fedavg"]["name"]


# ---- where runs go: workers and GPUs ------------------------------------------------------------------------
def test_gpus_are_checked_against_the_visible_ones(monkeypatch):
    monkeypatch.setattr(sweep, "visible_gpus", lambda: [0, 1, 2])
    assert sweep.parse_gpus("0,2") == [0, 2] and sweep.parse_gpus("all") == [0, 1, 2] and sweep.parse_gpus(None) is None
    for bad in ("3", "0,0", "x"):
        with pytest.raises(sweep.UserError, match="--gpus"):
            sweep.parse_gpus(bad)
    monkeypatch.setattr(sweep, "visible_gpus", lambda: [])
    with pytest.raises(sweep.UserError, match="sees no CUDA device"):
        sweep.parse_gpus("0")


def test_default_workers_one_per_gpu_else_two(monkeypatch):
    monkeypatch.setattr(sweep.os, "sched_getaffinity", lambda _: set(range(16)), raising=False)
    assert sweep.default_workers(None) == 2 and sweep.default_workers([0, 1, 2]) == 3
    monkeypatch.setattr(sweep.os, "sched_getaffinity", lambda _: {0}, raising=False)
    assert sweep.default_workers(None) == 1
    assert sweep.slots(3, [4, 7]) == ["cuda:4", "cuda:7", "cuda:4"] and sweep.slots(2, None) == [None, None]


def test_local_backend_puts_each_run_on_its_workers_gpu(tmp_path, monkeypatch):
    """Two visible GPUs (mocked), --gpus all: two workers, each run on its worker's GPU, never two runs on one GPU
    at a time; a run that asks for the CPU stays there. The worker is a stand-in that records where it ran."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor
    monkeypatch.setattr(sweep, "visible_gpus", lambda: [0, 1])
    monkeypatch.setattr(sweep, "_pool", lambda: ThreadPoolExecutor(max_workers=1))
    busy, log, lock = {}, [], threading.Lock()

    def fake_run_one(task):
        if "pack" in task:                           # a pack: its runs on one GPU, one pack per GPU at a time
            assert len({t["config"]["device"] for t in task["pack"]}) == 1
            return [fake_run_one(t) for t in task["pack"]]
        dev = task["config"]["device"]
        with lock:
            assert not busy.get(dev), f"two runs at once on {dev}"
            busy[dev] = True
        time.sleep(0.05)
        with lock:
            busy[dev] = False
            log.append((task["cell"]["seed"], dev))
        Path(task["path"]).mkdir(parents=True, exist_ok=True)
        (Path(task["path"]) / "done.json").write_text(json.dumps({"final": {}}))
        return {**task, "status": "done"}
    monkeypatch.setattr(sweep, "_worker", lambda: fake_run_one)
    spec = {"base": {**TINY, "device": "cuda"}, "grid": {"seed": list(range(6))}}
    df = sweep.run(spec, out=tmp_path / "g", gpus="all", quiet=True)
    assert (df["status"] == "done").all() and len(log) == 6
    assert {d for _, d in log} == {"cuda:0", "cuda:1"}
    log.clear()
    df = sweep.run(spec, out=tmp_path / "off", gpus="all", quiet=True, pack="off")     # one run per worker
    assert (df["status"] == "done").all() and {d for _, d in log} == {"cuda:0", "cuda:1"}
    log.clear()
    df = sweep.run({"base": {**TINY, "device": "cpu"}, "grid": {"seed": [7, 8]}}, out=tmp_path / "c", gpus="0",
                   quiet=True)
    assert [d for _, d in log] == ["cpu", "cpu"]
    with pytest.raises(sweep.UserError, match="--gpus: only with --backend local"):
        sweep.run(spec, out=tmp_path / "r", backend="ray", gpus="0", quiet=True)


def test_ray_backend_keeps_num_gpus(ray_runtime, tmp_path):
    """A real Ray runtime with two (declared) GPUs: resources num_gpus 1 gives each run one GPU of its own, which
    Ray exposes to it through CUDA_VISIBLE_DEVICES (recorded in done.json); the runs here use the CPU."""
    spec = {"base": {**TINY, "device": "cpu"}, "grid": {"seed": [0, 1]}, "resources": {"num_cpus": 1, "num_gpus": 1}}
    df = sweep.run(spec, out=tmp_path / "ray", backend="ray", quiet=True)
    assert (df["status"] == "done").all()
    seen = [json.loads((Path(p) / "done.json").read_text())["cuda_visible_devices"] for p in df["path"]]
    assert all(v in ("0", "1") for v in seen), seen


@pytest.mark.parametrize("line, says", [
    ("sharpness --bn-mode eval --bn-batch 64", "--bn-batch cannot act with --bn-mode eval"),
    ("stability --pairs 0", "--pairs >= 1"),
    ("stability --rounds 0 --pairs 2", "--pairs cannot act with --rounds 0")])
def test_a_probe_line_the_probe_refuses_is_refused_before_training(line, says):
    """The refusals a probe makes of its flags are made when the sweep is planned, not after a run has trained
    (these three used to pass the plan: the bn-mode refusal lived in runner.measure only, and the stability probe
    loaded its data before refusing)."""
    from fedlab_analysis.errors import UserError
    with pytest.raises(UserError, match=re.escape(says)):
        sweep.parse_probes([line], "s.yaml")
    assert sweep.parse_probes(["stability --rounds 1 --pairs 2"], "s.yaml")           # a good line passes


def test_packed_sweep_equals_unpacked(tmp_path, capsys):
    """--pack auto trains the grid's runs in packs (one per worker) and says so; every run's directory holds the
    same metrics and weights as with --pack off."""
    spec = {"base": {**TINY, "dtype": "float64", "client_parallel": "vmap"},
            "grid": {"seed": [0, 1, 2], "lr": [0.05, 0.1]}}
    a = sweep.run(spec, out=tmp_path / "a", workers=1)
    assert "sweep: 6 runs to train: 1 pack(s) of 6 runs trained together" in capsys.readouterr().err
    b = sweep.run(spec, out=tmp_path / "b", workers=1, pack="off")
    assert (a["status"] == "done").all() and (b["status"] == "done").all()
    for pa, pb in zip(a["path"], b["path"]):
        wa, wb = (checkpoint.load(Path(p) / "ckpt" / "last.pt")["global"] for p in (pa, pb))
        assert all(torch.allclose(wa[k], wb[k], rtol=1e-12, atol=0) for k in wb)
    with pytest.raises(sweep.UserError, match="--pack"):
        sweep.run(spec, out=tmp_path / "c", pack="yes")
