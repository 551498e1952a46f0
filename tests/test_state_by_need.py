"""State by need: each algorithm allocates exactly the per-client tables it declares (and reads); the clients' last
local models are kept only where the algorithm, a hook or --keep-clients asks for them."""
import pytest
import torch

from fedlab_analysis import algos
from fedlab_analysis.probes import consensus
from fedlab_analysis.trainers import ALGORITHMS
from fedlab_analysis.trainers.engine import Run

EXTRA = {a: dict(active_ratio=1.0, model="mlp") for a in ("fedals", "fedals-scaffold")}


def _tables(run):
    return sorted(k for k, v in run.state.items() if v.dim() == 2 and v.shape == (run.m, run.space.P))


@pytest.mark.parametrize("algo", algos.NAMES)
def test_allocated_tables_are_the_declared_ones(tiny_cfg, algo):
    cfg = tiny_cfg(algo=algo, **EXTRA.get(algo, {}))
    run = Run(cfg)
    declared = ALGORITHMS[algo](cfg).tables                     # read without building a run (plan.py does)
    assert _tables(run) == sorted(declared)
    assert (run.last_local is not None) == (algo in ("fedinit", "fedals", "fedals-scaffold"))
    run.round()                                                 # and the round runs with only those


def test_declared_tables_by_algorithm(tiny_cfg):
    t = {a: sorted(ALGORITHMS[a](tiny_cfg(algo=a, **EXTRA.get(a, {}))).tables) for a in algos.NAMES}
    assert t["fedavg"] == t["fedsam"] == t["fedprox"] == t["fedcm"] == t["fedinit"] == []
    assert t["scaffold"] == ["c_i"] and t["feddyn"] == ["h"] and t["fedsmoo"] == ["h", "mu"]
    assert t["fedlesam"] == ["w_old"] and t["fedlesam-d"] == ["h", "w_old"]
    lg = tiny_cfg(algo="fedlesam", lesam_source="last_global_update")
    assert ALGORITHMS["fedlesam"](lg).tables == []              # that rule never reads w_i^old


def test_last_local_kept_on_request(tiny_cfg, capsys):
    assert Run(tiny_cfg(keep_clients=True)).last_local is not None
    run = Run(tiny_cfg())
    run.callbacks.append(consensus.make_hook())                # the consensus hook reads every client's model
    run.round()
    assert run.last_local is not None and run.t == 1
    late = Run(tiny_cfg())
    late.round()
    late.callbacks.append(consensus.make_hook())
    late.round()                                                # too late to recover round 1's models: one line
    err = capsys.readouterr().err.strip().splitlines()
    assert late.last_local is None and len(err) == 1 and "--keep-clients" in err[0]


def test_runs_without_the_table_match_those_with_it(tiny_cfg):
    a, b = Run(tiny_cfg(algo="scaffold")), Run(tiny_cfg(algo="scaffold", keep_clients=True))
    for _ in range(3):
        a.round(), b.round()
    assert torch.equal(a.w, b.w)
