"""Chunked rounds (engine.py: Run.chunks, --client-chunk): the active clients trained a chunk at a time, the server's
sums accumulated over the chunks, against the round of all active clients at once, in float64, for every algorithm.

Not bit for bit: torch sums the n rows of an [n, P] tensor over dim 0 with several accumulators (a cascade) for
n >= 5, and the sum of per-chunk sums adds the same numbers in another order; and a vmapped step over C clients
may block its batched matmuls differently from one over n. Each round then moves the numbers by float64 round-off,
which the checks below bound (relative 1e-11 after a few rounds; measured: about 1e-15)."""
import pytest
import torch

from fedlab_analysis import algos
from fedlab_analysis.config import RunConfig
from fedlab_analysis.data import Dataset
from fedlab_analysis.trainers import engine
from fedlab_analysis.trainers.loop import train

TOL = 1e-11
BASE = dict(dataset="digits", model="mlp", model_kwargs={"widths": [16]}, dtype="float64", clients=14,
            active_ratio=0.5, sampling="bernoulli", partition="labeldir", dir_alpha=0.6, min_size=10,
            local_epochs=1, batch_size=32, lr=0.1, wd=1e-3, rounds=3, eval_train_samples=100, quiet=True, seed=3)
SETTINGS = {"unequal": {}, "equal": dict(partition="iid", sampling="fixed", local_steps=3)}
OWN = {"fedals": dict(partition="sorted", clients=5, active_ratio=1.0, tau=3, alpha=2),
       "fedals-scaffold": dict(partition="sorted", clients=5, active_ratio=1.0, tau=3, alpha=2)}
VARIANTS = {"fedinit-delta": ("fedinit", dict(beta=-0.1, ri_agg="delta_from_init")),
            "feddyn-ri-start": ("feddyn", dict(ri=True, ri_anchor="start")),
            "fedsmoo-code": ("fedsmoo", dict(smoo_server="code")),
            "fedlesam-global": ("fedlesam", dict(lesam_source="last_global_update")),
            "scaffold-client0": ("scaffold", dict(k_rule="client0"))}


def cfg_of(algo, setting="unequal", **kw):
    return RunConfig(**{**BASE, **SETTINGS[setting], "algo": algo, **OWN.get(algo, {}), **kw})


def state(run) -> dict:
    """Everything a run carries into its next round, and its last metrics row."""
    out = {"w": run.w, **{f"state.{k}": v for k, v in run.state.items() if v.is_floating_point()}}
    if run.last_local is not None:
        out["last_local"] = run.last_local
    if run.bspace.P:
        out["buf"] = run.buf
    out.update({f"row.{k}": torch.tensor(float(v)) for k, v in run.last_row.items()
                if k != "seconds" and isinstance(v, (int, float))})
    return out


def max_rel(a: dict, b: dict) -> float:
    """The largest difference between the two runs' states, relative to each tensor's largest entry."""
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max() / (a[k].abs().max() + 1e-300)) for k in a)


def chunked_calls(monkeypatch) -> list:
    """Counts the clients of every chunk a run trains (Run.chunks)."""
    seen, chunks = [], engine.Run.chunks

    def spy(self, ctx):
        for c in chunks(self, ctx):
            seen.append(c.n)
            yield c
    monkeypatch.setattr(engine.Run, "chunks", spy)
    return seen


def pair(monkeypatch, cfg, C, tmp_path=None, dataset=None):
    """(the run of all active clients at once, the run in chunks of C, the chunk sizes seen)."""
    whole = train(cfg, None if tmp_path is None else tmp_path / "whole", dataset=dataset)
    assert whole.chunk is None
    seen = chunked_calls(monkeypatch)
    chunked = train(cfg.__class__(**{**cfg.to_dict(), "client_chunk": C}),
                    None if tmp_path is None else tmp_path / "chunked", dataset=dataset)
    monkeypatch.undo()
    return whole, chunked, seen


@pytest.mark.parametrize("parallel", ["vmap", "loop"])
@pytest.mark.parametrize("algo", ["fedsmoo", "scaffold", "mofedsam", "feddyn-ri-start"])
def test_chunked_equals_whole_round(monkeypatch, algo, parallel):
    """Unequal K_i, Bernoulli sampling, chunks of 3 (the last one shorter): every state the next round reads and
    the metrics agree to float64 round-off, and the rounds really ran in chunks."""
    name, kw = VARIANTS.get(algo, (algo, {}))
    whole, chunked, seen = pair(monkeypatch, cfg_of(name, client_parallel=parallel, **kw), 3)
    assert max(seen) == 3 and len(seen) > whole.cfg.rounds and len(set(seen)) > 1, seen
    assert max_rel(state(whole), state(chunked)) < TOL


@pytest.mark.slow
@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("parallel", ["vmap", "loop"])
@pytest.mark.parametrize("algo", [*algos.NAMES, *VARIANTS])
def test_chunked_every_algorithm(monkeypatch, algo, parallel, setting):
    name, kw = VARIANTS.get(algo, (algo, {}))
    whole, chunked, seen = pair(monkeypatch, cfg_of(name, setting, client_parallel=parallel, **kw), 2)
    if name.startswith("fedals"):                   # it averages over all clients at local steps: never chunked
        assert chunked.chunk is None and not seen
        assert max_rel(state(whole), state(chunked)) == 0
        return
    assert seen and max(seen) == 2 and len(seen) > whole.cfg.rounds, seen
    diff = max_rel(state(whole), state(chunked))
    print(f"chunked-vs-whole {algo} {parallel} {setting}: max relative difference {diff:.2e}")
    assert diff < TOL


