"""A behavioural fingerprint of the training code, so that the run cache keeps a run when the code changed but the
numbers it would produce did not.

:func:`training_fingerprint` trains a fixed battery through the shipped trainer (``trainers.loop.train``) in float64 on
a tiny problem (300 digits, MLP 64-12-10-10, 7 clients; one case on all the digits, loaded by name): every algorithm of
``algos.NAMES`` and the relaxed-initialisation variants, over the paths the tiers use (vmap clients and one loop run,
Bernoulli and fixed sampling, the equal-size Dirichlet rule and the label-Dirichlet one with unequal client sizes, hence
unequal local step counts, short last batches, weight decay, lr decay, clipping, local momentum, a held-out split,
evaluation, a killed-and-resumed run), 3 rounds each; the MNIST data with FedInit's noise too. It hashes each run's
metrics rows (``seconds`` aside) and, per parameter tensor, the sum, the sum of squares and a fixed random projection of
the final global weights, every number rounded to 9 significant digits, with the data fingerprint
(:func:`data_fingerprint`) and ``torch.__version__``. The hash of FedInit's noisy data stands apart, after
:data:`NOISE`: a run without the noise is kept when the rest agrees (:func:`same`).

Why 9 digits of a few summaries: a behaviour-preserving change that only reorders float64 arithmetic moves a number
by about 1e-16 to 1e-15 of itself (loop vs vmap clients: 3e-16 measured), so it crosses a 9-digit rounding boundary
with a chance of about 1e-6 per number, about 1e-3 for the battery's ~960 numbers (a spurious mismatch only
retrains, it never keeps a wrong run), where rounding each of its ~24,000 weights would give about 2%; a real
change, even a 1e-7 change of the learning rate, moves them by far more.

The memo ``<runs root>/fingerprints.json`` = {training_source_hash: fingerprint, "hooks:<tag>:<hooks_source_hash>":
hooks fingerprint} (:func:`recorded`, :func:`recorded_hooks`; the hooks' battery is
:mod:`paper_figures.hooks_fingerprint`) lets ``runs.status`` compare a cached run's sources with the current ones; a
memo of training entries alone reads as before. Only the current code can be fingerprinted, so record a source's
fingerprints while it is checked out: ``python -m paper_figures.fingerprint --tier mnist`` (the training code's and
the hooks' of every tag the cache's runs carry).
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

from fedlab_analysis.cli import guard
from paper_figures.digest import BASE, DIGITS, OWN, _digest, _num, _rounded, _summary  # noqa: F401

MEMO = "fingerprints.json"
NOISE = "+noise:"                         # a training fingerprint: "<core>+noise:<FedInit's noisy data>"
HOOKS_PREFIX = "hooks:"                   # memo keys of hooks fingerprints; a training source hash is 12 hex digits
# further cases: name -> (algo, overrides); "resume" trains 2 rounds, then resumes from last.pt to 3
VARIANTS = {"fedinit-delta-from-init-beta-neg0.1": ("fedinit", dict(beta=-0.1, ri_agg="delta_from_init")),
            "feddyn-ri": ("feddyn", dict(ri=True)),
            "fedavg-loop": ("fedavg", dict(client_parallel="loop")),
            "fedavg-dirichlet-equal": ("fedavg", dict(partition="dirichlet", clients=10, local_epochs=2)),
            # the data set by name, as the tiers load theirs, and an evaluation longer than one 1,000-sample chunk
            "fedavg-digits-by-name": ("fedavg", dict(dataset="digits", partition="dirichlet", dir_alpha=0.3,
                                                     clients=20, active_ratio=0.3, eval_train_samples=1200)),
            "scaffold-fixed-resume": ("scaffold", dict(sampling="fixed", ckpt_every=1)),
            "fedsmoo-resume": ("fedsmoo", dict(ckpt_every=1)),
            # the real tiers' local paths: clipping (active at norm 1), local momentum (the FedDyn family's decay
            # terms in its buffer; FedALS's synchronisation) and the held-out split
            "feddyn-clip-momentum-holdout": ("feddyn", dict(clip=1.0, local_momentum=0.9, holdout=30)),
            "fedals-momentum-holdout": ("fedals", dict(local_momentum=0.9, holdout=30)),
            "fedsam-clip": ("fedsam", dict(clip=1.0))}
MNIST_PARTITIONS = {"dirichlet-0.6": dict(alpha=0.6), "dirichlet-0.1": dict(alpha=0.1)}   # 100 clients, seed 0
DIGITS_PARTITION = dict(alpha=0.3)                                                         # 20 clients, seed 0


def cases(algos=None) -> dict:
    """The battery: case name -> (algo, config overrides); ``algos`` keeps the cases of those algorithms."""
    from fedlab_analysis import algos as A
    out = {a: (a, OWN.get(a, {})) for a in A.NAMES}
    out.update({n: (a, {**OWN.get(a, {}), **o}) for n, (a, o) in VARIANTS.items()})
    if algos is not None:
        unknown = sorted(set(algos) - set(A.NAMES))
        if unknown:
            raise ValueError(f"training_fingerprint: unknown algorithm(s) {', '.join(unknown)}")
        out = {n: c for n, c in out.items() if c[0] in algos}
    return out


def _weights(run) -> dict:
    """:func:`_summary` of the run's global weights."""
    return _summary(run.space.unflatten(run.w))


