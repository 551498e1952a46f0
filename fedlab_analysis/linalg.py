"""Vector helpers shared by the probes and the theory toys: unit directions, cosines, the projection onto a rho-ball
and the exact maximiser of a quadratic model on it (the trust-region boundary problem). Each works row-wise over the
last dimension, so one call serves one flat vector (a probe) or a batch of toy problems ([..., d]); float64 where a
result is a number.
"""
from __future__ import annotations

import torch
from torch import Tensor


def unit(v: Tensor) -> Tensor:
    """v / ||v|| row-wise over the last dimension (a flat vector: the whole vector); zero rows stay zero.

    >>> unit(torch.tensor([[3.0, 4.0], [0.0, 0.0]])).tolist()
    [[0.6000000238418579, 0.800000011920929], [0.0, 0.0]]
    """
    n = torch.linalg.vector_norm(v, dim=-1, keepdim=True)     # v.norm's kernel without its Python wrapper: the
    return torch.where(n > 0, v / n.clamp_min(1e-300), 0.0)   # theory's toys call this some 300,000 times


def cosine(a: Tensor, b: Tensor, at_zero: float = float("nan")) -> Tensor:
    """cos(a, b) row-wise over the last dimension, a and b broadcast (float64); ``at_zero`` where a row of a or b is
    zero (NaN: undefined, as the probes report it; the theory's toys average cosines and pass 0).

    >>> cosine(torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]]), torch.tensor([2.0, 0.0])).tolist()
    [1.0, 0.7071067811865475, nan]
    >>> cosine(torch.tensor([[0.0, 1.0], [0.0, 0.0]]), torch.tensor([[0.0, -3.0], [1.0, 0.0]]), at_zero=0.0).tolist()
    [-1.0, 0.0]
    """
    a, b = a.detach().to(torch.float64), b.detach().to(torch.float64)
    den = torch.linalg.vector_norm(a, dim=-1) * torch.linalg.vector_norm(b, dim=-1)
    dot = a @ b if b.dim() == 1 else (a * b).sum(-1)     # rows against one vector: the probes' matrix-vector product
    return torch.where(den > 0, dot / den.clamp_min(1e-300), at_zero)


def project(d: Tensor, rho: float) -> Tensor:
    """d (one flat vector) scaled back onto the ball ||d|| <= rho when it lies outside."""
    n = float(d.norm())
    return d * (rho / n) if n > rho else d


def trust_region_max(H: Tensor, g: Tensor, rho: float) -> Tensor:
    """argmax_{||d|| <= rho} g'd + d'Hd/2 for symmetric H (any sign), in float64, batched over leading dimensions.

    KKT: (lam I - H) d = g, lam >= max(lambda_max(H), 0), lam (||d|| - rho) = 0. In the eigenbasis H = Q diag(a) Q',
    ||d(lam)||^2 = sum_j (Q'g)_j^2 / (lam - a_j)^2 decreases on (a_max, inf); lam is found by bisection (200 halvings,
    every problem of the batch at once). The hard case (g orthogonal to the top eigenspace, e.g. at a minimum) fills
    the remaining radius with a top eigenvector; both candidates are formed and the one with the larger model value
    is kept, which also covers a gradient that is zero only up to rounding. A concave model with its maximiser inside
    the ball (lam = 0) returns that maximiser.

    Args:
        H: the symmetric [..., P, P] matrices of the quadratic models. g: their [..., P] linear terms (the batch
            dimensions of H and g broadcast). rho: the radius (> 0).
    Returns:
        the maximisers d ([..., P], g's dtype and device), ||d|| <= rho.

    Against the exact answer: on H = diag(1, -1), g = (1, 0), rho = 1 the KKT point is lam = 2, d = (1, 0); at a
    minimum (g = 0) of H = diag(2, -1) the hard case puts all of rho on the top eigenvector; the two at once, batched:

    >>> H = torch.diag(torch.tensor([1.0, -1.0], dtype=torch.float64))
    >>> [round(float(x), 9) for x in trust_region_max(H, torch.tensor([1.0, 0.0], dtype=torch.float64), 1.0)]
    [1.0, 0.0]
    >>> H2 = torch.diag(torch.tensor([2.0, -1.0], dtype=torch.float64))
    >>> [abs(round(float(x), 9)) for x in trust_region_max(H2, torch.zeros(2, dtype=torch.float64), 0.5)]
    [0.5, 0.0]
    >>> d = trust_region_max(torch.stack([H, H2]), torch.tensor([[1.0, 0.0], [0.0, 0.0]], dtype=torch.float64), 0.5)
    >>> [[abs(round(float(x), 9)) for x in row] for row in d]
    [[0.5, 0.0], [0.5, 0.0]]
    """
    H64, g64 = H.detach().double(), g.detach().double()
    a, Q = torch.linalg.eigh((H64 + H64.mT) / 2)
    c = (Q.mT @ g64.unsqueeze(-1)).squeeze(-1)                # H and g may broadcast: the eigenvalues follow g
    a = a.expand(c.shape)
    amax = a[..., -1:]
    top = a >= amax - 1e-9 * amax.abs().clamp_min(1.0)

    def d_of(lam):
        den = lam - a
        return torch.where(den > 0, c / den.clamp_min(1e-300), 0.0)

    def q(d):
        return (c * d).sum(-1, keepdim=True) + 0.5 * (a * d * d).sum(-1, keepdim=True)

    def norm(d):
        return torch.linalg.vector_norm(d, dim=-1, keepdim=True)

    lo = amax.clamp_min(0.0)
    d_in = d_of(lo)
    interior = (lo > amax) & (norm(d_in) <= rho)              # concave, maximiser inside: lam = 0
    hi = lo + norm(c) / rho + 1e-300
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        big = norm(d_of(mid)) > rho
        lo, hi = torch.where(big, mid, lo), torch.where(big, hi, mid)
    d = d_of(hi)
    n = norm(d)
    d = torch.where(n > rho, d * (rho / n.clamp_min(1e-300)), d)       # onto the ball (rounding only)
    d0 = torch.where(top, 0.0, d_in)                          # hard case: lam = a_max, the rest on a top eigenvector
    j = top.to(torch.int8).argmax(-1, keepdim=True)           # the first top index
    e = torch.zeros_like(c).scatter_(-1, j, torch.where(c.gather(-1, j) >= 0, 1.0, -1.0).to(c))
    hard = d0 + (rho ** 2 - norm(d0) ** 2).clamp_min(0.0).sqrt() * e
    d = torch.where((amax >= 0) & (norm(d0) <= rho) & (q(hard) > q(d)), hard, d)
    d = torch.where(interior, d_in, d)
    return (Q @ d.unsqueeze(-1)).squeeze(-1).to(g)
