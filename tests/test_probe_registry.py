"""The probe registry: adding a probe is one new module (Options + compute + plot) and one registry line. The worked
example below defines a tiny probe in this test module, registers it with one line, and runs it through the
command line generated from its Options (help, a refusal, a JSON result, a figure)."""
import ast
import dataclasses
import doctest
import json
import types
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from fedlab_analysis import probe
from fedlab_analysis.probes import PROBES, line, options, register
from fedlab_analysis.probes.options import Common, opt


# ---- the worked example: a whole probe ------------------------------------------------------------------------
class weight_norm:                                      # a module would do; a namespace keeps it in this file
    HELP = "||w||_p of the global model (a worked example)"
    DESCRIBE = "The p-norm of the checkpoint's flat parameter vector, and the mean loss beside it."
    COST = "cost: one pass over the samples."
    IGNORES = (("seed",), "with the weight_norm probe (it draws nothing at random)")       # common flags refused

    @dataclass
    class Options(Common):
        p: float = opt(2.0, "the norm's order p", lo=1)
        scale: float | None = opt(None, "multiply w by this first (default: 1)")

    @staticmethod
    def compute(bundle, opts) -> dict:
        """||scale * w||_p and F(w).

        Args:
            bundle: the rebuilt checkpoint. opts: ``p``, ``scale``.
        Returns:
            ``{norm, loss, summary}``.
        """
        w = bundle.theta.double() * (1.0 if opts.scale is None else opts.scale)
        loss = float(torch.nn.functional.cross_entropy(bundle.f(bundle.theta, bundle.X), bundle.y))
        norm = float(w.norm(p=opts.p))
        return {"norm": norm, "loss": loss, "summary": {"norm": norm}, "_title": bundle.title(f"||w||_{opts.p:g}")}

    @staticmethod
    def plot(result, path):
        from fedlab_analysis.plots import figure, save, title
        fig, ax = figure()
        ax[0, 0].bar(["||w||"], [result["norm"]])
        title(fig, result["_title"])
        save(fig, path)


@pytest.fixture
def registered():
    register("weight_norm", weight_norm)                # <- the one registry line
    yield
    PROBES.pop("weight_norm")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from fedlab_analysis.config import RunConfig
    from fedlab_analysis.trainers.loop import train
    out = tmp_path_factory.mktemp("run")
    train(RunConfig(algo="fedavg", dataset="digits", model="logreg", clients=3, rounds=1, local_steps=1,
                    batch_size=16, seed=0, quiet=True, eval_train_samples=64), out)
    return out


