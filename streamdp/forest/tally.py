"""Exact leaf-vector tallies: the only place records become counts.

Pure numpy, no noise: the result must never be released as is. The callers
(:mod:`streamdp.forest`) noise it once per batch before anything leaves.
"""

from __future__ import annotations

import numpy as np

__all__ = ["tally", "sparse_tally", "DENSE_CELLS_PER_PAIR"]

#: :func:`sparse_tally` counts in a dense array (``np.bincount``, linear) instead of sorting the batch's cell
#: numbers when the forest has at most this many cells per counted (record, tree) pair: there the sort's
#: ``n log n`` costs more than zeroing and scanning the cells, and the dense array is no larger than this many
#: int64 per pair (the batch's own size bounds it, never the model's alone).
DENSE_CELLS_PER_PAIR = 6


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
    counts = np.bincount(_flat_cells(leaves, y, shape, mask), minlength=n_trees * max_leaves * n_classes)
    return counts.astype(np.int64, copy=False).reshape(shape)


def sparse_tally(
    leaves: np.ndarray,
    y: np.ndarray,
    shape: tuple[int, int, int],
    mask: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`tally`'s nonzero cells, flat indices ascending and their counts, without the dense array.

    A large forest's tally is mostly zeros (a batch fills few of the forest's cells): allocating,
    zeroing and scanning dense counts would cost most of a worker's time per batch, where sorting the
    batch's cell indices costs little (``benchmarks/results/tally.md``). A batch with about as
    many (record, tree) pairs as the forest has cells (:data:`DENSE_CELLS_PER_PAIR`) is counted densely instead.

    >>> idx, c = sparse_tally(np.array([[0, 1], [0, 0]]), np.array([1, 0]), (2, 2, 2))
    >>> idx.tolist(), c.tolist()
    ([0, 1, 4, 7], [1, 1, 1, 1])
    """
    n_trees, max_leaves, n_classes = shape
    cells = n_trees * max_leaves * n_classes
    # int32 cell numbers where they fit: sorting them (the cost of this function) takes half the time of int64
    small = cells <= np.iinfo(np.int32).max
    flat = _flat_cells(leaves, y, shape, mask, np.int32 if small else np.int64)
    if cells <= DENSE_CELLS_PER_PAIR * flat.size:  # a batch about as large as the forest: count, do not sort
        dense = np.bincount(flat, minlength=cells)
        idx = np.flatnonzero(dense)
        return idx, dense[idx].astype(np.int64, copy=False)
    idx, counts = np.unique(flat, return_counts=True)
    return idx.astype(np.int64, copy=False), counts.astype(np.int64, copy=False)


def _flat_cells(
    leaves: np.ndarray,
    y: np.ndarray,
    shape: tuple[int, int, int],
    mask: np.ndarray | None,
    dtype: type = np.int64,
) -> np.ndarray:
    """The flat cell index (tree, leaf, class) of every counted (record, tree) pair, one dimension, in ``dtype``
    (int32 only where every cell number fits it)."""
    n_trees, max_leaves, n_classes = shape
    n = leaves.shape[0]
    if leaves.shape != (n, n_trees) or y.shape != (n,):
        raise ValueError(f"leaves {leaves.shape} and y {y.shape} do not match {n} records x {n_trees} trees")
    # Built in one buffer with in-place updates (no temporaries: this is on the hot path).
    flat = np.multiply(leaves, n_classes, dtype=dtype, casting="unsafe")
    flat += (np.arange(n_trees, dtype=np.int64) * (max_leaves * n_classes)).astype(dtype)
    flat += np.asarray(y).astype(dtype, copy=False)[:, None]
    return flat[mask] if mask is not None else flat.ravel()
