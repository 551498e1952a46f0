"""The rules layer: a field declared with its type and range, and the one check of a value against it, for ANY
options dataclass (the run's ``RunConfig``, a probe's ``Options``, the theory and sweep flags).

Declare::

    @dataclass
    class Options:
        samples: int = rules.field(100, "Hutchinson samples", lo=1)
        radius: float | None = rules.field(None, "ball radius (default: the run's rho)", lo=0, lo_open=True)

The annotation gives the type (int, float, str, bool, dict; ``| None`` allows null), the keywords the rule:
``lo``/``hi`` (+ ``lo_open``/``hi_open``), ``integer`` (a float that must be whole), ``choices`` (a collection of
names, or a callable returning them), ``prefix`` (a string starting with it is accepted too), ``pattern`` (a regex
for strings), ``kind="json"``. Then:

* ``check_value(f, v, where)``: one value against field ``f``'s rule (narrowed by ``narrow``), converted to its
  type, or one ``UserError`` line ``WHERE: must be ...``;
* ``validate(obj)``: every field of an instance (or ``validate(d, source, cls=Options)``: a mapping from a file);
* ``check(cls, d, source)``: a mapping of fields (unknown keys refused with a close match);
* ``arg_type(base, **rule)``: the same rule as an argparse ``type=`` for a flag that is no field;
* ``describe(rule)``: a rule in words, as ``--help`` and the refusals print it.

The argparse and YAML plumbing (flags generated from the fields, ``--help``, files) is ``options.py``.
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import math
import re
import typing

from .errors import UserError

WORDS = {"int": "a whole number", "float": "a finite number", "str": "a string", "bool": "true or false",
         "dict": "a mapping"}
INT_MAX = 2 ** 63 - 1      # every whole number ends up in a 64-bit integer (torch, numpy): larger ones are refused


def field(default, help, **rule):
    """A field: default, help, and its rule (module docstring). ``default=dict`` gives each instance its own {}."""
    if default is dict:
        return dataclasses.field(default_factory=dict, metadata={"help": help, **rule})
    return dataclasses.field(default=default, metadata={"help": help, **rule})


def fields_of(cls) -> dict:
    """name -> ``dataclasses.Field`` of an options dataclass (or of an instance)."""
    return {f.name: f for f in dataclasses.fields(cls)}


def type_of(f: dataclasses.Field) -> tuple[str, bool]:
    """(base type, nullable) from the field's annotation, e.g. 'float | None' -> ('float', True); a string
    annotation (``from __future__ import annotations``) or a real type alike."""
    t = f.type
    if isinstance(t, str):
        parts = [p.strip() for p in t.split("|")]
    else:
        parts = [getattr(a, "__name__", str(a)) for a in (typing.get_args(t) or (t,))]
    nullable = any(p in ("None", "NoneType") for p in parts)
    return next((p for p in parts if p not in ("None", "NoneType")), parts[0]), nullable


def where(source: str | dict | None, name: str) -> str:
    """How a message names a field: ``--name`` (a flag), or ``SOURCE: name``; ``source`` may map names to
    sources (values merged from a file and from flags)."""
    source = source.get(name) if isinstance(source, dict) else source
    return "--" + name.replace("_", "-") if source is None else f"{source}: {name}"


def choices(rule: dict) -> tuple:
    c = rule["choices"]
    return tuple(c() if callable(c) else c)


def describe(rule: dict) -> str:
    """A rule as words: 'in (0, 1]', '>= 0', 'a whole number >= 1', 'one of a, b'."""
    lo, hi = rule.get("lo"), rule.get("hi")
    whole = "a whole number " if rule.get("integer") else ""
    if lo is not None and hi is not None:
        return f"{whole}in {'(' if rule.get('lo_open') else '['}{lo}, {hi}{')' if rule.get('hi_open') else ']'}"
    if lo is not None:
        return f"{whole}{'>' if rule.get('lo_open') else '>='} {lo}"
    if hi is not None:
        return f"{whole}{'<' if rule.get('hi_open') else '<='} {hi}"
    if rule.get("choices"):
        return "one of " + ", ".join(choices(rule))
    return whole.strip()


def _too_big(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and abs(v) > INT_MAX


def in_range(v, rule: dict) -> bool:
    """``v`` (a number) inside the rule's bounds, and whole where the rule says ``integer``."""
    lo, hi = rule.get("lo"), rule.get("hi")
    return not ((lo is not None and (v < lo or (rule.get("lo_open") and v == lo)))
                or (hi is not None and (v > hi or (rule.get("hi_open") and v == hi)))
                or (rule.get("integer") and v != int(v)))


