"""The algorithm table (fedlab_analysis/algos.py): one row per algorithm (the builder of its parts, hyper-parameters
with defaults and ranges, paper), and the worked example of adding an algorithm from existing parts at run time:
one row, nothing else."""
import pytest
import torch

from fedlab_analysis import algos, train as train_cli
from fedlab_analysis.config import RunConfig
from fedlab_analysis.sweep import resolved
from fedlab_analysis.trainers import ALGORITHMS, build
from fedlab_analysis.trainers.parts import Part, Plain

TINY = ["--dataset", "digits", "--model", "mlp", "--model-kwargs", '{"widths": [8]}', "--clients", "4",
        "--active-ratio", "1", "--local-steps", "2", "--rounds", "2", "--dtype", "float64", "--quiet"]


def fedavg_m2_row(momentum_default=0.5) -> algos.Algo:
    """The worked example: FedAvgM with its own default momentum 0.5 and a narrower range [0, 0.6], built from
    existing parts. This row is all the validation, the defaults, --help, sweeps and training need."""
    return algos.Algo(lambda c, P: (P.Plain(), [P.ServerMomentum(c.hp("server_momentum"))]),
                      {**algos.SERVER, "server_momentum": {"hi": 0.6, "hi_open": False}},
                      "Hsu et al. 2019, heavy ball at 0.5", {"server_momentum": momentum_default})


@pytest.fixture
def fedavg_m2():
    algos.register("fedavg_m2", fedavg_m2_row())
    yield "fedavg_m2"
    del algos.TABLE["fedavg_m2"]


def weights(out) -> dict:
    return torch.load(out / "ckpt" / "last.pt", weights_only=True)["global"]


def train(tmp_path, name, *flags) -> dict:
    out = tmp_path / name
    assert train_cli.main([*TINY, *flags, "--out", str(out)]) == 0
    return weights(out)


def test_a_registered_row_trains_with_its_own_default(fedavg_m2, tmp_path, capsys):
    mine = train(tmp_path, "m2", "--algo", fedavg_m2)
    same = train(tmp_path, "m05", "--algo", "fedavgm", "--server-momentum", "0.5")
    paper = train(tmp_path, "m09", "--algo", "fedavgm")                # the table's fedavgm default, 0.9
    assert mine.keys() == same.keys()
    assert all(torch.equal(mine[k], same[k]) for k in mine)           # the row's default reached the part
    assert not all(torch.equal(mine[k], paper[k]) for k in mine)       # and it is not fedavgm's
    assert RunConfig(algo=fedavg_m2).hp("server_momentum") == 0.5
    assert resolved(RunConfig(algo=fedavg_m2))["server_momentum"] == 0.5      # run names see the default


def test_a_registered_row_is_validated_by_its_own_ranges(fedavg_m2, tmp_path, capsys):
    assert fedavg_m2 in train_cli.parser().epilog
    for flags, needle in ((["--server-momentum", "0.7"], "--server-momentum: must be in [0, 0.6] for fedavg_m2"),
                          (["--rho", "0.1"], "--rho: fedavg_m2 does not use rho; it is used by fedsam")):
        assert train_cli.main([*TINY, "--algo", fedavg_m2, *flags, "--out", str(tmp_path / "x")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: {needle}"), err
    assert not (tmp_path / "x").exists()


def test_the_example_leaves_the_table_as_it_was():
    """The fixture entered and left by hand, so the check does not depend on test order: the row is there inside,
    and gone after, from the table and from the trainer's view of it."""
    gen = fedavg_m2.__wrapped__()
    name = next(gen)
    assert name in algos.NAMES and name in algos.USES and name in ALGORITHMS
    with pytest.raises(StopIteration):
        next(gen)
    assert name not in algos.NAMES and name not in algos.USES and name not in ALGORITHMS


def test_parts_imposing_two_K_are_refused():
    from fedlab_analysis.trainers import Algorithm
    from fedlab_analysis.trainers.parts import ALS
    cfg = RunConfig(algo="fedals", active_ratio=1)
    assert Algorithm(cfg, Plain(), [ALS(3, 2, 1), ALS(3, 5, 1)]).K == 3
    with pytest.raises(ValueError, match="different K"):
        Algorithm(cfg, Plain(), [ALS(2, 2, 1), ALS(3, 2, 1)])


def test_register_refuses_a_duplicate_and_a_default_it_does_not_read():
    with pytest.raises(ValueError, match="already"):
        algos.register("fedavg", algos.TABLE["fedavg"])
    with pytest.raises(ValueError, match="does not read"):
        algos.register("x", algos.Algo(lambda c, P: (P.Plain(), []), {**algos.SERVER}, "-", {"rho": 0.1}))
    assert "x" not in algos.TABLE


@pytest.mark.parametrize("name", list(algos.TABLE))
def test_each_row_builds_a_perturbation_rule_then_parts(name):
    """A row's builder returns (perturbation rule, [parts]) from the config: the rule a Plain (the gradient of a
    step), the rest parts that are not rules; ``build`` runs it with trainers/parts.py."""
    from fedlab_analysis.trainers import parts as P
    cfg = RunConfig(algo=name, active_ratio=1 if name.startswith("fedals") else 0.5)
    perturb, rest = algos.TABLE[name].parts(cfg, P)
    assert isinstance(perturb, Plain) and all(isinstance(p, Part) and not isinstance(p, Plain) for p in rest)
    assert [type(p) for p in build(cfg).parts] == [type(perturb), *map(type, rest)]


def test_build_refuses_a_row_that_does_not_return_a_rule_then_parts():
    algos.register("bad", algos.Algo(lambda c, P: (P.ServerMomentum(0.5), [P.Plain()]), {**algos.SERVER}, "-"))
    try:
        with pytest.raises(TypeError, match="perturbation rule"):
            build(RunConfig(algo="bad"))
    finally:
        del algos.TABLE["bad"]


@pytest.mark.parametrize("name", list(algos.TABLE))
def test_each_row_defaults_only_what_it_reads_and_cites_a_paper(name):
    row = algos.TABLE[name]
    assert set(row.defaults) <= set(row.hyper) and row.paper.strip()
    assert set(row.hyper) <= set(RunConfig.__dataclass_fields__)