def _dataset():
    """The battery's data: the first 300 training and 100 test digits of the embedded loader."""
    from fedlab_analysis.data import Dataset, load_dataset
    ds = load_dataset("digits")
    return Dataset.from_tensors(ds.x_train[:300], ds.y_train[:300], ds.x_test[:100], ds.y_test[:100],
                                name="digits300", n_classes=ds.n_classes)


def run_case(algo: str, overrides: dict, dataset, work: Path) -> str:
    """Train one case in ``work`` (on ``dataset``, unless the case names its data set) and return its digest (rows and
    weights, 9 significant digits)."""
    from fedlab_analysis.config import RunConfig
    from fedlab_analysis.plots import read_metrics
    from fedlab_analysis.trainers.loop import train
    cfg = RunConfig(**{**BASE, **overrides, "algo": algo}).validate()
    if "dataset" in overrides:                      # loaded by name inside the trainer
        dataset = None
    if cfg.ckpt_every:                              # a run killed after round 2 and resumed from its last.pt
        import dataclasses
        train(dataclasses.replace(cfg, rounds=cfg.rounds - 1), work, dataset=dataset)
        run = train(cfg, work, resume=True, dataset=dataset)
    else:
        run = train(cfg, work, dataset=dataset)
    rows = [{k: v for k, v in r.items() if k != "seconds"} for r in read_metrics(work)]
    return _digest({"rows": _rounded(rows), "weights": _rounded(_weights(run))})


def _arrays_hash(*arrays) -> list:
    import numpy as np
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a.numpy() if hasattr(a, "numpy") else a)
        h.update(f"{a.dtype}{list(a.shape)}".encode())
        h.update(a.tobytes())
    return [[str(a.dtype), list(a.shape)] for a in arrays] + [h.hexdigest()]


def _partition_hash(labels, n_clients: int, n_classes: int, **kw) -> str:
    import numpy as np

    from fedlab_analysis.data import partition
    p = partition("dirichlet", labels, n_clients, n_classes, 0, **kw)
    return _arrays_hash(np.asarray(p.sizes), np.concatenate(p.indices))[-1]


def data_fingerprint(mnist: bool = True) -> dict:
    """The loaders' outputs (dtype, shape and a hash of each array) and their Dirichlet partitions at seed 0: the
    digits (20 clients, 0.3) and, where the ``make data`` file is present, MNIST (100 clients, 0.6 and 0.1);
    "absent" otherwise (and with ``mnist=False``)."""
    from fedlab_analysis.data import load_dataset
    from fedlab_analysis.errors import DataError
    out = {}
    ds = load_dataset("digits")
    out["digits"] = {"arrays": _arrays_hash(ds.x_train, ds.y_train, ds.x_test, ds.y_test), "n_classes": ds.n_classes,
                     "partition": _partition_hash(ds.y_train.numpy(), 20, ds.n_classes, **DIGITS_PARTITION)}
    out["mnist"] = "absent"
    if mnist:
        try:
            ds = load_dataset("mnist")
        except DataError:
            return out
        from fedlab_analysis.data import heterogeneity_noise, partition
        from fedlab_analysis.trainers.rng import generator
        part = partition("dirichlet", ds.y_train.numpy(), 100, ds.n_classes, 0, alpha=0.1)
        noisy = heterogeneity_noise(ds, part.indices, 0.2, generator(0, purpose="noise"))   # FedInit's runs' data
        out["mnist"] = {"arrays": _arrays_hash(ds.x_train, ds.y_train, ds.x_test, ds.y_test),
                        "n_classes": ds.n_classes, "het_noise": _arrays_hash(noisy.x_train),
                        **{k: _partition_hash(ds.y_train.numpy(), 100, ds.n_classes, **kw)
                           for k, kw in MNIST_PARTITIONS.items()}}
    return out


def training_fingerprint(algos=None, mnist: bool = True, progress: bool = False, parts: dict | None = None) -> str:
    """A 16-hex-digit hash of what the training code does (module docstring): the battery (``algos``: only the
    cases of these algorithms), the data fingerprint (``mnist=False``: MNIST counted "absent") and torch's
    version. ``parts``, if given, receives the per-case digests and the data fingerprint."""
    import torch
    from tqdm import tqdm
    todo = cases(algos)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    got = {}
    try:
        ds = _dataset()
        with tempfile.TemporaryDirectory(prefix="fingerprint-") as tmp:
            bar = tqdm(todo.items(), desc="fingerprint", unit="run", file=sys.stderr,
                       disable=not (progress and sys.stderr.isatty()))
            for name, (algo, over) in bar:
                got[name] = run_case(algo, over, ds, Path(tmp) / name)
        data = data_fingerprint(mnist)
    finally:
        torch.set_num_threads(threads)
    if parts is not None:
        parts.update(cases=got, data=data)
    noise = data["mnist"].get("het_noise", "absent") if isinstance(data["mnist"], dict) else "absent"
    core = {**data, "mnist": {k: v for k, v in data["mnist"].items() if k != "het_noise"}} \
        if isinstance(data["mnist"], dict) else data
    return (_digest({"torch": torch.__version__, "cases": got, "data": core})[:16]
            + NOISE + _digest({"het_noise": noise})[:8])


