"""The breadth-first structure layout of a forest blob: what each node tests, and nothing derivable from it.

A drawn (or pruned, or grown) tree stores its nodes breadth first, the children of each inner node one
block after the other in the order of their parents, and numbers its leaves in node order
(:class:`~streamdp.forest.structure.ForestStructure`). In that canonical order a node's first child and its
leaf number follow from the tests of the nodes before it, so the blob (layout ``"bfs"``) keeps only:

* ``n_nodes``: each tree's node count;
* ``feature``: each node's tested attribute, one tree after the other (``n_attributes``: a leaf), in the
  narrowest integer dtype;
* ``threshold``: the split points of the numeric inner nodes, in node order (float64).

Reading it (:func:`structure_arrays`) checks the whole forest in a few passes over these arrays, not a walk per
tree: children are laid out in blocks in parent order, each after its parent, and they cover the tree exactly
(so the nodes form one tree, in level order), and the last node sits within ``height`` levels of the root.
Every index the router follows is derived by the reader, so no stored value can point outside a tree.

>>> from streamdp.records.datasets import load
>>> from streamdp.forest.structure import ForestStructure
>>> s = load("congressional-voting").schema
>>> fs = ForestStructure.draw(s, n_trees=3, height=4, seed=1)
>>> doc = bfs_fields(fs, s)
>>> back = ForestStructure(**structure_arrays(doc, s, height=4), height=4)
>>> all(np.array_equal(a, b) for a, b in zip(fs.arrays().values(), back.arrays().values()))
True
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from streamdp import blob
from streamdp.forest.limits import MAX_HEIGHT
from streamdp.records.schema import Schema

__all__ = ["bfs_fields", "structure_arrays", "node_children"]

#: Node arrays larger than this (trees x widest tree x 8 bytes) are refused before anything is allocated.
MAX_PADDED_BYTES = 1 << 30
_FMT = "streamdp.forest"

try:  # the optional compiled reader (setup.py, streamdp/forest/_route.c); numpy otherwise
    _KERNEL: Any = getattr(importlib.import_module("streamdp.forest._route"), "bfs_expand", None)
except ImportError:
    _KERNEL = None


def node_children(schema: Schema) -> np.ndarray:
    """Children of a node testing each attribute: a categorical attribute's arity, 2 for a numeric one, and 0
    for the zero column (index ``n_attributes``: a leaf).

    >>> from streamdp.records.datasets import load
    >>> node_children(load("adult").schema)[:4].tolist(), int(node_children(load("adult").schema)[-1])
    ([2, 9, 2, 16], 0)
    """
    cat = np.asarray(schema.is_categorical, dtype=bool)
    return np.append(np.where(cat, schema.arities, 2), 0).astype(np.int64)


def bfs_fields(structure: Any, schema: Schema) -> dict | None:
    """The ``"bfs"`` layout of ``structure`` (a :class:`~streamdp.forest.structure.ForestStructure`), or None
    where its arrays are not in the canonical order (the caller keeps another layout).

    Canonical: in each tree, every inner node's first child is 1 plus the children of the nodes before it,
    every leaf points to itself and is numbered by the leaves before it, the padding past the last node tests
    the zero column, points to itself and has no leaf, and thresholds are finite at numeric splits only: then
    :func:`structure_arrays` rebuilds exactly these arrays from what the layout keeps. Checked one tree at a
    time (no forest-sized temporaries).
    """
    m = schema.n_attributes
    feature, threshold, child, leaf = structure.feature, structure.threshold, structure.child, structure.leaf
    n_trees, width = feature.shape
    if not n_trees or int(feature.min()) < 0 or int(feature.max()) > m:
        return None
    kids_of = node_children(schema)
    numeric_of = np.append(~np.asarray(schema.is_categorical, dtype=bool), False)
    all_inf = 0 in threshold.strides and bool(np.all(np.isposinf(threshold)))  # (a broadcast value)
    index = np.arange(width)
    n_nodes = np.zeros(n_trees, dtype=np.int64)
    flat, thr = [], []
    for t in range(n_trees):
        f_t, l_t = feature[t], leaf[t]
        real = (l_t >= 0) | (f_t != m)
        n = int(width - np.argmax(real[::-1])) if real.any() else 1
        f = f_t[:n]
        k = kids_of[f]
        inner = k > 0
        first = np.cumsum(k) - k + 1
        if not np.array_equal(child[t, :n], np.where(inner, first, index[:n])):
            return None
        rank = np.cumsum(~inner) - 1
        if not np.array_equal(l_t[:n], np.where(inner, -1, rank)):
            return None
        if not (np.all(f_t[n:] == m) and np.all(l_t[n:] == -1) and np.array_equal(child[t, n:], index[n:])):
            return None
        if not all_inf:
            numeric = numeric_of[f]
            th = threshold[t]
            if not (np.all(np.isfinite(th[:n][numeric])) and np.all(np.isposinf(th[:n][~numeric]))):
                return None
            if not np.all(np.isposinf(th[n:])):
                return None
            thr.append(th[:n][numeric])
        elif numeric_of[f].any():
            return None
        n_nodes[t] = n
        flat.append(f)
    return {
        "layout": "bfs",
        "n_nodes": blob.pack_array(blob.narrowest(n_nodes)),
        "feature": blob.pack_array(blob.narrowest(np.concatenate(flat))),
        "threshold": blob.pack_array(np.concatenate(thr) if thr else np.zeros(0)),
    }


def structure_arrays(sdoc: dict, schema: Schema, height: int) -> dict[str, np.ndarray]:
    """The padded node arrays (``feature``, ``threshold``, ``child``, ``leaf``, ``n_leaves``) of a ``"bfs"``
    structure field, checked to be trees within ``height`` levels whose every index stays inside its tree
    (:class:`streamdp.blob.BlobError` otherwise), so the structure needs no further check.

    Per tree (``n`` nodes, ``k[j]`` children of node ``j``): the children of node ``j`` are the block that starts
    at ``1 + k[0] + ... + k[j - 1]``; the blocks must cover the nodes ``1 .. n - 1`` exactly (``sum(k) = n - 1``)
    and each must start after its node. Then every node but the root has one parent, of a smaller index: the
    nodes form one tree, in level order (a node's level is never below the one before it), and level ``d + 1``
    ends where the children of the nodes up to the end of level ``d`` end, which bounds the depth in
    ``height`` steps of one lookup each.
    """
    n_nodes = blob.unpack_array(sdoc.get("n_nodes"), "n_nodes", ndim=1)
    feature = blob.unpack_array(sdoc.get("feature"), "feature", ndim=1)
    for name, a in (("n_nodes", n_nodes), ("feature", feature)):
        if a.dtype.kind not in "iu":
            raise blob.BlobError(f"{_FMT}: structure '{name}' must hold integers, got dtype {a.dtype}")
    if not n_nodes.size or int(n_nodes.min()) < 1:
        raise blob.BlobError(f"{_FMT}: structure 'n_nodes' must give at least one node a tree")
    n_nodes = n_nodes.astype(np.int64)
    n_trees, width = n_nodes.size, int(n_nodes.max())
    if n_trees * width * 8 > MAX_PADDED_BYTES:
        raise blob.BlobError(f"{_FMT}: structure of {n_trees} trees of {width} nodes is too large")
    if feature.size != int(n_nodes.sum()):
        raise blob.BlobError(f"{_FMT}: structure 'feature' must hold {int(n_nodes.sum())} nodes, the sum of 'n_nodes'")
    m = schema.n_attributes
    if int(feature.min()) < 0 or int(feature.max()) > m:
        raise blob.BlobError(f"{_FMT}: a node tests an attribute outside the schema")
    if not 1 <= height <= MAX_HEIGHT:
        raise blob.BlobError(f"{_FMT}: height {height} out of range")
    thr = blob.unpack_array(sdoc.get("threshold"), "threshold", "<f8", ndim=1)
    if not np.all(np.isfinite(thr)):
        raise blob.BlobError(f"{_FMT}: a numeric split has no finite threshold")
    kids_of = node_children(schema).astype(np.int32)
    numeric_of = np.append(~np.asarray(schema.is_categorical, dtype=bool), False)  # (False at leaves)
    shape = (n_trees, width)
    if _KERNEL is not None:  # the same checks and arrays in one compiled pass per tree
        out: dict[str, np.ndarray] = {name: np.empty(shape, dtype=np.int32) for name in ("feature", "child", "leaf")}
        out["threshold"] = np.empty(shape) if thr.size else np.broadcast_to(np.float64(np.inf), shape)
        out["n_leaves"] = np.zeros(n_trees, dtype=np.int64)
        try:
            _KERNEL(
                np.ascontiguousarray(feature, dtype=np.int32),
                np.ascontiguousarray(n_nodes, dtype=np.int64),
                kids_of,
                numeric_of.astype(np.uint8),
                np.ascontiguousarray(thr, dtype=np.float64),
                m,
                height,
                out["feature"],
                out["child"],
                out["leaf"],
                out["threshold"] if thr.size else None,
                out["n_leaves"],
            )
        except ValueError as e:
            raise blob.BlobError(f"{_FMT}: structure: {e}") from None
        for name in ("feature", "child", "leaf", "threshold"):
            out[name].flags.writeable = False
        return out
    return _expand(feature, n_nodes, thr, schema, height, width)


def _expand(
    feature: np.ndarray, n_nodes: np.ndarray, thr: np.ndarray, schema: Schema, height: int, width: int
) -> dict[str, np.ndarray]:
    """:func:`structure_arrays`' checks and arrays in numpy, one tree at a time (where the compiled kernel is not
    built; the kernel's reference)."""
    m, n_trees = schema.n_attributes, n_nodes.size
    kids_of = node_children(schema).astype(np.int32)
    wide: type[np.signedinteger] = np.int32 if int(kids_of.max()) * width < 2**31 else np.int64  # (no wrap-around)
    numeric_of = np.append(~np.asarray(schema.is_categorical, dtype=bool), False)  # (False at leaves)
    any_numeric = bool(numeric_of.any())
    shape = (n_trees, width)
    # every element is written once, tree by tree (no fill pass first): each row's nodes, then its padding
    out_feature = np.empty(shape, dtype=np.int32)
    out_child = np.empty(shape, dtype=np.int32)
    out_leaf = np.empty(shape, dtype=np.int32)
    out_threshold = np.empty(shape) if thr.size else np.broadcast_to(np.float64(np.inf), shape)
    n_leaves = np.zeros(n_trees, dtype=np.int64)
    index = np.arange(width, dtype=np.int32)
    start = used = 0
    for t, n in enumerate(n_nodes.tolist()):  # one tree at a time: its temporaries stay in cache
        f = feature[start : start + n]
        start += n
        k = kids_of[f]
        ends: np.ndarray = np.cumsum(k, dtype=wide)  # children of the nodes up to and including each
        if int(ends[-1]) != n - 1:
            raise blob.BlobError(f"{_FMT}: tree {t}'s splits have {int(ends[-1])} children, it has {n - 1} nodes")
        # each block after its node: while nodes remain, more have been named as children than were visited
        if n > 1 and bool(np.any(ends[: n - 1] <= index[: n - 1])):
            raise blob.BlobError(f"{_FMT}: tree {t} has a split whose children come before it (not a tree)")
        end = 1  # the end of level 0 (the root)
        for _ in range(height):
            if end >= n:
                break
            end = int(ends[end - 1]) + 1
        if end < n:
            raise blob.BlobError(f"{_FMT}: tree {t} is deeper than its height {height}")
        inner = k > 0
        ends -= k
        ends += 1  # now each node's first child
        out_feature[t, :n] = f
        out_feature[t, n:] = m
        out_child[t, :n] = np.where(inner, ends, index[:n])
        out_child[t, n:] = index[n:]
        rank = np.cumsum(~inner, dtype=np.int32)
        n_leaves[t] = int(rank[-1])
        rank -= 1
        rank[inner] = -1
        out_leaf[t, :n] = rank
        out_leaf[t, n:] = -1
        if any_numeric:
            numeric = numeric_of[f]
            c = int(np.count_nonzero(numeric))
            if used + c > thr.size:
                raise blob.BlobError(f"{_FMT}: {thr.size} thresholds for more numeric splits")
            if thr.size:
                row = out_threshold[t]
                row.fill(np.inf)
                row[:n][numeric] = thr[used : used + c]
            used += c
    if used != thr.size:
        raise blob.BlobError(f"{_FMT}: {thr.size} thresholds for {used} numeric splits")
    for a in (out_feature, out_child, out_leaf, out_threshold):
        if a.flags.writeable:
            a.flags.writeable = False
    return {
        "feature": out_feature,
        "threshold": out_threshold,
        "child": out_child,
        "leaf": out_leaf,
        "n_leaves": n_leaves,
    }
