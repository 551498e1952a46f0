"""Model registry: exact parameter counts, shapes, pure-function use, double backward, errors, specs."""
import inspect
import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedlab_analysis.errors import UserError
from fedlab_analysis.models import MODELS, build_model, init_parameters, model_spec
from fedlab_analysis.params import ParamSpace, functional

# each model on its intended input, with non-default options where it has any
INTENDED = [
    ("logreg", (1, 8, 8), {"bias": False}),
    ("mlp", (40,), {"widths": [16, 8]}),
    ("cnn", (3, 32, 32), {}),
    ("cnn1d", (1, 40), {"channels": 8}),
    ("resnet18gn", (3, 32, 32), {"stem": "cifar"}),
    ("resnet20", (3, 32, 32), {"norm": "gn"}),
    ("vgg11", (3, 32, 32), {"norm": "gn"}),
]


def n_params(model):
    return sum(p.numel() for p in model.parameters())


@pytest.fixture(scope="module")
def resnet18gn():
    return build_model("resnet18gn", (3, 32, 32), 10)


def test_registry_names():
    assert sorted(MODELS) == sorted(["logreg", "mlp", "cnn", "cnn1d", "resnet18gn", "resnet20", "vgg11"])


# ---- exact parameter counts ---------------------------------------------------------------
def test_resnet18gn_count_and_layout(resnet18gn):
    assert n_params(resnet18gn) == 11_181_642  # FL-Simulator's ResNet18 (torchvision, BN -> GN(2))
    names = dict(resnet18gn.named_parameters())
    for name in ["conv1.weight", "bn1.weight", "layer1.0.conv1.weight", "layer2.0.downsample.0.weight",
                 "layer2.0.downsample.1.bias", "layer4.1.bn2.weight", "fc.weight", "fc.bias"]:
        assert name in names
    assert names["conv1.weight"].shape == (64, 3, 7, 7)
    norms = [m for m in resnet18gn.modules() if isinstance(m, (nn.GroupNorm, nn.BatchNorm2d))]
    assert len(norms) == 20 and all(isinstance(m, nn.GroupNorm) and m.num_groups == 2 for m in norms)
    assert list(resnet18gn.buffers()) == []
    # the CIFAR stem only changes conv1: 64*3*(7*7 - 3*3) fewer weights
    cifar = MODELS["resnet18gn"]
    with torch.device("meta"):
        assert n_params(cifar((3, 32, 32), 10, stem="cifar")) == 11_181_642 - 64 * 3 * 40


def test_small_model_counts():
    assert n_params(build_model("cnn", (3, 32, 32), 10)) == 797_962
    # 1-channel 28x28: fc1 sees 64*4*4 inputs
    expect = (1 * 25 + 1) * 64 + (64 * 25 + 1) * 64 + (1024 + 1) * 384 + (384 + 1) * 192 + (192 + 1) * 10
    assert n_params(build_model("cnn", (1, 28, 28), 10)) == expect
    assert n_params(build_model("cnn1d", (1, 40), 10)) == 5_210  # Greydanus's ConvBase, 25 channels
    assert n_params(build_model("logreg", (1, 8, 8), 10)) == 65 * 10
    assert n_params(build_model("mlp", (40,), 10)) == 41 * 200 + 201 * 200 + 201 * 10


def test_resnet20_counts_and_fedals_layers():
    model = build_model("resnet20", (3, 32, 32), 10)
    assert n_params(model) == 269_722  # option A, BN (FedALS note: conv 267,696 + BN 1,376 + FC 650)
    space = ParamSpace.of_model(model, phi_layers=19)
    assert space.n_blocks == 20  # 19 convs + fc: the paper's 20 layers
    head = space.select("group:h")
    assert [l.name for l in head] == ["fc.weight", "fc.bias"] and sum(l.numel for l in head) == 650
    assert space["layer1.0.bn1.weight"].block == space["layer1.0.conv1.weight"].block
    assert n_params(build_model("resnet20", (3, 32, 32), 10, shortcut="b")) == 272_474
    release = build_model("resnet20", (3, 32, 32), 10, shortcut="conv3x3")
    assert n_params(release) == 269_722 + (16 * 32 * 9 + 64) + (32 * 64 * 9 + 128)
    assert ParamSpace.of_model(release).n_blocks == 22


def test_vgg11_counts():
    convs = [(3, 64), (64, 128), (128, 256), (256, 256), (256, 512), (512, 512), (512, 512), (512, 512)]
    plain = sum(9 * a * b + b for a, b in convs) + 512 * 10 + 10
    assert plain == 9_225_610
    assert n_params(build_model("vgg11", (3, 32, 32), 10)) == plain
    assert n_params(build_model("vgg11", (3, 32, 32), 10, norm="bn")) == plain + 2 * sum(b for _, b in convs)
    assert ParamSpace.of_model(build_model("vgg11", (3, 32, 32), 10)).n_blocks == 9


