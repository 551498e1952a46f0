"""Checkpoints are plain data (DESIGN.md decision 5): a dict of tensors, numbers, strings, lists and dicts,
written atomically (temp file + os.replace) and read only with ``torch.load(weights_only=True)``.

Schema (version 1): format, version, config (RunConfig dict), round, model (name, kwargs, input_shape,
n_classes), global (param name -> tensor), buffers (name -> tensor), layers (ParamSpace table), algo_state
(name -> tensor), clients (ids, models [m, P], rounds [m] last round each client trained, -1 = never; or None),
partition (indices: list of tensors, counts), rng (the seeding scheme), metrics (last row).
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import torch

from .errors import CheckpointError, UserError
from .rundir import atomic

FORMAT, VERSION = "fedlab_analysis.ckpt", 1
REQUIRED = ("config", "round", "model", "global", "layers", "algo_state", "partition")


def save(ckpt: dict, path: str | os.PathLike) -> Path:
    ckpt = {"format": FORMAT, "version": VERSION, **ckpt}
    return atomic(Path(path), lambda tmp: _write(ckpt, tmp))


def save_plain(obj, path: str | os.PathLike) -> Path:
    """Any torch file of plain data, written as a checkpoint is (atomic; a full disk is one line)."""
    return atomic(Path(path), lambda tmp: _write(obj, tmp))


def _write(obj, tmp) -> None:
    """torch.save through a Python file: a failed write (a full disk) keeps its OSError as the context of torch's
    RuntimeError, which ``rundir.atomic`` turns into one line."""
    with open(tmp, "wb") as fh:
        torch.save(obj, fh)


def alias(src: str | os.PathLike, path: str | os.PathLike) -> Path:
    """Make ``path`` (e.g. last.pt) the same checkpoint as the saved ``src``: a hard link, or a byte copy where
    the file system has none; atomic, and the checkpoint is not serialised again."""
    def write(tmp):
        os.unlink(tmp)
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)
    return atomic(Path(path), write)


def load(path: str | os.PathLike, map_location="cpu", finite: bool = True) -> dict:
    """Load and validate; any problem is one CheckpointError line naming the file and the fix. ``finite=False``
    accepts non-finite values: the state of a run that went on through a divergence, which it resumes."""
    path, ckpt = read(path, map_location)
    return validate(ckpt, path, finite)


def read(path: str | os.PathLike, map_location="cpu") -> tuple[Path, object]:
    """(the file, what it holds) of a checkpoint file or run directory, read with ``torch.load(weights_only=True)``
    and not yet validated (a probe reads a plain state_dict through here too); an unreadable file is one line."""
    path = Path(path)
    if path.is_dir():
        run_dir(path)
        for cand in (path / "ckpt" / "last.pt", path / "last.pt"):
            if cand.exists():
                path = cand
                break
    if not path.exists():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist (give a .pt file or a run directory "
                              f"holding ckpt/last.pt)")
    regular(path, "checkpoint")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # noqa: BLE001  truncated zips fail as KeyError, EOFError, BadZipFile, ...
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(e))
        if found:                                    # weights_only refused an object: nothing of it ran
            raise CheckpointError(f"{str(path)!r} holds an object {found.group(1)}, which fedlab_analysis never "
                                  f"writes; refused unread (no code in it was run). A whole pickled module: save "
                                  f"model.state_dict() instead and probe it with --model or --model-factory") from None
        text = " ".join(str(e).split()).split(" Check the documentation")[0]
        first = (text.split("Unpickler error:")[-1].strip() or type(e).__name__).split(". ")[0][:160]
        raise CheckpointError(f"{str(path)!r} is truncated or not a torch checkpoint ({first}); "
                              f"re-run or point at another file") from None
    return path, ckpt


def validate(ckpt, path, finite: bool = True) -> dict:
    """``ckpt`` (read from ``path``) if it is a well-formed fedlab_analysis checkpoint; else one CheckpointError."""
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        what = ckpt.get("format") if isinstance(ckpt, dict) else type(ckpt).__name__
        raise CheckpointError(f"{str(path)!r} is not a fedlab_analysis checkpoint (format={what!r}); "
                              f"give a file written by `python -m fedlab_analysis.train` (a probe also reads a plain "
                              f"state_dict: add --model NAME or --model-factory FILE.py:callable, and --dataset)")
    if not isinstance(ckpt.get("version"), int) or ckpt["version"] > VERSION:
        raise CheckpointError(f"{str(path)!r} has format version {ckpt.get('version')!r}, newer than this "
                              f"fedlab_analysis reads ({VERSION}); upgrade fedlab_analysis")
    missing = [k for k in REQUIRED if k not in ckpt]
    if missing:
        raise CheckpointError(f"{str(path)!r} lacks {', '.join(missing)}; it is incomplete, re-run training")
    verify(ckpt, path, finite)
    return ckpt



def load_weights(path: str | os.PathLike, flag: str = "--init") -> dict:
    """Model weights (name -> tensor) from a fedlab_analysis checkpoint (file or run directory: its global model
    and buffers) or from a plain state_dict .pt file, read with ``torch.load(weights_only=True)``."""
    p = Path(path)
    if p.is_dir():
        ck = _load_as(p, flag)
    elif not p.exists():
        raise CheckpointError(f"{flag}: no file {str(p)!r}; give a checkpoint, a run directory or a state_dict .pt")
    else:
        regular(p, flag)
        try:
            ck = torch.load(p, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
            raise CheckpointError(f"{flag}: {str(p)!r} is not a readable torch file ({first})") from None
        if isinstance(ck, dict) and ck.get("format") == FORMAT:
            ck = _load_as(p, flag)                       # validated as a checkpoint (version, required keys)
    if isinstance(ck, dict) and ck.get("format") == FORMAT:
        return {**ck["global"], **(ck.get("buffers") or {})}
    if not isinstance(ck, dict) or not ck or not all(isinstance(k, str) and torch.is_tensor(v) for k, v in ck.items()):
        raise CheckpointError(f"{flag}: {str(p)!r} is neither a fedlab_analysis checkpoint nor a state_dict "
                              f"(a dict of name -> tensor)")
    for k, v in ck.items():
        dense(v, f"{flag}: {str(p)!r}: {k!r}")
    return ck


WRAPPERS = ("state_dict", "model", "model_state_dict", "net")   # where other tools keep the state_dict in a dict


def state_dict_of(obj, where: str, strip_prefix: str | None = None) -> dict:
    """The name -> tensor dict held by a plain state_dict file's content ``obj``: the dict itself, or one under
    ``WRAPPERS`` (the first that holds one), with ``strip_prefix`` taken off every name that starts with it
    (``module.`` of DataParallel). One CheckpointError line when it holds none."""
    def plain(d):
        return isinstance(d, dict) and d and all(isinstance(k, str) and torch.is_tensor(v) for k, v in d.items())
    sd = obj if plain(obj) else next((obj[k] for k in WRAPPERS if isinstance(obj, dict) and plain(obj.get(k))), None)
    if sd is None:
        keys = f" (its keys: {', '.join(map(str, list(obj)[:6]))})" if isinstance(obj, dict) else ""
        raise CheckpointError(f"{where} holds no state_dict (a dict of name -> tensor, or one under "
                              f"{', '.join(WRAPPERS)}){keys}")
    if strip_prefix:
        sd = {k[len(strip_prefix):] if k.startswith(strip_prefix) else k: v for k, v in sd.items()}
    return dict(sd)


def misfit(sd: dict, want: dict, ignore=()) -> list[str]:
    """What keeps the state_dict ``sd`` from fitting a model whose tensors are ``want`` (name -> shape), names in
    ``ignore`` aside: "lacks a, b", "has unknown c", "has wrong shapes for d [2] (model: [3])", each naming the
    first three; empty when it fits. The one rule of ``fit_state`` (probes) and ``Run._start_from`` (--init)."""
    missing = [n for n in want if n not in sd]
    extra = [n for n in sd if n not in want and n not in ignore]
    wrong = [f"{n} {list(sd[n].shape) if torch.is_tensor(sd[n]) else type(sd[n]).__name__} (model: {list(want[n])})"
             for n in want if n in sd and (not torch.is_tensor(sd[n]) or tuple(sd[n].shape) != tuple(want[n]))]
    return [f"{how} {', '.join(names[:3])}{f' (+{len(names) - 3} more)' if len(names) > 3 else ''}"
            for how, names in (("lacks", missing), ("has unknown", extra), ("has wrong shapes for", wrong)) if names]


def fit_state(sd: dict, model, where: str, what: str) -> None:
    """Load the state_dict ``sd`` into ``model`` strictly: a missing, unexpected or mis-shaped tensor, a
    non-floating parameter or a non-finite value is one CheckpointError line naming the first few (``what``: the
    model as the user named it)."""
    want = {n: tuple(t.shape) for n, t in model.state_dict().items()}
    extra = [n for n in sd if n not in want]
    hint = ""
    heads = {n.split(".", 1)[0] + "." for n in extra if "." in n}
    if extra and len(heads) == 1 and all(n.startswith(next(iter(heads))) for n in extra):
        hint = f"; its names start with {next(iter(heads))!r}: try --strip-prefix {next(iter(heads))}"
    said = misfit(sd, want)
    if said:
        raise CheckpointError(f"{where}: the state_dict does not fit {what}: it {'; it '.join(said)}{hint}")
    params = {n for n, _ in model.named_parameters()}
    _tensors({n: sd[n] for n in params}, "state_dict", where, floating=True)
    _tensors({n: v for n, v in sd.items() if n not in params}, "state_dict", where)
    model.load_state_dict(sd, strict=True)


def regular(path: Path, what: str) -> None:
    """``path`` is a regular file: a FIFO, a socket or a device is refused unread (reading a FIFO would wait)."""
    if not path.is_file():
        raise CheckpointError(f"{what}: {str(path)!r} is not a regular file (a FIFO, socket or device); give a .pt "
                              f"file or a run directory")


def dense(v: torch.Tensor, where: str) -> None:
    """A tensor of values a model can hold: dense (strided), real, not quantized, not on the meta device."""
    what = ("on the meta device (it holds no values)" if v.is_meta else
            f"sparse or another non-dense layout ({v.layout})" if v.layout != torch.strided else
            "quantized" if v.is_quantized else "complex" if v.is_complex() else None)
    if what:
        raise CheckpointError(f"{where} is {what}; give dense real tensors (a state_dict saved from a model)")


def _load_as(p: Path, flag: str) -> dict:
    try:
        return load(p)
    except CheckpointError as e:
        raise CheckpointError(f"{flag}: {e}") from None


def run_dir(path: Path) -> None:
    """A run directory given for its checkpoint: a damaged config.json or metrics.jsonl is one line too."""
    from .config import check
    from .rundir import read_config, read_metrics
    try:
        if (path / "config.json").exists():
            check(read_config(path / "config.json", flag=str(path)), str(path / "config.json"))
        read_metrics(path / "metrics.jsonl")
    except CheckpointError:
        raise
    except UserError as e:
        raise CheckpointError(str(e)) from None


def _tensors(d, what: str, where: str, floating: bool = False, finite: bool = True) -> dict:
    if not isinstance(d, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in d.items()):
        raise CheckpointError(f"{where}: {what} is not a mapping of names to tensors")
    for k, v in d.items():
        dense(v, f"{where}: {what}[{k!r}]")
        if floating and not v.is_floating_point():
            raise CheckpointError(f"{where}: {what}[{k!r}] has dtype {v.dtype}, not a floating-point type")
        if finite and v.is_floating_point() and not torch.isfinite(v).all():
            raise CheckpointError(f"{where}: {what}[{k!r}] holds non-finite values (the run diverged); "
                                  f"use an earlier checkpoint (ckpt/round_XXXX.pt)")
    return d


def _same(got: dict, want: dict, what: str, where: str) -> None:
    if set(got) != set(want):
        odd = sorted(set(got) ^ set(want))[:3]
        raise CheckpointError(f"{where}: {what} names ({', '.join(odd)}, ...) do not match the model; it is "
                              f"damaged or from another model")
    for k, v in want.items():
        if tuple(got[k].shape) != tuple(v.shape):
            raise CheckpointError(f"{where}: {what}[{k!r}] has shape {list(got[k].shape)}, the model's is "
                                  f"{list(v.shape)}")


def verify(ckpt: dict, path, finite: bool = True) -> None:
    """Every field well-formed and the tensors those of the model the checkpoint names (names, shapes, floating
    dtypes, finite values unless ``finite=False``): a damaged or foreign checkpoint is one CheckpointError line, before
    any use."""
    from .config import check
    from .models import build_model
    from .params import ParamSpace

    where = repr(str(path))
    r = ckpt["round"]
    if isinstance(r, bool) or not isinstance(r, int) or r < 0:
        raise CheckpointError(f"{where}: round is {r!r}, not a round number")
    spec = ckpt["model"]
    try:
        check(ckpt["config"], f"{where}: config")
        if not isinstance(spec, dict) or not isinstance(spec.get("kwargs", {}), dict):
            raise UserError(f"{where}: model is not a model spec")
        model = build_model(spec.get("name"), spec.get("input_shape"), spec.get("n_classes"),
                            **spec.get("kwargs", {}))
    except UserError as e:
        raise CheckpointError(f"{e}" if str(e).startswith(where) else f"{where}: model spec: {e}") from None
    params = dict(model.named_parameters())
    _same(_tensors(ckpt["global"], "global", where, floating=True, finite=finite), params, "global", where)
    buffers = {n: b for n, b in model.named_buffers() if b.is_floating_point()}
    _same(_tensors(ckpt.get("buffers") or {}, "buffers", where, floating=True, finite=finite), buffers, "buffers",
          where)
    key = lambda l: (l.name, l.shape, l.offset, l.numel, l.block)          # noqa: E731  (group: FedALS' split)
    try:
        space = ParamSpace.from_table(ckpt["layers"])
    except (TypeError, KeyError, ValueError) as e:
        raise CheckpointError(f"{where}: the layer table is malformed ({type(e).__name__}: {e})") from None
    if [key(l) for l in space.layers] != [key(l) for l in ParamSpace.of_model(model).layers]:
        raise CheckpointError(f"{where}: the layer table does not describe the model {spec['name']!r}")
    _tensors(ckpt["algo_state"], "algo_state", where, finite=finite)
    cl = ckpt.get("clients")
    if cl is not None:
        m, rounds = (cl.get("models"), cl.get("rounds")) if isinstance(cl, dict) else (None, None)
        if not (isinstance(m, torch.Tensor) and m.dim() == 2 and m.shape[1] == space.P
                and isinstance(rounds, torch.Tensor) and tuple(rounds.shape) == (m.shape[0],)
                and len(cl.get("ids") or ()) == m.shape[0]):
            raise CheckpointError(f"{where}: clients is not an [m, {space.P}] table of models with m rounds and ids")
        _tensors({"models": m}, "clients", where, finite=finite)
    part = ckpt["partition"]
    ix = part.get("indices") if isinstance(part, dict) else None
    if not isinstance(ix, list) or not all(isinstance(i, torch.Tensor) and i.dim() == 1 and not i.is_floating_point()
                                           for i in ix):
        raise CheckpointError(f"{where}: partition.indices is not a list of index tensors")
    if not isinstance(ckpt.get("metrics", {}), dict):
        raise CheckpointError(f"{where}: metrics is not a mapping")
    consistent(ckpt, where)


CONFIG_KEYS = ("algo", "dataset", "model", "seed", "clients", "batch_size")   # what probes and resumes read


def consistent(ckpt: dict, where: str, n_train: int | None = None) -> None:
    """What probes and resumes use, in agreement: the config's keys, one partition entry per client, indices that
    are sample numbers (``< n_train`` when the data is known), a client table of the run's clients. One
    CheckpointError line naming the file (``where``) and the field."""
    cfg, r = ckpt["config"], ckpt["round"]
    missing = [k for k in CONFIG_KEYS if k not in cfg]
    if missing:
        raise CheckpointError(f"{where}: config lacks {', '.join(missing)}; the checkpoint is damaged, re-run training")
    n, ix = cfg["clients"], ckpt["partition"]["indices"]
    if len(ix) != n:
        raise CheckpointError(f"{where}: partition.indices has {len(ix)} entries for config.clients = {n}; "
                              f"the checkpoint is damaged")
    counts = ckpt["partition"].get("counts")
    if counts is not None and (not hasattr(counts, "__len__") or len(counts) != n):
        raise CheckpointError(f"{where}: partition.counts does not have one row per client ({n}); it is damaged")
    for i, t in enumerate(ix):
        if len(t) and (int(t.min()) < 0 or (n_train is not None and int(t.max()) >= n_train)):
            bad = int(t.min()) if int(t.min()) < 0 else int(t.max())
            within = f"0..{n_train - 1}, the training samples of {cfg['dataset']}" if n_train else "0, 1, ..."
            raise CheckpointError(f"{where}: partition.indices[{i}] holds {bad}, outside {within}; the checkpoint "
                                  f"is damaged or from other data")
    cl = ckpt.get("clients")
    if cl is not None:
        ids, rounds = cl["ids"], cl["rounds"]
        if not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c < n for c in ids) \
                or len(set(ids)) != len(ids):
            raise CheckpointError(f"{where}: clients.ids must be distinct client numbers 0..{n - 1} (got "
                                  f"{list(ids)[:8]})")
        if rounds.is_floating_point() or (len(rounds) and (int(rounds.min()) < -1 or int(rounds.max()) > r)):
            raise CheckpointError(f"{where}: clients.rounds must be whole rounds from -1 (never trained) to {r}")
