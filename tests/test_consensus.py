"""Consensus distance (probes/consensus.py): every form against its formula on hand-made client vectors, zero right
after synchronisation, the training hook changes nothing, the checkpoint CLI agrees with the hook."""
import json

import pytest
import torch

from fedlab_analysis import checkpoint, probe
from fedlab_analysis.errors import UserError
from fedlab_analysis.params import ParamSpace
from fedlab_analysis.probes import consensus
from fedlab_analysis.trainers.engine import Run
from fedlab_analysis.trainers.loop import to_checkpoint, train

# Two layers: u (2 entries, block 0) and v (1 entry, block 1); three clients.
SPACE = ParamSpace.from_named([("u.weight", torch.zeros(1, 2)), ("v.weight", torch.zeros(1, 1))])
X = torch.tensor([[0.0, 0.0, 1.0], [2.0, 4.0, 1.0], [1.0, 2.0, 4.0]], dtype=torch.float64)


def loop_spread(x, c, p, cols):
    """sum_i p_i ||c - x_i||^2 over the columns ``cols``, written out with Python loops."""
    return sum(p[i] * sum((float(c[j]) - float(x[i][j])) ** 2 for j in cols) for i in range(len(x)))


def test_fedals_cd_hand_numbers_uniform_and_by_size():
    # uniform: mean (1, 2, 2); u: (5 + 5 + 0)/3, v: (1 + 1 + 4)/3
    r = consensus.fedals_cd(X, SPACE)
    assert r["layers"]["u"]["raw"] == pytest.approx(10 / 3, rel=1e-15)
    assert r["layers"]["v"]["raw"] == pytest.approx(2.0, rel=1e-15)
    assert r["raw"] == pytest.approx(16 / 3, rel=1e-15)
    assert r["layers"]["u"]["per_param"] == pytest.approx(5 / 3, rel=1e-15)
    assert r["layers"]["u"]["relative"] == pytest.approx((10 / 3) / 5, rel=1e-15)    # ||(1, 2)||^2 = 5
    assert r["layers"]["v"]["relative"] == pytest.approx(2 / 4, rel=1e-15)
    # by data size (1, 1, 2): centre (1, 2, 2.5); u: 2.5, v: 2.25
    p = consensus.client_weights(3, "size", [10, 10, 20])
    r = consensus.fedals_cd(X, SPACE, p)
    assert (r["layers"]["u"]["raw"], r["layers"]["v"]["raw"]) == (pytest.approx(2.5), pytest.approx(2.25))
    for by, cols in (("param", {"u.weight": [0, 1], "v.weight": [2]}), ("group", {"all": [0, 1, 2]})):
        r = consensus.fedals_cd(X, SPACE, p, by=by)
        c = p @ X
        assert {k: v["raw"] for k, v in r["layers"].items()} == \
            {k: pytest.approx(loop_spread(X, c, p.tolist(), js), rel=1e-14) for k, js in cols.items()}


def test_round_forms_hand_numbers():
    """Clients 0, 1 selected (final models X[:2]), client 2 stale at X[2]; w^t = 0, w^{t+1} = (1, 1, 1)."""
    w_start, w_new = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    f = consensus.round_forms(X[:2], w_new, w_start, X, SPACE)
    expect = {"divergence": 6.0,            # (1/2)(2 + 10)                              FL-Simulator, vs w^{t+1}
              "fedsmoo_table2": 11.0,       # (1/2)(1 + 21)                              FedSMOO Table 2, vs w^t
              "fedsmoo_wbar": 5.0,          # w_bar = (1, 2, 1): (1/2)(5 + 5)
              "fedinit_delta": 22 / 3,      # (1/3)(2 + 10 + 10): ALL clients vs w^{t+1}   FedInit Delta^{t+1}
              "fedsmoo_proof": 19 / 3}      # (1/3)(5 + 5 + 9): all clients vs w_bar       FedSMOO proof
    assert {k: v["raw"] for k, v in f.items()} == {k: pytest.approx(v, rel=1e-15) for k, v in expect.items()}
    for k, v in f.items():                  # per layer adds up to the total
        assert sum(d["raw"] for d in v["layers"].values()) == pytest.approx(v["raw"], rel=1e-15)
    assert set(consensus.round_forms(X[:2], w_new)) == {"divergence", "fedsmoo_wbar"}   # missing inputs: left out