def same(was: str, now: str, noise: bool) -> bool:
    """Whether two fingerprints of the training code say one behaviour for a run with (``noise``) or without
    FedInit's noise: a run without it compares the core alone, since the noise's form never reaches it (a change of
    ``data/noise.py`` keeps every other run). A fingerprint recorded before the split compares whole."""
    (a, split_a, x), (b, split_b, y) = was.partition(NOISE), now.partition(NOISE)
    if not (split_a and split_b):
        return was == now
    return a == b and (x == y or not noise)


# ---- the memo beside the run cache -------------------------------------------------------------------------
def read_memo(root) -> dict:
    """``<root>/fingerprints.json`` ({} if absent); ValueError if it is not such a mapping."""
    p = Path(root) / MEMO
    if not p.exists():
        return {}
    try:
        memo = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{p}: unreadable ({e})") from None
    if not isinstance(memo, dict) or not all(isinstance(v, str) for v in memo.values()):
        raise ValueError(f"{p}: not a mapping of source hash to fingerprint")
    return memo


def record(root, source: str, fp: str) -> None:
    """Add {source: fp} to the memo (:func:`merge`)."""
    merge(root, {source: fp})


def merge(root, entries: dict) -> None:
    """Add ``entries`` to the memo (read again just before, written to a temp file and renamed; not written when
    it already holds them, so a committed memo is not touched)."""
    p = Path(root) / MEMO
    old = read_memo(root)
    if {**old, **entries} == old and p.exists():
        return
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f"{MEMO}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({**old, **entries}, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, p)


def recorded(root, source: str | None = None, progress: bool = False) -> str:
    """The fingerprint of the current code, from the memo under ``source`` (default: the current
    ``runs.training_source_hash()``), else computed once and recorded there."""
    from paper_figures import entry
    source = source or entry.training_source_hash()
    fp = read_memo(root).get(source)
    if fp is None:
        fp = training_fingerprint(progress=progress)
        record(root, source, fp)
    return fp


def hooks_key(tag: str, hooks_source: str) -> str:
    """The memo key of the hooks fingerprint of ``tag`` at ``runs.hooks_source_hash(tag) == hooks_source``."""
    return f"{HOOKS_PREFIX}{tag}:{hooks_source}"


def recorded_hooks(root, tag: str, hooks_source: str | None = None, progress: bool = False) -> str:
    """The hooks fingerprint of ``tag`` for the current code, from the memo under :func:`hooks_key` (default source:
    the current ``runs.hooks_source_hash(tag)``), else computed once and recorded there."""
    from paper_figures import entry, hooks_fingerprint
    key = hooks_key(tag, hooks_source or entry.hooks_source_hash(tag))
    fp = read_memo(root).get(key)
    if fp is None:
        fp = hooks_fingerprint.hooks_fingerprint(tag, progress=progress)
        record(root, key, fp)
    return fp


def cached_tags(root) -> list:
    """The registered hooks tags that runs in the cache at ``root`` carry (their key.json files), sorted."""
    from paper_figures import entry
    tags = set()
    for p in Path(root).glob("*/key.json"):
        try:
            tags.add(json.loads(p.read_text()).get("tag") or "")
        except (OSError, ValueError, AttributeError):
            continue
    return sorted(t for t in tags if t in entry.HOOKS)


@guard("paper_figures.fingerprint")
def main(argv=None) -> int:
    from fedlab_analysis.options import ArgParser
    from paper_figures import entry, tiers
    ap = ArgParser(prog="python -m paper_figures.fingerprint", description=__doc__.split("\n\n")[0])
    ap.add_argument("--tier", default="quick", choices=("quick", "mnist", "fmnist"),
                    help="whose run cache records it "
                    "(<out>/runs/<tier>/fingerprints.json; default quick)")
    ap.add_argument("--out", default=os.environ.get("PAPER_FIGURES_OUT") or str(tiers.OUT),
                    help=f"output root (default $PAPER_FIGURES_OUT, else {tiers.OUT})")
    args = ap.parse_args(argv)
    tiers._ARGS["out"] = Path(args.out)
    root = Path(args.out) / "runs" / args.tier          # runs.root's folder (the cache sits above this module)
    source = entry.training_source_hash()
    try:
        fp = recorded(root, source, progress=True)
        hooks = {t: (entry.hooks_source_hash(t), recorded_hooks(root, t, progress=True)) for t in cached_tags(root)}
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"source {source} fingerprint {fp} ({root / MEMO})")
    for t, (h, hfp) in hooks.items():
        print(f"hooks {t} source {h} fingerprint {hfp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
