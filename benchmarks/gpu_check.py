"""The GPU check behind benchmarks/gpu_check.sh: every step in its own process with its own timeout, the script
going on after a step fails, and ONE Markdown table of what happened (plus the raw log of every step).

    bash benchmarks/gpu_check.sh             # on one CUDA GPU, <= 8 minutes
    bash benchmarks/gpu_check.sh --smoke     # the same steps at tiny size on the CPU, <= 2 minutes

Steps: the environment; the CUDA tests (``pytest -m "" -k "<CUDA_TESTS>"``: every test with "cuda" in its name,
skipped without a GPU, less the CPU-side checks of bad --device values); one round of training ResNet-18-GN on
CIFAR-10-shaped files written here (random pixels in the official format: the GPU machine has no network and no
data), and the probe CLI (hessian, landscape) on its checkpoint; then the ResNet-18-GN ``round_speed.py`` rows
(10 of 100 clients x 50 steps x batch 50): vmap under --compile for FedAvg, FedSAM and FedSMOO; the same in the
papers' setting (Bernoulli sampling, unequal K_i: FedAvg); loop and vmap, FedAvg beside the reference, then FedSAM
and FedSMOO; and last FedAvg compiled at --precision tf32 and bf16 (reported, not goals: the step takes what is
left of the budget). Each step's peak memory is read inside its process (CUDA max_memory_allocated over every
device, and peak RSS). Writes ``$OUT/gpu_check.md`` and ``$OUT/gpu_check.log`` when $OUT is set, else ``benchmarks/``
(``--smoke``: a new temporary folder, so the committed GPU table is never replaced by a smoke's).
Runs from the repository root with the interpreter in $PYTHON (default python3) and ``PYTHONPATH=$PWD``: the
package need not be installed. Exit status 0 when every step passed, 1 otherwise (the table is written either way).
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CUDA_TESTS = "cuda and not without_cuda and not fuzz_cli and not usability"
BUDGET_S = float(os.environ.get("GPU_CHECK_BUDGET_S", 470))   # the whole check (< 8 min, the limit)
SMOKE_BUDGET_S = 600               # --smoke: about 40 s of CPU; the wall clock allows for a shared, loaded machine
ALGOS = ("fedavg", "fedsam", "fedsmoo")


# ---- one step --------------------------------------------------------------------------------------------------
def peak_wrapper(peak_file: str, argv: list[str]) -> int:
    """Run ``-m MODULE args``, ``-c CODE`` or ``SCRIPT args`` in this process; write its peak memory to
    ``peak_file``."""
    import resource
    import runpy
    rc = 0
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        elif argv[0] == "-c":
            sys.argv = ["-c", *argv[2:]]
            exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
        else:
            sys.argv = list(argv)
            sys.path.insert(0, str(Path(argv[0]).resolve().parent))
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        peak = {"rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "gpu_mib": None}
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            peak["gpu_mib"] = max(torch.cuda.max_memory_allocated(d) for d in range(torch.cuda.device_count())) / 2**20
        Path(peak_file).write_text(json.dumps(peak))
    return rc


class Step:
    """One step of the check: a command run in its own process group, killed at ``timeout`` seconds."""

    def __init__(self, name: str, argv: list[str], timeout: float, parse=None, env=None, wrap: bool = True):
        self.name, self.argv, self.timeout, self.parse, self.env, self.wrap = name, argv, timeout, parse, env, wrap
        self.status, self.seconds, self.result, self.peak, self.output = "not run", 0.0, "", {}, ""
        self.cpu = 0.0

    def run(self, python: str, log, workdir: Path, budget_left: float) -> "Step":
        timeout = max(1.0, min(self.timeout, budget_left))
        peak_file = workdir / f"peak-{re.sub(r'[^A-Za-z0-9]+', '-', self.name)}.json"
        cmd = [python, str(Path(__file__).resolve()), "--wrap", str(peak_file), *self.argv] if self.wrap \
            else [python, *self.argv]
        log.write(f"\n===== {self.name}: {shlex.join(cmd)} (timeout {timeout:.0f} s)\n")
        log.flush()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))),
               "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg", **(self.env or {})}
        import resource
        t0, c0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
            self.status = "ok" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)                        # the step and anything it started
            out, _ = proc.communicate()
            self.status = f"TIMEOUT after {timeout:.0f} s"
        self.seconds, self.output = time.perf_counter() - t0, out or ""
        c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu = (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime)
        log.write(self.output)
        log.write(f"\n----- {self.name}: {self.status}, {self.seconds:.1f} s\n")
        log.flush()
        if peak_file.exists():
            self.peak = json.loads(peak_file.read_text())
        try:
            self.result = self.parse(self) if self.parse else last_line(self.output)
        except Exception as e:                             # noqa: BLE001  (a parse failure is a finding too)
            self.result = f"could not read the output ({type(e).__name__}: {e})"
        return self


def parse_many(step) -> str:
    """many_runs.py's per-step row: runs, clients in the gathered call, ms per step packed / alone / floor, ratio."""
    row = [l for l in step.output.splitlines() if l.startswith("| quick | ")][-1].strip("| ").split(" | ")
    return (f"{row[1]} runs, {row[2]} clients a call: {row[3]} ms a step packed, {row[4]} alone, floor {row[5]}; "
            f"{row[6]}")


