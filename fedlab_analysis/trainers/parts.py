"""The parts algorithms are made of. Each part owns a piece of state and hooks into the round
(engine.py's docstring shows where); an algorithm is a perturbation rule plus a list of parts (its row in
fedlab_analysis/algos.py builds them; trainers/algorithms.py runs their hooks). Vectors are flat: client tables
are [m, P], per-round quantities [n_active, P].

Notation (papers'): w global model, x local models, S active clients, K_i local steps, eta lr,
Delta_i = x_i - ref_i the client update (ref = w, or RI's start point with --ri-agg delta_from_init).

A part's state (``slots``, trainers/state.py) is allocated by the engine into ``part.state`` and checkpointed
under its names; a part writes only its own. Its round constants (``consts``) are attributes set in round_start
and cleared (None) at the round's end; a per-client one is [n, P], restricted to a run of steps' rows by the
engine (Run.segments).
"""
from __future__ import annotations

import torch

from ..errors import UserError
from .state import Slot


def _normalize(v: torch.Tensor, eps: float = 1e-7) -> torch.Tensor:
    """v / (||v|| + eps) row-wise over the WHOLE flat vector (never per layer index)."""
    return v / (v.norm(dim=-1, keepdim=True) + eps)


def _normalize_(v: torch.Tensor, eps: float = 1e-7) -> torch.Tensor:
    """``_normalize`` in place (the same arithmetic, no new [n, P] tensor)."""
    return v.div_(v.norm(dim=-1, keepdim=True) + eps)


class Part:
    """No-op hooks; a part overrides the ones it needs."""
    name = "part"             # its name in the algorithm (Algorithm.owner)
    comm = (0, 0, 0)          # extra (down, up, stored-per-client) model-sized vectors
    needs_last_local = False  # reads run.last_local, each client's last local model (the engine keeps it)
    slots: tuple = ()         # its state (trainers/state.py): allocated by the engine into ``state``
    consts: tuple = ()        # its round constants: attributes set in round_start, None outside a round
    chunkable = True          # its server step reads the clients only through RoundCtx.add's sums (Run.chunks)
    state = None              # its PartState, once the engine allocated it
    K = None                  # a fixed K_i for every client that the part imposes (FedALS' tau), else from the config

    @property
    def tables(self) -> tuple:
        """The names of its per-client [m, P] tables (plan.py reads them without building a run)."""
        return tuple(s.name for s in self.slots if s.kind == "table")

    @property
    def vectors(self) -> tuple:
        """The names of its [P] server vectors."""
        return tuple(s.name for s in self.slots if s.kind == "vector")

    def init(self, run):
        """Once, with the Run itself, after the engine allocated ``state``: checks and set-up (FedALS splits
        run.space). Returns None."""

    def clear(self):
        """The round is over: its constants go (no [n, P] tensor outlives the round)."""
        for c in self.consts:
            setattr(self, c, None)

    # The round's hooks, in the order the engine calls them (engine.py's docstring). Every hook gets
    #   run    PartView (trainers/views.py PART_FIELDS): the run, read-only, and the engine's services
    #   ctx    RoundView (ROUND_FIELDS): the round and step, read-only but for ctx.add
    #   x      the active clients' local models [n, P] (the engine's tensor: only after_step changes it in place);
    #          None at aggregate and server_end in a chunked round, which read the clients through ctx.total/mean
    # and writes only its own ``state`` and attributes. A hook returning None (the no-ops below) changes nothing.
    def start(self, run, ctx, x):
        """The clients' start points: returns x [n, P] (given: w for every client, or an earlier part's)."""
        return x

    def round_start(self, run, ctx):
        """Before step 0: set the round's constants (``consts``) from ``state``. Returns None."""

    def direction(self, run, ctx, x, d, decay):
        """Step k's direction: returns (d, decay) from the earlier parts' (d: this step's own tensor, may be
        changed in place; the step is x <- x - eta (clip(d) + decay x), Algorithm.direction)."""
        return d, decay

    def after_step(self, run, ctx, x):
        """After step k's update (FedALS' synchronisation may average x's rows in place). Returns None."""

    def client_end(self, run, ctx, x):
        """After the local steps (ctx.delta holds Delta_i): write the clients' rows of ``state`` and ``ctx.add``
        what the server step reads. Returns None."""

    aggregate = None
    """None, or aggregate(run, ctx, x) -> w^{t+1} [P] where the part decides the new global model (the last such
    part decides; none: FedAvg with eta_g)."""

    def server_end(self, run, ctx, x, w_new):
        """After aggregation (w_new is w^{t+1}): update the server's vectors in ``state``. Returns None."""

    traffic = None
    """None, or traffic(run, ctx) -> {floats_down, floats_up, floats_stored_per_client} where the part decides the
    round's communication (FedALS Table 2's count; none: the model both ways plus every part's ``comm``)."""


