"""Measurements kept beside the run ledger, so a script that reads weights need not train its runs again.

A weights script (``WEIGHTS = True``) measures checkpoints: a Hessian, a loss surface, a sharpness, one more round.
The ledger keeps no checkpoint, so a run restored from it (a light entry) cannot be measured again.
:func:`memo` wraps such a measurement ``fn(path, ...)`` and keeps its result per run:
``<out>/ledger/<tier>/<entry>.probes.json``.
A result is keyed by the checkpoint (its path inside the run), the function, every argument (defaults applied),
and a hash of the function's source and of the code it runs (:data:`SOURCES`).
The hash reads code, not prose: each file's syntax tree, without docstrings, comments or layout (:func:`_code_of`).
FedInit's heterogeneity noise (:data:`NOISE`) counts only for a run trained with it (``het_noise`` in its key),
as it does in the training fingerprint.
So a docstring edit keeps every kept result; any other edit, a help text too, starts afresh.
It serves on any machine while the run's key.json is the same; a run trained again under a new key starts afresh.
Every call returns the JSON form of the result, so a kept result and a fresh one are the same object.

``common.run_script`` computes a weights script twice at most.
First leniently (:func:`lenient`): a light entry is not trained again; a measurement it lacks raises
:class:`NeedWeights`.
Then, only on that error, strictly: the script's light runs are trained again, through the pool, and measured.
A script that finished marks each of its runs as measured for it (:func:`mark`).

A weights script also says what it measures on one run: ``measure_run(run)``, a superset of what its compute asks
(every matched-fit rung the run reached, not only the rung its comparison shares).
The tier runner measures each run for every weights script that shares it, right after training (:func:`measure`).
So a weights script's runs may be trained over several sessions, on several machines.
The tier runner trains a light run again only for a weights script that has not marked it.
Only the tiers that keep a ledger keep measurements; elsewhere :func:`memo` just calls ``fn``.
"""
from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import inspect
import json
import textwrap
from pathlib import Path

import numpy as np

from paper_figures import ledger

ROOT = Path(__file__).resolve().parents[1]
# the code the probes run that can move a number (the function's own source is added to it)
SOURCES = ("fedlab_analysis/probes", "fedlab_analysis/checkpoint.py", "fedlab_analysis/models.py",
           "fedlab_analysis/params.py", "fedlab_analysis/data", "fedlab_analysis/linalg.py",
           "fedlab_analysis/rules.py", "fedlab_analysis/config.py", "paper_figures/flatness.py")
NOISE = "fedlab_analysis/data/noise.py"   # in SOURCES; it moves a number only for a run with het_noise > 0
_STATE = {"lenient": False}


class NeedWeights(Exception):
    """A measurement of a light entry (restored from the ledger without checkpoints) that the ledger does not keep."""


@contextlib.contextmanager
def lenient():
    """Within: a weights caller takes a light entry as done (``runs.status``); a missing measurement raises."""
    old, _STATE["lenient"] = _STATE["lenient"], True
    try:
        yield
    finally:
        _STATE["lenient"] = old


def is_lenient() -> bool:
    return _STATE["lenient"]


def _code_of(text: str) -> bytes:
    """Python source as its syntax tree, without docstrings: two texts that differ in prose or layout only agree."""
    return _canon(_bare(ast.parse(textwrap.dedent(text)))).encode()


def _bare(tree: ast.AST) -> ast.AST:
    """``tree`` without docstrings and without the empty parts some Python versions put in f-strings."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
        if isinstance(node, ast.JoinedStr):       # Python 3.12.1 adds an empty part to some f-string format specs
            node.values = [v for v in node.values if not (isinstance(v, ast.Constant) and v.value == "")]
    return tree


def _canon(node) -> str:
    """A syntax tree as text, its empty fields left out: the same across Python versions (``ast.dump`` is not)."""
    if isinstance(node, list):
        return "[" + ",".join(map(_canon, node)) + "]"
    if not isinstance(node, ast.AST):
        return repr(node)
    fields = ((f, getattr(node, f, None)) for f in node._fields)
    return type(node).__name__ + "(" + ",".join(f"{f}={_canon(v)}" for f, v in fields
                                                if v is not None and not (isinstance(v, list) and not v)) + ")"


def _hash_sources(paths, skip=()) -> str:
    h = hashlib.sha1()
    missing = [s for s in paths if not (ROOT / s).exists()]
    if missing:
        raise FileNotFoundError(f"probed.memo: no source {missing[0]!r}")
    for p in sorted(f for s in paths for f in ([ROOT / s] if (ROOT / s).is_file() else (ROOT / s).rglob("*.py"))):
        if p.relative_to(ROOT).as_posix() not in skip:
            h.update(p.relative_to(ROOT).as_posix().encode() + b"\0" + _code_of(p.read_text()))
    return h.hexdigest()[:12]


def _entry(path: Path) -> Path | None:
    """The run-cache entry (the folder with key.json) that holds ``path``."""
    return next((p for p in (path, *path.parents) if (p / "key.json").exists()), None)


def _plain(x):
    if isinstance(x, (np.ndarray, np.generic)):
        return x.tolist()
    raise TypeError(f"probed.memo: cannot keep a {type(x).__name__}")


def path_of(entry: Path) -> Path:
    """``<out>/ledger/<tier>/<entry>.probes.json``."""
    return ledger.folder(entry.parent.name) / f"{entry.name}.probes.json"


def _stored(entry: Path) -> dict:
    """{"results": {...}, "by": [scripts]} kept for the entry (empty when none, or when of another key of the run)."""
    p = path_of(entry)
    d = json.loads(p.read_text()) if p.exists() else {}
    return d if d.get("key") == _key(entry) else {"results": {}, "by": []}


def _store(entry: Path, results: dict, by: list) -> None:
    ledger._atomic(path_of(entry), (json.dumps({"key": _key(entry), "results": results, "by": sorted(set(by))},
                                               indent=0, sort_keys=True) + "\n").encode())


def kept(entry: Path) -> dict:
    """The entry's kept measurements ({} when none, or when they belong to another key of the run)."""
    return _stored(Path(entry))["results"]