# ---- shapes and pure-function use ---------------------------------------------------------
@pytest.mark.parametrize("name,shape,kwargs", INTENDED)
def test_output_shape(name, shape, kwargs):
    model = build_model(name, shape, 7, **kwargs)
    x = torch.randn(2, *shape, generator=torch.Generator().manual_seed(0))
    assert model(x).shape == (2, 7)


def test_functional_equals_forward_resnets(resnet18gn):
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    for model in (resnet18gn, build_model("resnet20", (3, 32, 32), 10, norm="gn")):
        space = ParamSpace.of_model(model)
        theta = space.flatten(dict(model.named_parameters())).detach()
        torch.testing.assert_close(functional(model, space)(theta, x), model(x))


@pytest.mark.parametrize("name,shape,kwargs", [("mlp", (40,), {"widths": [16, 8]}),
                                               ("cnn1d", (1, 40), {"channels": 8}),
                                               ("resnet20", (3, 16, 16), {"norm": "gn"}),
                                               ("vgg11", (3, 32, 32), {"norm": "gn"})])
def test_vmap_over_stacked_parameters(name, shape, kwargs):
    g = torch.Generator().manual_seed(2)
    model = build_model(name, shape, 5, seed=3, **kwargs)
    space = ParamSpace.of_model(model)
    f = functional(model, space)
    theta = space.flatten(dict(model.named_parameters())).detach()
    thetas = torch.stack([theta, theta + 0.05 * torch.randn(space.P, generator=g)])
    x = torch.randn(2, *shape, generator=g)
    batched = torch.func.vmap(f, in_dims=(0, None))(thetas, x)
    torch.testing.assert_close(batched, torch.stack([f(t, x) for t in thetas]))


# ---- double backward ----------------------------------------------------------------------
def _hvp_and_loss(name, shape, kwargs):
    g = torch.Generator().manual_seed(4)
    model = build_model(name, shape, 3, seed=5, **kwargs).double()
    space = ParamSpace.of_model(model)
    f = functional(model, space)
    x = torch.randn(6, *shape, generator=g, dtype=torch.float64)
    y = torch.arange(6) % 3

    def loss(theta):
        return F.cross_entropy(f(theta, x), y)

    theta = space.flatten(dict(model.named_parameters())).detach().requires_grad_(True)
    v = torch.randn(space.P, generator=g, dtype=torch.float64)
    (grad,) = torch.autograd.grad(loss(theta), theta, create_graph=True)
    (hv,) = torch.autograd.grad(grad @ v, theta)
    return loss, theta.detach(), v, hv


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")  # torch.func internals
@pytest.mark.parametrize("name,shape,kwargs", [("mlp", (4,), {"widths": [5, 3]}),
                                               ("cnn1d", (1, 12), {"channels": 2})])
def test_double_backward_hvp_equals_exact_hessian(name, shape, kwargs):
    loss, theta, v, hv = _hvp_and_loss(name, shape, kwargs)
    H = torch.func.hessian(loss)(theta)
    assert hv.abs().sum() > 0
    torch.testing.assert_close(hv, H @ v, rtol=1e-10, atol=1e-12)


def test_double_backward_full_size_cnn1d_is_finite():
    hv = _hvp_and_loss("cnn1d", (1, 40), {})[-1]
    assert torch.isfinite(hv).all() and hv.abs().sum() > 0


# ---- options ------------------------------------------------------------------------------
def test_bias_free_mlp_is_positively_homogeneous():
    model = build_model("mlp", (6,), 4, widths=[8, 8], bias=False).double()
    assert not [n for n, _ in model.named_parameters() if n.endswith("bias")]
    assert [n for n, _ in model.named_parameters()] == ["fc1.weight", "fc2.weight", "fc3.weight"]
    x = torch.randn(5, 6, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    torch.testing.assert_close(model(2.5 * x), 2.5 * model(x), rtol=1e-14, atol=1e-14)


def test_option_a_shortcut_is_subsample_and_zero_pad():
    model = build_model("resnet20", (3, 16, 16), 10, norm="gn").double()
    block = model.layer2[0]  # 16 -> 32 channels, stride 2
    with torch.no_grad():
        block.conv2.weight.zero_()  # residual branch is GN(0) = 0
    x = torch.randn(2, 16, 8, 8, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    zeros = torch.zeros(2, 8, 4, 4, dtype=torch.float64)
    expect = F.relu(torch.cat([zeros, x[:, :, ::2, ::2], zeros], dim=1))
    torch.testing.assert_close(block(x), expect, rtol=0, atol=0)
    assert block.downsample is None


# ---- initialisation -----------------------------------------------------------------------
def test_seeded_init_is_local_and_reproducible():
    rng_state = torch.get_rng_state()
    a = build_model("resnet20", (3, 32, 32), 10, seed=11)
    b = build_model("resnet20", (3, 32, 32), 10, seed=torch.Generator().manual_seed(11))
    c = build_model("resnet20", (3, 32, 32), 10, seed=12)
    assert torch.equal(rng_state, torch.get_rng_state())
    for k, t in a.state_dict().items():
        assert torch.equal(t, b.state_dict()[k])
    assert not torch.equal(a.conv1.weight, c.conv1.weight)
    assert torch.equal(a.bn1.running_var, torch.ones(16)) and int(a.bn1.num_batches_tracked) == 0
    assert torch.equal(a.bn1.running_mean, torch.zeros(16))  # the dry forward ran in eval mode
    assert a.training


def test_init_schemes(resnet18gn):
    w = resnet18gn.layer4[1].conv2.weight  # torchvision: N(0, 2 / fan_out), fan_out = 512 * 9
    assert abs(w.std().item() / math.sqrt(2 / (512 * 9)) - 1) < 0.01
    conv = build_model("vgg11", (3, 32, 32), 10).conv8  # pytorch default: U(+-1/sqrt(fan_in))
    bound = 1 / math.sqrt(512 * 9)
    assert conv.weight.abs().max() <= bound and conv.weight.abs().max() > 0.99 * bound
    assert conv.bias.abs().max() <= bound
    with pytest.raises(TypeError, match="no rule"):
        init_parameters(nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2)))
    with pytest.raises(UserError, match="scheme='xavier'"):
        init_parameters(nn.Linear(2, 2), scheme="xavier")


