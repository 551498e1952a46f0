"""An algorithm at run time: a perturbation rule plus a list of parts (parts.py), built by its row of the
algorithm table (``fedlab_analysis/algos.py``, ``Algo.parts``), whose hooks ``Algorithm`` runs in order. The table
is the one place an algorithm is defined: adding one from existing parts is one row there (``algos.register`` at
run time; tests/test_algos.py trains one), a new rule is a new part in parts.py. ``--ri`` appends RelaxedInit to
any algorithm that has none.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch

from .. import algos
from . import parts as P
from .parts import Part, Plain, RelaxedInit
from .state import per_client


class Algorithm:
    """Runs the hooks of its parts in order; the last part with ``aggregate`` decides the global model."""

    def __init__(self, cfg, perturb: Plain, parts: list[Part]):
        self.cfg, self.perturb = cfg, perturb
        ri = cfg.ri and not any(isinstance(p, RelaxedInit) for p in parts)          # --ri: FedInit's start points
        self.parts = [perturb, *parts] + ([RelaxedInit(cfg.hp("beta"), cfg.ri_agg)] if ri else [])
        Ks = {p.K for p in self.parts if p.K is not None}
        if len(Ks) > 1:
            raise ValueError(f"parts impose different K: {sorted(Ks)}")
        self.K = Ks.pop() if Ks else None          # a fixed K for every client (FedALS' tau), else from the config
        self.needs_last_local = any(p.needs_last_local for p in self.parts)
        self.needs_x0 = cfg.ri_anchor == "start" or (any(isinstance(p, RelaxedInit) for p in self.parts) and
                                                     cfg.ri_agg == "delta_from_init")    # reads ctx.x0
        self.tables = [k for p in self.parts for k in p.tables]      # per-client [m, P] tables, by name
        self.vectors = [k for p in self.parts for k in p.vectors]    # [P] vectors
        self.chunkable = all(p.chunkable for p in self.parts)       # rounds may run in chunks (Run.chunks)
        self.owner = owners(self.parts)
        self.clear()                               # no round yet: every round constant is None

    def init(self, run):
        for p in self.parts:
            p.init(run)

    # ---- the parts' state and round constants ---------------------------------------------------------
    def state_items(self):
        """(name, tensor) of every part's state, in the parts' order: the checkpoint's flat algo_state."""
        for p in self.parts:
            yield from p.state.items()

    @property
    def perturbation(self):
        """The perturbation delta [n, P] under the current step's gradient (SAM: this step's rho g/||g||;
        FedLESAM: the round's), or None (no perturbation, or outside a round). Drift probes read it."""
        return self.perturb.delta

    def clear(self) -> None:
        """The round (or chunk) is over: every part's round constants go."""
        for p in self.parts:
            p.clear()

    def take(self, rows, host: list, n: int) -> dict:
        """Restrict every part's per-client round constants [n, ...] to ``rows`` (a run of steps, Run.segments; a
        broadcast one stays broadcast). Returns {(part, name): (whole, rows)} for ``put_back``."""
        out = {}
        for p in self.parts:
            for name in p.consts:
                v = getattr(p, name)
                if per_client(v, n):
                    sub = v[:len(host)] if v.stride(0) == 0 else v.index_select(0, rows)
                    out[p, name] = (v, sub)
                    setattr(p, name, sub)
        return out

    @staticmethod
    def put_back(taken: dict, rows) -> None:
        """After a run of steps: rows a part kept (maybe updated in place) go back into the whole; every
        constant is the whole round's again."""
        for (p, name), (whole, sub) in taken.items():
            if whole.stride(0) and getattr(p, name) is sub:
                whole.index_copy_(0, rows, sub)
            setattr(p, name, whole)

    # ---- the round's hooks: the engine calls them with PartView and RoundCtx; each part gets ctx.view ----
    def start(self, run, ctx):
        x, v = ctx.w.expand(ctx.n, -1).clone(), ctx.view
        for p in self.parts:
            x = p.start(run, v, x)
        return x

    def round_start(self, run, ctx):
        v = ctx.view
        for p in self.parts:
            p.round_start(run, v)

    def gradient(self, run, ctx, x, k):
        return self.perturb.gradient(run, ctx.view, x, k)

    def direction(self, run, ctx, x, g):
        """(pre-clip direction d, decay c): the step is x <- x - eta (clip(d) + c x). c x gathers the terms the
        simulator adds after clipping as SGD weight decay (wd, FedProx's mu, FedDyn's lamb), so it stays a scalar
        and the engine applies it in one pass. Parts may update d in place: it is this step's own tensor."""
        d, decay, v = g, run.cfg.wd, ctx.view
        for p in self.parts:
            d, decay = p.direction(run, v, x, d, decay)
        return d, decay

    def after_step(self, run, ctx, x):
        v = ctx.view
        for p in self.parts:
            p.after_step(run, v, x)

    def client_end(self, run, ctx, x):
        ri_code = any(isinstance(p, RelaxedInit) for p in self.parts) and self.cfg.ri_agg == "delta_from_init"
        ctx.delta = torch.sub(x, ctx.x0 if ri_code else ctx.w, out=run.spare(x))   # Delta_i, the client update
        ctx.add("delta", ctx.delta)                   # what the server step reads of the clients (RoundCtx.add)
        v = ctx.view
        for p in self.parts:
            p.client_end(run, v, x)

    def aggregate(self, run, ctx, x):
        for p in reversed(self.parts):
            if p.aggregate is not None:
                return p.aggregate(run, ctx.view, x)
        return ctx.w + run.cfg.hp("server_lr") * ctx.mean("delta")        # FedAvg with eta_g

    def server_end(self, run, ctx, x, w_new):
        v = ctx.view
        for p in self.parts:
            p.server_end(run, v, x, w_new)

    def comm(self, run, ctx) -> dict:
        """Floats sent down / up in this round (all active clients) and stored per client: the last part with
        ``traffic`` decides, else the model both ways plus every part's ``comm``."""
        for p in reversed(self.parts):
            if p.traffic is not None:
                return p.traffic(run, ctx)
        down, up, stored = 1, 1, 0
        for p in self.parts:
            down, up, stored = down + p.comm[0], up + p.comm[1], stored + p.comm[2]
        size = run.space.P
        return {"floats_down": down * size * ctx.n, "floats_up": up * size * ctx.n,
                "floats_stored_per_client": stored * size}


