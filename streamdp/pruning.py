"""Height as a ceiling: the one-shot fit prunes each random tree where the noise would swamp it.

:meth:`streamdp.PrivateForest.fit` (with a prior stump, finite epsilon) calls
:func:`pruned_release`. The stumps' counts are released first; their noisy
total ``n`` gives every node the records it would expect if each attribute
were uniform, ``n * record_share * share`` (a categorical child gets ``1 /
arity`` of its parent, a numeric one ``1 / 2``). A probe (``PRUNE_PROBE`` of
each tree's budget) releases the leaf totals of the trees pruned by that
expectation; where a probe total stands clear of its noise, the nodes below
it expect that total instead (records concentrate on few values: Mushroom).
Finally a node keeps its split only where it expects ``PRUNE_SNR`` noise
standard deviations of one cell, and the pruned trees (each record tallied
into its pruned leaf) are released with the rest of each tree's budget.

Privacy (proof sketch). Each tree spends ``PRUNE_PROBE * e`` on the probe and
``(1 - PRUNE_PROBE) * e`` on its leaves, ``e`` its share of epsilon; one
record changes one probe cell and one leaf cell of a tree by 1, so each is
``PRUNE_PROBE * e``- and ``(1 - PRUNE_PROBE) * e``-DP (two-sided geometric
noise). The stumps are released as before. Every decision (where to probe,
where to prune) is a function of the public structure and of numbers already
released, so by adaptive sequential composition each tree costs ``e`` and the
forest ``epsilon``, as without pruning. The probe's counts are spent on the
shape, not published. ``tests/test_forest_pruning.py``: the structure is the
same for any data giving the same releases, and an empirical epsilon audit.
k-anonymity (its delta is for one release per tree) skips the probe.

Measured (``benchmarks/fit_height_ceiling.py``): at height ``n_attributes``
within 0-6 points of the best height, where the drawn trees fall to the
majority class (Nursery, Votes). The rule (per node, ``PRUNE_SNR = 4``) was
chosen among four by measurement (the table in ``fit_height_ceiling.md``).

>>> from streamdp import PrivateForest
>>> from streamdp.datasets import load
>>> ds = load("congressional-voting")
>>> f = PrivateForest.create(ds.schema, n_trees=5, height=12, epsilon=1.0, seed=1)
>>> f.fit(ds.X, ds.y).height < 12  # 435 records cannot fill trees of 3**12 leaves
True
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from .continual import noisy_node
from .estimation import cell_variance
from .secure_random import SecureRandom
from .structure import ForestStructure

if TYPE_CHECKING:
    from .forest import PrivateForest

__all__ = ["PRUNE_SNR", "PRUNE_PROBE", "pruned_release"]

#: A node keeps its split when it expects this many noise standard deviations of one cell of records.
PRUNE_SNR = 4.0
#: Share of each tree's budget spent probing where the records are (0: no probe).
PRUNE_PROBE = 0.1


def pruned_release(forest: "PrivateForest", X: np.ndarray, y: np.ndarray, mask: np.ndarray | None,
                   rng: SecureRandom) -> tuple[ForestStructure, np.ndarray, np.ndarray]:
    """The stumps, a probe of the leaf totals, then the pruned trees: the pruned structure, its released counts
    and the noise variance of each tree's cells (the trees' releases had the budget the probe left).

    ``X``, ``y``: a checked encoded batch; ``mask``: which (record, tree) pairs
    count (:meth:`PrivateForest.sample_mask`, drawn once for every release here).
    """
    T, C, M = forest.n_trees, forest.schema.n_classes, forest.structure.feature.shape[1]
    stump_exact = np.stack([np.bincount(y if mask is None else y[mask[:, T + j]], minlength=C)
                            for j in range(forest.prior_trees)])[:, None, :]
    stumps = noisy_node(stump_exact, forest.epsilon_per_tree, forest.mechanism, rng, None, forest.k)
    base = max(0.0, float(stumps.sum(axis=(1, 2)).mean()))  # records a tree expects at its root: its noisy total

    def rule(eps: float, anchors: tuple[np.ndarray, np.ndarray] | None = None):
        """Split where a node expects PRUNE_SNR sd: ``rate * share`` records; a clear probe leaf resets the rate."""
        bar = PRUNE_SNR * math.sqrt(cell_variance(forest.mechanism, eps, forest.k))

        def split(nodes: np.ndarray, share: np.ndarray, rate: np.ndarray):
            if anchors is not None and anchors[0].size:
                at = np.minimum(np.searchsorted(anchors[0], nodes), anchors[0].size - 1)
                rate = np.where(anchors[0][at] == nodes, anchors[1][at] / share, rate)
            return (rate * share >= bar) & (nodes < T * M), rate  # stumps (the last trees) stay stumps
        return split

    eps = forest.epsilon_per_tree
    probe = PRUNE_PROBE * eps
    anchors = None
    if probe > 0 and forest.mechanism != "kanon":  # (k-anonymity: one release per tree)
        shape, old = forest.structure.pruned(forest.schema, rule(probe), base)
        if np.any(shape.n_leaves[:T] > 1):  # a probe that splits nothing would tell nothing
            # Each probe leaf's total alone (one cell, C times less noise than a sum of C cells); where it
            # stands clear of its noise, the nodes below it expect that total, spread uniformly.
            exact = forest.tally_on(shape, X, y, mask)[:T].sum(axis=2)
            real = np.arange(shape.max_leaves)[None, :] < shape.n_leaves[:T, None]
            total = noisy_node(exact, probe, forest.mechanism, rng, real)
            t, node = np.nonzero(shape.leaf[:T] >= 0)
            leaf = shape.leaf[t, node]
            clear = total[t, leaf] >= PRUNE_SNR * math.sqrt(cell_variance(forest.mechanism, probe))
            flat = t[clear] * M + old[t[clear], node[clear]]
            order = np.argsort(flat)
            anchors = (flat[order], total[t, leaf][clear][order].astype(np.float64))
            eps -= probe
    structure, _ = forest.structure.pruned(forest.schema, rule(eps, anchors), base)
    exact = forest.tally_on(structure, X, y, mask)
    counts = np.zeros(exact.shape, dtype=forest.counts.dtype)
    real = np.arange(structure.max_leaves)[None, :, None] < structure.n_leaves[:T, None, None]
    counts[:T] = noisy_node(exact[:T], eps, forest.mechanism, rng, np.broadcast_to(real, exact[:T].shape), forest.k)
    counts[T:, :1] = stumps
    variance = np.full(structure.n_trees, cell_variance(forest.mechanism, forest.epsilon_per_tree, forest.k))
    variance[:T] = cell_variance(forest.mechanism, eps, forest.k)
    return structure, counts, variance
