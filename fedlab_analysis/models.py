"""Model registry: every network the five papers train, written here (torchvision is never used).

    model = build_model("resnet18gn", (3, 32, 32), 10, stem="imagenet", seed=0)
    spec = model_spec(model)          # plain data, stored in checkpoints
    same = build_model(spec["name"], spec["input_shape"], spec["n_classes"], **spec["kwargs"])

A model is used as a pure function of one flat vector (``params.functional``), so every forward
here is free of in-place ops on activations, ``.data`` and Python-side state: double backward
(Hessian-vector products) works everywhere, and ``torch.func.vmap`` over stacked parameters works
for every model without BatchNorm.

Parameter names follow torchvision (``conv1.weight``, ``layer1.0.bn1.weight``,
``layer2.0.downsample.0.weight``, ``fc.weight``); in the ResNets ``bn*`` names the normalisation
layer whatever its kind, so FL-Simulator / torchvision state_dicts map one to one. FedALS blocks
(params.py) start at every >=2-D parameter, so a block is one conv/linear weight plus the
normalisation after it.

Initialisation draws from a local ``torch.Generator`` (``seed``); the global RNG is never touched:
modules are built on the meta device and then filled by :func:`init_parameters`.
"""
from __future__ import annotations

import copy
import inspect
import math
import numbers

import torch
import torch.nn.functional as F
from torch import nn

from .errors import UserError


# ---- shared pieces ------------------------------------------------------------------------
class _Net(nn.Module):
    """Base of the registry models: ``key`` is the registry name, ``ndim`` the rank of one input
    (None: any), ``expects`` the inputs it fits (for error messages), ``init`` the scheme of
    :func:`init_parameters`."""
    key, ndim, expects, init = "", None, "", "pytorch"

    def _fit(self, ok: bool, input_shape) -> None:
        _fit(ok, type(self), input_shape)


def _fit(ok: bool, cls, input_shape) -> None:
    if not ok:
        raise UserError(f"--model {cls.key}: input shape {list(input_shape)} does not fit; "
                        f"{cls.key} expects {cls.expects}; choose a model that fits the dataset")


def _option(ok: bool, key: str, msg: str) -> None:
    if not ok:
        raise UserError(f"--model {key}: {msg}")


def _posint(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool) and v > 0


def _norm(kind: str, channels: int) -> nn.Module:
    """'bn' BatchNorm2d, 'gn' GroupNorm with 2 groups (FL-Simulator's choice), 'none' identity."""
    return {"bn": lambda: nn.BatchNorm2d(channels), "gn": lambda: nn.GroupNorm(2, channels),
            "none": nn.Identity}[kind]()


# ---- linear models and MLP ----------------------------------------------------------------
class LogReg(_Net):
    """Multinomial logistic regression: flatten + one Linear; P = (prod(input_shape) + 1) * C."""
    key, expects = "logreg", "any input shape (it is flattened)"

    def __init__(self, input_shape, n_classes, bias=True):
        super().__init__()
        _option(isinstance(bias, bool), self.key, f"bias must be true or false, got {bias!r}")
        self.fc = nn.Linear(math.prod(input_shape), n_classes, bias=bias)

    def forward(self, x):
        return self.fc(x.flatten(1))


class MLP(_Net):
    """Flatten + Linear/ReLU stack ``fc1..fcN`` with hidden ``widths`` (default 200-200, the 2NN of
    McMahan et al. 2017 / FL-Simulator's mnist_2NN). ``bias=False`` drops every bias, making the
    net positively homogeneous (the spectral margin bound of Bartlett et al. 2017 assumes this).
    P = 50,410 on mnist1d ([40], 10 classes) with the defaults."""
    key, expects = "mlp", "any input shape (it is flattened)"

    def __init__(self, input_shape, n_classes, widths=(200, 200), bias=True):
        super().__init__()
        ok = isinstance(widths, (list, tuple)) and all(map(_posint, widths))
        _option(ok, self.key, f"widths must be a list of positive integers such as [200, 200], got {widths!r}")
        _option(isinstance(bias, bool), self.key, f"bias must be true or false, got {bias!r}")
        sizes = [math.prod(input_shape), *widths, n_classes]
        for i in range(len(sizes) - 1):
            self.add_module(f"fc{i + 1}", nn.Linear(sizes[i], sizes[i + 1], bias=bias))

    def forward(self, x):
        *hidden, out = self.children()
        x = x.flatten(1)
        for fc in hidden:
            x = F.relu(fc(x))
        return out(x)