def owners(parts) -> dict:
    """state name -> the part that owns it; two parts declaring one name is an error (a checkpoint keeps the
    names flat, and no part may write another's state)."""
    out = {}
    for p in parts:
        for s in p.slots:
            if s.name in out:
                raise ValueError(f"parts {out[s.name].name} and {p.name} both declare the state {s.name!r}")
            out[s.name] = p
    return out


def fedals_floats(space, alpha: int, n_rounds: int) -> float:
    """Parameters one client sends over ``n_rounds`` head synchronisations (FedALS Table 2's column):
    n_rounds * (|h| + |phi| / alpha). The space must carry the phi/h groups (``with_phi_layers``)."""
    phi = sum(l.numel for l in space.select("group:phi"))
    return n_rounds * ((space.P - phi) + phi / alpha)


def build(cfg, name: str | None = None) -> Algorithm:
    """The Algorithm of ``cfg`` (or of the table's row ``name``): the row's builder makes its parts from the
    config and this module's parts (``P``), checked to be a perturbation rule and then parts."""
    name = cfg.algo if name is None else name
    perturb, parts = algos.TABLE[name].parts(cfg, P)
    if not isinstance(perturb, Plain) or not all(isinstance(p, Part) and not isinstance(p, Plain) for p in parts):
        raise TypeError(f"algos.TABLE[{name!r}].parts must return (a perturbation rule, [parts]); got "
                        f"({type(perturb).__name__}, {[type(p).__name__ for p in parts]})")
    extra = [P.LocalMomentum(cfg.local_momentum)] if getattr(cfg, "local_momentum", 0.0) else []
    return Algorithm(cfg, perturb, list(parts) + extra)           # local momentum last: it reads the whole d


class Builders(Mapping):
    """name -> (cfg -> Algorithm) for every row of algos.TABLE, read when looked up: a view of the table (a row
    registered there trains at once), not a second registry (nothing can be set here)."""

    def __getitem__(self, name: str):
        if name not in algos.TABLE:
            raise KeyError(name)
        return lambda cfg: build(cfg, name)

    def __iter__(self):
        return iter(algos.TABLE)

    def __len__(self) -> int:
        return len(algos.TABLE)


ALGORITHMS = Builders()
