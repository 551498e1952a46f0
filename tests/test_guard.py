"""The last bad inputs: every entry point under one guard (one line, exit 2 for bad input; one line naming the
command, exit 1 for a defect; the traceback only with --debug), outputs checked before work, an explicit 0 treated
as given, damaged checkpoints caught where they are read, sweeps checked before they train, killed runs' temporaries
removed, and a property test over every command's declared option ranges."""
import argparse
import contextlib
import hashlib
import io
import json
import pickle
import shutil
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from fedlab_analysis import compare, demo, probe, report, sweep, train as train_cli
from fedlab_analysis.config import RunConfig, fields
from fedlab_analysis.probes import PROBES
from fedlab_analysis.rules import type_of
from fedlab_analysis.errors import UserError
from fedlab_analysis.theory import __main__ as theory_cli

BASE = ["--dataset", "digits", "--model", "mlp", "--model-kwargs", '{"widths": [8]}', "--clients", "4",
        "--rounds", "2", "--local-steps", "1", "--quiet"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = tmp_path_factory.mktemp("guard")
    # --keep-clients: the damaged-checkpoint cases alter the clients' table, which FedAvg keeps only when asked
    assert train_cli.main([*BASE, "--keep-clients", "--out", str(w / "run")]) == 0
    (w / "afile").write_text("x")
    return w


def snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): hashlib.sha1(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


def call(main, argv):
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as e:
            code = e.code
    return code, err.getvalue(), out.getvalue()


def refused(main, argv, needle, root, monkeypatch):
    """exit 2, one line ``error: ...`` holding ``needle``, nothing under ``root`` created or changed."""
    monkeypatch.chdir(root)
    before = snapshot(root)
    code, err, _ = call(main, argv)
    lines = err.strip().splitlines()
    assert code == 2, (argv, code, err)
    assert len(lines) == 1 and lines[0].startswith("error:"), (argv, err)
    assert needle.lower() in lines[0].lower(), (argv, needle, lines[0])
    assert snapshot(root) == before, (argv, "files changed")
    return lines[0]


# ---- the cases, each once a traceback, an exit 0 or a silent acceptance ------------------------------
def test_unwritable_outputs(world, monkeypatch):
    refused(train_cli.main, [*BASE, "--out", "/proc/x"], "/proc", world, monkeypatch)
    refused(train_cli.main, [*BASE, "--out", ""], "--out", world, monkeypatch)
    refused(theory_cli.main, ["fedcm", "--quick", "--out", "/proc/x"], "/proc", world, monkeypatch)
    refused(theory_cli.main, ["fedcm", "--quick", "--out", ""], "--out", world, monkeypatch)
    (world / "s.yaml").write_text('{"base": {"dataset": "digits"}, "grid": {"seed": [0]}}')
    refused(sweep.main, ["s.yaml", "--out", "afile"], "--out", world, monkeypatch)
    refused(report.main, [world / "run", "--out", "afile/x"], "--out", world, monkeypatch)
    refused(compare.main, [world / "run", "--plot", "out.xyz"], "--plot", world, monkeypatch)
    refused(demo.main, ["--out", "afile/x"], "--out", world, monkeypatch)


@pytest.mark.parametrize("cmd, argv, needle", [
    ("train", [*BASE, "--out", ""], "--out"), ("train", ["--resume", ""], "--resume"),
    ("train", [*BASE, "--config", "", "--out", "new"], "--config"),
    ("train", [*BASE, "--data-dir", "", "--out", "new"], "--data-dir"),
    ("train", [*BASE, "--init", "", "--out", "new"], "--init"),
    ("probe", ["hessian", ""], "CKPT"), ("probe", ["hessian", "run", "--json", ""], "--json"),
    ("probe", ["hessian", "run", "--plot", ""], "--plot"),
    ("probe", ["hessian", "run", "--data-dir", ""], "--data-dir"),
    ("compare", [""], "RUN_OR_DIR"), ("report", [""], "DIR"), ("sweep", [""], "SWEEP.yaml"),
    ("theory", ["fedcm", "--out", ""], "--out"), ("demo", ["--out", ""], "--out")])
def test_an_empty_path_is_refused_not_taken_as_the_current_folder(world, monkeypatch, cmd, argv, needle):
    mains = {"train": train_cli.main, "probe": probe.main, "compare": compare.main, "report": report.main,
             "sweep": sweep.main, "theory": theory_cli.main, "demo": demo.main}
    refused(mains[cmd], argv, needle, world, monkeypatch)


def test_theory_seed_beyond_a_generator_seed(world, monkeypatch):
    refused(theory_cli.main, ["fedcm", "--quick", "--seed", str(2**70)], "--seed", world, monkeypatch)


@pytest.mark.parametrize("name, extra", [("hessian", []), ("landscape", ["--grid", "3"]), ("stability", [])])
def test_plot_format_checked_before_the_json_is_written(world, monkeypatch, name, extra):
    refused(probe.main, [name, "run", *extra, "--json", "p.json", "--plot", "out.xyz"], "--plot", world, monkeypatch)
    refused(probe.main, [name, "run", *extra, "--plot", "noextension"], "--plot", world, monkeypatch)


@pytest.mark.parametrize("argv, needle", [
    (["hessian", "run", "--layer", "re:["], "--layer"),
    (["hessian", "run", "--layer", "block:x"], "--layer"),
    (["hessian", "run", "--data", "client:-1"], "--data"),
    (["hessian", "run", "--data", ""], "--data"),
    (["hessian", "run", "--seed", str(2**70)], "--seed"),
    # an explicit 0 is a value: refused where it is out of range or cannot act, like any other value
    (["hessian", "run", "--max-iter", "0"], "--max-iter"),
    (["hessian", "run", "--products", "0"], "--products"),
    (["hessian", "run", "--top-k", "0"], "--top-k"),
    (["trace", "run", "--tol", "0"], "--tol"),
    (["trace", "run", "--products", "0"], "--products"),
    (["sharpness", "run", "--steps", "0"], "--steps"),
    (["density", "run", "--vectors", "0"], "--vectors"),
])
def test_probe_values(world, monkeypatch, argv, needle):
    refused(probe.main, argv, needle, world, monkeypatch)


def test_an_explicit_zero_that_can_act_is_accepted(world, monkeypatch):
    """trace --tol 0 with --deflate: a tolerance of 0 runs the deflation's Lanczos to its step limit."""
    monkeypatch.chdir(world)
    code, err, out = call(probe.main, ["trace", "run", "--deflate", "1", "--tol", "0", "--products", "8",
                                       "--samples", "50", "--quiet"])
    assert code == 0, err


def test_fedavg_with_the_start_anchor_is_refused(world, monkeypatch):
    refused(train_cli.main, [*BASE, "--algo", "fedavg", "--ri", "true", "--ri-anchor", "start", "--out", "new"],
            "--ri-anchor", world, monkeypatch)
    RunConfig(algo="fedprox", ri=True, ri_anchor="start").validate()        # where a centre moves: accepted


def test_report_passes_over_a_stray_metrics_file_and_compare_names_a_damaged_config(world, monkeypatch, tmp_path):
    (tmp_path / "stray").mkdir()
    shutil.copy(world / "run/metrics.jsonl", tmp_path / "stray")
    shutil.copytree(world / "run", tmp_path / "good", ignore=shutil.ignore_patterns("ckpt"))
    monkeypatch.chdir(tmp_path)
    code, err, out = call(report.main, [tmp_path, "--no-plot", "--out", tmp_path / "r.md"])
    assert code == 0, err
    for text in ('{"lr": ', "[1, 2]", b"\xff\xfe"):
        (tmp_path / "good/config.json").write_bytes(text if isinstance(text, bytes) else text.encode())
        refused(compare.main, [tmp_path / "good"], "config.json", tmp_path, monkeypatch)
        refused(report.main, [tmp_path, "--no-plot"], "config.json", tmp_path, monkeypatch)
    (tmp_path / "sweep.json").write_text('{"runs": 3}')
    refused(report.main, [tmp_path, "--no-plot"], "sweep.json", tmp_path, monkeypatch)


# ---- checkpoints that load but cannot be probed --------------------------------------------------------------
def damaged(good: dict) -> dict:
    cfg, part, cl = good["config"], good["partition"], good["clients"]
    ix = part["indices"]
    return {
        "config_no_dataset": ({**good, "config": {k: v for k, v in cfg.items() if k != "dataset"}}, "dataset"),
        "config_no_seed": ({**good, "config": {k: v for k, v in cfg.items() if k != "seed"}}, "seed"),
        "index_beyond_data": ({**good, "partition": {**part, "indices": [ix[0] + 10**6, *ix[1:]]}}, "indices[0]"),
        "index_negative": ({**good, "partition": {**part, "indices": [*ix[:-1], ix[-1] - 10**6]}}, "indices[3]"),
        "fewer_clients": ({**good, "partition": {**part, "indices": ix[:2]}}, "partition.indices"),
        "client_id": ({**good, "clients": {**cl, "ids": [0, 1, 2, 99]}}, "clients.ids"),
        "client_rounds": ({**good, "clients": {**cl, "rounds": cl["rounds"] + 50}}, "clients.rounds"),
    }


VARIANTS = ["config_no_dataset", "config_no_seed", "index_beyond_data", "index_negative", "fewer_clients",
            "client_id", "client_rounds"]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", ["hessian", pytest.param("sharpness", marks=pytest.mark.slow),
                                  pytest.param("consensus", marks=pytest.mark.slow)])
