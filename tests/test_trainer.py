"""The engine: FedAvg's sanity accuracy, resume bit-identity, client-order invariance, sampling rules."""
import json

import torch

from fedlab_analysis import checkpoint
from fedlab_analysis.trainers.engine import Run
from fedlab_analysis.trainers.loop import train


def test_fedavg_digits_sanity(tmp_path):
    """The issue's setting: mlp, 20 clients, Dirichlet 0.3, active 0.5, batch 10, 5 local epochs, lr 0.1, 30 rounds."""
    from fedlab_analysis.demo import DEMO
    from fedlab_analysis.config import RunConfig
    run = train(RunConfig(**{**DEMO, "quiet": True}), tmp_path / "run")
    rows = [json.loads(s) for s in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 30 and rows[-1]["round"] == 30
    assert rows[-1]["test_acc"] >= 0.90, rows[-1]
    assert set(rows[0]) >= {"round", "lr", "train_loss", "train_acc", "test_loss", "test_acc", "n_active", "seconds"}
    assert run.n_grads > 0


def _state(path):
    ck = torch.load(path, weights_only=True)
    return ck


def test_resume_is_bit_identical(tmp_path, tiny_cfg):
    for algo, extra in (("scaffold", {}), ("fedsmoo", {}),
                        ("fedals-scaffold", dict(active_ratio=1.0, tau=2, alpha=2, phi_layers=1, model="mlp",
                                                 model_kwargs={"widths": [8]}))):
        cfg = tiny_cfg(algo=algo, rounds=5, ri=True, ckpt_every=2, **extra)
        train(cfg, tmp_path / f"{algo}_full")
        short = tiny_cfg(algo=algo, rounds=2, ri=True, ckpt_every=2, **extra)
        train(short, tmp_path / f"{algo}_cut")
        train(cfg, tmp_path / f"{algo}_cut", resume=True)
        a, b = _state(tmp_path / f"{algo}_full/ckpt/last.pt"), _state(tmp_path / f"{algo}_cut/ckpt/last.pt")
        assert a["round"] == b["round"] == 5
        for k in a["global"]:
            assert torch.equal(a["global"][k], b["global"][k]), k
        for k in a["algo_state"]:
            assert torch.equal(a["algo_state"][k], b["algo_state"][k]), k
        assert torch.equal(a["clients"]["models"], b["clients"]["models"])
        ra = [json.loads(s) for s in (tmp_path / f"{algo}_full/metrics.jsonl").read_text().splitlines()]
        rb = [json.loads(s) for s in (tmp_path / f"{algo}_cut/metrics.jsonl").read_text().splitlines()]
        strip = lambda rows: [{k: v for k, v in r.items() if k != "seconds"} for r in rows]  # noqa: E731
        assert strip(ra) == strip(rb)


def test_resume_after_interruption(tmp_path, tiny_cfg):
    """A run killed between checkpoints resumes from ckpt/last.pt, which follows every saved round (a link, not a
    second serialisation), and ends bit-identical to an uninterrupted run."""
    import pytest
    cfg = tiny_cfg(algo="scaffold", rounds=5, ckpt_every=2)
    train(cfg, tmp_path / "full")

    def crash(ev, run, ctx, x):
        if ev == "round" and run.t == 3:
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / "cut", callbacks=[crash])
    assert checkpoint.load(tmp_path / "cut/ckpt/last.pt")["round"] == 2
    train(cfg, tmp_path / "cut", resume=True)
    a, b = _state(tmp_path / "full/ckpt/last.pt"), _state(tmp_path / "cut/ckpt/last.pt")
    assert a["round"] == b["round"] == 5
    for k in a["global"]:
        assert torch.equal(a["global"][k], b["global"][k]), k
    for k in a["algo_state"]:
        assert torch.equal(a["algo_state"][k], b["algo_state"][k]), k
    train(tiny_cfg(rounds=4, ckpt_every=2), tmp_path / "even")        # the final round is a checkpoint round
    ck = tmp_path / "even/ckpt"
    assert (ck / "last.pt").read_bytes() == (ck / "round_0004.pt").read_bytes()


def test_lean_checkpoints_resume_bit_identical(tmp_path, tiny_cfg):
    """--ckpt-keep last writes only last.pt; --ckpt-keep all writes model checkpoints without the per-client tables
    (FedSMOO's mu and h) beside a full last.pt; an interrupted run resumes from either bit-identically."""
    import pytest
    cfg = tiny_cfg(algo="fedsmoo", rounds=5, ckpt_every=2, ckpt_keep="last")
    train(cfg, tmp_path / "full")
    assert sorted(p.name for p in (tmp_path / "full/ckpt").iterdir()) == ["last.pt"]

    def crash(ev, run, ctx, x):
        if ev == "round" and run.t == 3:
            raise KeyboardInterrupt
    for keep in ("last", "all"):
        c = tiny_cfg(algo="fedsmoo", rounds=5, ckpt_every=2, ckpt_keep=keep)
        with pytest.raises(KeyboardInterrupt):
            train(c, tmp_path / keep, callbacks=[crash])
        train(c, tmp_path / keep, resume=True)
        a, b = _state(tmp_path / "full/ckpt/last.pt"), _state(tmp_path / f"{keep}/ckpt/last.pt")
        assert a["round"] == b["round"] == 5 and set(a["algo_state"]) == set(b["algo_state"]) == {"mu", "h", "s", "H"}
        for k in a["algo_state"]:
            assert torch.equal(a["algo_state"][k], b["algo_state"][k]), k
        for k in a["global"]:
            assert torch.equal(a["global"][k], b["global"][k]), k
    r2 = checkpoint.load(tmp_path / "all/ckpt/round_0002.pt")
    assert r2["round"] == 2 and set(r2["algo_state"]) == {"s", "H"} and r2["clients"] is None
    assert (tmp_path / "all/ckpt/round_0002.pt").stat().st_size < (tmp_path / "all/ckpt/last.pt").stat().st_size / 2


