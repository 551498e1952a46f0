"""FedInit Sec. 5.1's heterogeneity noise (fedlab_analysis/data/noise.py, RunConfig.het_noise): the map against a
hand computation in float64, its draws, off = bit-identical, refusals, and a pack that shares its data."""
import dataclasses

import pytest
import torch

from fedlab_analysis.config import RunConfig
from fedlab_analysis.data import Dataset, heterogeneity_noise
from fedlab_analysis.data import noise as N
from fedlab_analysis.errors import UserError
from fedlab_analysis.trainers.engine import Run
from fedlab_analysis.trainers.loop import train
from fedlab_analysis.trainers.pack import Job, train_pack

M, S = 0.1307, 0.3081                                 # MNIST's MEAN_STD


def tiny(p):
    """An 'mnist' data set of 1x1 images with raw pixels ``p`` (classes 0, 1, 1, 0), normalised as the loader does."""
    z = ((torch.tensor(p, dtype=torch.float64) - M) / S).view(-1, 1, 1, 1)
    ds = Dataset.from_tensors(z, torch.tensor([0, 1, 1, 0]), z[:2].clone(), torch.tensor([0, 1]), n_classes=2)
    return dataclasses.replace(ds, name="mnist")


def test_the_map_against_a_hand_computation(monkeypatch):
    monkeypatch.setattr(N, "draws", lambda s, n, c, ch, g: (torch.tensor([[1.5], [0.5]], dtype=torch.float64),
                                                            torch.tensor([[0.1, -0.2], [0.3, -0.4]],
                                                                         dtype=torch.float64)))
    ds = tiny([0.5, 0.5, 0.2, 1.0])
    out = heterogeneity_noise(ds, [[0, 2], [1]], 0.3, torch.Generator())     # sample 3 is on no client
    raw = out.x_train.view(-1) * S + M
    # sample 0: client 0 (gain 1.5), its class 0 (+0.1): 1.5 * 0.5 + 0.1 = 0.85; sample 1: client 1 (0.5), its
    # class 1 (-0.4): 0.5 * 0.5 - 0.4 = -0.15; sample 2: client 0, its class 1 (-0.2): 1.5 * 0.2 - 0.2 = 0.1;
    # sample 3: untouched
    assert raw.tolist() == pytest.approx([0.85, -0.15, 0.1, 1.0], abs=1e-12)
    assert torch.equal(out.x_test, ds.x_test) and torch.equal(ds.x_train.view(-1) * S + M,
                                                              torch.tensor([0.5, 0.5, 0.2, 1.0], dtype=torch.float64))


def test_the_draws_are_gaussian_and_seeded():
    g = lambda: torch.Generator().manual_seed(3)                                     # noqa: E731
    gain, off = N.draws(0.2, 20000, 2, 1, g())
    assert off.shape == (20000, 2)                                                    # per (client, class)
    assert gain.mean().item() == pytest.approx(1.0, abs=0.01) and gain.std().item() == pytest.approx(0.2, rel=0.03)
    assert off.mean().item() == pytest.approx(0.0, abs=0.01) and off.std().item() == pytest.approx(0.2, rel=0.03)
    assert torch.equal(N.draws(0.2, 5, 3, 3, g())[0], N.draws(0.2, 5, 3, 3, g())[0])
    assert N.draws(0.2, 5, 3, 3, g())[0].shape == (5, 3)                              # RGB: a gain per channel