def K_divisor(run, ctx) -> torch.Tensor:
    """The K that turns a model update into a gradient (SCAFFOLD's c_i, FedCM's Delta): each client's own
    K_i (paper), or local_epochs * n_0 / B from client 0's data size for everyone (the simulator)."""
    if run.cfg.k_rule == "client0" and run.cfg.local_steps is None:
        return torch.full((ctx.n,), run.cfg.local_epochs * float(run.n_i[0]) / run.cfg.batch_size,
                          dtype=run.dtype, device=run.device)
    return ctx.K_dev.to(run.dtype)


def anchor(run, ctx) -> torch.Tensor:
    """The point the proximal / dual corrections are centred at: the global model w^t (paper), or with
    --ri-anchor start each client's relaxed start x_{i,0} (FL-Simulator sends that point as the model)."""
    return ctx.x0 if run.cfg.ri_anchor == "start" else ctx.w


# ---- perturbation rules: how the gradient of step k is taken ----------------------------------
class Plain(Part):
    """g = grad f_i(x; b)."""
    name = "plain"
    delta = None              # the perturbation of the step's gradient (Algorithm.perturbation); none here
    def gradient(self, run, ctx, x, k):
        return run.grads(ctx, x, k)


class SAM(Plain):
    """Local SAM (FedSAM, Qu et al. 2022; FedSMOO eqs. 5-6): delta = rho g/||g||, then grad at x + delta on the
    SAME minibatch. Two forward/backward passes per step."""
    name, consts = "sam", ("delta",)

    def __init__(self, rho):
        self.rho = rho

    def ascent(self, run, ctx, g0, x):
        return _normalize_(g0).mul_(self.rho)          # g0 is this step's own tensor

    def gradient(self, run, ctx, x, k):
        data = run.step_data(ctx, k)
        g0 = run.grads(ctx, x, k, data)
        delta = self.ascent(run, ctx, g0, x)
        self.delta = delta                            # this step's perturbation (Algorithm.perturbation)
        return run.grads(ctx, torch.add(x, delta, out=run.scratch("x_pert", x)), k, data)


class SMOO(SAM):
    """FedSMOO (Sun et al. 2023, Algorithm 1 lines 8-10): corrected ascent a = g - mu_i - s,
    s_hat = r a/||a||, mu_i <- mu_i + s_hat - s; server s = r normalize(mean_S (mu_i - s_hat_i)) (paper, line 13)
    or r normalize(mean_S mu_i) (the code, --smoo-server code)."""
    name, comm = "smoo", (1, 1, 1)
    slots, consts = (Slot("mu", "table"), Slot("s")), ("delta", "mu", "s_hat")

    def round_start(self, run, ctx):
        self.mu = run.rows(self.state.mu, ctx.S)      # gathered once per round; written back at client_end
        # the server reads each client's last s_hat (paper rule). Where every client takes every step and no hook
        # can take a gradient in between, the last one is still in its gradient buffer at the round's end: no copy
        self.alias = ctx.Kmin == int(ctx.K.max()) and not run.watched
        if run.cfg.smoo_server != "code" and not self.alias:
            self.s_hat = torch.zeros(ctx.n, run.space.P, dtype=run.dtype, device=run.device)

    def ascent(self, run, ctx, g0, x):
        mu, s = self.mu, self.state.s
        s_hat = _normalize_(g0.sub_(mu).sub_(s)).mul_(self.rho)     # r a / ||a||, a = g - mu_i - s (in place)
        keep = run.cfg.smoo_server != "code"
        if ctx.all_on:                                  # every client steps: update in place, no masks
            mu.add_(s_hat).sub_(s)
            if keep and self.alias:
                self.s_hat = s_hat                      # the gradient buffer itself (see round_start)
            elif keep and (run.watched or ctx.k == ctx.Kmin - 1):
                # s_hat lives in a reused gradient buffer. Every client of an all-on run of steps steps until Kmin,
                # and each client's last step K_i - 1 is the last step of such a run (ctx.Kmin: min K_i, or the end
                # of a Run.segments run): only that step's s_hat is read, so copy it then (a hook may read it sooner)
                self.s_hat.copy_(s_hat)
        else:
            r = ctx.rows
            mu[r] = mu[r] + s_hat[r] - s
            if keep:
                self.s_hat[r] = s_hat[r]
        return s_hat

    def client_end(self, run, ctx, x):
        mu = self.mu
        run.put(self.state.mu, ctx.S, mu)
        ctx.add("smoo_v", mu if run.cfg.smoo_server == "code" else mu.sub_(self.s_hat))   # written back:
        #                                                                      mu's rows are reused for v in place

    def server_end(self, run, ctx, x, w_new):
        self.state.s = self.rho * _normalize(ctx.mean("smoo_v"))


