"""The handbook (docs/, mkdocs.yml) and the README front page.

- The handbook builds with `mkdocs build --strict`, offline, into a temporary folder. A broken link, a missing
  anchor or a misspelt `:::` reference fails the build; each is shown failing on a copy of docs/.
- Its generated parts (each probe's --help, cost and output fields; the API page) are what docs/gen.py writes now.
- Every command shown in a bash block of the handbook or the README names flags that its `--help` lists; the
  `train` and `sweep` commands that start a new run also pass their checks with `--dry-run` (nothing written).
- README.md stays under 250 lines and every relative link in it resolves, anchors included.
"""
import contextlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
README = ROOT / "README.md"


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    """`mkdocs build --strict` of ``root``/mkdocs.yml into ``site``, in a fresh process. Not ``-q``: mkdocs counts
    the warnings that strict mode turns into a failure only at the levels it logs."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml"),
                           "-d", str(site)], capture_output=True, text=True, env=env, cwd=root, timeout=300)


def test_the_handbook_builds_strictly(tmp_path):
    p = build(ROOT, tmp_path / "site")
    assert p.returncode == 0, p.stdout + p.stderr
    assert (tmp_path / "site" / "api" / "index.html").read_text().count("doc-object") > 20   # the references rendered


def broken_copy(tmp_path: Path, page: str, old: str | None, new: str) -> Path:
    """A copy of the handbook with ``old`` in docs/``page`` replaced by ``new`` (appended when ``old`` is None)."""
    root = tmp_path / "repo"
    shutil.copytree(DOCS, root / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "mkdocs.yml", root / "mkdocs.yml")
    (root / "fedlab_analysis").symlink_to(ROOT / "fedlab_analysis")       # what the ::: references read
    path = root / "docs" / page
    text = path.read_text()
    assert old is None or old in text
    path.write_text(text + new if old is None else text.replace(old, new, 1))
    return root


@pytest.mark.parametrize("page, old, new, needle", [
    ("index.md", None, "\nSee [the plan](gpu-plan.md).\n", "gpu-plan.md"),                             # no such page
    ("index.md", None, "\nSee [the plan](gpu.md#memory-and-disc-plan).\n", "memory-and-disc-plan"),    # no such anchor
    ("api.md", "::: fedlab_analysis.config.RunConfig", "::: fedlab_analysis.config.RunConfg", "RunConfg"),
], ids=["link", "anchor", "reference"])
def test_a_broken_link_anchor_or_reference_fails_the_build(tmp_path, page, old, new, needle):
    p = build(broken_copy(tmp_path, page, old, new), tmp_path / "site")
    assert p.returncode != 0 and needle in p.stdout + p.stderr, p.stdout + p.stderr


# ---- generated parts ------------------------------------------------------------------------------------------

def test_the_generated_parts_are_current():
    from docs import gen
    text = (DOCS / "probes.md").read_text()
    assert gen.render_probes(text) == text, "docs/probes.md: a probe's --help changed; run python -m docs.gen"
    assert gen.render_api() == (DOCS / "api.md").read_text(), "docs/api.md is stale; run python -m docs.gen"
    from fedlab_analysis.probes import PROBES
    assert {m["name"] for m in gen.GEN.finditer(text)} == set(PROBES)
    stale = text.replace("[--top-k TOP_K]", "[--top-k K]", 1)                           # a help text edited by hand
    assert stale != text and gen.render_probes(stale) == text


# ---- commands -------------------------------------------------------------------------------------------------

def commands(path: Path) -> list[list[str]]:
    """The `python -m MODULE ...` lines of the file's bash blocks, continuation lines joined, comments dropped."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", path.read_text(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            for part in line.split("&&"):
                argv = shlex.split(part, comments=True)
                if argv[:2] == ["python", "-m"]:
                    out.append(argv[2:])
    return out


SHOWN = [(p.name, argv) for p in [README, *PAGES] for argv in commands(p)]


