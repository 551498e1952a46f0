"""Seeds stacked in one simulation (theory/claims.py run_steps / over_seeds, fedsmoo.simulate_seeds): every
seed's slice must equal, bit for bit, the run of that seed alone (float64, torch.equal), and a mix-up of the
seeds must be caught by the same comparison."""
from __future__ import annotations

import sys
import types
from dataclasses import asdict

import pytest
import torch

from fedlab_analysis.theory import claims, fedsmoo as F
from fedlab_analysis.theory.toys import DT, stack_seeds

SEEDS = [0, 1, 2]
KEYS = ("w", "wbar", "lam", "lam_i", "W", "shat", "s")


def _alone(prob, beta, runs, **kw) -> dict:
    """The run of one seed by itself, as main's checks call it (w0 zeros, one run or one per r)."""
    w0 = None if runs is None else torch.zeros(runs, prob.d, dtype=DT)
    return F.simulate(prob, beta=beta, w0=w0, **kw)


@pytest.mark.parametrize("local,runs,per_run_beta", [("exact", 3, False), ("exact", None, False),
                                                     ("sgd", 3, True), ("sgd", None, False)])
def test_stacked_slices_equal_each_seed_alone(local, runs, per_run_beta):
    probs = [F.make_toy(6, 4, 0.5, 2.0, seed=s) for s in SEEDS]
    if per_run_beta:
        betas = [[0.5 / p.L, 1.0 / p.L, 2.0 / p.L] for p in probs]
    else:
        betas = [0.3 / p.L for p in probs]
    kw = {"T": 30, "K": 3, "eta": 0.05, "local": local, "r": [0.05, 0.1, 0.2] if runs else 0.1}
    stacked = F.simulate_seeds(probs, betas=betas, runs=runs, **kw)
    for p, b, tr in zip(probs, betas, stacked):
        alone = _alone(p, b, runs, **kw)
        for k in KEYS:
            assert tr[k].shape == alone[k].shape and torch.equal(tr[k], alone[k]), k


def test_a_seed_mixup_is_caught():
    """The comparison above is not blind: problems stacked out of order, or one seed's beta for all, differ."""
    probs = [F.make_toy(6, 4, 0.5, 2.0, seed=s) for s in SEEDS]
    betas = [0.3 / p.L for p in probs]
    kw = {"T": 30, "local": "exact", "r": 0.1}
    alone = _alone(probs[1], betas[1], None, **kw)["wbar"]
    assert torch.equal(F.simulate_seeds(probs, betas=betas, **kw)[1]["wbar"], alone)
    rot = lambda xs: xs[1:] + xs[:1]                                     # noqa: E731  seeds 1, 2, 0
    assert torch.equal(F.simulate_seeds(rot(probs), betas=rot(betas), **kw)[0]["wbar"], alone)
    assert not torch.equal(F.simulate_seeds(rot(probs), betas=betas, **kw)[0]["wbar"], alone)   # betas mixed up
    assert not torch.equal(F.simulate_seeds(rot(probs), betas=rot(betas), **kw)[1]["wbar"], alone)  # wrong slice
    assert not torch.equal(F.simulate_seeds(probs, betas=[betas[0]] * 3, **kw)[1]["wbar"], alone)


def test_simulate_seeds_refuses_partial_participation():
    probs = [F.make_toy(6, 4, seed=s) for s in SEEDS[:2]]
    with pytest.raises(ValueError, match="full participation"):
        F.simulate_seeds(probs, betas=[1.0, 1.0], T=2, probe_cos=True)
    with pytest.raises(ValueError, match="full participation"):
        F.simulate_seeds(probs, betas=[1.0, 1.0], T=2, n_active=3)


def test_stack_seeds_keeps_per_seed_constants_apart():
    probs = [F.make_toy(6, 4, seed=s) for s in SEEDS]
    q = stack_seeds(probs, 1)
    assert q.A.shape == (3, 1, 6, 4, 4) and torch.equal(q.A[2, 0], probs[2].A)
    assert q.L == [p.L for p in probs] and q.n == 6          # differing numbers become a list, never a max


@pytest.mark.parametrize("check,kw", [("check_r2_floor", {"T": 200, "sgd_T": 30}),
                                      ("check_beta_region", {"T": 60}),
                                      ("check_thm41", {"Ts": (50, 100)}),
                                      ("check_exactness", {"T": 60}),
                                      ("check_mechanism", {"T": 40, "Ks": (10, 20)}),
                                      ("check_lemmas", {"T": 40})])
def test_converted_checks_give_each_seed_its_own_rows(check, kw):
    stacked = getattr(F, check + "_seeds")(SEEDS, **kw)
    for s, rows in zip(SEEDS, stacked):
        one = getattr(F, check)(seed=s, **kw)
        one = one if isinstance(one, list) else [one]
        rows = rows if isinstance(rows, list) else [rows]
        assert [asdict(r) for r in rows] == [asdict(r) for r in one]
    assert [asdict(r) for r in (stacked[0] if isinstance(stacked[0], list) else [stacked[0]])] != \
        [asdict(r) for r in (stacked[1] if isinstance(stacked[1], list) else [stacked[1]])]


def test_over_seeds_uses_run_seeds_once(monkeypatch):
    calls = []
    mod = types.ModuleType("fake_paper")

    def row(s):
        return claims.Claim("fake", "r", "c", "w", "e", f"m{s}", claims.HOLDS, float(s), {})

    def run(seed=0, out_dir=None, quick=False):
        calls.append(("run", seed))
        return [row(seed)]

    def run_seeds(seeds, out_dir=None, quick=False):
        calls.append(("run_seeds", tuple(seeds)))
        return [[row(s)] for s in seeds]
    run.__module__ = run_seeds.__module__ = mod.__name__
    mod.run, mod.run_seeds = run, run_seeds
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    (folded,) = claims.over_seeds(run, [4, 5, 6], quick=True)
    assert calls == [("run_seeds", (4, 5, 6))]
    assert folded.seeds == [4, 5, 6] and folded.measured == "m4" and folded.spread["value"] == [4.0, 6.0]
    del mod.run_seeds                                      # no run_seeds: one run per seed, as before
    calls.clear()
    claims.over_seeds(run, [4, 5])
    assert calls == [("run", 4), ("run", 5)]


def test_run_steps_keeps_the_order_and_figures_go_to_the_first_seed():
    seen = []

    def per_seed(s, out_dir):
        seen.append((s, out_dir))
        return [claims.Claim("fake", f"a{s}", "c", "w", "e", "m", claims.HOLDS, 0.0, {})]
    stacked = lambda seeds, out_dir: [[claims.Claim("fake", "b", "c", "w", "e", "m", claims.HOLDS, 0.0, {})]
                                      for _ in seeds]                    # noqa: E731
    out = claims.run_steps([claims.each_seed(per_seed), stacked], [1, 2], out_dir="D")
    assert [[c.id for c in rows] for rows in out] == [["a1", "b"], ["a2", "b"]]
    assert seen == [(1, "D"), (2, None)]
    with pytest.raises(ValueError):                        # a step that loses a seed is an error, not a fold
        claims.run_steps([lambda seeds, out_dir: [[]]], [1, 2])