# ---- small convolutional nets -------------------------------------------------------------
class LeNet(_Net):
    """The authors' CNN ("LeNet" in FL-Simulator models.py, also Caldarola et al. 2022's CIFAR CNN):
    conv(C->64, 5)-relu-maxpool2-conv(64->64, 5)-relu-maxpool2-fc 1600->384->192->n_classes.
    797,962 parameters for 3x32x32 and 10 classes; ``in_channels`` and the fc input size come
    from the input shape (1x28x28: 64*4*4 = 1024 inputs, 573,578 parameters)."""
    key, ndim = "cnn", 3
    expects = "[C, H, W] images with H, W >= 16 (the authors' setting is 3x32x32)"

    def __init__(self, input_shape, n_classes):
        super().__init__()
        C, H, W = input_shape
        self._fit(min(H, W) >= 16, input_shape)
        h, w = ((H - 4) // 2 - 4) // 2, ((W - 4) // 2 - 4) // 2
        self.conv1 = nn.Conv2d(C, 64, 5)
        self.conv2 = nn.Conv2d(64, 64, 5)
        self.fc1 = nn.Linear(64 * h * w, 384)
        self.fc2 = nn.Linear(384, 192)
        self.fc3 = nn.Linear(192, n_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class CNN1d(_Net):
    """Greydanus (2020)'s mnist1d ConvBase: three conv1d layers (kernel 5/3/3, stride 2, padding 1,
    ``channels`` wide, ReLU) and one Linear over the flattened features. 5,210 parameters for
    [1, 40] and 10 classes (channels=25)."""
    key, ndim = "cnn1d", 2
    expects = "[C, L] sequences with L >= 3 (mnist1d: [1, 40]; reshape [L] inputs to [1, L])"

    def __init__(self, input_shape, n_classes, channels=25):
        super().__init__()
        _option(_posint(channels), self.key, f"channels must be a positive integer, got {channels!r}")
        C, L = input_shape
        self._fit(L >= 3, input_shape)
        self.conv1 = nn.Conv1d(C, channels, 5, stride=2, padding=1)
        self.conv2 = nn.Conv1d(channels, channels, 3, stride=2, padding=1)
        self.conv3 = nn.Conv1d(channels, channels, 3, stride=2, padding=1)
        length = L
        for k in (5, 3, 3):  # Conv1d output length with stride 2, padding 1
            length = (length + 2 - k) // 2 + 1
        self.fc = nn.Linear(channels * length, n_classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.relu(self.conv3(x))
        return self.fc(x.flatten(1))


# ---- ResNets ------------------------------------------------------------------------------
class BasicBlock(nn.Module):
    """He et al. (2016) basic block: conv3x3-norm-relu-conv3x3-norm, plus the shortcut, then relu.

    When the shape changes (stride 2 or more channels) the shortcut is
    'a': parameter-free, subsample x[..., ::2, ::2] and zero-pad the new channels (option A);
    'b': conv1x1 (stride) + norm projection (option B, torchvision's ``downsample``);
    'conv3x3': conv3x3 (stride) + norm projection (the FedALS release, Functions.py)."""

    def __init__(self, c_in, c_out, stride, norm, shortcut):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = _norm(norm, c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = _norm(norm, c_out)
        self.stride, self.pad, self.downsample = stride, 0, None
        if stride != 1 or c_in != c_out:
            if shortcut == "a":
                self.pad = c_out - c_in
            else:
                k = 1 if shortcut == "b" else 3
                self.downsample = nn.Sequential(nn.Conv2d(c_in, c_out, k, stride, k // 2, bias=False),
                                                _norm(norm, c_out))

    def shortcut(self, x):
        if self.downsample is not None:
            return self.downsample(x)
        if self.stride != 1 or self.pad:
            x = x[..., ::self.stride, ::self.stride]
            return F.pad(x, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))
        return x

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


def _stage(c_in, c_out, n_blocks, stride, norm, shortcut) -> nn.Sequential:
    return nn.Sequential(BasicBlock(c_in, c_out, stride, norm, shortcut),
                         *[BasicBlock(c_out, c_out, 1, norm, shortcut) for _ in range(n_blocks - 1)])


class ResNet18GN(_Net):
    """ResNet-18 (He et al. 2016; BasicBlock [2, 2, 2, 2], widths 64-128-256-512, conv1x1
    projection shortcuts) with every BatchNorm replaced by GroupNorm(2, C) (Hsieh et al. 2020), as
    FL-Simulator models.py builds it from torchvision's resnet18 for FedSMOO, FedLESAM, FedCM and
    FedInit. ``stem='imagenet'`` (the authors' choice, even on 32x32): 7x7 stride-2 conv + 3x3
    stride-2 maxpool, 11,181,642 parameters for 3 channels and 10 classes; ``stem='cifar'``: 3x3
    stride-1 conv, no maxpool, 11,173,962 parameters. Global average pooling, fc 512 -> C;
    torchvision's initialisation (conv kaiming-normal fan_out)."""
    key, ndim, init = "resnet18gn", 3, "torchvision"
    expects = "[C, H, W] images (CIFAR: 3x32x32)"

    def __init__(self, input_shape, n_classes, stem="imagenet"):
        super().__init__()
        _option(stem in ("imagenet", "cifar"), self.key, f"stem={stem!r} is not one of 'imagenet', 'cifar'")
        C = input_shape[0]
        self.maxpool = stem == "imagenet"
        self.conv1 = (nn.Conv2d(C, 64, 7, 2, 3, bias=False) if self.maxpool
                      else nn.Conv2d(C, 64, 3, 1, 1, bias=False))
        self.bn1 = _norm("gn", 64)
        self.layer1 = _stage(64, 64, 2, 1, "gn", "b")
        self.layer2 = _stage(64, 128, 2, 2, "gn", "b")
        self.layer3 = _stage(128, 256, 2, 2, "gn", "b")
        self.layer4 = _stage(256, 512, 2, 2, "gn", "b")
        self.fc = nn.Linear(512, n_classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        if self.maxpool:
            x = F.max_pool2d(x, 3, 2, 1)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(x.mean((-2, -1)))


class ResNet20(_Net):
    """CIFAR ResNet-20 of He et al. (2016) §4.2, the FedALS model: conv3x3(C->16)-norm-relu, three
    stages of 3 BasicBlocks (16, 32, 64 channels; stride 2 at stages 2 and 3), global average
    pooling, fc 64 -> C. ``shortcut='a'`` (default, the paper's parameter-free option A) gives
    269,722 parameters with ``norm='bn'`` and 10 classes: 19 convs + fc = the 20 FedALS layers
    (FC head 650). ``'b'``: conv1x1 projections, 272,474. ``'conv3x3'``: the FedALS release
    (Functions.py) projects with conv3x3 + BN, 292,954, and has 21 conv layers. ``norm='gn'``:
    GroupNorm(2, C), no buffers, vmap-able. PyTorch default initialisation, as in the release."""
    key, ndim = "resnet20", 3
    expects = "[C, H, W] images (CIFAR: 3x32x32)"

    def __init__(self, input_shape, n_classes, norm="bn", shortcut="a"):
        super().__init__()
        _option(norm in ("bn", "gn"), self.key, f"norm={norm!r} is not one of 'bn', 'gn'")
        _option(shortcut in ("a", "b", "conv3x3"), self.key,
                f"shortcut={shortcut!r} is not one of 'a', 'b', 'conv3x3'")
        self.conv1 = nn.Conv2d(input_shape[0], 16, 3, 1, 1, bias=False)
        self.bn1 = _norm(norm, 16)
        self.layer1 = _stage(16, 16, 3, 1, norm, shortcut)
        self.layer2 = _stage(16, 32, 3, 2, norm, shortcut)
        self.layer3 = _stage(32, 64, 3, 2, norm, shortcut)
        self.fc = nn.Linear(64, n_classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(x.mean((-2, -1)))


# ---- VGG ----------------------------------------------------------------------------------
class VGG11(_Net):
    """VGG-11, configuration A of Simonyan & Zisserman (2014): eight conv3x3 (padding 1) layers
    64-M-128-M-256-256-M-512-512-M-512-512-M (M = 2x2 maxpool), each followed by ``norm`` and ReLU.
    FedInit (paper 004 §5.1) names "VGG-11" and nothing more, and FL-Simulator has no VGG, so the
    head is the common CIFAR one (kuangliu/pytorch-cifar): a single Linear 512*(H/32)*(W/32) -> C,
    no dropout. ``norm='none'`` (default: the original VGG, no buffers, vmap-able), ``'gn'``
    (GroupNorm(2, C)) or ``'bn'``. 9,225,610 parameters for 3x32x32 and 10 classes (9,231,114 with
    gn or bn)."""
    key, ndim = "vgg11", 3
    expects = "[C, H, W] images with H, W >= 32 (CIFAR: 3x32x32)"
    widths = (64, 128, 256, 256, 512, 512, 512, 512)
    pool_after = (1, 2, 4, 6, 8)  # conv index (1-based) followed by a 2x2 maxpool

    def __init__(self, input_shape, n_classes, norm="none"):
        super().__init__()
        _option(norm in ("none", "gn", "bn"), self.key, f"norm={norm!r} is not one of 'none', 'gn', 'bn'")
        C, H, W = input_shape
        self._fit(min(H, W) >= 32, input_shape)
        for i, width in enumerate(self.widths, 1):
            self.add_module(f"conv{i}", nn.Conv2d(C, width, 3, 1, 1))
            self.add_module(f"norm{i}", _norm(norm, width))
            C = width
        self.fc = nn.Linear(512 * (H // 32) * (W // 32), n_classes)

    def forward(self, x):
        for i in range(1, len(self.widths) + 1):
            x = F.relu(getattr(self, f"norm{i}")(getattr(self, f"conv{i}")(x)))
            if i in self.pool_after:
                x = F.max_pool2d(x, 2)
        return self.fc(x.flatten(1))


MODELS: dict[str, type[_Net]] = {m.key: m for m in (LogReg, MLP, LeNet, CNN1d, ResNet18GN, ResNet20, VGG11)}


# ---- initialisation -----------------------------------------------------------------------
def init_parameters(model: nn.Module, seed: int | torch.Generator = 0, scheme: str = "pytorch") -> nn.Module:
    """Fill every parameter and buffer in place, drawing only from a local generator.

    'pytorch': the nn defaults (conv/linear weight kaiming-uniform a=sqrt(5), bias U(+-1/sqrt(fan_in)));
    'torchvision': conv weights kaiming-normal (fan_out, relu) as torchvision's ResNet does.
    Norm layers get weight 1, bias 0 and fresh running statistics."""
    if scheme not in ("pytorch", "torchvision"):
        raise UserError(f"init_parameters: scheme={scheme!r} is not one of 'pytorch', 'torchvision'")
    g = seed if isinstance(seed, torch.Generator) else torch.Generator().manual_seed(int(seed))
    done = set()
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d)):
            if scheme == "torchvision" and isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu", generator=g)
            else:
                nn.init.kaiming_uniform_(m.weight, a=math.sqrt(5), generator=g)
            if m.bias is not None:
                bound = 1 / math.sqrt(m.weight[0].numel())
                nn.init.uniform_(m.bias, -bound, bound, generator=g)
        elif isinstance(m, (nn.GroupNorm, nn.BatchNorm2d)):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
            if isinstance(m, nn.BatchNorm2d):
                m.reset_running_stats()
        else:
            continue
        done.update(id(t) for t in (*m.parameters(recurse=False), *m.buffers(recurse=False)))
    missed = [n for n, t in (*model.named_parameters(), *model.named_buffers()) if id(t) not in done]
    if missed:
        raise TypeError(f"init_parameters has no rule for {missed}; add one for their module type")
    return model


# ---- building -----------------------------------------------------------------------------
def _options(cls, kwargs: dict) -> dict:
    """The model's keyword options with defaults filled in; unknown names -> UserError."""
    params = list(inspect.signature(cls.__init__).parameters.values())[3:]  # self, input_shape, n_classes
    defaults = {p.name: p.default for p in params}
    unknown = sorted(set(kwargs) - set(defaults))
    _option(not unknown, cls.key, f"unknown option {', '.join(map(repr, unknown))}; "
            f"{cls.key} takes {', '.join(defaults) or 'no options'}")
    return {**defaults, **kwargs}


def _plain(v):
    return [_plain(x) for x in v] if isinstance(v, (list, tuple)) else v


def build_model(name: str, input_shape, n_classes: int, *, seed: int | torch.Generator = 0, meta: bool = False,
                **kwargs) -> nn.Module:
    """Build registry model ``name`` for inputs of shape ``input_shape`` (one sample, no batch dim)
    and ``n_classes`` outputs, initialised from ``seed`` (an int or a torch.Generator).

    Checks the name, the options and the fit to the input shape (a dry forward of a zero batch of
    2); every failure is a one-line UserError naming ``--model``. The returned module carries
    ``model.spec`` (see :func:`model_spec`). ``meta=True``: the same checks on the meta device, nothing allocated
    (the memory plan's model, whatever its size)."""
    if not isinstance(name, str) or name not in MODELS:
        raise UserError(f"--model: unknown {name!r}; choose one of {', '.join(MODELS)}")
    cls = MODELS[name]
    shape = tuple(input_shape) if isinstance(input_shape, (list, tuple)) else ()
    _option(bool(shape) and all(map(_posint, shape)), name,
            f"input_shape must be a non-empty list of positive integers, got {input_shape!r}")
    _option(_posint(n_classes), name, f"n_classes must be a positive integer, got {n_classes!r}")
    shape, n_classes = tuple(int(d) for d in shape), int(n_classes)
    _fit(cls.ndim is None or len(shape) == cls.ndim, cls, shape)
    options = _options(cls, kwargs)

    try:
        with torch.device("meta"):  # no memory, no draws from the global RNG
            model = cls(shape, n_classes, **options)
    except (TypeError, ValueError, OverflowError, RuntimeError, RecursionError) as e:   # options its checks let by
        raise UserError(f"--model {name}: cannot be built with {_short(options)} ({type(e).__name__}: "
                        f"{' '.join(str(e).split())[:120]}); see the model's options in the README") from None
    if not meta:
        init_parameters(model.to_empty(device="cpu"), seed, cls.init)

    training = model.training
    try:
        with torch.no_grad():
            out = model.eval()(torch.zeros(2, *shape, device="meta" if meta else "cpu"))
    except (RuntimeError, ValueError, IndexError):
        out = None
    finally:
        model.train(training)
    _fit(out is not None and tuple(out.shape) == (2, n_classes), cls, shape)
    model.spec = {"name": name, "input_shape": list(shape), "n_classes": n_classes,
                  "kwargs": {k: _plain(v) for k, v in options.items()}}
    return model


def _short(options: dict, limit: int = 120) -> str:
    text = repr(options)
    return text if len(text) <= limit else text[:limit] + " ..."


def model_spec(model: nn.Module) -> dict:
    """``{"name", "input_shape", "n_classes", "kwargs"}`` as plain data (every option resolved), so
    ``build_model(s["name"], s["input_shape"], s["n_classes"], **s["kwargs"])`` rebuilds it."""
    spec = getattr(model, "spec", None)
    if not isinstance(spec, dict):
        raise UserError(f"model_spec: this {type(model).__name__} was not made by build_model; "
                        "build models with fedlab_analysis.models.build_model(name, input_shape, n_classes)")
    return copy.deepcopy(spec)
