"""Files and values a new user may hand over: an --init that is a FIFO or holds meta, sparse or complex tensors,
YAML or --model-kwargs nested thousands deep, integers beyond 64 bits in YAML, a bogus MPLBACKEND with --plot. Each
is one ``error:`` line, exit 2, nothing written (``test_guard.refused``); the FIFO is refused unread (no hang)."""
import os
import threading
import warnings

import pytest
import torch

from fedlab_analysis import probe, train as train_cli
from test_guard import refused

BASE = ["--dataset", "digits", "--model", "logreg", "--clients", "4", "--rounds", "1", "--local-steps", "1",
        "--quiet"]


def quantized():
    with warnings.catch_warnings():                      # torch deprecates making them, not reading them
        warnings.simplefilter("ignore")
        return torch.quantize_per_tensor(torch.zeros(10, 64), 0.1, 0, torch.qint8)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = tmp_path_factory.mktemp("inputs")
    assert train_cli.main([*BASE, "--out", str(w / "run")]) == 0
    good = {"fc.weight": torch.zeros(10, 64), "fc.bias": torch.zeros(10)}
    for name, w1 in (("meta", torch.zeros(10, 64, device="meta")), ("sparse", torch.zeros(10, 64).to_sparse()),
                     ("complex", torch.zeros(10, 64, dtype=torch.complex64)),
                     ("quantized", quantized())):
        torch.save({**good, "fc.weight": w1}, w / f"{name}.pt")
    deep = 100000
    (w / "deep.yaml").write_text("model_kwargs: {widths: " + "[" * deep + "]" * deep + "}\n")
    (w / "deep_map.yaml").write_text("model_kwargs: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n")
    (w / "big_width.yaml").write_text("model: mlp\nmodel_kwargs: {widths: [" + "9" * 30 + "]}\n")
    (w / "big_lr.yaml").write_text("lr: " + "9" * 400 + "\n")
    (w / "big_seed.yaml").write_text("seed: " + "9" * 30 + "\n")
    os.mkfifo(w / "fifo")
    return w


@pytest.mark.parametrize("name, needle", [("meta", "meta"), ("sparse", "sparse"), ("complex", "complex"),
                                          ("quantized", "quantized")])
def test_init_refuses_tensors_that_are_not_dense_real_values(world, monkeypatch, name, needle):
    refused(train_cli.main, [*BASE, "--init", f"{name}.pt", "--out", "new"], needle, world, monkeypatch)


def test_init_refuses_a_fifo_unread(world, monkeypatch):
    opened = []
    writer = threading.Thread(target=lambda: opened.append(open(world / "fifo", "wb")), daemon=True)
    refused(train_cli.main, [*BASE, "--init", "fifo", "--out", "new"], "not a regular file", world, monkeypatch)
    writer.start()                                       # unblocks a reader, had one opened it: none did
    writer.join(0.5)
    for fh in opened:
        fh.close()


@pytest.mark.parametrize("file, needle", [("deep.yaml", "nested"), ("deep_map.yaml", "nested"),
                                          ("big_width.yaml", "--model"), ("big_lr.yaml", "lr"),
                                          ("big_seed.yaml", "seed")])
def test_deep_or_huge_yaml_is_one_line(world, monkeypatch, file, needle):
    refused(train_cli.main, [*BASE, "--config", file, "--out", "new"], needle, world, monkeypatch)


@pytest.mark.parametrize("kwargs", ['{"widths": ' + "[" * 5000 + "]" * 5000 + "}",
                                    '{"widths": [' + "9" * 30 + "]}", '{"widths": [[[8]]]}'])
def test_deep_or_huge_model_kwargs_is_one_line(world, monkeypatch, kwargs):
    refused(train_cli.main, [*BASE, "--model", "mlp", "--model-kwargs", kwargs, "--out", "new"], "--model",
            world, monkeypatch)


def test_a_bogus_mplbackend_with_plot_is_refused_before_work(world, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "bogus")
    refused(probe.main, ["hessian", "run", "--top-k", "1", "--samples", "20", "--plot", "h.png", "--json", "h.json"],
            "MPLBACKEND", world, monkeypatch)
