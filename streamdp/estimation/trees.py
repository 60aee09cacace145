"""The rule on a learner's tree: every node's counts and noise variance from the tree's releases, and
each node's estimated class distribution (:class:`~streamdp.learners.tree.Tree`'s arrays).
"""

from __future__ import annotations

import numpy as np

from streamdp.estimation.prior import prior_from
from streamdp.estimation.rule import node_distributions

__all__ = ["tree_node_proba", "released_node_counts", "inverse_variance_mean", "reachable", "reachable_leaves"]


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
    Dirichlet weight, a small window's root would keep most of its own noise;
    for a batch fit's own prior it makes no difference on average, so it is
    off there.
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
    to split, so it runs high; reading it still wins or ties against the leaves' sum alone.

    >>> import numpy as np
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
        if mine is not None and own is not None:
            at = nodes[mine[nodes]]
            both, v = inverse_variance_mean(counts[at], (C * own[at])[:, None], y[at], var[at][:, None])
            y[at], var[at] = both, v[:, 0]
        if d > 0:
            np.add.at(y, parent[nodes], y[nodes])
            np.add.at(var, parent[nodes], var[nodes])
    return y, var


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
