"""Client partitions of a labelled training set: which train indices each client holds.

Every rule draws from one local ``np.random.default_rng(seed)``; same seed, same partition.

    iid           permutation, contiguous near-equal slices
    dirichlet     Acar et al. (FedDyn) / FL-Simulator ``DatasetObject`` rule 'Dirichlet': equal client sizes
                  n = N // n_clients, class prior p_i ~ Dir(alpha 1_C); a random non-full client draws one
                  sample at a time, its class drawn from p_i. ``replacement=True`` is the simulator's refill.
    labeldir      Hsu et al. / NIID-Bench ``noniid-labeldir``: per class, proportions over clients ~ Dir(alpha)
    pathological  FL-Simulator rule 'Pathological': c classes per client, same sequential sampler
    sorted        FedALS: sort by label, contiguous equal chunks
    shards        McMahan et al.: sort by label, cut n_clients * shards_per_client shards, deal them at random
"""
from dataclasses import dataclass

import numpy as np

from fedlab_analysis.errors import UserError

PARTITIONS = ("iid", "dirichlet", "labeldir", "pathological", "sorted", "shards")

_CHUNK = 8192  # draws classified per vectorised step of the sequential sampler


@dataclass
class Partition:
    indices: list[np.ndarray]  # client -> int64 train indices
    counts: np.ndarray  # [n_clients, n_classes] int64, counts[i, c] = #samples of class c at client i

    @property
    def sizes(self) -> np.ndarray:
        return self.counts.sum(1)


def partition(name: str, labels, n_clients: int, n_classes: int, seed: int, **kw) -> Partition:
    """Split the train set with labels ``labels`` [N] over ``n_clients`` clients by the rule ``name``.

    Keyword options (each rule accepts only its own): ``alpha`` (dirichlet, labeldir; default 0.6 / 0.5),
    ``replacement`` (dirichlet, pathological; default False), ``classes_per_client`` (pathological; 2),
    ``min_size`` and ``max_tries`` (labeldir; 10, 1000), ``shards_per_client`` (shards; 2).
    """
    if name not in _RULES:
        raise UserError(f"--partition: unknown '{name}'; choose one of {', '.join(PARTITIONS)}")
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0 or not np.issubdtype(labels.dtype, np.integer):
        raise UserError(f"partition: labels must be a non-empty 1-D integer array, got shape {labels.shape} "
                        f"and dtype {labels.dtype}")
    if labels.min() < 0 or labels.max() >= n_classes:
        raise UserError(f"partition: labels must lie in 0..{n_classes - 1}, found {labels.min()}..{labels.max()}; "
                        "pass the data set's n_classes")
    if n_clients < 1:
        raise UserError(f"--clients must be >= 1, got {n_clients}")
    if n_clients > labels.size:
        raise UserError(f"--clients {n_clients} exceeds the {labels.size} training samples; use fewer clients")
    rule, allowed = _RULES[name]
    unknown = sorted(set(kw) - set(allowed))
    if unknown:
        raise UserError(f"--partition {name}: unknown option(s) {', '.join(unknown)}; "
                        f"valid: {', '.join(allowed) or 'none'}")
    rng = np.random.default_rng(seed)
    indices = [np.asarray(ix, dtype=np.int64) for ix in rule(labels, n_clients, n_classes, rng, **kw)]
    counts = np.stack([np.bincount(labels[ix], minlength=n_classes) for ix in indices]).astype(np.int64)
    return Partition(indices, counts)


# ----------------------------------------------------------------------------------------------------
# simple rules


def _iid(labels, n_clients, n_classes, rng):
    return np.array_split(rng.permutation(labels.size), n_clients)


def _label_sorted(labels, rng):
    """Indices sorted by label; ties in a seeded random order (the FedALS 'sort by label')."""
    perm = rng.permutation(labels.size)
    return perm[np.argsort(labels[perm], kind="stable")]


def _sorted(labels, n_clients, n_classes, rng):
    return np.array_split(_label_sorted(labels, rng), n_clients)


def _shards(labels, n_clients, n_classes, rng, shards_per_client=2):
    n_shards = n_clients * shards_per_client
    if shards_per_client < 1 or n_shards > labels.size:
        raise UserError(f"--shards-per-client must be in 1..{labels.size // n_clients} for {n_clients} clients "
                        f"and {labels.size} samples, got {shards_per_client}")
    shards = np.array_split(_label_sorted(labels, rng), n_shards)
    deal = rng.permutation(n_shards).reshape(n_clients, shards_per_client)
    return [np.concatenate([shards[s] for s in row]) for row in deal]


def _check_alpha(alpha):
    if not alpha > 0:  # also catches nan
        raise UserError(f"--dir-alpha must be > 0, got {alpha}")


