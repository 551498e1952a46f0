"""The algorithm table (fedlab_analysis/algos.py): one row per algorithm (parts, hyper-parameters with defaults and
ranges, paper), and the worked example of adding an algorithm from existing parts at run time."""
import pytest
import torch

from fedlab_analysis import algos, train as train_cli
from fedlab_analysis.config import RunConfig
from fedlab_analysis.sweep import resolved
from fedlab_analysis.trainers import ALGORITHMS, Algorithm
from fedlab_analysis.trainers.parts import Plain, ServerMomentum

TINY = ["--dataset", "digits", "--model", "mlp", "--model-kwargs", '{"widths": [8]}', "--clients", "4",
        "--active-ratio", "1", "--local-steps", "2", "--rounds", "2", "--dtype", "float64", "--quiet"]


@pytest.fixture
def fedavg_m2():
    """The worked example: FedAvgM with its own default momentum 0.5 and a narrower range [0, 0.6]. The row below
    is all the validation, the defaults, --help and sweeps need; training also needs the parts, which today are a
    second line, in trainers/algorithms.py (``SPECS``/``ALGORITHMS``)."""
    algos.register("fedavg_m2", algos.Algo(("Plain", "ServerMomentum"),
                                           {**algos.SERVER, "server_momentum": {"hi": 0.6, "hi_open": False}},
                                           "Hsu et al. 2019, heavy ball at 0.5", {"server_momentum": 0.5}))
    ALGORITHMS["fedavg_m2"] = lambda cfg: Algorithm(cfg, Plain(), [ServerMomentum(cfg.hp("server_momentum"))])
    yield "fedavg_m2"
    del algos.TABLE["fedavg_m2"], ALGORITHMS["fedavg_m2"]


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


def test_the_example_leaves_the_table_as_it_was(fedavg_m2):
    assert fedavg_m2 in algos.NAMES and fedavg_m2 in algos.USES


def test_the_table_is_back_to_the_shipped_algorithms():
    assert "fedavg_m2" not in algos.NAMES and set(algos.NAMES) == set(ALGORITHMS)


def test_register_refuses_a_duplicate_and_a_default_it_does_not_read():
    with pytest.raises(ValueError, match="already"):
        algos.register("fedavg", algos.TABLE["fedavg"])
    with pytest.raises(ValueError, match="does not read"):
        algos.register("x", algos.Algo(("Plain",), {**algos.SERVER}, "-", {"rho": 0.1}))
    assert "x" not in algos.TABLE


@pytest.mark.parametrize("name", list(algos.TABLE))
def test_each_row_names_the_parts_the_trainer_builds(name):
    """The parts column states exactly what trainers/algorithms.py builds for the algorithm."""
    cfg = RunConfig(algo=name, active_ratio=1 if name.startswith("fedals") else 0.5)
    built = [type(p).__name__ for p in ALGORITHMS[name](cfg).parts]
    assert built == list(algos.TABLE[name].parts)


@pytest.mark.parametrize("name", list(algos.TABLE))
def test_each_row_defaults_only_what_it_reads_and_cites_a_paper(name):
    row = algos.TABLE[name]
    assert set(row.defaults) <= set(row.hyper) and row.paper.strip()
    assert set(row.hyper) <= set(RunConfig.__dataclass_fields__)
