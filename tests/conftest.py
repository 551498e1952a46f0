import os

os.environ.setdefault("MPLBACKEND", "Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)            # tiny models: one thread is several times faster than two


@pytest.fixture
def tiny_cfg():
    """A seconds-fast digits run: 6 clients, 2 local steps of 16 samples, logistic regression."""
    from fedlab_analysis.config import RunConfig

    def make(**kw):
        base = dict(algo="fedavg", dataset="digits", model="logreg", clients=6, active_ratio=0.5, rounds=3,
                    local_steps=2, batch_size=16, lr=0.1, partition="dirichlet", dir_alpha=0.5, seed=1,
                    eval_train_samples=200, quiet=True)
        return RunConfig(**{**base, **kw})
    return make


def _mount(path, options: str) -> bool:
    import subprocess
    path.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                          capture_output=True).returncode == 0


@pytest.fixture
def small_disk(tmp_path):
    """``make(kib)``: a folder on a tmpfs of that size (a real full disk), or skip where the machine cannot mount."""
    import subprocess
    mounted = []

    def make(kib: int, name: str = "disk"):
        d = tmp_path / name
        if not _mount(d, f"size={kib}k"):
            pytest.skip("cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN)")
        mounted.append(d)
        return d
    yield make
    for d in mounted:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)


@pytest.fixture
def unwritable_dir(tmp_path):
    """An existing folder nothing can be written in: a read-only tmpfs (root), else a folder without write
    permission (where permission bits hold)."""
    import subprocess
    d = tmp_path / "readonly"
    if os.geteuid() == 0:
        if not _mount(d, "ro,size=64k"):
            pytest.skip("root cannot mount a read-only tmpfs here")
        yield d
        subprocess.run(["umount", "-l", str(d)], capture_output=True)
    else:
        d.mkdir()
        d.chmod(0o500)
        yield d
        d.chmod(0o700)


def fill(folder) -> None:
    """Fill the disk holding ``folder`` to the last byte."""
    with open(os.path.join(folder, "filler"), "wb", buffering=0) as fh:
        for size in (1 << 16, 4096, 1):
            try:
                while True:
                    fh.write(b"\0" * size)
            except OSError:
                pass


def kill_in_round(monkeypatch, task: dict, t: int) -> None:
    """Train ``task`` through the figures' run cache (``paper_figures.runs.ensure``) and kill it in round ``t``, as
    a killed worker would: the entry keeps its last checkpoint before round ``t``. The hooks are restored after."""
    from paper_figures import entry as E
    from paper_figures import runs as R

    def kill(event, run, ctx, x):
        if event == "round" and run.t == t:
            raise KeyboardInterrupt
    with monkeypatch.context() as m:
        m.setattr(E, "hooks_for", lambda tag, seed: [kill])
        with pytest.raises(KeyboardInterrupt):
            R.ensure(task)