def _labeldir(labels, n_clients, n_classes, rng, alpha=0.5, min_size=10, max_tries=1000):
    """NIID-Bench ``partition_data(..., 'noniid-labeldir')`` (Hsu et al. 2019): for each class k, shuffle its
    samples and cut them by proportions q ~ Dir(alpha 1_n), where a client already holding >= N / n_clients
    samples gets q_i = 0 (the balance rule); repeat the whole draw until every client has >= min_size."""
    _check_alpha(alpha)
    N = labels.size
    if min_size * n_clients > N:
        raise UserError(f"labeldir: min_size {min_size} x {n_clients} clients exceeds the {N} samples; "
                        "lower min_size or --clients")
    by_class = [np.flatnonzero(labels == k) for k in range(n_classes)]
    for _ in range(max_tries):
        batch = [[] for _ in range(n_clients)]
        for idx_k in by_class:
            idx_k = rng.permutation(idx_k)
            q = rng.dirichlet(np.full(n_clients, alpha))
            q = q * np.array([len(b) < N / n_clients for b in batch])
            cuts = (np.cumsum(q / q.sum()) * len(idx_k)).astype(int)[:-1]
            for b, part in zip(batch, np.split(idx_k, cuts)):
                b.extend(part.tolist())
        if min(len(b) for b in batch) >= min_size:
            return [rng.permutation(np.array(b, dtype=np.int64)) for b in batch]
    raise UserError(f"labeldir: no draw gave every client >= {min_size} samples in {max_tries} tries "
                    f"(alpha={alpha}, {n_clients} clients, {N} samples); raise --dir-alpha, use fewer clients "
                    "or a smaller min_size")


# ----------------------------------------------------------------------------------------------------
# the sequential sampler of Acar et al. / FL-Simulator (dirichlet, pathological)


def _dirichlet(labels, n_clients, n_classes, rng, alpha=0.6, replacement=False):
    _check_alpha(alpha)
    order = rng.permutation(labels.size)
    priors = rng.dirichlet(np.full(n_classes, float(alpha)), size=n_clients)
    return _sequential(labels, order, priors, rng, replacement)


def _pathological(labels, n_clients, n_classes, rng, classes_per_client=2, replacement=False):
    """FL-Simulator rule 'Pathological': each client gets a uniform prior over c random classes."""
    c = classes_per_client
    if not 1 <= c <= n_classes:
        raise UserError(f"--classes-per-client must be in 1..{n_classes}, got {c}")
    order = rng.permutation(labels.size)
    chosen = np.argsort(rng.random((n_clients, n_classes)), axis=1)[:, :c]
    priors = np.zeros((n_clients, n_classes))
    np.put_along_axis(priors, chosen, 1.0 / c, axis=1)
    return _sequential(labels, order, priors, rng, replacement)


def _sequential(labels, order, priors, rng, replacement):
    """Exact, chunk-vectorised form of the loop in FL-Simulator ``dataset.py`` (``DatasetObject.set_data``):

        while some client is not full:
            i = random client; if full: redraw                       # client stream: u -> floor(u n_clients)
            draw class k from p_i                                    # class stream: u -> first k, u < cdf_i[k]
            if class k is used up:
                replacement=True:  refill k's counter, redraw the class   (the simulator; samples repeat)
                replacement=False: (never happens) a used-up class gets p = 0 at every client and each
                                   prior renormalises (Acar's redraw loop, in distribution, without its spin)
            give client i the next sample of class k

    ``order`` is the shuffled train set (the simulator's ``rand_perm``); class k's samples are taken in that
    order, cycling when refilled. Client i's indices come in its draw order. A client whose whole prior sits
    on used-up classes (replacement=False) falls back to drawing in proportion to the class sizes
    among the classes left.
    The two streams are ``rng.spawn(2)`` and each uniform is one ``Generator.random()`` double, so the
    chunked draws here equal the one-at-a-time loop bit for bit.
    """
    n_clients, n_classes = priors.shape
    n = labels.size // n_clients
    total = n * n_clients
    pool = [order[labels[order] == k] for k in range(n_classes)]  # class k's samples, shuffled order
    size = np.array([len(p) for p in pool])
    start = np.concatenate([[0], np.cumsum(size)[:-1]])
    pool = np.concatenate(pool)  # class k occupies pool[start[k] : start[k] + size[k]]
    client_rng, class_rng = rng.spawn(2)
    clients = _fill_sequence(n_clients, n, client_rng)

    alive = size > 0  # an empty class can never be drawn (the simulator would spin forever on it)
    used = np.zeros(n_classes, dtype=np.int64)  # selections so far (replacement) / samples taken (not)
    cdf = _alive_cdf(priors, alive, size)
    taken = np.empty(total, dtype=np.int64)  # draw t -> train index
    buf = np.empty(0)  # class-stream uniforms drawn but not consumed yet
    t = 0
    while t < total:
        m = min(total - t, _CHUNK)
        if buf.size < m:
            buf = np.concatenate([buf, class_rng.random(m - buf.size)])
        k = (cdf[clients[t:t + m]] <= buf[:m, None]).sum(1)
        s = used[k] + _rank(k, n_classes)  # running selection number of each draw within its class
        if replacement:  # selection s of class k meets an empty counter iff s % (L + 1) == L
            s = s % (size[k] + 1)
            stop = np.flatnonzero(s == size[k])
        else:  # the draw that takes the last sample of its class
            stop = np.flatnonzero(s == size[k] - 1)
        keep = m if not stop.size else stop[0] + (0 if replacement else 1)
        taken[t:t + keep] = pool[start[k[:keep]] + s[:keep]]
        used += np.bincount(k[:keep], minlength=n_classes)
        t += keep
        buf = buf[keep:]
        if stop.size and replacement:  # the refill: this selection is spent and its draw is redone
            used[k[keep]] += 1
            buf = buf[1:]
        elif stop.size and t < total:  # class used up: p = 0 at every client, priors renormalise
            alive[k[keep - 1]] = False
            cdf = _alive_cdf(priors, alive, size)
    by_client = np.argsort(clients, kind="stable")
    return np.split(taken[by_client], np.cumsum(np.bincount(clients, minlength=n_clients))[:-1])


