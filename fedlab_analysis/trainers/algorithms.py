"""Every algorithm as a small spec: a perturbation rule plus a list of parts (parts.py).

    name             perturbation   parts                     paper
    fedavg           plain          -                         McMahan et al. 2017
    fedavgm          plain          ServerMomentum            Hsu et al. 2019
    fedadam          plain          ServerAdam                Reddi et al. 2021
    fedprox          plain          Prox                      Li et al. 2020
    scaffold         plain          Scaffold                  Karimireddy et al. 2020 (option II)
    feddyn           plain          Dyn                       Acar et al. 2021
    fedcm            plain          Momentum                  Xu et al. 2021, Alg. 2
    fedsam           SAM            -                         Qu et al. 2022
    mofedsam         SAM            Momentum                  Qu et al. 2022
    fedgamma         SAM            Scaffold                  Dai et al. 2023
    fedspeed         SAM            Dyn                       Sun et al. 2023 (as the simulator)
    fedsmoo          SMOO           Dyn                       Sun et al. 2023, Alg. 1
    fedlesam(-s,-d)  LESAM          - / Scaffold / Dyn        Fan et al. 2024, Algs. 1, 3, 4
    fedals(-scaffold) plain         ALS(+ control variates)   Gholami & Seferoglu, Algs. 1, 4
    fedinit          plain          RelaxedInit               Sun, Shen, Tao, Alg. 1
``--ri`` appends RelaxedInit to any of them. Adding an algorithm = one line in SPECS (and a part if new) and
one line in ``fedlab_analysis/algos.py`` declaring the hyper-parameters it reads (validation reads those).
"""
from __future__ import annotations


import torch

from .. import algos
from ..errors import UserError
from .parts import (SAM, SMOO, Dyn, LESAM, Momentum, Part, Plain, Prox, RelaxedInit, Scaffold,
                    ServerAdam, ServerMomentum)
from .state import Slot, per_client
from .views import RoundView


class Algorithm:
    """Runs the hooks of its parts in order; the last part with ``aggregate`` decides the global model."""

    def __init__(self, cfg, perturb: Plain, parts: list[Part]):
        self.cfg, self.perturb = cfg, perturb
        self.parts = [perturb, *parts] + ([RelaxedInit(cfg.hp("beta"), cfg.ri_agg)] if cfg.ri or
                                            cfg.algo == "fedinit" else [])
        self.K = None                              # a fixed K for every client (FedALS), else from the config
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

    def set_state(self, name: str, value) -> None:
        """Put ``value`` in the state ``name`` of the part that owns it (``owner``; a checkpoint's flat key)."""
        setattr(self.owner[name].state, name, value)

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

    # ---- the round's hooks: the engine calls them with PartView and RoundCtx; each part gets a RoundView ----
    def start(self, run, ctx):
        x, v = ctx.w.expand(ctx.n, -1).clone(), RoundView(ctx)
        for p in self.parts:
            x = p.start(run, v, x)
        return x

    def round_start(self, run, ctx):
        v = RoundView(ctx)
        for p in self.parts:
            p.round_start(run, v)

    def gradient(self, run, ctx, x, k):
        return self.perturb.gradient(run, RoundView(ctx), x, k)

    def direction(self, run, ctx, x, g):
        """(pre-clip direction d, decay c): the step is x <- x - eta (clip(d) + c x). c x gathers the terms the
        simulator adds after clipping as SGD weight decay (wd, FedProx's mu, FedDyn's lamb), so it stays a scalar
        and the engine applies it in one pass. Parts may update d in place: it is this step's own tensor."""
        d, decay, v = g, run.cfg.wd, RoundView(ctx)
        for p in self.parts:
            d, decay = p.direction(run, v, x, d, decay)
        return d, decay

    def after_step(self, run, ctx, x):
        v = RoundView(ctx)
        for p in self.parts:
            p.after_step(run, v, x)

    def client_end(self, run, ctx, x):
        ri_code = any(isinstance(p, RelaxedInit) for p in self.parts) and self.cfg.ri_agg == "delta_from_init"
        ctx.delta = torch.sub(x, ctx.x0 if ri_code else ctx.w, out=run.spare(x))   # Delta_i, the client update
        ctx.add("delta", ctx.delta)                   # what the server step reads of the clients (RoundCtx.add)
        v = RoundView(ctx)
        for p in self.parts:
            p.client_end(run, v, x)

    def aggregate(self, run, ctx, x):
        for p in reversed(self.parts):
            if p.aggregate is not None:
                return p.aggregate(run, RoundView(ctx), x)
        return ctx.w + run.cfg.hp("server_lr") * ctx.mean("delta")        # FedAvg with eta_g

    def server_end(self, run, ctx, x, w_new):
        v = RoundView(ctx)
        for p in self.parts:
            p.server_end(run, v, x, w_new)

    def comm(self, run, ctx) -> dict:
        """Floats sent down / up in this round (all active clients) and stored per client."""
        down, up, stored = 1, 1, 0
        for p in self.parts:
            down, up, stored = down + p.comm[0], up + p.comm[1], stored + p.comm[2]
        P = run.space.P
        return {"floats_down": down * P * ctx.n, "floats_up": up * P * ctx.n, "floats_stored_per_client": stored * P}


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


