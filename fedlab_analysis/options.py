"""Where an options dataclass meets the command line and files: the project's argparse parser (one-line refusals),
the ``--help`` formatter, one flag per field (``add_arguments``), flags over a base (``from_args``), and YAML files
(``read_yaml``, ``load_yaml``). The fields and their rules are declared with ``rules.field`` (rules.py); nothing here
knows a particular dataclass.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields

from .cli import DEBUG, DEBUG_HELP
from .errors import UserError
from .rules import check, describe, type_of


class ArgParser(argparse.ArgumentParser):
    """argparse with the project's contract: a bad flag is ONE line ``error: ...`` on stderr and exit 2
    (argparse's default prints the usage block first). Sub-parsers inherit it. ``--debug`` is listed in --help; the
    guard (``cli.guard``) takes it out of argv before parsing."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        if self.add_help:
            self.add_argument(DEBUG, action="store_true", help=DEBUG_HELP)

    def error(self, message):
        print(f"error: {' '.join(message.split())} (see --help)", file=sys.stderr)
        sys.exit(2)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """The one ``--help`` formatter of every entry point: each default printed once, as "(default: X)", and
    nothing for a flag whose help already states its default or that has none (None, off)."""

    def _get_help_string(self, action):
        h = action.help or ""
        if "default" in h or action.default in (None, False, argparse.SUPPRESS):
            return h
        return super()._get_help_string(action)


def _parse_bool(s: str) -> bool:
    if s.lower() in ("1", "true", "yes", "on"):
        return True
    if s.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {s!r}")


def _parse_json(s: str):
    """A JSON flag value; one line for bad JSON (argparse's) and for JSON nested too deeply to read."""
    try:
        return json.loads(s)
    except RecursionError:
        raise argparse.ArgumentTypeError("JSON nested too deeply to read; flatten it") from None


def add_arguments(p: argparse.ArgumentParser, cls) -> None:
    """One flag per field of the options dataclass ``cls``, named --field-name, its help followed by the range
    and default declared with the field. Every flag defaults to None (not given), so a base can show through."""
    defaults = cls()
    for f in fields(cls):
        flag = "--" + f.name.replace("_", "-")
        rng = describe({k: v for k, v in f.metadata.items() if k != "choices"})
        default = getattr(defaults, f.name)          # None: the help says what happens (a paper default, off)
        said = [rng] * bool(rng) + [f"default: {default}"] * (default is not None
                                                           and "default" not in f.metadata["help"])
        h = f"{f.metadata['help']} ({'; '.join(said)})" if said else f.metadata["help"]
        base, _ = type_of(f)
        typ = {"int": int, "float": float, "dict": _parse_json, "bool": _parse_bool}.get(base, str)
        p.add_argument(flag, type=typ, default=None, help=h.replace("%", "%%"),
                       **({"nargs": "?", "const": True} if base == "bool" else {}))


def from_args(args: argparse.Namespace, cls, base: dict | None = None):
    """``cls`` from ``base`` (fields already checked: a YAML file, a resumed config.json) overridden by the flags
    given; validate the result (``rules.validate``, or the dataclass's own ``validate``)."""
    flags = {f.name: getattr(args, f.name) for f in fields(cls) if getattr(args, f.name, None) is not None}
    return cls(**{**(base or {}), **flags})


def read_yaml(path: str, flag: str, what: str) -> dict:
    """A YAML (or JSON) file holding a mapping (of ``what``, as the messages say), unchecked (a sweep file reads
    its parts itself); one UserError line for a missing, unreadable, binary or non-UTF-8 file, bad YAML, or a file
    that holds no mapping."""
    import yaml
    where = f"{flag} {path}"
    try:
        with open(path, encoding="utf-8") as fh:
            d = yaml.safe_load(fh)
    except FileNotFoundError:
        raise UserError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{where}: is a directory; give a YAML file of {what}") from None
    except UnicodeDecodeError as e:
        raise UserError(f"{where}: is not UTF-8 text (byte {e.start}); save it as UTF-8 YAML") from None
    except OSError as e:
        raise UserError(f"{where}: cannot be read ({e.strerror})") from None
    except yaml.YAMLError as e:
        raise UserError(f"{where}: is not valid YAML ({' '.join(str(e).split())[:200]})") from None
    except RecursionError:
        raise UserError(f"{where}: is nested too deeply to read; flatten it") from None
    d = {} if d is None else d
    if not isinstance(d, dict):
        raise UserError(f"{where}: must hold a mapping of {what} (got {type(d).__name__})")
    return d


def load_yaml(path: str, cls, flag: str = "--config") -> dict:
    """A YAML (or JSON) file of ``cls``'s fields, every value checked (``read_yaml``, then ``rules.check``)."""
    return check(cls, read_yaml(path, flag, f"{cls.__name__} fields"), f"{flag} {path}")
