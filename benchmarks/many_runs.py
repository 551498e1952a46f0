"""Many runs, one program: N seeds trained as one pack (``train --seeds``, trainers/pack.py) against the same N runs
as separate processes (``train --seed S`` each, all started at once), on the same cores, measured side by side.

    python benchmarks/many_runs.py                      # both CPU settings, 5 seeds, 2 repeats, into RESULTS.md
    python benchmarks/many_runs.py --settings quick --repeats 3 --no-write
    python benchmarks/many_runs.py --device cuda --in-process --settings mnist    # a GPU (gpu_check.sh runs it)

Settings:
  quick   the QUICK tier's digits MLP (paper_figures.common.QUICK_BASE: 20 clients, 50% active, batch 20, 2 local
          epochs, 30 rounds)
  mnist   the MNIST tier's setting (MNIST_BASE: the 784-200-200-10 MLP, 100 clients, 10% active, batch 50, 5 local
          epochs), 2 rounds (a round costs the same at round 2 as at round 300)
Arrangements, each given the same cores (``taskset``):
  one core   N processes on core 0, against one pack of N on core 0;
  all cores  N processes on every core, against one pack per core (the sweep's and the tier's arrangement).
Wall seconds from launch to the last exit (imports and data loading included: a separate process pays them N times),
best of ``--repeats``, the arrangements interleaved. The per-step table times one local step in process: the pack's
gathered step against the same steps alone, and the arithmetic floor, the same products as plain batched matmuls
(``torch.bmm``: forward and backward of every active client's MLP, no functorch) on one thread.
GPU rows: run by ``benchmarks/gpu_check.sh`` where a GPU is lent; "not measured" otherwise.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fedlab_analysis.provenance import machine  # noqa: E402
from paper_figures.common import MNIST_BASE, QUICK_BASE  # noqa: E402

SECTION = "## many_runs.py"
SETTINGS = {"quick": {**QUICK_BASE}, "mnist": {**MNIST_BASE, "rounds": 2, "ckpt_every": 0, "eval_every": 1}}


def flags(base: dict) -> list[str]:
    import json
    out = []
    for k, v in base.items():
        if k in ("quiet",):
            continue
        out += [f"--{k.replace('_', '-')}", json.dumps(v) if isinstance(v, (dict, list)) else str(v)]
    return out + ["--quiet", "true", "--threads", "1", "--algo", "fedavg"]


def launch(cmds: list[list[str]], cores: str) -> float:
    """Start every command at once on ``cores``; wall seconds until the last ends."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    procs = [subprocess.Popen(["taskset", "-c", cores, sys.executable, "-m", "fedlab_analysis.train", *c], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for c in cmds]
    for p in procs:
        _, err = p.communicate()
        if p.returncode:
            raise SystemExit(f"a run failed: {err.decode()[-400:]}")
    return time.perf_counter() - t0


