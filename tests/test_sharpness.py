"""Sharpness probes against exact answers in float64 (quadratics, closed forms, brute force)."""
import json
import math

import pytest
import torch
import torch.nn.functional as F

from fedlab_analysis.errors import UserError
from fedlab_analysis.probes import sharpness as S

D64 = torch.float64


def lstsq_problem(n=40, P=6, seed=0):
    """Linear regression: f(theta, x) = x @ theta with MSE, a quadratic with Hessian 2 X'X / n."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, P, generator=g, dtype=D64) * torch.linspace(0.3, 2.0, P, dtype=D64)
    y = torch.randn(n, generator=g, dtype=D64)
    H = 2 * X.T @ X / n
    return X, y, H, torch.linalg.lstsq(X, y).solution


def f_lin(theta, x):
    return x @ theta


def quad(A, c):
    return S.Objective(lambda w: 0.5 * (w - c) @ A @ (w - c))


def spd(P, g, lo=0.1, hi=3.0):
    Q = torch.linalg.qr(torch.randn(P, P, generator=g, dtype=D64))[0]
    return Q @ torch.diag(lo + (hi - lo) * torch.rand(P, generator=g, dtype=D64)) @ Q.T


def test_ascent_at_the_minimum_equals_rho2_lambda_max_over_2():
    X, y, H, w_star = lstsq_problem()
    rho, lmax = 0.3, float(torch.linalg.eigvalsh(H)[-1])
    expected = rho ** 2 * lmax / 2
    r = S.global_sharpness(f_lin, w_star, X, y, rho, "ascent", steps=80, start="random", seed=3, loss="mse",
                           batch_size=7)
    assert r["sharpness"] == pytest.approx(expected, rel=1e-8)
    assert r["delta_norm"] == pytest.approx(rho, rel=1e-12)
    assert S.global_sharpness(f_lin, w_star, X, y, rho, "quadratic", loss="mse")["sharpness"] == \
        pytest.approx(expected, rel=1e-10)
    # at a minimum g = 0 up to rounding: the one-step point is a feasible point in a rounding-noise direction
    assert S.global_sharpness(f_lin, w_star, X, y, rho, loss="mse")["sharpness"] <= expected * (1 + 1e-12)


def test_one_step_equals_its_closed_form_away_from_the_minimum():
    X, y, H, w_star = lstsq_problem(seed=1)
    w = w_star + torch.tensor([1.0, -0.5, 0.2, 0.0, 0.7, -1.0], dtype=D64)
    rho = 0.2
    g = 2 * X.T @ (X @ w - y) / len(y)
    d = rho * g / g.norm()
    Fw = lambda v: float(((X @ v - y) ** 2).mean())
    closed = rho * float(g.norm()) + 0.5 * float(d @ H @ d)            # f(w + d) - f(w) of a quadratic
    r = S.global_sharpness(f_lin, w, X, y, rho, loss="mse", batch_size=9)
    assert r["sharpness"] == pytest.approx(closed, rel=1e-12)
    assert r["sharpness"] == pytest.approx(Fw(w + d) - Fw(w), rel=1e-12)
    assert r["loss"] == pytest.approx(Fw(w), rel=1e-12)
    assert r["grad_norm"] == pytest.approx(float(g.norm()), rel=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_ascent_from_the_one_step_point_never_ends_below_it(seed):
    g = torch.Generator().manual_seed(seed)
    P = 8
    A = spd(P, g, 0.05, 6.0)
    Fq = quad(A, torch.zeros(P, dtype=D64))
    w = torch.randn(P, generator=g, dtype=D64) * 0.3
    rho = 0.5
    one = S.maximise(Fq, w, rho, "one_step")
    asc = S.maximise(Fq, w, rho, "ascent", steps=15)
    exact = S.maximise(Fq, w, rho, "quadratic")
    assert asc["trace"][0] == one["sharpness"]
    assert all(b >= a for a, b in zip(asc["trace"], asc["trace"][1:]))
    assert one["sharpness"] <= asc["sharpness"] <= exact["sharpness"] + 1e-12
    assert asc["delta_norm"] <= rho * (1 + 1e-12)
    assert asc["sharpness"] > one["sharpness"]          # anisotropic A: the first-order point is not optimal


@pytest.mark.parametrize("case", ["psd", "indefinite", "concave_interior", "hard"])
def test_trust_region_solution_matches_brute_force(case):
    H = {"psd": torch.tensor([[2.0, 0.5], [0.5, 1.0]]), "indefinite": torch.tensor([[1.0, 0.0], [0.0, -2.0]]),
         "concave_interior": torch.tensor([[-4.0, 1.0], [1.0, -3.0]]),
         "hard": torch.tensor([[3.0, 0.0], [0.0, 1.0]])}[case].to(D64)
    g = {"hard": torch.tensor([0.0, 0.4]), "concave_interior": torch.tensor([0.5, -0.3])}.get(
        case, torch.tensor([0.7, -0.3])).to(D64)
    rho = 0.8
    d = S.trust_region_max(H, g, rho)
    q = lambda v: v @ g + 0.5 * ((v @ H) * v).sum(-1)
    r = torch.linspace(0, rho, 401, dtype=D64)[:, None, None]
    phi = torch.linspace(0, 2 * math.pi, 3601, dtype=D64)[None, :, None]
    pts = (r * torch.cat([phi.cos(), phi.sin()], -1)).reshape(-1, 2)
    assert float(d.norm()) <= rho * (1 + 1e-12)
    assert float(q(d)) >= float(q(pts).max()) - 1e-12
    assert float(q(d)) == pytest.approx(float(q(pts).max()), abs=1e-5)
    if case == "concave_interior":
        assert torch.allclose(d, -torch.linalg.solve(H, g))


@pytest.mark.parametrize("seed", range(3))
def test_jensen_gap_is_nonnegative_for_aligned_clients_with_exact_maxima(seed):
    g = torch.Generator().manual_seed(seed)
    P, N = 5, 4
    objs = [quad(spd(P, g), torch.randn(P, generator=g, dtype=D64)) for _ in range(N)]
    w = torch.randn(P, generator=g, dtype=D64)
    r = S.jensen_gap(objs, w, 0.5, method="quadratic", weights=[0.1, 0.2, 0.3, 0.4])
    assert r["gap"] >= 0
    # Eq. (2) is the weighted mean of the local maxima, Eq. (1) the maximum of the weighted mean
    loc = [S.maximise(F_, w, 0.5, "quadratic")["value"] for F_ in objs]
    assert r["local_sam"] == pytest.approx(sum(p * v for p, v in zip([0.1, 0.2, 0.3, 0.4], loc)), rel=1e-12)
    # identical clients: E max = max E, no gap
    same = S.jensen_gap([objs[0]] * N, w, 0.5, method="quadratic")
    assert same["gap"] == pytest.approx(0.0, abs=1e-12)


def test_jensen_gap_on_quadratic_clients_agrees_with_brute_force():
    g = torch.Generator().manual_seed(7)
    A = [spd(2, g) for _ in range(3)]
    c = [torch.randn(2, generator=g, dtype=D64) for _ in range(3)]
    w, rho = torch.tensor([0.3, -0.2], dtype=D64), 0.6
    r = S.jensen_gap([quad(a, ci) for a, ci in zip(A, c)], w, rho, method="quadratic")
    phi = torch.linspace(0, 2 * math.pi, 20001, dtype=D64)
    pts = w + rho * torch.stack([phi.cos(), phi.sin()], -1)          # convex quadratics: max on the sphere
    vals = torch.stack([0.5 * (((pts - ci) @ a) * (pts - ci)).sum(-1) for a, ci in zip(A, c)])
    assert r["local_sam"] == pytest.approx(float(vals.max(1).values.mean()), abs=1e-6)
    assert r["global_sam"] == pytest.approx(float(vals.mean(0).max()), abs=1e-6)


def test_cross_entropy_model_one_step_matches_full_batch_autograd():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(50, 4, generator=g, dtype=D64)
    y = torch.randint(0, 3, (50,), generator=g)
    theta = torch.randn(15, generator=g, dtype=D64)
    f = lambda th, x: x @ th[:12].view(4, 3) + th[12:]
    Fw = lambda th: F.cross_entropy(f(th, X), y)
    t = theta.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(Fw(t), t)
    rho = 0.05
    expected = float(Fw(theta + rho * grad / grad.norm()) - Fw(theta))
    r = S.global_sharpness(f, theta, X, y, rho, batch_size=8, return_delta=True)
    assert r["sharpness"] == pytest.approx(expected, rel=1e-10)
    assert torch.allclose(r["delta"], rho * grad / grad.norm())
    json.dumps({k: v for k, v in r.items() if k != "delta"})


def test_local_sharpness_per_client_equals_global_on_that_clients_data():
    g = torch.Generator().manual_seed(2)
    X = torch.randn(30, 3, generator=g, dtype=D64)
    y = torch.randint(0, 2, (30,), generator=g)
    theta = torch.randn(6, generator=g, dtype=D64)
    f = lambda th, x: x @ th.view(3, 2)
    idx = [torch.arange(0, 10), torch.arange(10, 30)]
    ls = S.local_sharpness(f, theta, X, y, idx, 0.1)
    for i, ix in enumerate(idx):
        assert ls["local_sharpness"][i] == pytest.approx(
            S.global_sharpness(f, theta, X[ix], y[ix], 0.1)["sharpness"], rel=1e-12)


def test_bad_inputs_are_user_errors():
    Fq = quad(torch.eye(2, dtype=D64), torch.zeros(2, dtype=D64))
    w = torch.ones(2, dtype=D64)
    with pytest.raises(UserError, match="rho"):
        S.maximise(Fq, w, 0.0)
    with pytest.raises(UserError, match="method"):
        S.maximise(Fq, w, 0.1, "newton")
    with pytest.raises(UserError, match="weights"):
        S.jensen_gap([Fq, Fq], w, 0.1, weights=[0.5, 0.6])


def test_training_hook_logs_global_and_local_sharpness(tiny_cfg):
    from fedlab_analysis.trainers.engine import Run
    run = Run(tiny_cfg(algo="fedsam", rounds=2, dtype="float64"))
    hook = S.make_hook("sharpness", every=1, steps=[1], local=True)
    run.callbacks.append(hook)
    run.round()
    run.round()
    rounds = [r for r in hook.rows if "step" not in r]
    steps = [r for r in hook.rows if "step" in r]
    assert [r["round"] for r in rounds] == [1, 2] and [r["step"] for r in steps] == [1, 1]
    ix = run.eval_train
    again = S.global_sharpness(run.forward, run.w, run.X[ix], run.Y[ix], run.cfg.hp("rho"))
    assert rounds[-1]["sharpness_global"] == pytest.approx(again["sharpness"], rel=1e-12)
    assert rounds[-1]["rho"] == run.cfg.hp("rho")
    assert rounds[-1]["sharpness_local_max"] >= rounds[-1]["sharpness_local_mean"]
    json.dumps(hook.rows)


def test_cli_on_a_checkpoint(tmp_path, tiny_cfg, capsys):
    from fedlab_analysis import probe
    from fedlab_analysis.trainers.loop import train
    train(tiny_cfg(algo="fedsam", rho=0.05, rounds=2), tmp_path / "run")
    out = tmp_path / "s.json"
    assert probe.main(["sharpness", str(tmp_path / "run"), "--steps", "3", "--local", "--json", str(out),
                       "--plot", str(tmp_path / "s.png")]) == 0
    r = json.loads(out.read_text())
    assert r["rho"] == S.DEFAULT_RHO and r["rho_source"] == "default"
    assert r["settings"]["steps"] == {"value": 3, "source": "--steps"}
    assert r["settings"]["rho"] == {"value": S.DEFAULT_RHO, "source": "default"}
    assert r["setting_sources"]["rho"] == "default" and r["setting_sources"]["steps"] == "flag"
    assert r["global"]["method"] == "ascent" and len(r["global"]["trace"]) == 4
    assert len(r["jensen"]["local_sharpness"]) == 6 and (tmp_path / "s.png").exists()
    assert probe.main(["sharpness", str(tmp_path / "run"), "--local", "--samples", "10"]) == 2
    assert "--samples" in capsys.readouterr().err
    train(tiny_cfg(algo="fedsam", rounds=1, keep_clients=False), tmp_path / "nokeep")
    assert probe.main(["sharpness", str(tmp_path / "nokeep"), "--at-clients"]) == 2
    assert "--keep-clients true" in capsys.readouterr().err


def test_two_algorithms_are_measured_at_one_radius_and_compared_in_one_table(tmp_path, tiny_cfg, capsys):
    """FedAvg (no rho) and FedSAM trained at rho 0.2: default flags measure both at DEFAULT_RHO (the old default,
    each run's training rho, measured them at 0.1 and 0.2), with the same samples and random start, in one table;
    --adaptive adds ASAM's column; --starts gives mean +- standard error over random starts."""
    from fedlab_analysis import probe
    from fedlab_analysis.trainers.loop import train
    train(tiny_cfg(rounds=1), tmp_path / "avg")
    train(tiny_cfg(algo="fedsam", rho=0.2, rounds=1), tmp_path / "sam")
    out = tmp_path / "c.json"
    argv = ["sharpness", str(tmp_path / "avg"), str(tmp_path / "sam"), "--samples", "50", "--steps", "2",
            "--start", "random", "--starts", "3", "--adaptive", "--quiet", "--json", str(out)]
    assert probe.main(argv + ["--plot", str(tmp_path / "c.png")]) == 0
    table = capsys.readouterr().out
    r = json.loads(out.read_text())
    assert [x["rho"] for x in r["results"]] == [S.DEFAULT_RHO] * 2 and r["settings"]["rho"]["source"] == "default"
    assert [x["algo"] for x in r["results"]] == ["fedavg", "fedsam"]
    assert all(x["same_samples_as_first"] for x in r["results"]) and not r["notes"]
    assert [x["settings"]["training_rho"]["value"] for x in r["results"]][1] == 0.2
    for x in r["results"]:
        st = x["global"]["starts"]
        assert st["n"] == 3 and st["stderr"] >= 0 and x["global"]["sharpness"] == max(st["values"])
        assert f"{x['global']['sharpness']:.5g}" in table and f"{x['adaptive']['sharpness']:.5g}" in table
        assert x["adaptive"]["rho"] == S.DEFAULT_ADAPTIVE_RHO and x["adaptive"]["eta"] == S.DEFAULT_ETA
    assert "adaptive" in table and (tmp_path / "c.png").exists()
    one = json.loads(out.read_text())["results"][0]
    assert probe.main(["sharpness", str(tmp_path / "avg"), "--samples", "50", "--steps", "2", "--start", "random",
                       "--starts", "3", "--adaptive", "--quiet", "--json", str(out)]) == 0
    alone = json.loads(out.read_text())
    assert alone["global"]["sharpness"] == one["global"]["sharpness"]        # same samples and starts alone
    assert probe.main(["sharpness", str(tmp_path / "avg"), "--eta", "0.1"]) == 2
    assert "--adaptive" in capsys.readouterr().err
