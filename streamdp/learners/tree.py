"""A fitted decision tree as flat arrays: what the batch learners release.

Nodes are numbered in creation order. Node ``i`` splits on ``feature[i]``
(-1 for a leaf): a categorical split has one child per declared value at
``child_start[i] + code``; a numeric split has two children, ``x <= threshold[i]``
at ``child_start[i]`` and ``x > threshold[i]`` at ``child_start[i] + 1``.
``counts[i]`` are *noisy* class counts released for the node or post-processing
of released ones (C4.5's calibrated to the root's noisy count; an inner node
without a release of its own, the sum of its leaves': :meth:`Tree.fill_inner_counts`),
so nothing here is exact about the data.

Prediction routes all records level by level with numpy. With the public
noise variance of a leaf cell (each learner knows it from its budget split),
:meth:`Tree.node_proba` applies the noise-aware rule of
:mod:`streamdp.estimation`: a leaf swamped by noise predicts from its deepest
informative ancestor. Without it (``leaf_distributions``, the leaf rule), a
leaf with no positive noisy count falls back to its nearest ancestor that has
one, and finally to the uniform distribution.

>>> from streamdp import Schema
>>> s = Schema.from_dict({"attributes": [{"name": "a", "type": "categorical", "values": ["x", "y"]}],
...                       "label": {"name": "c", "values": [0, 1]}})
>>> t = TreeBuilder(s)
>>> root = t.add(depth=0)
>>> kids = t.split(root, feature=0)
>>> t.set_counts(kids[0], [9, 1]); t.set_counts(kids[1], [2, 8])
>>> tree = t.build()
>>> tree.predict_proba(np.array([[0.0], [1.0]])).round(2).tolist()
[[0.9, 0.1], [0.2, 0.8]]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streamdp import blob
from streamdp.estimation.trees import reachable_leaves, released_node_counts, tree_node_proba
from streamdp.forest.routing import route, routing_error
from streamdp.records.domains import Categorical
from streamdp.records.schema import Schema

__all__ = ["Tree", "TreeBuilder"]


#: Bound on a tree's summed release variances (own_var x classes x nodes): every sum estimation forms stays finite
#: (a cell's variance at epsilon 1e-90 is about 2e180).
OWN_VAR_SUM_MAX = 1e200


@dataclass
class Tree:
    """A fitted tree's released arrays, one entry per node (module docstring: the numbering and splits).

    Every array is public: the structure and noisy (or post-processed) counts. ``validate`` checks a tree
    read from a blob (shapes, routing, ``own_var`` bounds) and raises :class:`~streamdp.blob.BlobError`.
    """

    feature: np.ndarray  # int64, -1 = leaf
    threshold: np.ndarray  # float64, +inf for categorical splits and leaves
    child_start: np.ndarray  # int64, -1 for leaves
    counts: np.ndarray  # float64 (n_nodes, n_classes), noisy
    depth: np.ndarray  # int64
    parent: np.ndarray  # int64, -1 for the root
    #: per node, the noise variance of one cell of its own released counts (0: none, an inner node whose counts
    #: are its leaves' sum); None: every leaf at the learner's cell variance, no inner node released (DPEA
    #: releases its step roots and tops up stopped leaves: :func:`streamdp.estimation.released_node_counts`)
    own_var: np.ndarray | None = None

    @property
    def n_nodes(self) -> int:
        """The number of nodes, unreachable pruned ones included."""
        return int(self.feature.shape[0])

    @property
    def n_leaves(self) -> int:
        """The number of nodes without a split."""
        return int(np.sum(self.feature < 0))

    @property
    def max_depth(self) -> int:
        """The deepest node's depth (0 for a single leaf or an empty tree)."""
        return int(self.depth.max()) if self.n_nodes else 0

    def apply(self, X: np.ndarray) -> np.ndarray:
        """Leaf index of each encoded record (float64 array in schema order)."""
        return route(X, self.feature, self.threshold, self.child_start)

    def leaf_distributions(self) -> np.ndarray:
        """Per node: normalised positive noisy counts, backing off to the nearest ancestor with mass."""
        n, C = self.counts.shape
        pos = np.clip(self.counts, 0, None)
        mass = pos.sum(axis=1)
        dist = np.divide(pos, mass[:, None], out=np.full((n, C), 1.0 / C), where=mass[:, None] > 0)
        empty = mass <= 0
        for d in range(1, self.max_depth + 1):  # parents are one level up: settle level by level
            idx = np.flatnonzero(empty & (self.depth == d))
            dist[idx] = dist[self.parent[idx]]
        return dist

    def fill_inner_counts(self) -> None:
        """Post-processing: every inner node without counts of its own (:attr:`own_var`) gets the sum of its
        leaves' clipped noisy counts."""
        leaf = self.feature < 0
        agg = np.where(leaf[:, None], np.clip(self.counts, 0, None), 0.0)
        for d in range(self.max_depth, 0, -1):  # deepest level first: children before parents
            nodes = np.flatnonzero(self.depth == d)
            np.add.at(agg, self.parent[nodes], agg[nodes])
        keep = leaf if self.own_var is None else leaf | (self.own_var > 0)
        self.counts = np.where(keep[:, None], self.counts, agg)

    def node_proba(
        self,
        cell_var: float,
        prior: np.ndarray | None = None,
        snr_min: float | None = None,
        roots_are_prior: bool = False,
    ) -> np.ndarray:
        """Per node: the noise-aware estimate of :mod:`streamdp.estimation` from the reachable leaves' counts.

        ``cell_var`` is the public noise variance of one released leaf cell;
        ``prior`` what the root is shrunk toward (default: this tree's own leaf sums), or the root's
        distribution itself with ``roots_are_prior``.
        """
        return tree_node_proba(
            self.feature, self.parent, self.depth, self.counts, cell_var, prior, snr_min, roots_are_prior, self.own_var
        )

    def released_counts(self, cell_var: float) -> tuple[np.ndarray, np.ndarray]:
        """Every node's class counts from the releases and its total's noise variance
        (:func:`streamdp.estimation.released_node_counts`)."""
        return released_node_counts(self.feature, self.parent, self.depth, self.counts, cell_var, self.own_var)

    def predict_proba(
        self,
        X: np.ndarray,
        cell_var: float | None = None,
        prior: np.ndarray | None = None,
        snr_min: float | None = None,
    ) -> np.ndarray:
        """Class distribution of each encoded record's leaf: noise-aware when ``cell_var`` is given,
        else the leaf's clipped counts backing off to the nearest ancestor with mass."""
        table = self.leaf_distributions() if cell_var is None else self.node_proba(cell_var, prior, snr_min)
        return table[self.apply(X)]

    def reachable_leaves(self) -> np.ndarray:
        """Boolean mask of the leaves a record can reach (pruning leaves unreachable nodes in the arrays)."""
        return reachable_leaves(self.feature, self.parent, self.depth)

    # -- serialization --------------------------------------------------------------------
    def to_dict(self) -> dict:
        """The arrays as blob records (:func:`streamdp.blob.pack_array`), for a learner's ``to_bytes``."""
        d = {
            "feature": blob.pack_array(self.feature.astype("<i8")),
            "threshold": blob.pack_array(self.threshold.astype("<f8")),
            "child_start": blob.pack_array(self.child_start.astype("<i8")),
            "counts": blob.pack_array(self.counts.astype("<f8")),
            "depth": blob.pack_array(self.depth.astype("<i8")),
            "parent": blob.pack_array(self.parent.astype("<i8")),
        }
        if self.own_var is not None:
            d["own_var"] = blob.pack_array(self.own_var.astype("<f8"))
        return d

    @classmethod
    def from_dict(cls, d: dict, schema: Schema, fmt: str = "tree") -> Tree:
        """A tree from :meth:`to_dict`'s map, validated against ``schema``; :class:`~streamdp.blob.BlobError`
        (prefixed with ``fmt``) says what is malformed."""
        if not isinstance(d, dict):
            raise blob.BlobError(f"{fmt}: a tree must be a map")
        t = cls(
            blob.unpack_array(d.get("feature"), "feature", "<i8", 1),
            blob.unpack_array(d.get("threshold"), "threshold", "<f8", 1),
            blob.unpack_array(d.get("child_start"), "child_start", "<i8", 1),
            blob.unpack_array(d.get("counts"), "counts", "<f8", 2),
            blob.unpack_array(d.get("depth"), "depth", "<i8", 1),
            blob.unpack_array(d.get("parent"), "parent", "<i8", 1),
            None if d.get("own_var") is None else blob.unpack_array(d["own_var"], "own_var", "<f8", 1),  # (older: none)
        )
        t.validate(schema, fmt)
        return t

    def validate(self, schema: Schema, fmt: str = "tree") -> None:
        """Refuse arrays that would route out of bounds, loop, or disagree with the schema."""
        n = self.n_nodes
        if n == 0:
            raise blob.BlobError(f"{fmt}: a tree needs at least one node")
        shapes: tuple[tuple[int, ...], ...] = (
            self.threshold.shape,
            self.child_start.shape,
            self.depth.shape,
            self.parent.shape,
        )
        if self.own_var is not None:
            shapes += (self.own_var.shape,)
            # bounded so that every sum of variances estimation forms stays finite (an absurd one would make NaN)
            top = OWN_VAR_SUM_MAX / (schema.n_classes * n)
            if np.any(self.own_var < 0) or np.any(self.own_var > top):
                raise blob.BlobError(f"{fmt}: own_var must be in [0, {top:g}]")
        if any(s != (n,) for s in shapes) or self.counts.shape != (n, schema.n_classes):
            raise blob.BlobError(f"{fmt}: node arrays disagree in length or class count")
        if self.parent[0] != -1 or np.any(self.parent[1:] < 0) or np.any(self.parent[1:] >= np.arange(1, n)):
            raise blob.BlobError(f"{fmt}: every node's parent must come before it")
        if self.depth[0] != 0 or np.any(self.depth[1:] != self.depth[self.parent[1:]] + 1):
            raise blob.BlobError(f"{fmt}: every node's depth must be its parent's plus one")
        err = routing_error(schema, self.feature, self.threshold, self.child_start)
        if err:
            raise blob.BlobError(f"{fmt}: {err}")


