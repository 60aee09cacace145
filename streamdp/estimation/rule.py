"""Class distributions of tree nodes from released noisy counts: the pooled vote's posterior step and the shrink rule.

Post-processing only: both read released counts
and the noise variance, which is public (it follows from epsilon, the number
of trees and the mechanism), so they spend no epsilon and change no released
number.

The probability vote (:func:`posterior_step`, chained along a record's pooled
paths by :meth:`streamdp.estimation.ForestNodes.path_proba`): a posterior mean
at every depth, with no gate, so every level moves the estimate by what its
counts are worth (docs/decisions/016-estimation-posterior-mean.md).

The shrink rule (:func:`node_distributions`: each tree alone, under the
majority vote and for the learners' trees): walk from the root down. At node
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

Which counts are released (leaf counts only).
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
where the prediction is made: leaf-only release with this rule is as accurate
or better, and keeps the published format ``(n_trees, max_leaves, n_classes)``.

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
from functools import partial, reduce
from operator import add

import numpy as np

__all__ = [
    "KAPPA",
    "SHARE_SPREAD",
    "posterior_step",
    "SNR_MIN",
    "SNR_MIN_GROWN",
    "PRIOR_WEIGHT",
    "MIN_WEIGHT",
    "TREE_WEIGHT",
    "ESTIMATORS",
    "seq_sum",
    "cell_variance",
    "node_distributions",
    "shrink",
]

#: The pooled vote's prior strength: a node's class shares are drawn around its parent's with the spread of a
#: Dirichlet of ``KAPPA - 1`` pseudo-records (:func:`posterior_step`).
KAPPA = 8.0
#: The relative spread of a node's expected records around its uniform share of its parent's (:func:`posterior_step`).
SHARE_SPREAD = 0.5
#: A node is used when its total stands this many noise standard deviations above zero.
SNR_MIN = 3.0
#: The bar for a learner's data-grown tree (ID3/C4.5 family, DPEA): such a tree splits a node only
#: when its noisy count clears a noise-scaled stopping rule, so its leaves are screened already and
#: the forest's bar would discard what they hold.
SNR_MIN_GROWN = 1.0
#: Dirichlet weight toward the parent: PRIOR_WEIGHT * Var(total) / total (pseudo-records).
PRIOR_WEIGHT = 8.0
#: Weight toward the parent even without noise (a leaf of one record is not certain).
MIN_WEIGHT = 1.0
#: The tree-mean vote's weight toward the pooled estimate: TREE_WEIGHT * Var(total) / total + MIN_WEIGHT
#: pseudo-records (:meth:`streamdp.estimation.ForestNodes.tree_mean`; docs/decisions/026-tree-mean-vote.md).
TREE_WEIGHT = 2.0
#: "shrink": this module's rule; "leaf": the leaf's clipped counts alone (the plain rule, kept for comparison).
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
        if k is None:
            raise ValueError("the k-anonymity mechanism's cell variance needs k")
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


def shrink(
    y: np.ndarray,
    var_total: np.ndarray,
    parent_p: np.ndarray,
    snr_min: float | None = None,
    weight: float = PRIOR_WEIGHT,
) -> np.ndarray:
    """One step of the rule, row-wise: ``(y + a p_parent) / (t + a)`` where ``t >= SNR_MIN sd``, else ``p_parent``;
    ``a = weight * Var(t) / t + MIN_WEIGHT``."""
    tot = _row_sums(y)
    sd = np.sqrt(np.maximum(var_total, 0.0))
    a = (weight * np.maximum(var_total, 0.0) / np.maximum(tot, 1.0) + MIN_WEIGHT)[:, None]
    q = np.clip((y + a * parent_p) / (tot[:, None] + a), 0.0, None)
    s = _row_sums(q)[:, None]
    ok = (tot > 0) & (tot >= (SNR_MIN if snr_min is None else snr_min) * sd) & (s[:, 0] > 0)
    return np.where(ok[:, None], q / np.where(s > 0, s, 1.0), parent_p)


def posterior_step(
    y: np.ndarray, var_total: np.ndarray, parent_p: np.ndarray, parent_n: np.ndarray, share: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """One depth of the pooled vote's posterior mean, row-wise: ``(p, n)``, the class shares and the records.

    ``y`` (k, C) noisy class counts with total ``t`` and noise variance ``v`` (``var_total``, per cell
    ``v / C``); ``parent_p`` (k, C) and ``parent_n`` (k,) the estimate one depth up; ``share`` (k,) the
    node's uniform share of its parent's records (public: its share of the leaves below the parent).

    * Records: the noisy total ``t`` (variance ``v``) and the parent's records times the share
      ``m = parent_n share`` (variance ``(SHARE_SPREAD m)^2 + 1``), averaged by inverse variance. A
      node whose total is swamped by noise keeps about ``m``: the noise in ``t`` does not pass for records.
    * Shares: a Gaussian approximation of the posterior mean under a Dirichlet prior centred on
      ``p = parent_p`` (``KAPPA - 1`` pseudo-records) with the noise of known variance: per class
      ``p_c + w_c (y_c - t p_c) / max(|t|, n)``, ``w_c = n^2 / (n^2 + KAPPA n + KAPPA (v / C) / (p_c (1 - p_c)))``:
      the sampling and the noise variance of the class share against its spread around the parent's. A rare
      class (small ``p_c (1 - p_c)``) needs more evidence. Clipped at 0 and renormalised; no gate: every
      node moves its estimate by what its counts are worth.

    Post-processing of released counts and public variances. :func:`streamdp.estimation.one_record.posterior_one`
    is the same step for one record, float for float.

    >>> y = np.array([[60., 10.], [3., 4.]]); v = np.array([8., 2e4])
    >>> p, n = posterior_step(y, v, np.array([[0.5, 0.5]] * 2), np.array([140., 140.]), np.array([0.5, 0.5]))
    >>> p.round(2).tolist(), n.round(0).tolist()  # a clear node moves, a swamped one keeps its parent's
    ([[0.81, 0.19], [0.5, 0.5]], [70.0, 66.0])
    """
    C = y.shape[1]
    t = _row_sums(y)
    v = np.where(var_total > 0, var_total, 0.0)
    m = np.where(share > 0, parent_n * share, parent_n)
    sm = SHARE_SPREAD * m
    vm = sm * sm + 1.0
    pos = v > 0
    vs = np.where(pos, v, 1.0)
    n = np.where(pos, (t / vs + m / vm) / (1.0 / vs + 1.0 / vm), t)
    ok = n > 0
    n = np.where(ok, n, 0.0)
    at = np.where(t < 0, -t, t)
    den = np.where(at > n, at, n)
    nn = (n * n)[:, None]
    kn = (KAPPA * n)[:, None]
    s2 = (v / C)[:, None]
    pq = parent_p * (1.0 - parent_p)
    pq = np.where(pq > 1e-6, pq, 1e-6)
    d = nn + kn + KAPPA * s2 / pq
    w = nn / np.where(d > 0, d, 1.0)  # 0 only where n is 0 (no records: the parent's estimate below)
    q = parent_p + w * (y - t[:, None] * parent_p) / np.where(ok, den, 1.0)[:, None]
    q = np.where(q > 0, q, 0.0)
    s = _row_sums(q)[:, None]
    good = ok[:, None] & (s > 0)
    return np.where(good, q / np.where(s > 0, s, 1.0), parent_p), n


def _row_sums(a: np.ndarray) -> np.ndarray:
    """Each row's sum left to right, the one-record path's order (:data:`seq_sum`): numpy's sum over a row of 8
    or more regroups it (pairwise, unrolled by 8), which would give the river path other last bits.

    >>> row = np.array([[1e16, 1.0, -1e16, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]])
    >>> float(_row_sums(row)[0]) == seq_sum(row[0].tolist())
    True
    """
    out = a[:, 0].astype(np.float64)
    for c in range(1, a.shape[1]):
        out += a[:, c]
    return out
