"""benchmarks/gpu_check.sh: a failing or hanging step is recorded in the one table and the check goes on; each step's
peak memory is read in its own process; the fake CIFAR-10 files load through the package; the whole --smoke run
passes end to end (slow)."""
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks/gpu_check.py")
gc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gc)


def test_failing_and_hanging_steps_are_recorded_and_the_check_goes_on(tmp_path):
    steps = [gc.Step("fails", ["-c", "import sys; print('boom'); sys.exit(3)"], 30, wrap=False),
             gc.Step("hangs", ["-c", "import time; print('start', flush=True); time.sleep(60)"], 2, wrap=False),
             gc.Step("works", ["-c", "print('fine')"], 30)]
    with open(tmp_path / "log", "w") as log:
        for s in steps:
            s.run(sys.executable, log, tmp_path, budget_left=100)
    assert steps[0].status == "FAILED (exit 3)" and steps[0].result == "boom"
    assert steps[1].status.startswith("TIMEOUT") and steps[1].seconds < 30 and "start" in steps[1].output
    assert steps[2].status == "ok" and steps[2].peak["rss_mib"] > 0 and steps[2].peak["gpu_mib"] is None
    text = gc.table(steps, smoke=True, seconds=1.0)
    rows = [s for s in text.splitlines() if s.startswith("| ") and not s.startswith("| step")]
    assert [r.split(" | ")[1] for r in rows[:3]] == ["FAILED (exit 3)", "TIMEOUT after 2 s", "ok"]
    assert "1 of 3 steps ok" in text
    log = (tmp_path / "log").read_text()
    assert "===== hangs" in log and "----- works: ok" in log


def test_the_budget_leaves_later_steps_not_run_rather_than_overrunning(tmp_path):
    s = gc.Step("slow", ["-c", "import time; time.sleep(30)"], 300, wrap=False)
    with open(tmp_path / "log", "w") as log:
        s.run(sys.executable, log, tmp_path, budget_left=1.5)
    assert s.status == "TIMEOUT after 2 s" or s.status.startswith("TIMEOUT")


def test_round_speed_rows_and_goals_are_read_from_the_table():
    out = ("head\n| model | P | algorithm | setting | K | reference s/round | loop s/round | vmap s/round | "
           "vmap+compile s/round | floor s/round | client-steps/s (best) | speed-up loop | speed-up vmap | "
           "speed-up compile | best possible (reference / floor) | peak MiB ref / loop / vmap / compile |\n"
           "|---|\n"
           "| resnet18gn | 11 | fedavg | equal: 10 fixed | 50 | 6.000 | 2.000 | 0.080 | not run | 1.5 | 6250 | "
           "3.00x | 75.00x |  | 4.00x | 900 / 800 / 3000 / - |\n"
           "| resnet18gn | 11 | fedsam | equal: 10 fixed | 50 | 12.000 | 4.000 | 0.200 | not run | 3.0 | 2500 | "
           "3.00x | 60.00x |  | 4.00x | 900 / 800 / 3000 / - |\n")
    s = gc.Step("round_speed", [], 1)
    s.output = out
    assert "fedavg: s/round reference 6.000, loop 2.000, vmap 0.080" in gc.parse_speed(s)
    g = gc.goals([s])
    assert "0.080 s/round (met" in g and "75.0x the reference (met" in g and "fedsam 2.50x FedAvg (NOT met" in g
    s.rows[0]["vmap s/round"] = "0.150"                          # a slower FedAvg fails the 0.1 s goal
    assert "0.150 s/round (NOT met" in gc.goals([s])
    c = gc.Step("compile", [], 1)                                # compiled rows: the equal fp32 one counts,
    c.output = out.split("| resnet18gn | 11 | fedavg")[0] + (    # papers' and lower-precision rows are reported
        "| resnet18gn | 11 | fedavg | papers: 9/11 active | E=5 | not run | not run | not run | 0.050 | not run | "
        "1 |  |  |  |  | - |\n"
        "| resnet18gn | 11 | fedavg (bf16) | equal: 10 fixed | 50 | not run | not run | not run | 0.040 | not run | "
        "1 |  |  |  |  | - |\n")
    gc.parse_speed(c)
    g = gc.goals([s, c])
    assert "FedAvg best of ours 0.150 s/round (NOT met" in g
    assert "fedavg (bf16) 0.040 s/round" in g and "fedavg in the papers' setting 0.050 s/round" in g


