"""Partitions: exact agreement of the vectorised sequential sampler with a plain loop of the FL-Simulator
rule, coverage, count matrices, determinism, and input validation."""
import matplotlib

matplotlib.use("Agg")
import numpy as np
import pytest
from matplotlib.figure import Figure

from fedlab_analysis.data import PARTITIONS, partition, partitions, plot_partition
from fedlab_analysis.errors import UserError


def imbalanced_labels(n, n_classes, seed, empty=()):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(n_classes))
    p[list(empty)] = 0
    return rng.choice(n_classes, size=n, p=p / p.sum())


def simulator_loop(labels, n_clients, n_classes, seed, replacement, alpha=None, c=None):
    """The FL-Simulator ``DatasetObject`` loop, one draw at a time, with the documented random streams:
    order = permutation; priors (Dir(alpha) or c random classes); client/class streams = rng.spawn(2)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(labels.size)
    if alpha is not None:
        priors = rng.dirichlet(np.full(n_classes, float(alpha)), size=n_clients)
    else:
        chosen = np.argsort(rng.random((n_clients, n_classes)), axis=1)[:, :c]
        priors = np.zeros((n_clients, n_classes))
        np.put_along_axis(priors, chosen, 1.0 / c, axis=1)
    pool = [list(order[labels[order] == k]) for k in range(n_classes)]
    size = [len(p) for p in pool]
    amount = list(size)  # the simulator's cls_amount
    alive = np.array([s > 0 for s in size])
    client_rng, class_rng = rng.spawn(2)
    room = [labels.size // n_clients] * n_clients  # the simulator's client_data_list
    out = [[] for _ in range(n_clients)]
    while sum(room) != 0:
        i = int(client_rng.random() * n_clients)
        if room[i] <= 0:
            continue
        room[i] -= 1
        while True:
            p = priors[i] * alive
            if p.sum() == 0:
                p = np.array(size) * alive
            cdf = np.cumsum(p) / np.cumsum(p)[-1]
            k = int(np.searchsorted(cdf, class_rng.random(), side="right"))
            if amount[k] <= 0:  # replacement: refill the counter and redraw
                assert replacement
                amount[k] = size[k]
                continue
            amount[k] -= 1
            out[i].append(pool[k][size[k] - 1 - amount[k]])
            if not replacement and amount[k] == 0:
                alive[k] = False
            break
    return out


@pytest.mark.parametrize("replacement", [True, False])
@pytest.mark.parametrize("rule", ["dirichlet-0.1", "dirichlet-1", "pathological-2"])
def test_sequential_sampler_equals_simulator_loop(rule, replacement, monkeypatch):
    name, arg = rule.split("-")
    cases = [(imbalanced_labels(1500, 10, 1), 12, 10), (imbalanced_labels(600, 6, 2, empty=[4]), 7, 6)]
    for labels, n_clients, n_classes in cases:
        for seed in range(3):
            kw = {"alpha": float(arg)} if name == "dirichlet" else {"c": int(arg)}
            want = simulator_loop(labels, n_clients, n_classes, seed, replacement, **kw)
            opt = {"alpha": float(arg)} if name == "dirichlet" else {"classes_per_client": int(arg)}
            for chunk in (8192, 37):  # chunk boundaries must not change the draws
                monkeypatch.setattr(partitions, "_CHUNK", chunk)
                got = partition(name, labels, n_clients, n_classes, seed, replacement=replacement, **opt)
                assert len(got.indices) == n_clients
                for a, b in zip(want, got.indices):
                    np.testing.assert_array_equal(a, b)


def test_replacement_refills_and_repeats_samples():
    # 3 classes, one tiny: clients that favour it exhaust it and the refill repeats its samples
    labels = np.array([0] * 200 + [1] * 200 + [2] * 10)
    part = partition("dirichlet", labels, 10, 3, seed=0, alpha=0.3, replacement=True)
    drawn = np.concatenate(part.indices)
    assert drawn.size == 10 * (410 // 10)
    assert part.counts[:, 2].sum() > 10  # more class-2 draws than class-2 samples ...
    assert set(drawn[labels[drawn] == 2]) <= set(range(400, 410))  # ... all of them the 10 real ones
    exact = partition("dirichlet", labels, 10, 3, seed=0, alpha=0.3, replacement=False)
    assert np.array_equal(exact.counts.sum(0), [200, 200, 10])


def test_dirichlet_class_shares_follow_the_prior():
    # with replacement each client's classes are iid draws from its prior p_i ~ Dir(alpha): counts/n ~ p_i
    labels = np.repeat(np.arange(5), 4000)
    n_clients, seed = 8, 3
    part = partition("dirichlet", labels, n_clients, 5, seed, alpha=0.5, replacement=True)
    rng = np.random.default_rng(seed)
    rng.permutation(labels.size)
    priors = rng.dirichlet(np.full(5, 0.5), size=n_clients)
    shares = part.counts / part.counts.sum(1, keepdims=True)
    assert np.abs(shares - priors).max() < 0.04  # binomial sd <= sqrt(.25 / 2500) = 0.01


@pytest.mark.parametrize("name", PARTITIONS)
def test_counts_coverage_and_determinism(name):
    labels = imbalanced_labels(1200, 10, 0)  # 1200 = 12 x 100: every rule covers every sample exactly once
    kw = {"labeldir": {"alpha": 0.5}, "dirichlet": {"alpha": 0.3}, "pathological": {"classes_per_client": 3}}
    part = partition(name, labels, 12, 10, seed=7, **kw.get(name, {}))
    assert part.counts.dtype == np.int64 and part.counts.shape == (12, 10)
    for ix, row in zip(part.indices, part.counts):
        assert ix.dtype == np.int64
        np.testing.assert_array_equal(np.bincount(labels[ix], minlength=10), row)
    np.testing.assert_array_equal(part.counts.sum(1), [len(ix) for ix in part.indices])
    np.testing.assert_array_equal(part.counts.sum(0), np.bincount(labels, minlength=10))
    np.testing.assert_array_equal(np.sort(np.concatenate(part.indices)), np.arange(labels.size))
    again = partition(name, labels, 12, 10, seed=7, **kw.get(name, {}))
    other = partition(name, labels, 12, 10, seed=8, **kw.get(name, {}))
    assert all(np.array_equal(a, b) for a, b in zip(part.indices, again.indices))
    assert not all(np.array_equal(a, b) for a, b in zip(part.indices, other.indices))


@pytest.mark.parametrize("name", ["dirichlet", "pathological"])
def test_without_replacement_covers_at_most_once_and_equal_sizes(name):
    labels = imbalanced_labels(1003, 10, 4)  # 1003 = 17 x 59: 0 samples left out, then 17 x 58 + 17
    for n_clients in (17, 10):
        part = partition(name, labels, n_clients, 10, seed=1)
        drawn = np.concatenate(part.indices)
        assert len(np.unique(drawn)) == drawn.size
        assert (part.counts.sum(1) == labels.size // n_clients).all()
        assert (part.counts.sum(0) <= np.bincount(labels, minlength=10)).all()


def test_iid_sorted_shards_shapes():
    labels = np.repeat(np.arange(10), 20)[np.random.default_rng(0).permutation(200)]
    iid = partition("iid", labels, 7, 10, seed=0)
    assert sorted(len(ix) for ix in iid.indices) == [28] * 3 + [29] * 4
    srt = partition("sorted", labels, 5, 10, seed=0)
    flat = np.concatenate([labels[ix] for ix in srt.indices])
    assert (np.diff(flat) >= 0).all()  # contiguous label blocks in client order
    assert (srt.counts > 0).sum(1).tolist() == [2] * 5  # FedALS: 2 classes per client
    shards = partition("shards", labels, 10, 10, seed=0, shards_per_client=2)  # 20 pure shards of 10
    assert ((shards.counts > 0).sum(1) <= 2).all() and (shards.counts.sum(1) == 20).all()
    assert set(np.unique(shards.counts)) <= {0, 10, 20}


def test_pathological_classes_per_client():
    labels = imbalanced_labels(2000, 10, 5)
    for rep in (True, False):
        part = partition("pathological", labels, 20, 10, seed=2, classes_per_client=2, replacement=rep)
        if rep:  # with replacement nothing falls back: each client stays on its 2 classes
            assert ((part.counts > 0).sum(1) <= 2).all()
        assert (part.counts.sum(1) == 100).all()
    one = partition("pathological", labels, 20, 10, seed=2, classes_per_client=1, replacement=True)
    assert ((one.counts > 0).sum(1) == 1).all()


def test_labeldir_min_size_and_failure():
    labels = imbalanced_labels(3000, 10, 6)
    for seed in range(3):
        part = partition("labeldir", labels, 20, 10, seed=seed, alpha=0.3, min_size=25)
        assert part.counts.sum(1).min() >= 25
    with pytest.raises(UserError, match="raise --dir-alpha"):
        partition("labeldir", labels[:300], 20, 10, seed=0, alpha=1e-3, min_size=10, max_tries=3)
    with pytest.raises(UserError, match="min_size 200 x 20 clients exceeds"):
        partition("labeldir", labels, 20, 10, seed=0, min_size=200)


@pytest.mark.parametrize("call, message", [
    (lambda y: partition("dirichlet", y, 5, 10, 0, alpha=0.0), "--dir-alpha must be > 0"),
    (lambda y: partition("labeldir", y, 5, 10, 0, alpha=-1.0), "--dir-alpha must be > 0"),
    (lambda y: partition("iid", y, 101, 10, 0), "--clients 101 exceeds the 100 training samples"),
    (lambda y: partition("pathological", y, 5, 10, 0, classes_per_client=11), "--classes-per-client must be in 1..10"),
    (lambda y: partition("pathological", y, 5, 10, 0, classes_per_client=0), "--classes-per-client must be in 1..10"),
    (lambda y: partition("shards", y, 60, 10, 0), "--shards-per-client must be in 1..1"),
    (lambda y: partition("nope", y, 5, 10, 0), "--partition: unknown 'nope'; choose one of iid, dirichlet"),
    (lambda y: partition("iid", y, 5, 10, 0, alpha=1.0), "unknown option"),
    (lambda y: partition("iid", y, 5, 3, 0), "labels must lie in 0..2"),
])
def test_validation(call, message):
    labels = np.arange(100) % 10
    with pytest.raises(UserError, match=message.replace(".", r"\.")) as err:
        call(labels)
    assert "\n" not in str(err.value)


def test_plot_partition_returns_figure():
    labels = imbalanced_labels(400, 5, 0)
    counts = partition("dirichlet", labels, 6, 5, seed=0, alpha=0.5).counts
    fig = plot_partition(counts, title="Dir(0.5)")
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert ax.get_title() == "Dir(0.5)" and ax.get_xlabel() == "class" and ax.get_ylabel() == "client"
    np.testing.assert_array_equal(np.asarray(ax.collections[0].get_array()).reshape(6, 5), counts)
    other = Figure()
    assert plot_partition(counts, ax=other.add_subplot()) is other
