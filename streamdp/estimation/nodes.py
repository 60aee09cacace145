"""The node layout of a released forest: every node of every tree flattened, with its counts, the public
noise variance of its total, its parent and depth, and the estimates read from them.

:class:`ForestNodes` is built once per release (its structure's part once per structure) and answers the
vote: each leaf's distribution within its tree, and the rule pooled over the trees along a record's paths.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streamdp.estimation.prior import forest_prior
from streamdp.estimation.rule import TREE_WEIGHT, node_distributions, posterior_step, shrink

__all__ = ["forest_topology", "tree_records", "ForestNodes"]


def tree_records(totals: np.ndarray, var: np.ndarray) -> float:
    """The records one tree counts, from every tree's noisy total and its noise variance: their inverse-variance
    mean (a prior stump's total outweighs a tall tree's), the plain mean where a tree has no noise; at least 0.

    >>> tree_records(np.array([100., 160.]), np.array([4., 400.]))  # the stump's 100 outweighs the noisy 160
    100.59...
    """
    totals = np.asarray(totals, dtype=np.float64)
    var = np.asarray(var, dtype=np.float64)
    silent = (var <= 0) & (totals == 0)  # released nothing yet (a river classifier's prior phase): measures nothing
    if silent.any() and not silent.all():
        totals, var = totals[~silent], var[~silent]
    if totals.size == 0:
        return 0.0
    if np.all(var > 0):
        return max(0.0, float(np.average(totals, weights=1.0 / var)))
    return max(0.0, float(totals[var <= 0].mean()))


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
    a tree's last leaf); ``prior`` (C,): the forest-wide prior (:func:`forest_prior`);
    ``records`` the pooled roots' records (the random trees' number times the records one tree counts,
    :func:`tree_records`) and ``root_var`` the pooled roots' total variance: where the vote's chain
    (:meth:`path_proba`) starts. Only the random trees are nodes here: prior stumps (the last ``n_prior``
    trees of the arrays) inform the prior and the records alone.
    """

    y: np.ndarray
    var: np.ndarray
    parent: np.ndarray
    depth: np.ndarray
    leaf_node: np.ndarray
    prior: np.ndarray
    records: float = 0.0
    root_var: float = 0.0

    @classmethod
    def build(
        cls,
        feature: np.ndarray,
        child: np.ndarray,
        leaf: np.ndarray,
        counts: np.ndarray,
        cell_var: float | np.ndarray,
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
        all_counts = counts
        counts = counts[:T, :L]
        has = g_leaf >= 0
        y = np.zeros((g_depth.size, counts.shape[2]))
        y[g_leaf[has]] = counts[has]
        y = _subtree_sums(y, g_parent, g_depth)
        C = counts.shape[2]
        if node_var is not None:
            M = leaf.shape[1]
            last = np.max(np.where(leaf[:T] >= 0, np.arange(M)[None, :], -1), axis=1)
            var = node_var[:T][np.arange(M)[None, :] <= last[:, None]] * C
            root_var = node_var[:, 0] * C
        else:
            per_tree = np.broadcast_to(np.asarray(cell_var, dtype=np.float64), (all_counts.shape[0],))
            var = n_below * C * per_tree[:T][g_tree]
            root_var = np.maximum(n_leaves, 1) * C * per_tree
        records = tree_records(all_counts.sum(axis=(1, 2)), root_var)
        roots = g_depth == 0
        return cls(y, var, g_parent, g_depth, g_leaf, prior, T * records, float(var[roots].sum()))

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
        [[0.86, 0.14], [0.34, 0.66]]
        """
        sizes = [len(d) for d in depths]
        offs = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        leaf_node = np.full((len(sizes), max(sizes)), -1, dtype=np.int64)
        for t, (off, lv) in enumerate(zip(offs, leaves)):
            leaf_node[t, lv] = off + lv
        parent = np.concatenate([np.where(p >= 0, p + off, -1) for p, off in zip(parents, offs)])
        root_tot = np.array([float(y[0].sum()) for y, _ in released])
        root_var = np.array([float(v[0]) for _, v in released])
        return cls(
            np.concatenate([y for y, _ in released]),
            np.concatenate([v for _, v in released]),
            parent,
            np.concatenate(depths),
            leaf_node,
            np.asarray(prior, dtype=np.float64),
            len(sizes) * tree_records(root_tot, root_var),
            float(root_var.sum()),
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

    def tree_mean(self, leaves: np.ndarray, pooled: np.ndarray | None = None, snr_min: float = 0.0) -> np.ndarray:
        """The tree-mean vote, ``(n, C)``: each random tree's estimate at the record's leaf, averaged over the trees.

        A tree's estimate is its leaf's noisy counts ``y`` (total ``t``, variance ``v`` of the total) shrunk toward
        the record's pooled estimate ``p`` (:meth:`path_proba`, or ``pooled`` when the caller holds it):
        ``(y + a p) / (t + a)`` with ``a = TREE_WEIGHT v / t + MIN_WEIGHT`` pseudo-records, clipped at 0 and
        renormalised; ``p`` where ``t <= 0`` (:func:`~streamdp.estimation.rule.shrink` with no gate). Every tree has
        one say, as in a random forest's vote, whatever its leaf's size: pooled counts let a tree's coarse leaf
        outweigh another's small and specific one, and a leaf the noise swamps leans on the pooled estimate.
        Post-processing of released counts and public variances. ``leaves`` as :meth:`path_proba`'s; ``snr_min``
        (a study's): a leaf whose total is below that many sd of its noise takes ``p`` whole.

        >>> parent, depth, var = np.array([-1, 0, 0]), np.array([0, 1, 1]), np.array([8., 4., 4.])
        >>> coarse = np.array([[200., 140.], [190., 110.], [10., 30.]])  # the record's leaf: 300 records, mixed
        >>> specific = np.array([[200., 140.], [198., 112.], [2., 28.]])  # the record's leaf: 30, nearly pure
        >>> nodes = ForestNodes.of_trees([(coarse, var), (specific, var)], [parent] * 2, [depth] * 2,
        ...                              [np.array([1, 2])] * 2, np.array([0.6, 0.4]))
        >>> nodes.tree_mean(np.array([[1, 2]]), np.array([[0.5, 0.5]])).round(2).tolist()  # summed: [192, 138]
        [[0.36, 0.64]]
        """
        T = self.leaf_node.shape[0]
        leaves = leaves[:, :T]
        if pooled is None:
            pooled = self.path_proba(leaves)
        out = np.zeros(pooled.shape)
        for t in range(T):
            node = self.leaf_node[t, leaves[:, t]]
            out += shrink(self.y[node], self.var[node], pooled, snr_min, TREE_WEIGHT)
        return out / max(T, 1) if T else np.array(pooled, dtype=np.float64)

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
        """The posterior mean along each record's paths in all trees at once (the probability vote), ``(n, C)``.

        At depth ``d >= 1`` the record's nodes in the trees are pooled (their noises
        are independent, so the pooled total's variance is the sum), and the pooled
        counts update the pooled estimate one level up (:func:`~streamdp.estimation.rule.posterior_step`:
        the records and the class shares); at the roots it is the prior and :attr:`records`. The pooled
        node's uniform share of its parent's records is the ratio of their variances (each
        node's variance counts the leaves below it). A tree whose path ends above ``d`` (a pruned or grown
        tree's shallower leaf) pools its leaf there: the most specific estimate it holds
        (a root that is a leaf adds nothing: the prior stands for it). A pool no tree
        deepens (the same counts and variance as one level up) is not weighed twice,
        so a record's estimate does not depend on how deep unrelated branches go.
        Leaving shallower trees out would leave the deep levels of unbalanced trees to the
        few trees that reach them. ``leaves`` (n, n_trees): leaf numbers from
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
        # (path_nodes holds the same rule per leaf, for the river paths; walking up here is faster than
        # gathering path_nodes of the leaves reached)
        y, var = self.y, self.var
        if not full:  # a root that is a leaf adds nothing below the roots (the prior stands for it)
            yv = self.node_table()
            y, var = yv[:, :C], yv[:, C]
            path = [np.where(self.depth[nd] >= 1, nd, len(var) - 1) for nd in path]
        p = np.broadcast_to(self.prior, (n, C))
        m = np.full(n, self.records)
        above = np.full(n, self.root_var)
        last = None
        for d in range(1, h + 1):  # depth 0: the roots take the prior (module docstring)
            nd = path[h - d]
            # tree by tree: T contiguous (n, C) gathers are several times faster than one (n, T, C) gather and sum
            Y, V = np.zeros((n, C)), np.zeros(n)
            for t in range(T):
                col = nd[:, t]
                Y += y[col]
                V += var[col]
            share = np.where(above > 0, V / np.where(above > 0, above, 1.0), 0.0)
            q, k = posterior_step(Y, V, p, m, share)
            if last is not None:  # the same counts and variance as one level up: not weighed twice
                same = (Y == last[0]).all(axis=1) & (V == last[1])
                q, k, V = np.where(same[:, None], p, q), np.where(same, m, k), np.where(same, above, V)
            p, m, above, last = q, k, V, (Y, V)
        return np.array(p, dtype=np.float64) if h == 0 else p  # (stumps only: a writable array, not the broadcast)