def main_of(module: str):
    import importlib
    mod = importlib.import_module(module if module != "fedlab_analysis.theory" else "fedlab_analysis.theory.__main__")
    return mod.main


def help_text(argv: list[str]) -> str:
    """The --help of the command (of `probe PROBE` for a probe line)."""
    head = argv[:2] if argv[0] == "fedlab_analysis.probe" else argv[:1]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main_of(head[0])([*head[1:], "--help"])
    return out.getvalue()


def test_the_pages_show_commands():
    assert len(SHOWN) > 40 and {a[0] for _, a in SHOWN} >= {
        "fedlab_analysis.train", "fedlab_analysis.probe", "fedlab_analysis.sweep", "fedlab_analysis.report",
        "fedlab_analysis.compare", "fedlab_analysis.theory", "paper_figures.tier"}


@pytest.mark.parametrize("page, argv", SHOWN, ids=[f"{p}:{' '.join(a[:3])}" for p, a in SHOWN])
def test_every_flag_shown_is_one_the_command_takes(page, argv):
    helps = help_text(argv)
    assert "usage:" in helps, argv
    flags = [a.split("=")[0] for a in argv if a.startswith("--")]
    missing = [f for f in flags if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", helps)]
    assert not missing, f"{page}: {shlex.join(argv)}: not in its --help: {missing}"


def test_the_flag_check_catches_a_misspelt_flag():
    helps = help_text(["fedlab_analysis.train"])
    assert "--local-epochs" in helps and not re.search(r"(?<![\w-])--local-epoch(?![\w-])", helps)


# a new run's train and sweep lines run for real with --dry-run: the full checks and the memory plan, nothing written
NEEDS = {"--resume": "a trained run", "--init": "a trained run", "--config": "the user's YAML",
         "--data-dir": "the official files", "--device": "the device it names", "--address": "a Ray cluster"}
DRY = [(p, a) for p, a in SHOWN if a[0] in ("fedlab_analysis.train", "fedlab_analysis.sweep")
       and not set(a) & set(NEEDS) and "--help" not in a]


@pytest.mark.parametrize("page, argv", DRY, ids=[f"{p}:{' '.join(a[1:4])}" for p, a in DRY])
def test_new_run_commands_pass_their_checks(page, argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    if argv[0] == "fedlab_analysis.sweep":
        shutil.copytree(ROOT / "sweeps", tmp_path / "sweeps")
    code = main_of(argv[0])([*argv[1:], "--dry-run"] if "--dry-run" not in argv else argv[1:])
    err = capsys.readouterr().err
    assert code == 0, f"{page}: {shlex.join(argv)}: {err}"
    assert not list(tmp_path.glob("runs/*/*")), "a dry run wrote a file"


# ---- the README front page --------------------------------------------------------------------------------------

def test_the_readme_is_a_front_page():
    assert len(README.read_text().splitlines()) < 250


def link_problems(text: str, base: Path) -> list[str]:
    """Relative links of a Markdown text whose file, or whose anchor in a docs/ page, does not exist."""
    from markdown.extensions.toc import slugify
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)|src=\"([^\"]+)\"", text):
        target = next(t for t in target if t)
        if re.match(r"\w+://", target):
            continue
        path, _, anchor = target.partition("#")
        file = (base / path) if path else None
        if file is None or not file.exists():
            bad.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md":
            heads = {slugify(h.strip(), "-") for h in re.findall(r"^#+ (.+)$", file.read_text(), re.M)}
            if anchor not in heads:
                bad.append(f"{target}: no such heading")
    return bad


def test_every_readme_link_resolves():
    text = README.read_text()
    assert len(re.findall(r"\]\(docs/", text)) >= 10
    assert not link_problems(text, ROOT)
    broken = text.replace("(docs/gpu.md)", "(docs/gpus.md)", 1).replace("#the-verdict-rule", "#the-verdict-rules", 1)
    assert len(link_problems(broken, ROOT)) == 2