def test_damaged_checkpoint_is_one_line_naming_file_and_field(world, monkeypatch, tmp_path, variant, name):
    good = torch.load(world / "run/ckpt/last.pt", weights_only=True)
    ck, field = damaged(good)[variant]
    torch.save(ck, tmp_path / f"{variant}.pt")
    line = refused(probe.main, [name, tmp_path / f"{variant}.pt", "--json", tmp_path / "p.json"], field, tmp_path,
                   monkeypatch)
    assert f"{variant}.pt" in line


@pytest.mark.parametrize("variant", ["config_no_seed", "fewer_clients", "client_id", "client_rounds"])
def test_resume_from_a_damaged_checkpoint_is_one_line(world, monkeypatch, tmp_path, variant):
    shutil.copytree(world / "run", tmp_path / "r")
    good = torch.load(tmp_path / "r/ckpt/last.pt", weights_only=True)
    ck, field = damaged(good)[variant]
    (tmp_path / "r/ckpt/last.pt").unlink()
    torch.save(ck, tmp_path / "r/ckpt/last.pt")
    line = refused(train_cli.main, ["--resume", tmp_path / "r", "--rounds", "3"], field, tmp_path, monkeypatch)
    assert "last.pt" in line


def test_a_raw_pickle_is_one_line_without_the_library_warning(world, monkeypatch, tmp_path):
    with open(tmp_path / "raw.pt", "wb") as fh:
        pickle.dump({"a": 1}, fh, protocol=4)                  # torch warns about the protocol before refusing
    import sys
    import warnings

    def show(message, category, filename, lineno, file=None, line=None):   # as outside pytest: to stderr
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        monkeypatch.setattr(warnings, "showwarning", show)
        refused(probe.main, ["hessian", tmp_path / "raw.pt"], "raw.pt", tmp_path, monkeypatch)