def test_batchnorm_buffers_and_augmentation(monkeypatch):
    """A BatchNorm model (its running statistics averaged over the chunks) on augmented images (each chunk's
    clients keep the round's draws)."""
    g = torch.Generator().manual_seed(0)
    x, xt = torch.randn(100, 3, 4, 4, generator=g), torch.randn(20, 3, 4, 4, generator=g)
    y, yt = torch.randint(0, 4, (100,), generator=g), torch.randint(0, 4, (20,), generator=g)
    ds = Dataset.from_tensors(x, y, xt, yt, name="img", augmentable=True)
    cfg = cfg_of("fedavg", model="resnet20", model_kwargs={}, augment=True, clients=4, rounds=2, batch_size=6,
                 partition="iid", sampling="fixed", active_ratio=0.75, local_steps=2, eval_train_samples=20)
    whole, chunked, seen = pair(monkeypatch, cfg, 2, dataset=ds)
    assert whole.bspace.P and seen == [2, 1, 2, 1]
    assert max_rel(state(whole), state(chunked)) < TOL


def test_resumed_chunked_run(monkeypatch, tmp_path):
    """Killed after round 2 and resumed to 4: the same as the uninterrupted chunked run, bit for bit (the chunks
    carry no state across rounds), and the same as the round of all at once to round-off."""
    cfg = cfg_of("fedsmoo", rounds=4, ckpt_every=1, client_chunk=3)
    full = train(cfg, tmp_path / "full")
    train(RunConfig(**{**cfg.to_dict(), "rounds": 2}), tmp_path / "cut")
    resumed = train(cfg, tmp_path / "cut", resume=True)
    assert resumed.chunk == 3 and max_rel(state(full), state(resumed)) == 0
    whole = train(RunConfig(**{**cfg.to_dict(), "client_chunk": None}), tmp_path / "whole")
    assert whole.chunk is None and max_rel(state(whole), state(resumed)) < TOL


@pytest.mark.parametrize("fault", ["dropped", "doubled"])
def test_the_check_catches_a_lost_or_doubled_chunk(monkeypatch, fault):
    """The comparison above fails when one chunk's contribution to the server's sums is dropped or counted twice."""
    add, chunk = engine.RoundCtx.add, [0]

    def broken(self, name, v):                       # every second chunk: its sums lost, or added twice
        if self.sums is None:
            return add(self, name, v)
        chunk[0] += name == "delta"                  # a chunk's first contribution (Algorithm.client_end)
        for _ in range(0 if chunk[0] % 2 == 0 and fault == "dropped" else 1 + (chunk[0] % 2 == 0)):
            add(self, name, v)
    cfg = cfg_of("fedsmoo")
    whole = train(cfg)
    monkeypatch.setattr(engine.RoundCtx, "add", broken)
    chunked = train(RunConfig(**{**cfg.to_dict(), "client_chunk": 3}))
    assert max_rel(state(whole), state(chunked)) > 1e-6


def test_plan_chooses_the_chunk_from_free_memory(monkeypatch):
    """The plan takes all active clients at once where they fit and otherwise the largest chunk that fits, from the
    memory it finds; --client-chunk forces it; FedALS is never chunked."""
    from fedlab_analysis import plan as planning
    cfg = RunConfig(algo="fedsmoo", dataset="cifar10", model="resnet18gn", clients=100, active_ratio=0.1,
                    sampling="fixed", rounds=1, local_steps=2).validate()
    monkeypatch.setattr(planning, "free_memory", lambda device: 64 * 2**30)
    whole = planning.plan(cfg)
    assert whole.chunk is None
    monkeypatch.setattr(planning, "free_memory", lambda device: 11 * 2**30)
    p = planning.plan(cfg)
    assert p.chunk is not None and 1 <= p.chunk < 10 and p.peak <= 11 * 2**30 < whole.peak
    bigger = planning.plan(RunConfig(**{**cfg.to_dict(), "client_chunk": p.chunk + 1}).validate())
    assert bigger.peak > 11 * 2**30 and bigger.chunk == p.chunk + 1
    assert any("chunks of" in line for line in p.lines())
    als = RunConfig(algo="fedals", dataset="cifar10", model="resnet18gn", clients=10, active_ratio=1.0,
                    rounds=1, client_chunk=2).validate()
    assert planning.plan(als).chunk is None


def test_the_plans_chunk_is_recorded_in_config_json(tmp_path, monkeypatch):
    """A chunk the memory plan chose (not asked for) lands in config.json, as the resolved parallel mode does."""
    import json
    from types import SimpleNamespace

    import fedlab_analysis.plan as plan_mod
    monkeypatch.setattr(plan_mod, "plan", lambda cfg, **kw: SimpleNamespace(chunk=cfg.client_chunk or 2))
    train(cfg_of("fedavg", rounds=1), str(tmp_path))
    assert json.loads((tmp_path / "config.json").read_text())["client_chunk"] == 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("state_device", ["run", "cpu"])
@pytest.mark.parametrize("algo", ["fedsmoo", "scaffold"])
def test_cuda_chunked_equals_whole_round(monkeypatch, algo, state_device):
    """The chunked round on a GPU, its per-client tables on the device or staged through host memory
    (--state-device cpu): the same states as the whole round on the same device."""
    cfg = cfg_of(algo, client_parallel="vmap", device="cuda", state_device=state_device)
    whole, chunked, seen = pair(monkeypatch, cfg, 3)
    assert chunked.w.device.type == "cuda" and max(seen) == 3, seen
    assert max_rel(state(whole), state(chunked)) < TOL
