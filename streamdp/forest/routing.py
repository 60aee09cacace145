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

import numpy as np

from streamdp.records.domains import Numeric
from streamdp.records.schema import Schema

__all__ = ["route", "routing_error"]


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
