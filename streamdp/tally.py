"""Exact leaf-vector tallies: the only place records become counts.

Pure numpy, no noise: the result must never be released as is. The callers
(:mod:`streamdp.forest`) noise it once per batch before anything leaves.
"""

from __future__ import annotations

import numpy as np

__all__ = ["tally"]


def tally(
    leaves: np.ndarray,
    y: np.ndarray,
    shape: tuple[int, int, int],
    mask: np.ndarray | None = None,
) -> np.ndarray:
    """Count records per (tree, leaf, class).

    ``leaves`` is ``(n, n_trees)`` leaf numbers, ``y`` the ``n`` class codes,
    ``shape`` is ``(n_trees, max_leaves, n_classes)``; ``mask`` (``(n, n_trees)``
    booleans) keeps only some (record, tree) pairs, for disjoint routing or
    Bernoulli sampling. Returns int64 counts of ``shape``.

    >>> tally(np.array([[0, 1], [0, 0]]), np.array([1, 0]), (2, 2, 2)).tolist()
    [[[1, 1], [0, 0]], [[1, 0], [0, 1]]]
    """
    n_trees, max_leaves, n_classes = shape
    n = leaves.shape[0]
    if leaves.shape != (n, n_trees) or y.shape != (n,):
        raise ValueError(f"leaves {leaves.shape} and y {y.shape} do not match {n} records x {n_trees} trees")
    # Flat cell index (tree, leaf, class) for every (record, tree) pair, built in
    # one buffer with in-place updates (no temporaries: this is on the hot path).
    flat = np.multiply(leaves, n_classes, dtype=np.int64)
    flat += np.arange(n_trees, dtype=np.int64) * (max_leaves * n_classes)
    flat += np.asarray(y, dtype=np.int64)[:, None]
    if mask is not None:
        flat = flat[mask]
    counts = np.bincount(flat.ravel(), minlength=n_trees * max_leaves * n_classes)
    return counts.astype(np.int64, copy=False).reshape(shape)
