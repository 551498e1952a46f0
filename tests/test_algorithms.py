"""Every algorithm against its reduction identities and the papers' exact identities (float64, 1e-12)."""

import numpy as np
import pytest
import torch

from fedlab_analysis.config import RunConfig
from fedlab_analysis.data import Dataset
from fedlab_analysis.trainers import ALGORITHMS
from fedlab_analysis.trainers.engine import Run

BASE = dict(dataset="digits", model="mlp", model_kwargs={"widths": [8]}, clients=6, active_ratio=0.5,
            rounds=3, local_steps=3, batch_size=12, lr=0.05, lr_decay=0.9, wd=1e-3, partition="dirichlet",
            dir_alpha=0.5, seed=3, dtype="float64", eval_train_samples=50, quiet=True, keep_clients=False)


def trajectory(rounds=3, **kw):
    run = Run(RunConfig(**{**BASE, **kw}))
    ws = []
    for _ in range(rounds):
        run.round()
        ws.append(run.w.clone())
    return torch.stack(ws), run


def assert_same(a, b, tol=1e-12):
    err = (a - b).abs().max().item()
    assert err <= tol, err


REDUCTIONS = [
    (dict(algo="fedsmoo", rho=0.0), dict(algo="feddyn")),
    (dict(algo="fedsmoo", rho=0.0, smoo_server="code"), dict(algo="feddyn")),
    (dict(algo="fedsam", rho=0.0), dict(algo="fedavg")),
    (dict(algo="mofedsam", rho=0.0), dict(algo="fedcm")),
    (dict(algo="fedgamma", rho=0.0), dict(algo="scaffold")),
    (dict(algo="fedspeed", rho=0.0), dict(algo="feddyn")),
    (dict(algo="fedlesam", rho=0.0), dict(algo="fedavg")),
    (dict(algo="fedlesam-s", rho=0.0), dict(algo="scaffold")),
    (dict(algo="fedlesam-d", rho=0.0), dict(algo="feddyn")),
    (dict(algo="fedlesam-d", rho=0.0, lesam_source="last_global_update"), dict(algo="feddyn")),
    (dict(algo="fedcm", alpha=1.0), dict(algo="fedavg")),
    (dict(algo="fedcm", alpha=1.0, fedcm_wd="outside"), dict(algo="fedavg")),
    (dict(algo="fedprox", mu=0.0), dict(algo="fedavg")),
    (dict(algo="fedinit", beta=0.0), dict(algo="fedavg")),
    (dict(algo="fedavg", ri=True, beta=0.0), dict(algo="fedavg")),
    (dict(algo="scaffold", ri=True, beta=0.0, ri_agg="delta_from_init"), dict(algo="scaffold")),
    (dict(algo="feddyn", ri=True, beta=0.0), dict(algo="feddyn")),
    (dict(algo="fedsmoo", ri=True, beta=0.0), dict(algo="fedsmoo")),
    (dict(algo="fedcm", ri=True, beta=0.0), dict(algo="fedcm")),
    (dict(algo="fedals", alpha=1, tau=3, active_ratio=1.0), dict(algo="fedavg", local_steps=3, active_ratio=1.0)),
    (dict(algo="fedavgm", server_momentum=0.0), dict(algo="fedavg")),
]


@pytest.mark.parametrize("a, b", REDUCTIONS, ids=[f"{a['algo']}~{b['algo']}" for a, b in REDUCTIONS])
def test_reduction(a, b):
    wa, _ = trajectory(**a)
    wb, _ = trajectory(**b)
    assert_same(wa, wb)
    assert (wa[-1] - trajectory(rounds=1, **b)[0][0]).abs().max() > 1e-6     # it really moved over 3 rounds


def test_scaffold_first_round_is_fedavg_and_then_differs():
    ws, _ = trajectory(algo="scaffold")
    wf, _ = trajectory(algo="fedavg")
    assert_same(ws[0], wf[0])
    assert (ws[-1] - wf[-1]).abs().max() > 1e-8


def test_every_algorithm_runs_and_moves():
    for name in ALGORITHMS:
        kw = dict(algo=name)
        if name.startswith("fedals"):
            kw.update(active_ratio=1.0, tau=2, alpha=2)
        w, run = trajectory(rounds=2, **kw)
        assert torch.isfinite(w).all() and (w[1] - w[0]).abs().max() > 0, name