def last_line(text: str) -> str:
    lines = [s for s in text.strip().splitlines() if s.strip()]
    return lines[-1][:300] if lines else ""


def cell(text) -> str:
    return str(text).replace("|", "/").replace("\n", " ")


# ---- parsing each step's output --------------------------------------------------------------------------------
def parse_pytest(step: Step) -> str:
    m = re.findall(r"^=*\s*((?:\d+ \w+(?:, )?)+)(?: in [\d.]+s)?", step.output, re.M)
    summary = next((s for s in reversed(m) if re.search(r"passed|failed|skipped|error|deselected", s)), None)
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", step.output, re.M)
    return (summary or last_line(step.output)) + (f"; failing: {', '.join(failed[:6])}" if failed else "")


def speed_rows(text: str) -> list[dict]:
    """The data rows of round_speed.py's Markdown table as {column: value}."""
    lines = [s for s in text.splitlines() if s.startswith("| ")]
    head = next((s for s in lines if s.startswith("| model |")), None)
    if head is None:
        return []
    cols = [c.strip() for c in head.strip("|").split("|")]
    rows = []
    for s in lines:
        vals = [c.strip() for c in s.strip("|").split("|")]
        if len(vals) == len(cols) and vals[0] != "model" and not vals[0].startswith("GPU"):
            rows.append(dict(zip(cols, vals)))
    return rows


def num(v):
    try:
        return float(str(v).rstrip("x"))
    except ValueError:
        return None


def parse_speed(step: Step) -> str:
    rows = speed_rows(step.output)
    step.rows = rows
    if not rows:
        return "no row printed"
    out = []
    for r in rows:
        keys = [("reference", "reference s/round"), ("loop", "loop s/round"), ("vmap", "vmap s/round"),
                ("compile", "vmap+compile s/round"), ("floor", "floor s/round")]
        secs = ", ".join(f"{k} {r[c]}" for k, c in keys if r.get(c) not in (None, "", "not run"))
        ups = ", ".join(f"{k} {r[c]}" for k, c in (("loop", "speed-up loop"), ("vmap", "speed-up vmap"),
                                                    ("compile", "speed-up compile")) if r.get(c))
        out.append(f"{r['algorithm']}: s/round {secs}" + (f"; speed-up {ups}" if ups else "")
                   + f"; peak MiB ref/loop/vmap/compile {r['peak MiB ref / loop / vmap / compile']}")
    return "; ".join(out)


def parse_json_line(keys):
    def parse(step: Step) -> str:
        for s in reversed(step.output.strip().splitlines()):
            if s.startswith("{"):
                d = json.loads(s)
                return ", ".join(f"{k} {fmt(d[k])}" for k in keys if k in d) or s[:300]
        return last_line(step.output)
    return parse