class TreeBuilder:
    """Grows a :class:`Tree` node by node (children are numbered after their parent)."""

    def __init__(self, schema: Schema):
        self.schema = schema
        self._feature: list[int] = []
        self._threshold: list[float] = []
        self._child_start: list[int] = []
        self._counts: dict[int, np.ndarray] = {}
        self._own_var: dict[int, float] = {}
        self._depth: list[int] = []
        self._parent: list[int] = []

    def add(self, depth: int, parent: int = -1) -> int:
        """A new leaf at ``depth`` below ``parent`` (-1: the root); returns its id."""
        self._feature.append(-1)
        self._threshold.append(np.inf)
        self._child_start.append(-1)
        self._depth.append(depth)
        self._parent.append(parent)
        return len(self._feature) - 1

    def split(self, node: int, feature: int, threshold: float | None = None) -> list[int]:
        """Make ``node`` an inner node; returns its children's ids (in partition order)."""
        attr = self.schema.attributes[feature]
        if isinstance(attr, Categorical):
            arity = attr.arity
        else:
            if threshold is None:
                raise ValueError(f"numeric attribute {attr.name!r} needs a threshold")
            arity = 2
        self._feature[node] = int(feature)
        self._threshold[node] = float(threshold) if threshold is not None else np.inf
        d = self._depth[node] + 1
        kids = [self.add(d, node) for _ in range(arity)]
        self._child_start[node] = kids[0]
        return kids

    def depth(self, node: int) -> int:
        """``node``'s depth (the root's is 0)."""
        return self._depth[node]

    def set_counts(self, node: int, counts, own_var: float | None = None) -> None:
        """``node``'s counts; ``own_var``: the noise variance of one cell of its own release (:attr:`Tree.own_var`)."""
        self._counts[node] = np.asarray(counts, dtype=np.float64)
        if own_var is not None:
            self._own_var[node] = float(own_var)

    def unsplit(self, node: int) -> None:
        """Turn an inner node back into a leaf (pruning); its subtree stays in the arrays, unreachable."""
        self._feature[node] = -1
        self._threshold[node] = np.inf
        self._child_start[node] = -1

    def _count_matrix(self) -> np.ndarray:
        m = np.zeros((len(self._feature), self.schema.n_classes))
        for node, c in self._counts.items():
            m[node] = c
        return m

    def build(self) -> Tree:
        """The :class:`Tree` of the nodes added so far (nodes without counts get zeros)."""
        own_var = None
        if self._own_var:
            own_var = np.zeros(len(self._feature))
            own_var[list(self._own_var)] = list(self._own_var.values())
        return Tree(
            np.array(self._feature, dtype=np.int64),
            np.array(self._threshold, dtype=np.float64),
            np.array(self._child_start, dtype=np.int64),
            self._count_matrix(),
            np.array(self._depth, dtype=np.int64),
            np.array(self._parent, dtype=np.int64),
            own_var,
        )