# ---- FedCM -----------------------------------------------------------------------------------------------
def _record_grads(run):
    """Wrap run.grads to keep every minibatch gradient with its client id (and wd*x where wd is inside)."""
    log = []
    inner = run.grads

    def grads(ctx, x, k, data=None):
        g = inner(ctx, x, k, data)
        for j in ctx.active.nonzero().flatten().tolist():
            log.append((ctx.t, int(ctx.S[j]), g[j] + run.cfg.wd * x[j]))
        return g
    run.grads = grads
    return log


def test_fedcm_lemma_4_1_every_round():
    """Delta_{t+1} = alpha * (mean of round-t gradients) + (1 - alpha) Delta_t (Lemma 4.1), Bernoulli sampling,
    lr decay, unequal K_i (local epochs), weight decay inside alpha*g."""
    run = Run(RunConfig(**{**BASE, "algo": "fedcm", "alpha": 0.3, "local_steps": None, "local_epochs": 1,
                           "sampling": "bernoulli", "clients": 8}))
    log = _record_grads(run)
    for t in range(4):
        D_prev = run.state["D"].clone()
        run.round()
        per_client = {}
        for (tt, i, g) in log:
            if tt == t:
                per_client.setdefault(i, []).append(g)
        mean_g = torch.stack([torch.stack(v).mean(0) for v in per_client.values()]).mean(0)
        assert_same(run.state["D"], 0.3 * mean_g + 0.7 * D_prev)


def test_fedcm_one_step_full_participation_is_dampened_heavy_ball():
    """K = 1, full participation, full-batch: x_{t+1} = x_t - eta_g eta m_{t+1}, m_{t+1} = (1-a) m_t + a grad f(x_t)."""
    alpha = 0.2
    run = Run(RunConfig(**{**BASE, "algo": "fedcm", "alpha": alpha, "local_steps": 1, "batch_size": 10_000,
                           "active_ratio": 1.0, "wd": 0.0, "lr_decay": 1.0, "server_lr": 0.7}))
    f = run.forward
    x, m = run.w.clone(), torch.zeros_like(run.w)
    for _ in range(4):
        gs = []
        for ix in run.idx:
            th = x.clone().requires_grad_(True)
            gs.append(torch.autograd.grad(torch.nn.functional.cross_entropy(f(th, run.X[ix]), run.Y[ix]), th)[0])
        m = (1 - alpha) * m + alpha * torch.stack(gs).mean(0)
        x = x - 0.7 * BASE["lr"] * m
        run.round()
        assert_same(run.w, x)


# ---- FedDyn / FedSMOO ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("algo", ["feddyn", "fedsmoo", "fedspeed", "fedlesam-d"])
def test_dual_identities(algo):
    """FedSMOO T3 (a): the server dual is the mean of ALL client duals; (b): mean_S x_i = w^{t+1} + beta lambda."""
    run = Run(RunConfig(**{**BASE, "algo": algo}))
    seen = []
    run.callbacks.append(lambda ev, r, ctx, x: ev == "round" and seen.append((x.mean(0), r.w.clone())))
    for _ in range(4):
        run.round()
        assert_same(run.state["H"], run.state["h"].mean(0))
        xbar, w = seen[-1]
        assert_same(xbar, w - run.state["H"])          # H = -beta lambda


def test_fedsmoo_server_perturbation_forms_differ_and_have_radius_rho():
    _, paper = trajectory(algo="fedsmoo", rho=0.05)
    _, code = trajectory(algo="fedsmoo", rho=0.05, smoo_server="code")
    for run in (paper, code):
        assert abs(run.state["s"].norm().item() - 0.05) < 1e-6
    assert (paper.state["s"] - code.state["s"]).abs().max() > 1e-6


# ---- relaxed initialisation ---------------------------------------------------------------------------------
def test_ri_offsets_average_to_zero_under_full_participation():
    run = Run(RunConfig(**{**BASE, "algo": "fedinit", "beta": 0.3, "active_ratio": 1.0}))
    offs = []
    run.callbacks.append(lambda ev, r, ctx, x: ev == "round" and offs.append((ctx.x0 - ctx.w).mean(0)))
    for _ in range(4):
        run.round()
    assert max(o.abs().max().item() for o in offs) <= 1e-12
    assert (run.last_local - run.w).abs().max() > 1e-6          # the offsets themselves are not zero