def fmt(v):
    return f"{v:.4g}" if isinstance(v, float) else (", ".join(fmt(x) for x in v) if isinstance(v, list) else v)


def parse_train(ckpt: Path):
    def parse(step: Step) -> str:
        size = f"last.pt {ckpt.stat().st_size / 1e6:.1f} MB" if ckpt.exists() else "no checkpoint written"
        return f"{size}; {last_line(step.output)}"
    return parse


def goals(steps: list[Step]) -> str:
    """The issue's GPU goals from the round_speed rows: FedAvg <= 0.1 s and >= 50x the reference, SAM <= 2x."""
    every = [r for st in steps for r in getattr(st, "rows", [])]
    equal = [r for r in every if r.get("setting", "equal").startswith("equal")]
    rows = {r["algorithm"]: r for r in equal
            if num(r.get("vmap s/round")) or num(r.get("vmap+compile s/round")) or num(r.get("loop s/round"))}
    compiled = {r["algorithm"]: num(r.get("vmap+compile s/round")) for r in equal if num(r.get("vmap+compile s/round"))}
    for a in compiled:
        rows.setdefault(a, {})
    best = {}
    for a, r in rows.items():
        ours = [v for v in (num(r.get("loop s/round")), num(r.get("vmap s/round")), compiled.get(a)) if v]
        if ours:
            best[a] = (min(ours), num(r.get("reference s/round")))
    if "fedavg" not in best:
        return "not measured (no FedAvg row)"
    extra = [f"{r['algorithm']} {num(r['vmap+compile s/round']):.3f} s/round" for r in equal
             if "(" in r["algorithm"] and num(r.get("vmap+compile s/round"))]
    extra += [f"{r['algorithm']} in the papers' setting {num(r['vmap+compile s/round']):.3f} s/round"
              for r in every if r.get("setting", "").startswith("papers") and num(r.get("vmap+compile s/round"))]
    t, ref = best["fedavg"]
    out = [f"FedAvg best of ours {t:.3f} s/round ({'met' if t <= 0.1 else 'NOT met'}: <= 0.1 s)"]
    if ref:
        out.append(f"{ref / t:.1f}x the reference ({'met' if ref / t >= 50 else 'NOT met'}: >= 50x)")
    for a in ("fedsam", "fedsmoo"):
        if a in best:
            out.append(f"{a} {best[a][0] / t:.2f}x FedAvg ({'met' if best[a][0] / t <= 2 else 'NOT met'}: <= 2x)")
    return "; ".join(out + ([f"(fp32 above; compiled, not goals: {', '.join(extra)})"] if extra else []))