def test_a_probe_defined_here_runs_through_the_generated_command_line(registered, run_dir, tmp_path, capsys):
    with pytest.raises(SystemExit):
        probe.main(["weight_norm", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "the norm's order p (default: 2.0)" in text and "--scale SCALE" in text and "--samples" in text
    assert weight_norm.COST in text and weight_norm.DESCRIBE in text
    assert weight_norm.HELP in " ".join(probe.parser().format_help().split())

    with pytest.raises(SystemExit) as e:                                                # its declared range
        probe.main(["weight_norm", str(run_dir), "--p", "0.5"])
    assert e.value.code == 2 and "--p: must be >= 1" in capsys.readouterr().err
    assert probe.main(["weight_norm", str(run_dir), "--scale", "nan"]) == 2             # every number finite
    assert capsys.readouterr().err.startswith("error: --scale: must be a finite number")
    assert probe.main(["weight_norm", str(run_dir), "--seed", "3", "--json", str(tmp_path / "no.json")]) == 2
    assert capsys.readouterr().err.strip() == ("error: --seed cannot act with the weight_norm probe (it draws "
                                               "nothing at random); drop it") and not (tmp_path / "no.json").exists()
    js, png = tmp_path / "w.json", tmp_path / "w.png"
    assert probe.main(["weight_norm", str(run_dir), "--p", "1", "--samples", "50", "--json", str(js),
                       "--plot", str(png)]) == 0
    r = json.loads(js.read_text())
    assert _is_l1_norm(r, run_dir) and r["n_samples"] == 50 and r["probe"] == "weight_norm"
    assert r["setting_sources"]["p"] == "flag" and r["setting_sources"]["scale"] == "default"
    assert "_title" not in r and png.stat().st_size > 5_000


def _is_l1_norm(r, run_dir) -> bool:
    """The result's norm against the exact ||w||_1 of the checkpoint's weights."""
    from fedlab_analysis import checkpoint
    w = checkpoint.load(run_dir / "ckpt" / "last.pt")["global"]
    exact = sum(float(t.double().abs().sum()) for t in w.values())
    return abs(r["norm"] - exact) < 1e-9 * exact


def test_the_exact_answer_check_catches_a_broken_probe(registered, run_dir, tmp_path, monkeypatch):
    """A probe that measures the wrong norm (p = 2 for p = 1) runs, and the check above says so."""
    monkeypatch.setattr(weight_norm, "compute", staticmethod(
        lambda b, o: {"norm": float(b.theta.double().norm()), "summary": {}}))
    js = tmp_path / "w.json"
    assert probe.main(["weight_norm", str(run_dir), "--p", "1", "--json", str(js)]) == 0
    assert not _is_l1_norm(json.loads(js.read_text()), run_dir)


def test_the_sweep_checks_and_runs_a_registered_probe(registered, run_dir):
    """The sweep's probe lines reach a registered probe: parsed, refused, and measured in process."""
    from fedlab_analysis import sweep
    from fedlab_analysis.errors import UserError
    assert sweep.parse_probes(["weight_norm --p 1"], "s.yaml") == {"weight_norm": ["weight_norm", "--p", "1"]}
    with pytest.raises(UserError, match="--seed cannot act"):
        sweep.parse_probes(["weight_norm --seed 2"], "s.yaml")
    r = sweep._probe(["weight_norm", "--p", "1"], run_dir, "wn")
    assert _is_l1_norm(r, run_dir) and json.loads((run_dir / "probes" / "wn.json").read_text()) == r


# ---- the registry and the generated options -------------------------------------------------------------------
def test_every_probe_declares_its_parts_once():
    for name, m in PROBES.items():
        assert dataclasses.is_dataclass(m.Options) and issubclass(m.Options, Common), name
        assert callable(m.compute) and callable(m.plot) and m.HELP and m.DESCRIBE and m.COST.startswith("cost:")
        assert "Args:" in m.compute.__doc__ and "Returns:" in m.compute.__doc__, name
        names = [f.name for f in dataclasses.fields(m.Options)]
        assert len(names) == len(set(names)), name
    hooks = {h for m in PROBES.values() for h in getattr(m, "HOOK_NAMES", ())}
    assert hooks == {"consensus", "drift", "sharpness", "gap", "stability"}


def test_options_come_back_as_the_dataclass_and_are_never_mutated():
    p = probe.parser()
    args = p.parse_args(["hessian", "CKPT", "--top-k", "2", "--per-layer"])
    opts = line.options_of(args)
    assert type(opts) is PROBES["hessian"].Options and opts.top_k == 2 and opts.per_layer and opts.by is None
    from fedlab_analysis.probes import curvature
    filled = curvature._check("hessian", dataclasses.replace(opts, seed=0), None)
    assert filled.by == "block" and filled.products == 60 and opts.by is None and opts.products is None


def test_generated_arguments_read_the_declared_range():
    import argparse
    ap = argparse.ArgumentParser()
    options.add_arguments(ap, PROBES["density"].Options, skip=("ckpt",))
    assert ap.parse_args(["--steps", "3"]).steps == 3
    with pytest.raises(SystemExit):
        ap.parse_args(["--steps", "0"])


def test_probe_doctests_pass_and_a_wrong_expectation_fails():
    from fedlab_analysis import linalg
    from fedlab_analysis.probes import consensus, density, drift, hessian, landscape, margin, sharpness, trace
    for m in (hessian, trace, density, landscape, consensus, sharpness, drift, margin, linalg):
        r = doctest.testmod(m, optionflags=doctest.ELLIPSIS)
        assert r.failed == 0 and r.attempted > 0, m.__name__
    broken = types.ModuleType("broken")
    broken.__doc__ = hessian.compute.__doc__.replace("[5.0, 1.0]", "[5.0, 0.5]")
    runner = doctest.DocTestRunner(verbose=False)
    for t in doctest.DocTestFinder().find(broken, "broken", globs={}):
        runner.run(t, out=lambda s: None)
    assert runner.failures == 1


def _upward(source: str) -> list[str]:
    """Module-level imports of the studies or the trainer from a probes/ module's source."""
    return [n.module for n in ast.parse(source).body if isinstance(n, ast.ImportFrom) and n.level >= 2
            and (n.module or "").startswith(("studies", "trainers"))]


def test_no_module_level_import_from_probes_up_to_the_studies_or_the_trainer():
    """The stability study (it trains runs) is called at run time, so importing the probes never imports it."""
    root = Path(__file__).resolve().parents[1] / "fedlab_analysis" / "probes"
    assert {p.name: _upward(p.read_text()) for p in root.glob("*.py") if _upward(p.read_text())} == {}
    assert _upward("from ..studies import stability\n") == ["studies"]       # the check can fail