def test_the_label_is_not_written_into_the_images(monkeypatch):
    """Digit-like images (ink in the centre, background 0) on 100 clients, Dir-0.1. One background pixel names the
    class of about 1 in 10 clean training images, and of under 1 in 4 noisy ones (0.17: a class lives on few
    clients). One offset per class shared by every client (the broken form) writes the label into every pixel: that
    pixel then names every image's class."""
    from fedlab_analysis.data import partition
    g = torch.Generator().manual_seed(0)
    p = torch.zeros(6000, 1, 28, 28, dtype=torch.float64)
    p[:, :, 8:20, 8:20] = torch.rand(6000, 1, 12, 12, generator=g, dtype=torch.float64)
    y = torch.randint(0, 10, (6000,), generator=g)
    z = (p - M) / S
    ds = dataclasses.replace(Dataset.from_tensors(z, y, z[:10].clone(), y[:10].clone(), n_classes=10), name="mnist")
    part = partition("dirichlet", y, 100, 10, 0, alpha=0.1)
    noisy = heterogeneity_noise(ds, part.indices, 0.2, torch.Generator().manual_seed(0))
    assert N.background_decodes(ds, part.indices) < 0.12 and N.background_decodes(noisy, part.indices) < 0.25
    shared = N.draws
    monkeypatch.setattr(N, "draws", lambda *a: (lambda gain, off: (gain, off[:1].expand_as(off)))(*shared(*a)))
    leaky = heterogeneity_noise(ds, part.indices, 0.2, torch.Generator().manual_seed(0))
    assert N.background_decodes(leaky, part.indices) > 0.99


def test_refusals():
    ds = tiny([0.5, 0.5, 0.2, 1.0])
    with pytest.raises(UserError, match="more than one client"):
        heterogeneity_noise(ds, [[0, 1], [1, 2]], 0.2, torch.Generator())
    with pytest.raises(UserError, match="needs an image data set"):
        heterogeneity_noise(dataclasses.replace(ds, name="digits"), [[0], [1]], 0.2, torch.Generator())


BASE = dict(dataset="mnist", model="mlp", model_kwargs={"widths": [8]}, clients=4, active_ratio=1.0, local_steps=2,
            batch_size=16, lr=0.05, rounds=1, eval_train_samples=100, eval_samples=100, client_parallel="vmap",
            quiet=True)


def test_a_run_with_noise_changes_only_its_clients_training_images():
    plain, noisy = Run(RunConfig(**BASE)), Run(RunConfig(**BASE, het_noise=0.2))
    assert torch.equal(plain.X, plain.ds.x_train) and torch.equal(noisy.Xte, plain.Xte)
    held = torch.cat(noisy.idx)
    assert not torch.equal(noisy.X[held], plain.X[held])
    raw = lambda r, i: (r.X[i].double() * S + M).view(-1)                             # noqa: E731
    i, j = [int(k) for k in noisy.idx[0][:2]]
    # one client, one gain; the offset is the sample's class's: p' = g p + b is affine per (client, class)
    ci = [int(k) for k in noisy.idx[0] if plain.Y[k] == plain.Y[i]][:2]
    a, b = (raw(noisy, k) for k in ci)
    pa, pb = (raw(plain, k) for k in ci)
    gain = (a - b)[(pa - pb).abs() > 0.5] / (pa - pb)[(pa - pb).abs() > 0.5]
    assert gain.max() - gain.min() < 1e-5 and j >= 0


def test_noise_off_is_bit_identical_and_a_pack_keeps_its_shared_data():
    """het_noise = 0 trains exactly as before (the same weights, bit for bit); a packed noisy run beside a plain
    one equals each alone, so the noise never reaches the data the pack shares."""
    a, b = train(RunConfig(**BASE)), train(RunConfig(**BASE, het_noise=0.0))
    assert torch.equal(a.w, b.w)
    cfgs = [RunConfig(**BASE).validate(), RunConfig(**BASE, het_noise=0.3).validate()]
    outs = train_pack([Job(c) for c in cfgs])
    alone = [train(c) for c in cfgs]
    assert [o.status for o in outs] == ["done"] * 2
    for o, r in zip(outs, alone):
        assert ((o.run.w - r.w).norm() / r.w.norm()).item() < 1e-5
    assert ((alone[0].w - alone[1].w).norm() / alone[0].w.norm()).item() > 1e-3     # the noise moved the run