def wall(setting: str, n: int, repeats: int) -> list[tuple]:
    base = flags(SETTINGS[setting])
    cores = sorted(os.sched_getaffinity(0))
    rows = []
    for name, cs in (("one core", [cores[0]]), (f"all {len(cores)} cores", cores)):
        best = {"separate": float("inf"), "packed": float("inf")}
        for _ in range(repeats):
            with tempfile.TemporaryDirectory() as tmp:
                sep = [[*base, "--seed", str(s), "--out", f"{tmp}/sep{s}"] for s in range(n)]
                best["separate"] = min(best["separate"], launch(sep, ",".join(map(str, cs))))
                seeds = [list(range(n))[j::len(cs)] for j in range(len(cs))]
                t0 = time.perf_counter()
                procs = [[*base, "--seeds", *map(str, ss), "--out", f"{tmp}/pack{j}"] for j, ss in enumerate(seeds)]
                env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
                ps = [subprocess.Popen(["taskset", "-c", str(c), sys.executable, "-m", "fedlab_analysis.train", *a],
                                       env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                      for c, a in zip(cs, procs)]
                for p in ps:
                    _, err = p.communicate()
                    if p.returncode:
                        raise SystemExit(f"a pack failed: {err.decode()[-400:]}")
                best["packed"] = min(best["packed"], time.perf_counter() - t0)
        rows.append((setting, name, n, best["separate"], best["packed"], best["separate"] / best["packed"]))
    return rows


def per_step(setting: str, n: int, rounds: int = 3, device: str = "cpu") -> tuple:
    """ms per local step of all n runs: packed, the same runs alone (in this process), and the bmm floor."""
    from fedlab_analysis.config import RunConfig
    from fedlab_analysis.trainers import pack
    from fedlab_analysis.trainers.engine import Run
    torch.set_num_threads(1)
    base = RunConfig(**{**SETTINGS[setting], "rounds": rounds, "ckpt_every": 0, "client_parallel": "vmap",
                        "device": device})
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    cfgs = [dataclasses.replace(base, seed=s) for s in range(n)]
    data = pack.shared_data(cfgs)
    # steps: a run's local steps over its rounds (each round as long as its longest client), averaged over the runs
    runs = [Run(c, dataset=data[i]) for i, c in enumerate(cfgs)]
    steps, shapes = 0, []
    for run in runs:
        for t in range(rounds):
            ctx = run.round_ctx(t)
            steps += int(ctx.K.max())
            shapes.append((ctx.n, int(ctx.K.max())))
    steps /= n
    sync()
    t0 = time.perf_counter()
    pack.train_pack([pack.Job(c) for c in cfgs])
    sync()
    packed = time.perf_counter() - t0
    from fedlab_analysis.trainers.loop import train
    t0 = time.perf_counter()
    for i, c in enumerate(cfgs):
        train(c, dataset=data[i])
    sync()
    alone = time.perf_counter() - t0
    # floor: the products of every step, as plain bmm (forward + backward of each active client's MLP)
    widths = [runs[0].X[0].numel(), *SETTINGS[setting]["model_kwargs"]["widths"], runs[0].ds.n_classes]
    B = base.batch_size
    clients = sum(nc for nc, _ in shapes) / len(shapes) * n
    N = max(1, round(clients))
    dev = runs[0].device
    Ws = [torch.randn(N, a, b, device=dev) * 0.01 for a, b in zip(widths, widths[1:])]
    x0 = torch.randn(N, B, widths[0], device=dev)
    y = torch.randint(0, widths[-1], (N, B), device=dev)

    def step():
        acts, h = [x0], x0
        for i, W in enumerate(Ws):
            h = torch.bmm(h, W)
            if i < len(Ws) - 1:
                h = h.clamp_min(0)
            acts.append(h)
        g = torch.softmax(h, -1)
        g[torch.arange(N, device=dev)[:, None], torch.arange(B, device=dev), y] -= 1
        for i in range(len(Ws) - 1, -1, -1):
            torch.bmm(acts[i].transpose(1, 2), g)
            if i:
                g = torch.bmm(g, Ws[i].transpose(1, 2)) * (acts[i] > 0)
    for _ in range(3):
        step()
    reps = 50
    sync()
    t0 = time.perf_counter()
    for _ in range(reps):
        step()
    sync()
    floor = (time.perf_counter() - t0) / reps
    # evaluation and the round's host work are in packed/alone too: the per-step figures include them
    return setting, n, N, 1e3 * packed / steps, 1e3 * alone / steps, 1e3 * floor, alone / packed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--settings", default="quick,mnist")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda for the in-process table on a GPU")
    ap.add_argument("--in-process", action="store_true", help="only the per-step table (no separate processes)")
    args = ap.parse_args(argv)
    settings = args.settings.split(",")
    head = (f"# {args.seeds} seeds; {machine(args.device)}, "
            f"{len(os.sched_getaffinity(0))} cores, load {os.getloadavg()[0]:.1f} at the start")
    t1 = ["| setting | cores | runs | separate processes (s) | packed (s) | throughput ratio |",
          "|---|---|---|---|---|---|"]
    for s in settings if not args.in_process else ():
        for r in wall(s, args.seeds, args.repeats):
            t1.append(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.1f} | {r[4]:.1f} | {r[5]:.2f}x |")
            print(t1[-1], flush=True)
    t2 = ["| setting | runs | active clients in the gathered call | packed ms / step | alone ms / step (same process) "
          "| floor ms / step (bmm) | in-process ratio |", "|---|---|---|---|---|---|---|"]
    for s in settings:
        r = per_step(s, args.seeds, device=args.device)
        t2.append(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.2f} | {r[4]:.2f} | {r[5]:.2f} | {r[6]:.2f}x |")
        print(t2[-1], flush=True)
    gpu = ["| GPU row | result |", "|---|---|",
           "| the MNIST tier, hooks and evaluation, from an empty cache (goal <= 10 min, one H100) | not measured "
           "(no GPU lent to this session) |",
           "| Fashion-MNIST GroupNorm CNN, s / round | not measured |",
           "| CIFAR-10 ResNet-18-GN, 100 clients, 10%: s / round alone and packed | not measured |"]
    gpu = gpu if args.device == "cpu" else []
    block = "\n".join([head, "", *(t1 if not args.in_process else []), "", *t2, "", *gpu])
    print(block)
    if not args.no_write:
        from results import write_section
        write_section(f"{SECTION} (CPU: packed seeds against separate processes, same cores)" if args.device == "cpu"
                      else f"{SECTION} ({args.device}: packed seeds against the same runs alone, in process)", block)


if __name__ == "__main__":
    main()
