"""``probe PROBE --dry-run``: the memory plan (samples x model size -> GiB) is printed and nothing is computed or
drawn; its parts are the data's exact bytes, the estimator's kept vectors and the autograd graph, which scales with
the samples as measured."""
import json

import pytest
import torch

from fedlab_analysis import probe
from fedlab_analysis.probes import plain
from fedlab_analysis.probes.dryrun import graph_bytes_per_sample


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from fedlab_analysis.config import RunConfig
    from fedlab_analysis.trainers.loop import train
    out = tmp_path_factory.mktemp("dry")
    train(RunConfig(algo="fedavg", dataset="digits", model="mlp", clients=4, rounds=1, local_steps=1, batch_size=16,
                    seed=0, quiet=True), out)
    return out


def test_dry_run_prints_the_plan_and_computes_nothing(run_dir, tmp_path, capsys, monkeypatch):
    from fedlab_analysis.probes import curvature
    monkeypatch.setattr(curvature, "_ask", lambda *a, **k: pytest.fail("the dry run computed"))
    js, png = tmp_path / "p.json", tmp_path / "p.png"
    code = probe.main(["hessian", str(run_dir), "--top-k", "2", "--dry-run", "--json", str(js), "--plot", str(png)])
    out = capsys.readouterr().out
    assert code == 0 and "GiB" in out and "Lanczos basis: up to 100 Krylov vectors" in out, out
    r = json.loads(js.read_text())
    N, P = r["n_samples"], r["n_params"]
    assert r["bytes"]["data"] == N * 64 * 4 + N * 8                  # digits: 8x8 float32 images, int64 labels
    assert r["bytes"]["vectors"] == (100 + 3) * P * 4 and r["bytes"]["parameters"] == P * 4
    assert r["bytes"]["total"] == sum(v for k, v in r["bytes"].items() if k != "total")
    assert not png.exists()


def test_the_graph_estimate_scales_with_the_samples():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.Tanh(), torch.nn.Linear(64, 5))
    x, y = torch.randn(64, 20), torch.randint(0, 5, (64,))
    b = plain.bundle(model, (x, y))
    per = [graph_bytes_per_sample(b, n=n) for n in (8, 64)]
    assert per[0] > 64 * 4 and per[1] == pytest.approx(per[0], rel=0.25)     # per sample: about constant


def test_dry_run_is_refused_where_there_is_no_plan(run_dir, capsys):
    assert probe.main(["consensus", str(run_dir), "--dry-run"]) == 2
    assert "--dry-run plans" in capsys.readouterr().err
