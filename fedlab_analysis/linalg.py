"""Vector helpers shared by the probes: unit directions, cosines, the projection onto a rho-ball and the exact
maximiser of a quadratic model on it (the trust-region boundary problem). Float64 where a result is a number.

``unit`` is also the theory's (theory/rules.py re-exports it). theory/ keeps two batched variants of its own:
theory/fedsmoo.py ``cos`` (rows of a against rows of b, 0 at a zero vector) and the batched trust-region solver
theory/fedlesam.py ``ball_max`` (bisection on the secular equation over [..., d, d]).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor


def unit(v: Tensor) -> Tensor:
    """v / ||v|| row-wise over the last dimension (a flat vector: the whole vector); zero rows stay zero.

    >>> unit(torch.tensor([[3.0, 4.0], [0.0, 0.0]])).tolist()
    [[0.6000000238418579, 0.800000011920929], [0.0, 0.0]]
    """
    n = torch.linalg.vector_norm(v, dim=-1, keepdim=True)     # v.norm's kernel without its Python wrapper: the
    return torch.where(n > 0, v / n.clamp_min(1e-300), 0.0)   # theory's toys call this some 300,000 times


def cosine(a: Tensor, b: Tensor) -> Tensor:
    """cos(a_i, b) row-wise (float64); NaN where a row or b is zero.

    >>> cosine(torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]]), torch.tensor([2.0, 0.0])).tolist()[:2]
    [1.0, 0.7071067811865475]
    """
    a, b = a.detach().to(torch.float64), b.detach().to(torch.float64)
    den = a.norm(dim=-1) * b.norm()
    return torch.where(den > 0, (a @ b) / torch.where(den > 0, den, torch.ones_like(den)), torch.nan)


def project(d: Tensor, rho: float) -> Tensor:
    """d scaled back onto the ball ||d|| <= rho when it lies outside."""
    n = float(d.norm())
    return d * (rho / n) if n > rho else d


def trust_region_max(H: Tensor, g: Tensor, rho: float) -> Tensor:
    """argmax_{||d|| <= rho} g'd + d'Hd/2 for symmetric H (any sign), in float64.

    KKT: (lam I - H) d = g, lam >= max(lambda_max(H), 0), lam (||d|| - rho) = 0. In the eigenbasis H = Q diag(a) Q',
    ||d(lam)||^2 = sum_j (Q'g)_j^2 / (lam - a_j)^2 decreases on (a_max, inf); lam is found by bisection. The hard
    case (g orthogonal to the top eigenspace, e.g. at a minimum) fills the remaining radius with a top
    eigenvector; both candidates are formed and the one with the larger model value is returned, which also
    covers a gradient that is zero only up to rounding.

    Args:
        H: the symmetric [P, P] matrix of the quadratic model. g: its [P] linear term. rho: the radius (> 0).
    Returns:
        the maximiser d ([P], g's dtype and device), ||d|| <= rho.

    Against the exact answer: on H = diag(1, -1), g = (1, 0), rho = 1 the KKT point is lam = 2, d = (1, 0); at a
    minimum (g = 0) of H = diag(2, -1) the hard case puts all of rho on the top eigenvector:

    >>> H = torch.diag(torch.tensor([1.0, -1.0], dtype=torch.float64))
    >>> [round(float(x), 9) for x in trust_region_max(H, torch.tensor([1.0, 0.0], dtype=torch.float64), 1.0)]
    [1.0, 0.0]
    >>> H = torch.diag(torch.tensor([2.0, -1.0], dtype=torch.float64))
    >>> [abs(round(float(x), 9)) for x in trust_region_max(H, torch.zeros(2, dtype=torch.float64), 0.5)]
    [0.5, 0.0]
    """
    H64, g64 = H.detach().double(), g.detach().double()
    a, Q = torch.linalg.eigh((H64 + H64.T) / 2)
    c, amax = Q.T @ g64, float(a[-1])
    top = a >= amax - 1e-9 * max(1.0, abs(amax))

    def d_of(lam):
        den = lam - a
        return torch.where(den > 0, c / den.clamp_min(1e-300), torch.zeros_like(c))

    def q(d):
        return float(c @ d + 0.5 * (a * d * d).sum())

    lo = max(amax, 0.0)
    if lo > amax and float(d_of(lo).norm()) <= rho:          # concave and interior: lam = 0
        return (Q @ d_of(lo)).to(g)
    hi = lo + float(c.norm()) / rho + 1e-300
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if float(d_of(mid).norm()) > rho else (lo, mid)
    cands = [project(d_of(hi), rho)]
    d0 = torch.where(top, torch.zeros_like(c), d_of(max(amax, 0.0)))
    if amax >= 0 and float(d0.norm()) <= rho:               # hard case: lam = a_max
        e = torch.zeros_like(c)
        j = int(top.nonzero()[0])
        e[j] = 1.0 if float(c[j]) >= 0 else -1.0
        cands.append(d0 + math.sqrt(max(rho ** 2 - float(d0.norm()) ** 2, 0.0)) * e)
    return (Q @ max(cands, key=q)).to(g)
