"""--client-parallel: the vmapped lock-step clients agree with the one-client-at-a-time loop for every algorithm
(unequal client sizes, unequal step counts, short last batches, augmentation), resume bit-identically, and
--device refuses a missing CUDA in one line."""
import json

import pytest
import torch

from fedlab_analysis.config import RunConfig
from fedlab_analysis.data import Dataset, load_dataset
from fedlab_analysis.trainers import ALGORITHMS
from fedlab_analysis.trainers.engine import Run
from fedlab_analysis.trainers.loop import train

# 6 clients of unequal size (labeldir), one local epoch at batch 64: unequal K_i and short last batches in every round
BASE = dict(dataset="digits", model="mlp", model_kwargs={"widths": [8]}, clients=6, active_ratio=0.5, rounds=3,
            local_epochs=1, batch_size=64, lr=0.05, lr_decay=0.9, wd=1e-3, clip=1.0, partition="labeldir",
            dir_alpha=0.5, seed=2, eval_train_samples=50, quiet=True, keep_clients=False, device="cpu")
CASES = [dict(algo=a) for a in ALGORITHMS] + [dict(algo="fedsmoo", ri=True), dict(algo="scaffold", ri=True)]
TOL = {"float64": 1e-10, "float32": 1e-5}
_DIGITS = {}


def digits(augmentable=False):
    if augmentable not in _DIGITS:
        ds = load_dataset("digits")
        _DIGITS[augmentable] = Dataset("digits", ds.x_train, ds.y_train, ds.x_test, ds.y_test, ds.n_classes,
                                       ds.input_shape, augmentable=augmentable)
    return _DIGITS[augmentable]


def _kw(case):
    kw = {**BASE, **case}
    if kw["algo"].startswith("fedals"):
        kw.update(active_ratio=1.0, tau=2, alpha=2, local_epochs=5)
    return kw


def trajectory(mode, n_rounds=3, data=None, **kw):
    run = Run(RunConfig(**{**kw, "client_parallel": mode}), dataset=data or digits())
    ws = []
    for _ in range(n_rounds):
        ctx = run.round()
        ws.append(run.w.clone())
    return torch.stack(ws), run, ctx


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", CASES, ids=[c["algo"] + ("+ri" if c.get("ri") else "") for c in CASES])
def test_vmap_equals_loop(case, dtype):
    kw = _kw({**case, "dtype": dtype})
    wl, rl, ctx = trajectory("loop", **kw)
    wv, rv, _ = trajectory("vmap", **kw)
    assert rl.parallel == "loop" and rv.parallel == "vmap"
    err = (wl - wv).abs().max().item()
    assert err <= TOL[dtype] * max(1.0, wl.abs().max().item()), err
    assert rl.n_grads == rv.n_grads
    for k in rl.state:
        assert (rl.state[k].double() - rv.state[k].double()).abs().max() <= TOL[dtype] * 10, k
    if not case["algo"].startswith("fedals"):        # the setting really has unequal K_i and short batches
        assert ctx.K.min() < ctx.K.max() and ctx.W is not None


def test_vmap_equals_loop_with_augmentation():
    kw = _kw(dict(algo="fedsam", dtype="float64", augment=True))
    wl, _, ctx = trajectory("loop", data=digits(True), **kw)
    wv, _, _ = trajectory("vmap", data=digits(True), **kw)
    assert ctx.aug is not None
    assert (wl - wv).abs().max() <= 1e-10
    w0, _, _ = trajectory("vmap", **{**kw, "augment": False})
    assert (w0 - wv).abs().max() > 1e-6                # augmentation really changed the data


def test_auto_choice_is_recorded(tmp_path):
    run = train(RunConfig(**{**BASE, "rounds": 1}), tmp_path / "r", dataset=digits())
    assert run.parallel == "vmap"
    assert json.loads((tmp_path / "r/config.json").read_text())["client_parallel"] == "vmap"
    ck = torch.load(tmp_path / "r/ckpt/last.pt", weights_only=True)
    assert ck["config"]["client_parallel"] == "vmap" and all(v.device.type == "cpu" for v in ck["global"].values())
    bn = Run(RunConfig(**{**BASE, "model": "resnet20", "model_kwargs": {"norm": "bn"}}), dataset=digits())
    assert bn.parallel == "loop"
    conv = Run(RunConfig(**{**BASE, "model": "resnet20", "model_kwargs": {"norm": "gn"}}), dataset=digits())
    assert conv.parallel == "loop"                 # a convolutional model on the CPU


