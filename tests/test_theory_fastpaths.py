"""The two speed paths of the theory toys change no bit of any result, and each check here is shown able to fail.

- ``toys._Stacked`` (HeteroQuadratics.grad's cached Hessian block for ``bmm``) against ``toys._mv`` (``A @ v``),
  bit for bit over the shapes the simulators use, in and out of inference mode, and still differentiable;
  the same comparison rejects a block built from the transposed A.
- ``toys.no_autograd`` (a simulator run under inference mode, its outputs copied out): ordinary tensors with the
  inner function's exact values AND strides (a reduction over a strided view sums in another order than over a
  dense copy, so a plain ``clone`` would move last digits: the layout check rejects it); skipped for a
  problem whose gradient is autograd.
"""
import pytest
import torch

from fedlab_analysis.theory import fedsmoo, toys
from fedlab_analysis.theory.toys import DT, _mv, _Stacked, no_autograd


def stacked_mismatches(make_block) -> list:
    """Shapes (d, A batch, v batch) where ``make_block(A)`` differs from ``_mv(A, v)`` in any bit or in shape."""
    gen = torch.Generator().manual_seed(0)
    bad = []
    for d in (1, 3, 10, 20):
        for a_batch in ((7,), (3, 7), (1, 7)):
            A = torch.randn(*a_batch, d, d, generator=gen, dtype=DT)
            st = make_block(A)
            for v_batch in ((7,), (2, 7), (16, 7), (4, 3, 7), (64, 2, 3, 7)):
                v = torch.randn(*v_batch, d, generator=gen, dtype=DT)
                try:
                    ref = _mv(A, v)
                except RuntimeError:                     # the batches do not broadcast
                    continue
                views = [v, v.unsqueeze(0).expand(2, *v.shape)[1]]
                if v.dim() > 2:
                    views.append(v.transpose(0, -2).contiguous().transpose(0, -2))     # non-contiguous
                for vv in views:
                    for inference in (False, True):
                        with torch.inference_mode(inference):
                            out = st(vv)
                        if out.shape != ref.shape or not torch.equal(out, ref):
                            bad.append((d, a_batch, v_batch, inference))
    return bad


def test_stacked_is_mv_bit_for_bit():
    assert stacked_mismatches(_Stacked) == []


def test_stacked_check_catches_a_wrong_block():
    assert stacked_mismatches(lambda A: _Stacked(A.transpose(-1, -2).contiguous()))


def test_stacked_after_inference_mode_still_differentiates():
    A = torch.randn(5, 3, 3, dtype=DT)
    st = _Stacked(A)
    W = torch.randn(2, 5, 3, dtype=DT)
    with torch.inference_mode():
        st(W)                                            # caches an inference-mode block for this shape
    W.requires_grad_(True)
    st(W).sum().backward()
    assert torch.allclose(W.grad, A.sum(-2).expand(2, 5, 3))


def test_quadratic_grad_rebuilds_its_block_when_A_changes():
    prob = toys.make_quadratics(4, 3, shared=False, seed=1)
    W = torch.randn(2, 4, 3, dtype=DT)
    prob.grad(W)
    prob.A = 2 * prob.A
    assert torch.equal(prob.grad(W), _mv(prob.A, W) - prob.c)


def _strided(prob, n):
    """A toy 'simulator': its outputs include strided views, whose reductions depend on their layout."""
    x = torch.randn(n, 3, 5, dtype=DT, generator=torch.Generator().manual_seed(n)) * prob
    return {"view": x[:, :, 0], "full": x, "pair": (x.mean(), [x.sum(0)]), "n": n}


def layout_mismatches(copy) -> list:
    fast = no_autograd(_strided) if copy is None else copy
    out, ref = fast(1.5, 7), _strided(1.5, 7)
    bad = []
    for got, want in ((out["view"], ref["view"]), (out["full"], ref["full"]), (out["pair"][1][0], ref["pair"][1][0])):
        if got.is_inference() or got.stride() != want.stride() or not torch.equal(got, want):
            bad.append(tuple(want.shape))
    if out["n"] != 7 or float(out["view"].sum()) != float(ref["view"].sum()):
        bad.append("sum")
    return bad


def test_no_autograd_copies_keep_values_and_layout():
    assert layout_mismatches(None) == []


def test_layout_check_catches_a_dense_clone():
    def cloned(prob, n):
        with torch.inference_mode():
            out = _strided(prob, n)
        return {**out, "view": out["view"].clone(memory_format=torch.contiguous_format),
                "full": out["full"].clone(), "pair": (out["pair"][0].clone(), [out["pair"][1][0].clone()])}
    assert (7, 3) in layout_mismatches(cloned)


def test_no_autograd_outputs_are_writable_and_differentiable():
    prob = fedsmoo.make_toy(6, 3, seed=0)
    tr = fedsmoo.simulate(prob, T=3, K=2, r=0.05)
    assert not tr["w"].is_inference()
    tr["w"][0] += 1.0                                    # an inference tensor would refuse this
    w = tr["w"][-1].clone().requires_grad_(True)
    prob.f(w).backward()
    assert torch.isfinite(w.grad).all()


def test_no_autograd_leaves_autograd_problems_alone():
    class Net:                                           # a problem whose grad() needs autograd
        autograd = True

    seen = []
    no_autograd(lambda prob: seen.append(torch.is_inference_mode_enabled()))(Net())
    no_autograd(lambda prob: seen.append(torch.is_inference_mode_enabled()))(object())
    assert seen == [False, True]


@pytest.mark.parametrize("kw", [{"r": [0.0, 0.1], "w0": torch.zeros(2, 5, dtype=DT), "n_active": 4},
                                {"local": "exact", "r": 0.1}, {"method": "fedsam", "probe_cos": True}])
def test_fedsmoo_simulate_equals_its_undecorated_self(kw):
    prob = fedsmoo.make_toy(6, 5, seed=3)
    fast, slow = fedsmoo.simulate(prob, T=5, K=3, seed=3, **kw), fedsmoo.simulate.__wrapped__(prob, T=5, K=3, seed=3,
                                                                                              **kw)
    for k, v in slow.items():
        torch.testing.assert_close(fast[k], v, rtol=0, atol=0, equal_nan=True)
        assert fast[k].stride() == v.stride(), k
    if kw.get("probe_cos"):
        assert float(fast["cos_g"].mean()) == float(slow["cos_g"].mean())
