"""benchmarks/reference_sim.py is a correct simulator-style loop: with the same start, data and minibatch order, its
FedAvg round equals the trainer's (so the round benchmark compares like with like), and every algorithm runs."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from fedlab_analysis.config import RunConfig
from fedlab_analysis.data import Dataset
from fedlab_analysis.models import build_model
from fedlab_analysis.trainers.engine import Run

_spec = importlib.util.spec_from_file_location("reference_sim",
                                               Path(__file__).parents[1] / "benchmarks/reference_sim.py")
reference_sim = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reference_sim)


def client_data(n=40, d=6, C=3, seed=0, dtype=np.float64):
    g = np.random.default_rng(seed)
    return g.normal(size=(n, d)).astype(dtype), g.integers(0, C, size=n).astype(np.int64)


CODE_FORMS = dict(lesam_source="last_global_update", smoo_server="code", fedcm_wd="outside")


def paired(algo, dtype, n_clients, clip, wd, steps=7, B=8):
    """A ReferenceSim fed the trainer's minibatches in the trainer's order, and the trainer's Run, from one start."""
    tdt = torch.float64 if dtype == np.float64 else torch.float32
    make = lambda: build_model("mlp", (6,), 3, seed=5, widths=[16]).to(tdt)   # noqa: E731
    clients = [client_data(seed=s, dtype=dtype) for s in range(n_clients)]
    cfg = RunConfig(algo=algo, model="mlp", model_kwargs={"widths": [16]}, partition="natural", active_ratio=1.0,
                    local_steps=steps, batch_size=B, lr=0.1, lr_decay=1.0, wd=wd, clip=clip, rho=0.05, lamb=0.1,
                    alpha=0.3, dtype="float64" if dtype == np.float64 else "float32", eval_train_samples=10,
                    quiet=True, **CODE_FORMS)
    n = len(clients[0][0])

    class SameOrder(reference_sim.ReferenceSim):
        def loader(self, i):
            xs, ys = self.clients[i]
            order = [(b - i * n).tolist() for b in run.round_ctx(self.t).batches[i]]
            return DataLoader(TensorDataset(torch.from_numpy(xs), torch.from_numpy(ys)), batch_sampler=order)

    sim = SameOrder(algo, make, clients, active=n_clients, local_steps=steps, batch_size=B, lr=0.1, clip=clip,
                    wd=wd, rho=0.05, lamb=0.1, alpha=0.3)
    start = make()
    reference_sim.load_flat(start, sim.w)
    x, y = np.concatenate([c[0] for c in clients]), np.concatenate([c[1] for c in clients])
    ds = Dataset.from_tensors(x, y, x[:5], y[:5], natural_clients=[np.arange(i * n, (i + 1) * n)
                                                                   for i in range(n_clients)])
    run = Run(cfg, dataset=ds, init=dict(start.named_parameters()))
    assert torch.equal(run.w, sim.w.to(run.w.dtype))
    return sim, run


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-12), (np.float32, 1e-6)])
def test_fedavg_round_equals_the_trainer(dtype, tol):
    """The benchmark's premise: one client, clip 0, wd 0, no augmentation, the same minibatch order."""
    sim, run = paired("fedavg", dtype, n_clients=1, clip=0.0, wd=0.0)
    for _ in range(2):
        w0 = run.w.clone()
        run.round()
        sim.round()
        assert (run.w - sim.w).abs().max() <= tol
    assert (run.w - w0).abs().max() > 1e-3                             # the round really moved the model


@pytest.mark.parametrize("algo", reference_sim.ALGOS)
def test_every_algorithm_equals_the_trainers_code_form(algo):
    """Two clients, three rounds, clipping active, weight decay on: each simulator-style rule equals the trainer with
    the code-form flags (last global update for FedLESAM, mean mu_i for FedSMOO's s, wd outside FedCM's mixing)."""
    sim, run = paired(algo, np.float64, n_clients=2, clip=0.3, wd=1e-3)
    for _ in range(3):
        run.round()
        sim.round()
        assert (run.w - sim.w).abs().max() <= 1e-10, algo


@pytest.mark.parametrize("algo", reference_sim.ALGOS)
def test_every_algorithm_runs_two_rounds(algo):
    clients = [client_data(n=12, seed=s, dtype=np.float32) for s in range(4)]
    sim = reference_sim.ReferenceSim(algo, lambda: build_model("mlp", (6,), 3, widths=[8]), clients, active=2,
                                     local_steps=3, batch_size=5, seed=1)
    w0 = sim.w.clone()
    sim.round(), sim.round()
    assert sim.t == 2 and torch.isfinite(sim.w).all() and (sim.w - w0).abs().max() > 0


def test_augmentation_keeps_shape_and_moves_pixels():
    g = np.random.default_rng(0)
    x = g.normal(size=(6, 3, 8, 8)).astype(np.float32)
    ds = reference_sim.AugmentedImages(x, np.zeros(6, dtype=np.int64), np.random.default_rng(1))
    out = np.stack([ds[i][0].numpy() for i in range(6) for _ in range(4)])
    assert out.shape == (24, 3, 8, 8)
    assert any(not np.array_equal(o, x[k // 4]) for k, o in enumerate(out))


@pytest.mark.parametrize("algo", ["fedavg", "scaffold", "fedcm"])
def test_local_epochs_with_unequal_clients_equal_the_trainer(algo):
    """The papers' setting in the reference: E local epochs over clients of unequal size (K_i = E ceil(n_i / B),
    the last batch of an epoch partial), SCAFFOLD's c_i and FedCM's Delta divided by each client's own K_i."""
    make = lambda: build_model("mlp", (6,), 3, seed=5, widths=[16]).to(torch.float64)   # noqa: E731
    sizes = [40, 25, 13]
    clients = [client_data(n=n, seed=s) for s, n in enumerate(sizes)]
    off = np.cumsum([0, *sizes])
    cfg = RunConfig(algo=algo, model="mlp", model_kwargs={"widths": [16]}, partition="natural", active_ratio=1.0,
                    local_epochs=2, batch_size=8, lr=0.1, lr_decay=1.0, wd=1e-3, clip=0.3, alpha=0.3,
                    dtype="float64", eval_train_samples=10, quiet=True, **CODE_FORMS)

    class SameOrder(reference_sim.ReferenceSim):
        def loader(self, i):
            xs, ys = self.clients[i]
            order = [(b - int(off[i])).tolist() for b in run.round_ctx(self.t).batches[i]]
            return DataLoader(TensorDataset(torch.from_numpy(xs), torch.from_numpy(ys)), batch_sampler=order)

    sim = SameOrder(algo, make, clients, active=3, local_epochs=2, batch_size=8, lr=0.1, clip=0.3, wd=1e-3,
                    alpha=0.3)
    assert [sim.steps(i) for i in range(3)] == [10, 8, 4]
    start = make()
    reference_sim.load_flat(start, sim.w)
    x, y = np.concatenate([c[0] for c in clients]), np.concatenate([c[1] for c in clients])
    ds = Dataset.from_tensors(x, y, x[:5], y[:5], natural_clients=[np.arange(off[i], off[i + 1]) for i in range(3)])
    run = Run(cfg, dataset=ds, init=dict(start.named_parameters()))
    assert run.round_ctx(0).K.tolist() == [10, 8, 4]
    for _ in range(3):
        run.round()
        sim.round()
        assert (run.w - sim.w).abs().max() <= 1e-10, algo
