"""Height as a ceiling for a stream: each release may deepen the trees, never past the drawn height.

:meth:`streamdp.PrivateForest.grow` is :meth:`~streamdp.PrivateForest.update`
for a forest whose drawn trees are taller than its data can fill yet. Each
call is one release of a batch (a window of the stream) in three steps:

1. the prior stumps' class totals of the batch are released; with the
   published stumps they give ``n``, the noisy number of records seen so far;
2. the trees are cut from the drawn ones by :mod:`streamdp.forest.pruning`'s rule, at
   the cumulative scale: a node keeps its split where it expects its bar
   (:func:`~streamdp.forest.pruning.node_bars`: ``PRUNE_SNR``, scaled with the classes
   at categorical splits) in standard deviations of the noise a published cell carries after this
   release (``sqrt(r s^2)`` after ``r`` releases), the records it expects being
   ``n`` times its uniform share, or, below a published leaf whose total stands
   clear of its noise, that total grown by the same factor as ``n``. Every split
   kept before stays (the trees only grow);
3. where a leaf was split, its published counts are spread over the new leaves
   below it by their uniform shares (post-processing: a prior at the parent's
   distribution that new records then outweigh), and the batch, tallied into the
   new leaves, is released with each tree's whole budget and added.

Privacy (proof sketch): the stumps' and the trees' releases are each noised
once with the budget an :meth:`update` gives them; the cut depends on the
public drawn structure and on released numbers only (the published counts and
this batch's stumps), so by adaptive sequential composition the release costs
what an update costs, and batches of disjoint records compose in parallel. The
spreading in step 3 reads published counts only. Tested: the structure is
the same for any data giving the same releases, and an empirical epsilon audit.

Where it runs: in-process streams (a loop of :meth:`~streamdp.PrivateForest.grow` over
windows) and the stream service's
``release="grow"``, whose closer grows the published forest from each window's exact tally on
the drawn trees (:func:`aggregate`, :meth:`~streamdp.PrivateForest.grow_exact`) and stores the
whole grown release once before publishing it (docs/service.md).

Noise variance (what estimation weighs the counts by): tracked per node
(:attr:`PrivateForest.node_variance`): each release adds one cell's variance times the leaves
below a node; a spread cell carries its share squared of its old leaf's. A fresh forest's first
release gives its trees the budget its probe left (``1 - PRUNE_PROBE``), so their cells carry
more than one full-budget release's variance.

>>> from streamdp import PrivateForest
>>> from streamdp.records.datasets import load
>>> ds = load("congressional-voting")
>>> f = PrivateForest.create(ds.schema, n_trees=5, height=12, epsilon=1.0, seed=1)
>>> f.grow(ds.X[:200], ds.y[:200]).height < 12  # 200 records cannot fill trees of 3**12 leaves
True
>>> f.grow(ds.X[200:], ds.y[200:]).n_releases
2
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

import numpy as np

from streamdp.estimation.rule import cell_variance
from streamdp.forest import pruning
from streamdp.forest.marginals import Marginals
from streamdp.forest.node_links import first_above, leaves_below, tree_links, up_links
from streamdp.forest.structure import ForestStructure, ceiling_height
from streamdp.privacy.secure_random import SecureRandom
from streamdp.records.schema import Schema
from streamdp.release.continual import noisy_node
from streamdp.release.policy import probed_epsilon


class Growable(Protocol):
    """What :func:`grown_release` reads of a forest (a :class:`~streamdp.PrivateForest` has it all)."""

    drawn: ForestStructure
    structure: ForestStructure
    schema: Schema
    mechanism: str
    n_releases: int
    k: int | None
    marginals: Marginals | None  # the densities the drawn thresholds follow (None: uniform or declared)

    @property
    def n_trees(self) -> int: ...
    @property
    def epsilon_per_tree(self) -> float: ...
    @property
    def counts(self) -> np.ndarray: ...
    @property
    def node_variance(self) -> np.ndarray: ...


__all__ = [
    "Growable",
    "grown_release",
    "drawn_nodes",
    "aggregate",
    "held_leaves",
    "grows_by_default",
    "service_ceiling",
]


def grows_by_default(schema) -> bool:
    """Whether a stream model (the service's, the river classifier's) over ``schema`` grows its trees by default
    (a public fact: the schema alone).

    Yes when every attribute is categorical: there, trees grown release by release beat the drawn trees
    on short streams, keep the floor and match them on whole ones, and a grown release of a large
    categorical forest publishes only the trees the data fill (the service's default is ``window`` where the
    fully grown release would not fit the server, :func:`streamdp.service.size_limits.grown_blob_bound`).
    With a numeric attribute a service model grown on the budgeted draw (:func:`service_ceiling`) is more
    accurate than ``window`` on short streams and level on long ones, but its worker needs more memory and a
    consumer reads each version whole: ``window`` stays the default there
    (docs/decisions/025-service-handover.md).

    >>> from streamdp.river.schemas import agrawal_schema, stagger_schema
    >>> grows_by_default(stagger_schema()), grows_by_default(agrawal_schema())
    (True, False)
    """
    return bool(np.all(schema.is_categorical))


def service_ceiling(schema, n_trees: int = 10) -> int | None:
    """The default height (ceiling) of a growing stream service model (``--release grow`` with no height, or
    the default on an all-categorical schema), from the schema alone.

    ``None`` where the schema has a numeric attribute: the budgeted draw
    (:meth:`~streamdp.forest.structure.ForestStructure.draw` with ``height=None``), the trees ``window``
    draws, each branch as deep as its tree's leaf budget holds. Where every attribute is categorical,
    :func:`~streamdp.forest.structure.ceiling_height` (the river classifier's default). The service lowers
    either to what it accepts (:func:`~streamdp.forest.structure.fitting_height`, ``max_cells``).

    >>> from streamdp.river.schemas import agrawal_schema, stagger_schema
    >>> service_ceiling(stagger_schema()), service_ceiling(agrawal_schema())
    (3, None)
    """
    return ceiling_height(schema, n_trees) if bool(np.all(schema.is_categorical)) else None


def drawn_nodes(
    pruned: ForestStructure, drawn: ForestStructure, arities: np.ndarray, is_categorical: np.ndarray
) -> np.ndarray:
    """Each node of ``pruned`` (a pruning of ``drawn``) as its node number in ``drawn``, ``(n_trees, max_nodes)``
    (-1 for padding): both trees are walked from the roots together, children in order.

    >>> from streamdp.records.datasets import load
    >>> s = load("congressional-voting").schema
    >>> d = ForestStructure.draw(s, n_trees=2, height=3, seed=0)
    >>> small, old = d.pruned(s, lambda nodes, share, rate: (share > 0.2, rate))
    >>> bool(np.array_equal(drawn_nodes(small, d, s.arities, s.is_categorical), old))
    True
    """
    # kept on the pruned structure (read-only), for this drawn structure and schema: a grown model's every close
    # maps the same published trees again
    key = (
        drawn,
        drawn.feature,
        drawn.child,
        tuple(np.asarray(arities).tolist()),
        tuple(np.asarray(is_categorical).tolist()),
    )
    cache = pruned._cache()
    hit = cache.get("drawn_nodes")
    if hit is not None and all(a is b for a, b in zip(hit[0][:3], key[:3])) and hit[0][3:] == key[3:]:
        return hit[1]
    out = _drawn_nodes(pruned, drawn, arities, is_categorical)
    out.flags.writeable = False
    cache["drawn_nodes"] = (key, out)
    return out


def _drawn_nodes(
    pruned: ForestStructure, drawn: ForestStructure, arities: np.ndarray, is_categorical: np.ndarray
) -> np.ndarray:
    m = len(arities)
    arity = np.append(np.asarray(arities, dtype=np.int64), 0)
    is_cat = np.append(np.asarray(is_categorical, dtype=bool), False)
    out = np.full(pruned.feature.shape, -1, dtype=np.int64)
    t = np.arange(pruned.n_trees)
    p = np.zeros(t.size, dtype=np.int64)  # node in the pruned tree
    d = np.zeros(t.size, dtype=np.int64)  # the same node in the drawn tree
    while t.size:
        out[t, p] = d
        inner = pruned.leaf[t, p] < 0
        t, p, d = t[inner], p[inner], d[inner]
        f = pruned.feature[t, p]
        w = np.where(is_cat[f], arity[f], np.where(f < m, 2, 0))
        step = np.arange(int(w.sum())) - np.repeat(np.cumsum(w) - w, w)
        p = np.repeat(pruned.child[t, p].astype(np.int64), w) + step
        d = np.repeat(drawn.child[t, d].astype(np.int64), w) + step
        t = np.repeat(t, w)
    return out


def grown_release(
    forest: Growable,
    tally: Callable[[ForestStructure], np.ndarray],
    stump_exact: np.ndarray,
    rng: SecureRandom,
    probe: float = 0.0,
    released: tuple[np.ndarray, float] | None = None,
    epsilon: float | None = None,
) -> tuple[ForestStructure, np.ndarray, np.ndarray]:
    """One release of a batch on trees grown as the module docstring says: the new structure, the published
    counts on it (old spread plus new) and each node's noise variance (:attr:`PrivateForest.node_variance`).

    ``tally(structure)``: the batch's EXACT counts on a pruning of the drawn trees (of records, or summed
    from a tally on the drawn trees, :func:`aggregate`); ``stump_exact`` ``(prior_trees, 1, C)``: the
    stumps' exact counts.

    ``probe`` (the first release only: the one-shot fit, :mod:`streamdp.forest.pruning`): that share of each
    tree's budget first releases the leaf totals of the trees cut by uniform shares; where a total
    stands clear of its noise, the nodes below it expect that total (records concentrate on few values).
    ``released``: the stumps' counts of this batch released already, with the noise variance of one cell
    (:func:`streamdp.forest.sizing.sized_stumps`); None: released here with each tree's budget. ``epsilon``: each
    random tree's budget in this release (a sized fit's kept trees, :func:`streamdp.forest.sizing.kept_tree_epsilon`);
    None: the forest's :attr:`~PrivateForest.epsilon_per_tree`.
    """
    drawn, now = forest.drawn, forest.structure
    schema, T, mech = forest.schema, forest.n_trees, forest.mechanism
    C, M = schema.n_classes, drawn.feature.shape[1]
    eps = forest.epsilon_per_tree if epsilon is None else epsilon
    started = forest.n_releases > 0

    if released is None:
        stumps, stump_var = noisy_node(stump_exact, eps, mech, rng, None, forest.k), cell_variance(mech, eps, forest.k)
    else:
        stumps, stump_var = released
    old = forest.counts
    seen = float(old[T:, 0].sum(axis=1).mean()) if started else 0.0
    n = max(0.0, seen + float(stumps.sum(axis=(1, 2)).mean()))  # noisy records so far, per tree

    prev = drawn_nodes(now, drawn, schema.arities, schema.is_categorical) if started else None
    keep, anchors = np.empty(0, dtype=np.int64), None
    if not started and probe > 0 and mech != "kanon":  # (k-anonymity: one release per tree)
        probe_bar = pruning.PRUNE_SNR * math.sqrt(cell_variance(mech, probe * eps))
        shape, probe_drawn = drawn.pruned(
            schema, _rule(_Bars(probe_bar, drawn, schema), None, T * M), n, forest.marginals
        )
        if np.any(shape.n_leaves[:T] > 1):  # a probe that splits nothing would tell nothing
            # each probe leaf's total alone: one cell, C times less noise than a sum of C cells
            exact = tally(shape)[:T].sum(axis=2)
            real = np.arange(shape.max_leaves)[None, :] < shape.n_leaves[:T, None]
            total = noisy_node(exact, probe * eps, mech, rng, real)
            t, node = np.nonzero(shape.leaf[:T] >= 0)
            total = total[t, shape.leaf[t, node]].astype(np.float64)
            clear = total >= probe_bar
            anchors = _sorted(t[clear] * M + probe_drawn[t[clear], node[clear]], total[clear])
            eps = probed_epsilon(eps, probe)
    s2 = cell_variance(mech, eps, forest.k)
    old_var = forest.node_variance if started else None
    # the noise a new leaf's cell carries after this release, at most
    bar = pruning.PRUNE_SNR * math.sqrt(
        s2 + (float(np.max(old_var[:T][now.leaf[:T] >= 0])) if old_var is not None else 0.0)
    )
    if prev is not None and old_var is not None:  # (both set once started)
        t_all = np.broadcast_to(np.arange(now.n_trees)[:, None], prev.shape)
        inner = (now.leaf < 0) & (prev >= 0)
        keep = np.sort(t_all[inner] * M + prev[inner])
        t, node = np.nonzero(now.leaf[:T] >= 0)
        total = old[t, now.leaf[t, node]].sum(axis=1).astype(np.float64)
        clear = (total >= pruning.PRUNE_SNR * np.sqrt(C * old_var[t, node])) & (seen >= bar)
        # a published leaf's total grown by as much as the noisy number of records
        anchors = _sorted(t[clear] * M + prev[t[clear], node[clear]], total[clear] * (n / seen if seen > 0 else 0.0))
    visited: list[tuple[np.ndarray, np.ndarray]] = []  # (flat drawn node, uniform share) of every node kept
    cut = _rule(_Bars(bar, drawn, schema), anchors, T * M, keep)

    def split(nodes: np.ndarray, share: np.ndarray, rate: np.ndarray):
        visited.append((nodes, share))
        return cut(nodes, share, rate)

    structure, new_drawn = drawn.pruned(schema, split, n, forest.marginals)
    counts = np.zeros((structure.n_trees, structure.max_leaves, C), dtype=old.dtype)
    node_var = leaves_below(structure)
    node_var *= s2  # this release's noise on each node's total, per class
    node_var[T:, 0] = stump_var  # the stumps: one cell, no probe
    if prev is not None and old_var is not None:  # (both set once started)
        s_nodes = np.concatenate([v[0] for v in visited])
        order = np.argsort(s_nodes)
        share_of = _lookup(s_nodes[order], np.concatenate([v[1] for v in visited])[order])
        visited.clear()
        del s_nodes, order
        anchor, ratio = _anchors(now, prev, structure, new_drawn, share_of, M)
        del share_of
        for row in range(structure.n_trees):  # a tree at a time: the temporaries are one tree's nodes
            _spread(row, row < T, anchor[row], ratio[row], old, old_var, now, structure, counts, node_var)
        counts[T:, :1] = old[T:, :1]
        del anchor, ratio
    del new_drawn
    exact = tally(structure)
    real = np.arange(structure.max_leaves)[None, :, None] < structure.n_leaves[:T, None, None]
    counts[:T] += noisy_node(exact[:T], eps, mech, rng, np.broadcast_to(real, exact[:T].shape), forest.k)
    counts[T:, :1] += stumps
    return structure, counts, node_var


def _spread(
    t: int,
    random: bool,
    anchor: np.ndarray,
    ratio: np.ndarray,
    old: np.ndarray,
    old_var: np.ndarray,
    now: ForestStructure,
    structure: ForestStructure,
    counts: np.ndarray,
    node_var: np.ndarray,
) -> None:
    """Tree ``t`` of a grown release (:func:`grown_release`): each node's noise variance gets its old node's
    (:func:`_anchors`) times its share squared, and (a random tree's) each new leaf its old leaf's published
    counts times its share, rounded for integer counts."""
    has = np.flatnonzero(anchor >= 0)
    node_var[t, has] += old_var[t, anchor[has]] * ratio[has] ** 2
    if random:  # (the stumps' counts are the caller's)
        lf = has[structure.leaf[t, has] >= 0]
        spread = old[t, now.leaf[t, anchor[lf]]] * ratio[lf][:, None]
        counts[t, structure.leaf[t, lf]] = np.rint(spread) if old.dtype.kind in "iu" else spread


def _rule(
    bars: np.ndarray | _Bars,
    anchors: tuple[np.ndarray, np.ndarray] | None,
    n_random: int,
    keep: np.ndarray | None = None,
):
    """:meth:`ForestStructure.pruned`'s ``split``: a node keeps its split where the records it expects (``rate *
    share``; below an anchor, the anchor's total) reach its bar (``bars``, by flat drawn node:
    :func:`streamdp.forest.pruning.node_bars`) or kept it before; stumps stay stumps."""

    def split(nodes: np.ndarray, share: np.ndarray, rate: np.ndarray):
        if anchors is not None and anchors[0].size:
            at = np.minimum(np.searchsorted(anchors[0], nodes), anchors[0].size - 1)
            rate = np.where(anchors[0][at] == nodes, anchors[1][at] / share, rate)
        grow = rate * share >= bars[nodes]
        if keep is not None and keep.size:
            grow |= np.isin(nodes, keep, assume_unique=True)
        return grow & (nodes < n_random), rate

    return split


def _sorted(flat: np.ndarray, total: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(flat)
    return flat[order], total[order]


def _lookup(keys: np.ndarray, values: np.ndarray):
    """``f(k)``: the value of each (present) sorted key."""
    return lambda k: values[np.searchsorted(keys, k)]


class _Bars:
    """:func:`streamdp.forest.pruning.node_bars` at ``bar`` of the drawn nodes asked for (flat numbers), computed
    for those nodes only: the pruning visits the kept nodes, never a value per drawn node."""

    def __init__(self, bar: float, drawn: ForestStructure, schema) -> None:
        self.bar, self.feature, self.schema = bar, drawn.feature, schema

    def __getitem__(self, nodes: np.ndarray) -> np.ndarray:
        M = self.feature.shape[1]
        return self.bar * pruning.node_bars(1.0, self.schema, self.feature[nodes // M, nodes % M])


def _anchors(
    now: ForestStructure, prev: np.ndarray, new: ForestStructure, new_drawn: np.ndarray, share_of, M: int
) -> tuple[np.ndarray, np.ndarray]:
    """For every node of the new random trees: the node of the old trees at or above it (its number in ``now``,
    -1 for padding) and the new node's uniform share of that old node's records."""
    anchor = np.full(new.feature.shape, -1, dtype=np.int64)
    ratio = np.zeros(new.feature.shape)
    # the old nodes by flat drawn number, sorted (a tree at a time: the trees' flat numbers do not overlap)
    ends = np.cumsum((prev >= 0).sum(axis=1))
    old_flat = np.empty(int(ends[-1]) if ends.size else 0, np.int64)
    old_node = np.empty(old_flat.size, np.int64)
    for t, end in enumerate(ends):
        n_o = np.flatnonzero(prev[t] >= 0)
        flat = t * M + prev[t, n_o]
        o = np.argsort(flat)
        old_flat[end - n_o.size : end], old_node[end - n_o.size : end] = flat[o], n_o[o]
    links = up_links(new)[0]
    for t in range(new.n_trees):  # a tree at a time: the temporaries are one tree's nodes
        n_n = np.flatnonzero(new_drawn[t] >= 0)
        t_n = np.full(n_n.size, t, dtype=np.int64)
        found = first_above(new, t_n, n_n, old_flat, lambda t, n: t * M + new_drawn[t, n], links)
        ok = found >= 0  # every new node lies at or below an old node (old splits are kept)
        n_n, found = n_n[ok], found[ok]
        del ok
        anchor[t, n_n] = old_node[found]
        ratio[t, n_n] = share_of(t * M + new_drawn[t, n_n]) / share_of(old_flat[found])
    return anchor, ratio


def held_leaves(exact: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (tree, leaf) pairs of ``exact`` (``(n_trees, max_leaves, ...)`` counts) holding a nonzero count, in
    row-major order (one linear pass over the counts: a reduction over the small class axis is many times slower).

    >>> t, l = held_leaves(np.array([[[0, 0], [0, 3]], [[1, 2], [0, 0]]]))
    >>> t.tolist(), l.tolist()
    ([0, 1], [1, 0])
    """
    T, L = exact.shape[:2]
    if T * L == 0 or not exact.any():  # (an empty window: a quick scan)
        empty = np.zeros(0, dtype=np.intp)
        return empty, empty
    flat = np.flatnonzero(exact) // (exact.size // (T * L))  # the (tree, leaf) of each nonzero cell, ascending
    flat = flat[np.concatenate(([True], flat[1:] != flat[:-1]))]
    return flat // L, flat % L