class LESAM(Plain):
    """FedLESAM (Fan et al. 2024, Algorithm 1): delta = rho (w_i^old - w)/||w_i^old - w||, constant within the
    round; one forward/backward per step. --lesam-source last_global_update uses the last broadcast global update
    (the released code) instead; --lesam-first sets the first participation (zero | global_update | literal)."""
    name, consts = "lesam", ("delta",)

    def __init__(self, rho, source, first):
        self.rho, self.source, self.first = rho, source, first
        self.comm = (0, 0, 1) if source == "client_old" else (1, 0, 0)
        self.slots = ((Slot("w_old", "table"),) if source == "client_old" else ()) + (   # w_i^old: the paper's rule
            Slot("last_update"),                        # w^t - w^{t-1}; zero before the first round
            Slot("seen", "clients", dtype="bool"))      # each client's first participation is behind it

    def round_start(self, run, ctx):
        st = self.state
        w, back = ctx.w, -st.last_update               # back = w^{t-1} - w^t
        if self.source == "released_code":
            self.delta = released_lesam_perturbation(run.space, st.last_update, self.rho).expand(ctx.n, -1)
            return
        if self.source == "last_global_update":
            u = back.expand(ctx.n, -1)
        else:
            seen = st.seen[ctx.S_dev][:, None]
            first = {"zero": torch.zeros_like(w), "global_update": back, "literal": -w}[self.first]
            u = torch.where(seen, run.rows(st.w_old, ctx.S) - w, first.expand(ctx.n, -1))
        self.delta = self.rho * _normalize(u)

    def gradient(self, run, ctx, x, k):
        return run.grads(ctx, torch.add(x, self.delta, out=run.scratch("x_pert", x)), k)

    def client_end(self, run, ctx, x):
        if self.tables:
            run.put(self.state.w_old, ctx.S, ctx.w.expand(ctx.n, -1))
        self.state.seen.index_fill_(0, ctx.S_dev, True)

    def server_end(self, run, ctx, x, w_new):
        self.state.last_update = w_new - ctx.w


def released_lesam_perturbation(space, u: torch.Tensor, rho: float) -> torch.Tensor:
    """What FedLESAM's released LESAM.first_step computes (the FedLESAM release's LESAM.first_step), bug
    included, for comparisons with that code only: it indexes the FLAT global update u by the parameter tensor's
    number, so tensor l is shifted by the constant -u[l] rho / (sum_{j < #tensors} |u[j]| + 1e-7)."""
    n = len(space.layers)
    scale = rho / (u[:n].abs().sum() + 1e-7)
    delta = torch.empty_like(u)
    for l, layer in enumerate(space.layers):
        delta[layer.slice] = -u[l] * scale
    return delta


# ---- gradient corrections --------------------------------------------------------------------
class Prox(Part):
    """FedProx (Li et al. 2020): + mu (x - w), split as the simulator does: -mu w before clipping (its loss term
    -mu <x, w>) and +mu x after (its SGD weight decay). w is ``anchor`` (the relaxed start with --ri-anchor start)."""
    name, consts = "prox", ("corr",)

    def __init__(self, mu):
        self.mu = mu

    def round_start(self, run, ctx):
        self.corr = self.mu * anchor(run, ctx)

    def direction(self, run, ctx, x, d, decay):
        return d.sub_(self.corr), decay + self.mu


class LocalMomentum(Part):
    """Local heavy-ball momentum, as torch.optim.SGD(momentum=m) on each client (FedALS Sec. 7 trains with SGD,
    momentum 0.9): v_i <- m v_i + clip(d) + c x, then x <- x - eta v_i. Clipping acts on d before the buffer, as
    clip_grad_norm_ before step() (the engine's step then clips nothing); c x is the weight decay (and the parts'
    decay terms). v_i is each client's own, kept across rounds and never sent: a per-client optimiser. The last part,
    so it sees every other part's direction (algorithms.build)."""
    name, comm = "local_momentum", (0, 0, 1)
    slots, consts = (Slot("v", "table"),), ("buf",)

    def __init__(self, m: float):
        self.m = m

    def round_start(self, run, ctx):
        self.buf = run.rows(self.state.v, ctx.S)

    def direction(self, run, ctx, x, d, decay):
        if run.cfg.clip > 0:
            d.mul_(torch.clamp(run.cfg.clip / (d.norm(dim=1, keepdim=True) + 1e-6), max=1.0))
        if decay:
            d.add_(x, alpha=decay)
        if ctx.all_on:
            self.buf.mul_(self.m).add_(d)
        else:                                        # clients past their K_i keep their buffer
            self.buf[ctx.rows] = self.buf[ctx.rows].mul_(self.m).add_(d[ctx.rows])
        return self.buf, 0.0

    def client_end(self, run, ctx, x):
        run.put(self.state.v, ctx.S, self.buf)


