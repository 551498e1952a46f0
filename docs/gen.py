"""Regenerate the handbook's generated parts from the code: `python -m docs.gen` (`--check`: exit 1 if stale).

- docs/probes.md: between `<!-- gen:probe NAME -->` and `<!-- /gen -->`, each probe's cost line, its output
  fields (the `Returns:` of its `compute` docstring) and its `--help`, as
  `python -m fedlab_analysis.probe NAME --help` prints it at COLUMNS=100.
- docs/api.md: one `:::` reference per public name of `fedlab_analysis.GROUPS`, group by group.

tests/test_docs.py fails when either page differs from what this script writes now.
"""
from __future__ import annotations

import contextlib
import inspect
import io
import os
import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
WIDTH = "100"                           # argparse wraps --help at $COLUMNS: fixed, so the text is the same anywhere
GEN = re.compile(r"(<!-- gen:probe (?P<name>[\w-]+) -->\n)(.*?)(<!-- /gen -->)", re.S)


def probe_help(name: str) -> str:
    """`python -m fedlab_analysis.probe NAME --help`, as printed at COLUMNS=100."""
    from fedlab_analysis import probe
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            probe.main([name, "--help"])
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    return out.getvalue().rstrip()


def returns(fn) -> str:
    """The `Returns:` paragraph of a Google-style docstring, on one line."""
    doc = inspect.getdoc(fn) or ""
    m = re.search(r"^Returns:\n((?:    .*\n?)+)", doc, re.M)
    return " ".join(m.group(1).split()) if m else "see the JSON (`--json -`)"


def probe_block(name: str) -> str:
    from fedlab_analysis.probes import PROBES
    mod = PROBES[name]
    cost = re.sub(r"^cost: ", "", mod.COST)
    return (f"**Cost.** {cost[0].upper()}{cost[1:]}\n\n"
            f"**Output fields.** {returns(mod.compute)}\n\n"
            f"`python -m fedlab_analysis.probe {name} --help`:\n\n```text\n{probe_help(name)}\n```\n")


def render_probes(text: str) -> str:
    return GEN.sub(lambda m: m.group(1) + probe_block(m["name"]) + m.group(4), text)


# the probes that take a plain nn.Module are made by one factory (probes/plain.py): the reference is its module
PLAIN_MODULE = "probes.plain"
API_HEAD = """# API reference

Generated from the docstrings by mkdocstrings.
The names are those of `import fedlab_analysis as fl`, grouped as `fedlab_analysis.GROUPS` lists them.
Each is imported on first use, so `import fedlab_analysis` loads neither torch nor matplotlib.
`python -m docs.gen` rewrites this page from `GROUPS`; a test fails when it is stale.
"""


def render_api() -> str:
    from fedlab_analysis import GROUPS
    parts = [API_HEAD]
    for group, names in GROUPS.items():
        parts.append(f"## {group}\n")
        rows = [f"| `fl.{n}` | `fedlab_analysis.{mod}.{attr}` |" for n, (mod, attr) in names.items()]
        parts.append("| public name | defined as |\n|---|---|\n" + "\n".join(rows) + "\n")
        seen = []
        for mod, attr in names.values():
            target = f"fedlab_analysis.{mod}" if mod == PLAIN_MODULE else f"fedlab_analysis.{mod}.{attr}"
            if target not in seen:
                seen.append(target)
        parts += [f"::: {t}\n" for t in seen]
    return "\n".join(parts)


def main(argv=None) -> int:
    check = "--check" in (argv if argv is not None else sys.argv[1:])
    stale = []
    for path, new in ((DOCS / "probes.md", lambda t: render_probes(t)), (DOCS / "api.md", lambda t: render_api())):
        old = path.read_text() if path.exists() else ""
        text = new(old)
        if text != old:
            stale.append(path.relative_to(ROOT).as_posix())
            if not check:
                path.write_text(text)
    if check and stale:
        print("stale: " + ", ".join(stale) + " (run python -m docs.gen)", file=sys.stderr)
        return 1
    print(("rewrote: " if stale else "up to date: ") + ", ".join(stale or ["docs/probes.md", "docs/api.md"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
