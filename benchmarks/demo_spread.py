"""The demo's printed numbers across seeds: how far apart the same command lands when only the seed changes.

    python benchmarks/demo_spread.py [--seeds 0,1,2,3,4] [--json benchmarks/demo_spread.json]

Runs ``python -m fedlab_analysis.demo --seed S --grid 2`` (the grid shapes only the figures) for each seed, reads
every number of its transcript (timings and the output folder left out, as tests/test_stale.py reads it), and writes
their sample standard deviation across seeds, number by number, to ``--json``; prints a Markdown table.
tests/test_stale.py compares the README's transcript (seed 0) with the demo's output within that spread: another
CPU's floating-point path moves the last digits of every number, and FedSMOO's run, which amplifies such
differences, by more; a change that moves a number by more than a seed does is caught.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fedlab_analysis.provenance import cpu_model  # noqa: E402

TIMING = re.compile(r" \((?:\d+(?:\.\d+)?) s(?: in all)?\)")
NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def numbers(text: str) -> list[list[str]]:
    """Each transcript line's numbers as printed, timings and the output folder left out."""
    lines = [TIMING.sub("", s.rstrip()) for s in text.strip().splitlines()]
    return [NUMBER.findall(re.sub(r"^wrote \S+/:", "wrote OUT/:", s)) for s in lines]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0,1,2,3,4")
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "demo_spread.json"))
    a = p.parse_args(argv)
    seeds = [int(s) for s in a.seeds.split(",")]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for s in seeds:
            done = subprocess.run([sys.executable, "-m", "fedlab_analysis.demo", "--seed", str(s), "--grid", "2",
                                   "--out", f"{tmp}/{s}"], capture_output=True, text=True, env=env, check=True)
            runs.append(numbers(done.stdout))
            print(f"seed {s}: {' | '.join(' '.join(line) for line in runs[-1])}", file=sys.stderr, flush=True)
    spread = [[statistics.stdev(float(r[i][j]) for r in runs) for j in range(len(runs[0][i]))]
              for i in range(len(runs[0]))]
    Path(a.json).write_text(json.dumps({"seeds": seeds, "machine": cpu_model(),
                                        "values": runs, "std": spread}, indent=1) + "\n")
    print(f"# demo across seeds {a.seeds} ({cpu_model()}); std: sample standard deviation over the seeds")
    print("| line | numbers (seed 0) | std across seeds |\n|---|---|---|")
    for i, (vals, sd) in enumerate(zip(runs[0], spread), 1):
        print(f"| {i} | {', '.join(vals)} | {', '.join(f'{x:.3g}' for x in sd)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