def test_vmap_resume_is_bit_identical(tmp_path):
    kw = {**BASE, "client_parallel": "vmap", "ckpt_every": 2}
    for algo in ("fedsmoo", "scaffold"):
        train(RunConfig(**{**kw, "algo": algo, "rounds": 4}), tmp_path / f"{algo}_full", dataset=digits())
        train(RunConfig(**{**kw, "algo": algo, "rounds": 2}), tmp_path / f"{algo}_cut", dataset=digits())
        train(RunConfig(**{**kw, "algo": algo, "rounds": 4}), tmp_path / f"{algo}_cut", resume=True,
              dataset=digits())
        a, b = (torch.load(tmp_path / f"{algo}_{s}/ckpt/last.pt", weights_only=True) for s in ("full", "cut"))
        assert a["round"] == b["round"] == 4
        for k in a["global"]:
            assert torch.equal(a["global"][k], b["global"][k]), k
        for k in a["algo_state"]:
            assert torch.equal(a["algo_state"][k], b["algo_state"][k]), k


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
def test_state_tables_on_the_host_change_nothing(device):
    for algo in ("scaffold", "fedsmoo", "fedlesam-d"):
        kw = _kw(dict(algo=algo, device=device, ri=True))
        w_run, r_run, _ = trajectory("vmap", **kw)
        w_cpu, r_cpu, _ = trajectory("vmap", **{**kw, "state_device": "cpu"})
        assert torch.equal(w_run, w_cpu)
        assert all(t.device.type == "cpu" for t in r_cpu.state.values() if t.dim() == 2)
        assert r_cpu.last_local.device.type == "cpu" and torch.equal(r_run.last_local.cpu(), r_cpu.last_local)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_device_cuda_without_cuda_is_one_line(tmp_path, capsys):
    from fedlab_analysis.train import main
    rc = main(["--device", "cuda", "--rounds", "1", "--quiet", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("error: --device") and "\n" not in err
    assert not (tmp_path / "r").exists()


def test_bad_client_parallel_is_one_line(tmp_path, capsys):
    from fedlab_analysis.train import main
    rc = main(["--client-parallel", "threads", "--rounds", "1", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("error: --client-parallel") and not (tmp_path / "r").exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("algo", ["fedavg", "scaffold", "fedsmoo", "fedlesam"])
def test_cuda_matches_cpu_and_loop(algo, tmp_path):
    kw = _kw(dict(algo=algo, dtype="float64"))
    wc, _, _ = trajectory("vmap", **{**kw, "device": "cpu"})
    wg, rg, _ = trajectory("vmap", **{**kw, "device": "cuda"})
    wl, _, _ = trajectory("loop", **{**kw, "device": "cuda"})
    assert rg.w.device.type == "cuda"
    assert (wc - wg.cpu()).abs().max() <= 1e-10 and (wl - wg).abs().max() <= 1e-10
    run = train(RunConfig(**{**kw, "device": "cuda", "rounds": 2}), tmp_path / "g", dataset=digits())
    ck = torch.load(tmp_path / "g/ckpt/last.pt", weights_only=True)          # device-free checkpoint
    assert all(v.device.type == "cpu" for v in ck["global"].values()) and run.t == 2
    train(RunConfig(**{**kw, "device": "cpu", "rounds": 3}), tmp_path / "g", resume=True, dataset=digits())


def test_eval_samples_between_full_evaluations(tmp_path):
    train(RunConfig(**{**BASE, "rounds": 4, "eval_every": 2, "eval_samples": 50}), tmp_path / "r", dataset=digits())
    rows = [json.loads(s) for s in (tmp_path / "r/metrics.jsonl").read_text().splitlines()]
    n_test = len(digits().y_test)
    assert [r["round"] for r in rows] == [1, 2, 3, 4]
    assert [r["test_samples"] for r in rows] == [50, n_test, 50, n_test]


def test_bf16_autocast_is_opt_in_and_close():
    kw = _kw(dict(algo="fedsam", dtype="float32"))
    w32, _, _ = trajectory("vmap", n_rounds=1, **kw)
    for mode in ("loop", "vmap"):
        w16, run, _ = trajectory(mode, n_rounds=1, **{**kw, "precision": "bf16"})
        err = (w16 - w32).abs().max().item()
        assert 0 < err < 0.05 * w32.abs().max().item(), (mode, err)      # other arithmetic, same training
        assert run.w.dtype == torch.float32
    from fedlab_analysis.errors import UserError
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="--precision tf32"):
            Run(RunConfig(**{**kw, "precision": "tf32"}), dataset=digits())
    with pytest.raises(UserError, match="--precision"):
        RunConfig(**{**kw, "precision": "bf16", "dtype": "float64"}).validate()


def test_compile_needs_the_vmapped_step():
    with pytest.raises(Exception, match="--compile"):
        Run(RunConfig(**{**BASE, "algo": "fedavg", "client_parallel": "loop", "compile": True}), dataset=digits())


@pytest.mark.slow
def test_compiled_step_agrees_with_eager():
    # torch.compile of the vmapped gradient (both SAM passes, short padded batches): float tolerance, not bitwise
    kw = {**BASE, "algo": "fedsam"}
    eager, _, _ = trajectory("vmap", n_rounds=2, **kw)
    compiled, run, _ = trajectory("vmap", n_rounds=2, **{**kw, "compile": True})
    assert run.cfg.compile and run._vfns
    assert all(hasattr(f, "_torchdynamo_orig_callable") for f in run._vfns.values())      # really compiled
    assert torch.allclose(eager, compiled, atol=1e-5, rtol=1e-4), (eager - compiled).abs().max()


# ---- no host sync per local step; compile that stays compiled; the same draws on every device ----------------
SYNCS = ("item", "tolist", "nonzero", "__int__", "__bool__", "__index__", "__float__")


def _host_reads(run, monkeypatch):
    """Calls that read a tensor's values back into Python (a host sync on CUDA) during one round, after the round's
    host-side set-up (round_ctx draws the batches on the host, where reading values is free)."""
    count = {"n": 0, "on": True}
    for name in SYNCS:
        orig = getattr(torch.Tensor, name)

        def wrapped(self, *a, _orig=orig, **k):
            count["n"] += count["on"]
            return _orig(self, *a, **k)
        monkeypatch.setattr(torch.Tensor, name, wrapped)
    setup = run.round_ctx

    def quiet_setup(t):
        count["on"] = False
        try:
            return setup(t)
        finally:
            count["on"] = True
    monkeypatch.setattr(run, "round_ctx", quiet_setup)
    run.round()
    monkeypatch.undo()
    return count["n"]


@pytest.mark.parametrize("algo,mode", [("fedavg", "loop"), ("fedsmoo", "vmap"), ("scaffold", "vmap")])
def test_no_host_read_per_local_step(algo, mode, monkeypatch):
    """Unequal K_i: more local steps (more masked steps) must not mean more reads of tensor values on the host; the
    masked rows are decided from K on the host (the old code read them back with nonzero/tolist/int every step)."""
    reads = []
    for epochs in (1, 4):
        kw = {**BASE, "algo": algo, "client_parallel": mode, "local_epochs": epochs, "batch_size": 16}
        run = Run(RunConfig(**kw), dataset=digits())
        reads.append(_host_reads(run, monkeypatch))
    assert reads[0] == reads[1], reads


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("algo,mode", [("fedavg", "vmap"), ("fedsmoo", "vmap"), ("scaffold", "loop"),
                                       ("fedlesam", "vmap"), ("fedinit", "loop"), ("fedals-scaffold", "vmap"),
                                       ("fedcm", "vmap")])
def test_cuda_round_has_no_sync(algo, mode):
    kw = _kw({"algo": algo, "client_parallel": mode, "device": "cuda", "augment": True})
    run = Run(RunConfig(**kw), dataset=digits(augmentable=True))
    run.round()                                       # warm-up (lazy CUDA init may sync)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        run.round()
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.slow
def test_compile_stays_compiled_over_50_rounds():
    """Bernoulli sampling (the active set's size changes) and unequal K_i (masked rows) whose largest K_i changes
    from round to round: one compile. The first code recompiled on every new shape (4 times in the first 8 rounds
    here) and fell back to eager at torch._dynamo's limit; the next one recompiled once, on the first round with a
    new largest K_i (a per-step slice of an [N, K_max, B] table has a stride that depends on K_max)."""
    cfg = RunConfig(**{**BASE, "algo": "fedavg", "clients": 20, "active_ratio": 0.3, "sampling": "bernoulli",
                       "rounds": 50, "client_parallel": "vmap", "compile": True, "batch_size": 32, "local_epochs": 2})
    run = Run(cfg, dataset=digits())
    sizes, kmax = set(), set()
    for _ in range(50):
        kmax.add(max(run.local_steps(int(i)) for i in run.sample_clients(run.t)))
        sizes.add(run.round().n)
    assert len(sizes) >= 3 and len(kmax) >= 2 and run.n_compiles == 1, (sorted(sizes), kmax, run.n_compiles)


def test_draws_come_from_the_cpu_generator(monkeypatch):
    """Augmentation and minibatch draws use CPU generators whatever the run's device (so a GPU run sees the CPU
    run's crops and flips), and the round's table equals the CPU draw sequence."""
    from fedlab_analysis.data.augment import aug_draw
    from fedlab_analysis.trainers import engine, rng
    devices = []
    real = rng.generator

    def spy(*a, **k):
        g = real(*a, **k)
        devices.append(g.device.type)
        return g
    monkeypatch.setattr(engine, "generator", spy)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    run = Run(RunConfig(**{**BASE, "algo": "fedavg", "augment": True, "device": dev}), dataset=digits(True))
    ctx = run.round_ctx(0)
    assert set(devices) == {"cpu"}
    for j, i in enumerate(ctx.S.tolist()):
        sizes = [len(b) for b in ctx.batches[j]]
        want = aug_draw(sum(sizes), real(BASE["seed"], 0, i, "augment")).split(sizes, 1)
        for k, a in enumerate(want):
            assert torch.equal(ctx.aug[j, k, :, :sizes[k]].cpu(), a)
            assert torch.equal(ctx.I[j, k, :sizes[k]].cpu(), ctx.batches[j][k])
    assert all(b.device.type == "cpu" for bs in ctx.batches for b in bs)