class Scaffold(Part):
    """SCAFFOLD option II (Karimireddy et al. 2020; FedLESAM Alg. 2 with the sign fixed): d = g + scale (c - c_i);
    c_i+ = c_i - c + (w - x_i)/(K_i eta); c <- c + (1/m) sum_S (c_i+ - c_i). scale is 1 except for the released
    FedLESAM-S (lamb)."""
    name, comm = "scaffold", (1, 1, 1)
    slots, consts = (Slot("c_i", "table"), Slot("c")), ("c_i", "corr")

    def __init__(self, scale: float = 1.0):
        self.scale = scale

    def round_start(self, run, ctx):              # constant within the round: gathered once, not every step
        self.c_i = run.rows(self.state.c_i, ctx.S)
        self.corr = self.scale * (self.state.c - self.c_i)

    def direction(self, run, ctx, x, d, decay):
        return d.add_(self.corr), decay

    def client_end(self, run, ctx, x):
        c_i = self.c_i
        new = c_i - self.state.c - ctx.delta / (K_divisor(run, ctx)[:, None] * ctx.lr)
        ctx.add("dc", new - c_i)
        run.put(self.state.c_i, ctx.S, new)

    def server_end(self, run, ctx, x, w_new):
        self.state.c = self.state.c + ctx.total("dc") / run.m


class Dyn(Part):
    """FedDyn (Acar et al. 2021) in FedSMOO's notation (Alg. 1 lines 11, 16, 19) with lamb = 1/beta and
    h_i = -beta lambda_i: d = g + lamb h_i + lamb (x - w); h_i += Delta_i; server dual H += (1/m) sum_S Delta_i
    (so H = mean over ALL clients of h_i); w = mean_S x_i + H. The lamb x term is added after clipping, as the
    simulator's SGD weight decay does. w in lamb (x - w) is ``anchor`` (the relaxed start with --ri-anchor start)."""
    name, comm = "dyn", (0, 0, 1)
    slots, consts = (Slot("h", "table"), Slot("H")), ("corr",)

    def __init__(self, lamb):
        self.lamb = lamb

    def round_start(self, run, ctx):              # constant within the round: gathered once, not every step
        h = run.rows(self.state.h, ctx.S)             # a fresh tensor: lamb (h_i - w) computed in its place
        self.corr = h.sub_(anchor(run, ctx)).mul_(self.lamb)

    def direction(self, run, ctx, x, d, decay):
        return d.add_(self.corr), decay + self.lamb

    def client_end(self, run, ctx, x):                # h_i += Delta_i in the table's rows (no [n, P] copy of h_i)
        ctx.add("x", x)                               # aggregate reads mean_S x_i
        h = self.state.h
        if h.device == ctx.delta.device:
            h.index_add_(0, ctx.S if ctx.S.device == h.device else ctx.S_dev, ctx.delta)
        else:
            run.put(h, ctx.S, run.rows(h, ctx.S) + ctx.delta)

    def aggregate(self, run, ctx, x):
        self.state.H = self.state.H + ctx.total("delta") / run.m
        return ctx.mean("x") + self.state.H


class Momentum(Part):
    """FedCM (Xu et al. 2021, Algorithm 2): v = alpha g + (1 - alpha) Delta_t (line 8);
    Delta_{t+1} = -(1/|S|) sum_S Delta_i / (K_i eta) (line 13, per-client K_i keeps Lemma 4.1 exact).
    --fedcm-wd inside: g includes wd x (Lemma 4.1 holds); outside: wd x added after mixing (the code)."""
    name, comm = "momentum", (1, 0, 0)
    slots, consts = (Slot("D"),), ("mix",)

    def __init__(self, alpha, wd_inside):
        self.alpha, self.wd_inside = alpha, wd_inside

    def round_start(self, run, ctx):
        self.mix = (1 - self.alpha) * self.state.D                  # constant within the round

    def direction(self, run, ctx, x, d, decay):
        if self.wd_inside:                    # move the weight-decay term from post-clip into alpha * g (exactly)
            d, decay = d.add_(run.cfg.wd * x), decay - run.cfg.wd
        return d.mul_(self.alpha).add_(self.mix), decay

    def client_end(self, run, ctx, x):
        ctx.add("cm_D", ctx.delta / (K_divisor(run, ctx)[:, None] * ctx.lr))

    def server_end(self, run, ctx, x, w_new):
        self.state.D = -ctx.mean("cm_D")


