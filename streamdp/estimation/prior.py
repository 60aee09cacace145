"""Class priors from released numbers: the forest-wide prior, the plain one, and one pooled over releases.

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
"""

from __future__ import annotations

import numpy as np

__all__ = ["prior_from", "forest_prior", "release_prior", "leaf_rule_proba"]


def prior_from(counts: np.ndarray) -> np.ndarray:
    """Class prior from the unclipped sum of released counts (noise has mean 0), clipped and normalised; uniform when empty."""
    C = counts.shape[-1]
    s = np.clip(counts.reshape(-1, C).sum(axis=0).astype(np.float64), 0.0, None)
    return s / s.sum() if s.sum() > 0 else np.full(C, 1.0 / C)


def forest_prior(
    counts: np.ndarray, n_leaves: np.ndarray, cell_var: float | np.ndarray = 1.0, share: float = 1.0
) -> np.ndarray:
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
    noise = (np.maximum(np.asarray(n_leaves, dtype=np.float64), 1.0) * np.maximum(raw_var, 1e-12))[:, None]
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


def leaf_rule_proba(counts: np.ndarray) -> np.ndarray:
    """The plain rule, per leaf: clipped counts normalised, the clipped prior when all are 0."""
    C = counts.shape[-1]
    pos = np.clip(counts, 0, None).astype(np.float64)
    prior = prior_from(pos.reshape(-1, C))
    tot = pos.sum(axis=-1, keepdims=True)
    return np.where(tot > 0, pos / np.where(tot > 0, tot, 1.0), prior)
