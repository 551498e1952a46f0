"""The shared vector helpers (fedlab_analysis/linalg.py) batched, in float64: the trust-region maximiser of a batch of
quadratic models against a brute-force search and against each model solved alone; the cosine against its
definition, broadcast, with its value at a zero vector. Each check is shown failing on a wrong answer."""
import math

import pytest
import torch

from fedlab_analysis.linalg import cosine, trust_region_max

DT = torch.float64


def _q(H, g, d):
    return (g * d).sum(-1) + 0.5 * (d * (H @ d.unsqueeze(-1)).squeeze(-1)).sum(-1)


def _brute_max(H, g, rho, n_r=301, n_phi=2401):
    """max of the model over a polar grid of the 2-D ball, per problem of the batch."""
    r = torch.linspace(0, rho, n_r, dtype=DT)[:, None, None]
    phi = torch.linspace(0, 2 * math.pi, n_phi, dtype=DT)[None, :, None]
    pts = (r * torch.cat([phi.cos(), phi.sin()], -1)).reshape(-1, 2)             # [M, 2]
    vals = (pts @ g.unsqueeze(-1)).squeeze(-1) + 0.5 * ((pts @ H) * pts).sum(-1)  # [B, M]
    return vals.max(-1).values


def _is_max(H, g, rho, d) -> bool:
    """d is feasible and no grid point of the ball does better (beyond rounding), and it is within the grid's
    resolution of the grid's best."""
    best = _brute_max(H, g, rho)
    qd = _q(H, g, d)
    return bool((d.norm(dim=-1) <= rho * (1 + 1e-12)).all() and (qd >= best - 1e-12).all()
                and (qd - best).abs().max() < 1e-5)


def _batch():
    """Problems of every kind, one batch: PSD, indefinite, concave with the maximiser inside the ball, concave on the
    boundary, the hard case (g orthogonal to the top eigenvector), g = 0, a repeated top eigenvalue, random ones."""
    H = [[[2.0, 0.5], [0.5, 1.0]], [[1.0, 0.0], [0.0, -2.0]], [[-4.0, 1.0], [1.0, -3.0]],
         [[-0.5, 0.0], [0.0, -0.2]], [[3.0, 0.0], [0.0, 1.0]], [[2.0, 0.0], [0.0, -1.0]], [[1.5, 0.0], [0.0, 1.5]]]
    g = [[0.7, -0.3], [0.7, -0.3], [0.5, -0.3], [0.9, 0.4], [0.0, 0.4], [0.0, 0.0], [0.0, 0.0]]
    gen = torch.Generator().manual_seed(0)
    M = torch.randn(8, 2, 2, generator=gen, dtype=DT)
    H = torch.cat([torch.tensor(H, dtype=DT), M + M.mT])
    g = torch.cat([torch.tensor(g, dtype=DT), torch.randn(8, 2, generator=gen, dtype=DT)])
    return H, g


def test_trust_region_max_batched_is_the_maximum_of_every_problem():
    H, g = _batch()
    rho = 0.8
    d = trust_region_max(H, g, rho)
    assert _is_max(H, g, rho, d)
    assert torch.allclose(d[2], -torch.linalg.solve(H[2], g[2]), atol=1e-14)     # concave, interior: lam = 0
    assert float(d[4].norm()) == pytest.approx(rho, abs=1e-12)                   # hard case reaches the sphere
    # the check fails on wrong answers: the bisection alone in the hard case, and the unconstrained
    # Newton point of the concave problem whose maximiser lies on the boundary
    wrong = d.clone()
    wrong[4] = torch.tensor([0.0, 0.4 / 2.0], dtype=DT)                         # d(lam = a_max) without the top part
    assert not _is_max(H, g, rho, wrong)
    wrong = d.clone()
    wrong[3] = -torch.linalg.solve(H[3], g[3])                                    # ||.|| > rho: infeasible
    assert not _is_max(H, g, rho, wrong)


def test_trust_region_max_batched_equals_each_problem_alone_and_keeps_the_batch_shape():
    H, g = _batch()
    d = trust_region_max(H.reshape(3, 5, 2, 2), g.reshape(3, 5, 2), 0.8)
    assert d.shape == (3, 5, 2)
    alone = torch.stack([trust_region_max(h, v, 0.8) for h, v in zip(H, g)])
    assert torch.allclose(d.reshape(15, 2), alone, atol=1e-14, rtol=0)


def test_trust_region_max_in_higher_dimension_satisfies_kkt():
    """P = 6, PSD and indefinite: (lam I - H) d = g with lam >= max(lambda_max, 0) and ||d|| = rho."""
    gen = torch.Generator().manual_seed(1)
    M = torch.randn(10, 6, 6, generator=gen, dtype=DT)
    H, g, rho = M + M.mT, torch.randn(10, 6, generator=gen, dtype=DT), 0.3
    d = trust_region_max(H, g, rho)
    Hd = (H @ d.unsqueeze(-1)).squeeze(-1)
    lam = ((Hd + g) * d).sum(-1) / rho ** 2                                      # from lam d = H d + g
    assert torch.allclose(d.norm(dim=-1), torch.full((10,), rho, dtype=DT), atol=1e-12)
    assert float((lam.unsqueeze(-1) * d - Hd - g).abs().max()) < 1e-9
    assert bool((lam >= torch.linalg.eigvalsh(H)[:, -1].clamp_min(0) - 1e-9).all())
    assert not bool((lam >= torch.linalg.eigvalsh(H)[:, -1] + 1e3).any())        # the comparison can fail


def test_cosine_broadcasts_rows_and_reports_a_zero_vector_as_asked():
    gen = torch.Generator().manual_seed(2)
    a, b = torch.randn(4, 3, 5, generator=gen, dtype=DT), torch.randn(4, 1, 5, generator=gen, dtype=DT)
    a[1, 2] = 0.0
    c = cosine(a, b, at_zero=0.0)
    assert c.shape == (4, 3)
    want = torch.tensor([[float(x @ y / (x.norm() * y.norm())) if x.norm() > 0 else 0.0 for x in a[i]]
                         for i, y in enumerate(b[:, 0])], dtype=DT)
    assert torch.allclose(c, want, atol=1e-15, rtol=0)
    assert float(c[1, 2]) == 0.0 and math.isnan(float(cosine(a, b)[1, 2]))        # default: NaN, undefined
    assert not torch.allclose(cosine(a, -b, at_zero=0.0), want)                   # the comparison can fail
    # rows against one vector: the matrix-vector product the drift probe always used, bit for bit
    rows, v = a[0].clone(), b[0, 0]
    assert torch.equal(cosine(rows, v), (rows @ v) / (rows.norm(dim=-1) * v.norm()))
    # float32 rows (a model's weights) are compared in float64
    assert cosine(a.float(), b.float()).dtype == DT
