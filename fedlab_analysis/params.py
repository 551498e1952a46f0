"""ParamSpace: one flat parameter vector <-> named tensors, and the layer table.

DESIGN.md core decision 1. A model is a pure function ``f(theta, x)`` of one flat
vector ``theta``; every per-layer computation goes through the layer table
(name, shape, offset, numel, block, group). Never index a flat vector by a
layer number (the FedLESAM release does, in its LESAM.first_step).

Blocks follow FedALS (Gholami & Seferoglu, Alg. 1): a new block starts at every
parameter with two or more dimensions (a conv or linear weight); biases and
normalisation scales join the block of the weight before them. ``phi_layers=L``
puts blocks ``0..L-1`` in group ``"phi"`` (the representation) and the rest in
group ``"h"`` (the head).
"""
from __future__ import annotations

import fnmatch
import re
from dataclasses import asdict, dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class Layer:
    name: str
    shape: tuple[int, ...]
    offset: int
    numel: int
    block: int
    group: str

    @property
    def slice(self) -> slice:
        return slice(self.offset, self.offset + self.numel)


class ParamSpace:
    """The layout of a flat vector over named tensors (parameters or buffers)."""

    def __init__(self, layers: list[Layer]):
        self.layers = list(layers)
        self.P = sum(l.numel for l in self.layers)
        self._by_name = {l.name: l for l in self.layers}

    # ---- construction -------------------------------------------------------------
    @classmethod
    def from_named(cls, named, phi_layers: int | None = None) -> "ParamSpace":
        """From ``(name, tensor)`` pairs in order (``model.named_parameters()``)."""
        layers, offset, block = [], 0, -1
        for name, t in named:
            if t.dim() >= 2 or block < 0:
                block += 1
            layers.append(Layer(name, tuple(t.shape), offset, t.numel(), block, "all"))
            offset += t.numel()
        space = cls(layers)
        return space.with_phi_layers(phi_layers) if phi_layers is not None else space

    @classmethod
    def of_model(cls, model: nn.Module, phi_layers: int | None = None) -> "ParamSpace":
        return cls.from_named(model.named_parameters(), phi_layers)

    @classmethod
    def buffers_of(cls, model: nn.Module) -> "ParamSpace":
        """Floating-point buffers (BatchNorm running stats); integer counters are left out."""
        return cls.from_named((n, b) for n, b in model.named_buffers() if b.is_floating_point())

    def with_phi_layers(self, L: int) -> "ParamSpace":
        n_blocks = self.n_blocks
        if not 0 <= L <= n_blocks:
            raise ValueError(f"phi_layers={L} is outside 0..{n_blocks} (this model has {n_blocks} layers)")
        return ParamSpace([Layer(l.name, l.shape, l.offset, l.numel, l.block,
                                 "phi" if l.block < L else "h") for l in self.layers])

    @classmethod
    def from_table(cls, table: list[dict]) -> "ParamSpace":
        return cls([Layer(d["name"], tuple(d["shape"]), int(d["offset"]), int(d["numel"]),
                          int(d["block"]), d["group"]) for d in table])

    def table(self) -> list[dict]:
        """Plain-data layer table for checkpoints."""
        return [{**asdict(l), "shape": list(l.shape)} for l in self.layers]

    # ---- lookup -------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return [l.name for l in self.layers]

    @property
    def n_blocks(self) -> int:
        return 1 + max((l.block for l in self.layers), default=-1)

    def __getitem__(self, name: str) -> Layer:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"no parameter named {name!r}; names are: {', '.join(self.names)}") from None

    def __len__(self) -> int:
        return len(self.layers)

    def select(self, spec: str | None = None) -> list[Layer]:
        """Layers matching ``spec``: None/'all' -> every layer; 'group:phi'; 'block:3';
        an exact name; a glob (``layer1.*``); or ``re:<regex>``. Raises KeyError when nothing matches."""
        if spec in (None, "all"):
            return list(self.layers)
        if spec.startswith("group:"):
            out = [l for l in self.layers if l.group == spec[6:]]
        elif spec.startswith("block:"):
            out = [l for l in self.layers if l.block == int(spec[6:])]
        elif spec.startswith("re:"):
            out = [l for l in self.layers if re.search(spec[3:], l.name)]
        elif spec in self._by_name:
            out = [self._by_name[spec]]
        else:
            out = [l for l in self.layers if fnmatch.fnmatchcase(l.name, spec)]
        if not out:
            raise KeyError(f"no parameter matches {spec!r}; names are: {', '.join(self.names)}")
        return out

    def mask(self, spec: str | None = None, device=None) -> torch.Tensor:
        """Boolean mask over the flat vector for ``select(spec)``."""
        m = torch.zeros(self.P, dtype=torch.bool, device=device)
        for l in self.select(spec):
            m[l.slice] = True
        return m

    def index(self, spec: str | None = None, device=None) -> torch.Tensor:
        """Long index of the flat positions of ``select(spec)`` (for gather/scatter)."""
        return torch.cat([torch.arange(l.offset, l.offset + l.numel, device=device)
                          for l in self.select(spec)])

    # ---- flat <-> named -----------------------------------------------------------
    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Named views into ``flat`` (last dim of size P; leading dims are kept)."""
        if flat.shape[-1] != self.P:
            raise ValueError(f"flat vector has {flat.shape[-1]} entries, this space has {self.P}")
        lead = flat.shape[:-1]
        # one split, not a slice per layer: a slice's backward writes a zero-filled [P] gradient per layer (O(L P) a
        # backward, 10x the HVP of a ResNet-18); split's backward is one concatenation. Same values, same views.
        parts = flat.split([l.numel for l in self.layers], dim=-1)
        return {l.name: t.view(*lead, *l.shape) for l, t in zip(self.layers, parts)}

    def flatten(self, named) -> torch.Tensor:
        """Concatenate tensors in table order (accepts a dict or a state_dict)."""
        return torch.cat([named[l.name].reshape(-1) for l in self.layers]) if self.layers \
            else torch.zeros(0)

    def of(self, flat: torch.Tensor, name: str) -> torch.Tensor:
        l = self[name]
        return flat[..., l.slice].view(*flat.shape[:-1], *l.shape)

    # ---- per-layer reductions -----------------------------------------------------
    def per_layer(self, flat: torch.Tensor, reduce=lambda v: v.pow(2).sum(-1)) -> dict[str, torch.Tensor]:
        """``{name: reduce(flat[..., slice])}``; the default is the squared norm."""
        return {l.name: reduce(flat[..., l.slice]) for l in self.layers}

    def segment_sum(self, flat: torch.Tensor, by: str = "layer") -> torch.Tensor:
        """Sum of ``flat`` over each layer (``by='layer'``), block or group; returns [..., n_segments]."""
        keys = {"layer": [i for i, _ in enumerate(self.layers)],
                "block": [l.block for l in self.layers],
                "group": [sorted({x.group for x in self.layers}).index(l.group) for l in self.layers]}[by]
        seg = torch.repeat_interleave(torch.tensor(keys, device=flat.device),
                                      torch.tensor([l.numel for l in self.layers], device=flat.device))
        out = torch.zeros(*flat.shape[:-1], max(keys) + 1, dtype=flat.dtype, device=flat.device)
        return out.index_add_(-1, seg, flat)


def functional(model: nn.Module, space: ParamSpace, buffers: dict[str, torch.Tensor] | None = None, *,
               bspace: ParamSpace | None = None, states: bool = False, split=None):
    """The model as a pure function ``f(theta, x, buf=None) -> output`` of one flat vector ``theta``: the one
    place that turns a flat vector into a ``torch.func.functional_call`` (trainer, probes, landscape).

    Args:
      model: the module whose forward is called; it is never changed (its parameters are never read).
      space: the layout of ``theta``. ``theta`` may also be a dict of named tensors already in that layout
        (``space.unflatten(theta)``, or the leaves a ``torch.func.grad`` differentiates), passed through as is.
      buffers: named buffers passed to every call (default: the model's own). With BatchNorm in train mode and
        ``track_running_stats`` on, the buffers passed are updated in place, as nn.Module would.
      bspace: the layout of the floating buffers given per call as a flat vector ``buf`` (the trainer's
        clients each carry their own BatchNorm statistics); these names are left out of ``buffers``.
      states: ``theta`` is ``[parameters, buffers]`` concatenated (``space.P + bspace.P`` entries; Li et al.'s
        ``dir_type='states'``); needs ``bspace``.
      split: ``x -> pieces``: each piece goes through the model on its own and the outputs are concatenated
        (the probes' BatchNorm groups). None: one call.

    Returns:
      ``f(theta, x, buf=None)``; ``buf`` (flat, in ``bspace``) is read only with ``bspace`` and not ``states``.

    >>> lin = nn.Linear(2, 1, bias=False).double()
    >>> space = ParamSpace.of_model(lin)
    >>> theta, x = torch.tensor([2., 3.], dtype=torch.float64), torch.tensor([[1., 1.]], dtype=torch.float64)
    >>> functional(lin, space)(theta, x)       # the weight [[2, 3]] times [1, 1]
    tensor([[5.]], dtype=torch.float64)
    """
    fixed = dict(model.named_buffers()) if buffers is None else dict(buffers)
    if bspace is not None:
        for l in bspace.layers:
            fixed.pop(l.name, None)
    elif states:
        raise ValueError("functional(states=True) needs bspace (the layout of the buffers after the parameters)")
    P = space.P

    def f(theta, x: torch.Tensor, buf: torch.Tensor | None = None) -> torch.Tensor:
        if isinstance(theta, dict):
            named = theta
        elif states:
            named, buf = space.unflatten(theta[..., :P]), theta[..., P:]
        else:
            named = space.unflatten(theta)
        if buf is not None and bspace is not None:
            named = {**named, **bspace.unflatten(buf), **fixed}
        elif fixed:
            named = {**named, **fixed}
        if split is None:
            return torch.func.functional_call(model, named, (x,))
        return torch.cat([torch.func.functional_call(model, named, (xg,)) for xg in split(x)])
    return f
