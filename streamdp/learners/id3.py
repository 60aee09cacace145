"""Friedman & Schuster's private ID3 learners: SuLQ-based ID3 (Alg. 1) and DiffPID3 (Alg. 2).

>>> from streamdp.records.datasets import load
>>> ds = load("congressional-voting")
>>> clf = DiffPID3(ds.schema, epsilon=10.0, max_depth=3, scorer="max").fit(ds.X, ds.y)
>>> bool(clf.score(ds.X, ds.y) > 0.8)
True

Both grow over the private data layer with Friedman & Schuster's
budget: for ``d = max_depth`` every level gets ``eps = B / (2 (d + 1))``,
half for the node's noisy count and half for the split choice (or, at a
leaf, its noisy class counts). A branch that reaches depth ``d`` spends
``d`` levels of ``2 eps`` plus the leaf's ``2 eps``: exactly ``B``; branches
are disjoint (parallel composition). A branch that stops at depth ``k < d``
has ``2 (d - k) eps`` left: with ``top_up`` (the default; our addition, as
for :class:`~streamdp.learners.DPEA`) its leaf's class counts get
``(1 + 2 (d - k)) eps`` instead of ``eps``, so every branch spends exactly
``B`` (the choice to stop reads released counts only); ``top_up=False`` keeps
Friedman & Schuster's budget, the remainder unspent. Estimation weighs each
leaf by its own noise (``Tree.own_var``).

A node becomes a leaf when no attribute is left, the depth is exhausted, or
``N_T / (t |C|) < sqrt(2) / eps`` (``t`` the largest arity left, ``N_T`` the
noisy count): below that the counts would be mostly noise (:mod:`streamdp.learners.branch`
holds the rule and the rest of a branch's budget).

* :class:`SuLQID3` scores each attribute from noisy counts, each with
  ``eps / (2 |A|)``: ``N_j`` (records per value) and ``N_jc`` (per value and
  class), ``V_A = sum_j sum_c N_jc log(N_jc / N_j)``; it splits on the
  argmax (ties broken uniformly at random). Noisy counts can be zero or negative: cells with ``N_jc <= 0`` or
  ``N_j <= 0`` add nothing, and ``N_jc`` is capped at ``N_j`` (the log
  ratio stays <= 0). It is Jagannathan's "private ID3" baseline (Jagannathan et al.
  Table I).
* :class:`DiffPID3` picks the attribute with one exponential mechanism query
  with the whole ``eps``, scored by ``scorer`` (``infogain``, ``gini``,
  ``max``, ``gainratio``; :mod:`~streamdp.learners.scorers` gives each
  sensitivity). InfoGain and GainRatio scores use at most ``n_bound``
  records per query, enforced by the data layer
  (:func:`~streamdp.learners.scorers.record_bound`).

Leaves keep their noisy class counts; inner nodes get the sum of their
leaves' counts (post-processing), so a leaf with no positive count predicts
from its parent. Numeric attributes are not split here (discretise them, or
use :class:`~streamdp.learners.DiffPC45`); they are ignored.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from streamdp.estimation.rule import cell_variance
from streamdp.learners._base import PrivateLearner
from streamdp.learners.branch import rest_of_branch, stops
from streamdp.learners.private_data import PrivateDataset, enforced_sensitivity
from streamdp.learners.scorers import Scorer, checked_scorer, get_scorer, record_bound
from streamdp.learners.tree import TreeBuilder
from streamdp.privacy.mechanisms import SecureRandom
from streamdp.records.domains import Categorical

__all__ = ["SuLQID3", "DiffPID3"]


class _ID3(PrivateLearner):
    """Growth shared by both learners; subclasses choose the split attribute."""

    max_depth: int

    def epsilon_per_query(self) -> float:
        """``B / (2 (d + 1))``."""
        return float(self.epsilon) / (2 * (int(self.max_depth) + 1))

    def epsilon_leaf_counts(self) -> float:
        """One query's epsilon: the least a leaf's class counts get (with ``top_up`` a branch stopped early gives its
        leaf more, and the leaf keeps its own noise variance, ``Tree.own_var``)."""
        return self.epsilon_per_query()

    def _fit(self, pds: PrivateDataset) -> None:
        self.epsilon_per_query_ = self.epsilon_per_query()
        self._prepare()
        b = TreeBuilder(self.schema)
        cats = frozenset(j for j, a in enumerate(self.schema.attributes) if isinstance(a, Categorical))
        leaves: dict[int, tuple[np.ndarray, float]] = {}
        self._grow(pds, b, b.add(depth=0), cats, int(self.max_depth), leaves)
        for node, (c, v) in leaves.items():
            b.set_counts(node, c, v)
        tree = b.build()
        tree.fill_inner_counts()  # a leaf with no positive count predicts from its ancestors
        self.trees_ = [tree]

    def _prepare(self) -> None:
        pass

    def _root_count(self, n_t: float, eps: float) -> None:
        pass

    def _grow(
        self, pds: PrivateDataset, b: TreeBuilder, node: int, cats: frozenset, depth_left: int, leaves: dict
    ) -> None:
        eps = self.epsilon_per_query_
        C = self.schema.n_classes
        n_t = pds.noisy_count(eps)
        if node == 0:  # the root: its released count sizes the record bound of the split scores
            self._root_count(n_t, eps / pds.records_per_unit)
        t = max((self.schema.attributes[j].arity for j in cats), default=0)
        if not cats or depth_left <= 0 or stops(n_t, t, C, eps / pds.records_per_unit):
            # the branch stops: its unused levels (2 eps each) go to the leaf's counts (top_up); above this
            # node each level spent 2 eps, and this node its count
            spent = eps * (2 * (int(self.max_depth) - depth_left) + 1)
            e_leaf = max(eps, rest_of_branch(self.epsilon, spent)) if self.top_up else eps
            leaves[node] = (
                np.asarray(pds.noisy_class_counts(e_leaf), dtype=np.float64),
                cell_variance("geometric", e_leaf / pds.records_per_unit),
            )
            return
        j = self._choose(pds, sorted(cats), eps)
        kids = b.split(node, j)
        for part, kid in zip(pds.partition(j), kids):
            self._grow(part, b, kid, cats - {j}, depth_left - 1, leaves)

    def _choose(self, pds: PrivateDataset, cats: list[int], eps: float) -> int:
        raise NotImplementedError


class SuLQID3(_ID3):
    """SuLQ-based ID3 (Friedman & Schuster Alg. 1); see the module docstring.

    ``noise_seed``: reproducible noise, NOT private (tests only).
    """

    FORMAT = "streamdp.sulq_id3"

    def __init__(
        self, schema: Any, epsilon: float = 1.0, max_depth: int = 5, noise_seed: int | None = None, top_up: bool = True
    ):
        self.schema = schema
        self.epsilon = epsilon
        self.max_depth = max_depth
        self.noise_seed = noise_seed
        self.top_up = top_up

    def _prepare(self) -> None:
        self._ties = SecureRandom(self.noise_seed) if self.noise_seed is not None else SecureRandom()

    def _choose(self, pds: PrivateDataset, cats: list[int], eps: float) -> int:
        e = eps / (2 * len(cats))
        scores = []
        for j in cats:
            n_j = np.array([p.noisy_count(e) for p in pds.partition(j)], dtype=np.float64)
            n_jc = np.asarray(pds.noisy_contingency(j, e), dtype=np.float64)
            scores.append(sulq_score(n_j, n_jc))
        # Ties are common under heavy noise (every cell clipped gives 0): break them uniformly,
        # never by attribute order, or the first attribute would be favoured for no reason.
        best = np.flatnonzero(np.asarray(scores) == np.max(scores))
        return cats[int(best[int(self._ties.integers(best.size))])]


def sulq_score(n_j: np.ndarray, n_jc: np.ndarray) -> float:
    """``sum_j sum_c N_jc log(N_jc / N_j)`` over cells with positive noisy counts, ``N_jc`` capped at ``N_j``."""
    nj = np.broadcast_to(n_j[:, None], n_jc.shape)
    ok = (n_jc > 0) & (nj > 0)
    c = np.minimum(n_jc, nj)
    return float(np.sum(np.where(ok, c * np.log(np.where(ok, c / np.where(ok, nj, 1.0), 1.0)), 0.0)))


class DiffPID3(_ID3):
    """DiffPID3 (Friedman & Schuster Alg. 2); see the module docstring.

    ``scorer``: "infogain", "gini", "max" or "gainratio". ``n_bound``: the
    most records InfoGain and GainRatio scores may use per query (enforced:
    a node with more is scored on a uniform subset, with twice the
    sensitivity at the bound); None (the default) takes the root's noisy
    count plus a margin, so nobody needs to know the record count.
    ``noise_seed``: reproducible noise, NOT private (tests only).
    """

    FORMAT = "streamdp.diffp_id3"

    def __init__(
        self,
        schema: Any,
        epsilon: float = 1.0,
        max_depth: int = 5,
        scorer: str = "infogain",
        n_bound: int | None = None,
        noise_seed: int | None = None,
        top_up: bool = True,
    ):
        self.schema = schema
        self.epsilon = epsilon
        self.max_depth = max_depth
        self.scorer = scorer
        self.n_bound = n_bound
        self.noise_seed = noise_seed
        self.top_up = top_up

    def _check_params(self) -> None:
        super()._check_params()
        checked_scorer(self.scorer, self.n_bound, self.schema)

    def _prepare(self) -> None:
        self.scorer_: Scorer = get_scorer(self.scorer, self.schema)

    def _root_count(self, n_t: float, eps: float) -> None:
        self.record_bound_ = record_bound(self.scorer_, self.n_bound, n_t, eps)
        b = self.record_bound_
        self.sensitivity_ = (
            float(self.scorer_.sensitivity(math.inf))
            if b is None
            else enforced_sensitivity(self.scorer_.sensitivity, b)
        )

    def _choose(self, pds: PrivateDataset, cats: list[int], eps: float) -> int:
        score = self.scorer_
        choice = pds.exponential(
            cats,
            lambda tau: float(score(tau)),
            sensitivity=score.sensitivity,
            epsilon=eps,
            max_records=self.record_bound_,
        )
        assert not isinstance(choice, tuple)  # the candidates are attribute indices
        return int(choice)