# ---- the steps -------------------------------------------------------------------------------------------------
def fake_cifar10(root: Path, n_train: int, n_test: int, seed: int = 0) -> Path:
    """CIFAR-10-shaped files in the official python format (random pixels and labels): the probes need a data set
    the CLI can load by name, and the GPU machine has no network and no data."""
    import numpy as np
    rng = np.random.default_rng(seed)
    d = root / "cifar-10-batches-py"
    d.mkdir(parents=True, exist_ok=True)
    per = -(-n_train // 5)
    for name, n in [*((f"data_batch_{i}", per) for i in range(1, 6)), ("test_batch", n_test)]:
        with open(d / name, "wb") as fh:
            pickle.dump({b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                         b"labels": rng.integers(0, 10, n).tolist()}, fh)
    return root


def cuda_test_files() -> list[str]:
    """The test files that mention CUDA (collecting only these saves most of pytest's start-up); ``-k`` then picks
    the CUDA tests in them."""
    files = sorted(str(f.relative_to(ROOT)) for f in (ROOT / "tests").glob("test_*.py") if "cuda" in f.read_text())
    return files or ["tests/"]


def plan(smoke: bool, work: Path) -> list[Step]:
    """The steps, in order; timeouts sum to the budget (the compile step takes what is left)."""
    device = "cpu" if smoke else "cuda"
    data = work / "data"
    run = work / "run"
    ckpt = run / "ckpt" / "last.pt"
    if smoke:      # the same steps at tiny size: the MLP and LeNet on the CPU, 12 clients, 2 local steps
        speed = ["--device", "cpu", "--models", "mlp", "--clients", "12", "--steps", "mlp=2", "--rounds", "1",
                 "--settings", "equal", "--cold-reference", "--no-write"]
        model, train_n, n_test, clients, steps, samples, grid, t = "cnn", 240, 60, 4, 1, 32, "3", 150
    else:
        speed = ["--device", "cuda", "--threads", "8", "--models", "resnet18gn", "--clients", "100", "--steps",
                 "resnet18gn=50",
                 "--rounds", "1", "--settings", "equal", "--cold-reference", "--no-write"]
        model, train_n, n_test, clients, steps, samples, grid, t = "resnet18gn", 5000, 1000, 10, 2, 512, "11", None
    env_code = ("import torch, sys, platform; c = torch.cuda.is_available(); print(f'python {platform.python_version()}"
                ", torch {torch.__version__}, CUDA {torch.version.cuda}, ' + (', '.join(f'cuda:{i} ' + "
                "torch.cuda.get_device_name(i) + f' {torch.cuda.get_device_properties(i).total_memory / 2**30:.1f} "
                "GiB' for i in range(torch.cuda.device_count())) if c else 'no CUDA device') + f', {__import__(\"os\")"
                ".cpu_count()} cores')")
    common = ["--device", device, "--quiet", "--threads", "1" if smoke else "8"]
    net = " (smoke: MLP)" if smoke else ", ResNet-18-GN"
    papers = [*speed[:speed.index("--settings")], "--settings", "papers", *speed[speed.index("--settings") + 2:]]
    train = Step("train ResNet-18-GN, 1 round" if not smoke else "train (smoke: LeNet), 1 round",
             ["-m", "fedlab_analysis.train", "--algo", "fedavg", "--dataset", "cifar10", "--data-dir", str(data),
              "--model", model, "--clients", str(clients), "--active-ratio", "1", "--sampling", "fixed",
              "--partition", "iid", "--local-steps", str(steps), "--batch-size", "50", "--augment", "true",
              "--rounds", "1", "--eval-train-samples", "200", "--out", str(run), *common],
             t or 35, parse_train(ckpt))
    train.prepare = lambda: fake_cifar10(data, train_n, n_test)
    return [
        Step("environment", ["-c", env_code], 20 if not smoke else 30, wrap=False),
        Step("CUDA tests", ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "", "-k", CUDA_TESTS,
                            *cuda_test_files()], t or 90, parse_pytest),
        train,
        Step("probe hessian", ["-m", "fedlab_analysis.probe", "hessian", str(run), "--samples", str(samples),
                               "--top-k", "1", "--json", str(work / "hessian.json"), *common],
             t or 25, parse_json_line(["eigenvalues", "residuals", "n_products", "seconds", "n_samples"])),
        Step("probe landscape", ["-m", "fedlab_analysis.probe", "landscape", str(run), "--samples", str(samples),
                                 "--grid", grid, "--json", str(work / "landscape.json"), *common],
             t or 25, parse_json_line(["center_loss", "min_loss", "max_loss", "grid", "n_samples"])),
        Step("compile: vmap under --compile" + net,
             ["benchmarks/round_speed.py", *speed, "--algos", ",".join(ALGOS), "--modes", "compile",
              "--no-reference"], t or 120, parse_speed),
        Step("compile, papers' setting (Bernoulli, unequal K_i)" + net,
             ["benchmarks/round_speed.py", *papers, "--algos", "fedavg", "--modes", "compile", "--no-reference"],
             t or 100, parse_speed),
        Step("round_speed" + net + ": FedAvg reference, loop, vmap",
             ["benchmarks/round_speed.py", *speed, "--algos", "fedavg", "--modes", "loop,vmap"], t or 100, parse_speed),
        Step("round_speed" + net + ": SAM family loop, vmap",
             ["benchmarks/round_speed.py", *speed, "--algos", ",".join(a for a in ALGOS if a != "fedavg"),
              "--modes", "loop,vmap", "--no-reference"], t or 100, parse_speed),
        Step("many runs: 5 QUICK seeds packed vs alone, per local step (in process)",
             ["benchmarks/many_runs.py", "--device", device, "--in-process", "--settings", "quick", "--seeds",
              "2" if smoke else "5", "--no-write"], t or 60, parse_many),
        Step("compile at lower precision (not goals)" + net,       # last: the TF32/bf16 rows are reported, not goals
             ["benchmarks/round_speed.py", *speed, "--algos", "fedavg", "--modes", "vmap" if smoke else "compile",
              "--precision", "bf16" if smoke else "tf32,bf16", "--no-reference"], t or 10 ** 6, parse_speed),
    ]


