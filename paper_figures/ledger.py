"""The run ledger: a finished run's record kept in git, so a fresh machine need not train it again.

The run cache (:mod:`paper_figures.runs`) is git-ignored: ``<out>/runs/<tier>/``.
A session may end on one machine and the next start on a new one, with no cache.
The real tiers take longer than a session, so their finished runs must outlive the machine.

The ledger keeps one file per done run: ``<out>/ledger/<tier>/<entry>.json.gz``.
It holds the run's key.json, done.json, run/config.json and run/metrics.jsonl (about 40 KB a run).
It keeps no checkpoint (a real tier's run leaves 80 MB of them), only the rounds of its matched-fit ones.
What a script measured on those checkpoints is kept beside it (:mod:`paper_figures.probed`).
It also keeps the cache's fingerprint memo, so a run trained by older code stays usable when its numbers match.
``python -m paper_figures.ledger --tier mnist`` records every done run of a cache (one trained before the ledger).

:func:`keep` writes a record once a run is done (``runs.ensure_pack`` calls it).
:func:`restore` rebuilds a missing entry from its record (``runs.tasks`` calls it).
A restored entry is light: its done.json says ``"light": true`` and it has no checkpoints.
It serves every script that reads metrics rows.
A script that reads weights (``WEIGHTS = True``) uses what :mod:`paper_figures.probed` kept, or trains it again.

Only the tiers in :data:`TIERS` and only the tier's own cache keep a ledger: quick runs take seconds.
"""
from __future__ import annotations

import gzip
import io
import json
import os
import sys
from pathlib import Path

from fedlab_analysis.cli import guard
from paper_figures import tiers
from paper_figures.entry import MATCHED, matched_rounds  # noqa: F401  (the record keeps them)

TIERS = ("mnist", "fmnist", "full")
FILES = ("key.json", "done.json", "run/config.json", "run/metrics.jsonl")


def folder(tier: str) -> Path:
    """``<out>/ledger/<tier>``."""
    return Path(tiers._ARGS["out"]) / "ledger" / tier


def _record_path(entry: Path) -> Path:
    return folder(entry.parent.name) / f"{entry.name}.json.gz"


def _kept(entry: Path) -> bool:
    """Whether ``entry`` is in its tier's own cache (``<out>/runs/<tier>/``) of a tier that keeps a ledger."""
    return entry.parent.name in TIERS and entry.parent.parent == Path(tiers._ARGS["out"]) / "runs"


def keep(entry) -> Path | None:
    """Write the record of the done run at ``entry`` (deterministic bytes), and the cache's fingerprint memo beside
    it. A record is written when it differs from the run's files (a new run; one trained again; one recorded before
    the matched-fit rounds were kept); a light entry writes nothing. Returns the record's path, or None where no
    ledger is kept."""
    from paper_figures import fingerprint
    entry = Path(entry)
    if not _kept(entry) or not (entry / "done.json").exists():
        return None
    path = _record_path(entry)
    if light(entry):
        return path
    rec = {f: (entry / f).read_text() for f in FILES}
    rounds = matched_rounds(entry)
    if rounds:
        rec[MATCHED] = json.dumps(rounds, sort_keys=True)
    if not path.exists() or read(path) != rec:
        buf = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as z:
            z.write(json.dumps(rec, sort_keys=True).encode())
        _atomic(path, buf.getvalue())
    if (entry.parent / fingerprint.MEMO).exists():
        fingerprint.merge(path.parent, fingerprint.read_memo(entry.parent))
    return path


def restore(entry) -> bool:
    """Rebuild the missing entry ``entry`` from its record, marked light. True if it did."""
    from paper_figures import fingerprint
    entry = Path(entry)
    path = _record_path(entry) if _kept(entry) else None
    if path is None or entry.exists() or not path.exists():
        return False
    rec = read(path)
    rec["done.json"] = json.dumps({**json.loads(rec["done.json"]), "light": True}, indent=1) + "\n"
    for f in sorted(rec, key=lambda f: f == "done.json"):       # done.json last: a cut-off restore is not done
        _atomic(entry / f, rec[f].encode())
    if (path.parent / fingerprint.MEMO).exists():
        fingerprint.merge(entry.parent, fingerprint.read_memo(path.parent))
    return True


def light(entry) -> bool:
    """Whether the entry was restored from the ledger (no checkpoints)."""
    try:
        return bool(json.loads((Path(entry) / "done.json").read_text()).get("light"))
    except (OSError, ValueError, AttributeError):
        return False


def read(path: Path) -> dict:
    """The files of the run recorded at ``path``, by name."""
    return json.loads(gzip.decompress(path.read_bytes()))


def _atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def keep_all(tier: str) -> list[Path]:
    """:func:`keep` for every done entry of the tier's cache (a cache trained before the ledger, or by old code)."""
    runs = Path(tiers._ARGS["out"]) / "runs" / tier
    return [p for e in sorted(runs.glob("*/done.json")) if (p := keep(e.parent))]


@guard("paper_figures.ledger")
def main(argv=None) -> int:
    from fedlab_analysis.options import ArgParser
    ap = ArgParser(prog="python -m paper_figures.ledger", description=__doc__.split("\n\n")[0])
    ap.add_argument("--tier", required=True, choices=TIERS, help="whose done runs to record")
    ap.add_argument("--out", default=os.environ.get("PAPER_FIGURES_OUT") or str(tiers.OUT),
                    help=f"output root (default $PAPER_FIGURES_OUT, else {tiers.OUT})")
    args = ap.parse_args(argv)
    tiers._ARGS["out"] = Path(args.out)
    kept = keep_all(args.tier)
    print(f"{len(kept)} done runs of the {args.tier} tier recorded in {folder(args.tier)} "
          f"({sum(p.stat().st_size for p in kept) / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