def arg_type(base: type, **rule):
    """An argparse ``type=`` applying a rule in the words of the fields, for a flag that is no field:
    ``p.add_argument("--samples", type=arg_type(int, lo=1))``; floats must be finite."""
    def parse(s: str):
        try:
            v = base(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {WORDS[base.__name__]} (got {s!r})") from None
        if base is float and not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"must be {WORDS['float']} (got {s!r})")
        if _too_big(v):
            raise argparse.ArgumentTypeError(f"must be at most {INT_MAX} in size (got {s!r})")
        if not in_range(v, rule):
            raise argparse.ArgumentTypeError(f"must be {describe(rule)} (got {s!r})")
        return v
    parse.base, parse.rule = base, rule               # read back by the fuzz test to generate bad values
    return parse


def check_value(f: dataclasses.Field, v, where: str, narrow: dict | None = None, why: str = ""):
    """One value against field ``f``'s declared type and rule (narrowed by ``narrow``, e.g. an algorithm's range;
    ``why`` is appended to a range refusal); returns it as the field's type (an int where a float is expected
    becomes a float). Raises one UserError line naming ``where``."""
    base, nullable = type_of(f)
    rule = {**f.metadata, **(narrow or {})}
    got = f"(got {v!r})"
    if base not in WORDS:                           # a type this layer does not know: checked by its own block
        return v
    if v is None:
        if nullable:
            return None
        raise UserError(f"{where}: must be {WORDS[base]}, not null")
    if base == "float" and isinstance(v, str):      # PyYAML reads 1e-3 (no dot) as a string
        try:
            v = float(v)
        except ValueError:
            pass
    ok = {"int": isinstance(v, int) and not isinstance(v, bool),
          "float": isinstance(v, (int, float)) and not isinstance(v, bool),
          "str": isinstance(v, str), "bool": isinstance(v, bool), "dict": isinstance(v, dict)}[base]
    if not ok:
        raise UserError(f"{where}: must be {WORDS[base]} {got}")
    if _too_big(v):                                 # before float(): an int beyond 64 bits may not convert
        raise UserError(f"{where}: must be at most {INT_MAX} in size {got}")
    if base == "float":
        v = float(v)
        if not math.isfinite(v):
            raise UserError(f"{where}: must be {WORDS[base]} {got}")
    if _too_big(v):
        raise UserError(f"{where}: must be at most {INT_MAX} in size {got}")
    if base in ("int", "float") and not in_range(v, rule):
        raise UserError(f"{where}: must be {describe(rule)}{why} {got}")
    if base == "str" and "\0" in v:
        raise UserError(f"{where}: holds a NUL byte, which no path or name can hold {got}")
    if base == "str" and "choices" in rule and v not in choices(rule) and \
            not (rule.get("prefix") and v.startswith(rule["prefix"])):
        raise UserError(f"{where}: unknown {v!r}; choose one of {', '.join(choices(rule))}")
    if base == "str" and "pattern" in rule and not re.fullmatch(rule["pattern"], v.strip().lower()):
        raise UserError(f"{where}: {v!r} is not valid; use {f.metadata['help'].split(' (')[0]}")
    return v


def check(cls, d: dict, source: str) -> dict:
    """Each value of a mapping of ``cls``'s fields from ``source`` (a YAML file, a resumed config.json, a sweep
    cell) against its field's type and rule; keys may use - or _. Returns the mapping with _ keys."""
    what = f"{cls.__name__} fields"
    if not isinstance(d, dict):
        raise UserError(f"{source}: must hold a mapping of {what} (got {type(d).__name__})")
    known, out = fields_of(cls), {}
    for k, v in d.items():
        name = k.replace("-", "_") if isinstance(k, str) else k
        if name not in known:
            near = difflib.get_close_matches(str(name), known, n=1)
            raise UserError(f"{source}: unknown key {k!r}" + (f" (did you mean {near[0]!r}?)" if near else "")
                            + "; see --help for the valid names")
        out[name] = check_value(known[name], v, f"{source}: {k}")
    return out


def validate(obj, source: str | dict | None = None, cls=None):
    """Every field of a dataclass instance against its rule, in place (values converted to the field's type);
    returns it. ``source`` names where the values came from (``where``). Given a mapping and ``cls``: the
    instance ``cls(**check(cls, obj, source))``, every value checked."""
    if isinstance(obj, dict):
        if cls is None:
            raise TypeError("validate(mapping) needs cls=, the options dataclass the keys belong to")
        return cls(**check(cls, obj, source or cls.__name__))
    for f in dataclasses.fields(obj):
        setattr(obj, f.name, check_value(f, getattr(obj, f.name), where(source, f.name)))
    return obj
