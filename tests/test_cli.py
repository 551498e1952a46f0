"""Command line: --help, YAML + flags, and every bad input: one line, exit code 2, nothing written."""
import subprocess
import sys

import pytest
import torch

from fedlab_analysis import checkpoint, train as train_cli
from fedlab_analysis.config import RunConfig, fields
from fedlab_analysis.errors import CheckpointError

BASE = ["--dataset", "digits", "--model", "logreg", "--clients", "4", "--rounds", "1", "--local-steps", "1",
        "--quiet"]


def test_help_lists_every_flag_with_default():
    text = train_cli.parser().format_help()
    for f in fields(RunConfig):
        assert "--" + f.name.replace("_", "-") in text, f.name
    assert "default:" in text


@pytest.mark.parametrize("flags, needle", [
    (["--algo", "fedfoo"], "--algo"),
    (["--dataset", "imagenet"], "--dataset"),
    (["--model", "gpt2"], "--model"),
    (["--lr", "0"], "--lr"),
    (["--lr", "-1"], "--lr"),
    (["--active-ratio", "0"], "--active-ratio"),
    (["--active-ratio", "1.5"], "--active-ratio"),
    (["--dir-alpha", "0"], "--dir-alpha"),
    (["--clients", "5000"], "--clients"),
    (["--model", "cnn"], "--model"),                       # LeNet on 1x8x8 digits does not fit
    (["--dataset", "cifar10", "--data-dir", "/nonexistent"], "cifar"),
])
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, capsys, flags, needle):
    out = tmp_path / "run"
    code = train_cli.main([*BASE, *flags, "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and needle.lower() in err.lower(), err
    assert not out.exists()


def test_yaml_config_and_override(tmp_path):
    (tmp_path / "run.yaml").write_text("algo: fedprox\nclients: 4\nrounds: 1\nlocal-steps: 1\nmodel: logreg\n")
    out = tmp_path / "r"
    assert train_cli.main(["--config", str(tmp_path / "run.yaml"), "--mu", "0.5", "--out", str(out), "--quiet"]) == 0
    ck = checkpoint.load(out / "ckpt/last.pt")
    assert ck["config"]["algo"] == "fedprox" and ck["config"]["mu"] == 0.5 and ck["config"]["clients"] == 4


def test_module_entry_point(tmp_path):
    r = subprocess.run([sys.executable, "-m", "fedlab_analysis.train", *BASE, "--out", str(tmp_path / "r")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "test_acc" in r.stdout and (tmp_path / "r/ckpt/last.pt").exists()
    assert (tmp_path / "r/config.json").exists() and (tmp_path / "r/metrics.jsonl").exists()


def test_bad_checkpoints(tmp_path):
    good = tmp_path / "r"
    assert train_cli.main([*BASE, "--out", str(good)]) == 0
    raw = (good / "ckpt/last.pt").read_bytes()
    (tmp_path / "trunc.pt").write_bytes(raw[: len(raw) // 2])
    torch.save({"state_dict": {}}, tmp_path / "foreign.pt")
    ck = torch.load(good / "ckpt/last.pt", weights_only=True)
    torch.save({**ck, "version": checkpoint.VERSION + 1}, tmp_path / "newer.pt")
    (tmp_path / "text.pt").write_text("hello")
    for name, needle in [("trunc.pt", "truncated"), ("foreign.pt", "not a fedlab_analysis"),
                         ("newer.pt", "newer"), ("text.pt", "truncated"), ("missing.pt", "does not exist")]:
        with pytest.raises(CheckpointError, match=needle) as e:
            checkpoint.load(tmp_path / name)
        assert "\n" not in str(e.value)


def test_resume_refuses_changed_config(tmp_path, capsys):
    out = tmp_path / "r"
    assert train_cli.main([*BASE, "--out", str(out)]) == 0
    assert train_cli.main(["--resume", str(out), "--lr", "0.5", "--rounds", "2"]) == 2
    assert "--resume" in capsys.readouterr().err
    assert train_cli.main(["--resume", str(out), "--rounds", "2"]) == 0
    assert checkpoint.load(out)["round"] == 2


def test_training_hooks_write_probe_rows(tmp_path):
    import json
    out = tmp_path / "r"
    code = train_cli.main([*BASE, "--algo", "fedsam", "--rounds", "2", "--local-steps", "2", "--out", str(out),
                           "--probe", "consensus,drift,sharpness,gap", "--probe-steps", "0,1"])
    assert code == 0
    rows = [json.loads(s) for s in (out / "metrics.jsonl").read_text().splitlines()]
    names = {p["probe"] for r in rows for p in r.get("probes", [])}
    assert names == {"consensus", "drift", "sharpness", "gap"}, names
    assert train_cli.main([*BASE, "--out", str(tmp_path / "x"), "--probe", "nonsense"]) == 2
    assert not (tmp_path / "x").exists()
