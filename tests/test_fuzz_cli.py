"""Several hundred wrong invocations of train, probe (every probe), theory, sweep, report and compare, called
in-process through each CLI's ``main(argv)``. For every one: exit code 2, exactly one line on stderr starting
``error:`` that names the flag or the file, no traceback, and no file created or changed anywhere under the test's
folders."""
import argparse
import contextlib
import hashlib
import io
from pathlib import Path

import pytest
import torch

from fedlab_analysis import algos, compare, probe, report, sweep, train as train_cli
from fedlab_analysis.config import RunConfig, fields
from fedlab_analysis.rules import fields_of, type_of
from fedlab_analysis.theory import __main__ as theory_cli

FIELDS = fields_of(RunConfig)
BASE = ["--dataset", "digits", "--model", "mlp", "--model-kwargs", '{"widths": [8]}', "--clients", "4",
        "--rounds", "2", "--local-steps", "1", "--quiet"]


# ---- the world the invocations run in ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A folder with a real run (ckpt/last.pt), damaged copies of its checkpoint, and assorted bad files."""
    w = tmp_path_factory.mktemp("fuzz")
    assert train_cli.main([*BASE, "--ckpt-every", "1", "--out", str(w / "run")]) == 0
    good = torch.load(w / "run/ckpt/last.pt", weights_only=True)
    bad = w / "bad"
    bad.mkdir()
    g = good["global"]
    first = next(iter(g))
    damaged = {
        "shape": {**good, "global": {**g, first: g[first][:-1]}},
        "nan": {**good, "global": {k: v * float("nan") for k, v in g.items()}},
        "dtype": {**good, "global": {k: v.long() for k, v in g.items()}},
        "missing": {**good, "global": dict(list(g.items())[1:])},
        "extra": {**good, "global": {**g, "zzz": torch.zeros(3)}},
        "layers": {**good, "layers": "garbage"},
        "layers2": {**good, "layers": good["layers"][:-1]},
        "round": {**good, "round": "garbage"},
        "newer": {**good, "version": 99},
        "foreign": {"state_dict": dict(g)},
        "config": {**good, "config": {**good["config"], "lr": "fast"}},
        "model": {**good, "model": {**good["model"], "name": "gpt"}},
        "clients": {**good, "clients": {"models": torch.zeros(2, 3), "rounds": torch.zeros(2), "ids": [0, 1]}},
        "partition": {**good, "partition": {"indices": "x", "counts": None}},
    }
    for name, ck in damaged.items():
        torch.save(ck, bad / f"{name}.pt")
    torch.save({**good, "metrics": Evil(str(w / "pwned"))}, bad / "evil.pt")   # loading it must run no code
    raw = (w / "run/ckpt/last.pt").read_bytes()
    (bad / "trunc.pt").write_bytes(raw[: len(raw) // 3])
    (bad / "text.pt").write_text("hello")
    (bad / "empty.pt").write_bytes(b"")
    (w / "afile").write_text("x")
    import shutil
    for name, text in (("badconfig", '{"lr": '), ("badmetrics", '{"round": 1}\nnot json\n')):
        shutil.copytree(w / "run", w / name)
        (w / name / ("config.json" if name == "badconfig" else "metrics.jsonl")).write_text(text)
    (w / "yaml").mkdir()
    (w / "nonrun").mkdir()
    (w / "nonrun" / "notes.txt").write_text("precious")
    return w


class Evil:
    """A crafted pickle: unpickling it would create a file (the snapshot check would see it)."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def snapshot(root: Path) -> dict:
    """Every path under root with its size and content hash (folders too: a created empty folder counts)."""
    out = {}
    for p in sorted(root.rglob("*")):
        out[str(p.relative_to(root))] = hashlib.sha1(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    return out


def call(main, argv):
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
    return code, err.getvalue()


def assert_refused(main, argv, needle, world, monkeypatch):
    monkeypatch.chdir(world)                         # theory's default --out is relative: keep it inside
    before = snapshot(world)
    code, err = call(main, argv)
    lines = err.strip().splitlines()
    assert code == 2, (argv, code, err)
    assert len(lines) == 1 and lines[0].startswith("error:"), (argv, err)
    assert "Traceback" not in err
    assert needle.lower() in lines[0].lower(), (argv, needle, lines[0])
    assert snapshot(world) == before, (argv, "files changed")


# ---- train: every field, by its declared type and range ----------------------------------------------------
def flag(name):
    return "--" + name.replace("_", "-")


def bad_values(name):
    """Values the field's declaration refuses: wrong type, nan/inf, and just outside each bound."""
    base, _ = type_of(FIELDS[name])
    rule = FIELDS[name].metadata
    if base == "bool":
        return ["maybe", "2"]
    if base == "dict":
        return ["{", "[1]", '"x"', "3"]
    if base == "str":
        return (["bogus-name"] if "choices" in rule else []) + (["cpux", "cuda:abc", "gpu"] if "pattern" in rule
                                                                 else [])
    vals = ["abc", "1,5"] + (["2.5", "1e3", "true"] if base == "int" else ["nan", "inf", "-inf", "1e400"])
    lo, hi = rule.get("lo"), rule.get("hi")
    if lo is not None:
        vals.append(str(lo if rule.get("lo_open") else (lo - 1 if base == "int" else lo - 0.5)))
    if hi is not None:
        vals.append(str(hi if rule.get("hi_open") else (hi + 1 if base == "int" else hi * 2 + 1)))
    return vals


def train_cases():
    cases = []
    for f in fields(RunConfig):
        if f.name in algos.HYPER and f.name not in algos.USES["fedavg"]:
            continue                                 # below, with an algorithm that reads them
        for v in bad_values(f.name):
            cases.append(([*BASE, flag(f.name), v], flag(f.name)))
    for name in algos.HYPER:                         # an algorithm that reads it: bad values; one that does not
        user = algos.users(name)[0] if algos.users(name) else "fedinit"
        extra = ["--active-ratio", "1"] if user.startswith("fedals") else []
        for v in bad_values(name):
            cases.append(([*BASE, *extra, "--algo", user, flag(name), v], flag(name)))
        idle = next(a for a in algos.NAMES if name not in algos.uses(a))
        good = {"float": "0.5", "int": "2", "str": FIELDS[name].default}[type_of(FIELDS[name])[0]]
        cases.append(([*BASE, "--algo", idle, flag(name), str(good)], flag(name)))
    for algo, name, v in [("fedcm", "alpha", "2"), ("mofedsam", "alpha", "1.5"), ("fedals", "alpha", "2.5"),
                          ("fedals", "alpha", "0.5"), ("fedals", "phi_layers", "0"), ("fedals", "phi_layers", "99")]:
        cases.append(([*BASE, "--active-ratio", "1", "--algo", algo, flag(name), v], flag(name)))
    cases += [
        ([*BASE, "--bogus", "1"], "--bogus"),
        ([*BASE, "--lr"], "--lr"),
        ([*BASE, "--local-epochs", "1e30"], "--local-epochs"),
        ([*BASE, "--clients", "5000"], "--clients"),
        ([*BASE, "--model", "cnn"], "--model"),
        ([*BASE, "--model-kwargs", '{"widths": "wide"}'], "--model"),
        ([*BASE, "--model-kwargs", '{"depth": 3}'], "--model"),
        ([*BASE, "--dataset", "cifar10", "--data-dir", "nowhere"], "cifar10"),
        ([*BASE, "--partition", "natural"], "--partition"),
        ([*BASE, "--probe", "nonsense"], "probe"),
        ([*BASE, "--vmap", "on", "--model", "resnet20"], "--"),
        ([*BASE, "--algo", "fedals", "--active-ratio", "1", "--model", "logreg", "--model-kwargs", "{}"],
         "phi and a head"),
        ([*BASE, "--algo", "fedals"], "--active-ratio"),
    ]
    if not torch.cuda.is_available():
        cases.append(([*BASE, "--device", "cuda"], "--device"))
    return cases


TRAIN = train_cases()


@pytest.mark.parametrize("argv, needle", TRAIN, ids=[" ".join(a[len(BASE):]) for a, _ in TRAIN])
def test_train_flags(world, monkeypatch, argv, needle):
    assert_refused(train_cli.main, [*argv, "--out", str(world / "new")], needle, world, monkeypatch)


# ---- train: YAML configs, paths, run directories ------------------------------------------------------------
YAML_BAD = {"int": ["true", "2.5", "'3'", "null", "[1, 2]", "{a: 1}", "1e3"],
            "float": ["abc", "true", ".nan", ".inf", "-.inf", "null", "[0.1]", "{a: 1}"],
            "str": ["3", "[a]", "null", "bogus-name"], "bool": ["3", "'yes'", "null", "[true]"],
            "dict": ["3", "[1]", "abc"]}


def yaml_cases():
    cases = []
    for name in ("rounds", "clients", "seed", "local_steps", "lr", "dir_alpha", "wd", "server_lr", "algo",
                 "replacement", "model_kwargs", "dtype", "local_epochs", "threads"):
        base, nullable = type_of(FIELDS[name])
        for v in YAML_BAD[base]:
            if v == "null" and nullable or (base == "str" and v == "bogus-name" and "choices" not in
                                            FIELDS[name].metadata):
                continue
            cases.append((f"{name}: {v}\n", name))
    cases += [("- rounds: 2\n", "mapping"), ("rounds: [\n", "not valid YAML"), ("bogus: 1\n", "bogus"),
              ("rho: 0.1\n", "rho"), ("algo: fedcm\nalpha: 3\n", "alpha"), ("3: 4\n", "3"),
              ("lr: 0.1\n\tx: 1\n", "YAML")]
    return cases


YAML = yaml_cases()


@pytest.mark.parametrize("text, needle", YAML, ids=[t.strip() for t, _ in YAML])
def test_train_yaml(world, monkeypatch, text, needle):
    path = world / "yaml" / "cfg.yaml"
    path.write_text(text)
    assert_refused(train_cli.main, [*BASE, "--config", str(path), "--out", str(world / "new")], needle, world,
                   monkeypatch)
    assert_refused(train_cli.main, [*BASE, "--config", str(path), "--out", str(world / "new")], str(path), world,
                   monkeypatch)


def config_files(world):
    d = world / "yaml"
    (d / "bin.yaml").write_bytes(bytes(range(256)) * 4)
    (d / "utf16.yaml").write_text("rounds: 2\n", encoding="utf-16")
    (d / "nul.yaml").write_bytes(b"rounds: 2\x00\n")
    return [d, d / "bin.yaml", d / "utf16.yaml", d / "nul.yaml", d / "missing.yaml", world / "afile" / "x.yaml"]


def test_train_config_files(world, monkeypatch):
    for path in config_files(world):
        assert_refused(train_cli.main, [*BASE, "--config", str(path), "--out", str(world / "new")], "--config",
                       world, monkeypatch)


def test_train_paths_and_run_directories(world, monkeypatch):
    run, new = str(world / "run"), str(world / "new")
    cases = [
        ([*BASE, "--out", str(world / "afile")], "--out"),
        ([*BASE, "--out", str(world / "afile" / "below")], "--out"),
        ([*BASE, "--out", run], "not empty"),                            # a finished run, not resumed
        ([*BASE, "--out", str(world / "nonrun"), "--overwrite"], "--overwrite"),
        ([*BASE], "--out"),
        (["--resume", str(world / "missing")], "--resume"),
        (["--resume", str(world / "afile")], "--resume"),
        (["--resume", str(world / "nonrun")], "--resume"),
        (["--resume", run, "--out", new, "--rounds", "3"], "--out"),
        (["--resume", run, "--rounds", "1"], "--rounds"),
        (["--resume", run, "--overwrite", "--rounds", "3"], "--overwrite"),
        (["--resume", run, "--lr", "0.5", "--rounds", "3"], "--resume"),
        (["--resume", run, "--rounds", "3", "--rho", "0.1"], "--rho"),
        (["--resume", run, "--rounds", "3", "--lr", "nan"], "--lr"),
    ]
    for argv, needle in cases:
        assert_refused(train_cli.main, argv, needle, world, monkeypatch)


@pytest.mark.parametrize("damage, needle", [
    ("config.json", "config.json"), ("metrics.jsonl", "metrics.jsonl"), ("ckpt/last.pt", "last.pt")])
def test_resume_of_a_damaged_run_directory(world, monkeypatch, tmp_path, damage, needle):
    import shutil
    run = world / f"copy_{damage.replace('/', '_')}"
    shutil.copytree(world / "run", run)
    if damage == "config.json":
        (run / damage).write_text('{"lr": ')
    elif damage == "metrics.jsonl":
        (run / damage).write_text('{"round": 1}\nnot json\n{"round": 2}\n')
    else:
        (run / damage).write_bytes((world / "bad/shape.pt").read_bytes())
    assert_refused(train_cli.main, ["--resume", str(run), "--rounds", "3"], needle, world, monkeypatch)
    shutil.rmtree(run)


# ---- probe: every probe, its common flags and its own ------------------------------------------------------
def probe_cases():
    p = probe.parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    cases = []
    for name, sp in sub.choices.items():
        ck, first = "run", len(cases)
        damaged = ["shape", "nan", "dtype", "missing", "extra", "layers", "layers2", "round", "newer", "foreign",
                   "config", "model", "clients", "partition", "trunc", "text", "empty", "evil"]
        for d in damaged:
            cases.append(([name, f"bad/{d}.pt"], f"{d}.pt"))
        cases += [
            ([name], "CKPT"), ([name, "missing.pt"], "missing.pt"), ([name, "nonrun"], "nonrun"),
            ([name, "badconfig"], "config.json"), ([name, "badmetrics"], "metrics.jsonl"),
            ([name, ck, "--json", "nodir/out.json"], "--json"), ([name, ck, "--json", "afile/out.json"], "--json"),
            ([name, ck, "--json", "yaml"], "--json"), ([name, ck, "--plot", "nodir/p.png"], "--plot"),
            ([name, ck, "--plot", "afile/p.png"], "--plot"), ([name, ck, "--device", "cpux"], "--device"),
            ([name, ck, "--device", "cuda:abc"], "--device"), ([name, ck, "--dtype", "float16"], "--dtype"),
            ([name, ck, "--samples", "0"], "--samples"), ([name, ck, "--samples", "-3"], "--samples"),
            ([name, ck, "--samples", "abc"], "--samples"), ([name, ck, "--seed", "-1"], "--seed"),
            ([name, ck, "--data", "bogus"], "--data"), ([name, ck, "--data", "client:99"], "--data"),
            ([name, ck, "--bogus"], "--bogus"),
        ]
        if not torch.cuda.is_available():
            cases.append(([name, ck, "--device", "cuda"], "--device"))
        if name != "hessian":                        # the shared checks once by default, for every probe in test-all
            cases[first:] = [pytest.param(*c, marks=pytest.mark.slow) for c in cases[first:]]
        common = {"--data", "--samples", "--seed", "--dtype", "--device", "--data-dir", "--json", "--plot", "-h"}
        for act in sp._actions:                      # the probe's own flags: their declared types and choices
            if not act.option_strings or act.option_strings[0] in common or act.nargs == 0:
                continue
            f = act.option_strings[0]
            if act.choices:
                cases.append(([name, ck, f, "bogus"], f))
            base, rule = getattr(act.type, "base", act.type), getattr(act.type, "rule", {})
            if base is int:
                cases += [([name, ck, f, "abc"], f), ([name, ck, f, "2.5"], f), ([name, ck, f, "-1"], f)]
            if base is float:
                cases += [([name, ck, f, "abc"], f), ([name, ck, f, "nan"], f), ([name, ck, f, "inf"], f)]
            if base in (int, float) and rule.get("lo") is not None:        # just below a declared range
                cases.append(([name, ck, f, str(rule["lo"] - 1)], f))
            if base in (int, float) and rule.get("hi") is not None:
                cases.append(([name, ck, f, str(rule["hi"] * 10 + 1)], f))
    return cases


PROBE = probe_cases()


def _id(c):
    return " ".join((c.values if hasattr(c, "values") else c)[0])


@pytest.mark.parametrize("argv, needle", PROBE, ids=[_id(c) for c in PROBE])
def test_probe(world, monkeypatch, argv, needle):
    argv = [str(world / a) if i == 1 else a for i, a in enumerate(argv)]
    argv = [str(world / a) if i > 1 and argv[i - 1] in ("--json", "--plot") else a for i, a in enumerate(argv)]
    assert_refused(probe.main, argv, needle, world, monkeypatch)


# ---- theory ------------------------------------------------------------------------------------------------
THEORY = [([], "paper"), (["nosuchpaper"], "nosuchpaper"), (["fedcm", "--seed", "-1"], "--seed"),
          (["fedcm", "--seed", "abc"], "--seed"), (["fedcm", "--bogus"], "--bogus"),
          (["all", "--out", "afile"], "--out"), (["fedcm", "--out", "afile/below"], "--out"),
          (["fedcm", "--quick", "3"], "3"), (["fedcm", "--out", "/proc/x"], "/proc"), (["fedcm", "--out", ""], "--out"),
          (["fedcm", "--seed", str(2**70)], "--seed"), (["fedcm", "--seeds", "0"], "--seeds")]


@pytest.mark.parametrize("argv, needle", THEORY, ids=[" ".join(a) or "none" for a, _ in THEORY])
def test_theory(world, monkeypatch, argv, needle):
    assert_refused(theory_cli.main, argv, needle, world, monkeypatch)


# ---- explicit zeros: a value like any other (refused here: out of range, or unable to act) -----------------------
ZEROS = [(["hessian", "run", "--max-iter", "0"], "--max-iter"), (["hessian", "run", "--products", "0"], "--products"),
         (["hessian", "run", "--per-layer", "--products", "0"], "--products"), (["hessian", "run", "--top-k", "0"],
                                                                                "--top-k"),
         (["trace", "run", "--tol", "0"], "--tol"), (["trace", "run", "--products", "0"], "--products"),
         (["density", "run", "--steps", "0"], "--steps"), (["density", "run", "--vectors", "0"], "--vectors"),
         (["sharpness", "run", "--steps", "0"], "--steps"), (["sharpness", "run", "--step-size", "0"], "--step-size"),
         (["hessian", "run", "--bn-batch", "0"], "--bn-batch"), (["hessian", "run", "--samples", "0"], "--samples")]


@pytest.mark.parametrize("argv, needle", ZEROS, ids=[" ".join(a) for a, _ in ZEROS])
def test_explicit_zeros(world, monkeypatch, argv, needle):
    assert_refused(probe.main, [argv[0], str(world / argv[1]), *argv[2:]], needle, world, monkeypatch)


# ---- sweep, report, compare --------------------------------------------------------------------------------------
SWEEP_FILES = {
    "grid_missing": ("base: {dataset: digits}\n", "grid"),
    "grid_empty": ("grid: {seed: []}\n", "grid"),
    "bad_value": ("grid: {lr: [0.1, fast]}\n", "lr"),
    "unknown_key": ("grid: {seed: [0]}\nextra: 1\n", "extra"),
    "not_yaml": ("grid: [\n", "yaml"),
    "unused_rho": ("base: {rho: 0.1}\ngrid: {algo: [fedavg]}\n", "rho"),
    "probe_unknown": ("grid: {seed: [0]}\nprobes: [bogus]\n", "bogus"),
    "probe_flag": ("grid: {seed: [0]}\nprobes: [\"hessian --top-k 0\"]\n", "--top-k"),
    "probe_cannot_act": ("grid: {seed: [0]}\nprobes: [\"trace --tol 0.5\"]\n", "--tol"),
    "probe_zero": ("grid: {seed: [0]}\nprobes: [\"sharpness --steps 0\"]\n", "--steps"),
    "probe_client": ("grid: {seed: [0]}\nprobes: [\"hessian --data client:-1\"]\n", "--data"),
    "probe_json": ("grid: {seed: [0]}\nprobes: [\"hessian --json x.json\"]\n", "--json"),
    "resources": ("grid: {seed: [0]}\nresources: {num_cpus: -1}\n", "resources"),
}


def sweep_cases(world):
    d = world / "sweeps"
    d.mkdir(exist_ok=True)
    cases = []
    for name, (text, needle) in SWEEP_FILES.items():
        (d / f"{name}.yaml").write_text(text)
        cases.append(([str(d / f"{name}.yaml"), "--out", str(world / "sw")], needle))
    (d / "ok.yaml").write_text("base: {dataset: digits, model: logreg, rounds: 1}\ngrid: {seed: [0]}\n")
    ok = str(d / "ok.yaml")
    cases += [([str(d / "missing.yaml"), "--out", str(world / "sw")], "missing.yaml"),
              ([str(world / "afile"), "--out", str(world / "sw")], "afile"),
              ([ok, "--out", str(world / "afile")], "--out"), ([ok, "--out", str(world / "afile/below")], "--out"),
              ([ok, "--out", ""], "--out"), ([ok, "--out", "/proc/sw"], "/proc"),
              ([ok, "--out", str(world / "sw"), "--workers", "0"], "--workers"),
              ([ok, "--out", str(world / "sw"), "--workers", "x"], "--workers"),
              ([ok, "--out", str(world / "sw"), "--backend", "bogus"], "--backend"),
              ([ok, "--out", str(world / "sw"), "--address", "x:1"], "--address")]
    return cases


def test_sweep(world, monkeypatch):
    for argv, needle in sweep_cases(world):
        assert_refused(sweep.main, argv, needle, world, monkeypatch)


def test_report_and_compare(world, monkeypatch):
    import shutil
    runs = world / "runs_only"
    if not runs.exists():
        runs.mkdir()
        shutil.copytree(world / "run", runs / "a", ignore=shutil.ignore_patterns("ckpt"))
    run = str(world / "run")
    cases = [
        (report.main, [str(world / "missing")], "missing"), (report.main, [str(world / "afile")], "afile"),
        (report.main, [str(world / "nonrun")], "no finished runs"),
        (report.main, [str(runs), "--out", str(world / "afile/x")], "--out"),
        (report.main, [str(runs), "--out", str(world / "nodir/x.md")], "--out"),
        (report.main, [str(runs), "--out", str(world / "yaml")], "--out"),
        (report.main, [str(runs), "--last-k", "0"], "--last-k"),
        (report.main, [str(runs), "--digits", "-1"], "--digits"),
        (report.main, [str(runs), "--format", "xls"], "--format"),
        (report.main, [str(runs), "--rows", "bogus"], "bogus"),
        (report.main, [str(runs), "--metric", "bogus", "--no-plot"], "bogus"),
        (report.main, [str(world)], "config.json"),                # holds badconfig/, whose config.json is damaged
        (compare.main, [str(world / "missing")], "missing"), (compare.main, [str(world / "nonrun")], "nonrun"),
        (compare.main, [str(world / "badconfig")], "config.json"), (compare.main, [run, str(world / "badmetrics")],
                                                                    "metrics.jsonl"),
        (compare.main, [run, "--plot", str(world / "c.xyz")], "--plot"),
        (compare.main, [run, "--plot", str(world / "nodir/c.png")], "--plot"),
        (compare.main, [run, "--plot", ""], "--plot"), (compare.main, [], "RUN_OR_DIR"),
    ]
    for main, argv, needle in cases:
        assert_refused(main, argv, needle, world, monkeypatch)


def test_the_fuzz_is_several_hundred_cases():
    n = len(TRAIN) + 2 * len(YAML) + len(PROBE) + len(THEORY) + len(ZEROS) + len(SWEEP_FILES)
    assert n >= 300, n
