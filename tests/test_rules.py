"""The rules layer (rules.py) and its argparse/YAML plumbing (options.py) on an options dataclass that is not
RunConfig, as a probe's Options declares it (real annotations, no ``from __future__ import annotations``)."""
import argparse
import dataclasses

import pytest

from fedlab_analysis import config, errors, rules
from fedlab_analysis.errors import UserError
from fedlab_analysis.options import ArgParser, HelpFormatter, add_arguments, from_args, load_yaml


@dataclasses.dataclass
class Options:
    samples: int = rules.field(100, "Hutchinson samples", lo=1)
    radius: float | None = rules.field(None, "ball radius (default: the run's rho)", lo=0, lo_open=True)
    frac: float = rules.field(0.5, "fraction kept", lo=0, hi=1, hi_open=True)
    data: str = rules.field("train", "where the batch comes from", choices=("train", "test"), prefix="client:")
    exact: bool = rules.field(False, "also the exact answer")


def test_type_of_reads_real_and_string_annotations():
    f = rules.fields_of(Options)
    assert [rules.type_of(f[n]) for n in ("samples", "radius", "data", "exact")] == \
        [("int", False), ("float", True), ("str", False), ("bool", False)]
    assert rules.type_of(config._FIELDS["server_lr"]) == ("float", True)      # RunConfig: string annotations


def test_validate_converts_and_refuses_in_one_line():
    o = rules.validate(Options(samples=3, radius=2, data="client:4"))
    assert o.radius == 2.0 and isinstance(o.radius, float)
    for bad, message in ((dict(samples=0), "--samples: must be >= 1 (got 0)"),
                         (dict(radius=0.0), "--radius: must be > 0 (got 0.0)"),
                         (dict(frac=1), "--frac: must be in [0, 1) (got 1)"),
                         (dict(frac=float("nan")), "--frac: must be a finite number (got nan)"),
                         (dict(samples=True), "--samples: must be a whole number (got True)"),
                         (dict(samples=2 ** 64), f"--samples: must be at most {rules.INT_MAX} in size"),
                         (dict(data="val"), "--data: unknown 'val'; choose one of train, test"),
                         (dict(exact="yes"), "--exact: must be true or false (got 'yes')")):
        with pytest.raises(UserError) as e:
            rules.validate(Options(**bad))
        assert str(e.value).startswith(message), (bad, str(e.value))
    with pytest.raises(UserError, match=r"^opts.yaml: samples: must be >= 1"):
        rules.validate(Options(samples=0), "opts.yaml")


def test_a_mapping_is_checked_key_by_key():
    assert rules.validate({"samples": 5, "frac": 0}, "cell", cls=Options) == Options(samples=5, frac=0.0)
    with pytest.raises(UserError, match=r"^cell: unknown key 'sample' \(did you mean 'samples'\?\)"):
        rules.validate({"sample": 5}, "cell", cls=Options)
    with pytest.raises(UserError, match=r"^cell: must hold a mapping of Options fields \(got list\)"):
        rules.check(Options, [1], "cell")
    with pytest.raises(TypeError):
        rules.validate({"samples": 5})


def test_arg_type_speaks_the_same_words():
    t = rules.arg_type(float, lo=0, hi=1, hi_open=True)
    assert t("0.25") == 0.25
    for s, words in (("1", "must be in [0, 1) (got '1')"), ("inf", "must be a finite number"), ("x", "finite")):
        with pytest.raises(argparse.ArgumentTypeError, match=words.replace("(", r"\(").replace(")", r"\)")
                           .replace("[", r"\[")):
            t(s)


def test_flags_help_and_files_come_from_the_fields(tmp_path, capsys):
    p = ArgParser(prog="x", formatter_class=HelpFormatter)
    add_arguments(p, Options)
    text = p.format_help()
    assert "Hutchinson samples (>= 1; default: 100)" in text
    assert "ball radius (default: the run's rho) (> 0)" in text        # its help states the default: said once
    assert from_args(p.parse_args(["--samples", "7", "--exact"]), Options, {"frac": 0.25}) == \
        Options(samples=7, frac=0.25, exact=True)
    (tmp_path / "o.yaml").write_text("samples: 9\nradius: 1\n")
    assert load_yaml(str(tmp_path / "o.yaml"), Options) == {"samples": 9, "radius": 1.0}
    (tmp_path / "bad.yaml").write_text("samples: 0\n")
    with pytest.raises(UserError, match=r"^--config .*bad.yaml: samples: must be >= 1 \(got 0\)"):
        load_yaml(str(tmp_path / "bad.yaml"), Options)
    with pytest.raises(SystemExit) as e:
        p.parse_args(["--samples", "many"])     # the type here; the range at validate (a file gives the same)
    assert e.value.code == 2 and capsys.readouterr().err.count("\n") == 1


def test_one_home_per_rule():
    """The machinery moved out of config.py and errors.py is not left behind there under its old names."""
    for name in ("DEFAULTS", "ALGO_DEFAULTS", "arg_type", "check_value", "describe", "add_arguments", "from_args",
                 "read_yaml", "load_yaml", "HelpFormatter", "ANCHORED", "INT_MAX"):
        assert not hasattr(config, name), name
    assert not hasattr(errors, "ArgParser")
