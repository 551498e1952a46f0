"""benchmarks/RESULTS.md, one section per measurement: a script replaces its own section (a heading and what follows
it up to the next ``## ``), or appends it the first time."""
from __future__ import annotations

import re
from pathlib import Path

PATH = Path(__file__).resolve().parent / "RESULTS.md"


def write_section(title: str, body: str, path: Path = PATH) -> Path:
    """Put ``title`` (a ``## `` heading) and ``body`` into ``path`` in place of that section, or at its end."""
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    block = f"{title}\n\n{body.strip()}\n"
    pat = re.compile(rf"^{re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    text = pat.sub(lambda _: block + "\n", text) if pat.search(text) else text.rstrip("\n") + "\n\n" + block
    path.write_text(text)
    print(f"-> {path}")
    return path