def _identical_hessian_clients(m=4, n=30, d=5, seed=0):
    """Every client holds the SAME inputs with its own targets: f_i(w) = 1/2 mean ||W x + b - T[y]||^2 has one
    Hessian for all clients (FedInit App. B)."""
    g = np.random.default_rng(seed)
    X = torch.tensor(g.normal(size=(n, d)))
    Xall = X.repeat(m, 1)
    y = torch.tensor(g.integers(0, 3, size=m * n))
    idx = [np.arange(i * n, (i + 1) * n) for i in range(m)]
    return Dataset("quad", Xall.float(), y, X.float(), y[:n], 3, (d,), natural_clients=idx)


def test_ri_beta_invariance_on_identical_hessians():
    """M2: identical Hessians, full participation, full-batch steps: the global trajectory does not depend on beta."""
    ds = _identical_hessian_clients()
    targets = torch.tensor(np.random.default_rng(1).normal(size=(3, 3)))
    trajs = []
    for beta in (0.0, 0.1, 0.5):
        cfg = RunConfig(**{**BASE, "algo": "fedinit", "beta": beta, "model": "logreg", "model_kwargs": {},
                           "partition": "natural", "active_ratio": 1.0, "batch_size": 1000, "local_steps": 5,
                           "wd": 0.0, "lr": 0.1, "lr_decay": 1.0})
        run = Run(cfg, dataset=ds)
        run.loss = lambda out, y: 0.5 * (out - targets[y]).pow(2).sum(1).mean()
        ws = []
        for _ in range(6):
            run.round()
            ws.append(run.w.clone())
        trajs.append(torch.stack(ws))
    assert_same(trajs[1], trajs[0], 1e-12)
    assert_same(trajs[2], trajs[0], 1e-12)


# ---- mechanics ----------------------------------------------------------------------------------------------
def test_fedlesam_one_pass_per_step_and_constant_perturbation():
    counts = {}
    for algo in ("fedavg", "fedsam", "fedlesam"):
        run = Run(RunConfig(**{**BASE, "algo": algo, "active_ratio": 1.0}))
        deltas = []
        run.callbacks.append(lambda ev, r, ctx, x: ev == "step" and "delta" in ctx.extra
                             and deltas.append(ctx.extra["delta"].clone()))
        for _ in range(3):
            run.round()
        steps = 3 * run.m * BASE["local_steps"]
        counts[algo] = run.n_grads / steps
        if algo == "fedlesam":
            per_round = [deltas[i:i + BASE["local_steps"]] for i in range(0, len(deltas), BASE["local_steps"])]
            for r in per_round:
                assert all(torch.equal(r[0], d) for d in r)
            assert per_round[0][0].abs().max() == 0                        # first participation: no perturbation
            norms = per_round[-1][0].norm(dim=1)
            rho = run.cfg.hp("rho")
            assert torch.allclose(norms, torch.full_like(norms, rho), atol=1e-6)   # rho, once clients were seen
    assert counts == {"fedavg": 1.0, "fedsam": 2.0, "fedlesam": 1.0}


def test_fedlesam_code_source_uses_last_global_update():
    run = Run(RunConfig(**{**BASE, "algo": "fedlesam", "lesam_source": "last_global_update", "rho": 0.2}))
    captured = []
    run.callbacks.append(lambda ev, r, ctx, x: ev == "step" and ctx.k == 0 and captured.append(ctx.extra["delta"][0]))
    w_hist = [run.w.clone()]
    for _ in range(3):
        run.round()
        w_hist.append(run.w.clone())
    back = w_hist[1] - w_hist[2]                       # w^{t-1} - w^t seen in round 2
    assert_same(captured[2], 0.2 * back / (back.norm() + 1e-7))


def test_fedals_representation_changes_only_at_multiples_of_alpha_tau():
    tau, alpha = 2, 3
    run = Run(RunConfig(**{**BASE, "algo": "fedals", "tau": tau, "alpha": alpha, "active_ratio": 1.0,
                           "model_kwargs": {"widths": [8, 8]}, "phi_layers": 2}))
    phi = run.space.mask("group:phi")
    spread = []       # per global step: are phi (and h) identical across clients?
    run.callbacks.append(lambda ev, r, ctx, x: ev == "step" and spread.append(
        ((x[:, phi] - x[0, phi]).abs().max().item(), (x[:, ~phi] - x[0, ~phi]).abs().max().item())))
    for _ in range(6):
        run.round()
    for s, (sp_phi, sp_h) in enumerate(spread, start=1):
        assert (sp_phi == 0) == (s % (alpha * tau) == 0), (s, sp_phi)
        assert (sp_h == 0) == (s % tau == 0), (s, sp_h)


