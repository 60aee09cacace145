"""Numeric thresholds drawn from a density instead of uniformly: the same trees, split where the data is.

:func:`redraw_thresholds` (:meth:`ForestStructure.with_thresholds`) keeps a drawn structure's shape (its attributes, children and leaves: the
number of children of a numeric split is 2 whatever its threshold, so the shape's distribution does not
depend on how thresholds are drawn) and draws every numeric threshold again, from the roots down, from
a :class:`~streamdp.forest.marginals.Marginals` restricted to the node's range (the declared range
narrowed by the splits above on the same attribute). Nothing here reads records: with public or
released densities the result is public (post-processing).

In a fit (:meth:`streamdp.forest.model.PrivateForest.fit_encoded`) with ``threshold_share`` ``s > 0`` the density
is released first: ``s * epsilon`` on a noisy histogram of each numeric attribute
(:func:`streamdp.forest.marginals.noisy_marginals`), the thresholds redrawn from it, then the counts at
``(1 - s) * epsilon`` (:attr:`~streamdp.forest.model.PrivateForest.threshold_spent`): ``epsilon``-DP by sequential
composition. In a stream the trees' first release spends it the same way and later releases keep the whole
``epsilon`` (:mod:`streamdp.forest.first_release`: the proof sketch); the stream service's models, published before
any record, do not (declare public ``quantiles`` in the schema instead, :class:`streamdp.records.schema.Numeric`).

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
from streamdp.options import DEFAULT_THRESHOLD_SHARE
from streamdp.records.schema import Numeric, Schema

__all__ = ["redraw_thresholds", "default_threshold_share"]


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


def default_threshold_share(schema: Schema, mechanism: str = "geometric") -> float:
    """The share of epsilon a forest's first release spends on thresholds by default: :data:`~streamdp.options.DEFAULT_THRESHOLD_SHARE`
    for a schema with a numeric attribute that declares no quantiles (and noise other than k-anonymity), else 0.

    >>> from streamdp.records.datasets import load
    >>> default_threshold_share(load("congressional-voting").schema)  # all categorical
    0.0
    """
    numeric = [a for a in schema.attributes if isinstance(a, Numeric)]
    undeclared = any(a.quantiles is None for a in numeric)
    return DEFAULT_THRESHOLD_SHARE if undeclared and mechanism != "kanon" else 0.0