def _key(entry: Path) -> str:
    return hashlib.sha1((entry / "key.json").read_bytes()).hexdigest()[:12]


def _noisy(entry: Path) -> bool:
    """Whether the run was trained on FedInit's noisy images (``het_noise`` > 0 in its key)."""
    return bool(json.loads((entry / "key.json").read_text())["config"].get("het_noise"))


def _where(fn) -> str:
    """``paper_figures.flatness.lam1``, from the file: a script run as ``python -m`` (``__main__``) names it alike."""
    mod = Path(inspect.getfile(fn)).resolve().relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
    return f"{mod}.{fn.__qualname__}"


def memo(fn=None, *, sources: tuple = ()):
    """Decorator: keep ``fn(path, ...)``'s result per run (see the module). ``sources`` adds code it runs beyond
    :data:`SOURCES` (paths from the repository root)."""
    if fn is None:
        return lambda f: memo(f, sources=sources)
    sig = inspect.signature(fn)
    first = next(iter(sig.parameters))
    own = _code_of(inspect.getsource(fn))
    code = {noisy: hashlib.sha1(_hash_sources(SOURCES + tuple(sources), () if noisy else (NOISE,)).encode()
                                + own).hexdigest()[:12] for noisy in (False, True)}
    where = _where(fn)

    @functools.wraps(fn)
    def wrapped(*a, **kw):
        b = sig.bind(*a, **kw)
        b.apply_defaults()
        args = dict(b.arguments)
        path = Path(args.pop(first))
        entry = _entry(path)
        if entry is None or not ledger._kept(entry):
            return json.loads(json.dumps(fn(*a, **kw), default=_plain))
        name = json.dumps([where, path.relative_to(entry).as_posix(), args, code[_noisy(entry)]],
                          sort_keys=True, default=str)
        results = kept(entry)
        if name in results:
            return results[name]
        if ledger.light(entry):
            raise NeedWeights(f"{entry.name}: {fn.__qualname__} is not kept for this run, and it has no checkpoints")
        out = json.loads(json.dumps(fn(*a, **kw), default=_plain))
        d = _stored(entry)
        _store(entry, {**d["results"], name: out}, d["by"])
        return out
    return wrapped


def mark(paths, script: str) -> None:
    """Record that ``script`` measured the runs at ``paths`` (entries of a tier that keeps a ledger)."""
    for entry in map(Path, paths):
        if ledger._kept(entry) and (entry / "key.json").exists():
            d = _stored(entry)
            if script not in d["by"]:
                _store(entry, d["results"], d["by"] + [script])


def marked(path, script: str) -> bool:
    """Whether ``script`` measured the run at ``path`` (:func:`mark`), under the run's present key."""
    entry = Path(path)
    return (entry / "key.json").exists() and script in _stored(entry)["by"]


def unmeasured(task: dict) -> list[str]:
    """The weights scripts of ``task["measure"]`` that have not measured its run yet (a run with checkpoints)."""
    entry = Path(task["path"])
    if not ledger._kept(entry) or ledger.light(entry):
        return []
    return [s for s in task.get("measure", ()) if not marked(entry, s)]


def measure(task: dict) -> None:
    """Each weights script of ``task["measure"]`` measures the done run (``measure_run``), then marks it."""
    import importlib

    from paper_figures import entry as E
    for script in unmeasured(task):
        importlib.import_module(f"paper_figures.{script}").measure_run(E.result({"path": task["path"],
                                                                                  "status": "done"}))
        mark([task["path"]], script)
