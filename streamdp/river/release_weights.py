"""The trees' releases of a river classifier summed with weights proportional to their sizes.

A classifier's batches double (100, 200, 400, ... records) and every release carries the same noise. The
plain sum of r releases carries r times one release's noise variance on each count; weighing release j by
its size ``m_j`` and rescaling to the records seen, ``N * sum_j m_j y_j / sum_j m_j^2``, keeps every count's
expectation (a cell holding the same share of each batch) and cuts its noise variance to ``N^2 / sum_j m_j^2``
releases' worth (4 -> 2.65 for 100, 200, 400, 800). Why: where the noise, not the sampling, limits a count,
the large late releases know more per noisy cell than the small early ones.

Privacy: post-processing of released deltas and of public sizes (a full batch's size is the public
schedule's; a partial one, flushed, is estimated from its released stump totals), so the classifier's
guarantee is unchanged.

>>> w = SizeWeighted()
>>> est, var = w.add(np.array([10.0]), 100.0, 1.0)
>>> est, var = w.add(np.array([20.0]), 200.0, 1.0)
>>> round(float(est[0]), 2), round(var, 2)  # 300 * (100*10 + 200*20) / (100^2 + 200^2), 300^2 / 50,000 releases
(30.0, 1.8)
"""

from __future__ import annotations

import numpy as np

__all__ = ["SizeWeighted"]


class SizeWeighted:
    """Running size-weighted estimate of the trees' counts from their releases (module docstring)."""

    def __init__(self) -> None:
        self.weighted: np.ndarray | None = None  # sum_j m_j y_j (released values times public sizes)
        self.squares = 0.0  # sum_j m_j^2
        self.records = 0.0  # N = sum_j m_j
        self.variance = 0.0  # the estimate's noise variance per cell

    def add(self, delta: np.ndarray, size: float, cell_var: float) -> tuple[np.ndarray, float]:
        """Add one release (its noisy counts ``delta`` of ``size`` records, noise variance ``cell_var`` per cell):
        the estimate of the counts of every record released so far and its noise variance per cell."""
        size = max(float(size), 1.0)
        part = delta.astype(np.float64) * size
        self.weighted = part if self.weighted is None else self.weighted + part
        self.squares += size * size
        self.records += size
        scale = self.records / self.squares
        self.variance = cell_var * self.records * scale
        return self.weighted * scale, self.variance


#: Whether classifiers weigh their trees' releases by size (a switch for studies that compare the plain sum).
WEIGHED = True


def weighed(forest, weights: SizeWeighted | None, delta: np.ndarray, cell_var: float, size: int | None):
    """What a classifier merges for one trees' release ``delta``: with ``weights`` (no window), the change that
    takes its random trees' counts to the size-weighted estimate, and the noise variance that adds per tree
    (the stumps keep the plain sum); else ``delta`` and ``cell_var``. ``size``: the batch's public size, None for
    a partial batch (then the stumps' released total estimates it)."""
    if weights is None or not WEIGHED:
        return delta, cell_var
    T = forest.n_trees
    m = float(size) if size is not None else float(delta[T:, 0].sum(axis=1).mean())
    before = weights.variance
    est, var = weights.add(delta[:T], m, cell_var)
    out = delta.copy()
    old = forest.counts[:T]
    out[:T] = (np.rint(est) if out.dtype.kind in "iu" else est).astype(out.dtype) - old
    out[:T][~forest.real_cells[:T]] = 0  # padding past a tree's last leaf stays empty
    added = np.full(forest.n_released_trees, cell_var)
    added[:T] = var - before
    return out, added