# ---- the guard ------------------------------------------------------------------------------------------------
def test_an_unforeseen_error_is_one_line_naming_the_command_and_debug_shows_the_traceback(world, monkeypatch):
    import fedlab_analysis.trainers.loop as loop

    def broken(*a, **k):
        raise ZeroDivisionError("a defect")
    monkeypatch.setattr(loop, "train", broken)
    monkeypatch.chdir(world)
    code, err, _ = call(train_cli.main, [*BASE, "--out", "new"])
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "train" in err and "please report" in err and "--debug" in err and "Traceback" not in err
    code, err, _ = call(train_cli.main, [*BASE, "--out", "new", "--debug"])
    assert code == 1 and "Traceback" in err and "ZeroDivisionError: a defect" in err


def test_an_os_error_during_work_is_bad_input(world, monkeypatch):
    import fedlab_analysis.trainers.loop as loop

    def disk_full(*a, **k):
        raise OSError(28, "No space left on device", "new/ckpt/round_0001.pt")
    monkeypatch.setattr(loop, "train", disk_full)
    line = refused(train_cli.main, [*BASE, "--out", "new"], "No space left", world, monkeypatch)
    assert "round_0001.pt" in line


def test_debug_is_listed_in_help():
    assert "--debug" in probe.parser().format_help() and "--debug" in train_cli.parser().format_help()


# ---- sweeps: every line checked before any training ------------------------------------------------------------
@pytest.mark.parametrize("line, needle", [("hessian --top-k 0", "--top-k"), ("trace --tol 0.5", "--tol"),
                                          ("hessian --data client:-1", "--data"), ("sharpness --steps 0", "--steps"),
                                          ("consensus --samples 10", "--samples"), ("hessian --layer re:[", "--layer")])
def test_sweep_probe_lines_are_checked_before_training(tmp_path, monkeypatch, line, needle):
    spec = {"base": {"dataset": "digits", "model": "logreg", "clients": 2, "rounds": 1, "local_steps": 1},
            "grid": {"seed": [0]}, "probes": [line]}
    (tmp_path / "s.yaml").write_text(json.dumps(spec))
    refused(sweep.main, [tmp_path / "s.yaml", "--out", tmp_path / "out", "--workers", "1"], needle, tmp_path,
            monkeypatch)


