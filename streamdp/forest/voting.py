"""What the forest estimates from its released counts: the noise they carry, each leaf's class
distribution and the vote.

:class:`Voting` is the part of :class:`~streamdp.forest.model.PrivateForest` that reads released
numbers only (post-processing): the public noise variances, the estimation of
:mod:`streamdp.estimation` and the trees' vote.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from streamdp.estimation.nodes import ForestNodes
from streamdp.estimation.prior import leaf_rule_proba, prior_from
from streamdp.estimation.rule import ESTIMATORS, SNR_MIN, cell_variance
from streamdp.forest.node_links import leaves_below
from streamdp.forest.structure import ForestStructure
from streamdp.options import FOREST_VOTES
from streamdp.records.schema import Schema
from streamdp.validation import NotFittedError, check_choice

__all__ = ["Voting", "mean_accuracy"]


class Voting:
    """Noise variances, estimation and the vote of a :class:`~streamdp.forest.model.PrivateForest` (a mixin)."""

    @property
    def vote(self) -> str:
        """How the trees combine (:data:`streamdp.options.FOREST_VOTES`). Setting it reads the same release
        another way (post-processing); a value outside them raises ``ValueError``, so no blob is written that
        would not load.

        >>> from streamdp import PrivateForest
        >>> from streamdp.records.datasets import load
        >>> f = PrivateForest.create(load("congressional-voting").schema, n_trees=2, height=2, seed=1)
        >>> f.vote = "majority"
        >>> f.vote = "bogus"
        Traceback (most recent call last):
        ...
        ValueError: vote must be one of 'proba', 'majority', 'trees', got 'bogus'
        """
        return self._vote

    @vote.setter
    def vote(self, value: str) -> None:
        check_choice(value, "vote", FOREST_VOTES)
        self._vote = value

    if TYPE_CHECKING:  # what the forest provides
        schema: Schema
        structure: ForestStructure
        mechanism: str
        k: int | None
        _vote: str
        prior_trees: int
        version: int
        n_releases: int
        class_prior: np.ndarray | None
        _counts: np.ndarray

        @property
        def n_trees(self) -> int: ...
        @property
        def epsilon_per_tree(self) -> float: ...
        @property
        def record_share(self) -> float: ...

    _noise_variance: np.ndarray | None
    _node_variance: np.ndarray | None
    _estimator: str
    _tables: dict[str, np.ndarray]

    def apply(self, X: Any) -> np.ndarray:
        """Leaf number of each record in each tree, stumps included, shape ``(n, n_trees + prior_trees)``."""
        enc = self.schema.encode(X)
        return self.structure.apply(enc.X, self.schema.is_categorical)

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities, columns in the schema's label order.

        Raises :class:`~streamdp.validation.NotFittedError` before the first release (``fit``, or a stream
        model's first merge) when no counts were given: zero counts would give the first class for every record."""
        if not self.n_releases and not self._counts.any():
            raise NotFittedError(
                "this PrivateForest has released no counts yet (n_releases is 0): call fit, or wait for the stream "
                "model's first release"
            )
        return self.proba_from_leaves(self.apply(X))

    def predict(self, X: Any) -> np.ndarray:
        codes = self.predict_proba(X).argmax(axis=1)
        return np.asarray(list(self.schema.decode_labels(codes))) if len(codes) else np.empty(0)

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Mean accuracy of :meth:`predict` on ``(X, y)`` (scikit-learn's ``ClassifierMixin.score``).

        Exact, not private: score on public or held-out data only. Raises :class:`ValueError` when the
        lengths differ (:func:`mean_accuracy`) or a label is not a declared class (a misspelt class would
        count as a miss), :class:`~streamdp.validation.NotFittedError` before the first release.
        """
        predicted = self.predict(X)
        labels = y.tolist() if hasattr(y, "tolist") else list(y)
        self.schema.encode_labels(labels)  # raises naming the first undeclared one
        return mean_accuracy(predicted, labels, sample_weight)

    @property
    def cell_variance(self) -> float:
        """Public variance of the noise one release puts on a cell (:func:`streamdp.estimation.cell_variance`)."""
        return cell_variance(self.mechanism, self.epsilon_per_tree, self.k)

    @property
    def estimator(self) -> str:
        """ "shrink" (noise-aware, :mod:`streamdp.estimation`) or "leaf" (the leaf's clipped counts alone); post-processing only."""
        return self._estimator

    @estimator.setter
    def estimator(self, value: str) -> None:
        self._estimator = check_choice(value, "estimator", ESTIMATORS)

    @property
    def noise_variance(self) -> np.ndarray:
        """Public variance of the noise on each tree's cells as the counts stand, ``(n_trees + prior_trees,)``.

        The releases' noises add up: ``n_releases * cell_variance`` unless a release
        said otherwise (a pruned fit's probe leaves its trees less budget; a stream's
        binary tree mechanism publishes sums of fewer nodes). What estimation weighs
        the counts by. Set it with a number or an array (per tree); None: the default.
        """
        if self._noise_variance is None:
            return np.full(self.structure.n_trees, self.n_releases * self.cell_variance)
        return self._noise_variance

    @noise_variance.setter
    def noise_variance(self, value: Any) -> None:
        if value is None:
            self._noise_variance = None
            return
        v = np.broadcast_to(np.asarray(value, dtype=np.float64), (self.structure.n_trees,)).copy()
        if not np.all(np.isfinite(v)) or np.any(v < 0):
            raise ValueError("noise_variance must be finite and >= 0")
        v.flags.writeable = False
        self._noise_variance = v

    @property
    def node_variance(self) -> np.ndarray:
        """Public noise variance of each node's count of one class, ``(n_trees + prior_trees, max_nodes)``.

        By default :attr:`noise_variance` times the leaves below the node (each
        release noised every leaf). Trees grown release by release
        (:meth:`grow`) keep their own: a node that was a leaf for some releases
        carries less noise than the leaves now below it.
        """
        if self._node_variance is None:
            return leaves_below(self.structure) * self.noise_variance[:, None]
        return self._node_variance

    @node_variance.setter
    def node_variance(self, value: Any) -> None:
        if value is None:
            self._node_variance = None
            return
        v = np.array(value, dtype=np.float64)
        if v.shape != self.structure.feature.shape or not np.all(np.isfinite(v)) or np.any(v < 0):
            raise ValueError(f"node_variance must be finite, >= 0 and of shape {self.structure.feature.shape}")
        v.flags.writeable = False
        self._node_variance = v

    def estimation_nodes(self) -> ForestNodes:
        """Every node's noisy counts and public noise variance (:class:`streamdp.estimation.ForestNodes`), cached per release."""
        nv, cp = self._node_variance, self.__dict__.get("class_prior")
        key = (
            self.version,
            id(self._counts),
            self.noise_variance.tobytes(),
            None if nv is None else nv.tobytes(),
            None if cp is None else cp.tobytes(),
        )
        if self.__dict__.get("_nodes_key") != key:
            s = self.structure
            if self.__dict__.get("_layout_of") is not s:  # the structure's part, once per structure
                self._layout, self._layout_of = ForestNodes.layout(s.feature, s.child, s.leaf, self.prior_trees), s
            self._nodes = ForestNodes.build(
                s.feature,
                s.child,
                s.leaf,
                self._counts,
                self.noise_variance,
                self.prior_trees,
                self.record_share,
                self._layout,
                nv,
                cp,
            )
            self._nodes_key, self._tables = key, {}
        return self._nodes

    def leaf_proba(self) -> np.ndarray:
        """Estimated class distribution of every leaf of the random trees, ``(n_trees, max_leaves, n_classes)``.

        Post-processing of the released counts by :mod:`streamdp.estimation`
        (``self.estimator``: "shrink", the noise-aware rule within each tree, or
        "leaf", the leaf's clipped counts alone). This is what each tree votes
        with under ``vote="majority"``; ``vote="proba"`` pools the trees along
        the record's paths instead (:meth:`ForestNodes.path_proba`).
        """
        if self.estimator == "leaf":
            return leaf_rule_proba(self._counts[: self.n_trees])
        nodes = self.estimation_nodes()
        if self.vote not in self._tables:  # cached per release and vote (vote may be changed on a fitted forest)
            # A majority vote pools T independent trees: each tree's bar is lowered by sqrt(T).
            self._tables[self.vote] = nodes.leaf_proba(
                SNR_MIN / math.sqrt(self.n_trees) if self.vote == "majority" else None
            )
        return self._tables[self.vote]

    def prior(self) -> np.ndarray:
        """The vote's class prior: :func:`streamdp.estimation.forest_prior` (every tree's root totals,
        stumps included, inverse-variance weighted); under ``estimator="leaf"`` the
        random trees' clipped counts summed, normalised."""
        if self.estimator == "leaf":
            return prior_from(np.maximum(self._counts[: self.n_trees], 0))
        return self.estimation_nodes().prior

    def proba_from_leaves(self, leaves: np.ndarray) -> np.ndarray:
        """The vote: class probabilities from each record's leaf numbers ``(n, n_trees)`` (:meth:`apply`).

        ``vote="proba"``: the noise-aware rule pooled over the trees along the
        record's paths (:meth:`ForestNodes.path_proba`; under ``estimator="leaf"``,
        Fan et al.'s clipped leaf counts summed, the :meth:`prior` when all are 0);
        ``"trees"``: each tree's leaf estimate, leaning on that pooled estimate by its noise, averaged over the
        trees (:meth:`ForestNodes.tree_mean`; under ``estimator="leaf"``, the mean of the trees' clipped leaf
        distributions); ``"majority"``: each tree votes the argmax of its leaf's :meth:`leaf_proba`,
        ties to the class with the larger :meth:`prior`.
        """
        # Only the random trees vote (prior stumps inform the prior in estimation_nodes alone).
        T, L, C = self.n_trees, self.structure.max_leaves, self.schema.n_classes
        leaves = leaves[:, :T]
        if self.vote == "trees":
            if self.estimator == "shrink":
                return self.estimation_nodes().tree_mean(leaves)
            cells = leaf_rule_proba(self._counts[:T]).reshape(T * L, C)
            return cells[leaves + np.arange(T, dtype=np.int64) * L].mean(axis=1)
        if self.vote == "proba":
            if self.estimator == "shrink":
                return self.estimation_nodes().path_proba(leaves)
            # Fan et al.: the trees' clipped counts pooled, the clipped prior when all are 0
            pos = np.clip(self._counts[:T], 0, None).astype(np.float64).reshape(T * L, C)
            s = pos[leaves + np.arange(T, dtype=np.int64) * L].sum(axis=1)
            tot = s.sum(axis=1, keepdims=True)
            return np.where(tot > 0, s / np.where(tot > 0, tot, 1), self.prior())
        # majority: each tree votes its leaf's argmax; ties go to the class with the larger prior.
        cells = self.leaf_proba().reshape(T * L, C)[leaves + np.arange(T, dtype=np.int64) * L]  # (n, T, C)
        prior = self.prior()
        rank = np.argsort(np.argsort(prior, kind="stable"), kind="stable") + 1
        top = cells.max(axis=2, keepdims=True)
        votes = np.where(cells == top, rank, 0).argmax(axis=2)  # (n, T)
        proba = np.zeros((len(leaves), C))
        np.add.at(proba, (np.repeat(np.arange(len(leaves)), T), votes.ravel()), 1.0)
        return proba / T


def mean_accuracy(predicted: Any, y: Any, sample_weight: Any = None) -> float:
    """The (weighted) share of ``predicted`` labels equal to ``y``: what every estimator's ``score`` returns.

    Labels compare as Python objects (a schema's ``"1"`` is not ``1``). Raises :class:`ValueError` when
    ``y`` or ``sample_weight`` is not as long as ``predicted``, or a weight is negative, not finite, or they
    sum to zero.

    >>> mean_accuracy(["a", "b", "a"], ["a", "a", "a"])
    0.6666666666666666
    >>> mean_accuracy(["a", "b"], ["a", "a"], sample_weight=[3, 1])
    0.75
    """
    pred = np.asarray(list(predicted), dtype=object)
    truth = np.asarray(list(y), dtype=object)
    if truth.shape != pred.shape:
        raise ValueError(f"y has {len(truth)} labels for {len(pred)} records")
    if not len(pred):
        raise ValueError("score needs at least one record")
    right = (pred == truth).astype(np.float64)
    if sample_weight is None:
        return float(right.mean())
    w = np.asarray(sample_weight, dtype=np.float64)
    if w.shape != pred.shape:
        raise ValueError(f"sample_weight has shape {w.shape} for {len(pred)} records")
    if not np.isfinite(w).all() or (w < 0).any() or not w.sum() > 0:
        raise ValueError("sample_weight must be finite, non-negative and not all zero")
    return float(np.dot(right, w) / w.sum())