@pytest.mark.parametrize("algo", ["fedals", "fedals-scaffold"])
def test_fedals_traffic_over_alpha_rounds_is_table2s_count(algo):
    """The ALS part decides FedALS's traffic (Part.traffic): h both ways every round, phi every alpha-th round, so
    6 rounds at alpha = 3 send fedals_floats (6 |h| + 2 |phi|) per client; Alg. 4 stores c_k and x_sync (2P)."""
    from types import SimpleNamespace
    from fedlab_analysis.trainers.algorithms import fedals_floats
    run = Run(RunConfig(**{**BASE, "algo": algo, "tau": 2, "alpha": 3, "active_ratio": 1.0,
                           "model_kwargs": {"widths": [8, 8]}, "phi_layers": 2}))
    n, P = BASE["clients"], run.space.P
    rows = [run.algo.comm(run.face, SimpleNamespace(t=t, n=n)) for t in range(6)]
    assert sum(r["floats_up"] for r in rows) / n == pytest.approx(fedals_floats(run.space, 3, 6), rel=1e-12)
    assert [r["floats_up"] == n * P for r in rows] == [False, False, True] * 2
    assert all(r["floats_down"] == r["floats_up"] for r in rows)
    assert {r["floats_stored_per_client"] for r in rows} == {2 * P if algo == "fedals-scaffold" else 0}


def test_fedals_refuses_partial_participation():
    from fedlab_analysis.errors import UserError
    from fedlab_analysis.trainers import build
    with pytest.raises(UserError, match="--active-ratio: FedALS runs with full participation"):
        build(RunConfig(**{**BASE, "algo": "fedals", "active_ratio": 0.5}))
    assert build(RunConfig(**{**BASE, "algo": "fedals", "tau": 4, "active_ratio": 1.0})).K == 4


def test_fedals_table2_communication_formula():
    """FedALS Example 1: comm(alpha) = N (650 + P_phi / alpha) per client, N = 2.344e9 / 269,722 rounds."""
    from fedlab_analysis.models import build_model
    from fedlab_analysis.params import ParamSpace
    from fedlab_analysis.trainers.algorithms import fedals_floats
    space = ParamSpace.of_model(build_model("resnet20", (3, 32, 32), 10))
    space = space.with_phi_layers(space.n_blocks - 1)
    N = 8690
    table = {1: 2.344, 5: 0.473, 10: 0.239, 25: 0.099, 50: 0.052, 100: 0.029}
    for alpha, billions in table.items():
        floats = fedals_floats(space, alpha=alpha, n_rounds=N)
        assert round(floats / 1e9, 3) == billions, (alpha, floats)


def test_fedlesam_released_code_perturbation_reproduces_its_indexing():
    """The released LESAM.first_step shifts tensor l by -u[l] rho / sum_{j<#tensors} |u[j]| (u flat): reproduced
    on purpose for comparisons with that code, against a hand computation."""
    from fedlab_analysis.trainers.parts import released_lesam_perturbation
    run = Run(RunConfig(**{**BASE, "algo": "fedlesam", "lesam_source": "released_code", "rho": 0.3}))
    u = torch.arange(run.space.P, dtype=torch.float64) - 7.0
    d = released_lesam_perturbation(run.space, u, 0.3)
    n = len(run.space.layers)
    denom = sum(abs(float(u[j])) for j in range(n)) + 1e-7
    for l, layer in enumerate(run.space.layers):
        expect = torch.full((layer.numel,), -float(u[l]) * 0.3 / denom, dtype=torch.float64)
        assert torch.allclose(d[layer.slice], expect, rtol=1e-14, atol=0)   # one constant per tensor
    for _ in range(2):
        run.round()
    assert torch.isfinite(run.w).all()


def test_fedlesam_s_code_scale():
    wa, _ = trajectory(algo="fedlesam-s", lesam_s_scale="code", lamb=1.0)
    wb, _ = trajectory(algo="fedlesam-s")
    assert_same(wa, wb)                                    # lamb = 1: the code's scale is the paper's
    wc, _ = trajectory(algo="fedlesam-s", lesam_s_scale="code", lamb=0.1)
    assert (wc - wb).abs().max() > 1e-8
