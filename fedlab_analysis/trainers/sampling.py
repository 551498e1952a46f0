"""Who trains in a round and on which samples: client sampling, local step counts, minibatches, augmentation draws
and the round's step tables (who steps at each k, the padded minibatch table). Everything here is drawn on the
host from the run's seeded CPU generators (rng.py), so every device and both --client-parallel modes see the same
clients and batches; the engine (engine.py) moves the tables to the device with ``dev``.
"""
from __future__ import annotations

import math

import torch

from ..data.augment import aug_draw
from .rng import generator


def sample_clients(cfg, m: int, t: int) -> torch.Tensor:
    """Round t's active clients, sorted (long [n], host): ``round(active_ratio m)`` of them without replacement
    (--sampling fixed, or full participation), else each with probability active_ratio (the simulator's
    Bernoulli rule, redrawn when nobody is active)."""
    g = generator(cfg.seed, t, purpose="sample")
    if cfg.sampling == "fixed" or cfg.active_ratio >= 1:
        n = max(1, round(cfg.active_ratio * m))
        return torch.randperm(m, generator=g)[:n].sort().values
    while True:
        on = torch.rand(m, generator=g, dtype=torch.float64) <= cfg.active_ratio
        if on.any():
            return on.nonzero().flatten()


def largest_active_set(cfg, m: int) -> int:
    """The most clients any of the run's ``cfg.rounds`` rounds samples (known in advance: the sampling is seeded)."""
    return max(len(sample_clients(cfg, m, t)) for t in range(max(cfg.rounds, 1)))


def local_steps(cfg, n_i: int, K: int | None = None) -> int:
    """K_i of a client with n_i samples: the algorithm's fixed K (FedALS' tau), --local-steps, or
    local_epochs * ceil(n_i / B)."""
    if K is not None:
        return K
    if cfg.local_steps is not None:
        return cfg.local_steps
    return max(1, round(cfg.local_epochs * math.ceil(n_i / cfg.batch_size)))


def batches(cfg, ix: torch.Tensor, t: int, i: int, K: int) -> list[torch.Tensor]:
    """K minibatches of client i (sample indices ``ix``) in round t (host index tensors, drawn on the CPU generator
    whatever the run's device, so every device sees the same batches): reshuffle every epoch; epochs keep the last
    partial batch (a DataLoader with shuffle=True), --local-steps draws full batches from consecutive permutations."""
    g, B, n = generator(cfg.seed, t, i, "batch"), cfg.batch_size, len(ix)
    out = []
    if cfg.local_steps is None:
        while len(out) < K:
            perm = ix[torch.randperm(n, generator=g)]
            out.extend(perm.split(B))
        return out[:K]
    need = K * min(B, n)
    reps = -(-need // n)
    perm = torch.cat([ix[torch.randperm(n, generator=g)] for _ in range(reps)])
    return list(perm[:need].split(min(B, n)))


def aug_table(seed: int, t: int, S: torch.Tensor, bs: list, Kmax: int, B: int) -> torch.Tensor:
    """The round's augmentation draws [n, Kmax, 3, B] (data.augment.aug_draw): one draw per client per round from
    its own CPU generator, cut into its batches; shared by both --client-parallel modes."""
    aug = torch.zeros(len(S), Kmax, 3, B, dtype=torch.long)
    for j, (i, b) in enumerate(zip(S.tolist(), bs)):
        g = generator(seed, t, i, "augment")
        for k, a in enumerate(aug_draw(sum(map(len, b)), g).split([len(x) for x in b], 1)):
            aug[j, k, :, :a.shape[1]] = a
    return aug


def step_tables(ctx, dev, dtype) -> None:
    """ctx's step tables from its clients' K and batches (``dev`` moves a host tensor to the run's device): who
    steps at each k (``act``; the rows of every masked step k >= min K_i in ``row_at``), the runs of steps with one
    active set (``segs``: Run.segments), the padded minibatch table (``pad``)."""
    K = ctx.K
    ctx.K_dev, ctx.Kmin = dev(K), int(K.min())          # K lives on the host: no read-back per step
    ctx.S_dev = dev(ctx.S)
    act = torch.arange(int(K.max()))[:, None] < K[None, :]
    ctx.act = dev(act)
    masked = [act[k].nonzero().flatten() for k in range(ctx.Kmin, act.shape[0])]
    if masked:                                          # the rows of every masked step, moved in one copy
        on = dev(torch.cat(masked)).split([len(r) for r in masked])
        ctx.row_at = {ctx.Kmin + q: (on[q], masked[q].tolist()) for q in range(len(masked))}
        ends = sorted(set(K.tolist()))                  # the active set changes only where some client's K_i ends
        ctx.segs = [(a, b, *ctx.row_at[a]) for a, b in zip(ends, ends[1:])]
    pad(ctx, dev, dtype)


def pad(ctx, dev, dtype) -> None:
    """The round's minibatch indices as one padded table I [n, max K_i, max B] (row j, step k: client
    S[j]'s batch, padded with its first index) and, where batches are unequal, mean-loss weights W
    (1/|b| on real samples, 0 on padding) so a padded batch has the same mean loss as the real one."""
    n, Kmax = ctx.n, int(ctx.K.max())
    ctx.sizes = sizes = [[len(b) for b in bs] for bs in ctx.batches]
    B = max(max(s) for s in sizes)
    I = torch.empty(n, Kmax, B, dtype=torch.long)
    full = all(len(s) == Kmax and min(s) == B for s in sizes)
    for j, bs in enumerate(ctx.batches):
        if len(bs) == Kmax and min(sizes[j]) == B:
            I[j] = torch.stack(bs)
            continue
        I[j] = bs[0][0]
        for k, b in enumerate(bs):
            I[j, k, :len(b)] = b
    ctx.I, ctx.W, ctx.padded = dev(I), None, []
    if not full:
        nb = torch.zeros(n, Kmax, dtype=dtype)
        for j, s in enumerate(sizes):
            nb[j, :len(s)] = torch.tensor(s, dtype=dtype)
        valid = torch.arange(B, dtype=dtype) < nb[..., None]
        ctx.W = dev(valid / nb.clamp(min=1)[..., None])
        ctx.padded = [any(len(s) > k and s[k] < B for s in sizes) for k in range(Kmax)]


def fixed_tables(ctx, N: int, dtype, device) -> dict:
    """--compile's batch tables: the round's padded to N rows, with mean-loss weights everywhere (zero on padding
    and past each K_i): one kind of batch, one shape, one compile. Stored step-major ([K_max, N, ...], each step's
    slice contiguous): a slice [:, k] of [N, K_max, B] has a stride that changes with the round's K_max, and
    torch.compile recompiles on a new stride (a ResNet-18-GN recompile costs ~40 s on an H100)."""
    n = ctx.n
    grow = lambda t: torch.cat([t, t[:1].expand(N - n, *t.shape[1:])]) if N > n else t      # noqa: E731
    W = ctx.W if ctx.W is not None else torch.full(ctx.I.shape, 1 / ctx.I.shape[2], dtype=dtype, device=device)
    steps = lambda t: t.transpose(0, 1).contiguous()                                        # noqa: E731
    W = torch.cat([W, W.new_zeros(N - n, *W.shape[1:])])
    return {"I": steps(grow(ctx.I)), "W": steps(W), "aug": None if ctx.aug is None else steps(grow(ctx.aug))}
