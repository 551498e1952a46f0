"""Probing a model this toolkit did not train (issue 36): a plain PyTorch loop trains on the embedded digits, saves
``state_dict()``, and the probe command line reads it with ``--model`` (a registry model) and with
``--model-factory`` (the user's own module), giving the numbers the same probes give on the module in process; a
state_dict that does not fit is refused in one line, exit 2, nothing written."""
import json

import pytest
import torch
import torch.nn.functional as F

import fedlab_analysis as fl
from fedlab_analysis import probe
from fedlab_analysis.data import load_dataset
from fedlab_analysis.models import build_model

FACTORY = '''
import torch
from torch import nn

def make():
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 12), nn.BatchNorm1d(12), nn.ReLU(), nn.Linear(12, 10))
'''

# probe -> (command-line flags, the same options for the Python entry point)
PROBES = {
    "hessian": (["--top-k", "2", "--max-iter", "30"], {"top_k": 2, "max_iter": 30}),
    "trace": (["--products", "12"], {"products": 12}),
    "landscape": (["--grid", "4"], {"grid": 4}),
    "sharpness": (["--steps", "3"], {"steps": 3}),
}
KEYS = {"hessian": ("eigenvalues",), "trace": ("trace", "stderr"), "landscape": ("loss", "acc"),
        "sharpness": ("summary",)}


def _plain_loop(model, ds, epochs=3):
    """Training as a user writes it, nothing of the toolkit: SGD over shuffled mini-batches of 32."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(epochs):
        for ix in torch.randperm(len(ds.y_train), generator=g).split(32):
            opt.zero_grad()
            F.cross_entropy(model(ds.x_train[ix]), ds.y_train[ix]).backward()
            opt.step()
    return model


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Two models trained outside the toolkit, their state_dicts saved as users save them."""
    d = tmp_path_factory.mktemp("foreign")
    ds = load_dataset("digits")
    mlp = _plain_loop(build_model("mlp", ds.input_shape, ds.n_classes, widths=[16]), ds)
    torch.save(mlp.state_dict(), d / "mlp.pt")
    (d / "mynet.py").write_text(FACTORY)
    ns = {}
    exec(FACTORY, ns)
    torch.manual_seed(0)
    net = _plain_loop(ns["make"](), ds)
    torch.save({"model_state_dict": {f"module.{k}": v for k, v in net.state_dict().items()}}, d / "net.pt")
    return d, ds, mlp, net


def _cli(name, argv, out, capsys):
    code = probe.main([name, *argv, "--quiet", "--json", str(out)])
    capsys.readouterr()
    assert code == 0
    return json.loads(out.read_text())


@pytest.mark.parametrize("name", list(PROBES))
def test_cli_on_a_plain_state_dict_matches_the_module_in_process(trained, tmp_path, capsys, name):
    d, ds, mlp, net = trained
    flags, kw = PROBES[name]
    data = (ds.x_train, ds.y_train)
    by_name = _cli(name, [str(d / "mlp.pt"), "--model", "mlp", "--model-kwargs", '{"widths": [16]}',
                          "--dataset", "digits", *flags], tmp_path / "a.json", capsys)
    by_factory = _cli(name, [str(d / "net.pt"), "--model-factory", f"{d / 'mynet.py'}:make", "--strip-prefix",
                             "module.", "--dataset", "digits", "--bn-batch", "32", *flags], tmp_path / "b.json", capsys)
    for cli, module, bn in ((by_name, mlp, {}), (by_factory, net, {"bn_batch": 32})):
        here = json.loads(json.dumps(getattr(fl, name)(module, data, **kw, **bn), default=float))
        for k in KEYS[name]:
            assert cli[k] == here[k], (name, k)
        assert cli["n_samples"] == here["n_samples"] == len(ds.y_train)
    assert by_name["source"]["weights"] == str(d / "mlp.pt") and by_name["source"]["model"] == "mlp"
    assert by_name["source"]["model_kwargs"]["widths"] == [16] and by_name["source"]["dataset"] == "digits"
    assert by_factory["source"]["model"] == f"factory:{d / 'mynet.py'}:make"
    assert by_factory["source"]["strip_prefix"] == "module." and by_factory["bn_mode"] == "train"


