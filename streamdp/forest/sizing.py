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
3. give each kept tree what the stumps left, ``(e - P e / (T + P)) / k`` (:func:`kept_tree_epsilon`; ``e / (T +
   P)`` when every tree is kept, more where fewer are). The stumps are not released again: the class prior
   the estimate leans on pools every tree's root with them (:func:`streamdp.estimation.forest_prior`), and a
   kept tree's root carries more budget than a second stump release would.

Privacy (proof sketch). One record changes each stump's count of its class by 1 in its one release
(two-sided geometric or Laplace noise at ``e / (T + P)``), and each kept tree's counts as
:mod:`streamdp.forest.pruning` releases them (probe and leaves) with ``(e - P e / (T + P)) / k``. ``k`` is a
function of ``n`` (a released value), ``e``, ``T`` and ``P`` (public) only, and the structure kept is a
function of ``k`` and of the public drawn structure, so by adaptive sequential composition the fit costs
``P e / (T + P) + k (e - P e / (T + P)) / k = e``, as with every tree kept.
``tests/forest/test_sizing.py``: the kept count is the same for any data giving the same release, and
the budget adds up. Why no second stump release (decision 019 made one, decision 027 took it out): it spent
the kept trees' budget on a prior their roots give too.

>>> trees_for_signal(348 * 1.0, 0.1, 10), trees_for_signal(1600.0, 1.0, 10), trees_for_signal(-50.0, 0.1, 10)
(2, 10, 1)
"""

from __future__ import annotations

import math

import numpy as np

from streamdp.estimation.rule import cell_variance
from streamdp.privacy.secure_random import SecureRandom
from streamdp.release.noisy import noisy_node

__all__ = ["TREES_PER_SIGNAL", "trees_for_signal", "kept_tree_epsilon", "sized_stumps"]

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


def kept_tree_epsilon(epsilon: float, n_trees: int, prior_trees: int, k: int) -> float:
    """Each of the ``k`` kept trees' budget in a sized fit: what the stumps' release at ``epsilon / (n_trees +
    prior_trees)`` each left of the counts' budget ``epsilon``, shared by the kept trees.

    >>> kept_tree_epsilon(1.0, 10, 1, 10) == 1.0 / 11, round(kept_tree_epsilon(1.0, 10, 1, 1), 4)
    (True, 0.9091)
    """
    return (epsilon - prior_trees * epsilon / (n_trees + prior_trees)) / k


def sized_stumps(
    stump_exact: np.ndarray, epsilon: float, n_trees: int, prior_trees: int, mechanism: str, rng: SecureRandom
) -> tuple[int, np.ndarray, float]:
    """Steps 1-2 of the module docstring: ``(k, stumps, variance)``, the random trees to keep, the stumps'
    released counts ``(prior_trees, 1, C)`` and the noise variance of one of their cells.

    ``stump_exact``: the stumps' exact class counts ``(prior_trees, 1, C)``; ``epsilon``: the counts' budget
    (what the thresholds left), shared by ``n_trees + prior_trees`` trees under the split budget.

    >>> rng = SecureRandom()
    >>> k, stumps, var = sized_stumps(np.array([[[200, 150]]]), 0.1, 10, 1, "geometric", rng)
    >>> k < 10, stumps.shape, var == cell_variance("geometric", 0.1 / 11)
    (True, (1, 1, 2), True)
    """
    first_eps = epsilon / (n_trees + prior_trees)
    first = noisy_node(stump_exact, first_eps, mechanism, rng)
    n = float(first.sum(axis=(1, 2)).mean())
    return trees_for_signal(n, epsilon, n_trees), first, cell_variance(mechanism, first_eps)
