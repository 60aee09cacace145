"""Routing records down a flat tree: one loop for released trees and for the data layer.

A tree is three arrays over its nodes: ``feature`` (-1 for a leaf),
``threshold`` (+inf for categorical splits and leaves) and ``child_start``.
A categorical split sends code ``v`` to ``child_start + v``; a numeric split
sends ``x <= threshold`` to ``child_start`` and ``x > threshold`` to
``child_start + 1``. Children come after their parent, so routing ends.

>>> import numpy as np
>>> feature, threshold, child_start = np.array([0, -1, -1]), np.array([0.5, np.inf, np.inf]), np.array([1, -1, -1])
>>> route(np.array([[0.2], [0.9]]), feature, threshold, child_start).tolist()
[1, 2]
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import numpy as np

from streamdp.records.domains import Numeric
from streamdp.records.schema import Schema

_route: Any
try:
    _route = importlib.import_module("streamdp.forest._route")  # the optional compiled router (setup.py)
except ImportError:  # not built (no compiler at install time): numpy routes
    _route = None

__all__ = ["ForestRouter", "route", "routing_error"]


def route(X: np.ndarray, feature: np.ndarray, threshold: np.ndarray, child_start: np.ndarray) -> np.ndarray:
    """Leaf index of each encoded record (float64 array in schema order), level by level."""
    node = np.zeros(X.shape[0], dtype=np.int64)
    active = np.arange(X.shape[0])
    while active.size:
        active = active[feature[node[active]] >= 0]
        if not active.size:
            break
        n = node[active]
        v = X[active, feature[n]]
        thr = threshold[n]
        offset = np.where(np.isfinite(thr), (v > thr).astype(np.int64), v.astype(np.int64))
        node[active] = child_start[n] + offset
    return node


def routing_error(schema: Schema, feature: np.ndarray, threshold: np.ndarray, child_start: np.ndarray) -> str | None:
    """What makes these arrays unroutable for ``schema`` (out of bounds, a loop, a wrong split type), or None."""
    n = feature.shape[0]
    if n == 0:
        return "a tree needs at least one node"
    if threshold.shape != (n,) or child_start.shape != (n,):
        return "feature, threshold and child_start differ in length"
    inner = np.flatnonzero(feature >= 0)
    f = feature[inner]
    if f.size and f.max() >= schema.n_attributes:
        i = inner[np.argmax(f >= schema.n_attributes)]
        return f"node {i} splits on attribute {feature[i]}; the schema has {schema.n_attributes}"
    is_numeric = np.array([isinstance(a, Numeric) for a in schema.attributes], dtype=bool)
    arities = np.array([2 if isinstance(a, Numeric) else a.arity for a in schema.attributes], dtype=np.int64)
    wrong = is_numeric[f] != np.isfinite(threshold[inner])
    if wrong.any():
        i = inner[np.argmax(wrong)]
        return f"node {i} splits {schema.attributes[feature[i]].name!r} the wrong way for its type"
    s = child_start[inner]
    bad = (s <= inner) | (s + arities[f] > n)
    if bad.any():
        return f"node {inner[np.argmax(bad)]} has children out of bounds"
    return None


class ForestRouter:
    """Routes encoded records down a padded forest (:class:`streamdp.forest.structure.ForestStructure`'s
    node arrays), built once per structure and kept beside it.

    ``feature``, ``threshold``, ``child``, ``leaf`` are ``(n_trees, max_nodes)`` as the structure holds
    them (a leaf tests the zero column ``n_attributes`` and points to itself), ``height`` the routing depth.
    What routing needs of the nodes is one packed word per node, built here once:
    ``(tree * max_nodes + child) << bits | feature``, int32 where it fits; a batch is then ``height``
    vectorized steps over every (record, tree) pair of a cache-sized chunk of records:

        word = packed[node]; at = record's row + (word & mask); node = word >> bits + branch(x[at])

    where ``branch`` is the code at a categorical node and ``x > threshold`` at a numeric one (the code is
    read from an integer copy of the chunk whose numeric columns are 0, the value from a float copy whose
    categorical columns are ``-inf``, so no node needs a type flag). The compiled router
    (``streamdp/forest/_route.c``, built by ``setup.py`` where a C compiler is found) takes the same steps
    over the same words in one pass per level, and gives the same leaves. Every array a step reads is the
    structure's own or built here, never a batch's: nothing about the data stays on the router but the
    count of records routed by the key tables below (never pickled, like the router itself).

    All-categorical forests of a small joint domain route by key tables instead (:meth:`_apply_by_key`).

    >>> feature, child = np.array([[0, 1, 1]]), np.array([[1, 1, 2]])
    >>> leaf, threshold = np.array([[-1, 0, 1]]), np.array([[0.5, np.inf, np.inf]])
    >>> ForestRouter(feature, threshold, child, leaf, 1).apply(np.array([[0.2], [0.9]]), np.array([False])).tolist()
    [[0], [1]]
    """

    #: Records per chunk: the chunk's two copies stay in L1/L2 cache while every tree routes it.
    RECORDS = 1024
    #: (record, tree) pairs routed per step: a chunk's trees go in groups of about this many pairs.
    PAIRS = 16384
    #: Largest ``(n_trees * max_nodes) << bits`` packed into int32 words (int64 above).
    INT32_WORDS = 2**31 - 1
    #: Largest n_trees * joint domain of the tested categorical attributes for which
    #: per-tree lookup tables (key -> leaf, int64: 16 MiB at most) replace routing.
    KEY_CELLS_MAX = 2**21
    #: Route with the compiled router where it is built (``streamdp/forest/_route.c``: the same steps, one pass
    #: per level instead of ten numpy calls) and not disabled by ``STREAMDP_NO_KERNEL=1``.
    COMPILED = True
    #: Records the compiled router takes tree by tree (a tree's nodes stay in cache while the block passes).
    BLOCK = 1024

    def __init__(
        self, feature: np.ndarray, threshold: np.ndarray, child: np.ndarray, leaf: np.ndarray, height: int
    ) -> None:
        T, M = feature.shape
        self.feature, self.threshold, self.child, self.leaf, self.height = feature, threshold, child, leaf, int(height)
        self.n_trees, self.max_nodes = T, M
        self.n_attributes = int(feature.max())  # the zero column, tested by every leaf
        self.bits = max(1, self.n_attributes.bit_length())
        dtype = np.int32 if (T * M) << self.bits <= self.INT32_WORDS else np.int64
        packed = np.empty((T, M), dtype=dtype)
        for t in range(T):  # a tree at a time: no forest-sized int64 temporaries
            np.left_shift(child[t].astype(dtype) + dtype(t * M), dtype(self.bits), out=packed[t])
            packed[t] |= feature[t].astype(dtype)
        self.packed = packed.ravel()
        # An all-+inf threshold array (a read-only broadcast: no numeric split) is never read.
        self.thresholds = None if 0 in threshold.strides else np.ascontiguousarray(threshold, dtype=np.float64).ravel()
        self.leaves = np.ascontiguousarray(leaf, dtype=np.int32).ravel()
        self.total_leaves = int(np.count_nonzero(leaf >= 0))
        self._plan: tuple[np.ndarray, np.ndarray, int] | None = None
        self._table: np.ndarray | None = None
        self._routed = 0

    @property
    def nbytes(self) -> int:
        """Bytes the router holds beyond the structure's arrays (the packed words and any key table)."""
        return self.packed.nbytes + (self._table.nbytes if self._table is not None else 0)

    def apply(self, X: np.ndarray, is_categorical: np.ndarray) -> np.ndarray:
        """Leaf number of each encoded record in each tree, shape ``(n, n_trees)`` int64.

        ``X`` is the float64 matrix from :meth:`Schema.encode` (categorical codes truncated to integers,
        as the reference router does); raises ValueError if its width is not the structure's.
        """
        X = np.asarray(X)
        n, m = X.shape
        if m != self.n_attributes:
            raise ValueError(f"records have {m} attributes; the structure routes {self.n_attributes}")
        if n == 0:
            return np.empty((0, self.n_trees), dtype=np.int64)
        is_cat = np.asarray(is_categorical, dtype=bool)
        # A tree has at most as many leaves as its attributes have code combinations, so a
        # forest with more leaves than the key-table limit cannot use key tables.
        if bool(np.all(is_cat)) and self.total_leaves <= self.KEY_CELLS_MAX:
            out = self._apply_by_key(X, is_cat)
            if out is not None:
                return out
        return self._apply_route(X, is_cat)

    def _apply_route(self, X: np.ndarray, is_cat: np.ndarray) -> np.ndarray:
        """General router: ``height`` steps over every (record, tree) pair of each chunk of records."""
        n, m = X.shape
        T, M = self.n_trees, self.max_nodes
        cat_cols, num_cols = np.flatnonzero(is_cat), np.flatnonzero(~is_cat)
        thresholds = self.thresholds if num_cols.size else None
        if _route is not None and self.COMPILED and not os.environ.get("STREAMDP_NO_KERNEL"):
            out = np.empty((n, T), dtype=np.int64)
            x = np.ascontiguousarray(X, dtype=np.float64)
            flags = np.append(is_cat, False)  # the zero column is not categorical
            _route.route(x, flags, self.packed, thresholds, self.leaves, out, T, M, self.bits, self.height, self.BLOCK)
            return out
        codes = cat_cols.size > 0
        itype = self.packed.dtype.type
        mask, bits = itype((1 << self.bits) - 1), itype(self.bits)
        R = min(n, self.RECORDS)
        G = max(1, min(T, self.PAIRS // R))  # trees per group
        # The chunk's copies, row-major with the zero column last (row r of a chunk starts at r * (m + 1)).
        xf = np.zeros((R, m + 1)) if thresholds is not None else None
        xc = np.zeros((R, m + 1), dtype=itype) if codes else None
        if xf is not None and codes:
            xf[:, cat_cols] = -np.inf  # a categorical node's threshold is never passed
        rows = np.arange(R, dtype=itype) * itype(m + 1)
        P = G * R
        word, at, node_a, node_b = (np.empty(P, dtype=itype) for _ in range(4))
        v, tv, br, cv = np.empty(P), np.empty(P), np.empty(P, dtype=bool), np.empty(P, dtype=itype)
        out = np.empty((n, T), dtype=np.int64)
        for r0 in range(0, n, R):
            c = min(R, n - r0)
            chunk = X[r0 : r0 + c]
            if xf is not None:
                xf[:c, num_cols] = chunk[:, num_cols]
            if xc is not None:
                xc[:c, cat_cols] = chunk[:, cat_cols]  # truncated to integers
            xf_flat = xf[:c].ravel() if xf is not None else None
            xc_flat = xc[:c].ravel() if xc is not None else None
            for t0 in range(0, T, G):
                g = min(G, T - t0)
                p = g * c
                at_rows = np.tile(rows[:c], g)
                w, a, vv, tt, bb, cc = word[:p], at[:p], v[:p], tv[:p], br[:p], cv[:p]
                node, nxt = node_a[:p], node_b[:p]
                node[:] = np.repeat(np.arange(t0, t0 + g, dtype=itype) * itype(M), c)  # the roots
                for _ in range(self.height):
                    np.take(self.packed, node, out=w, mode="clip")
                    np.bitwise_and(w, mask, out=a)
                    a += at_rows
                    np.right_shift(w, bits, out=nxt)
                    if xf_flat is not None and thresholds is not None:
                        np.take(xf_flat, a, out=vv, mode="clip")
                        np.take(thresholds, node, out=tt, mode="clip")
                        np.greater(vv, tt, out=bb)
                        nxt += bb
                    if xc_flat is not None:
                        np.take(xc_flat, a, out=cc, mode="clip")
                        nxt += cc
                    node, nxt = nxt, node
                out[r0 : r0 + c, t0 : t0 + g] = self.leaves.take(node).reshape(g, c).T
        return out

    def _key_plan(self) -> tuple[np.ndarray, np.ndarray, int]:
        """Attributes tested anywhere in the forest, their arities (from the structure) and the domain size."""
        if self._plan is None:
            m = self.n_attributes
            radix = np.ones(m, dtype=np.int64)
            for t in range(self.n_trees):
                real = int(np.flatnonzero(self.leaf[t] >= 0).max()) + 1  # nodes before the padding
                inner = np.flatnonzero((self.leaf[t, :real] < 0) & (self.feature[t, :real] < m))
                if inner.size == 0:
                    continue
                first = self.child[t, inner].astype(np.int64)
                ar = np.diff(np.append(first, real))  # BFS: children of consecutive inner nodes are contiguous
                np.maximum.at(radix, self.feature[t, inner], ar)
            used = np.flatnonzero(radix > 1)
            domain = int(np.prod(radix[used].astype(float))) if used.size else 1
            self._plan = (used, radix[used], domain)
        return self._plan

    def _apply_by_key(self, X: np.ndarray, is_cat: np.ndarray) -> np.ndarray | None:
        """All-categorical fast path: one table lookup per tree when the joint domain is small.

        A record's leaf depends only on the codes of the attributes the trees
        test, so every possible code combination is routed once (kept on the
        router) and a batch then needs one mixed-radix key per record and one
        gather per tree. Returns None when the domain is too large, the table is
        not worth building yet (fewer than domain/4 records routed so far), or a
        code lies outside its arity (then the general router decides, exactly as before).
        """
        n, m = X.shape
        used, radix, domain = self._key_plan()
        if domain * self.n_trees > self.KEY_CELLS_MAX:
            return None
        if self._table is None:
            # Build the table only once this structure has routed a quarter of the domain's size in
            # records: building costs about as much as routing `domain` records, so a worker's steady
            # stream of small batches pays it once while a one-off small predict never does.
            self._routed += n
            if self._routed < domain // 4:
                return None
        # Same truncation to integers as the router applies to categorical codes.
        codes = X.astype(np.intp)
        bound = np.full(m, np.iinfo(np.intp).max, dtype=np.int64)
        bound[used] = radix
        if codes.min() < 0 or np.any(codes.max(axis=0) >= bound):
            return None
        strides = np.zeros(m, dtype=np.intp)
        if used.size:
            strides[used] = np.append(np.cumprod(radix[::-1])[::-1][1:], 1)
        if self._table is None:
            grid = np.zeros((domain, m), dtype=np.float64)
            if used.size:
                grid[:, used] = np.stack(np.unravel_index(np.arange(domain), tuple(radix)), axis=1)
            self._table = self._apply_route(grid, is_cat)  # (domain, n_trees): row = leaves of one key
        return np.take(self._table, codes @ strides, axis=0, mode="clip")