class ALS(Part):
    """FedALS (Gholami & Seferoglu, Alg. 1 as its text intends): after global
    local step s = t tau + k + 1, average the head h when s % tau == 0 and the representation phi when
    s % (alpha tau) == 0; un-synchronised groups stay client-local, so every client keeps its own model.
    With ``scaffold`` (Alg. 4): d = g - c_k + mean_j c_j and, at each group's sync,
    c_k <- c_k - mean(c) + (x_k^{last sync} - x_k)/(eta * period) on that group."""

    name = "als"
    needs_last_local = True                       # every client's own model persists in run.last_local
    chunkable = False                             # its synchronisations average over all clients at local steps

    def __init__(self, tau: int, alpha: int, scaffold: bool = False):
        self.tau, self.alpha, self.scaffold = int(tau), int(alpha), scaffold
        # read whole at every step: on the run's device, not --state-device
        self.slots = (Slot("c_k", "table", on="run"), Slot("x_sync", "table", init="w", on="run")) if scaffold else ()

    def init(self, run):
        n = run.space.n_blocks
        if n < 2:
            raise UserError(f"--model: FedALS splits the model into a representation phi and a head h, so it needs "
                            f"at least 2 layers; {run.cfg.model} has {n}")
        L = run.cfg.phi_layers if run.cfg.phi_layers is not None else n - 1
        if run.cfg.phi_layers is not None and not 1 <= L <= n - 1:   # phi and h each need a layer
            raise UserError(f"--phi-layers: must be in 1..{n - 1}, as {run.cfg.model} has {n} layers (got {L})")
        run.space = run.space.with_phi_layers(L)
        phi = run.space.mask("group:phi")                 # as index tensors: a boolean mask would sync every step
        self.phi, self.h = phi.nonzero().flatten().to(run.device), (~phi).nonzero().flatten().to(run.device)

    def start(self, run, ctx, x):
        return run.rows(run.last_local, ctx.S)

    def direction(self, run, ctx, x, d, decay):
        if self.scaffold:
            c = self.state.c_k
            d = d + (c.mean(0) - c[ctx.S_dev])
        return d, decay

    def _sync(self, run, ctx, x, mask, period):
        if self.scaffold:
            c, last = self.state.c_k, self.state.x_sync
            c[:, mask] = c[:, mask] - c[:, mask].mean(0) + (last[:, mask] - x[:, mask]) / (ctx.lr * period)
        x[:, mask] = x[:, mask].mean(0)
        if self.scaffold:
            last[:, mask] = x[:, mask]

    def after_step(self, run, ctx, x):
        s = ctx.t * self.tau + ctx.k + 1
        if s % self.tau == 0:
            self._sync(run, ctx, x, self.h, self.tau)
            if run.bspace.P:
                ctx.buf[:] = ctx.buf.mean(0)
        if s % (self.alpha * self.tau) == 0:
            self._sync(run, ctx, x, self.phi, self.alpha * self.tau)

    def aggregate(self, run, ctx, x):
        return x.mean(0)