def test_zero_centre_and_bad_weights():
    r = consensus.spread(X, torch.zeros(3, dtype=torch.float64), SPACE)
    assert r["relative"] is None and r["layers"]["u"]["relative"] is None
    assert consensus.flatten("cd", r)["cd.u"] == r["layers"]["u"]["raw"]
    for bad in (dict(weights="size"), dict(weights="nope"), dict(weights=[1, -1, 1]), dict(weights=[1, 1])):
        with pytest.raises(UserError):
            consensus.client_weights(3, **bad)
    with pytest.raises(UserError, match="layer split"):
        consensus.make_hook(by="layers")


def test_wanted_steps():
    assert [consensus.wanted(s, 10) for s in (None, 1, 5, 3, {0, 10}, [0, 5, 10])] == \
        [False, True, True, False, True, True]


def test_zero_right_after_synchronisation_fedals(tiny_cfg):
    """FedALS (tau=2, alpha=2): the head's CD is 0 after every tau-th iteration, everything's after every
    alpha*tau-th; between synchronisations it is positive."""
    run = Run(tiny_cfg(algo="fedals", active_ratio=1.0, tau=2, alpha=2, rounds=3, model="mlp",
                       model_kwargs={"widths": [8]}))
    hook = consensus.make_hook(steps=1)
    run.callbacks.append(hook)
    for _ in range(3):
        run.round()
    steps = [r for r in hook.rows if r["event"] == "step"]
    assert [r["iteration"] for r in steps] == [0, 1, 2, 2, 3, 4, 4, 5, 6]    # start rows repeat the sync point
    for r in steps:
        s = r["iteration"]
        assert r["fedals_cd.fc2"] == pytest.approx(0, abs=1e-24) if s % 2 == 0 else r["fedals_cd.fc2"] > 1e-8
        assert r["fedals_cd.fc1"] == pytest.approx(0, abs=1e-24) if s % 4 == 0 else r["fedals_cd.fc1"] > 1e-8


def test_fedavg_start_is_synchronised_and_hook_changes_nothing(tiny_cfg):
    cfg = tiny_cfg(algo="fedinit", beta=0.2, rounds=3)
    plain, probed = Run(cfg), Run(cfg)
    hook = consensus.make_hook(every=1, steps=1, weights="size")
    probed.callbacks.append(hook)
    for _ in range(3):
        plain.round(), probed.round()
    assert torch.equal(plain.w, probed.w) and torch.equal(plain.last_local, probed.last_local)
    starts = [r for r in hook.rows if r["event"] == "step" and r["step"] == 0]
    assert starts[0]["fedals_cd"] == 0.0                     # round 1: every client starts at w^0
    rounds = [r for r in hook.rows if r["event"] == "round"]
    assert [r["round"] for r in rounds] == [1, 2, 3]
    # Delta^{t+1} from the rows equals the formula on the run's own tables (all clients, by size)
    p = consensus.client_weights(probed.m, "size", probed.n_i)
    d2 = (probed.last_local.double() - probed.w.double()).pow(2).sum(1)
    assert rounds[-1]["fedinit_delta"] == pytest.approx(float(p @ d2), rel=1e-12)