# ---- start points ---------------------------------------------------------------------------------
class RelaxedInit(Part):
    """FedInit (Sun, Shen, Tao; Algorithm 1): x_{i,0} = w + beta (w - w_i^last) (line 6), w_i^last = w^0 before a
    client's first round (line 1) and kept stale while it sits out (lines 13-14). Aggregation --ri-agg final_avg:
    mean of final local models (line 16); delta_from_init: updates measured from the RI start (the code).
    w_i^last is the engine's ``run.last_local`` (w^0 until a client first trains, then its final local model)."""
    name, comm = "relaxed_init", (0, 0, 1)
    needs_last_local = True

    def __init__(self, beta, agg):
        self.beta, self.agg = beta, agg

    def start(self, run, ctx, x):
        return x + self.beta * (ctx.w - run.rows(run.last_local, ctx.S))


# ---- server rules ----------------------------------------------------------------------------------
class ServerMomentum(Part):
    """FedAvgM (Hsu et al. 2019): m <- beta m + mean Delta; w <- w + eta_g m."""
    name, slots = "server_momentum", (Slot("m"),)

    def __init__(self, momentum):
        self.momentum = momentum

    def aggregate(self, run, ctx, x):
        self.state.m = self.momentum * self.state.m + ctx.mean("delta")
        return ctx.w + run.cfg.hp("server_lr") * self.state.m


class ServerAdam(Part):
    """FedAdam (Reddi et al. 2021) as the simulator: m, v EMAs of mean Delta, no bias correction,
    w <- w + eta_g m / (sqrt(v) + eps)."""
    name, slots = "server_adam", (Slot("m"), Slot("v"))

    def aggregate(self, run, ctx, x):
        c, d, st = run.cfg, ctx.mean("delta"), self.state
        st.m = c.beta1 * st.m + (1 - c.beta1) * d
        st.v = c.beta2 * st.v + (1 - c.beta2) * d * d
        return ctx.w + c.hp("server_lr") * st.m / (st.v.sqrt() + c.eps)


# ---- layer-wise synchronisation ---------------------------------------------------------------------
class ALS(Part):
    """FedALS (Gholami & Seferoglu, Alg. 1 as its text intends): after global
    local step s = t tau + k + 1, average the head h when s % tau == 0 and the representation phi when
    s % (alpha tau) == 0; un-synchronised groups stay client-local, so every client keeps its own model.
    With ``scaffold`` (Alg. 4): d = g - c_k + mean_j c_j and, at each group's sync,
    c_k <- c_k - mean(c) + (x_k^{last sync} - x_k)/(eta * period) on that group. A round is tau local steps
    (``K``) of every client: ``active_ratio`` must be 1."""

    name, consts = "als", ("corr",)                # corr: -c_k + mean_j c_j (with ``scaffold``), fixed in a round
    needs_last_local = True                       # every client's own model persists in run.last_local
    chunkable = False                             # its synchronisations average over all clients at local steps

    def __init__(self, tau: int, alpha: int, active_ratio: float, scaffold: bool = False):
        if active_ratio != 1:
            raise UserError(f"--active-ratio: FedALS runs with full participation; pass --active-ratio 1 "
                            f"(got {active_ratio})")
        self.tau, self.alpha, self.scaffold = int(tau), int(alpha), scaffold
        self.K = self.tau
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

    def round_start(self, run, ctx):              # c_k changes only at a sync, after the round's last step's direction
        if self.scaffold:
            c = self.state.c_k
            self.corr = c.mean(0) - c[ctx.S_dev]

    def direction(self, run, ctx, x, d, decay):
        return (d + self.corr if self.scaffold else d), decay

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

    def traffic(self, run, ctx) -> dict:
        """Per round (tau local steps): h goes both ways every round, phi every alpha rounds (Table 2's count)."""
        phi = int(run.space.mask("group:phi").sum())
        sent = run.space.P - phi + (phi if (ctx.t + 1) % self.alpha == 0 else 0)
        stored = run.space.P * (2 if self.scaffold else 0)
        return {"floats_down": sent * ctx.n, "floats_up": sent * ctx.n, "floats_stored_per_client": stored}