def test_checkpoint_writes_tables_without_a_copy(tiny_cfg):
    from fedlab_analysis.trainers.loop import to_checkpoint
    run = Run(tiny_cfg(algo="scaffold", keep_clients=True))
    run.round()
    ck = to_checkpoint(run, None)
    assert ck["algo_state"]["c_i"].data_ptr() == run.state["c_i"].data_ptr()          # as it is, not cloned
    assert ck["clients"]["models"].data_ptr() == run.last_local.data_ptr()
    assert ck["algo_state"]["c"].data_ptr() != run.state["c"].data_ptr()              # model-sized: own storage


def test_client_order_and_company_invariance(tiny_cfg):
    """A client's local model depends only on (seed, round, client): not on which other clients run, nor order."""
    cfg = tiny_cfg(active_ratio=1.0, dtype="float64", local_steps=3)
    seen = {}
    full = Run(cfg)
    full.callbacks.append(lambda ev, run, ctx, x: ev == "round" and seen.update(full=(ctx.S.clone(), x.clone())))
    full.round()
    part = Run(cfg)
    part.sample_clients = lambda t: torch.tensor([4, 1])          # another order, another company
    part.callbacks.append(lambda ev, run, ctx, x: ev == "round" and seen.update(part=(ctx.S.clone(), x.clone())))
    part.round()
    S_full, x_full = seen["full"]
    S_part, x_part = seen["part"]
    for j, i in enumerate(S_part.tolist()):
        assert torch.equal(x_part[j], x_full[S_full.tolist().index(i)])


def test_sampling_rules(tiny_cfg):
    run = Run(tiny_cfg(clients=10, active_ratio=0.3, sampling="fixed"))
    for t in range(5):
        S = run.sample_clients(t)
        assert len(S) == 3 and len(S.unique()) == 3
    run = Run(tiny_cfg(clients=10, active_ratio=0.01, sampling="bernoulli"))
    sizes = [len(run.sample_clients(t)) for t in range(30)]
    assert min(sizes) >= 1                                   # redrawn when nobody is active
    assert torch.equal(run.sample_clients(7), run.sample_clients(7))


def test_local_epochs_keep_partial_batch(tiny_cfg):
    run = Run(tiny_cfg(local_steps=None, local_epochs=2, batch_size=7))
    i = 0
    n = int(run.n_i[i])
    K = run.local_steps(i)
    assert K == 2 * -(-n // 7)
    b = run.batches(0, i, K)
    first_epoch = torch.cat(b[: K // 2])
    assert sorted(first_epoch.tolist()) == sorted(run.idx[i].tolist())   # an epoch visits every sample once


def test_checkpoint_is_plain_data(tmp_path, tiny_cfg):
    train(tiny_cfg(algo="feddyn", rounds=2), tmp_path / "r")
    ck = torch.load(tmp_path / "r/ckpt/last.pt", weights_only=True)
    assert ck["format"] == "fedlab_analysis.ckpt" and ck["version"] == checkpoint.VERSION
    assert ck["round"] == 2 and ck["config"]["algo"] == "feddyn"
    assert {"h", "H"} <= set(ck["algo_state"])
    assert sum(l["numel"] for l in ck["layers"]) == sum(v.numel() for v in ck["global"].values())
    counts = ck["partition"]["counts"]
    assert counts.sum() == sum(len(ix) for ix in ck["partition"]["indices"])
    assert checkpoint.load(tmp_path / "r")["round"] == 2        # a run directory works too


def test_vmap_path_equals_client_loop(tiny_cfg):
    """Lock-step gradients by vmap over stacked clients give the loop's numbers (float64), SAM's two passes too."""
    for algo in ("fedavg", "fedsam", "scaffold"):
        runs = []
        for v in ("loop", "vmap"):
            run = Run(tiny_cfg(algo=algo, client_parallel=v, dtype="float64", model="mlp", model_kwargs={"widths": [8]},
                               local_steps=None, local_epochs=1, batch_size=16))   # partial last batches too
            for _ in range(2):
                run.round()
            runs.append(run)
        assert (runs[0].w - runs[1].w).abs().max() <= 1e-12
        assert runs[0].n_grads == runs[1].n_grads
