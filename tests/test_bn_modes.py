"""BatchNorm modes of the probes (--bn-mode train|eval|recalibrate), checked against exact float64 answers on a
tiny BatchNorm network, and every probe run on a BatchNorm checkpoint in each mode without touching the model."""
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedlab_analysis.params import ParamSpace
from fedlab_analysis.probes.common import functional, recalibrate
from fedlab_analysis.probes.curvature import HessianOperator, top_eigenvalues, trace
from fedlab_analysis.probes.landscape import plane_random, surface

GROUP = 4                                     # BatchNorm batch of the train-mode objective


class TinyBN(nn.Module):
    """conv(1->2, 3x3) - BatchNorm2d - relu - linear(8 -> 3): 51 parameters on 1x4x4 inputs."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.bn = nn.BatchNorm2d(2)
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc(F.relu(self.bn(self.conv(x))).flatten(1))


@pytest.fixture(scope="module")
def tiny():
    g = torch.Generator().manual_seed(0)
    model = TinyBN().double()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.7)
        model.bn.running_mean.copy_(torch.tensor([0.3, -0.2], dtype=torch.float64))
        model.bn.running_var.copy_(torch.tensor([1.7, 0.6], dtype=torch.float64))
    X = torch.randn(12, 1, 4, 4, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (12,), generator=g)
    space = ParamSpace.of_model(model)
    theta = space.flatten(dict(model.named_parameters())).detach()
    return model, space, theta, X, y


def _by_hand(space, X, y, mean=None, var=None):
    """The loss written out with F.conv2d / F.batch_norm / F.linear: batch statistics per group of GROUP
    samples (train mode) or the given running statistics (eval mode)."""
    def loss(theta):
        p = space.unflatten(theta)
        total = 0.0
        for xg, yg in zip(X.split(GROUP), y.split(GROUP)):
            h = F.conv2d(xg, p["conv.weight"], p["conv.bias"])
            h = F.batch_norm(h, mean, var, p["bn.weight"], p["bn.bias"], training=mean is None, eps=1e-5)
            z = F.linear(F.relu(h).flatten(1), p["fc.weight"], p["fc.bias"])
            total = total + F.cross_entropy(z, yg) * len(yg) / len(y)
        return total
    return loss


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_eigenvalue_and_trace_match_the_exact_hessian_of_the_mode(tiny, mode):
    model, space, theta, X, y = tiny
    bn = model.bn
    exact = _by_hand(space, X, y, *((None, None) if mode == "train" else (bn.running_mean, bn.running_var)))
    H = torch.autograd.functional.hessian(exact, theta)
    ev = np.linalg.eigvalsh(H.numpy())
    f = functional(model, space, mode, GROUP)
    op = HessianOperator(f, theta, (X, y), batch_size=5)    # 5 -> chunks of whole groups (4)
    assert abs(float(exact(theta)) - float(F.cross_entropy(f(theta, X), y))) < 1e-12
    top = top_eigenvalues(op, 2, tol=1e-10, max_iter=space.P)
    assert np.allclose(top["eigenvalues"], ev[::-1][:2], rtol=1e-9, atol=1e-10)
    assert abs(trace(op, space.P)["trace"] - float(torch.trace(H))) < 1e-9
    if mode == "train":        # the train-mode objective is not the eval-mode one on this network
        H_eval = torch.autograd.functional.hessian(_by_hand(space, X, y, bn.running_mean, bn.running_var), theta)
        assert abs(np.linalg.eigvalsh(H_eval.numpy())[-1] - ev[-1]) > 1e-3


def test_recalibrated_statistics_are_the_group_averages(tiny):
    model, space, theta, X, _ = tiny
    m = recalibrate(model, space, theta, X, GROUP)
    h = model.conv(X).detach()
    means = torch.stack([g.mean((0, 2, 3)) for g in h.split(GROUP)])
    vars_ = torch.stack([g.var((0, 2, 3), unbiased=True) for g in h.split(GROUP)])
    assert torch.allclose(m.bn.running_mean, means.mean(0), atol=1e-12)
    assert torch.allclose(m.bn.running_var, vars_.mean(0), atol=1e-12)
    assert not m.training and torch.equal(model.bn.running_mean, torch.tensor([0.3, -0.2], dtype=torch.float64))


@pytest.mark.parametrize("batch_points", [1, 4])
def test_surface_in_train_mode_leaves_the_model_alone(tiny, batch_points):
    model, space, theta, X, y = tiny
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    f = functional(model, space, "train", GROUP)
    d1, d2 = plane_random(space, theta, 0)
    r = surface(f, theta, d1, d2, (X, y), grid=3, batch_points=batch_points, chunk=7)
    assert abs(r["center_loss"] - float(_by_hand(space, X, y)(theta))) < 1e-12
    assert model.training and all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    model.eval()


# ---- every probe on a BatchNorm checkpoint, in every mode --------------------------------------------------
@pytest.fixture(scope="module")
def bn_run(tmp_path_factory):
    from fedlab_analysis.config import RunConfig
    from fedlab_analysis.trainers.loop import train
    out = tmp_path_factory.mktemp("bn_run")
    train(RunConfig(algo="fedcm", dataset="digits", model="resnet20", clients=4, active_ratio=1.0, rounds=1,
                    local_steps=2, batch_size=8, lr=0.05, seed=0, quiet=True, keep_clients=True,
                    eval_train_samples=64), out)
    return out


QUICK = {"hessian": ["--max-iter", "6"], "trace": ["--products", "6"], "density": ["--steps", "4", "--vectors", "1"],
         "landscape": ["--grid", "3"], "sharpness": ["--method", "one_step"], "drift": [],
         "stability": ["--rounds", "0"], "margin": ["--margin", "1.0"]}


def _probe(name, run_dir, tmp_path, *flags):
    from fedlab_analysis.probe import main
    path = tmp_path / f"{name}.json"
    samples = [] if name == "stability" else ["--samples", "8"]     # stability evaluates the full sets
    code = main([name, str(run_dir), *samples, "--quiet", "--json", str(path), *QUICK.get(name, []), *flags])
    return code, (json.loads(path.read_text()) if path.exists() else None)


@pytest.mark.parametrize("mode", ["train", "eval", "recalibrate"])
def test_curvature_and_landscape_run_in_every_bn_mode(bn_run, tmp_path, mode):
    for name in ("hessian", "landscape"):
        code, r = _probe(name, bn_run, tmp_path, "--bn-mode", mode)
        assert code == 0 and r["bn_mode"] == mode and r["n_samples"] == 8 and r["batchnorm"]
        assert r["bn_batch"] == (None if mode == "eval" else 8)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["train", "eval", "recalibrate"])
@pytest.mark.parametrize("name", ["trace", "density", "sharpness", "drift", "stability", "margin"])
def test_every_other_probe_runs_in_every_bn_mode(bn_run, tmp_path, name, mode):
    code, r = _probe(name, bn_run, tmp_path, "--bn-mode", mode)
    assert code == 0 and r["bn_mode"] == mode


def test_bn_modes_give_different_numbers_and_train_is_the_default(bn_run, tmp_path):
    vals = {m: _probe("sharpness", bn_run, tmp_path, "--bn-mode", m)[1]["global"]["loss"]
            for m in ("train", "eval", "recalibrate")}
    assert _probe("sharpness", bn_run, tmp_path)[1]["global"]["loss"] == vals["train"]
    assert len({round(v, 6) for v in vals.values()}) == 3


def test_no_probe_changes_the_model_it_is_given(bn_run, tmp_path):
    """Each probe's function on one Bundle: every parameter, buffer and data tensor is unchanged after it."""
    from fedlab_analysis import checkpoint
    import dataclasses

    from fedlab_analysis.probes.line import options_of, parser
    from fedlab_analysis.probes import PROBES
    from fedlab_analysis.probes.common import rebuild
    b = rebuild(checkpoint.load(bn_run), samples=8, bn_mode="train")
    b.model.train()                                      # a caller's model in train mode, as in the issue
    snap = lambda: [t.clone() for t in (*b.model.state_dict().values(), b.theta, b.X, b.y, b.clients)]  # noqa: E731
    before = snap()
    for name in ("hessian", "trace", "density", "landscape", "consensus", "sharpness", "drift", "margin"):
        opts = options_of(parser().parse_args([name, str(bn_run), *QUICK.get(name, [])]))
        PROBES[name].compute(b, dataclasses.replace(opts, data="train", seed=0, samples=8, bn_mode="train"))
        assert all(torch.equal(u, v) for u, v in zip(before, snap())), name
    assert b.model.training