def table(steps: list[Step], smoke: bool, seconds: float) -> str:
    head = (f"# benchmarks/gpu_check.sh{' --smoke' if smoke else ''}\n\n"
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {seconds:.0f} s wall in all, "
            f"{sum(s.cpu for s in steps):.0f} s CPU (the steps' processes); "
            f"{sum(s.status == 'ok' for s in steps)} of {len(steps)} steps ok. Raw output: gpu_check.log.\n\n"
            "| step | status | wall s | CPU s | result | peak GPU MiB | peak RSS MiB |\n"
            "|---|---|---|---|---|---|---|\n")
    rows = []
    for s in steps:
        gpu = s.peak.get("gpu_mib")
        rss = s.peak.get("rss_mib")
        rows.append(f"| {cell(s.name)} | {cell(s.status)} | {s.seconds:.1f} | {s.cpu:.1f} | {cell(s.result)} | "
                    f"{'-' if gpu is None else f'{gpu:.0f}'} | {'-' if rss is None else f'{rss:.0f}'} |")
    rows.append(f"| GPU goals (issue 23) | {'n/a (smoke, CPU)' if smoke else ''} | | | "
                f"{cell(goals(steps)) if not smoke else 'the goals are for an H100'} | | |")
    return head + "\n".join(rows) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--wrap"]:
        return peak_wrapper(argv[1], argv[2:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="the same steps at tiny size on the CPU (<= 2 minutes)")
    p.add_argument("--only", default=None, help="comma-separated step numbers to run (1-based; for tests)")
    p.add_argument("--out", default=None, help="where the table and log go (default: $OUT, else benchmarks/; "
                   "--smoke: a new temporary folder, printed at the end)")
    a = p.parse_args(argv)
    if a.out or os.environ.get("OUT"):
        out = Path(a.out or os.environ["OUT"])
    elif a.smoke:                                    # never over the committed GPU measurements
        out = Path(tempfile.mkdtemp(prefix="gpu_check-smoke-"))
    else:
        out = ROOT / "benchmarks"
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"error: --out {out}: {e}", file=sys.stderr)
        return 2
    python = os.environ.get("PYTHON") or sys.executable
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu_check-") as tmp, open(out / "gpu_check.log", "w") as log:
        steps = plan(a.smoke, Path(tmp))
        only = {int(i) for i in a.only.split(",")} if a.only else None
        steps = [s for i, s in enumerate(steps, 1) if only is None or i in only]
        budget = SMOKE_BUDGET_S if a.smoke else BUDGET_S
        for s in steps:
            left = budget - (time.perf_counter() - t0)
            if left < 5:
                s.status = "not run (time budget spent)"
                continue
            if hasattr(s, "prepare"):
                s.prepare()
            s.run(python, log, Path(tmp), left)
            print(f"{s.name}: {s.status}, {s.seconds:.1f} s: {s.result}", flush=True)
        text = table(steps, a.smoke, time.perf_counter() - t0)
    (out / "gpu_check.md").write_text(text)
    print(text)
    print(f"-> {out / 'gpu_check.md'}, {out / 'gpu_check.log'}")
    return 0 if all(s.status == "ok" for s in steps) else 1


if __name__ == "__main__":
    sys.exit(main())
