"""Global and local sharpness, and the Jensen gap between the local-SAM and global-SAM objectives (FedLESAM Eqs. 1-2).

    sharpness    s(w) = max_{||delta||_2 <= rho} F(w + delta) - F(w)          FedLESAM Sec. 2.2 (Keskar et al.)
    global       F = mean loss over the union of the clients' data               FedLESAM Sec. 4.1, Fig. 2 right
    local        F_i = mean loss over client i's data
    Eq. (1)      G = max_{||delta|| <= rho} sum_i p_i F_i(w + delta)              global (centralised) SAM
    Eq. (2)      L = sum_i p_i max_{||delta_i|| <= rho} F_i(w_i + delta_i)       local (federated) SAM
    Jensen gap   L - G >= 0 when w_i = w and the inner maxima are exact (E max >= max E)

Inner maximisers (``method``):
    one_step    delta = rho g / ||g||, g = grad F(w): SAM's first-order solution (Foret et al. 2021, Eq. 2)
    ascent      ``steps`` normalised projected gradient-ascent steps on the rho-ball, from the one-step point
                (default) or a random point of the sphere; a step that would lower F is halved until it does
                not, so the trace never decreases (an m-step ascent from the one-step point never ends below it)
    quadratic   the exact maximiser of the second-order model F(w) + g'd + d'Hd/2 on the ball (trust-region
                boundary problem: eigen-decomposition + secular equation); exact on quadratics, P <= 4096
Every method returns F(w + delta) - F(w) at a feasible delta, so every estimate is a lower bound on s(w).
The command line measures at ``--rho`` or at DEFAULT_RHO = 0.05 (SAM's radius in Foret et al. 2021, Sec. 3), the
same for every algorithm, so that two checkpoints probed with the same flags are measured at the same radius; the
JSON records where each setting came from (``settings``). ``probe sharpness A B ...`` measures several checkpoints
at one radius, one start direction and one sample set and prints one comparison table. The training hook uses the
run's own rho (it watches one run).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as Fn

from ..errors import UserError
from ..linalg import project, trust_region_max, unit  # noqa: F401  (trust_region_max re-exported)
from .common import client_weights
from .options import Common, opt, resolve

LOSSES = {"ce": Fn.cross_entropy, "mse": Fn.mse_loss}
METHODS = ("one_step", "ascent", "quadratic")
MAX_QUADRATIC_P = 4096
DEFAULT_RHO = 0.05          # SAM's radius (Foret et al. 2021, Sec. 3); the same for every algorithm
DEFAULT_STEPS = 10
DEFAULT_ADAPTIVE_RHO = 0.5  # ASAM's radius on CIFAR-10 (Kwon et al. 2021); in the coordinates T_w^{-1} eps
DEFAULT_ETA = 0.01          # ASAM's eta (Kwon et al. 2021)


# ---- objectives: F(theta) as a scalar function of one flat vector -------------------------------------------
class Objective:
    """F(theta) from a differentiable scalar function ``fun(theta)``."""

    def __init__(self, fun):
        self.fun = fun

    def value(self, theta: torch.Tensor) -> float:
        with torch.no_grad():
            return float(self.fun(theta))

    def value_and_grad(self, theta: torch.Tensor) -> tuple[float, torch.Tensor]:
        with torch.enable_grad():
            th = theta.detach().requires_grad_(True)
            v = self.fun(th)
            (g,) = torch.autograd.grad(v, th)
        return float(v.detach()), g

    def hessian(self, theta: torch.Tensor) -> torch.Tensor:
        return torch.func.hessian(self.fun)(theta.detach())


class DataObjective(Objective):
    """F(theta) = (1/n) sum_j loss(f(theta, x_j), y_j), evaluated in chunks of ``batch_size`` samples."""

    def __init__(self, f, X: torch.Tensor, y: torch.Tensor, loss="ce", batch_size: int = 4096):
        if len(y) == 0:
            raise UserError("sharpness needs at least one sample; check --data / --samples")
        if not (isinstance(loss, str) and loss in LOSSES) and not callable(loss):
            raise UserError(f"unknown loss {loss!r}; use one of {', '.join(LOSSES)} or a callable")
        self.f, self.X, self.y, self.n = f, X, y, len(y)
        self.loss = LOSSES[loss] if isinstance(loss, str) else loss
        from .common import chunks
        sizes = chunks(f, len(y), batch_size)     # BatchNorm train mode: whole groups within one client
        self.chunks = list(zip(X.split(sizes), y.split(sizes)))
        super().__init__(lambda th: sum(self._chunk(th, x, t) for x, t in self.chunks))

    def _chunk(self, theta, x, t):
        return self.loss(self.f(theta, x), t) * (len(t) / self.n)

    def value_and_grad(self, theta):
        th, v, g = theta.detach().requires_grad_(True), 0.0, torch.zeros_like(theta)
        with torch.enable_grad():
            for x, t in self.chunks:            # one graph per chunk: memory of one chunk
                loss = self._chunk(th, x, t)
                g += torch.autograd.grad(loss, th)[0]
                v += float(loss.detach())
        return v, g


class Mixture(Objective):
    """F = sum_i p_i F_i (FedLESAM Sec. 4.1: F = (1/N) sum_i F_i with uniform p)."""

    def __init__(self, parts: list[Objective], p: torch.Tensor):
        self.parts, self.p = parts, [float(x) for x in p]
        super().__init__(lambda th: sum(pi * F.fun(th) for pi, F in zip(self.p, parts)))

    def value(self, theta):
        return sum(pi * F.value(theta) for pi, F in zip(self.p, self.parts))

    def value_and_grad(self, theta):
        vg = [F.value_and_grad(theta) for F in self.parts]
        return sum(pi * v for pi, (v, _) in zip(self.p, vg)), sum(pi * g for pi, (_, g) in zip(self.p, vg))

    def hessian(self, theta):
        return sum(pi * F.hessian(theta) for pi, F in zip(self.p, self.parts))


# ---- inner maximisation over the rho-ball -----------------------------------------------------------------
# normalise, project and the trust-region maximiser: fedlab_analysis/linalg.py (shared with the drift probe)
_unit, _project = unit, project


def maximise(F: Objective, theta: torch.Tensor, rho: float, method: str = "one_step", *, steps: int = 10,
             step_size: float | None = None, start: str = "one_step", seed: int = 0) -> dict:
    """Approximate argmax_{||delta|| <= rho} F(theta + delta) (see the module docstring for ``method``).

    Returns ``{"value": F(w + delta), "base": F(w), "sharpness": value - base, "delta": tensor,
    "grad_norm": ||grad F(w)||, "trace": [F(w + delta_j) - F(w) per ascent step], "n_grads", "n_values"}``."""
    if method not in METHODS:
        raise UserError(f"unknown sharpness method {method!r}; use one of {', '.join(METHODS)}")
    if not rho > 0:
        raise UserError(f"rho must be > 0 (got {rho}); pass the training --rho or a positive radius")
    if method == "ascent" and steps < 1:
        raise UserError(f"ascent needs steps >= 1 (got {steps})")
    if start not in ("one_step", "random"):
        raise UserError(f"unknown ascent start {start!r}; use one_step or random")
    theta = theta.detach()
    base, g = F.value_and_grad(theta)
    n_grads, n_values = 1, 0
    if method == "quadratic":
        if theta.numel() > MAX_QUADRATIC_P:
            raise UserError(f"method 'quadratic' builds the full Hessian and allows P <= {MAX_QUADRATIC_P} "
                            f"(this model has {theta.numel()}); use --method ascent")
        delta = trust_region_max(F.hessian(theta), g, rho)
    elif method == "one_step" or start == "one_step":
        delta = rho * _unit(g)
    else:
        gen = torch.Generator(device="cpu").manual_seed(seed)
        delta = rho * _unit(torch.randn(theta.numel(), generator=gen, dtype=torch.float64).to(theta))
    value = F.value(theta + delta)
    n_values += 1
    trace = [value - base]
    if method == "ascent":
        a = rho if step_size is None else float(step_size)
        for _ in range(steps):
            v, gd = F.value_and_grad(theta + delta)
            n_grads += 1
            u = _unit(gd)
            if float(u.norm()) == 0:
                break
            for _ in range(30):                      # halve until the step does not lower F
                cand = _project(delta + a * u, rho)
                vc = F.value(theta + cand)
                n_values += 1
                if vc >= v:
                    delta, value = cand, vc
                    break
                a /= 2
            trace.append(value - base)
    return {"value": value, "base": base, "sharpness": value - base, "delta": delta,
            "grad_norm": float(g.norm()), "delta_norm": float(delta.norm()), "trace": trace,
            "n_grads": n_grads, "n_values": n_values}


def _plain(r: dict, **extra) -> dict:
    """JSON-ready: drop the perturbation tensor."""
    return {**{k: v for k, v in r.items() if k != "delta"}, **extra}


# ---- the probes ----------------------------------------------------------------------------------------------
def global_sharpness(f, theta: torch.Tensor, X: torch.Tensor, y: torch.Tensor, rho: float,
                     method: str = "one_step", steps: int = 10, *, step_size: float | None = None,
                     start: str = "one_step", seed: int = 0, loss="ce", batch_size: int = 4096,
                     return_delta: bool = False) -> dict:
    """Global sharpness max_{||delta|| <= rho} F(w + delta) - F(w), F the mean loss over (X, y) (give the union of
    the clients' data: FedLESAM Fig. 2 right). ``f(theta, x) -> logits`` (put BatchNorm models in eval mode).

    Returns a plain dict: ``sharpness``, ``loss`` F(w), ``loss_perturbed`` F(w + delta), ``grad_norm``, ``trace``
    (per ascent step), ``rho``, ``method``, ``steps``, ``n_samples`` (+ ``delta`` with ``return_delta``)."""
    F = DataObjective(f, X, y, loss, batch_size)
    r = maximise(F, theta, rho, method, steps=steps, step_size=step_size, start=start, seed=seed)
    out = _plain(r, loss=r["base"], loss_perturbed=r["value"], rho=float(rho), method=method,
                 steps=steps if method == "ascent" else 0, n_samples=len(y))
    if return_delta:
        out["delta"] = r["delta"]
    return out


def client_objectives(f, X, y, indices, loss="ce", batch_size: int = 4096) -> list[DataObjective]:
    """F_i over client i's samples ``X[indices[i]]``."""
    return [DataObjective(f, X[torch.as_tensor(ix, device=X.device)], y[torch.as_tensor(ix, device=y.device)],
                          loss, batch_size) for ix in indices]


def jensen_gap(objectives: list[Objective], theta: torch.Tensor, rho: float, *, weights=None,
               client_thetas: torch.Tensor | None = None, method: str = "one_step", **kw) -> dict:
    """FedLESAM Eqs. (1)-(2): ``local_sam`` = sum_i p_i max_{||d_i||<=rho} F_i(w_i + d_i) (Eq. 2),
    ``global_sam`` = max_{||d||<=rho} sum_i p_i F_i(w + d) (Eq. 1), ``gap`` = local_sam - global_sam.

    ``weights``: p (default uniform); ``client_thetas`` [N, P]: the w_i of Eq. (2) (default w_i = w, the aligned
    case in which the gap is >= 0 for exact maxima). Also per-client local sharpness and the global sharpness.
    With approximate maxima (one_step, ascent) both terms are lower bounds and the gap can be negative."""
    N = len(objectives)
    p = torch.full((N,), 1.0 / N, dtype=torch.float64) if weights is None \
        else torch.as_tensor(weights, dtype=torch.float64)
    if len(p) != N or (p < 0).any() or abs(float(p.sum()) - 1) > 1e-9:
        raise UserError(f"client weights must be {N} non-negative numbers summing to 1")
    if client_thetas is not None and client_thetas.shape[0] != N:
        raise UserError(f"client_thetas has {client_thetas.shape[0]} rows for {N} clients")
    from .common import bar
    wi = [theta if client_thetas is None else client_thetas[i] for i in range(N)]
    local = []
    with bar(N, "sharpness: client", "client") as pb:
        for F, w in zip(objectives, wi):
            local.append(maximise(F, w, rho, method, **kw))
            pb.update(1)
    glob = maximise(Mixture(objectives, p), theta, rho, method, **kw)
    local_sam = sum(float(pi) * r["value"] for pi, r in zip(p, local))
    return {"local_sam": local_sam, "global_sam": glob["value"], "gap": local_sam - glob["value"],
            "aligned": client_thetas is None, "rho": float(rho), "method": method,
            "local_sharpness": [r["sharpness"] for r in local], "local_loss": [r["base"] for r in local],
            "global_sharpness": glob["sharpness"], "global_loss": glob["base"], "weights": p.tolist()}


def local_sharpness(f, theta, X, y, indices, rho: float, method: str = "one_step", *,
                    client_thetas: torch.Tensor | None = None, loss="ce", **kw) -> dict:
    """Per-client sharpness max_{||d|| <= rho} F_i(w_i + d) - F_i(w_i) at w_i = w (default) or the given
    client models (what FedSAM's local ascent targets)."""
    Fs = client_objectives(f, X, y, indices, loss)
    rs = [maximise(Fi, theta if client_thetas is None else client_thetas[i], rho, method, **kw)
          for i, Fi in enumerate(Fs)]
    s = [r["sharpness"] for r in rs]
    return {"local_sharpness": s, "local_loss": [r["base"] for r in rs], "mean": sum(s) / len(s),
            "max": max(s), "rho": float(rho), "method": method}


def training_rho(config: dict) -> float:
    """The rho a run trained with (its --rho, or the papers' default 0.1: algos.DEFAULTS)."""
    from ..config import RunConfig
    return float(RunConfig.from_dict(config).hp("rho"))


# ---- training hook ---------------------------------------------------------------------------------------
def make_hook(name: str = "sharpness", every: int = 1, steps=None, *, rho: float | None = None,
              method: str = "one_step", ascent_steps: int = 10, local: bool = False, samples: int | None = None):
    """Callback for ``run.callbacks``: every ``every`` rounds, the global sharpness of w^{t+1} on the run's fixed
    train subset (``run.eval_train``: the union of the clients' data, or its first ``samples``); with ``local``
    also each client's sharpness on its own data at w^{t+1}. At the local steps ``steps`` (a set of k) of logged
    rounds, the one-step local sharpness of every active client at its local model x_{i,k} after k local steps.
    Rows (plain numbers) accumulate in ``hook.rows``."""
    want = None if steps is None else {int(k) for k in steps}

    def hook(event, run, ctx, x):
        r = run.cfg.hp("rho") if rho is None else rho
        f = run.forward
        if event == "step":
            k = ctx.k + 1                            # x holds the models after k local steps (as consensus, drift)
            if want is None or k not in want or ctx.t % every:
                return
            run.model.eval()
            S = ctx.S.tolist()
            Fs = client_objectives(f, run.X, run.Y, [run.idx[i] for i in S])
            s = [maximise(Fi, x[j], r, "one_step")["sharpness"] for j, Fi in enumerate(Fs)]
            run.model.train()
            hook.rows.append({"probe": name, "event": "step", "round": ctx.t + 1, "step": k, "rho": r,
                              "local_sharpness_at_x": dict(zip(map(str, S), s))})
        elif event == "round" and run.t % every == 0:
            run.model.eval()
            ix = run.eval_train[:samples] if samples else run.eval_train
            g = global_sharpness(f, run.w, run.X[ix], run.Y[ix], r, method, ascent_steps)
            row = {"probe": name, "event": "round", "round": run.t, "rho": r, "method": method,
                   "sharpness_global": g["sharpness"], "loss": g["loss"], "grad_norm": g["grad_norm"]}
            if local:
                ls = local_sharpness(f, run.w, run.X, run.Y, run.idx, r, method, steps=ascent_steps)
                row.update(sharpness_local_mean=ls["mean"], sharpness_local_max=ls["max"])
            hook.rows.append(row)

    hook.rows = []
    return hook


# ---- the probe: options, compute, plot ----------------------------------------------------------------
HELP = "SAM sharpness in a rho-ball; several CKPTs compared"
DESCRIBE = ("max_{||delta|| <= rho} F(w + delta) - F(w), by SAM's one step, a projected ascent or the exact "
            "quadratic model, at --rho (default 0.05 for every algorithm); --local adds each client's "
            "sharpness and the Jensen gap between FedLESAM's Eq. (2) and Eq. (1). Several checkpoints "
            "(probe sharpness A B ...) are measured at one radius, start and sample set and printed as one "
            "table; --adaptive adds Kwon et al. 2021's adaptive sharpness (scale-invariant at --eta 0).")
COST = ("cost: --method one_step: 1 gradient + 1 pass; ascent: --steps + 1 gradients and about as many "
        "passes; --local: the same for every client on its own data, plus the global mixture.")
HOOK_NAMES = ("sharpness",)


@dataclass
class Options(Common):
    rho: float | None = opt(None, f"radius of the ball (default: {DEFAULT_RHO}, the same for every algorithm and "
                            "checkpoint, so that results compare; not the run's training rho)")
    method: str | None = opt(None, "inner maximiser (default: ascent)", choices=METHODS)
    steps: int | None = opt(None, f"ascent steps m (default: {DEFAULT_STEPS})", lo=1)
    step_size: float | None = opt(None, "ascent step length (default: each ascent's own radius: --rho, and "
                                  "--adaptive-rho in ASAM's coordinates). One value given here is used by both "
                                  "ascents, whose default radii differ by 10x", lo=0, lo_open=True)
    start: str | None = opt(None, "ascent start point (default: one_step)", choices=("one_step", "random"))
    starts: int | None = opt(None, "with --start random: ascents from this many random points (seeds --seed, "
                             "--seed + 1, ...), for the plain and the --adaptive sharpness alike; the estimate is "
                             "their maximum, printed with their mean +- standard error and count (default: 1)", lo=1)
    local: bool = opt(False, "also per-client sharpness and the Jensen gap (FedLESAM Eqs. 1-2) at the global model")
    at_clients: bool = opt(False, "the Jensen gap's Eq. (2) at the clients' last local models (needs a checkpoint "
                           "that kept them)")
    weights: str | None = opt(None, "client weights p_i of --local (default: uniform)", choices=("uniform", "size"))
    batch_size: int = opt(4096, "samples per forward pass", lo=1)
    adaptive: bool = opt(False, "also the adaptive sharpness of ASAM (Kwon et al. 2021, T_w = diag(|w| + eta)); "
                         "at --eta 0 it is unchanged by rescalings of the weights that keep the function (a ReLU "
                         "layer pair W1 * c, W2 / c), at eta > 0 only approximately. Every parameter is normalised, "
                         "biases too (ASAM's released code leaves biases at T = 1)")
    adaptive_rho: float | None = opt(None, f"radius of --adaptive in ASAM's normalised coordinates (default: "
                                     f"{DEFAULT_ADAPTIVE_RHO}, ASAM's CIFAR-10 radius)")
    eta: float | None = opt(None, f"eta of --adaptive (default: {DEFAULT_ETA}, ASAM's; 0: exactly scale-invariant, "
                            "but a zero weight is then never perturbed)", lo=0)


def compute(b, opts: Options) -> dict:
    """The global sharpness max_{||delta|| <= rho} F(w + delta) - F(w) of the checkpoint's model, optionally the
    adaptive sharpness and the clients' sharpness with the Jensen gap (FedLESAM Eqs. 1-2).

    Args:
        b: the rebuilt checkpoint (``common.rebuild``); ``--local`` reads its partition and the full train set.
        opts: ``rho``, ``method`` and the ascent's ``steps``/``step_size``/``start``/``starts``, ``local`` /
            ``at_clients`` / ``weights``, ``batch_size``, ``adaptive`` / ``adaptive_rho`` / ``eta``, ``seed``.
    Returns:
        ``{rho, rho_source, settings, global, summary}`` and ``adaptive``, ``jensen`` when asked.

    >>> import torch                  # F(w) = mean_j (x_j' w)^2 = ||w||^2 / 2 on X = I: exact sharpness known
    >>> w, X = torch.tensor([3.0, 4.0], dtype=torch.float64), torch.eye(2, dtype=torch.float64)
    >>> r = global_sharpness(lambda th, x: x @ th, w, X, torch.zeros(2, dtype=torch.float64), 0.5, loss="mse")
    >>> round(r["sharpness"], 9)      # (||w|| + rho)^2 / 2 - ||w||^2 / 2 = 0.5 * 5 + 0.5^2 / 2
    2.625
    """
    from .common import refuse, require_clients
    args = opts
    method = opts.method or "ascent"
    if method != "ascent":
        refuse(args, ["steps", "step_size", "start", "starts"], f"with --method {method} (they shape the ascent)")
    if args.start != "random":
        refuse(args, ["starts"], "without --start random (one_step starts are deterministic)")
    if not (args.local or args.at_clients):
        refuse(args, ["weights"], "without --local (they weight the clients of the Jensen gap)")
    if not args.adaptive:
        refuse(args, ["adaptive_rho", "eta"], "without --adaptive (they shape the adaptive sharpness)")
    settings = _settings(opts, b)
    args = resolve(opts, method=method, steps=opts.steps or DEFAULT_STEPS, start=opts.start or "one_step",
                   weights=opts.weights or "uniform")
    rho = DEFAULT_RHO if args.rho is None else args.rho
    kw = {"steps": args.steps, "step_size": args.step_size, "start": args.start, "seed": args.seed,
          "loss": getattr(b, "loss", "ce")}
    g = _starts(lambda **k: global_sharpness(b.f, b.theta, b.X, b.y, rho, method, batch_size=args.batch_size, **k),
                kw, args.starts or 1)
    out = {"rho": rho, "rho_source": settings["rho"]["source"], "settings": settings, "global": g,
           "summary": {"sharpness_global": g["sharpness"], "loss": g["loss"], "rho": rho, "method": method,
                       "n_samples": g["n_samples"]}}
    if "starts" in g:
        st = g["starts"]
        out["summary"].update(sharpness_starts_mean=st["mean"], sharpness_starts_stderr=st["stderr"],
                              n_starts=st["n"])
    if args.adaptive:
        a = _starts(lambda **k: adaptive_sharpness(b.f, b.theta, b.X, b.y, settings["adaptive_rho"]["value"],
                                                   eta=settings["eta"]["value"], method=method,
                                                   batch_size=args.batch_size, **k), kw, args.starts or 1)
        out["adaptive"] = a
        out["summary"].update(adaptive_sharpness=a["sharpness"], adaptive_rho=a["rho"], eta=a["eta"])
        if "starts" in a:
            out["summary"].update(adaptive_starts_mean=a["starts"]["mean"],
                                  adaptive_starts_stderr=a["starts"]["stderr"])
    if args.local or args.at_clients:
        if b.data != "train":
            raise UserError("--local uses the clients' own data; drop --data (it must be train)")
        if args.samples is not None:
            raise UserError("--local uses every client's full data; drop --samples")
        idx = b.ckpt["partition"]["indices"]
        ds_X, ds_y = _client_data(b, args.data_dir)
        Fs = client_objectives(b.f, ds_X, ds_y, idx, loss=getattr(b, "loss", "ce"), batch_size=args.batch_size)
        W = require_clients(b, "--at-clients") if args.at_clients else None
        p = client_weights(len(idx), args.weights, [len(i) for i in idx])
        out["jensen"] = jensen_gap(Fs, b.theta, rho, weights=p, client_thetas=W, method=method,
                                   **{k: v for k, v in kw.items() if k != "loss"})
        out["summary"].update(jensen_gap=out["jensen"]["gap"],
                              local_sharpness_mean=sum(out["jensen"]["local_sharpness"]) / len(idx))
    starts = f", max of {args.starts} random starts" if (args.starts or 1) > 1 else ""
    what = f"sharpness, rho = {rho:g} ({method}{f', {args.steps} steps' if method == 'ascent' else ''}{starts})"
    out["_title"] = b.title(what)
    return out


def _starts(measure, kw: dict, n: int) -> dict:
    """``measure(**kw)`` from ``n`` random starts (seeds kw['seed'], kw['seed'] + 1, ...): the one with the largest
    value, with ``starts`` = {values, mean, stderr, n, seeds} beside it when n > 1."""
    runs = [measure(**{**kw, "seed": kw["seed"] + j}) for j in range(n)]
    if n == 1:
        return runs[0]
    vals = torch.tensor([r["sharpness"] for r in runs], dtype=torch.float64)
    return {**max(runs, key=lambda r: r["sharpness"]), "starts": {
        "values": vals.tolist(), "mean": float(vals.mean()), "stderr": float(vals.std() / n ** 0.5), "n": n,
        "seeds": list(range(kw["seed"], kw["seed"] + n))}}


def _settings(args, b) -> dict:
    """Every setting that shapes the number, with its value and where it came from (a flag or the default)."""
    def one(name, value, default):
        given = getattr(args, name, None)
        return {"value": default if given is None else given, "source": "default" if given is None else
                f"--{name.replace('_', '-')}"}
    s = {"rho": one("rho", None, DEFAULT_RHO), "method": one("method", None, "ascent"),
         "seed": {"value": args.seed, "source": "--seed (default 0)"},
         "samples": {"value": len(b.y), "source": "--samples" if args.samples is not None else "all of --data"},
         "training_rho": {"value": b.config.get("rho"), "source": "the run's config (not used)"}}
    if args.adaptive:
        s.update(adaptive_rho=one("adaptive_rho", None, DEFAULT_ADAPTIVE_RHO), eta=one("eta", None, DEFAULT_ETA))
    if (args.method or "ascent") == "ascent":
        s.update(steps=one("steps", None, DEFAULT_STEPS), start=one("start", None, "one_step"),
                 starts=one("starts", None, 1),
                 step_size=one("step_size", None, "rho"))
    return s


def _mean_se(r: dict) -> str:
    """'mean +- stderr (n)' of a result's random starts, '' without them."""
    st = r.get("starts")
    return f"{st['mean']:.5g} +- {st['stderr']:.2g} ({st['n']})" if st else ""


def compare_table(results: list[dict]) -> str:
    """One row per checkpoint: algorithm, round, sharpness, loss, gradient norm (the same radius and samples); with
    random starts the sharpness is their maximum and a column gives their mean +- standard error (count)."""
    adaptive = all("adaptive" in r for r in results)
    starts = any("starts" in r["global"] for r in results)
    head = f"{'checkpoint':<32} {'algo':<10} {'round':>5} {'rho':>6} {'sharpness':>11}"
    head += f" {'mean +- s.e. (starts)':>24}" if starts else ""
    head += f" {'loss':>10} {'grad norm':>10}"
    head += f" {'adaptive':>11}" if adaptive else ""
    head += f" {'mean +- s.e. (starts)':>24}" if adaptive and starts else ""
    rows = [head, "-" * len(head)]
    for r in results:
        g = r["global"]
        name = r["checkpoint"] if len(r["checkpoint"]) <= 32 else "..." + r["checkpoint"][-29:]
        rows.append(f"{name:<32} {r['algo']:<10} {r['round']:>5} {r['rho']:>6g} {g['sharpness']:>11.5g}"
                    + (f" {_mean_se(g):>24}" if starts else "")
                    + f" {g['loss']:>10.5g} {g['grad_norm']:>10.4g}"
                    + (f" {r['adaptive']['sharpness']:>11.5g}" if adaptive else "")
                    + (f" {_mean_se(r['adaptive']):>24}" if adaptive and starts else ""))
    if starts:
        rows.append("sharpness: the maximum over the random starts; beside it their mean +- standard error (count)")
    if adaptive:
        a = results[0]["adaptive"]
        rows.append(f"adaptive: ASAM's sharpness (Kwon et al. 2021) at rho = {a['rho']:g}, eta = {a['eta']:g}")
    return "\n".join(rows)


def _client_data(b, data_dir=None):
    """The whole training set in the checkpoint's indexing (client indices point into it)."""
    from ..data import load_dataset
    ds = load_dataset(b.config["dataset"], data_dir=data_dir or b.config.get("data_dir"), seed=b.config["seed"])
    return ds.x_train.to(b.theta), ds.y_train.to(b.theta.device)


def draw(result: dict, title: str | None = None):
    from ..plots import figure, integer_ticks, title as set_title
    fig, ax = figure(ncols=2 if "jensen" in result else 1, w=4.8, h=3.6)
    g = result["global"]
    if len(g["trace"]) > 1:
        ax[0, 0].plot(range(len(g["trace"])), g["trace"], marker="o")
        integer_ticks(ax[0, 0].xaxis)
        ax[0, 0].set(xlabel="ascent step")
    else:
        ax[0, 0].bar([g["method"].replace("_", "-")], g["trace"], width=0.4)
    st = g.get("starts")
    ax[0, 0].set(ylabel="F(w + delta) - F(w)", title=f"global sharpness {g['sharpness']:.3g}" + (
        f" (max of {st['n']} starts; mean {st['mean']:.3g} +- {st['stderr']:.2g})" if st else ""))
    if "jensen" in result:
        j = result["jensen"]
        ax[0, 1].bar(range(len(j["local_sharpness"])), j["local_sharpness"], color="C1", label="local s_i")
        ax[0, 1].axhline(j["global_sharpness"], color="C0", label="global s")
        ax[0, 1].set(xlabel="client", ylabel="sharpness",
                     title=f"Jensen gap (Eq.2 - Eq.1) = {j['gap']:.3g}")
        ax[0, 1].legend(fontsize="small")
        integer_ticks(ax[0, 1].xaxis)
    fig.tight_layout()
    set_title(fig, title)
    return fig


def plot_compare(results: list[dict]):
    """One bar per checkpoint: the global sharpness at the common radius (labels: algorithm, round)."""
    from ..plots import figure, title as set_title
    fig, ax = figure(w=max(4.0, 1.2 * len(results) + 2), h=3.6)
    labels = [Path(r["checkpoint"]).name if "source" in r else f"{r['algo']}\nround {r['round']}" for r in results]
    x = range(len(results))
    st = [r["global"].get("starts") for r in results]
    ax[0, 0].bar(x, [r["global"]["sharpness"] for r in results], width=0.5,
                 label=f"max of {st[0]['n']} random starts" if st[0] else None)
    if st[0]:
        ax[0, 0].errorbar(x, [s["mean"] for s in st], yerr=[s["stderr"] for s in st], fmt="o", color="k", capsize=4,
                          label=f"mean +- standard error ({st[0]['n']} starts)")
        ax[0, 0].legend(fontsize="small")
    ax[0, 0].set_xticks(range(len(results)), labels)
    ax[0, 0].set(ylabel="F(w + delta) - F(w)")
    r0 = results[0]
    set_title(fig, f"sharpness at rho = {r0['rho']:g} ({r0['global']['method']}), {r0['n_samples']} samples of "
                   f"{r0['data']} data, the same for every checkpoint")
    fig.tight_layout()
    return fig


def plot(result: dict, path) -> None:
    """``draw`` of ``compute``'s result (``plot_compare`` of a comparison), saved at ``path``."""
    from ..plots import save
    save(plot_compare(result["results"]) if result.get("comparison") else draw(result, result.get("_title")), path)


def compare(runs: list, paths: list) -> dict:
    """``probe sharpness A B ...``: every checkpoint at the same radius, start and samples; one table.
    ``runs``: ``(result, bundle)`` of each checkpoint in turn (an iterator: measured as the table is built),
    all with the same options."""
    results, index, dataset = [], None, None
    for path, (r, b) in zip(paths, runs):
        if dataset not in (None, r["dataset"]):
            raise UserError(f"{path}: trained on {r['dataset']}, the first checkpoint on {dataset}; a sharpness "
                            "comparison needs one data set")
        dataset = r["dataset"]
        ix = None if b.sample_index is None else sorted(b.sample_index.tolist())
        r = {k: v for k, v in r.items() if not k.startswith("_")}
        r["same_samples_as_first"] = index is None or ix == index
        index = ix if index is None else index
        results.append(r)
    table = compare_table(results)
    notes = [] if all(r["same_samples_as_first"] for r in results) else [
        "the runs' partitions cover different samples, so their sample sets differ; use --data test for one set"]
    return {"probe": "sharpness", "comparison": True, "checkpoints": [str(p) for p in paths],
            "rho": results[0]["rho"], "settings": results[0]["settings"], "results": results, "notes": notes,
            "summary": {r["checkpoint"]: r["global"]["sharpness"] for r in results},
            "summary_text": table + "".join(f"\nnote: {n}" for n in notes)}


# ---- adaptive (scale-invariant) sharpness ------------------------------------------------------------------
class Rescaled(Objective):
    """G(delta) = F(w + T delta), T = diag(t): the rho-ball in delta is the ellipsoid ||T^{-1} eps|| <= rho in eps.
    grad G = T grad F, Hess G = T (Hess F) T; F's own (chunked) evaluation is reused."""

    def __init__(self, F: Objective, theta: torch.Tensor, t: torch.Tensor):
        self.F, self.theta, self.t = F, theta.detach(), t.detach()
        super().__init__(lambda d: F.fun(self.theta + self.t * d))

    def value(self, delta):
        return self.F.value(self.theta + self.t * delta)

    def value_and_grad(self, delta):
        v, g = self.F.value_and_grad(self.theta + self.t * delta)
        return v, self.t * g

    def hessian(self, delta):
        return self.t[:, None] * self.F.hessian(self.theta + self.t * delta) * self.t[None, :]


def adaptive_sharpness(f, theta: torch.Tensor, X: torch.Tensor, y: torch.Tensor, rho: float, *, eta: float = 0.01,
                       method: str = "one_step", steps: int = 10, step_size: float | None = None,
                       start: str = "one_step", seed: int = 0, loss="ce", batch_size: int = 4096,
                       return_delta: bool = False) -> dict:
    """Adaptive sharpness (Kwon et al. 2021, ASAM, Eq. 9 with T_w = diag(|w| + eta)):

        max_{||T_w^{-1} eps||_2 <= rho} F(w + eps) - F(w),   T_w = diag(|w_1| + eta, ..., |w_P| + eta).

    Solved as max_{||delta|| <= rho} F(w + T_w delta) with ``maximise`` (eps = T_w delta), so ``method`` means what
    it means for ``global_sharpness``: ``one_step`` gives ASAM's eps = rho T_w^2 g / ||T_w g||, ``quadratic`` the
    exact maximum of the second-order model on the ellipsoid. With eta = 0 the value is invariant to rescalings
    that leave f unchanged and act elementwise (a ReLU layer pair W1 * c, W2 / c); eta > 0 keeps zero weights
    perturbable and makes the invariance approximate. Returns ``global_sharpness``'s keys plus ``eta``;
    ``delta_norm`` is ||T_w^{-1} eps||, ``eps_norm`` ||eps||, ``grad_norm`` ||T_w grad F(w)|| (``delta`` with
    ``return_delta`` is eps)."""
    if not (isinstance(eta, (int, float)) and math.isfinite(eta) and eta >= 0):
        raise UserError(f"eta must be a finite number >= 0 (got {eta!r}); ASAM uses 0.01")
    F = DataObjective(f, X, y, loss, batch_size)
    theta = theta.detach()
    G = Rescaled(F, theta, theta.abs() + eta)
    r = maximise(G, torch.zeros_like(theta), rho, method, steps=steps, step_size=step_size, start=start, seed=seed)
    eps = G.t * r["delta"]
    out = _plain(r, loss=r["base"], loss_perturbed=r["value"], rho=float(rho), eta=float(eta), method=method,
                 steps=steps if method == "ascent" else 0, n_samples=len(y), eps_norm=float(eps.norm()))
    if return_delta:
        out["delta"] = eps
    return out
