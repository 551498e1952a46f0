"""Each part's own state, declared and allocated once (optax's ``scale_by_adam`` returns its ``ScaleByAdamState``;
here a part declares its ``Slot``s and the engine allocates a ``PartState`` from them).

A slot is a name, a shape kind and a dtype:
    table    [m, P]  one row per client (SCAFFOLD's c_i, FedDyn's h_i): on --state-device, or ``on="run"``
    vector   [P]     a server vector (SCAFFOLD's c, FedCM's Delta, FedAdam's m and v)
    clients  [m]     one number per client (FedLESAM's seen flags)
dtype ``"run"`` is the run's float dtype, else a torch dtype name ("bool"); ``init`` is "zeros" or "w" (every row
the initial global model). A part reads and writes only its own ``part.state``; names are unique within an
algorithm (Algorithm checks), so a checkpoint keeps them flat, as ``algo_state[name]``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

KINDS = ("table", "vector", "clients")


@dataclass(frozen=True)
class Slot:
    name: str
    kind: str = "vector"      # table | vector | clients (module docstring)
    dtype: str = "run"        # "run": the run's float dtype; else a torch dtype name, e.g. "bool"
    init: str = "zeros"       # zeros | w
    on: str = "state"         # a table's device: "state" (--state-device) or "run" (read whole at every step)

    def __post_init__(self):
        assert self.kind in KINDS and self.init in ("zeros", "w") and self.on in ("state", "run"), self


class PartState:
    """A part's tensors by slot name (attributes). Only the declared names can be set: a part cannot write a name
    it did not declare, so two parts never share one (ServerMomentum's m and ServerAdam's m are two states)."""
    __slots__ = ("_owner", "_t")

    def __init__(self, owner: str, tensors: dict):
        object.__setattr__(self, "_owner", owner)
        object.__setattr__(self, "_t", dict(tensors))

    def __getattr__(self, name):
        try:
            return self._t[name]
        except KeyError:
            raise AttributeError(f"{self._owner} has no state {name!r} (declared: {', '.join(self._t) or 'none'})") \
                from None

    def __setattr__(self, name, value):
        if name not in self._t:
            raise AttributeError(f"{self._owner} cannot set state {name!r}: it declares {', '.join(self._t) or 'none'}")
        self._t[name] = value

    def items(self):
        return self._t.items()

    def __repr__(self):
        return f"PartState({self._owner}: {', '.join(f'{k} {tuple(v.shape)}' for k, v in self._t.items())})"


def allocate(run, owner: str, slots) -> PartState:
    """The tensors of ``slots`` for ``run``: tables through ``run.table()`` (on --state-device) unless ``on="run"``,
    vectors and per-client numbers on the run's device."""
    out = {}
    for s in slots:
        if s.kind == "table":
            t = run.table() if s.on == "state" else run.zeros(run.m)
        elif s.kind == "vector":
            t = run.zeros()
        else:
            t = torch.zeros(run.m, dtype=run.dtype if s.dtype == "run" else getattr(torch, s.dtype),
                            device=run.device)
        if s.init == "w":
            t.copy_(run.w)
        out[s.name] = t
    return PartState(owner, out)


def per_client(v, n: int) -> bool:
    """A per-client round value: a tensor [n, ...] of at least two dimensions (one row a client)."""
    return torch.is_tensor(v) and v.dim() >= 2 and len(v) == n
