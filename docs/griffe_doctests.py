"""A griffe extension for the API page: a docstring's doctests (lines from the first `>>>` on) become an
"Examples:" section, so mkdocstrings renders them as code. Otherwise Markdown reads `>>>` as nested quotes and a
doctest's output `[5.0, 1.0]` as a broken cross-reference.

The docstrings stay as they are: a change to fedlab_analysis's source, even to a docstring, changes the source
hashes that key the figure caches (paper_figures.runs) and would retrain every cached run.
"""
from __future__ import annotations

import griffe


def as_examples(text: str) -> str:
    """``text`` with its doctest lines, from the first `>>>` to the end, indented under an "Examples:" header."""
    lines = text.split("\n")
    first = next((i for i, s in enumerate(lines) if s.startswith(">>>")), None)
    if first is None or any(s.strip() == "Examples:" for s in lines[:first]):
        return text
    head = lines[:first]
    if head and head[-1].strip():
        head.append("")
    return "\n".join([*head, "Examples:", *("    " + s if s.strip() else s for s in lines[first:])])


class DoctestsAsExamples(griffe.Extension):
    def on_instance(self, *, node, obj, agent, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = as_examples(obj.docstring.value)
