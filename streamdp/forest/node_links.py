"""The links of a forest structure's nodes, walked upward: each node's parent and depth, each leaf number's node,
the leaves below every node, and the first node on the way up that a sorted key list holds.

Kept in int32 (depths int16) and built a tree at a time, once per structure (:meth:`ForestStructure._cache`):
a stream closer walks the same trees every window, and holds nothing forest-sized in int64 for it.
"""

from __future__ import annotations

import numpy as np

from streamdp.estimation.nodes import _levels
from streamdp.forest.structure import ForestStructure

__all__ = ["WALK_BLOCK", "up_links", "tree_links", "depths", "leaves_below", "first_above"]


#: Nodes walked up at a time by :func:`first_above`.
WALK_BLOCK = 1 << 15


def up_links(s: ForestStructure) -> tuple[np.ndarray, np.ndarray]:
    """Each node's parent (-1 at the roots and padding) and each leaf number's node (-1 past a tree's last leaf)
    of ``s`` in int32, once per structure (a grown release's
    trees: :func:`leaves_below`, :func:`_anchors`; the drawn trees' are made a tree at a time, :func:`aggregate`)."""
    cache = s._cache()
    if "up_links" not in cache:
        T, M = s.feature.shape
        parent = np.full((T, M), -1, dtype=np.int32)
        leaf_node = np.full((T, int((s.leaf >= 0).sum(axis=1).max(initial=0))), -1, dtype=np.int32)
        for t in range(T):  # (a tree at a time: no forest-sized int64 temporaries)
            tree_links(s, t, parent[t], leaf_node[t])
        cache["up_links"] = (parent, leaf_node)
    return cache["up_links"]


def tree_links(s: ForestStructure, t: int, parent: np.ndarray, leaf_node: np.ndarray) -> None:
    """Tree ``t``'s row of :func:`up_links` into ``parent`` and ``leaf_node`` (filled with -1)."""
    lf = np.flatnonzero(s.leaf[t] >= 0)
    if not lf.size:
        return
    real = int(lf.max()) + 1
    inner = np.flatnonzero(s.leaf[t, :real] < 0)
    arity = np.diff(np.append(s.child[t, inner].astype(np.int64), real))
    parent[1:real] = np.repeat(inner, arity)
    leaf_node[s.leaf[t, lf]] = lf


def depths(s: ForestStructure) -> np.ndarray:
    """Each node's depth (-1 at padding) of ``s`` in int16, once per structure."""
    cache = s._cache()
    if "depths" not in cache:
        parent = up_links(s)[0]
        depth = np.full(parent.shape, -1, dtype=np.int16)
        for t in range(parent.shape[0]):
            real = int(np.flatnonzero(s.leaf[t] >= 0).max(initial=-1)) + 1
            if not real:
                continue
            depth[t, 0] = 0
            for lo, hi in _levels(parent[t, :real]):
                depth[t, lo:hi] = depth[t, parent[t, lo:hi]] + 1
        cache["depths"] = depth
    return cache["depths"]


def leaves_below(s: ForestStructure) -> np.ndarray:
    """Leaves in the subtree of every node (0 for padding), ``(n_trees, max_nodes)``."""
    parent, depth = up_links(s)[0], depths(s)
    out = (s.leaf >= 0).astype(np.float64)
    for d in range(int(depth.max(initial=0)), 0, -1):
        t, i = np.nonzero(depth == d)
        np.add.at(out, (t, parent[t, i]), out[t, i])
    return out


def first_above(
    s: ForestStructure, t: np.ndarray, node: np.ndarray, keys: np.ndarray, key_of, parent: np.ndarray | None = None
) -> np.ndarray:
    """For each node ``(t, node)`` of ``s``: the index in the sorted ``keys`` of the first ``key_of(t, n)``
    found walking from the node up to its root (-1 where none is); ``parent``: :func:`up_links`'s (by default).
    Walked :data:`WALK_BLOCK` nodes at a time (the walk's temporaries are a block's, not the nodes')."""
    parent = up_links(s)[0] if parent is None else parent
    found = np.full(node.size, -1, dtype=np.int64)
    for a in range(0, node.size, WALK_BLOCK):
        tb, cur, fb = t[a : a + WALK_BLOCK], node[a : a + WALK_BLOCK].copy(), found[a : a + WALK_BLOCK]
        for _ in range(s.height + 1):
            key = key_of(tb, cur)
            at = np.minimum(np.searchsorted(keys, key), keys.size - 1)
            hit = (fb < 0) & (keys[at] == key)
            fb[hit] = at[hit]
            up = parent[tb, cur]
            cur = np.where((fb < 0) & (up >= 0), up, cur)
    return found
