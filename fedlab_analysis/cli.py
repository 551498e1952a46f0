"""The one guard every command-line entry point runs under, and the output checks made before any work.

``@guard("train")`` on a ``main(argv) -> int``:
  * bad input that reaches the guard (a UserError, an OSError, a file that does not decode, a validation
    ValueError of a library) is one line ``error: ...`` on stderr and exit 2;
  * anything unforeseen is one line naming the command and asking for a report, exit 1; ``--debug`` (taken out
    of argv by the guard, so every command accepts it) prints the traceback instead;
  * library warnings raised while the command refuses its input are dropped; on any other outcome they are
    shown, once the command is done.
The commands check their outputs before they start work (``out_dir``, ``out_file``, ``plot_file``), so a
refusal leaves nothing written.
"""
from __future__ import annotations

import functools
import json
import os
import re
import sys
import traceback
import warnings
from pathlib import Path

from .errors import UserError

DEBUG = "--debug"
DEBUG_HELP = "on an unexpected error, print the traceback (to attach to a report)"


def _one_line(text: str, limit: int = 300) -> str:
    return " ".join(str(text).split())[:limit]


def refusal(e: BaseException) -> str | None:
    """The one-line message of an exception that is bad input, or None for a defect of fedlab_analysis."""
    if isinstance(e, UserError):
        return str(e)
    if isinstance(e, OSError):
        where = e.filename if e.filename is not None else ""
        what = e.strerror or type(e).__name__
        return f"{where}: {what}" if where else f"{what} ({_one_line(e)})"
    if isinstance(e, UnicodeError):
        return f"a file is not text in UTF-8 ({_one_line(e)})"
    if isinstance(e, json.JSONDecodeError):
        return f"a file is not valid JSON ({e.msg}, line {e.lineno})"
    try:
        import yaml
        if isinstance(e, yaml.YAMLError):
            return f"a file is not valid YAML ({_one_line(e)})"
    except ImportError:
        pass
    return None


def guard(command: str):
    """Decorator for an entry point's ``main(argv=None) -> int`` (module docstring)."""
    def wrap(main):
        @functools.wraps(main)
        def run(argv=None) -> int:
            argv = list(sys.argv[1:] if argv is None else argv)
            debug = DEBUG in argv
            argv = [a for a in argv if a != DEBUG]
            with warnings.catch_warnings(record=True) as caught:
                try:
                    code = main(argv)
                except (SystemExit, KeyboardInterrupt):
                    raise
                except Exception as e:                     # noqa: BLE001  (the guard: every exception is one line)
                    msg = refusal(e)
                    if msg is not None:
                        print(f"error: {_one_line(msg, 1000)}", file=sys.stderr)
                        return 2
                    if debug:
                        traceback.print_exc(file=sys.stderr)
                    else:
                        print(f"error: {command} stopped on an unexpected {type(e).__name__} "
                              f"({_one_line(e, 200)}); this is a defect of fedlab_analysis, please report it "
                              f"(run again with {DEBUG} for the traceback)", file=sys.stderr)
                    return 1
            if code != 2:                                   # a refusal stays one line
                for w in caught:
                    warnings.showwarning(w.message, w.category, w.filename, w.lineno)
            return code
        return run
    return wrap


# ---- outputs, checked before any work ------------------------------------------------------------------------
def _nonempty(path, flag: str) -> str:
    if path is None or not str(path).strip():
        raise UserError(f"{flag}: an empty path; give a name")
    return str(path)


def out_dir(path, flag: str = "--out") -> Path:
    """``path`` is (or can become) a folder: neither it nor a parent is a file, and the nearest existing one
    accepts writes."""
    from .rundir import check_dir, writable
    p = check_dir(_nonempty(path, flag), flag)
    q = next(q for q in (p.absolute(), *p.absolute().parents) if q.exists())
    writable(q, flag, path)
    return p


def out_file(path, flag: str) -> Path:
    """``path`` can be written as a file (its folder exists and accepts writes; it is not a folder)."""
    from .rundir import check_file
    return check_file(_nonempty(path, flag), flag)


def plot_formats() -> tuple[str, ...]:
    from matplotlib.backend_bases import FigureCanvasBase
    return tuple(sorted(FigureCanvasBase.get_supported_filetypes()))


def plot_backend() -> None:
    """matplotlib can start its backend: a bogus ``MPLBACKEND`` is one line before any work."""
    try:
        from matplotlib.rcsetup import validate_backend
        if os.environ.get("MPLBACKEND"):            # read by matplotlib once: checked here each time
            validate_backend(os.environ["MPLBACKEND"])
        import matplotlib.pyplot  # noqa: F401
    except (ValueError, ImportError) as e:
        raise UserError(f"MPLBACKEND={os.environ.get('MPLBACKEND', '')!r}: matplotlib cannot use it "
                        f"({_one_line(e, 100)}); unset MPLBACKEND or set MPLBACKEND=Agg") from None


def plot_file(path, flag: str = "--plot") -> Path:
    """``out_file`` whose extension is a format matplotlib writes, with a backend matplotlib can start."""
    p = out_file(path, flag)
    plot_backend()
    ext = p.suffix[1:].lower()
    if ext not in plot_formats():
        raise UserError(f"{flag} {path}: matplotlib cannot write {'.' + ext if ext else 'a file without an extension'}"
                        f"; end the name with one of {', '.join('.' + f for f in plot_formats())}")
    return p


def read_json(path, flag: str, what: str = "JSON", fix: str = "") -> dict:
    """A JSON file holding a mapping, or one UserError line naming ``flag``, the file and ``fix``."""
    try:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{flag}: {path} does not exist{'; ' + fix if fix else ''}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{flag}: {path} is damaged ({_one_line(e, 120)}){'; ' + fix if fix else ''}") from None
    if not isinstance(d, dict):
        raise UserError(f"{flag}: {path} does not hold {what}{'; ' + fix if fix else ''}")
    return d


# ---- values the probes share -----------------------------------------------------------------------------
def layer_spec(spec: str | None, flag: str = "--layer") -> str | None:
    """A layer selection (``params.ParamSpace.select``) that can be read: a valid ``re:`` pattern, a whole
    ``block:`` number."""
    if spec is None:
        return None
    if not spec.strip():
        raise UserError(f"{flag}: an empty selection; give a name, a glob, group:NAME, block:N or re:PATTERN")
    if spec.startswith("re:"):
        try:
            re.compile(spec[3:])
        except re.error as e:
            raise UserError(f"{flag} {spec!r}: not a regular expression ({e})") from None
    if spec.startswith("block:") and not spec[6:].isdigit():
        raise UserError(f"{flag} {spec!r}: block:N takes a whole number >= 0")
    return spec


def data_spec(data: str | None, flag: str = "--data") -> str | None:
    """train | test | client:I with I a whole number >= 0 (the client's range is checked against the run)."""
    if data is None or data in ("train", "test"):
        return data
    if data.startswith("client:") and data[7:].isdigit():
        return data
    raise UserError(f"{flag}: {data!r} is not train, test or client:I (I = 0, 1, ... a client of the run)")
