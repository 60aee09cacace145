"""Numeric thresholds drawn from a density instead of uniformly: the same trees, split where the data is.

:func:`redraw_thresholds` (:meth:`ForestStructure.with_thresholds`) keeps a drawn structure's shape (its attributes, children and leaves: the
number of children of a numeric split is 2 whatever its threshold, so the shape's distribution does not
depend on how thresholds are drawn) and draws every numeric threshold again, from the roots down, from
a :class:`~streamdp.forest.marginals.Marginals` restricted to the node's range (the declared range
narrowed by the splits above on the same attribute). Nothing here reads records: with public or
released densities the result is public (post-processing).

>>> import numpy as np
>>> from streamdp.forest.marginals import Marginals
>>> from streamdp.forest.structure import ForestStructure
>>> from streamdp.records.schema import Schema
>>> s = Schema.from_dict({"attributes": [{"name": "x", "type": "numeric", "min": 0, "max": 100}],
...                       "label": {"name": "y", "values": [0, 1]}})
>>> fs = ForestStructure.draw(s, n_trees=20, height=3, seed=0)
>>> low = Marginals.from_weights(s, np.array([[1.0] + [0.0] * 9]))  # all the mass in [0, 10]
>>> t = redraw_thresholds(fs.feature, fs.child, fs.leaf, s, low, np.random.default_rng(0))
>>> bool(np.all(t[np.isfinite(t)] <= 10))
True
"""

from __future__ import annotations

import numpy as np

from streamdp.forest.draw import ragged_arange
from streamdp.forest.marginals import Marginals
from streamdp.records.schema import Numeric, Schema

__all__ = ["redraw_thresholds"]


def redraw_thresholds(
    feature: np.ndarray,
    child: np.ndarray,
    leaf: np.ndarray,
    schema: Schema,
    marginals: Marginals,
    rng: np.random.Generator,
) -> np.ndarray:
    """The threshold array of the trees ``(feature, child, leaf)`` (a structure's padded node arrays) with
    every numeric split drawn from ``marginals`` (module docstring); ``+inf`` elsewhere, as drawn."""
    T = feature.shape[0]
    m = schema.n_attributes
    is_cat = np.append(schema.is_categorical, False)
    arity = np.append(schema.arities, 0).astype(np.int64)
    num = np.flatnonzero(~schema.is_categorical)
    col = np.full(m + 1, -1, dtype=np.int64)
    col[num] = np.arange(num.size)
    numeric = [a for a in schema.attributes if isinstance(a, Numeric)]
    lo_decl = np.array([a.min for a in numeric], dtype=np.float64)
    hi_decl = np.array([a.max for a in numeric], dtype=np.float64)
    threshold = np.full(feature.shape, np.inf)
    tree, node = np.arange(T, dtype=np.int64), np.zeros(T, dtype=np.int64)
    par = br = np.zeros(T, dtype=np.int64)
    hist: list[
        tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    ] = []  # per level: feature, threshold, parent, branch
    while tree.size:
        f = feature[tree, node].astype(np.int64)
        inner = leaf[tree, node] < 0
        thr = threshold[tree, node]
        ni = np.flatnonzero(inner & (f < m) & ~is_cat[f])
        if ni.size:
            q = col[f[ni]]
            lo, hi = lo_decl[q].copy(), hi_decl[q].copy()
            way, up, fq = br[ni], par[ni], f[ni]
            for lev in range(len(hist) - 1, -1, -1):  # up the path: branch 0 is x <= t, branch 1 is x > t
                h_feat, h_thr, h_par, h_br = hist[lev]
                same = h_feat[up] == fq
                lo = np.where(same & (way == 1), np.maximum(lo, h_thr[up]), lo)
                hi = np.where(same & (way == 0), np.minimum(hi, h_thr[up]), hi)
                way, up = h_br[up], h_par[up]
            thr[ni] = marginals.sample(q, lo, hi, rng)
            threshold[tree[ni], node[ni]] = thr[ni]
        hist.append((f, thr, par, br))
        w = np.where(inner, np.where(is_cat[f], arity[f], 2), 0)
        if not w.any():
            break
        step = ragged_arange(w)
        par, br = np.repeat(np.arange(tree.size, dtype=np.int64), w), step
        node = np.repeat(child[tree, node].astype(np.int64), w) + step
        tree = np.repeat(tree, w)
    return threshold