def test_a_factory_module_path_works_like_a_file(trained, tmp_path, capsys, monkeypatch):
    d, ds, _, _ = trained
    monkeypatch.syspath_prepend(str(d))
    a = _cli("trace", [str(d / "net.pt"), "--model-factory", "mynet:make", "--strip-prefix", "module.",
                       "--dataset", "digits", "--products", "4"], tmp_path / "a.json", capsys)
    b = _cli("trace", [str(d / "net.pt"), "--model-factory", f"{d / 'mynet.py'}:make", "--strip-prefix",
                       "module.", "--dataset", "digits", "--products", "4"], tmp_path / "b.json", capsys)
    assert a["trace"] == b["trace"]


REFUSED = [
    (["mlp.pt", "--model", "mlp", "--dataset", "digits"], "lacks fc3.weight, fc3.bias; it has wrong shapes for fc1"),
    (["mlp.pt", "--model", "logreg", "--dataset", "digits"], "lacks"),
    (["net.pt", "--model-factory", "FACTORY", "--dataset", "digits"], "try --strip-prefix module."),
    (["mlp.pt", "--model-factory", "FACTORY", "--dataset", "digits"], "lacks 1.weight"),
    (["mlp.pt", "--dataset", "digits"], "--dataset cannot act without --model"),
    (["mlp.pt"], "is a plain state_dict"),
    (["mlp.pt", "--model", "mlp"], "needs its data: add --dataset"),
    (["mlp.pt", "--model", "mlp", "--model-kwargs", '{"widths": [16]}', "--dataset", "mnist1d"],
     "wrong shapes for fc1.weight"),
    (["mlp.pt", "--model-factory", "nowhere.py:make", "--dataset", "digits"], "no file 'nowhere.py'"),
]


