"""Local momentum (RunConfig.local_momentum, trainers/parts.py LocalMomentum): torch SGD(momentum) on each client,
against a hand computation in float64 (clipping and weight decay on, the buffer kept across rounds); a packed run
equals its run alone; 0 trains exactly as before."""
import torch
import torch.nn.functional as F

from fedlab_analysis.config import RunConfig
from fedlab_analysis.trainers.engine import Run
from fedlab_analysis.trainers.loop import train
from fedlab_analysis.trainers.pack import Job, train_pack

# one client holding all the digits, one full batch a step: the minibatch order cannot matter
ONE = dict(dataset="digits", model="mlp", model_kwargs={"widths": [8]}, clients=1, active_ratio=1.0, partition="iid",
           local_steps=3, batch_size=5000, lr=0.3, lr_decay=1.0, wd=1e-2, clip=0.5, rounds=2, dtype="float64",
           eval_train_samples=50, eval_samples=50, quiet=True)


def by_hand(m: float, clip: float) -> torch.Tensor:
    """2 rounds x 3 steps of v <- m v + clip(g) + wd x; x <- x - lr v, v kept across the rounds."""
    run = Run(RunConfig(**{**ONE, "clip": clip}))
    X, Y = run.X[run.idx[0]], run.Y[run.idx[0]]
    x, v = run.w.clone(), torch.zeros_like(run.w)
    for _ in range(ONE["rounds"] * ONE["local_steps"]):
        p = x.clone().requires_grad_(True)
        out = torch.func.functional_call(run.model, run.space.unflatten(p), (X,))
        g, = torch.autograd.grad(F.cross_entropy(out, Y), p)
        if clip:
            g = g * min(1.0, clip / (g.norm().item() + 1e-6))
        v = m * v + g + ONE["wd"] * x
        x = x - ONE["lr"] * v
    return x


def test_against_a_hand_computation_float64():
    for clip in (0.5, 0.0):
        run = train(RunConfig(**{**ONE, "clip": clip, "local_momentum": 0.9}))
        ref = by_hand(0.9, clip)
        assert ((run.w - ref).norm() / ref.norm()).item() < 1e-12, clip
        # the check can fail: plain SGD, or a buffer reset each round, is far from it
        assert ((train(RunConfig(**{**ONE, "clip": clip})).w - ref).norm() / ref.norm()).item() > 1e-3
    assert by_hand(0.0, 0.5).sub(train(RunConfig(**ONE)).w).norm() / train(RunConfig(**ONE)).w.norm() < 1e-12


BASE = dict(dataset="digits", model="mlp", model_kwargs={"widths": [12]}, clients=8, active_ratio=0.5,
            local_epochs=1, batch_size=24, lr=0.05, lr_decay=0.95, wd=1e-3, clip=10.0, partition="dirichlet",
            dir_alpha=0.5, dtype="float64", rounds=3, client_parallel="vmap", eval_train_samples=200, quiet=True,
            local_momentum=0.9)


def test_packed_equals_alone_and_zero_is_plain_sgd():
    """Unequal K_i (Dirichlet sizes: the masked steps) and partial participation; FedALS (full participation,
    its synchronisation averaging x while the buffers stay local) too."""
    for kw in (dict(algo="fedavg"), dict(algo="scaffold"), dict(algo="fedals", active_ratio=1.0)):
        cfgs = [RunConfig(**{**BASE, **kw, "seed": s}).validate() for s in (0, 1)]
        outs = train_pack([Job(c) for c in cfgs])
        alone = [train(c) for c in cfgs]
        for o, a in zip(outs, alone):
            assert ((o.run.w - a.w).norm() / a.w.norm()).item() < 1e-12, kw
            assert torch.equal(o.run.state["v"], a.state["v"]) or \
                ((o.run.state["v"] - a.state["v"]).norm() / a.state["v"].norm()).item() < 1e-12
        plain = train(RunConfig(**{**BASE, **kw, "seed": 0, "local_momentum": 0.0}))
        assert ((plain.w - alone[0].w).norm() / alone[0].w.norm()).item() > 1e-3, kw
    a = train(RunConfig(**{**BASE, "local_momentum": 0.0}))
    b = train(RunConfig(**{k: v for k, v in BASE.items() if k != "local_momentum"}))
    assert torch.equal(a.w, b.w) and "v" not in a.state
