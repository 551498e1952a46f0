"""Perturbation drift and estimator quality (probes/drift.py): formulas on hand-made vectors, zero drift when the
local perturbation IS the virtual global one, the hook changes nothing, the checkpoint CLI agrees with the hook."""
import json
import math

import pytest
import torch
import torch.nn.functional as F

from fedlab_analysis import checkpoint, probe
from fedlab_analysis.probes import drift
from fedlab_analysis.trainers.engine import Run
from fedlab_analysis.trainers.loop import to_checkpoint, train

D64 = dict(dtype=torch.float64)


def test_drift_formula_on_hand_vectors():
    g = torch.tensor([3.0, 0.0, 0.0], **D64)
    same = torch.tensor([[0.1, 0.0, 0.0], [5.0, 0.0, 0.0]], **D64)            # any scale: unit directions
    assert drift.perturbation_drift(same, g) == (pytest.approx(0.0, abs=1e-15), 2)
    mixed = torch.tensor([[0.0, 2.0, 0.0], [-1.0, 0.0, 0.0], [0.0, 0.0, 0.0]], **D64)
    # orthogonal: ||e1 - e2|| = sqrt 2; opposite: 2; the zero perturbation has no direction and is left out
    assert drift.perturbation_drift(mixed, g) == (pytest.approx((math.sqrt(2) + 2) / 4, rel=1e-15), 2)
    assert drift.perturbation_drift(torch.zeros(2, 3, **D64), g) == (None, 0)
    w = torch.tensor([1.0, 1.0, 1.0], **D64)
    x = torch.tensor([[3.0, 1.0, 1.0], [1.0, -1.0, 1.0]], **D64)
    # w - eta_g * mean(w - x_i): mean(w - x) = (-1, 1, 0)
    assert torch.equal(drift.virtual_global(w, x, 0.5), torch.tensor([1.5, 0.5, 1.0], **D64))


def test_full_gradient_in_chunks_is_the_full_batch_gradient():
    gen = torch.Generator().manual_seed(0)
    X, y = torch.randn(37, 4, generator=gen, **D64), torch.randint(0, 3, (37,), generator=gen)
    theta = torch.randn(15, generator=gen, **D64)
    f = lambda th, xb: xb @ th[:12].view(4, 3) + th[12:]                      # noqa: E731
    exact = torch.func.grad(lambda th: F.cross_entropy(f(th, X), y))(theta)
    assert torch.allclose(drift.full_gradient(f, theta, X, y, batch_size=8), exact, rtol=0, atol=1e-15)


def test_estimator_quality_hand_vectors():
    w, g = torch.zeros(3, **D64), torch.tensor([1.0, 0.0, 0.0], **D64)
    state = {"w_old": torch.tensor([[2.0, 0, 0], [1.0, 1, 0], [9.0, 9, 9], [0.0, 0, 0]], **D64),
             "seen": torch.tensor([True, True, False, True]), "last_update": torch.tensor([-1.0, 1, 0], **D64),
             "s": -2 * g, "mu": torch.zeros(4, 3, **D64), "D": 2 * g}
    q = drift.estimator_quality(w, g, state, rounds_done=5, last_round=torch.tensor([4, 2, -1, 1]))
    L = q["fedlesam"]
    assert [(c["staleness"], c["cos"]) for c in L["clients"]] == \
        [(1, pytest.approx(1.0)), (3, pytest.approx(1 / math.sqrt(2))), (None, None), (4, None)]
    assert L["by_staleness"] == {"1": {"n": 1, "mean_cos": pytest.approx(1.0)},
                                 "3": {"n": 1, "mean_cos": pytest.approx(1 / math.sqrt(2))}}
    assert q["fedsmoo"]["cos_s_grad"] == pytest.approx(-1.0)
    assert (q["fedcm"]["cos_D_grad"], q["fedcm"]["rel_err"]) == (pytest.approx(1.0), pytest.approx(1.0))
    # --fedcm-wd inside: Delta averages g + wd w (Lemma 4.1), so it is compared with grad F + wd w
    w1 = torch.ones(3, **D64)
    cm = drift.estimator_quality(w1, g, {"D": g + 0.5 * w1}, wd=0.5)["fedcm"]
    assert (cm["cos_D_grad"], cm["rel_err"]) == (pytest.approx(1.0), pytest.approx(0.0, abs=1e-15))
    # the code's form: -(w^t - w^{t-1}) for every client; first participation by the global update
    code = drift.estimator_quality(w, g, state, source="last_global_update")["fedlesam"]
    assert code["cos_global_update"] == pytest.approx(1 / math.sqrt(2))
    first = drift.estimator_quality(w, g, state, first="global_update")["fedlesam"]["clients"][2]
    assert (first["seen"], first["cos"]) == (False, pytest.approx(1 / math.sqrt(2)))


