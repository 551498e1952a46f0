"""Unequal K_i: the round's steps past min K_i run on the still-active clients' rows gathered once per run of steps
(Run.segments); the masked step (taken when a callback watches the steps) must give the same numbers, bit for bit,
for every algorithm, in both client-parallel modes and both precisions."""
import pytest
import torch

from fedlab_analysis.config import RunConfig
from fedlab_analysis.data import load_dataset
from fedlab_analysis.trainers import ALGORITHMS
from fedlab_analysis.trainers.engine import Run

# 6 clients of unequal size (labeldir), one local epoch at batch 64: unequal K_i and short last batches in every round
BASE = dict(dataset="digits", model="mlp", model_kwargs={"widths": [8]}, clients=6, active_ratio=0.5, local_epochs=1,
            batch_size=64, lr=0.05, lr_decay=0.9, wd=1e-3, clip=1.0, partition="labeldir", dir_alpha=0.5, seed=2,
            eval_train_samples=50, quiet=True, keep_clients=False, device="cpu")

CASES = [dict(algo=a) for a in ALGORITHMS if not a.startswith("fedals")] + \
    [dict(algo="fedsmoo", ri=True), dict(algo="fedprox", ri=True, ri_anchor="start"),
     dict(algo="fedlesam", lesam_source="last_global_update")]
MODES = [("vmap", "float32"), ("vmap", "float64"), ("loop", "float32")]


def watched(event, run, ctx, x):
    """A step callback that reads nothing: it only sends the round down the masked path."""


def trajectory(kw, masked: bool):
    run = Run(RunConfig(**kw), dataset=load_dataset("digits"))
    if masked:
        run.callbacks.append(watched)
    out, segs = [], 0
    for _ in range(3):
        ctx = run.round()
        segs += len(ctx.segs)
        out.append(run.w.clone())
    return torch.stack(out), run, segs


@pytest.mark.parametrize("mode,dtype", MODES, ids=[f"{m}-{d}" for m, d in MODES])
@pytest.mark.parametrize("case", CASES, ids=[c["algo"] + ("+ri" if c.get("ri") else "") +
                                             ("-" + c["lesam_source"] if "lesam_source" in c else "") for c in CASES])
def test_segments_equal_the_masked_step_bitwise(case, mode, dtype):
    kw = {**BASE, **case, "client_parallel": mode, "dtype": dtype}
    w_seg, run_seg, segs = trajectory(kw, masked=False)
    w_mask, run_mask, _ = trajectory(kw, masked=True)
    assert segs > 0, "the setting must have unequal K_i (runs of steps past min K_i)"
    assert torch.equal(w_seg, w_mask), (w_seg - w_mask).abs().max()
    assert run_seg.n_grads == run_mask.n_grads
    for k in run_seg.state:
        assert torch.equal(run_seg.state[k], run_mask.state[k]), k


def test_a_run_of_steps_takes_its_clients_rows():
    """RoundCtx.take and Algorithm.take: every per-client value is the rows of the still-active clients, and they
    all step; Algorithm.put_back writes the rows back."""
    run = Run(RunConfig(**BASE, algo="fedsmoo", client_parallel="vmap"), dataset=load_dataset("digits"))
    ctx = run.round_ctx(0)
    smoo = run.algo.perturb                          # its round constants, as round_start would set them
    mu = torch.arange(ctx.n, dtype=torch.float64)[:, None].expand(-1, 3).clone()
    flat, bcast = torch.zeros(ctx.n, dtype=torch.float64), torch.ones(3).expand(ctx.n, -1)
    smoo.mu, smoo.s_hat, smoo.delta = mu, flat, bcast
    a, b, rows, host = ctx.segs[-1]
    c = ctx.take(rows, host, b)
    taken = run.algo.take(rows, host, ctx.n)
    assert c.n == len(host) and c.S.tolist() == [ctx.S[j].item() for j in host] and c.Kmin == b
    assert bool((c.K > a).all()) and int(c.K.min()) == b and c.all_on
    assert smoo.mu[:, 0].tolist() == host and smoo.s_hat is flat      # a [n] vector is not per-client rows
    assert smoo.delta.stride(0) == 0 and len(smoo.delta) == len(host)
    assert torch.equal(c.I, ctx.I[host]) and c.batches == [ctx.batches[j] for j in host]
    smoo.mu.add_(100)                                # a run of steps updates its rows in place ...
    run.algo.put_back(taken, rows)                   # ... and they go back; every constant is the round's again
    assert smoo.mu is mu and smoo.delta is bcast and mu[host, 0].tolist() == [j + 100 for j in host]
    assert all(mu[j, 0] == j for j in range(ctx.n) if j not in host)


# several runs alive in one process, stepped round by round in turn: scratch buffers sized by a large active set read
# as prefixes at a smaller one, segment sizes that change from round to round, two precisions and algorithms with
# per-client tables (mu, c_i, h, w_old) - the setting in which one comparison once saw FedSMOO's weights move by 4e-3
SHARED = [dict(algo="fedsmoo", clients=10, active_ratio=0.6), dict(algo="scaffold", clients=6),
          dict(algo="fedsmoo", dtype="float64", seed=5), dict(algo="feddyn", clients=8, active_ratio=0.4),
          dict(algo="fedlesam"), dict(algo="fedinit", ri=True, clients=10, active_ratio=0.6),
          dict(algo="fedsmoo", clients=4, active_ratio=1.0)]


@pytest.mark.slow
def test_runs_sharing_a_process_equal_each_run_alone_bitwise():
    data = load_dataset("digits")
    runs = [Run(RunConfig(**{**BASE, "client_parallel": "vmap", "dtype": "float32", **c}), dataset=data)
            for c in SHARED]
    sizes = [set() for _ in runs]
    ws = [[] for _ in runs]
    for _ in range(4):                               # interleaved: every run's round t before any run's round t + 1
        for i, run in enumerate(runs):
            ctx = run.round()
            sizes[i].update(len(s[3]) for s in ctx.segs)
            ws[i].append(run.w.clone())
    assert all(len(s) > 1 for s in sizes[:2]), "segments of several sizes (prefix views of one buffer) must occur"
    for i, c in enumerate(SHARED):                   # each alone, masked path, fresh Run
        w_alone = _alone(c, data)
        assert torch.equal(torch.stack(ws[i]), w_alone), (c, (torch.stack(ws[i]) - w_alone).abs().max())


def _alone(c, data, rounds=4):
    run = Run(RunConfig(**{**BASE, "client_parallel": "vmap", "dtype": "float32", **c}), dataset=data)
    run.callbacks.append(watched)
    out = []
    for _ in range(rounds):
        run.round()
        out.append(run.w.clone())
    return torch.stack(out)
