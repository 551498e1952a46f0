"""Every probe example of the handbook runs as written after `make demo`: each command of docs/probes.md's
"Probe a checkpoint" section is
executed on checkpoints trained with the demo's own configuration (one round instead of 30) and, through flags
appended to it (the last occurrence of a flag wins), at small sizes."""
import re
import shlex
from pathlib import Path

import pytest

from fedlab_analysis import probe
from fedlab_analysis.probes import PROBES
from fedlab_analysis.demo import DEMO

PAGE = Path(__file__).resolve().parents[1] / "docs" / "probes.md"
SMALL = {"hessian": ["--max-iter", "20"], "trace": ["--products", "12"],
         "density": ["--steps", "8", "--vectors", "2"], "landscape": ["--grid", "3"], "consensus": [],
         "sharpness": ["--steps", "2"], "drift": [], "stability": ["--rounds", "1", "--pairs", "2", "--pool", "50"],
         "margin": []}
NO_SAMPLES = ("consensus", "stability")          # they read no data / the full sets, and refuse --samples


def examples() -> list[list[str]]:
    text = PAGE.read_text()
    section = text[text.index("## Probe a checkpoint"):]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [shlex.split(line, comments=True)[3:] for line in block.splitlines()
            if line.startswith("python -m fedlab_analysis.probe ")]


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    """out/demo/fedavg and out/demo/fedsmoo as `make demo` trains them (fedlab_analysis.demo), for one round."""
    from fedlab_analysis.config import RunConfig
    from fedlab_analysis.trainers.loop import train
    root = tmp_path_factory.mktemp("cwd")
    for name, extra in (("fedavg", {}), ("fedsmoo", {"algo": "fedsmoo", "rho": 0.05})):    # as demo.main
        train(RunConfig(**{**DEMO, **extra, "rounds": 1, "quiet": True}), root / "out" / "demo" / name)
    return root


def test_the_handbook_has_an_example_of_every_probe():
    assert {argv[0] for argv in examples()} == set(PROBES)


@pytest.mark.slow
def test_every_handbook_probe_example_runs_on_the_demo_checkpoints(demo_dir, monkeypatch, capsys):
    monkeypatch.chdir(demo_dir)                  # the page's relative paths: out/demo/..., plane.pt, *.png
    for argv in examples():
        name = argv[0]
        small = SMALL[name] + ([] if name in NO_SAMPLES or "--local" in argv else ["--samples", "80"])
        small += ["--products", "6"] if "--per-layer" in argv else []
        code = probe.main([*argv, *small, "--quiet"])
        err = capsys.readouterr().err
        assert code == 0, f"{shlex.join(argv)}: {err}"
        for flag in ("--plot", "--save-directions", "--h5", "--json"):
            if flag in argv and argv[argv.index(flag) + 1] != "-":
                assert (demo_dir / argv[argv.index(flag) + 1]).stat().st_size > 0, (argv, flag)
