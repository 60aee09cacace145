"""DiffPC4.5: Friedman & Schuster's private C4.5 (numeric split points, pruning with noisy counts).

>>> from streamdp.records.datasets import load
>>> ds = load("congressional-voting")
>>> clf = DiffPC45(ds.schema, epsilon=10.0, max_depth=3).fit(ds.X, ds.y)
>>> bool(clf.score(ds.X, ds.y) > 0.8)
True

Growth is DiffPID3 (Algorithm 2 of Friedman & Schuster) over the private data layer,
extended to numeric attributes as in the paper's Section 4.3. With ``n``
numeric attributes in the schema and ``d = max_depth``, every query gets
``eps = B / ((2 + n) d + 2)``; at an inner node a branch spends

* ``eps`` on the node's noisy count,
* ``eps`` per numeric attribute on a split point, by the exponential
  mechanism over ranges (:meth:`PrivateDataset.exponential_threshold`: ranges
  of equal score, chosen ∝ ``exp(eps q / (2S)) * length``, then a point
  uniformly inside),
* ``eps`` on the split choice, one exponential mechanism query over the
  unused categorical attributes and the numeric attributes at their chosen
  points,

so ``(2 + n) eps`` per level, and ``2 eps`` at the leaf (count and class
counts): ``(2 + n) d eps + 2 eps = B`` on a branch that reaches depth ``d``.
Branches are disjoint (parallel composition). Categorical attributes are used
once per path; numeric attributes may split again inside the part's narrowed
(public) bounds; a numeric attribute whose bounds have collapsed to a point
is no longer a candidate (its query is skipped, spending less).

Stopping rule (Friedman & Schuster): a node is a leaf when no attribute
is left, the depth is exhausted, or ``N_T / (t |C|) < sqrt(2) / eps`` with
``t`` the largest arity among the candidates (a numeric attribute counts 2).

Pruning (Algorithm 3) is post-processing of released counts: no query.

1. Top-down: the root keeps its noisy count (clipped at 0); each node's
   children get their noisy counts (clipped at 0) scaled to sum to the
   node's corrected count (an equal share when all are 0).
2. Bottom-up: a leaf's noisy class counts (clipped at 0) are scaled to its
   corrected count; an inner node's class counts are the sum of its
   children's. A leaf whose class counts are all 0 counts as uniform here and
   is stored with zero counts, so prediction backs off to its parent.
3. C4.5 error-based pruning with certainty factor ``cf``: a node's estimated
   errors as a leaf are ``e + AddErrs(N, e)`` (``e = N - max_c N_c``;
   :func:`add_errors` is C4.5's normal approximation of the upper confidence
   bound of the binomial); a subtree is replaced by a leaf when that estimate
   is at most the sum of its (already pruned) branches' estimates + 0.1, as
   C4.5 does. Subtree raising is not done: it needs the class counts of the
   other branches' records routed through the largest branch, which only new
   queries could give.

The calibrated counts are stored on every node (``prune=False`` still
calibrates, it only skips step 3), so prediction at a leaf with no mass backs
off to the nearest ancestor.
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
from streamdp.records.domains import Categorical, Numeric
from streamdp.validation import check_flag, check_probability

__all__ = ["DiffPC45", "add_errors", "upper_error_rate", "FORMAT"]

FORMAT = "streamdp.diffp_c45"

# C4.5 (stats.c): confidence levels and their normal deviates, interpolated for CF.
_CF_VAL = (0.0, 0.001, 0.005, 0.01, 0.05, 0.10, 0.20, 0.40, 1.00)
_CF_DEV = (4.0, 3.09, 2.58, 2.33, 1.65, 1.28, 0.84, 0.25, 0.00)


def _coeff(cf: float) -> float:
    i = 0
    while cf > _CF_VAL[i]:
        i += 1
    i = max(i, 1)
    dev = _CF_DEV[i - 1] + (_CF_DEV[i] - _CF_DEV[i - 1]) * (cf - _CF_VAL[i - 1]) / (_CF_VAL[i] - _CF_VAL[i - 1])
    return dev * dev


def add_errors(n: float, e: float, cf: float = 0.25) -> float:
    """C4.5's ``AddErrs(N, e)``: extra errors so that ``(e + extra) / N`` is the upper CF bound.

    Exact for ``e = 0`` (``N (1 - CF^(1/N))``), linear in ``e`` up to 1, the
    normal approximation with continuity correction above. Works on the
    fractional counts that calibration produces.

    >>> round(add_errors(6, 0), 3)  # N (1 - CF^(1/N)): the upper bound 0.206 of 0 errors in 6, times 6
    1.238
    """
    if n <= 0:
        return 0.0
    if e < 1e-6:
        return n * (1 - math.exp(math.log(cf) / n))
    if e < 0.9999:
        v0 = n * (1 - math.exp(math.log(cf) / n))
        return v0 + e * (add_errors(n, 1.0, cf) - v0)
    if e + 0.5 >= n:
        return 0.67 * (n - e)
    c = _coeff(cf)
    pr = (e + 0.5 + c / 2 + math.sqrt(c * ((e + 0.5) * (1 - (e + 0.5) / n) + c / 4))) / (n + c)
    return n * pr - e


def upper_error_rate(e: float, n: float, cf: float = 0.25) -> float:
    """``U_CF(e, N)``: C4.5's pessimistic error rate of a leaf with ``N`` records and ``e`` errors."""
    if n <= 0:
        return 0.0
    return (e + add_errors(n, e, cf)) / n