def test_pytest_summary_is_read():
    s = gc.Step("t", [], 1)
    s.output = "....F\nFAILED tests/test_x.py::test_cuda_y - boom\n1 failed, 4 passed, 3 deselected in 2.1s\n"
    assert gc.parse_pytest(s) == "1 failed, 4 passed, 3 deselected; failing: tests/test_x.py::test_cuda_y"


def test_fake_cifar10_loads_through_the_package(tmp_path):
    from fedlab_analysis.data import load_dataset
    ds = load_dataset("cifar10", data_dir=str(gc.fake_cifar10(tmp_path, 50, 10)))
    assert tuple(ds.x_train.shape) == (50, 3, 32, 32) and len(ds.y_test) == 10 and ds.augmentable


def test_gpu_test_selection_skips_cpu_side_device_checks():
    files = gc.cuda_test_files()
    assert "tests/test_parallel.py" in files
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", "-m", "",
                        "-k", gc.CUDA_TESTS, "tests/test_parallel.py"], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    ids = [s for s in r.stdout.splitlines() if "::" in s]
    assert ids and all("cuda" in s for s in ids) and not any("without_cuda" in s for s in ids)


def test_one_step_writes_the_table_to_out(tmp_path):
    """The cheap version of the smoke run: the environment step alone, through main(), into --out."""
    assert gc.main(["--smoke", "--only", "1", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "gpu_check.md").read_text()
    assert "| environment | ok |" in text and "torch" in text and (tmp_path / "gpu_check.log").exists()


@pytest.mark.slow
def test_smoke_run_end_to_end(tmp_path):
    """Every step of the GPU check at tiny size on the CPU (about 40 s of CPU; the wall clock depends on the load)."""
    r = subprocess.run(["bash", "benchmarks/gpu_check.sh", "--smoke", "--out", str(tmp_path)], cwd=ROOT,
                       capture_output=True, text=True, env={**os.environ, "PYTHON": sys.executable}, timeout=900)
    text = (tmp_path / "gpu_check.md").read_text()
    assert r.returncode == 0, text
    rows = [s for s in text.splitlines() if s.startswith("| ") and not s.startswith("| step")]
    assert len(rows) == 12 and all(" | ok | " in s for s in rows[:11])
    assert "last.pt" in rows[2] and "eigenvalues" in rows[3] and "fedsmoo" in rows[5] and "fedsmoo" in rows[8]
    assert "fedavg: s/round compile" in rows[6] and "reference" in rows[7] and "ms a step packed" in rows[9]
    assert "fedavg (bf16): s/round vmap" in rows[10]


def test_smoke_without_out_writes_only_under_its_own_temporary_folder(monkeypatch, capsys):
    """The committed benchmarks/gpu_check.md holds GPU measurements: a smoke run never replaces it."""
    monkeypatch.delenv("OUT", raising=False)
    committed = {p: p.read_bytes() for p in (ROOT / "benchmarks").glob("gpu_check.*") if p.is_file()}
    log = ROOT / "benchmarks" / "gpu_check.log"
    had_log = log.exists()
    try:
        assert gc.main(["--smoke", "--only", "1"]) == 0
        assert {p: p.read_bytes() for p in (ROOT / "benchmarks").glob("gpu_check.*") if p.is_file()} == committed
        where = Path(capsys.readouterr().out.strip().splitlines()[-1].split("-> ")[1].split(",")[0]).parent
        assert where.parent == Path(tempfile.gettempdir()) and where.name.startswith("gpu_check-smoke-")
        assert (where / "gpu_check.md").is_file() and (where / "gpu_check.log").is_file()
        shutil.rmtree(where)
    finally:
        for p, b in committed.items():           # a failing run must not leave the committed record overwritten
            p.write_bytes(b)
        if not had_log:
            log.unlink(missing_ok=True)              # a failing run's, never committed
