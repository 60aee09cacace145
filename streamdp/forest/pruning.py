"""Height as a ceiling: the one-shot fit prunes each random tree where the noise would swamp it.

:meth:`streamdp.PrivateForest.fit` (with a prior stump, finite epsilon) makes
the first release of :func:`streamdp.forest.growth.grown_release` (which later releases
of a stream continue, :meth:`~streamdp.PrivateForest.grow`). The stumps' counts are released first; their noisy
total ``n`` gives every node the records it would expect if each attribute
were uniform, ``n * record_share * share`` (a categorical child gets ``1 /
arity`` of its parent, a numeric one its part of the parent's range of that attribute,
the declared range narrowed by the splits above). A probe (``PRUNE_PROBE`` of
each tree's budget) releases the leaf totals of the trees pruned by that
expectation; where a probe total stands clear of its noise, the nodes below
it expect that total instead (records concentrate on few values: Mushroom).
Finally a node keeps its split only where it expects ``PRUNE_SNR`` noise
standard deviations of one cell, ``sqrt(C / 2)`` times that where it splits on a
categorical attribute (:data:`CLASS_SCALED`, :func:`node_bars`; ``C`` classes), and
the pruned trees (each record tallied into its pruned leaf) are released with the
rest of each tree's budget.

Privacy (proof sketch). Each tree spends ``PRUNE_PROBE * e`` on the probe and
``(1 - PRUNE_PROBE) * e`` on its leaves, ``e`` its share of epsilon; one
record changes one probe cell and one leaf cell of a tree by 1, so each is
``PRUNE_PROBE * e``- and ``(1 - PRUNE_PROBE) * e``-DP (two-sided geometric
noise). The stumps are released as before. Every decision (where to probe,
where to prune) is a function of the public structure and of numbers already
released, so by adaptive sequential composition each tree costs ``e`` and the
forest ``epsilon``, as without pruning. The probe's counts are spent on the
shape, not published. ``tests/forest/test_pruning.py``: the structure is the
same for any data giving the same releases, and an empirical epsilon audit.
k-anonymity (its delta is for one release per tree) skips the probe.

Why a bar of 4 scaled at categorical splits only: docs/decisions/001-pruning-bar.md.

>>> from streamdp import PrivateForest
>>> from streamdp.records.datasets import load
>>> ds = load("congressional-voting")
>>> f = PrivateForest.create(ds.schema, n_trees=5, height=12, epsilon=1.0, seed=1)
>>> f.fit(ds.X, ds.y).height < 12  # 435 records cannot fill trees of 3**12 leaves
True
"""

from __future__ import annotations

import math

import numpy as np

from streamdp.options import PRUNE_PROBE

__all__ = ["PRUNE_SNR", "PRUNE_PROBE", "CLASS_SCALED", "node_bars"]

#: A node keeps its split when it expects this many noise standard deviations of one cell of records.
PRUNE_SNR = 4.0
#: Where the bar is scaled by ``sqrt(n_classes / 2)``: at nodes splitting on a categorical attribute
#: (``"categorical"``, the rule), at every node (``"all"``) or nowhere (``"none"``): the two others are kept
#: so the rule can be compared with them.
CLASS_SCALED = "categorical"


def node_bars(bar: float, schema, feature: np.ndarray) -> np.ndarray:
    """The bar of each drawn node whose split attribute is ``feature`` (flat; a leaf's, a stump's or padding's
    number past the attributes gets ``bar``): ``bar`` scaled
    where :data:`CLASS_SCALED` says.

    >>> from streamdp.records.datasets import load
    >>> [round(b, 2) for b in node_bars(4.0, load("nursery").schema, np.array([0, -1])).tolist()]  # 5 classes
    [6.32, 4.0]
    """
    scale = math.sqrt(schema.n_classes / 2)
    if CLASS_SCALED == "all":
        return np.full(feature.shape, bar * scale)
    if CLASS_SCALED == "categorical":
        is_cat = np.append(schema.is_categorical, False)
        return np.where(is_cat[feature], bar * scale, bar)
    return np.full(feature.shape, bar)