def test_sweep_check_passes_good_lines_and_refuses_flags_that_cannot_act():
    p = sweep._probe_parser()
    for name in PROBES:                         # every probe's defaults reach the checkpoint: accepted
        sweep.check_probe(p.parse_args([name, "CKPT"]))
    sweep.check_probe(p.parse_args(["trace", "CKPT", "--deflate", "2", "--tol", "0.5"]))
    for line in ["margin --rho 0.1", "consensus --seed 1", "hessian --per-layer --layer fc", "landscape --extend 2",
                 "sharpness --method one_step --steps 3"]:
        name, *rest = line.split()
        with pytest.raises(UserError, match="--"):
            sweep.check_probe(p.parse_args([name, "CKPT", *rest]))


# ---- killed runs -----------------------------------------------------------------------------------------------
def killed(d: Path, with_run: bool) -> Path:
    (d / "ckpt").mkdir(parents=True)
    tmp = d / "ckpt" / ".round_0001.pt.abc123.tmp"
    tmp.write_bytes(b"\0" * 100_000)
    (d / ".config.json.xyz.tmp").write_text("{")
    if with_run:
        cfg = RunConfig(**{"dataset": "digits", "model": "logreg", "clients": 4, "local_steps": 1, "rounds": 1,
                           "quiet": True}).to_dict()
        (d / "config.json").write_text(json.dumps(cfg))
        (d / "metrics.jsonl").write_text("")
    return tmp


def test_resume_of_a_run_killed_before_its_first_checkpoint_starts_it_again(tmp_path):
    tmp = killed(tmp_path / "r", with_run=True)
    assert train_cli.main(["--resume", str(tmp_path / "r")]) == 0
    assert not tmp.exists() and (tmp_path / "r/ckpt/last.pt").exists()
    assert not list((tmp_path / "r").rglob("*.tmp"))


def test_a_fresh_start_into_a_folder_of_temporaries_removes_them(tmp_path):
    tmp = killed(tmp_path / "r", with_run=False)
    argv = ["--dataset", "digits", "--model", "logreg", "--clients", "4", "--local-steps", "1", "--rounds", "1",
            "--quiet", "--out", str(tmp_path / "r")]
    assert train_cli.main(argv) == 0
    assert not tmp.exists() and not list((tmp_path / "r").rglob("*.tmp"))


# ---- a property test over every command's declared option ranges -------------------------------------------------
class Started(BaseException):
    """Raised where a command's work would begin: everything before it is the command's checking (a
    BaseException, so the guard lets it through as it lets KeyboardInterrupt through)."""


def _stop(*a, **k):
    raise Started


def _range_values(base, rule):
    """Values in and around a declared range: the bounds, one step either side, far outside, and junk."""
    lo, hi = rule.get("lo"), rule.get("hi")
    if base is int or base == "int":
        near = [x for b in (lo, hi) if b is not None for x in (int(b) - 1, int(b), int(b) + 1)]
        return st.one_of(st.sampled_from(near or [0]), st.integers(-10**6, 10**6), st.sampled_from(
            [str(2**70), "-0", "2.5", "1e3", "abc", ""]))
    near = [x for b in (lo, hi) if b is not None for x in (b - 1e-9, b, b + 1e-9, b * 2 + 1)]
    return st.one_of(st.sampled_from(near or [0.0]), st.floats(allow_nan=True, allow_infinity=True),
                     st.sampled_from(["nan", "-inf", "1e400", "abc", ""]))


def _options(parser: argparse.ArgumentParser):
    """(flag, strategy of values) for every option of ``parser`` with a declared type, range or choices."""
    out = []
    for act in parser._actions:
        if not act.option_strings or act.nargs == 0 or act.option_strings[0] in ("-h", "--help"):
            continue
        flag = act.option_strings[-1]
        if act.choices:
            out.append((flag, st.one_of(st.sampled_from(list(act.choices)), st.just("bogus"))))
        base, rule = getattr(act.type, "base", act.type), getattr(act.type, "rule", {})
        if base in (int, float):
            out.append((flag, _range_values(base, rule)))
    return out


def _train_options():
    out = []
    for f in fields(RunConfig):
        base, _ = type_of(f)
        rule = f.metadata
        if base in ("int", "float"):
            out.append(("--" + f.name.replace("_", "-"), _range_values(base, rule)))
        elif "choices" in rule and not callable(rule["choices"]):
            out.append(("--" + f.name.replace("_", "-"), st.one_of(st.sampled_from(list(rule["choices"])),
                                                                    st.just("bogus"))))
    return out