def _fill_sequence(n_clients, n, rng):
    """The accepted client draws of 'pick a uniform client, redraw if it already holds n samples'.
    A candidate is accepted iff fewer than n earlier candidates named the same client, so the
    sequence is computed a chunk at a time from one stream of uniforms."""
    out, seen = [], np.zeros(n_clients, dtype=np.int64)
    while (remaining := n * n_clients - sum(len(o) for o in out)) > 0:
        cand = (rng.random(max(4 * remaining, 4 * n_clients)) * n_clients).astype(np.int64)
        accept = np.minimum(seen, n)[cand] + _rank(cand, n_clients) < n
        out.append(cand[accept])
        seen += np.bincount(cand, minlength=n_clients)
    return np.concatenate(out)


def _rank(k, n_values):
    """r[j] = #{i < j : k[i] == k[j]} (occurrence number of each entry among equal entries)."""
    srt = np.argsort(k, kind="stable")
    first = np.searchsorted(k[srt], np.arange(n_values))
    r = np.empty_like(k)
    r[srt] = np.arange(k.size) - first[k[srt]]
    return r


def _alive_cdf(priors, alive, size):
    """Row-wise class CDF over the classes still drawable, exactly 1.0 at the last class with mass.
    A uniform u picks the first class k with u < cdf[k], i.e. ``(cdf <= u).sum()``: the simulator's
    ``argmax(u <= cdf)`` up to a null set, and a zero-mass class is never picked."""
    p = priors * alive
    empty = p.sum(1) == 0  # all of this client's prior is used up: draw by class size among those left
    p[empty] = size * alive
    cdf = np.cumsum(p, axis=1)
    return cdf / cdf[:, -1:]


_RULES = {
    "iid": (_iid, ()),
    "dirichlet": (_dirichlet, ("alpha", "replacement")),
    "labeldir": (_labeldir, ("alpha", "min_size", "max_tries")),
    "pathological": (_pathological, ("classes_per_client", "replacement")),
    "sorted": (_sorted, ()),
    "shards": (_shards, ("shards_per_client",)),
}


def plot_partition(counts, ax=None, title=None, vmax=None):
    """Seaborn heat map of ``counts`` [clients x classes]; returns the matplotlib Figure. ``vmax`` fixes the top of
    the colour scale (from 0), so that heat maps drawn side by side share one scale."""
    import seaborn as sns
    from matplotlib.figure import Figure

    counts = np.asarray(counts)
    n_clients, n_classes = counts.shape
    if ax is None:
        fig = Figure(figsize=(min(2 + 0.4 * n_classes, 14), min(1.5 + 0.25 * n_clients, 12)))
        ax = fig.add_subplot()
    sns.heatmap(counts, ax=ax, cmap="viridis", annot=counts.size <= 200, fmt="d", vmin=0 if vmax else None,
                vmax=vmax, cbar_kws={"label": "samples"})
    ax.set_xlabel("class")
    ax.set_ylabel("client")
    ax.set_title(title or f"{n_clients} clients x {n_classes} classes, {counts.sum()} samples")
    return ax.figure