def test_drift_zero_when_local_is_the_global_perturbation(tiny_cfg):
    """One client holding all the data, full-batch steps, eta_g = 1: the virtual global model is the client's model
    and FedSAM's ascent gradient IS grad F there, so PD = 0 at every step. The hook changes nothing."""
    cfg = tiny_cfg(algo="fedsam", clients=1, active_ratio=1.0, partition="iid", batch_size=5000, local_steps=3,
                   rounds=2, dtype="float64", model="mlp", model_kwargs={"widths": [6]})
    plain, probed = Run(cfg), Run(cfg)
    hook = drift.make_hook(steps=1)
    probed.callbacks.append(hook)
    for _ in range(2):
        plain.round(), probed.round()
    assert torch.equal(plain.w, probed.w) and plain.n_grads == probed.n_grads
    steps = [r for r in hook.rows if r["event"] == "step"]
    assert [(r["round"], r["step"]) for r in steps] == [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)]
    assert max(r["pd"] for r in steps) < 1e-12 and all(r["pd_clients"] == 1 for r in steps)


def test_drift_positive_for_heterogeneous_clients_and_none_without_perturbation(tiny_cfg):
    for algo, has_pd in (("fedsam", True), ("fedsmoo", True), ("mofedsam", True), ("fedavg", False)):
        run = Run(tiny_cfg(algo=algo, active_ratio=1.0, rounds=2))
        hook = drift.make_hook(every=2, steps=2, samples=300)
        run.callbacks.append(hook)
        run.round(), run.round()
        assert [(r["event"], r.get("step")) for r in hook.rows] == \
            ([("step", 0), ("round", None)] if has_pd else [("round", None)])      # round 2 is skipped (every=2)
        if has_pd:
            assert 0.05 < hook.rows[0]["pd"] <= 1
        estimator = {"fedsmoo": "smoo_cos_s_grad", "mofedsam": "fedcm_cos_D_grad"}.get(algo)
        assert estimator is None or -1 <= hook.rows[-1][estimator] <= 1


def test_cli_agrees_with_hook(tmp_path, tiny_cfg, capsys):
    run = Run(tiny_cfg(algo="fedlesam", rounds=4, partition="iid", keep_clients=True))     # staleness: clients' rounds
    hook = drift.make_hook(steps=None, samples=None)
    run.callbacks.append(hook)
    for _ in range(4):
        run.round()
    checkpoint.save(to_checkpoint(run, None), tmp_path / "run.pt")
    out = tmp_path / "d.json"
    assert probe.main(["drift", str(tmp_path / "run.pt"), "--json", str(out), "--plot", str(tmp_path / "d.png")]) == 0
    res = json.loads(out.read_text())
    stale = [c["staleness"] for c in res["fedlesam"]["clients"]]
    assert stale == [run.t - r if r >= 0 else None for r in run.last_round.tolist()]
    assert res["summary"]["lesam_cos"] == pytest.approx(hook.rows[-1]["lesam_cos"], rel=1e-4, abs=1e-6)
    assert (tmp_path / "d.png").stat().st_size > 0
    train(tiny_cfg(rounds=1), tmp_path / "avg")
    capsys.readouterr()
    assert probe.main(["drift", str(tmp_path / "avg")]) == 2
    assert "drift hook" in capsys.readouterr().err


def test_full_participation_estimate_is_the_last_global_update(tiny_cfg):
    """Every client trained in the last round: w_i^old - w^{t+1} = w^t - w^{t+1}, staleness 1, so FedLESAM's mean
    cosine equals the global update's cosine at the round's end."""
    run = Run(tiny_cfg(algo="fedlesam", active_ratio=1.0, rounds=2, dtype="float64"))
    hook = drift.make_hook(steps=None)
    run.callbacks.append(hook)
    run.round(), run.round()
    last = hook.rows[-1]
    assert last["lesam_cos"] == last["lesam_cos_s1"] == pytest.approx(last["update_cos_end"], rel=1e-12)
    assert set(last) >= {"update_cos_start", "grad_norm"} and "lesam_cos_s2" not in last