def aggregate(
    exact: np.ndarray,
    drawn: ForestStructure,
    grown: ForestStructure,
    arities: np.ndarray,
    is_categorical: np.ndarray,
    held: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """Counts on the drawn trees' leaves summed into the leaves of ``grown`` (a pruning of ``drawn``):
    each drawn leaf into the grown leaf at or above it, ``(n_trees, grown max_leaves, C)``.

    ``held``: :func:`held_leaves` of ``exact``, where the caller aggregates the same counts into several
    prunings (a scan of every count less per pruning).

    >>> from streamdp.records.datasets import load
    >>> s = load("congressional-voting").schema
    >>> d = ForestStructure.draw(s, n_trees=2, height=3, seed=0)
    >>> small, _ = d.pruned(s, lambda nodes, share, rate: (share > 0.2, rate))
    >>> X = np.random.default_rng(0).integers(0, 3, (50, s.n_attributes))
    >>> on_drawn = np.zeros((2, d.max_leaves, 1), dtype=np.int64)
    >>> np.add.at(on_drawn, (np.arange(2)[None, :], d.apply(X, s.is_categorical), 0), 1)
    >>> on_small = np.zeros((2, small.max_leaves, 1), dtype=np.int64)
    >>> np.add.at(on_small, (np.arange(2)[None, :], small.apply(X, s.is_categorical), 0), 1)
    >>> bool(np.array_equal(aggregate(on_drawn, d, small, s.arities, s.is_categorical), on_small))
    True
    """
    T, M = drawn.feature.shape
    g = drawn_nodes(grown, drawn, arities, is_categorical)
    t_g, n_g = np.nonzero(grown.leaf >= 0)
    flat = t_g * M + g[t_g, n_g]
    order = np.argsort(flat)
    flat, leaf_num = flat[order], grown.leaf[t_g, n_g][order]
    out = np.zeros((grown.n_trees, grown.max_leaves) + exact.shape[2:], dtype=exact.dtype)
    t_d, l_d = held_leaves(exact) if held is None else held  # leaves holding counts
    # a tree at a time, walking up from its leaves holding counts by its links, made for the walk (a tree's:
    # a closer holds nothing drawn-sized between closes)
    bounds = np.searchsorted(t_d, np.arange(T + 1))  # (t_d ascending)
    parent = np.empty((1, M), dtype=np.int32)
    leaf_node = np.empty(drawn.max_leaves, dtype=np.int32)
    for t in range(T):
        a, b = int(bounds[t]), int(bounds[t + 1])
        if a == b:
            continue
        parent.fill(-1)
        leaf_node.fill(-1)
        tree_links(drawn, t, parent[0], leaf_node)
        n_d = leaf_node[l_d[a:b]].astype(np.int64)  # their nodes
        zero = np.zeros(b - a, dtype=np.int64)
        found = first_above(drawn, zero, n_d, flat, lambda _, n, t=t: t * M + n, parent)
        np.add.at(out, (t_d[a:b], leaf_num[found]), exact[t, l_d[a:b]])
    return out