def _probe_options():
    sub = next(a for a in probe.parser()._actions if isinstance(a, argparse._SubParsersAction))
    return [(name, flag, s) for name, sp in sub.choices.items() for flag, s in _options(sp)]


COMMANDS = {
    "train": lambda: [([], flag, s) for flag, s in _train_options()],
    "probe": lambda: [([name, "run"], flag, s) for name, flag, s in _probe_options()],
    "theory": lambda: [(["fedcm", "--quick", "--out", "th"], flag, s) for flag, s in _options(_theory_parser())],
    "sweep": lambda: [(["s.yaml", "--out", "sw"], flag, s) for flag, s in _options(sweep.parser())],
    "report": lambda: [(["run", "--no-plot", "--out", "r.md"], flag, s) for flag, s in _options(report.parser())],
    "demo": lambda: [(["--out", "demo"], "--rounds", _range_values(int, {"lo": 1})),
                     (["--out", "demo"], "--grid", _range_values(int, {"lo": 2}))],
}
MAINS = {"train": train_cli.main, "probe": probe.main, "theory": theory_cli.main, "sweep": sweep.main,
         "report": report.main, "demo": demo.main}


def _theory_parser():
    """theory's parser is built inside main: read it back from a --help run."""
    captured = {}
    real = argparse.ArgumentParser.parse_args

    def grab(self, *a, **k):
        captured["p"] = self
        raise Started
    argparse.ArgumentParser.parse_args = grab
    try:
        with pytest.raises(Started):
            getattr(theory_cli.main, "__wrapped__", theory_cli.main)(["fedcm"])
    finally:
        argparse.ArgumentParser.parse_args = real
    return captured["p"]


def _stub(monkeypatch):
    """Stop each command where its work begins."""
    import fedlab_analysis.device as device
    import fedlab_analysis.probes.common as common
    import fedlab_analysis.trainers.loop as loop
    monkeypatch.setattr(device, "set_threads", lambda n, flag="--threads": None)   # no 10**6 torch threads here
    monkeypatch.setattr(sweep, "_ray_start", _stop)
    monkeypatch.setattr(loop, "train", _stop)
    monkeypatch.setattr(common, "rebuild", _stop)
    monkeypatch.setattr(theory_cli, "over_seeds", _stop)
    monkeypatch.setattr(sweep, "_local", _stop)
    monkeypatch.setattr(report, "tables", _stop)
    monkeypatch.setattr(demo, "train", _stop)


def _property(world, monkeypatch, data):
    _stub(monkeypatch)
    monkeypatch.chdir(world)
    (world / "s.yaml").write_text(json.dumps({"base": {"dataset": "digits", "model": "logreg", "clients": 2,
                                                      "rounds": 1}, "grid": {"seed": [0]}}))
    name = data.draw(st.sampled_from(sorted(COMMANDS)), label="command")
    head, flag, values = data.draw(st.sampled_from(CASES[name]), label="option")
    value = data.draw(values, label="value")
    argv = [*([*BASE, "--out", "new"] if name == "train" else head), flag, str(value)]
    before = {k: v for k, v in snapshot(world).items() if not k.startswith(("sw", "s.yaml"))}
    try:
        code, err, _ = call(MAINS[name], argv)
    except Started:                                          # a clean start: every check passed
        return
    lines = err.strip().splitlines()
    assert code == 2, (argv, code, err)
    assert len(lines) == 1 and lines[0].startswith("error:"), (argv, err)
    assert {k: v for k, v in snapshot(world).items() if not k.startswith(("sw", "s.yaml"))} == before, argv


CASES = {name: make() for name, make in COMMANDS.items()}
FAST = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
MANY = settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))


@FAST
@given(data=st.data())
def test_every_command_option_in_and_out_of_range(world, monkeypatch, data):
    with monkeypatch.context() as m:
        _property(world, m, data)


@pytest.mark.slow
@MANY
@given(data=st.data())
def test_every_command_option_in_and_out_of_range_many(world, monkeypatch, data):
    with monkeypatch.context() as m:
        _property(world, m, data)


def test_a_whole_number_beyond_64_bits_is_refused_everywhere(world, monkeypatch):
    """Found by the hypothesis test: `train --clients 2**70` crashed inside torch (exit 1) after validation."""
    refused(train_cli.main, [*BASE, "--clients", str(2 ** 70), "--out", "new"], "--clients", world, monkeypatch)
    refused(probe.main, ["hessian", "run", "--samples", str(2 ** 70)], "--samples", world, monkeypatch)