def fedals_floats(space, alpha: int, n_rounds: int) -> float:
    """Parameters one client sends over ``n_rounds`` head synchronisations (FedALS Table 2's column):
    n_rounds * (|h| + |phi| / alpha). The space must carry the phi/h groups (``with_phi_layers``)."""
    phi = sum(l.numel for l in space.select("group:phi"))
    return n_rounds * ((space.P - phi) + phi / alpha)


class FedALS(Algorithm):
    def __init__(self, cfg, scaffold=False):
        if cfg.active_ratio != 1:
            raise UserError(f"--active-ratio: FedALS runs with full participation; pass --active-ratio 1 "
                            f"(got {cfg.active_ratio})")
        super().__init__(cfg, Plain(), [ALS(cfg.hp("tau"), cfg.hp("alpha"), scaffold)])
        self.K = int(cfg.hp("tau"))

    def comm(self, run, ctx) -> dict:
        """Per round (tau local steps): h goes both ways every round, phi every alpha rounds (Table 2's count)."""
        phi = int(run.space.mask("group:phi").sum())
        h = run.space.P - phi
        sent = h + (phi if (ctx.t + 1) % int(self.cfg.hp("alpha")) == 0 else 0)
        stored = run.space.P * (2 if self.parts[1].scaffold else 0)
        return {"floats_down": sent * ctx.n, "floats_up": sent * ctx.n, "floats_stored_per_client": stored}


def _sam(c): return SAM(c.hp("rho"))
def _lesam(c): return LESAM(c.hp("rho"), c.lesam_source, c.lesam_first)
def _cm(c): return Momentum(c.hp("alpha"), c.fedcm_wd == "inside")


SPECS = {
    "fedavg":     lambda c: (Plain(), []),
    "fedavgm":    lambda c: (Plain(), [ServerMomentum(c.hp("server_momentum"))]),
    "fedadam":    lambda c: (Plain(), [ServerAdam()]),
    "fedprox":    lambda c: (Plain(), [Prox(c.hp("mu"))]),
    "scaffold":   lambda c: (Plain(), [Scaffold()]),
    "feddyn":     lambda c: (Plain(), [Dyn(c.hp("lamb"))]),
    "fedcm":      lambda c: (Plain(), [_cm(c)]),
    "fedsam":     lambda c: (_sam(c), []),
    "mofedsam":   lambda c: (_sam(c), [_cm(c)]),
    "fedgamma":   lambda c: (_sam(c), [Scaffold()]),
    "fedspeed":   lambda c: (_sam(c), [Dyn(c.hp("lamb"))]),
    "fedsmoo":    lambda c: (SMOO(c.hp("rho")), [Dyn(c.hp("lamb"))]),
    "fedlesam":   lambda c: (_lesam(c), []),
    "fedlesam-s": lambda c: (_lesam(c), [Scaffold(c.hp("lamb") if c.lesam_s_scale == "code" else 1.0)]),
    "fedlesam-d": lambda c: (_lesam(c), [Dyn(c.hp("lamb"))]),
    "fedinit":    lambda c: (Plain(), []),          # RelaxedInit is appended for fedinit and for --ri
}


def build(name: str):
    if name.startswith("fedals"):
        return lambda cfg: FedALS(cfg, scaffold=name == "fedals-scaffold")
    return lambda cfg: Algorithm(cfg, *SPECS[name](cfg))


ALGORITHMS = {name: build(name) for name in [*SPECS, "fedals", "fedals-scaffold"]}
assert set(ALGORITHMS) == set(algos.NAMES), "algos.USES declares the parameters of exactly these algorithms"
