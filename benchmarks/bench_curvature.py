"""Curvature probe benchmark: ours vs PyHessian 0.1 vs curvlinops + eigsh, same models and data.

    .venv/bin/python benchmarks/bench_curvature.py [--quick] [--seeds 3] [--threads 1]

Prints Markdown tables:
1. top-1 and top-5 eigenvalues: Hessian-vector products used, worst relative error against a tight
   float64 reference (our Lanczos, tol 1e-10) over the seeds, whether the k values come back in order;
2. seconds per product, interleaved on the same batch (ours with and without a kept graph, PyHessian's
   one-batch and data-loader modes, curvlinops);
3. trace: Hutchinson, Hutch++ and Hutch++ after deflating the top-10 Krylov space at equal products
   (RMS relative error over seeds and the mean reported standard error), PyHessian's trace at its
   defaults; the exact trace is the full-basis one (float64, as many products as parameters);
4. spectral density: ours, PyHessian's density(), curvlinops' Lanczos spectrum; and a GroupNorm model.

Problems (float32, eval mode, all samples in one batch): LogReg and MLP[32] on 500 digits and CNN1d on
500 mnist1d samples, each after 200 Adam steps; the hard case is MLP[64] trained on 300 digits until it
memorises them (100% train accuracy, loss 3e-4), whose two top eigenvalues lie within 3%.
PyHessian and curvlinops are optional: "not installed" rows when missing.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import sys
import time
import warnings

import numpy as np
import torch
from torch import nn

from fedlab_analysis.data import load_dataset
from fedlab_analysis.models import build_model
from fedlab_analysis.params import ParamSpace, functional
from fedlab_analysis.probes.curvature import HessianOperator, density, top_eigenvalues, trace

HAVE = {m: importlib.util.find_spec(m) is not None for m in ("pyhessian", "curvlinops")}
warnings.filterwarnings("ignore")


# ---- problems -------------------------------------------------------------------------------------
def make_problem(name, model, kw, dataset, n, steps, lr):
    ds = load_dataset(dataset)
    X, y = ds.x_train[:n], ds.y_train[:n]
    m = build_model(model, tuple(X.shape[1:]), 10, seed=0, **kw)
    opt = torch.optim.Adam(m.parameters(), lr=lr)
    for _ in range(steps):
        loss = nn.functional.cross_entropy(m(X), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    m.eval()
    space = ParamSpace.of_model(m)
    theta = space.flatten(dict(m.named_parameters())).detach()
    f = functional(m, space)
    acc = float((f(theta, X).argmax(1) == y).float().mean())
    m64 = build_model(model, tuple(X.shape[1:]), 10, seed=0, **kw).double().eval()
    return dict(name=name, model=m, space=space, theta=theta, f=f, X=X, y=y, P=space.P, acc=acc,
                loss=float(loss), f64=functional(m64, space), theta64=theta.double(), X64=X.double())


PROBLEMS = [("logreg-digits", "logreg", {}, "digits", 500, 200, 1e-2),
            ("mlp-digits", "mlp", {"widths": [32]}, "digits", 500, 200, 1e-2),
            ("cnn1d-mnist1d", "cnn1d", {}, "mnist1d", 500, 200, 1e-2),
            ("mlp-memorised (hard)", "mlp", {"widths": [64]}, "digits", 300, 300, 1e-2)]


def op32(pb, **kw):
    return HessianOperator(pb["f"], pb["theta"], (pb["X"], pb["y"]), **kw)


def op64(pb, **kw):
    return HessianOperator(pb["f64"], pb["theta64"], (pb["X64"], pb["y"]), **kw)


# ---- the other libraries --------------------------------------------------------------------------
@contextlib.contextmanager
def counting_pyhessian(count):
    import pyhessian  # noqa: F401  (registers pyhessian.hessian, the module whose HVP we count)
    mod = sys.modules["pyhessian.hessian"]
    hvp = mod.hessian_vector_product

    def counted(*a):
        count[0] += 1
        return hvp(*a)
    mod.hessian_vector_product = counted
    try:
        yield
    finally:
        mod.hessian_vector_product = hvp


def pyhessian_obj(pb):
    import pyhessian
    pb["model"].zero_grad(set_to_none=True)   # PyHessian adds its gradient to whatever .grad holds
    return pyhessian.hessian(pb["model"], nn.CrossEntropyLoss(), data=(pb["X"], pb["y"]), cuda=False)


def pyhessian_top(pb, k, seed):
    torch.manual_seed(seed)   # PyHessian draws from the global RNG (a benchmark script may seed it)
    count = [0]
    with counting_pyhessian(count):
        t0 = time.perf_counter()
        vals, _ = pyhessian_obj(pb).eigenvalues(top_n=k)        # defaults: maxIter=100, tol=1e-3
    return np.array(vals), count[0], time.perf_counter() - t0


def curvlinops_op(pb):
    import curvlinops
    params = list(pb["model"].parameters())
    return curvlinops.HessianLinearOperator(pb["model"], nn.CrossEntropyLoss(), params, [(pb["X"], pb["y"])],
                                            check_deterministic=False)


def curvlinops_top(pb, k, seed):
    from scipy.sparse.linalg import eigsh
    A = curvlinops_op(pb).to_scipy()
    count, mv = [0], A.matvec

    def counted(x):
        count[0] += 1
        return mv(x)
    A.matvec = counted
    v0 = torch.randn(pb["P"], generator=torch.Generator().manual_seed(seed), dtype=torch.float64).numpy()
    t0 = time.perf_counter()
    vals = eigsh(A, k=k, which="LA", tol=1e-3, v0=v0)[0]
    return np.sort(vals)[::-1], count[0], time.perf_counter() - t0


# ---- tables ---------------------------------------------------------------------------------------
def eigen_table(problems, seeds):
    print("\n## 1. Top eigenvalues (tol 1e-3; worst relative error over", len(seeds), "seeds)\n")
    print("| problem | P | method | k | HVPs (mean) | worst rel. error | in order | s total (mean) |")
    print("|---|---|---|---|---|---|---|---|")
    for pb in problems:
        ref = np.array(top_eigenvalues(op64(pb), k=5, tol=1e-10, max_iter=400, seed=123)["eigenvalues"])
        pb["ref"] = ref
        gap = (ref[0] - ref[1]) / ref[0]
        for k in (1, 5):
            rows = {}
            for s in seeds:
                for method in ("lanczos", "eigsh", "power"):
                    if method == "power" and k == 5:
                        continue
                    op = op32(pb)
                    r = top_eigenvalues(op, k=k, tol=1e-3, seed=s, method=method)
                    run = (np.array(r["eigenvalues"]), r["n_products"], r["seconds"])
                    rows.setdefault(f"ours {method}", []).append(run)
                if HAVE["pyhessian"]:
                    rows.setdefault("PyHessian 0.1 (defaults)", []).append(pyhessian_top(pb, k, s))
                if HAVE["curvlinops"]:
                    rows.setdefault("curvlinops + eigsh", []).append(curvlinops_top(pb, k, s))
            for lib in ("pyhessian", "curvlinops"):
                if not HAVE[lib]:
                    rows[f"{lib} (not installed)"] = None
            for method, runs in rows.items():
                if runs is None:
                    print(f"| {pb['name']} | {pb['P']} | {method} | {k} | - | - | - | - |")
                    continue
                err = max(np.max(np.abs(v - ref[:k]) / np.abs(ref[:k])) for v, _, _ in runs)
                ordered = all(np.all(np.diff(v) <= 0) for v, _, _ in runs)
                print(f"| {pb['name']} | {pb['P']} | {method} | {k} | {np.mean([n for _, n, _ in runs]):.1f} | "
                      f"{err:.1e} | {'yes' if ordered else 'NO'} | {np.mean([t for _, _, t in runs]):.3f} |")
        print(f"| {pb['name']} | | reference top-5 (gap l1-l2 = {gap:.1%}) | | | "
              f"{', '.join(f'{v:.4g}' for v in ref)} | | |")


def cost_table(problems, reps):
    print("\n## 2. Seconds per Hessian-vector product (median of", reps, "interleaved repeats, one batch)\n")
    print("| problem | ours keep_graph=False | ours default (graph kept: it fits) | ours torch.func "
          "| PyHessian one batch (graph kept) | PyHessian data loader | curvlinops |")
    print("|---|---|---|---|---|---|---|")
    for pb in problems:
        v = torch.randn(pb["P"], generator=torch.Generator().manual_seed(0))
        ops = {"ours": op32(pb, keep_graph=False), "keep": op32(pb), "func": op32(pb, backend="func")}
        fns = {k: (lambda o=o: o.matvec(v)) for k, o in ops.items()}
        if HAVE["pyhessian"]:
            import pyhessian
            h1, h2 = pyhessian_obj(pb), pyhessian.hessian(pb["model"], nn.CrossEntropyLoss(),
                                                          dataloader=[(pb["X"], pb["y"])], cuda=False)
            vl = [t.view_as(p) for t, p in zip(v.split([p.numel() for p in h1.params]), h1.params)]
            fns["pyh1"] = lambda: pyhessian.utils.hessian_vector_product(h1.gradsH, h1.params, vl)
            fns["pyh2"] = lambda: h2.dataloader_hv_product(vl)
        if HAVE["curvlinops"]:
            H = curvlinops_op(pb)
            fns["curv"] = lambda: H @ v
        times = {k: [] for k in fns}
        for fn in fns.values():   # warm-up
            fn()
        for _ in range(reps):
            for k, fn in fns.items():
                t0 = time.perf_counter()
                fn()
                times[k].append(time.perf_counter() - t0)
        med = {k: f"{1e3 * np.median(t):.2f} ms" for k, t in times.items()}
        print(f"| {pb['name']} | " + " | ".join(med.get(k, "not installed") for k in
                                                ("ours", "keep", "func", "pyh1", "pyh2", "curv")) + " |")


def trace_table(problems, seeds, budgets):
    print("\n## 3. Trace at equal products (relative RMS error over", len(seeds), "seeds; mean reported stderr)\n")
    print("| problem | exact trace | products | Hutchinson err / stderr | Hutch++ err / stderr | "
          "Hutch++ deflate 10 err / stderr | PyHessian trace (defaults): probes, err |")
    print("|---|---|---|---|---|---|---|")
    for pb in problems:
        if pb["P"] > 5000:
            print(f"| {pb['name']} | (exact trace needs {pb['P']} products: skipped) | | | | | |")
            continue
        exact = trace(op64(pb, keep_graph=True), pb["P"], method="hutch++")["trace"]
        pyh = "not installed"
        if HAVE["pyhessian"]:
            est, probes = [], []
            for s in seeds:
                torch.manual_seed(s)
                smp = pyhessian_obj(pb).trace()
                est.append(np.mean(smp))
                probes.append(len(smp))
            rms = np.sqrt(np.mean((np.array(est) - exact) ** 2)) / abs(exact)
            pyh = f"{np.mean(probes):.1f}, {rms:.1e} (no error bar)"
        for n in budgets:
            cells = []
            for method, deflate in (("hutchinson", 0), ("hutch++", 0), ("hutch++", 10)):
                rs = [trace(op32(pb), n, method=method, deflate=deflate, seed=s) for s in seeds]
                err = np.sqrt(np.mean([(r["trace"] - exact) ** 2 for r in rs])) / abs(exact)
                cells.append(f"{err:.1e} / {np.mean([r['stderr'] for r in rs]) / abs(exact):.1e}")
            last = pyh if n == budgets[0] else ""
            print(f"| {pb['name']} | {exact:.4g} | {n} | " + " | ".join(cells) + f" | {last} |")


def density_table(problems):
    print("\n## 4. Spectral density (80 Lanczos steps, 1 vector) and GroupNorm\n")
    print("| problem | ours: HVPs, seconds | PyHessian density() | curvlinops lanczos_approximate_spectrum |")
    print("|---|---|---|---|")
    for pb in problems:
        r = density(op32(pb), n_steps=80, n_vectors=1)
        pyh = "not installed"
        if HAVE["pyhessian"]:
            try:
                pyhessian_obj(pb).density(iter=80, n_v=1)
                pyh = "ok"
            except Exception as e:  # noqa: BLE001 (reporting another library's failure)
                pyh = f"crashes: {type(e).__name__}: {str(e)[:60]}"
        curv = "not installed"
        if HAVE["curvlinops"]:
            import curvlinops
            t0 = time.perf_counter()
            try:
                curvlinops.lanczos_approximate_spectrum(curvlinops_op(pb), ncv=80)
                curv = f"ok, {time.perf_counter() - t0:.2f} s"
            except Exception as e:  # noqa: BLE001 (reporting another library's failure)
                curv = f"fails: {type(e).__name__}: {str(e)[:60]}"
        print(f"| {pb['name']} | {r['n_products']}, {r['seconds']:.2f} s | {pyh} | {curv} |")
    g = torch.Generator().manual_seed(0)
    gn = nn.Sequential(nn.Conv2d(1, 4, 3), nn.GroupNorm(2, 4), nn.ReLU(), nn.Flatten(), nn.Linear(64, 3)).eval()
    with torch.no_grad():
        for p in gn.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=g))
    X, y = torch.randn(32, 1, 6, 6, generator=g), torch.randint(0, 3, (32,), generator=g)
    space = ParamSpace.of_model(gn)
    theta = space.flatten(dict(gn.named_parameters())).detach()
    ours = top_eigenvalues(HessianOperator(functional(gn, space), theta, (X, y)), k=1)["eigenvalues"][0]
    curv = "not installed"
    if HAVE["curvlinops"]:
        import curvlinops
        try:
            curvlinops.HessianLinearOperator(gn, nn.CrossEntropyLoss(), list(gn.parameters()), [(X, y)],
                                             check_deterministic=False) @ torch.ones(space.P)
            curv = "ok"
        except NotImplementedError as e:
            curv = f"fails: {str(e)[:80]}"
    print(f"| GroupNorm CNN (P={space.P}) | top eigenvalue {ours:.4g} | - | {curv} |")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="two problems, two seeds")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 = stable timings on a shared CPU)")
    args = p.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)   # rows appear as they are measured
    torch.set_num_threads(args.threads)
    specs = PROBLEMS[::3] if args.quick else PROBLEMS
    seeds = list(range(2 if args.quick else args.seeds))
    t0 = time.perf_counter()
    problems = [make_problem(*s) for s in specs]
    print(f"# Curvature benchmark (torch {torch.__version__}, {args.threads} thread(s), CPU; "
          f"PyHessian {'yes' if HAVE['pyhessian'] else 'not installed'}, "
          f"curvlinops {'yes' if HAVE['curvlinops'] else 'not installed'})\n")
    for pb in problems:
        print(f"- {pb['name']}: P = {pb['P']}, {len(pb['y'])} samples, train accuracy {pb['acc']:.3f}, "
              f"loss {pb['loss']:.2e}")
    eigen_table(problems, seeds)
    cost_table(problems, reps=5 if args.quick else 15)
    trace_table(problems, list(range(4 if args.quick else 10)), [30, 99] if args.quick else [30, 99, 300])
    density_table(problems)
    print(f"\n(total {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
