"""Every claim's quote occurs in its paper's text (whitespace, ligatures, unicode dashes and line-break hyphens
normalised), the text being the shared papers folder beside the repository (or /work/shared/papers); skipped
where that folder is absent."""
import re
import unicodedata
from pathlib import Path

import pytest

from paper_figures.claims import CLAIMS, TEXT

ROOT = Path(__file__).resolve().parents[1]
DIRS = [ROOT.parent / "shared" / "papers", Path("/work/shared/papers")]
PAPERS = next((d for d in DIRS if d.is_dir() and any(d.glob("000_*.txt"))), None)


def normalise(s: str) -> str:
    s = unicodedata.normalize("NFKC", s)
    s = re.sub(r"[\u2010-\u2015\u2212]", "-", s)             # unicode hyphens and dashes
    s = re.sub(r"[\u2018\u2019]", "'", s)
    s = re.sub(r"[\u201c\u201d]", '"', s)
    s = re.sub(r"(\w)-\s*\n\s*(\w)", r"\1\2", s)            # a word hyphenated at a line break
    return re.sub(r"\s+", " ", s).strip()


def text(paper: str) -> str:
    return normalise(next(PAPERS.glob(f"{TEXT[paper]}_*.txt")).read_text(encoding="utf-8"))


def occurs(quote: str, paper: str) -> bool:
    return normalise(quote) in text(paper)


@pytest.mark.skipif(PAPERS is None, reason="the papers' text (shared/papers) is not beside this checkout")
@pytest.mark.parametrize("cid", sorted(CLAIMS))
def test_quote_occurs_in_its_paper(cid):
    c = CLAIMS[cid]
    assert len(c.quote) >= 10, cid
    assert occurs(c.quote, c.paper), f"{cid}: {c.quote!r} not in {c.paper}'s text"


@pytest.mark.skipif(PAPERS is None, reason="the papers' text (shared/papers) is not beside this checkout")
def test_an_altered_quote_is_caught():
    c = CLAIMS["fedlesam.fig2.fedsam_not_flat"]
    assert occurs(c.quote, c.paper)
    assert not occurs(c.quote.replace("could not", "could"), c.paper)
    assert not occurs(c.quote, "fedsmoo")                      # the right words in the wrong paper


def test_normalise_joins_hyphenation_and_dashes():
    assert normalise("consid-\n  ered  as \u2013 x\ufb01") == "considered as - xfi"
