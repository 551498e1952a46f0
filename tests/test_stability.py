"""Generalization gap and the coupled uniform-stability probe (FedInit App. B)."""
import itertools
import json

import pytest
import torch

from fedlab_analysis.errors import UserError
from fedlab_analysis.studies import stability as St
from fedlab_analysis.trainers.engine import Run


def test_identical_data_sets_give_exactly_zero(tiny_cfg):
    cfg = tiny_cfg(algo="fedinit", rounds=4, local_steps=3)
    run = Run(cfg)
    j = int(run.idx[2][0])
    same = {"index": j, "x": run.ds.x_train[j], "y": int(run.ds.y_train[j])}
    r = St.uniform_stability(cfg, pairs=[same], pool=None, every=1)
    for row in r["rows"]:
        assert row["delta_w"] == row["delta_0"] == row["delta_K"] == row["delta_last"] == 0.0
        assert row["loss_diff_pool_max"] == row["loss_diff_z_max"] == 0.0
    assert r["summary"]["delta_T_max"] == 0.0 and r["summary"]["eps_pool_max"] == 0.0
    json.dumps(r)


def test_runs_stay_equal_until_the_replaced_sample_is_used(tiny_cfg):
    cfg = tiny_cfg(algo="fedavg", rounds=5, local_steps=20, active_ratio=0.5)   # 320 draws >= n_i: every sample
    r = St.uniform_stability(cfg, pairs=3, seed=4, pool=50)
    assert len(r["pairs"]) == 3
    for p in range(3):
        rows = [row for row in r["rows"] if row["pair"] == p]
        for row in rows:
            assert (row["delta_w"] == 0.0) == (row["touches"] == 0)
            # FedAvg starts every client at w^t: delta_0 = ||w^t - w~^t|| of the previous round
        for prev, row in itertools.pairwise(rows):
            assert row["delta_0"] == pytest.approx(prev["delta_w"], rel=1e-6, abs=1e-12)
    assert r["summary"]["touches_mean"] > 0 and r["summary"]["delta_T_max"] > 0


def test_full_participation_ri_step_obeys_the_papers_worst_case(tiny_cfg):
    """Full participation, Algorithm-1 aggregation: w^t = mean of all w_i^last, so
    delta_0^t <= (1 + beta) ||w^t - w~^t|| + beta delta_last^{t-1} <= (1 + 2 beta) delta_last^{t-1}."""
    beta = 0.3
    cfg = tiny_cfg(algo="fedinit", beta=beta, rounds=5, local_steps=4, active_ratio=1.0, dtype="float64")
    r = St.uniform_stability(cfg, pairs=2, seed=1, pool=20)
    ratios = [row["r_init"] for row in r["rows"] if row["r_init"] is not None]
    assert ratios and max(ratios) <= 1 + 2 * beta + 1e-9
    assert r["summary"]["paper_r_init_bound"] == pytest.approx(1 + 2 * beta)
    for row in r["rows"]:          # full participation: the mean over active clients is the mean over all
        assert row["delta_K"] == pytest.approx(row["delta_last"], rel=1e-12, abs=1e-300)


def test_generalization_gap_and_its_hook(tiny_cfg):
    run = Run(tiny_cfg(rounds=2))
    hook = St.make_hook("gap", every=1)
    run.callbacks.append(hook)
    run.round()
    union = torch.cat(run.idx).unique()
    with torch.no_grad():
        out = run.forward(run.w, run.X[union])
        tl = float(torch.nn.functional.cross_entropy(out, run.Y[union]))
        ta = float((out.argmax(1) == run.Y[union]).double().mean())
    row = hook.rows[0]
    assert row["round"] == 1 and row["n_train"] == len(union)
    assert row["train_loss"] == pytest.approx(tl, rel=1e-5) and row["train_acc"] == pytest.approx(ta)
    assert row["gap_loss"] == pytest.approx(row["test_loss"] - row["train_loss"])
    assert row["gap_acc"] == pytest.approx(row["train_acc"] - row["test_acc"])


def test_stability_hook_follows_a_training_run(tiny_cfg):
    from fedlab_analysis.trainers.loop import train
    hook = St.make_hook("stability", every=2, pairs=1, seed=0, pool=30)
    run = train(tiny_cfg(rounds=3), callbacks=[hook])
    again = St.uniform_stability(tiny_cfg(rounds=3), pairs=1, seed=0, pool=30, every=2)
    assert [r["delta_w"] for r in hook.rows] == [r["delta_w"] for r in again["rows"]]
    assert "loss_diff_pool_mean" in hook.rows[1] and "loss_diff_pool_mean" not in hook.rows[0]
    assert torch.equal(run.w, hook.shadows[0].run.w) == (hook.rows[-1]["delta_w"] == 0.0)


def test_a_label_change_that_moves_the_partition_is_refused(tiny_cfg):
    cfg = tiny_cfg(rounds=1)
    run = Run(cfg)
    j = int(run.idx[0][0])
    other = (int(run.ds.y_train[j]) + 1) % 10
    with pytest.raises(UserError, match="partition"):
        St.Shadow(cfg, run.ds, {"index": j, "x": run.ds.x_train[j], "y": other}, run.idx)
    with pytest.raises(UserError, match="hook"):
        St.make_hook("nonsense")


def test_cli_gap_and_retraining_reproduce_the_checkpoint(tmp_path, tiny_cfg):
    from fedlab_analysis import probe
    from fedlab_analysis.trainers.loop import train
    train(tiny_cfg(algo="fedinit", rounds=3), tmp_path / "run")
    out = tmp_path / "st.json"
    assert probe.main(["stability", str(tmp_path / "run"), "--pairs", "2", "--pool", "40", "--json", str(out),
                       "--plot", str(tmp_path / "st.png")]) == 0
    r = json.loads(out.read_text())
    assert r["stability"]["base_matches_checkpoint_max_abs"] == 0.0
    assert r["stability"]["rounds"] == 3 and len(r["stability"]["rows"]) == 6
    assert r["gap"]["gap_loss"] == pytest.approx(r["gap"]["test_loss"] - r["gap"]["train_loss"])
    assert (tmp_path / "st.png").exists()
    assert probe.main(["stability", str(tmp_path / "run"), "--rounds", "0", "--json", str(out)]) == 0
    assert "stability" not in json.loads(out.read_text())