def test_cli_agrees_with_hook_and_needs_clients(tmp_path, tiny_cfg, capsys):
    run, hook = Run(tiny_cfg(algo="fedlesam", rounds=3)), consensus.make_hook()
    run.callbacks.append(hook)
    for _ in range(3):
        run.round()
    checkpoint.save(to_checkpoint(run, None), tmp_path / "run.pt")
    out = tmp_path / "c.json"
    assert probe.main(["consensus", str(tmp_path / "run.pt"), "--json", str(out), "--plot",
                       str(tmp_path / "c.png")]) == 0
    res = json.loads(out.read_text())
    last = hook.rows[-1]
    sel = res["last_round_clients"]
    assert sel == sorted(torch.as_tensor(run.last_round == run.t - 1).nonzero().flatten().tolist())
    for form in ("divergence", "fedsmoo_table2", "fedsmoo_wbar", "fedinit_delta", "fedsmoo_proof"):
        assert res["forms"][form]["raw"] == pytest.approx(last[form], rel=1e-5), form
    assert (tmp_path / "c.png").stat().st_size > 0
    train(tiny_cfg(rounds=1, keep_clients=False), tmp_path / "bare")
    capsys.readouterr()
    assert probe.main(["consensus", str(tmp_path / "bare")]) == 2
    assert "--keep-clients true" in capsys.readouterr().err


@pytest.mark.parametrize("chunk", [1, 2, 5])
def test_chunked_over_clients_equals_the_whole_table_in_float64(chunk):
    """Every form from a float32 table read chunk by chunk of clients equals the unchunked float64 result; the
    selected rows (``rows``) equal the copied sub-table. A float32 accumulation (the deliberately broken
    reading) would be off by far more than 1e-12 here."""
    g = torch.Generator().manual_seed(0)
    space = ParamSpace.from_named([("a.weight", torch.zeros(30, 40)), ("a.bias", torch.zeros(30)),
                                   ("b.weight", torch.zeros(5, 30))])
    x = (1e4 + 0.01 * torch.randn(7, space.P, generator=g, dtype=torch.float64)).float()
    w_new, w_start = x[0].double() + 0.1, x[1].double() - 0.2
    sel, p = torch.tensor([1, 3, 4, 6]), consensus.client_weights(4, "size", [5, 1, 2, 3])
    whole = consensus.round_forms(x[sel].double(), w_new, w_start, x.double(), space, p, None, "block")
    part = consensus.round_forms(x, w_new, w_start, x, space, p, None, "block", rows=sel, chunk=chunk)
    for form in whole:
        assert part[form]["raw"] == pytest.approx(whole[form]["raw"], rel=1e-12)
        for lab, d in whole[form]["layers"].items():
            assert part[form]["layers"][lab]["raw"] == pytest.approx(d["raw"], rel=1e-12)
    cd = consensus.fedals_cd(x, space, chunk=chunk)["raw"]
    assert cd == pytest.approx(consensus.fedals_cd(x.double(), space)["raw"], rel=1e-12)
    c32 = x.mean(0)
    broken = float(((x - c32) ** 2).sum(-1).mean())                        # float32 throughout
    assert abs(broken - cd) > 1e-3 * cd


def test_cli_names_every_form_and_prints_per_layer_numbers_without_a_sample_count(tmp_path, tiny_cfg, capsys):
    train(tiny_cfg(model="mlp", keep_clients=True), tmp_path / "run")
    assert probe.main(["consensus", str(tmp_path / "run"), "--quiet", "--json", str(tmp_path / "c.json")]) == 0
    out = capsys.readouterr().out
    r = json.loads((tmp_path / "c.json").read_text())
    assert "n_samples" not in r and "bn_mode" not in r and "n_samples" not in out
    for form in r["forms"]:
        assert consensus.FORMS[form][0] in out and ("_" in form) <= (form not in out)   # not by its key
    for label, d in r["forms"]["fedals_cd_all_clients"]["layers"].items():
        assert label in out and f"{d['raw']:.4g}" in out
    helptext = probe.parser().parse_args.__self__._subparsers._group_actions[0].choices["consensus"].format_help()
    assert "FedALS consensus distance" in " ".join(helptext.split())