def _leaf_estimate(counts: np.ndarray, cf: float) -> float:
    n = float(counts.sum())
    e = n - float(counts.max()) if counts.size else 0.0
    return e + add_errors(n, e, cf)


class _Grown:
    """What growth released, per node id of the builder (nothing else is known about the data)."""

    def __init__(self) -> None:
        self.noisy_n: dict[int, float] = {}
        self.leaf_counts: dict[int, np.ndarray] = {}
        self.leaf_epsilon: dict[int, float] = {}
        self.children: dict[int, list[int]] = {}

    def add(self, node: int, noisy_n: float) -> None:
        self.noisy_n[node] = float(noisy_n)

    @property
    def n_nodes(self) -> int:
        return len(self.noisy_n)


def calibrate(grown: _Grown, n_classes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Algorithm 3 steps 1-2: (corrected counts (n,), class counts (n, C), informative (n,) bool).

    Pure post-processing of released values (parents have smaller ids than children).
    """
    n = grown.n_nodes
    raw = np.clip(np.array([grown.noisy_n[i] for i in range(n)], dtype=np.float64), 0, None)
    total = np.zeros(n)
    total[0] = raw[0]
    for node in range(n):
        kids = grown.children.get(node)
        if kids:
            r = raw[kids]
            s = r.sum()
            total[kids] = total[node] * r / s if s > 0 else total[node] / len(kids)
    counts = np.zeros((n, n_classes))
    informative = np.ones(n, dtype=bool)
    for node in range(n - 1, -1, -1):
        kids = grown.children.get(node)
        if kids:
            counts[node] = counts[kids].sum(axis=0)
        else:
            c = np.clip(np.asarray(grown.leaf_counts.get(node, np.zeros(n_classes)), dtype=np.float64), 0, None)
            s = c.sum()
            if s > 0:
                counts[node] = c * (total[node] / s)
            else:
                counts[node] = total[node] / n_classes
                informative[node] = False
    return total, counts, informative


def prune_nodes(grown: _Grown, counts: np.ndarray, cf: float) -> list[int]:
    """Algorithm 3 step 3 (C4.5 error-based pruning, no subtree raising): the inner nodes to turn into leaves.

    Bottom-up; a node whose ancestor is pruned too may be listed (harmless).
    """
    n = counts.shape[0]
    est = np.zeros(n)
    pruned: list[int] = []
    for node in range(n - 1, -1, -1):
        leaf_est = _leaf_estimate(counts[node], cf)
        kids = grown.children.get(node)
        if not kids:
            est[node] = leaf_est
            continue
        tree_est = float(est[kids].sum())
        if leaf_est <= tree_est + 0.1:
            pruned.append(node)
            est[node] = leaf_est
        else:
            est[node] = tree_est
    return pruned


class DiffPC45(PrivateLearner):
    """Friedman & Schuster's DiffPC4.5 (see the module docstring).

    ``scorer``: "gini" (S = 2), "max" (S = 1), "infogain" (S = log2(n + 1)
    + 1/ln 2 for nodes of at most n records), or any name
    :func:`~streamdp.learners.scorers.get_scorer` knows. ``n_bound``: the most
    records InfoGain and GainRatio scores may use per query, enforced by the
    data layer (twice the sensitivity at the bound); None: the root's noisy
    count plus a margin (:func:`~streamdp.learners.scorers.record_bound`).
    ``prune``: Algorithm 3 with certainty factor ``cf`` (0 < cf < 1).
    ``noise_seed``: reproducible noise, NOT private (tests only).
    ``top_up``: a branch that stops before spending its budget (early, or with numeric queries skipped) gives
    its leaf's class counts what it has left (False: the paper's budget, the leaf at one query's epsilon).
    """

    FORMAT = FORMAT

    def __init__(
        self,
        schema: Any,
        epsilon: float = 1.0,
        max_depth: int = 5,
        scorer: str = "gini",
        n_bound: int | None = None,
        prune: bool = True,
        cf: float = 0.25,
        noise_seed: int | None = None,
        top_up: bool = True,
    ):
        self.schema = schema
        self.epsilon = epsilon
        self.max_depth = max_depth
        self.scorer = scorer
        self.n_bound = n_bound
        self.prune = prune
        self.cf = cf
        self.noise_seed = noise_seed
        self.top_up = top_up

    # -- parameters -------------------------------------------------------------------------
    def _check_params(self) -> None:
        super()._check_params()
        checked_scorer(self.scorer, self.n_bound, self.schema)
        check_flag(self.prune, "prune")
        check_probability(self.cf, "cf (C4.5 certainty factor)", closed="neither")

    def epsilon_per_query(self) -> float:
        """``B / ((2 + n) d + 2)`` for the schema's ``n`` numeric attributes."""
        n = sum(isinstance(a, Numeric) for a in self.schema.attributes)
        return float(self.epsilon) / ((2 + n) * int(self.max_depth) + 2)

    def epsilon_leaf_counts(self) -> float:
        """One query's epsilon: the least a leaf's class counts get (with ``top_up`` a branch stopped early gives its
        leaf the rest of its budget; calibration rescales the counts: post-processing)."""
        return self.epsilon_per_query()

    def released_totals(self) -> tuple[np.ndarray, float]:
        """The fit's class totals and a per-class noise variance: the reachable leaves' sum, with one query's cell
        variance per leaf (the formula before top_up: calibration rescales the leaves to shares of the root's
        noisy count, so their own, smaller, variances would understate it)."""
        self._check_fitted()
        t = self.trees_[0]
        leaves = t.reachable_leaves()
        return t.counts[leaves].sum(axis=0), float(leaves.sum()) * self.cell_variance()

    # -- growth (Algorithm 2 + numeric split points) --------------------------------------
    def _fit(self, pds: PrivateDataset) -> None:
        self.scorer_: Scorer = get_scorer(self.scorer, self.schema)
        self.record_bound_: int | None = None
        self.sensitivity_ = float(self.scorer_.sensitivity(math.inf))  # set at the root for n-dependent scorers
        self.epsilon_per_query_ = self.epsilon_per_query()
        builder = TreeBuilder(self.schema)
        grown = _Grown()
        categorical = [j for j, a in enumerate(self.schema.attributes) if isinstance(a, Categorical)]
        root = builder.add(depth=0)
        self._grow(pds, builder, grown, root, frozenset(categorical), int(self.max_depth), 0.0)
        self.n_queries_ = len(pds.log)
        # Algorithm 3: post-processing only, pds is not used below.
        _, counts, informative = calibrate(grown, self.schema.n_classes)
        pruned = prune_nodes(grown, counts, float(self.cf)) if self.prune else []
        for node in pruned:
            builder.unsplit(node)
        stored = np.where(informative[:, None], counts, 0.0)
        for node in range(counts.shape[0]):
            # a grown leaf's release variance (approximate: calibration rescaled its counts)
            e = grown.leaf_epsilon.get(node)
            builder.set_counts(
                node, stored[node], None if e is None else cell_variance("geometric", e / pds.records_per_unit)
            )
        self.n_pruned_ = len(pruned)
        self.trees_ = [builder.build()]

    def _grow(
        self,
        pds: PrivateDataset,
        builder: TreeBuilder,
        grown: _Grown,
        node: int,
        cats: frozenset,
        depth_left: int,
        spent: float,
    ) -> None:
        """``spent``: what the branch spent above this node (its budget is ``epsilon``)."""
        eps = self.epsilon_per_query_
        schema = self.schema
        C = schema.n_classes
        numeric = [
            j for j, a in enumerate(schema.attributes) if isinstance(a, Numeric) and pds.bounds(j)[0] < pds.bounds(j)[1]
        ]
        n_t = pds.noisy_count(eps)
        grown.add(node, n_t)
        if node == 0:  # the root's released count sizes the record bound of the split scores
            b = self.record_bound_ = record_bound(self.scorer_, self.n_bound, n_t, eps / pds.records_per_unit)
            if b is not None:
                self.sensitivity_ = enforced_sensitivity(self.scorer_.sensitivity, b)
        arities = [schema.attributes[j].arity for j in cats] + [2] * len(numeric)
        t = max(arities) if arities else 0
        spent += eps
        if not arities or depth_left <= 0 or stops(n_t, t, C, eps / pds.records_per_unit):
            # the rest of the branch's budget (at least one query's: the paper's split)
            e_leaf = max(eps, rest_of_branch(self.epsilon, spent)) if self.top_up else eps
            grown.leaf_counts[node] = np.asarray(pds.noisy_class_counts(e_leaf), dtype=np.float64)
            grown.leaf_epsilon[node] = e_leaf
            return
        q, b = self.scorer_, self.record_bound_
        candidates: list[Any] = sorted(cats)
        for j in numeric:
            thr = pds.exponential_threshold(j, q, sensitivity=q.sensitivity, epsilon=eps, max_records=b)
            candidates.append((j, thr))
        choice = pds.exponential(
            candidates, lambda tau: float(q(tau)), sensitivity=q.sensitivity, epsilon=eps, max_records=b
        )
        spent += eps * (len(numeric) + 1)
        if isinstance(choice, tuple):
            j, thr = choice
            parts = pds.partition(j, thr)
            kids = builder.split(node, j, thr)
            rest = cats
        else:
            j = int(choice)
            parts = pds.partition(j)
            kids = builder.split(node, j)
            rest = cats - {j}
        grown.children[node] = kids
        for part, kid in zip(parts, kids):
            self._grow(part, builder, grown, kid, rest, depth_left - 1, spent)