@pytest.mark.parametrize("argv, needle", REFUSED)
def test_a_state_dict_that_does_not_fit_is_one_line(trained, tmp_path, capsys, argv, needle):
    d = trained[0]
    argv = [str(d / a) if a.endswith(".pt") else f"{d / 'mynet.py'}:make" if a == "FACTORY" else a for a in argv]
    out = tmp_path / "r.json"
    code = probe.main(["hessian", *argv, "--json", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("error:") and needle in err, err
    assert not out.exists()


@pytest.mark.parametrize("name", ["consensus", "drift", "stability"])
def test_federation_probes_say_what_they_need(trained, tmp_path, capsys, name):
    d = trained[0]
    for extra in (["--model", "mlp", "--dataset", "digits"], []):
        code = probe.main([name, str(d / "mlp.pt"), *extra, "--json", str(tmp_path / "r.json")])
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1 and "needs a federated run" in err, err
    assert not (tmp_path / "r.json").exists()


def test_planes_of_a_run_are_refused_and_other_reads_a_second_state_dict(trained, tmp_path, capsys):
    d, ds, mlp, _ = trained
    base = [str(d / "mlp.pt"), "--model", "mlp", "--model-kwargs", '{"widths": [16]}', "--dataset", "digits"]
    for plane in ("clients", "update", "pca"):
        assert probe.main(["landscape", *base, "--plane", plane]) == 2
        assert "needs a federated run" in capsys.readouterr().err
    init = build_model("mlp", ds.input_shape, ds.n_classes, widths=[16])
    torch.save(init.state_dict(), tmp_path / "init.pt")
    r = _cli("landscape", [*base, "--other", str(tmp_path / "init.pt"), "--grid", "3"], tmp_path / "l.json", capsys)
    here = fl.landscape(mlp, (ds.x_train, ds.y_train), grid=3)["center_loss"]
    assert r["loss_a"] == pytest.approx(here, rel=1e-6) and r["distance"] > 0


def test_a_toolkit_checkpoint_refuses_the_foreign_flags(tmp_path, capsys, tiny_cfg):
    from fedlab_analysis.trainers.loop import train
    train(tiny_cfg(rounds=1), tmp_path / "run")
    code = probe.main(["hessian", str(tmp_path / "run"), "--model", "mlp", "--dataset", "digits"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "--model cannot act with a fedlab_analysis checkpoint" in err, err


def _handbook_part():
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "docs" / "probes.md").read_text()
    return text[text.index("## Probe any model"):text.index("What every probe prints and writes")]


def test_the_handbook_examples_run_as_written(tmp_path, monkeypatch, capsys):
    """The handbook's state_dict lines (docs/probes.md) on the embedded digits (files made as a user makes them), at
    small sizes, and its notebook cell on a model defined in the cell."""
    import re
    import shlex
    part = _handbook_part()
    monkeypatch.chdir(tmp_path)
    ds = load_dataset("digits")
    torch.save(build_model("mlp", ds.input_shape, ds.n_classes, widths=[64]).state_dict(), "model.pt")
    (tmp_path / "mynet.py").write_text(FACTORY)
    ns = {}
    exec(FACTORY, ns)
    torch.save({f"module.{k}": v for k, v in ns["make"]().state_dict().items()}, "ddp.pt")
    block = re.search(r"```bash\n(.*?)```", part, re.S).group(1).replace("\\\n", " ")
    lines = [shlex.split(line)[3:] for line in block.splitlines() if "--dataset digits" in line]
    assert len(lines) == 3
    small = {"hessian": ["--max-iter", "20"], "landscape": ["--grid", "3"], "sharpness": ["--steps", "1"]}
    for argv in lines:
        assert probe.main([*argv, *small[argv[0]], "--quiet"]) == 0, capsys.readouterr().err
    cell = re.search(r"```python\n(.*?)```", part, re.S).group(1)
    exec(cell, {})
    assert (tmp_path / "surface.png").stat().st_size > 0


def test_a_whole_pickled_module_is_refused_unread_with_the_fix(trained, tmp_path, capsys):
    d, ds, mlp, _ = trained
    torch.save(mlp, tmp_path / "whole.pt")                      # the habit the probes cannot honour safely
    code = probe.main(["hessian", str(tmp_path / "whole.pt"), "--model", "mlp", "--dataset", "digits"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "refused unread" in err and "state_dict()" in err, err


@pytest.mark.parametrize("line", ["hessian --model mlp --dataset digits", "trace --dry-run"])
def test_a_sweep_probe_line_refuses_the_foreign_flags_before_training(line):
    """A sweep's probe line probes the run it trained: a state_dict's flags or --dry-run are refused at plan time."""
    import re

    from fedlab_analysis import sweep
    from fedlab_analysis.errors import UserError
    flag = line.split()[1]
    with pytest.raises(UserError, match=re.escape(f"{flag} cannot act in a sweep's probe line")):
        sweep.parse_probes([line], "s.yaml")


def test_the_readme_foreign_examples_run_as_written(tmp_path, monkeypatch, capsys):
    """README's state_dict line and its Python line, as written, on a digits MLP saved as a user saves it."""
    import re
    import shlex
    from pathlib import Path
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    monkeypatch.chdir(tmp_path)
    ds = load_dataset("digits")
    model = build_model("mlp", ds.input_shape, ds.n_classes, widths=[64])
    torch.save(model.state_dict(), "model.pt")
    line = next(ln for ln in readme.splitlines() if "probe hessian model.pt" in ln)
    assert probe.main([*shlex.split(line)[3:], "--max-iter", "20", "--quiet"]) == 0, capsys.readouterr().err
    cell = re.search(r"```python\n(import fedlab_analysis as fl\n.*?)```", readme, re.S).group(1)
    ns = {"model": model, "loader": (ds.x_train[:256], ds.y_train[:256])}
    exec(cell.replace("fl.hessian(", "out = fl.hessian(", 1), ns)          # the cell's value, kept
    assert len(ns["out"]) == 3 and ns["out"][0] >= ns["out"][-1] > 0