# ---- errors -------------------------------------------------------------------------------
@pytest.mark.parametrize("args,kwargs,match", [
    (("resnet50", (3, 32, 32), 10), {}, "unknown 'resnet50'; choose one of logreg"),
    (("cnn", (1, 40), 10), {}, r"cnn: input shape \[1, 40\] does not fit; cnn expects \[C, H, W\]"),
    (("cnn", (3, 8, 8), 10), {}, r"input shape \[3, 8, 8\] does not fit"),
    (("cnn1d", (40,), 10), {}, r"reshape \[L\] inputs to \[1, L\]"),
    (("vgg11", (3, 16, 16), 10), {}, "H, W >= 32"),
    (("resnet20", (3, 32), 10), {}, r"resnet20: input shape \[3, 32\] does not fit"),
    (("mlp", (40,), 10), {"depth": 3}, "unknown option 'depth'; mlp takes widths, bias"),
    (("cnn", (3, 32, 32), 10), {"bias": False}, "cnn takes no options"),
    (("mlp", (40,), 10), {"widths": [200, 0]}, "widths must be a list of positive integers"),
    (("mlp", (40,), 10), {"bias": "no"}, "bias must be true or false"),
    (("resnet20", (3, 32, 32), 10), {"norm": "ln"}, "norm='ln' is not one of 'bn', 'gn'"),
    (("resnet18gn", (3, 32, 32), 10), {"stem": "tiny"}, "stem='tiny'"),
    (("logreg", (0, 3), 10), {}, "input_shape must be"),
    (("logreg", (8,), 0), {}, "n_classes must be a positive integer"),
])
def test_bad_input_gives_user_error(args, kwargs, match):
    with pytest.raises(UserError, match=match) as err:
        build_model(*args, **kwargs)
    assert str(err.value).startswith("--model") and "\n" not in str(err.value)


def test_dry_forward_turns_shape_errors_into_user_error(monkeypatch):
    class Broken(nn.Module):  # builds fine, fails on its first forward
        key, ndim, expects, init = "broken", None, "[9] vectors", "pytorch"

        def __init__(self, input_shape, n_classes):
            super().__init__()
            self.fc = nn.Linear(9, n_classes)

        def forward(self, x):
            return self.fc(x)

    monkeypatch.setitem(MODELS, "broken", Broken)
    with pytest.raises(UserError, match=r"--model broken: input shape \[4\] does not fit; broken expects \[9\]"):
        build_model("broken", (4,), 3)
    assert build_model("broken", (9,), 3)(torch.zeros(1, 9)).shape == (1, 3)


# ---- specs --------------------------------------------------------------------------------
@pytest.mark.parametrize("name,shape,kwargs", INTENDED)
def test_model_spec_round_trip(name, shape, kwargs):
    model = build_model(name, shape, 7, **kwargs)
    spec = json.loads(json.dumps(model_spec(model)))  # plain data
    assert spec["name"] == name and spec["input_shape"] == list(shape) and spec["n_classes"] == 7
    options = set(inspect.signature(MODELS[name]).parameters) - {"input_shape", "n_classes"}
    assert set(spec["kwargs"]) == options  # defaults resolved, so later default changes cannot bite
    again = build_model(spec["name"], spec["input_shape"], spec["n_classes"], **spec["kwargs"])
    assert {k: t.shape for k, t in again.state_dict().items()} == \
        {k: t.shape for k, t in model.state_dict().items()}
    assert model_spec(again) == spec


def test_numpy_integers_are_accepted_and_stored_as_int():
    spec = model_spec(build_model("logreg", (np.int64(40),), np.int64(3)))
    assert spec["input_shape"] == [40] and spec["n_classes"] == 3 and type(spec["n_classes"]) is int


def test_model_spec_needs_build_model():
    with pytest.raises(UserError, match="was not made by build_model"):
        model_spec(nn.Linear(2, 2))
