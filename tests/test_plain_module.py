"""The Python entry points on a plain nn.Module (issue 36): ``fedlab_analysis.hessian(model, loader, ...)`` and its
siblings on a module with BatchNorm and a DataLoader give the exact Hessian's numbers (float64,
torch.autograd.functional.hessian of the objective written out by hand) in the BatchNorm modes the probes offer, and
leave the module as it was: parameters, buffers and train/eval mode."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import fedlab_analysis as fl
from fedlab_analysis.errors import UserError

N, B = 24, 8                      # 3 batches of 8: train-mode BatchNorm normalises each by its own statistics


def _setup():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, 4, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (N,), generator=g)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5), nn.Tanh(), nn.Linear(5, 3)).double()
    with torch.no_grad():                         # running statistics away from their initial 0 / 1
        model.train()
        for xb in x.split(B):
            model(xb * 2 + 1)
        model[1].weight.mul_(1.5)
    return model, x, y, DataLoader(TensorDataset(x, y), batch_size=B)


def _exact(model, x, y, bn_mode):
    """The objective the probes define, written out: mean over samples of the cross-entropy, BatchNorm by each
    batch of B (train) or by the module's running statistics (eval); its value, gradient, Hessian at the module."""
    names = [n for n, _ in model.named_parameters()]
    shapes = [p.shape for _, p in model.named_parameters()]
    w0 = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    rm, rv = model[1].running_mean.clone(), model[1].running_var.clone()
    if bn_mode == "recalibrate":     # torch.optim.swa_utils.update_bn's rule: the average of the batches' statistics
        with torch.no_grad():
            h = [xb @ model[0].weight.T + model[0].bias for xb in x.split(B)]
            rm = torch.stack([t.mean(0) for t in h]).mean(0)
            rv = torch.stack([t.var(0, unbiased=True) for t in h]).mean(0)

    def loss(w):
        p, i = {}, 0
        for n, s in zip(names, shapes):
            p[n] = w[i:i + s.numel()].view(s)
            i += s.numel()
        total = 0.0
        for xb, yb in zip(x.split(B), y.split(B)):
            h = xb @ p["0.weight"].T + p["0.bias"]
            h = F.batch_norm(h, None if bn_mode == "train" else rm, None if bn_mode == "train" else rv,
                             p["1.weight"], p["1.bias"], training=bn_mode == "train", eps=1e-5)
            out = torch.tanh(h) @ p["3.weight"].T + p["3.bias"]
            total = total + F.cross_entropy(out, yb, reduction="sum")
        return total / N
    return w0, loss, torch.autograd.functional.hessian(loss, w0)


def _snapshot(model):
    return ({k: v.clone() for k, v in model.state_dict().items()}, [m.training for m in model.modules()])


def _untouched(model, snap):
    state, modes = snap
    assert [m.training for m in model.modules()] == modes
    now = model.state_dict()
    assert now.keys() == state.keys() and all(torch.equal(now[k], state[k]) for k in state)


@pytest.mark.parametrize("bn_mode", ["train", "eval", "recalibrate"])
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_hessian_and_trace_of_a_module_with_batchnorm_against_the_exact_hessian(bn_mode, mode):
    model, x, y, loader = _setup()
    model.train(mode == "train")
    snap = _snapshot(model)
    _, _, H = _exact(model, x, y, bn_mode)
    exact = torch.linalg.eigvalsh(H).flip(0)
    r = fl.hessian(model, loader, top_k=3, tol=1e-10, bn_mode=bn_mode)
    _untouched(model, snap)
    assert r["bn_mode"] == bn_mode and r["n_samples"] == N and r["n_params"] == H.shape[0]
    assert r["bn_batch"] == (None if bn_mode == "eval" else B)             # the loader's batches
    assert r["eigenvalues"] == pytest.approx(exact[:3].tolist(), rel=1e-8, abs=1e-10)
    t = fl.trace(model, loader, products=3 * H.shape[0], bn_mode=bn_mode)  # Hutch++ with >= P products: exact
    _untouched(model, snap)
    assert t["trace"] == pytest.approx(float(H.trace()), rel=1e-8)


def test_sharpness_landscape_and_density_on_the_exact_objective():
    model, x, y, loader = _setup()
    snap = _snapshot(model)
    w0, loss, H = _exact(model, x, y, "train")
    g = torch.func.grad(loss)(w0)
    rho = 0.05
    s = fl.sharpness(model, loader, rho=rho, method="one_step")     # SAM's step: w + rho g / ||g||
    assert s["global"]["sharpness"] == pytest.approx(float(loss(w0 + rho * g / g.norm()) - loss(w0)), rel=1e-9)
    assert s["global"]["loss"] == pytest.approx(float(loss(w0)), rel=1e-12)
    q = fl.sharpness(model, loader, rho=rho, method="quadratic")    # max of g'd + d'Hd/2 on ||d|| <= rho
    d = q["global"]
    assert d["sharpness"] >= s["global"]["sharpness"] - 1e-6 * abs(s["global"]["sharpness"])
    land = fl.landscape(model, loader, grid=3)
    assert land["center_loss"] == pytest.approx(float(loss(w0)), rel=1e-12)
    dens = fl.density(model, loader, steps=H.shape[0], vectors=2)
    assert dens["nodes"] is not None and max(max(n) for n in dens["nodes"]) == pytest.approx(
        float(torch.linalg.eigvalsh(H)[-1]), rel=1e-6)
    _untouched(model, snap)


def test_a_tuple_is_one_batch_and_a_callable_loss_is_used():
    model, x, y, loader = _setup()
    snap = _snapshot(model)
    whole = fl.hessian(model, (x, y), top_k=1, tol=1e-10)             # bn_batch = every sample: model(x) as is
    by_loader = fl.hessian(model, (x, y), top_k=1, tol=1e-10, bn_batch=B)
    assert whole["bn_batch"] == N and by_loader["eigenvalues"] == pytest.approx(
        fl.hessian(model, loader, top_k=1, tol=1e-10)["eigenvalues"], rel=1e-10)
    assert whole["eigenvalues"][0] != pytest.approx(by_loader["eigenvalues"][0], rel=1e-6)
    mean_ce = nn.CrossEntropyLoss()
    flat = lambda r: [v for row in r["loss"] for v in row]                          # noqa: E731
    assert flat(fl.landscape(model, loader, grid=3, loss=mean_ce)) == pytest.approx(
        flat(fl.landscape(model, loader, grid=3)), rel=1e-12)
    assert fl.trace(model, loader, products=8, loss=mean_ce)["trace"] == pytest.approx(
        fl.trace(model, loader, products=8)["trace"], rel=1e-12)
    _untouched(model, snap)


def test_refusals_are_one_line_errors():
    model, x, y, loader = _setup()
    with pytest.raises(UserError, match="unknown option"):
        fl.hessian(model, loader, topk=3)
    with pytest.raises(UserError, match="needs a federated run's clients"):
        fl.sharpness(model, loader, local=True)
    with pytest.raises(UserError, match="tuple"):
        fl.trace(model, [x])
    plain = nn.Linear(4, 3).double()
    with pytest.raises(UserError, match="--bn-mode cannot act"):
        fl.hessian(plain, (x, y), bn_mode="eval")
