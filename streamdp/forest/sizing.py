"""How many of its drawn trees a default one-shot fit spends its budget on: fewer where the signal is weak.

A forest's error has two parts that the tree count pulls apart: the spread of its random trees
(more trees, a smaller one) and the noise on each tree's counts (``T + P`` trees share the counts'
budget ``e``, so every cell carries ``(T + P) / e`` of noise scale). Where the records times the budget,
``n e``, are few, ten trees each get too little budget for any split to stand above the noise: the
pruning cuts them to their roots and the vote is the noisy prior. :func:`trees_for_signal` sizes
the count to the released signal instead: ``round(sqrt(n e) / TREES_PER_SIGNAL)`` trees, at least 1,
at most the drawn count (the evidence: docs/decisions/019-low-epsilon-defaults.md).

The fit (:meth:`streamdp.PrivateForest.fit` on a forest created with the default tree count, split
budget, geometric or Laplace noise, a prior stump) does, in :func:`sized_stumps`:

1. release the prior stumps' class counts with ``e / (T + P)`` each (what every tree gets when all
   ``T`` drawn trees are kept); ``n`` is their noisy total (the mean over the stumps);
2. keep the first ``k = trees_for_signal(n, e, T)`` random trees (and the stumps);
3. where ``k < T`` release the stumps' counts again with the rest of a tree's new share,
   ``e / (k + P) - e / (T + P)``, and publish the inverse-variance weighted mean of the two releases
   (rounded for geometric noise): a stump's counts then carry the noise of one release at
   ``e / (k + P)``, as every kept tree's do.

Privacy (proof sketch). One record changes each stump's count of its class by 1 in each of the two
stump releases (two-sided geometric or Laplace noise at the stated budgets): a stump costs
``e / (T + P) + (e / (k + P) - e / (T + P)) = e / (k + P)``. The kept trees are then released as in
:mod:`streamdp.forest.pruning` with ``e / (k + P)`` each. ``k`` is a function of ``n`` (a released value),
``e``, ``T`` and ``P`` (public) only, and the structure kept is a function of ``k`` and of the public
drawn structure, so by adaptive sequential composition the fit costs ``(k + P) e / (k + P) = e``, as
with every tree kept. The mean of the two releases is post-processing. The first release is
spent on the decision and on the published mean, never published alone.
``tests/forest/test_sizing.py``: the kept count is the same for any data giving the same release, and
the budget adds up.

>>> trees_for_signal(348 * 1.0, 0.1, 10), trees_for_signal(1600.0, 1.0, 10), trees_for_signal(-50.0, 0.1, 10)
(2, 10, 1)
"""

from __future__ import annotations

import math

import numpy as np

from streamdp.estimation.rule import cell_variance
from streamdp.privacy.secure_random import SecureRandom
from streamdp.release.noisy import noisy_node

__all__ = ["TREES_PER_SIGNAL", "trees_for_signal", "sized_stumps"]

#: ``sqrt(n e)`` per tree kept (:func:`trees_for_signal`).
TREES_PER_SIGNAL = 3.0


def trees_for_signal(n: float, epsilon: float, most: int) -> int:
    """The random trees a fit of about ``n`` records (a released, noisy number) at the counts' budget
    ``epsilon`` spends it on: ``round(sqrt(n epsilon) / TREES_PER_SIGNAL)``, within ``[1, most]``.

    A function of public and released numbers only (the module docstring).

    >>> [trees_for_signal(n, 0.1, 10) for n in (100, 400, 1600, 10_000)]
    [1, 2, 4, 10]
    """
    if not most >= 1:
        raise ValueError(f"most must be at least 1, got {most}")
    signal = max(0.0, float(n)) * float(epsilon)
    if math.isinf(signal):
        return most
    return int(min(most, max(1, round(math.sqrt(signal) / TREES_PER_SIGNAL))))


def sized_stumps(
    stump_exact: np.ndarray, epsilon: float, n_trees: int, prior_trees: int, mechanism: str, rng: SecureRandom
) -> tuple[int, np.ndarray, float]:
    """Steps 1-3 of the module docstring: ``(k, stumps, variance)``, the random trees to keep, the stumps'
    released counts ``(prior_trees, 1, C)`` and the noise variance of one of their cells.

    ``stump_exact``: the stumps' exact class counts ``(prior_trees, 1, C)``; ``epsilon``: the counts' budget
    (what the thresholds left), shared by ``n_trees + prior_trees`` trees under the split budget.

    >>> rng = SecureRandom()
    >>> k, stumps, var = sized_stumps(np.array([[[200, 150]]]), 0.1, 10, 1, "geometric", rng)
    >>> k < 10, stumps.shape, var < cell_variance("geometric", 0.1 / 11)
    (True, (1, 1, 2), True)
    """
    first_eps = epsilon / (n_trees + prior_trees)
    first = noisy_node(stump_exact, first_eps, mechanism, rng)
    v1 = cell_variance(mechanism, first_eps)
    n = float(first.sum(axis=(1, 2)).mean())
    k = trees_for_signal(n, epsilon, n_trees)
    if k == n_trees:
        return k, first, v1
    rest = epsilon / (k + prior_trees) - first_eps
    second = noisy_node(stump_exact, rest, mechanism, rng)
    v2 = cell_variance(mechanism, rest)
    w = v2 / (v1 + v2)  # the first release's weight, inverse variance
    mean = w * first + (1.0 - w) * second
    if first.dtype.kind in "iu":
        return k, np.rint(mean).astype(first.dtype), v1 * v2 / (v1 + v2) + 1.0 / 12.0
    return k, mean, v1 * v2 / (v1 + v2)