# ---- one sample set for every mode; train-mode groups within one client -----------------------------------
def test_same_samples_and_seed_pick_the_same_samples_in_every_mode(bn_run):
    from fedlab_analysis import checkpoint
    from fedlab_analysis.probes.common import rebuild
    ck = checkpoint.load(bn_run)
    b = {m: rebuild(ck, samples=40, seed=3, bn_mode=m) for m in ("train", "eval", "recalibrate")}
    sets = {m: set(x.sample_index.tolist()) for m, x in b.items()}
    assert len(sets["train"]) == 40 and sets["train"] == sets["eval"] == sets["recalibrate"]
    assert b["eval"].sample_index.tolist() == sorted(sets["eval"])        # ascending: order-free recalibration
    assert sum(b["train"].layout) == 40 and b["eval"].layout is None
    assert set(rebuild(ck, samples=40, seed=4, bn_mode="eval").sample_index.tolist()) != sets["eval"]


def test_train_mode_groups_never_cross_a_client(bn_run):
    """The samples are client by client; the objective equals the by-hand mean over samples of every client's
    groups of bn_batch (the last one short), and a layout-blind grouping (the old behaviour) differs."""
    from fedlab_analysis import checkpoint
    from fedlab_analysis.probes.common import chunks, owners, rebuild
    from fedlab_analysis.probes.sharpness import DataObjective
    ck = checkpoint.load(bn_run)
    b = rebuild(ck, samples=50, seed=0, bn_mode="train", bn_batch=8, dtype=torch.float64)
    own = owners(ck, 10**5)[b.sample_index]
    assert (own.diff() >= 0).all() and any(n % 8 for n in b.layout)       # client order, some short last group
    m = b.model.double().train()
    for mod in m.modules():
        if isinstance(mod, nn.modules.batchnorm._BatchNorm):
            mod.track_running_stats = False
    named = b.space.unflatten(b.theta)
    with torch.no_grad():
        for n_, p in m.named_parameters():
            p.copy_(named[n_])
        want = 0.0
        for xc, yc in zip(b.X.split(b.layout), b.y.split(b.layout)):
            for xg, yg in zip(xc.split(8), yc.split(8)):
                want += float(F.cross_entropy(m(xg), yg, reduction="sum")) / len(b.y)
        blind = sum(float(F.cross_entropy(m(xg), yg, reduction="sum")) for xg, yg in
                    zip(b.X.split(8), b.y.split(8))) / len(b.y)
    got = [DataObjective(b.f, b.X, b.y, batch_size=bs).value(b.theta) for bs in (8, 16, 4096)]
    assert all(abs(g - want) < 1e-12 for g in got), (got, want)
    assert abs(blind - want) > 1e-6
    sizes = chunks(b.f, len(b.y), 16)
    assert sum(sizes) == 50 and all(s <= 16 for s in sizes)
    edges = set(torch.tensor(b.layout).cumsum(0).tolist())
    assert edges <= set(torch.tensor(sizes).cumsum(0).tolist())          # every client boundary is a chunk edge
