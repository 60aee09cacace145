"""One batch's release: its exact tally on the trees, the mechanism's sampling, and its noise drawn once.

:class:`BatchReleases` is the part of :class:`~streamdp.forest.model.PrivateForest` that turns
records into a noised delta (the privacy argument is the model's module docstring). Kept apart
so that the exact, secret counts are made in one place and noised in one place.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from streamdp.estimation.rule import cell_variance
from streamdp.forest.structure import ForestStructure
from streamdp.forest.tally import sparse_tally, tally
from streamdp.privacy.mechanisms import SecureRandom, bernoulli_sample
from streamdp.records.schema import Schema
from streamdp.release.continual import RealRows, noisy_node
from streamdp.validation import check_epsilon

__all__ = ["BatchReleases"]


class BatchReleases:
    """Tally and noise of one batch for a :class:`~streamdp.forest.model.PrivateForest` (a mixin)."""

    if TYPE_CHECKING:  # what the forest provides
        schema: Schema
        structure: ForestStructure
        mechanism: str
        k: int | None
        beta: float | None
        budget: str
        prior_trees: int
        _rng: SecureRandom

        @property
        def n_trees(self) -> int: ...
        @property
        def n_released_trees(self) -> int: ...
        @property
        def shape(self) -> tuple[int, int, int]: ...
        @property
        def epsilon(self) -> float: ...
        @property
        def epsilon_per_tree(self) -> float: ...
        @property
        def counts(self) -> np.ndarray: ...

    def noisy_delta(self, X: Any, y: Any) -> np.ndarray:
        """The private release of one batch: validate, tally, then noise exactly once."""
        enc = self.schema.encode(X, y)
        return self._noise(
            self._tally_valid(enc.X, cast(np.ndarray, enc.y))
        )  # codes from Schema.encode are valid by construction

    def noisy_delta_encoded(self, X: np.ndarray, y: np.ndarray, rng: SecureRandom | None = None) -> np.ndarray:
        """:meth:`noisy_delta` for records already encoded by :meth:`Schema.encode`.

        ``rng``: the noise source of this one release (default: the forest's own secure
        generator); the stream service passes a keyed one (:meth:`SecureRandom.from_key`).
        """
        return self._noise(self.tally_encoded(X, y, rng), rng)

    def prior_delta_encoded(
        self, y: np.ndarray, rng: SecureRandom | None = None, epsilon: float | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """A prior-phase release: the batch's class totals in the prior stumps alone, ``epsilon`` (default the
        forest's) shared by the stumps only (a record is counted once in each stump and in no random tree:
        ``epsilon / prior_trees`` each, sequential composition over the stumps). Returns the noised delta and the
        noise variance it adds per tree (0 for the random trees). The river classifier's prior phase releases its
        first records so, at the classifier's whole epsilon (its forest has what the guard leaves).

        >>> from streamdp import PrivateForest
        >>> from streamdp.records.datasets import load
        >>> f = PrivateForest.create(load("congressional-voting").schema, n_trees=2, height=2, epsilon=1.0, seed=1)
        >>> delta, var = f.prior_delta_encoded(np.array([0, 1, 1]))
        >>> bool(np.all(delta[:2] == 0)), var.tolist()[:2], bool(var[2] > 0)
        (True, [0.0, 0.0], True)
        """
        T, P = self.n_trees, self.prior_trees
        if not P:
            raise ValueError("a prior-phase release needs prior stumps (prior_trees >= 1)")
        exact = np.zeros(self.shape, dtype=np.int64)
        exact[T:, 0, :] = np.bincount(np.asarray(y, dtype=np.int64), minlength=self.shape[2])[None, :]
        real = np.zeros(self.shape, dtype=bool)
        real[T:, 0, :] = True
        eps = (self.epsilon if epsilon is None else check_epsilon(epsilon)) / P
        delta = noisy_node(exact, eps, self.mechanism, rng or self._rng, real)
        var = np.zeros(self.n_released_trees)
        var[T:] = cell_variance(self.mechanism, eps)
        return delta.astype(self.counts.dtype, copy=False), var

    def noisy_statistic(self, value: int, epsilon: float, rng: SecureRandom | None = None) -> float:
        """One integer statistic of sensitivity 1 released once with this forest's mechanism and noise source at
        ``epsilon`` (the river classifier's guard: a batch's advantage of the forest over the prior)."""
        return float(noisy_node(np.array([int(value)]), epsilon, self.mechanism, rng or self._rng)[0])

    def tally_encoded(self, X: np.ndarray, y: np.ndarray, rng: SecureRandom | None = None) -> np.ndarray:
        """The EXACT (secret) counts of an encoded batch: never publish them, noise them once.

        Includes the mechanism's own sampling, drawn from ``rng``: the disjoint budget's
        tree per record and k-anonymity's beta-sampling. The window release policy adds
        these into a worker-only accumulator and noises the window (:mod:`streamdp.release.continual`).
        """
        X, y = self._checked(X, y)
        return self._tally_valid(X, y, rng)

    def sparse_tally_encoded(
        self, X: np.ndarray, y: np.ndarray, rng: SecureRandom | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`tally_encoded`'s nonzero cells (flat indices ascending, counts; EXACT and secret), with no
        counts-sized array: what a window worker adds to the accumulator per batch (:mod:`streamdp.forest.tally`)."""
        X, y = self._checked(X, y)
        leaves = self.structure.apply(X, self.schema.is_categorical)
        return sparse_tally(leaves, y.astype(np.int64), self.shape, self.sample_mask(X.shape[0], rng or self._rng))

    def _checked(self, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """An encoded batch as arrays, refused (ValueError) unless every code would land in its own cell."""
        X = np.asarray(X)
        y = np.asarray(y)
        if X.dtype.kind not in "iuf":
            raise ValueError(f"an encoded batch holds numbers, got dtype {X.dtype}")
        if y.ndim == 0:  # fit(X, None): Schema.encode codes no labels
            raise ValueError("y (the labels) is required: one class per record")
        if X.ndim != 2 or X.shape[1] != self.schema.n_attributes or y.shape != (X.shape[0],):
            raise ValueError(
                f"encoded batch must be X of shape (n, {self.schema.n_attributes}) and y of shape (n,), "
                f"got {X.shape} and {y.shape}"
            )
        # A code out of range would be tallied into another leaf's or class's cell.
        if y.size and (y.dtype.kind not in "iu" or y.min() < 0 or y.max() >= self.schema.n_classes):
            raise ValueError(f"encoded labels must be integers in [0, {self.schema.n_classes})")
        if X.size:
            # Two cheap passes (column minima and maxima; NaN propagates into both).
            lo, hi = X.min(axis=0), X.max(axis=0)
            if X.dtype.kind == "f" and (np.isnan(lo).any() or np.isnan(hi).any()):
                raise ValueError("encoded batch contains NaN")
            cat = self.schema.is_categorical
            if np.any(lo[cat] < 0) or np.any(hi[cat] >= self.schema.arities[cat]):
                raise ValueError("encoded categorical codes must lie in 0..arity-1 for each attribute")
        return X, y

    def sample_mask(self, n: int, rng: SecureRandom) -> np.ndarray | None:
        """Which (record, tree) pairs are counted, ``(n, n_trees + prior_trees)``; None: all of them."""
        mask = None
        if self.budget == "disjoint":
            T = self.n_released_trees  # a stump is one of the trees a record may be sent to
            mask = rng.integers(T, n)[:, None] == np.arange(T)[None, :]
        if self.mechanism == "kanon":
            assert self.beta is not None  # the forest requires it for k-anonymity
            keep = bernoulli_sample(self.beta, (n, self.n_released_trees), rng)
            mask = keep if mask is None else mask & keep
        return mask

    def _tally_valid(self, X: np.ndarray, y: np.ndarray, rng: SecureRandom | None = None) -> np.ndarray:
        return self.tally_on(self.structure, X, y, self.sample_mask(X.shape[0], rng or self._rng))

    def tally_on(self, structure: ForestStructure, X: np.ndarray, y: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        """EXACT (secret) counts of checked encoded records on ``structure`` (this forest's or a pruned one),
        counting the (record, tree) pairs of ``mask`` (:meth:`sample_mask`; None: all)."""
        leaves = structure.apply(X, self.schema.is_categorical)
        shape = (structure.n_trees, structure.max_leaves, self.schema.n_classes)
        return tally(leaves, y.astype(np.int64), shape, mask)

    def _noise(self, counts: np.ndarray, rng: SecureRandom | None = None) -> np.ndarray:
        # One rule for every release (batch, window, tree node): continual.noisy_node, real cells only; the
        # callers pass a fresh tally, noised in place (one counts-sized array, not two).
        return noisy_node(
            counts, self.epsilon_per_tree, self.mechanism, rng or self._rng, self.real_rows, self.k, in_place=True
        )

    def _padding_nonzero(self, a: np.ndarray) -> bool:
        """Whether ``a`` holds anything past a tree's last leaf (slices: no counts-sized temporaries)."""
        return any(a[t, n:].any() for t, n in enumerate(self.structure.n_leaves.tolist()))

    @functools.cached_property
    def real_rows(self) -> RealRows:
        """:attr:`real_cells` as each tree's prefix of real cells (its leaves' classes): what a release noises,
        without a counts-sized mask."""
        C = self.schema.n_classes
        return RealRows(self.structure.n_leaves.astype(np.int64) * C, self.structure.max_leaves * C, self.shape)

    @functools.cached_property
    def real_cells(self) -> np.ndarray:
        """Boolean mask of the cells that exist (a tree's leaves; padding past its last leaf is not); do not modify."""
        return (np.arange(self.structure.max_leaves)[None, :] < self.structure.n_leaves[:, None])[:, :, None].repeat(
            self.schema.n_classes, axis=2
        )
