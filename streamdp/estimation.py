"""Noise-aware estimation: class distributions of tree nodes from released noisy counts.

Post-processing only: the rule reads released counts
and the noise variance, which is public (it follows from epsilon, the number
of trees and the mechanism), so it spends no epsilon and changes no released
number.

The one rule (:func:`node_distributions`): walk from the root down. At node
``v`` with noisy class counts ``y(v, .)``, total ``t(v) = sum_c y(v, c)`` and
``sd(v) = sqrt(Var t(v))``, the node is *informative* when
``t(v) >= SNR_MIN * sd(v)``; then its distribution is the posterior mean under a
Dirichlet prior centred on its parent's distribution ``p(parent)``::

    p(v) = (y(v) + a(v) p(parent)) / (t(v) + a(v)),   a(v) = PRIOR_WEIGHT * sd(v)^2 / t(v) + MIN_WEIGHT

(clipped at 0 and renormalised); otherwise ``p(v) = p(parent)``. The weight
``a(v)`` is what a Dirichlet prior of fixed concentration on the class shares
amounts to when the shares are measured with noise of variance ``sd^2 / t^2``:
the noisier the node relative to its total, the more it leans on its parent.
A leaf whose counts are swamped by noise therefore predicts from its deepest
informative ancestor, and in the end from the prior: height is a ceiling.

The forest-wide prior (:func:`forest_prior`) and the roots. Every tree's
root totals ``y(root_t, .)`` estimate the same class totals, with per-cell
variance ``L_t s^2``; the prior is their inverse-variance weighted mean
(weights ``1 / L_t``). A prior stump (a single-leaf tree,
:meth:`streamdp.forest.structure.ForestStructure.with_stumps`) is a tree with
``L = 1``: its cells have variance ``s^2`` where a random tree's root has
``L s^2``, so with stumps the prior is about ``L``-fold less noisy and the
stumps dominate it. In a forest (:class:`ForestNodes`) the roots of the random
trees take the prior itself (it already pools every root, optimally weighted;
shrinking a noisy root toward it could only add noise), the rule applies from
depth 1, and the stumps take no other part (no path, no vote). A learner's
tree (:func:`tree_node_proba`) shrinks its root toward the prior it is given.

Which counts are released (chosen here, by measurement: leaf counts only).
With ``s^2`` the variance of one released cell at the leaves, ``L(u)`` the
leaves below node ``u``, ``h`` the height and ``C`` the classes:

* ``"leaves"`` (chosen): only leaf cells are released with the whole per-tree
  budget; an ancestor's counts are sums of its leaves',
  ``Var y(u, c) = L(u) s^2`` (leaf: ``s^2``, root: ``L s^2``).
* levels (Hay, Rastogi, Miklau & Suciu 2010; Honaker 2015): every level
  released with ``eps_tree / (h + 1)``, each cell ``(h + 1)^2 s^2``, made
  consistent by least squares: a leaf stays at about ``(h + 1)^2 s^2``; an inner
  node combines its own ``(h + 1)^2 s^2`` with its subtree's, so
  ``Var ~ 1 / (1 / ((h+1)^2 s^2) + 1 / Var(sum of children))``, at most
  ``min(L(u), (h + 1)^2) s^2`` roughly.

Levels win only at nodes with more than ``(h + 1)^2`` leaves below (near the
root, where the pooled prior is already precise); leaves win ``(h + 1)^2``-fold
where the prediction is made. Measured in ``benchmarks/studies/accuracy_height.py``:
leaf-only release with this rule is as accurate or better and keeps the
published format ``(n_trees, max_leaves, n_classes)``.

>>> import numpy as np
>>> parent = np.array([-1, 0, 0]); depth = np.array([0, 1, 1])
>>> y = np.array([[70., 30.], [68., 2.], [2., 28.]])
>>> node_distributions(y, np.zeros(3), parent, depth, prior=np.array([0.5, 0.5])).round(2).tolist()
[[0.7, 0.3], [0.97, 0.03], [0.09, 0.91]]
>>> swamped = node_distributions(y, np.array([0., 1e4, 1e4]), parent, depth, prior=np.array([0.5, 0.5]))
>>> swamped.round(2).tolist()  # children at noise sd 100: both predict from the root
[[0.7, 0.3], [0.7, 0.3], [0.7, 0.3]]
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from functools import partial, reduce
from operator import add

import numpy as np

__all__ = [
    "SNR_MIN",
    "SNR_MIN_GROWN",
    "PRIOR_WEIGHT",
    "MIN_WEIGHT",
    "ESTIMATORS",
    "seq_sum",
    "cell_variance",
    "node_distributions",
    "shrink",
    "prior_from",
    "forest_prior",
    "release_prior",
    "prior_phase_first",
    "prior_phase_size",
    "forest_topology",
    "ForestNodes",
    "leaf_rule_proba",
    "tree_node_proba",
    "released_node_counts",
    "inverse_variance_mean",
    "reachable",
    "reachable_leaves",
    "shrink_one",
    "path_proba_one",
]

#: A node is used when its total stands this many noise standard deviations above zero.
SNR_MIN = 3.0
#: The bar for a learner's data-grown tree (ID3/C4.5 family, DPEA): such a tree splits a node only
#: when its noisy count clears a noise-scaled stopping rule, so its leaves are screened already;
#: measured on Nursery and the skewed data (benchmarks/studies/accuracy_height.py), 3 loses up to 0.3 there.
SNR_MIN_GROWN = 1.0
#: Dirichlet weight toward the parent: PRIOR_WEIGHT * Var(total) / total (pseudo-records).
PRIOR_WEIGHT = 8.0
#: Weight toward the parent even without noise (a leaf of one record is not certain).
MIN_WEIGHT = 1.0
#: "shrink": this module's rule; "leaf": the leaf's clipped counts alone (the rule before, kept for comparison).
ESTIMATORS = ("shrink", "leaf")
#: A float sum left to right (numpy's order for a few numbers and for the trees' rows added one by one), so the
#: one-record paths give numpy's floats: the builtin ``sum`` before Python 3.12, whose ``sum`` compensates
#: (Neumaier), which gives other last bits. ``seq_sum([1e16, 1.0, -1e16]) == 0.0`` on every version.
_left_to_right = partial(reduce, add)  # the 3.12+ branch, tested on every version (never given an empty list)
seq_sum = sum if sys.version_info < (3, 12) else _left_to_right


def cell_variance(mechanism: str, epsilon: float, k: int | None = None) -> float:
    """Variance of the noise on one released cell (public: a function of the mechanism's parameters).

    Two-sided geometric with ``a = exp(-epsilon)``: ``2a / (1 - a)^2``; Laplace of
    scale ``1/epsilon``: ``2 / epsilon^2``; k-anonymity (no noise, cells below
    ``k`` zeroed): the error of a cell is in ``[0, k)``, counted as ``k^2 / 4``.

    >>> round(cell_variance("laplace", 1.0), 3), round(cell_variance("geometric", 1.0), 3)
    (2.0, 1.841)
    """
    if mechanism == "kanon":
        return float(k) ** 2 / 4.0
    if math.isinf(epsilon):
        return 0.0
    if mechanism == "geometric":  # 1 - a as -expm1(-epsilon): finite for any epsilon > 0 (exp rounds to 1 below 1e-16)
        return 2.0 * math.exp(-epsilon) / math.expm1(-epsilon) ** 2
    if mechanism == "laplace":
        return 2.0 / epsilon**2
    raise ValueError(f"unknown mechanism {mechanism!r}")


def node_distributions(
    y: np.ndarray,
    var_total: np.ndarray,
    parent: np.ndarray,
    depth: np.ndarray,
    prior: np.ndarray,
    snr_min: float | None = None,
    roots_are_prior: bool = False,
) -> np.ndarray:
    """The rule of the module docstring for every node at once, level by level (root level first).

    ``y`` (n, C): noisy class counts per node; ``var_total`` (n,): variance of
    each node's total; ``parent`` (n,): parent index, -1 at roots; ``depth``
    (n,); ``prior`` (C,): the distribution a root is shrunk toward, or, with
    ``roots_are_prior`` (a forest: the prior pools the roots), the roots' distribution.
    """
    n, C = y.shape
    p = np.empty((n, C))
    order = np.argsort(depth, kind="stable")
    bounds = np.searchsorted(depth[order], np.arange(int(depth.max(initial=0)) + 2))
    for d in range(len(bounds) - 1):
        nodes = order[bounds[d] : bounds[d + 1]]
        if nodes.size:
            par = np.broadcast_to(prior, (nodes.size, C)) if d == 0 else p[parent[nodes]]
            p[nodes] = par if d == 0 and roots_are_prior else shrink(y[nodes], var_total[nodes], par, snr_min)
    return p


def shrink(y: np.ndarray, var_total: np.ndarray, parent_p: np.ndarray, snr_min: float | None = None) -> np.ndarray:
    """One step of the rule, row-wise: ``(y + a p_parent) / (t + a)`` where ``t >= SNR_MIN sd``, else ``p_parent``."""
    tot = _row_sums(y)
    sd = np.sqrt(np.maximum(var_total, 0.0))
    a = (PRIOR_WEIGHT * np.maximum(var_total, 0.0) / np.maximum(tot, 1.0) + MIN_WEIGHT)[:, None]
    q = np.clip((y + a * parent_p) / (tot[:, None] + a), 0.0, None)
    s = _row_sums(q)[:, None]
    ok = (tot > 0) & (tot >= (SNR_MIN if snr_min is None else snr_min) * sd) & (s[:, 0] > 0)
    return np.where(ok[:, None], q / np.where(s > 0, s, 1.0), parent_p)


def _row_sums(a: np.ndarray) -> np.ndarray:
    """Each row's sum left to right, the one-record path's order (:data:`seq_sum`): numpy's sum over a row of 8
    or more regroups it (pairwise, unrolled by 8), which gave the river path other last bits on LED's 10
    classes (a reviewer's finding).

    >>> row = np.array([[1e16, 1.0, -1e16, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]])
    >>> float(_row_sums(row)[0]) == seq_sum(row[0].tolist())
    True
    """
    out = a[:, 0].astype(np.float64)
    for c in range(1, a.shape[1]):
        out += a[:, c]
    return out


def shrink_one(y: list, var_total: float, parent_p: list, snr_min: float | None = None) -> list:
    """:func:`shrink` for one node, in plain Python (the one-record path of the river classifiers).

    >>> shrink_one([68.0, 2.0], 0.0, [0.7, 0.3]) == shrink(np.array([[68.0, 2.0]]), np.zeros(1), np.array([0.7, 0.3]))[0].tolist()
    True
    """
    tot = seq_sum(y)
    v = var_total if var_total > 0 else 0.0
    if not (tot > 0 and tot >= (SNR_MIN if snr_min is None else snr_min) * math.sqrt(v)):
        return parent_p
    a = PRIOR_WEIGHT * v / (tot if tot > 1.0 else 1.0) + MIN_WEIGHT
    den = tot + a
    q = [(yc + a * pc) / den for yc, pc in zip(y, parent_p)]
    if min(q) < 0:
        q = [x if x > 0 else 0.0 for x in q]
    s = seq_sum(q)
    return [x / s for x in q] if s > 0 else parent_p


def path_proba_one(pooled: list, prior: list) -> list:
    """:meth:`ForestNodes.path_proba` for one record, from the sum of its leaves' :meth:`ForestNodes.path_rows`.

    ``pooled`` holds, depth by depth from depth 1 (the river path; or from the
    root, with ``prior`` the estimate above it), the record's pooled class counts
    then their pooled total variance (``C + 1`` numbers per depth). A depth whose
    numbers equal the depth above's is skipped; the first given is always weighed.
    """
    C = len(prior)
    if C == 2:
        return _path_proba_two(pooled, prior)
    p = prior
    for d in range(0, len(pooled), C + 1):
        if d and pooled[d : d + C + 1] == pooled[d - C - 1 : d]:
            continue  # the same counts and variance as one level up: nothing new to weigh
        p = shrink_one(pooled[d : d + C], pooled[d + C], p)
    return p


def _path_proba_two(pooled: list, prior: list) -> list:
    """:func:`path_proba_one` for two classes: :func:`shrink_one`'s steps unrolled, the same operations
    in the same order (so the same floats), without a list per step: about 4x faster (the river loop's
    binary streams). Tested equal to the general loop (tests/test_estimation.py)."""
    p0, p1 = prior
    bar, sqrt = SNR_MIN, math.sqrt
    it = iter(pooled)
    last = None
    for y0, y1, v in zip(it, it, it):
        if last == (y0, y1, v):
            continue  # the same pool as one level up: nothing new to weigh
        last = (y0, y1, v)
        tot = y0 + y1
        if not v > 0:
            v = 0.0
        if not (tot > 0 and tot >= bar * sqrt(v)):
            continue  # not informative: the parent's estimate
        a = PRIOR_WEIGHT * v / (tot if tot > 1.0 else 1.0) + MIN_WEIGHT
        den = tot + a
        q0 = (y0 + a * p0) / den
        q1 = (y1 + a * p1) / den
        if q0 < 0 or q1 < 0:
            q0 = q0 if q0 > 0 else 0.0
            q1 = q1 if q1 > 0 else 0.0
        s = q0 + q1
        if s > 0:
            p0, p1 = q0 / s, q1 / s
    return [p0, p1]


def inverse_variance_mean(a, var_a, b, var_b):
    """Two independent measurements of the same quantity averaged by inverse variance, and the result's variance
    ``var_a var_b / (var_a + var_b)`` (written without the product: no overflow). Hay, Rastogi, Miklau & Suciu's
    bottom-up step; post-processing.

    >>> [round(float(x), 4) for x in inverse_variance_mean(10.0, 1.0, 16.0, 2.0)]
    [12.0, 0.6667]
    """
    total = np.asarray(var_a + var_b, dtype=np.float64)
    w = np.divide(var_b, total, out=np.ones_like(total), where=total > 0)  # a's weight (all of it: no noise at all)
    return w * a + (1.0 - w) * b, var_a * w


def prior_from(counts: np.ndarray) -> np.ndarray:
    """Class prior from the unclipped sum of released counts (noise has mean 0), clipped and normalised; uniform when empty."""
    C = counts.shape[-1]
    s = np.clip(counts.reshape(-1, C).sum(axis=0).astype(np.float64), 0.0, None)
    return s / s.sum() if s.sum() > 0 else np.full(C, 1.0 / C)


def forest_prior(counts: np.ndarray, n_leaves: np.ndarray, cell_var: float = 1.0, share: float = 1.0) -> np.ndarray:
    """The forest-wide class prior: the trees' root totals, inverse-variance weighted (module docstring).

    ``counts`` (n_trees, max_leaves, C) released leaf counts (zero past a tree's
    last leaf), ``n_leaves`` (n_trees,), ``cell_var`` the noise variance ``s^2``
    of one cell. A tree's root total of class ``c`` has noise variance
    ``n_leaves * s^2``: a prior stump (one leaf) weighs ``L`` times a random
    tree of ``L`` leaves. ``share`` is the probability that a record is counted
    in a given tree (1 under the split budget; ``1 / n_trees`` under the
    disjoint budget; times ``beta`` under k-anonymity sampling): below 1 each
    tree sees its own sample, whose class count ``m_c`` varies by about
    ``m_c (1 - share)`` too, so the weights are ``1 / (n_leaves s^2 + m_c (1 - share))``
    with ``m_c`` from a first, noise-only weighted pass (public: post-processing).
    Clipped at 0 and normalised; uniform when nothing is positive.

    >>> counts = np.zeros((2, 4, 2)); counts[0] = [[30, -9], [-9, 30], [8, 0], [0, 9]]; counts[1, 0] = [70, 30]
    >>> forest_prior(counts, np.array([4, 1])).round(2).tolist()  # the stump's 70/30 outweighs the noisy root 4:1
    [0.67, 0.33]
    """
    raw_var = np.broadcast_to(np.asarray(cell_var, dtype=np.float64), (counts.shape[0],))
    cell_var = np.maximum(raw_var, 1e-12)
    noise = (np.maximum(np.asarray(n_leaves, dtype=np.float64), 1.0) * cell_var)[:, None]
    tot = counts.sum(axis=1).astype(np.float64)  # (T, C): each tree's root totals
    # A tree that released nothing (no noise and no count: e.g. the random trees while the river classifier's
    # prior phase releases the stumps alone) measures nothing: weight 0, unless no tree has released.
    silent = (raw_var == 0) & ~counts.reshape(counts.shape[0], -1).any(axis=1)
    if silent.any() and not silent.all():
        noise = np.where(silent[:, None], np.inf, noise)
    w = np.broadcast_to(1.0 / noise, tot.shape)
    if share < 1.0:
        m = np.clip((w * tot).sum(axis=0) / w.sum(axis=0), 0.0, None)  # one tree's expected class counts
        w = 1.0 / (noise + m[None, :] * (1.0 - share))
    return prior_from((w * tot).sum(axis=0) / w.sum(axis=0))


def prior_phase_first(variance: float) -> int:
    """Records of a prior phase's first release: twice the noise sd of a difference of two noisy class totals,
    ``ceil(2 sqrt(2 v))`` for ``v`` one class total's noise variance, so that even the first noisy prior mostly
    names the class of a pure batch (public: from the mechanism's parameters).

    >>> prior_phase_first(cell_variance("geometric", 1.0))
    4
    """
    return max(1, math.ceil(2.0 * math.sqrt(2.0 * variance)))


def prior_phase_size(k: int, first: int, total: int) -> int:
    """Records of release ``k`` (from 0) of a prior phase of ``total`` records: ``first * 2**k``, the last one cut
    to end the phase, 0 once it is over (public: a function of the release count). The river classifiers' first
    records are released as class totals alone on this schedule, so they predict a measured prior early.

    >>> [prior_phase_size(k, 4, 100) for k in range(6)]
    [4, 8, 16, 32, 40, 0]
    """
    done = min(first * ((1 << min(k, 62)) - 1), total)
    return min(first << min(k, 62), total - done)


def release_prior(totals: np.ndarray, sizes: np.ndarray, cell_var: np.ndarray) -> np.ndarray:
    """Class shares from the noisy class totals of disjoint releases of known sizes, inverse-variance weighted.

    ``totals`` (R, C): release ``j``'s noisy class totals (a prior stump's delta);
    ``sizes`` (R,): its records ``n_j`` (public: the release schedule); ``cell_var``
    (R,): the noise variance of one of its cells. Release ``j`` measures the
    shares as ``totals_j / n_j``, with variance ``v_j / n_j^2`` from the noise
    and about ``g / n_j`` from sampling (``g = (1 - sum p^2) / C``, ``p`` the
    plain sum's shares). The weights ``1 / (v_j / n_j^2 + g / n_j)`` are ``n_j``
    (every record alike, the summed counts) when the noise is small and
    ``n_j^2 / v_j`` when it dominates: a small release noised as much as a big one
    (the river classifier's first batches) no longer drowns the others, as it
    does in the plain sum. Clipped at 0 and normalised (:func:`prior_from`).

    >>> totals = np.array([[60., 40.], [5., 65.]])  # 100 records at noise sd 2, then 100 at sd 30
    >>> prior_from(totals.sum(axis=0)).round(2).tolist()  # the plain sum follows the second release's noise
    [0.38, 0.62]
    >>> release_prior(totals, np.array([100, 100]), np.array([4., 900.])).round(2).tolist()
    [0.59, 0.41]
    """
    totals = np.asarray(totals, dtype=np.float64).reshape(-1, np.shape(totals)[-1])
    n = np.maximum(np.asarray(sizes, dtype=np.float64), 1.0)
    p = prior_from(totals.sum(axis=0))
    g = (1.0 - float((p**2).sum())) / totals.shape[1]
    w = 1.0 / (np.maximum(np.asarray(cell_var, dtype=np.float64), 0.0) / n**2 + g / n + 1e-12)
    return prior_from((w[:, None] * totals / n[:, None]).sum(axis=0))


def forest_topology(feature: np.ndarray, child: np.ndarray, leaf: np.ndarray):
    """Parent, depth and leaf position of every node of padded BFS forest arrays (:mod:`streamdp.forest.structure`).

    Returns ``parent`` and ``depth`` of shape ``(n_trees, max_nodes)`` (-1 at
    roots and padding) and ``leaf_node`` ``(n_trees, max_leaves)``: the node
    index of each leaf number (-1 past a tree's last leaf). In BFS order the
    children of consecutive inner nodes are contiguous, so arities are the
    differences of their first-child indices.
    """
    T, M = feature.shape
    parent = np.full((T, M), -1, dtype=np.int64)
    depth = np.full((T, M), -1, dtype=np.int64)
    n_leaves = (leaf >= 0).sum(axis=1)
    leaf_node = np.full((T, int(n_leaves.max())), -1, dtype=np.int64)
    for t in range(T):
        real = int(np.flatnonzero(leaf[t] >= 0).max()) + 1
        inner = np.flatnonzero(leaf[t, :real] < 0)
        first = child[t, inner].astype(np.int64)
        arity = np.diff(np.append(first, real))
        kids = np.arange(1, real)
        parent[t, kids] = np.repeat(inner, arity)
        depth[t, 0] = 0
        for lo, hi in _levels(parent[t, :real]):
            depth[t, lo:hi] = depth[t, parent[t, lo:hi]] + 1
        lf = np.flatnonzero(leaf[t] >= 0)
        leaf_node[t, leaf[t, lf]] = lf
    return parent, depth, leaf_node


def _levels(parent: np.ndarray):
    """(start, end) of each BFS level below the root; in BFS order parents never decrease."""
    lo, hi = 0, 1
    while hi < parent.size:
        lo, hi = hi, int(np.searchsorted(parent, hi, side="left"))
        hi = max(hi, lo + 1)  # unreachable for a valid tree; guards against a loop
        yield lo, hi


def _subtree_sums(values: np.ndarray, parent: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Each node's value plus all its descendants' (deepest level first). ``values`` (n,) or (n, C)."""
    out = values.astype(np.float64, copy=True)
    for d in range(int(depth.max(initial=0)), 0, -1):
        nodes = np.flatnonzero(depth == d)
        np.add.at(out, parent[nodes], out[nodes])
    return out


@dataclass
class ForestNodes:
    """Every node of a released forest, flattened over the trees (built once per release).

    ``y`` (n_nodes, C): noisy class counts (a leaf's released counts; an inner
    node's, the sum of its leaves'); ``var`` (n_nodes,): the public variance of
    each node's total, ``L(u) C cell_var``; ``parent``/``depth`` (n_nodes,);
    ``leaf_node`` (n_trees, max_leaves): flat node of each leaf number (-1 past
    a tree's last leaf); ``prior`` (C,): the forest-wide prior (:func:`forest_prior`).
    Only the random trees are nodes here: prior stumps (the last ``n_prior``
    trees of the arrays) inform the prior alone.
    """

    y: np.ndarray
    var: np.ndarray
    parent: np.ndarray
    depth: np.ndarray
    leaf_node: np.ndarray
    prior: np.ndarray

    @classmethod
    def build(
        cls,
        feature: np.ndarray,
        child: np.ndarray,
        leaf: np.ndarray,
        counts: np.ndarray,
        cell_var: float,
        n_prior: int = 0,
        share: float = 1.0,
        layout: tuple[np.ndarray, ...] | None = None,
        node_var: np.ndarray | None = None,
        prior: np.ndarray | None = None,
    ) -> ForestNodes:
        """Every node's counts and variance from the released leaf counts; ``cell_var``: the noise variance of
        one cell, a number or one per tree (stumps included); ``layout``: :meth:`layout`, cached by a caller
        whose structure does not change between releases; ``node_var`` (stumps included, the structure's
        ``(n_trees, max_nodes)``): the noise variance of each node's count of one class, where it is not
        ``cell_var`` times the leaves below (trees grown release by release, :mod:`streamdp.forest.growth`);
        ``prior``: a class prior measured otherwise from released numbers (:func:`release_prior`), in place
        of :func:`forest_prior`."""
        n_leaves = (leaf >= 0).sum(axis=1)
        if prior is None and node_var is not None:
            prior = forest_prior(counts, np.ones_like(n_leaves), node_var[:, 0], share)
        elif prior is None:
            prior = forest_prior(counts, n_leaves, cell_var, share)
        g_parent, g_depth, g_leaf, n_below, g_tree = (
            layout if layout is not None else cls.layout(feature, child, leaf, n_prior)
        )
        T, L = g_leaf.shape
        counts = counts[:T, :L]
        has = g_leaf >= 0
        y = np.zeros((g_depth.size, counts.shape[2]))
        y[g_leaf[has]] = counts[has]
        y = _subtree_sums(y, g_parent, g_depth)
        if node_var is not None:
            M = leaf.shape[1]
            last = np.max(np.where(leaf[:T] >= 0, np.arange(M)[None, :], -1), axis=1)
            var = node_var[:T][np.arange(M)[None, :] <= last[:, None]] * counts.shape[2]
        else:
            per_tree = np.broadcast_to(np.asarray(cell_var, dtype=np.float64), (counts.shape[0] + n_prior,))[:T]
            var = n_below * counts.shape[2] * per_tree[g_tree]
        return cls(y, var, g_parent, g_depth, g_leaf, prior)

    @classmethod
    def of_trees(
        cls,
        released: list[tuple[np.ndarray, np.ndarray]],
        parents: list[np.ndarray],
        depths: list[np.ndarray],
        leaves: list[np.ndarray],
        prior: np.ndarray,
    ) -> ForestNodes:
        """A learner's trees as one forest of nodes, each tree numbering its own nodes: its leaf number is the
        node number (what :meth:`streamdp.learners.tree.Tree.apply` gives), so :meth:`path_proba` takes the
        trees' ``apply`` results as they are. ``released``: per tree, every node's counts and its total's
        variance (:func:`released_node_counts`); ``leaves``: per tree, the node numbers of its reachable leaves;
        ``prior``: the class prior the roots take.

        >>> parent, depth = np.array([-1, 0, 0]), np.array([0, 1, 1])
        >>> y = np.array([[12., 8.], [10., 0.], [2., 8.]]); var = np.array([4., 2., 2.])
        >>> nodes = ForestNodes.of_trees([(y, var)] * 2, [parent] * 2, [depth] * 2, [np.array([1, 2])] * 2,
        ...                              np.array([0.6, 0.4]))
        >>> nodes.path_proba(np.array([[1, 1], [2, 2]])).round(2).tolist()  # two trees' evidence pooled per depth
        [[0.95, 0.05], [0.25, 0.75]]
        """
        sizes = [len(d) for d in depths]
        offs = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        leaf_node = np.full((len(sizes), max(sizes)), -1, dtype=np.int64)
        for t, (off, lv) in enumerate(zip(offs, leaves)):
            leaf_node[t, lv] = off + lv
        parent = np.concatenate([np.where(p >= 0, p + off, -1) for p, off in zip(parents, offs)])
        return cls(
            np.concatenate([y for y, _ in released]),
            np.concatenate([v for _, v in released]),
            parent,
            np.concatenate(depths),
            leaf_node,
            np.asarray(prior, dtype=np.float64),
        )

    @staticmethod
    def layout(feature: np.ndarray, child: np.ndarray, leaf: np.ndarray, n_prior: int = 0) -> tuple[np.ndarray, ...]:
        """What :meth:`build` needs of the structure alone: flat parent, depth, leaf node, leaves below and tree
        of each node."""
        T = feature.shape[0] - n_prior
        feature, child, leaf = feature[:T], child[:T], leaf[:T]
        L = int((leaf >= 0).sum(axis=1).max())
        parent, depth, leaf_node = forest_topology(feature, child, leaf)
        M = feature.shape[1]
        offs = (np.arange(T, dtype=np.int64) * M)[:, None]
        real = depth >= 0
        g_index = np.full(T * M, -1, dtype=np.int64)
        g_index[np.flatnonzero(real.ravel())] = np.arange(int(real.sum()))
        g_parent = np.where(parent >= 0, g_index[np.maximum(parent + offs, 0)], -1)[real]
        g_depth = depth[real]
        leaf_node = leaf_node[:, :L]
        has = leaf_node >= 0
        g_leaf = np.full((T, L), -1, dtype=np.int64)
        g_leaf[has] = g_index[(leaf_node + offs)[has]]
        n_below = np.zeros(g_depth.size)
        n_below[g_leaf[has]] = 1.0
        return g_parent, g_depth, g_leaf, _subtree_sums(n_below, g_parent, g_depth), np.nonzero(real)[0]

    def leaf_proba(self, snr_min: float | None = None) -> np.ndarray:
        """Per random tree, per leaf number: the rule applied within that tree alone, ``(n_trees, max_leaves, C)``."""
        p = node_distributions(self.y, self.var, self.parent, self.depth, self.prior, snr_min, roots_are_prior=True)
        has = self.leaf_node >= 0
        table = np.tile(self.prior, self.leaf_node.shape + (1,))
        table[has] = p[self.leaf_node[has]]
        return table

    def path_rows(self, flat_leaves: np.ndarray | None = None, path: np.ndarray | None = None) -> np.ndarray:
        """Per leaf, its path's counts and total variance depth by depth, ``(k, (h + 1) * (C + 1))``.

        ``flat_leaves``: ``tree * max_leaves + leaf`` numbers (default: all).
        Row layout ``[y(depth 0), var(depth 0), y(depth 1), var(depth 1), ...]``,
        the leaf's own numbers again below a shallower leaf (:meth:`path_proba`), zeros
        below a root that is a leaf and for padding. The sum of a record's rows
        over the trees is what :meth:`path_proba` pools depth by depth
        (:func:`path_proba_one` finishes it). ``path``: :meth:`path_nodes` of the
        same leaves, when the caller keeps it (it depends on the structure only,
        so it holds across releases).
        """
        if path is None:
            path = self.path_nodes(flat_leaves)
        k, h1 = path.shape
        yv = self.node_table()
        return yv[path].reshape(k, h1 * yv.shape[1])

    def node_table(self) -> np.ndarray:
        """Every node's counts then its total's variance, ``(n_nodes + 1, C + 1)``; the last row zeros (what
        :meth:`path_nodes` points at below a root that is a leaf and for padding)."""
        n, C = self.y.shape
        yv = np.zeros((n + 1, C + 1))
        yv[:n, :C] = self.y
        yv[:n, C] = self.var
        return yv

    def path_nodes(self, flat_leaves: np.ndarray | None = None) -> np.ndarray:
        """Per leaf, the node at each depth of its path, ``(k, h + 1)``: below a shallower leaf, the leaf
        itself (:meth:`path_proba`); ``n_nodes`` (a zero row of :meth:`path_rows`) below a root that is a
        leaf and for padding. Depends on the structure only.

        >>> nodes = ForestNodes.build(np.array([[0, -1, -1, -1]]), np.array([[1, 0, 0, 0]]),
        ...                           np.array([[-1, 0, 1, -1]]), np.ones((1, 2, 2)), 1.0)
        >>> nodes.path_nodes().tolist()  # a root with two leaves: each leaf's path is (root, leaf)
        [[0, 1], [0, 2]]
        >>> deep = ForestNodes.build(np.array([[0, -1, 1, -1, -1]]), np.array([[1, 0, 3, 0, 0]]),
        ...                          np.array([[-1, 0, -1, 1, 2]]), np.ones((1, 3, 2)), 1.0)
        >>> deep.path_nodes().tolist()  # leaf 0 (node 1) ends at depth 1: repeated at depth 2
        [[0, 1, 1], [0, 2, 3], [0, 2, 4]]
        """
        T, L = self.leaf_node.shape
        n = self.y.shape[0]
        h = int(self.depth.max(initial=0))
        flat = np.arange(T * L) if flat_leaves is None else np.asarray(flat_leaves, dtype=np.int64)
        node = self.leaf_node.reshape(-1)[flat]
        cur = np.where(node >= 0, node, n)  # n: a zero row
        depth, parent = np.append(self.depth, -1), np.append(self.parent, -1)
        path = np.full((flat.size, h + 1), n, dtype=np.int64)
        rows = np.arange(flat.size)
        leaf_depth = depth[cur]
        for _ in range(h + 1):
            ok = cur < n
            path[rows[ok], depth[cur[ok]]] = cur[ok]
            up = parent[cur]
            cur = np.where(ok & (up >= 0), up, n)
        below = (leaf_depth >= 1)[:, None] & (np.arange(h + 1)[None, :] > leaf_depth[:, None])
        return np.where(below, np.where(node >= 0, node, n)[:, None], path)

    def path_proba(self, leaves: np.ndarray) -> np.ndarray:
        """The rule along each record's paths in all trees at once (the probability vote), ``(n, C)``.

        At depth ``d >= 1`` the record's nodes in the trees are pooled (their noises
        are independent, so the pooled total's variance is the sum): the pooled
        counts are shrunk toward the pooled estimate one level up; at the roots
        it is the prior. A tree whose path ends above ``d`` (a pruned or grown tree's
        shallower leaf) pools its leaf there: the most specific estimate it holds
        (a root that is a leaf adds nothing: the prior stands for it). A pool no tree
        deepens (the same counts and variance as one level up) is not weighed twice,
        so a record's estimate does not depend on how deep unrelated branches go.
        Leaving shallower trees out (the rule before) left the deep levels of unbalanced
        trees to the few trees that reach them: on the default (pruned) fit, paired on
        the same forests over every shared dataset, the skewed data, every height and
        epsilon 0.5, 1 and 2, never worse by more than 0.01 in a setting and up to 0.04
        better at the tallest heights; on grown streams up to 0.07 (``benchmarks/results/estimation_shallow_leaves.log``).
        Noisy trees of one height (drawn, not pruned) are unchanged; with exact counts a depth
        at which every tree's node holds all its parent's records is skipped too (nothing new). ``leaves`` (n, n_trees): leaf numbers from
        :meth:`ForestStructure.apply` (the random trees' columns; stumps' dropped here).
        """
        leaves = leaves[:, : self.leaf_node.shape[0]]
        n, T = leaves.shape
        C = self.y.shape[1]
        node = self.leaf_node[np.arange(T)[None, :], leaves]  # (n, T) flat leaf nodes
        h = int(self.depth.max(initial=0))
        leaf_depth = self.depth[self.leaf_node[self.leaf_node >= 0]]
        full = bool(np.all(leaf_depth == h))  # the common case: every leaf at the full height, its parent at each step
        path = [node]
        for d in range(h - 1, -1, -1):  # path[k]: the record's node at depth h - k (or its leaf, when shallower)
            up = path[-1]
            path.append(self.parent[up] if full else np.where(self.depth[up] > d, self.parent[up], up))
        # (path_nodes holds the same rule per leaf, for the river paths; walking up here was 1.5-5x faster than
        # gathering path_nodes of the leaves reached, timed ad hoc in the review of round 2's eleventh session)
        y, var = self.y, self.var
        if not full:  # a root that is a leaf adds nothing below the roots (the prior stands for it)
            yv = self.node_table()
            y, var = yv[:, :C], yv[:, C]
            path = [np.where(self.depth[nd] >= 1, nd, len(var) - 1) for nd in path]
        p = np.broadcast_to(self.prior, (n, C))
        last = None
        for d in range(1, h + 1):  # depth 0: the roots take the prior (module docstring)
            nd = path[h - d]
            # tree by tree: T contiguous (n, C) gathers are several times faster than one (n, T, C) gather and sum
            Y, V = np.zeros((n, C)), np.zeros(n)
            for t in range(T):
                col = nd[:, t]
                Y += y[col]
                V += var[col]
            q = shrink(Y, V, p)
            if last is not None:  # the same counts and variance as one level up: not weighed twice
                q = np.where(((Y == last[0]).all(axis=1) & (V == last[1]))[:, None], p, q)
            p, last = q, (Y, V)
        return np.array(p, dtype=np.float64) if h == 0 else p  # (stumps only: a writable array, not the broadcast)


def leaf_rule_proba(counts: np.ndarray) -> np.ndarray:
    """The rule before this module, per leaf: clipped counts normalised, the clipped prior when all are 0."""
    C = counts.shape[-1]
    pos = np.clip(counts, 0, None).astype(np.float64)
    prior = prior_from(pos.reshape(-1, C))
    tot = pos.sum(axis=-1, keepdims=True)
    return np.where(tot > 0, pos / np.where(tot > 0, tot, 1.0), prior)


def tree_node_proba(
    feature: np.ndarray,
    parent: np.ndarray,
    depth: np.ndarray,
    counts: np.ndarray,
    cell_var: float,
    prior: np.ndarray | None = None,
    snr_min: float | None = None,
    roots_are_prior: bool = False,
    own_var: np.ndarray | None = None,
) -> np.ndarray:
    """Per node of a learner's :class:`~streamdp.learners.tree.Tree`: the estimated class distribution.

    Only the counts of reachable leaves (``feature < 0``, no leaf above) are
    read: an inner node's counts are recomputed as the sum of its leaves'
    (``Var = L(u) C cell_var`` for its total), whatever the tree stored there;
    except where ``own_var`` gives inner nodes whose stored counts are a release of
    their own (Bai et al.'s DPEA releases every step's leaves, so each later step's
    root carries its own class counts): :func:`released_node_counts` combines
    both. The default ``prior`` is the root's (combined) counts.
    ``roots_are_prior``: the root's distribution is ``prior`` itself, as in a
    forest; for a prior measured from more released numbers than the root's
    own counts (:class:`streamdp.river.PrivateWindowClassifier`'s prior pooled
    over windows and its prior phase). Shrunk toward such a prior by the
    Dirichlet weight, a root kept most of its own noise: a one-leaf DiffPC45
    model of a 200-record window (leaf noise sd 37) named the minority class
    of Agrawal for a whole window (``benchmarks/results/river_variants.log``).
    For a batch fit's own prior it made no difference on average
    (``benchmarks/results/learner_roots.log``: 288 cells, mean -0.0003), so it
    is off there.
    """
    y, var = released_node_counts(feature, parent, depth, counts, cell_var, own_var)
    if prior is None:
        prior = prior_from(y[:1])
    return node_distributions(y, var, parent, depth, prior, snr_min, roots_are_prior)


def released_node_counts(
    feature: np.ndarray,
    parent: np.ndarray,
    depth: np.ndarray,
    counts: np.ndarray,
    cell_var: float,
    own_var: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Every node's class counts from a tree's releases and the noise variance of its total, ``(n, C)``, ``(n,)``.

    A reachable leaf's counts are its release (total variance ``C cell_var``, or ``C own_var`` where given:
    the noise variance of one cell of each node's own release, 0 for none). An inner node's are the sum of
    its children's, unless ``own_var`` says it was released too: then the two independent measurements of the
    same records are averaged by inverse variance (Hay, Rastogi, Miklau & Suciu 2010's bottom-up step,
    variance ``v_own v_sum / (v_own + v_sum)``), and its parent sums that. Post-processing of released numbers
    (and of public variances). Not unbiased for DPEA: a step root's own release is the one that cleared the bar
    to split, so it runs high (a reviewer measured +25 to +35 records on its total where the leaves' sum is
    near 0, the excess spread over the classes); reading it still wins or ties in every setting measured
    (``benchmarks/results/dpea_inner_releases.log``: -0.003 to +0.045 accuracy over 30 settings).

    >>> feature, parent, depth = np.array([0, 1, -1, -1, -1]), np.array([-1, 0, 0, 1, 1]), np.array([0, 1, 1, 2, 2])
    >>> counts = np.array([[0., 0.], [30., 10.], [5., 5.], [20., 0.], [14., 6.]])
    >>> y, var = released_node_counts(feature, parent, depth, counts, 1.0)
    >>> y[1].tolist(), var.tolist()  # node 1: its leaves' sum
    ([34.0, 6.0], [6.0, 4.0, 2.0, 2.0, 2.0])
    >>> y, var = released_node_counts(feature, parent, depth, counts, 1.0, own_var=np.array([0, 1, 1, 1, 1.]))
    >>> y[1].round(2).tolist(), round(float(var[1]), 3)  # its own release (variance 2) and its leaves' (4), 2:1
    ([31.33, 8.67], 1.333)
    """
    n, C = counts.shape
    reach = reachable(feature, parent, depth)
    leaf = reach & (feature < 0)
    y = np.where(leaf[:, None], counts, 0.0).astype(np.float64)
    own = None if own_var is None else np.asarray(own_var, dtype=np.float64)
    var = np.where(leaf, C * (float(cell_var) if own is None else np.where(own > 0, own, cell_var)), 0.0)
    mine = None if own is None else reach & ~leaf & (own > 0)
    for d in range(int(depth.max(initial=0)), -1, -1):  # deepest level first: children before parents
        nodes = np.flatnonzero(depth == d)
        if mine is not None:
            at = nodes[mine[nodes]]
            both, v = inverse_variance_mean(counts[at], (C * own[at])[:, None], y[at], var[at][:, None])
            y[at], var[at] = both, v[:, 0]
        if d > 0:
            np.add.at(y, parent[nodes], y[nodes])
            np.add.at(var, parent[nodes], var[nodes])
    return y, var


def reachable(feature: np.ndarray, parent: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Nodes with no leaf above them (pruning leaves unreachable nodes in a tree's arrays)."""
    leafy = feature < 0
    reach = np.ones(feature.shape[0], dtype=bool)
    for d in range(1, int(depth.max(initial=0)) + 1):
        nodes = np.flatnonzero(depth == d)
        reach[nodes] = reach[parent[nodes]] & ~leafy[parent[nodes]]
    return reach


def reachable_leaves(feature: np.ndarray, parent: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Leaves (``feature < 0``) with no leaf above them: pruning leaves unreachable nodes in a tree's arrays."""
    return (feature < 0) & reachable(feature, parent, depth)
