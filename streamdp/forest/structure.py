"""Random decision-tree structures drawn from a schema alone (Fan et al.).

The structure never depends on data: it is drawn before any record is seen,
from a generator seeded with 128 bits from the OS CSPRNG (or an explicit
``seed`` for reproducible tests). The seed is not kept. (A forest's first release
may redraw its numeric thresholds from released noisy histograms, post-processing:
:mod:`streamdp.forest.first_release`.)

* Categorical attribute: multiway split, one child per declared value; not
  reused below on that path.
* Numeric attribute: binary split ``x > t`` with ``t`` uniform in the declared
  range narrowed by the splits above (drawn from the density of the attribute's declared
  ``quantiles`` where it declares them, :mod:`streamdp.forest.marginals`); may be reused on a path.
* A path stops at depth ``height`` or when no attribute is left. Leaves are
  never pruned.

Trees are drawn level by level with a few numpy calls per level, not node by
node (``tests/test_structure_distribution.py`` checks the distribution against
the node-by-node definition), and the leaf guard ``max_cells`` is checked as
each level is counted, before that level is built.

Each tree is stored as flat arrays in breadth-first order, padded to the
largest tree, so routing a batch is ``height`` vectorized steps over its (record, tree) pairs:
``node = child[node] + branch(x[feature[node]])`` (:mod:`streamdp.forest.routing`). A leaf points to itself and
tests a virtual all-zero column (index ``n_attributes``), so it always takes
branch 0 and routing needs no per-node type check.

>>> from streamdp.records.schema import Schema
>>> s = Schema.from_dict({"attributes": [{"name": "a", "type": "categorical", "values": [0, 1, 2]}],
...                       "label": {"name": "y", "values": [0, 1]}})
>>> fs = ForestStructure.draw(s, n_trees=2, height=1, seed=0)
>>> fs.n_leaves.tolist()
[3, 3]
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from streamdp.blob import FILL_MIN_BYTES
from streamdp.forest.draw import draw_forest, max_possible_leaves, ragged_arange
from streamdp.forest.heights import (
    DEFAULT_CELL_BUDGET,
    DEFAULT_LEAF_BUDGET,
    ceiling_height,
    deepest_height,
    default_height,
    fitting_height,
    leaf_budget,
)
from streamdp.forest.limits import DEFAULT_MAX_CELLS, MAX_HEIGHT, MAX_TREES, TooLargeError
from streamdp.forest.marginals import Marginals
from streamdp.forest.routing import ForestRouter
from streamdp.forest.thresholds import redraw_thresholds
from streamdp.records.schema import Schema
from streamdp.validation import check_integer

__all__ = [
    "ForestStructure",
    "TooLargeError",
    "default_height",
    "fitting_height",
    "ceiling_height",
    "deepest_height",
    "leaf_budget",
    "DEFAULT_LEAF_BUDGET",
    "DEFAULT_CELL_BUDGET",
    "max_possible_leaves",
    "DEFAULT_MAX_CELLS",
]


@dataclass
class ForestStructure:
    """Padded per-tree node arrays (shape ``(n_trees, max_nodes)``).

    ``feature``: attribute tested at the node (``n_attributes``, the zero column, at leaves);
    ``threshold``: numeric split point (``+inf`` at leaves and categorical nodes);
    ``child``: index of the first child (the node itself at leaves);
    ``leaf``: leaf number, or -1 for inner nodes and padding;
    ``n_leaves``: leaves per tree; ``height``: the routing depth.
    """

    feature: np.ndarray
    threshold: np.ndarray
    child: np.ndarray
    leaf: np.ndarray
    n_leaves: np.ndarray
    height: int

    def __post_init__(self) -> None:
        # An all-categorical forest's thresholds are all +inf: one read-only broadcast value instead of 8 bytes
        # a node, also in its blob (blob.pack_array fill_ok).
        thr = self.threshold
        if thr.nbytes >= FILL_MIN_BYTES and 0 not in thr.strides and float(thr.min()) == np.inf:  # (NaN: no)
            self.threshold = np.broadcast_to(np.float64(np.inf), thr.shape)
        # Frozen: routing caches derived arrays on the structure (keyed by these very arrays), so an
        # in-place edit would route with stale tables; build a new structure instead.
        for a in (self.feature, self.threshold, self.child, self.leaf, self.n_leaves):
            if a.flags.writeable:
                a.flags.writeable = False

    def __getstate__(self) -> dict:
        # Routing caches are not part of a structure (and count records routed): never pickled.
        return {k: v for k, v in self.__dict__.items() if k not in ("_tables", "_tables_of")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.__post_init__()  # frozen again

    def _cache(self) -> dict:
        """Per-structure cache of derived routing tables, reset when a node array is replaced."""
        arrays = (self.feature, self.threshold, self.child, self.leaf)
        held = self.__dict__.get("_tables_of")
        if held is None or any(a is not b for a, b in zip(arrays, held)):
            self.__dict__["_tables"], self.__dict__["_tables_of"] = {}, arrays
        return self.__dict__["_tables"]

    @property
    def n_trees(self) -> int:
        return self.feature.shape[0]

    @property
    def max_leaves(self) -> int:
        return int(self.n_leaves.max())

    # -- drawing --------------------------------------------------------------
    @classmethod
    def draw(
        cls,
        schema: Schema,
        n_trees: int,
        height: int | None = None,
        seed: int | None = None,
        max_cells: int = DEFAULT_MAX_CELLS,
    ) -> ForestStructure:
        """Draw ``n_trees`` random trees of the given height from the schema alone.

        ``height=None``: the budgeted draw (:func:`streamdp.forest.draw.draw_forest` with ``room``): each
        tree holds at most :func:`leaf_budget` leaves (and the guard's share), each branch going as deep as
        its share of that budget allows, never past :func:`default_height` where every attribute is
        categorical (Fan et al.'s half) nor past the deepest a tree can be (:func:`deepest_height`). A
        numeric split halves a branch's budget and a categorical one divides it by its arity, so binary
        branches go deep and wide fan-outs stop early, each tree by its own budget. :meth:`streamdp.PrivateForest.fit`
        prunes the draw to what the records support. A default never fails, and is small for every schema.
        """
        check_integer(n_trees, "n_trees", high=MAX_TREES)
        max_leaves_allowed = max_cells // (schema.n_classes * n_trees)
        defaulted = height is None
        if defaulted:  # a numeric attribute may split again below itself: there the budget alone decides
            height = default_height(schema.n_attributes) if bool(np.all(schema.is_categorical)) else MAX_HEIGHT
        check_integer(height, "height", low=1, high=MAX_HEIGHT)  # what a stored structure may have (validate)
        height = min(int(height), deepest_height(schema))  # (no deeper tree exists)
        if seed is not None:  # (numpy's own error named no parameter)
            check_integer(seed, "seed", low=0)
        rng = np.random.default_rng(secrets.randbits(128) if seed is None else seed)
        if defaulted:  # each branch as deep as its tree's leaf budget holds: never over the budget or the guard
            room = min(max_leaves_allowed, leaf_budget(schema, n_trees))
            drawn = draw_forest(schema, int(n_trees), int(height), rng, max_leaves_allowed, room=max(1, room))
        else:
            drawn = draw_forest(schema, int(n_trees), int(height), rng, max_leaves_allowed)
        if isinstance(drawn, int):
            raise TooLargeError(
                f"too many leaves requested: tree {drawn} of height {height} has more than {max_leaves_allowed:,} "
                f"leaves (a tree of this height over this schema may have up to "
                f"{max_possible_leaves(schema, int(height)):,}); {n_trees} trees x {max_leaves_allowed:,} leaves x "
                f"{schema.n_classes} classes is the limit of max_cells={max_cells:,}. "
                f"Lower the height ({height}) or the number of trees (or, in the library, raise max_cells)."
            )
        feature, threshold, child, leaf, n_leaves, height = drawn
        declared = Marginals.declared(schema)
        if declared is not None:  # public quantiles: thresholds from their density
            threshold = redraw_thresholds(feature, child, leaf, schema, declared, rng)
        return cls(feature, threshold, child, leaf, n_leaves, int(height))

    def with_thresholds(self, schema: Schema, marginals: Marginals, seed: int | None = None) -> ForestStructure:
        """The same trees with every numeric threshold drawn again from ``marginals``
        (:mod:`streamdp.forest.thresholds`); public when ``marginals`` are (post-processing).

        >>> import numpy as np
        >>> from streamdp.records.schema import Schema
        >>> s = Schema.from_dict({"attributes": [{"name": "x", "type": "numeric", "min": 0, "max": 10}],
        ...                       "label": {"name": "y", "values": [0, 1]}})
        >>> fs = ForestStructure.draw(s, n_trees=3, height=2, seed=0)
        >>> top = Marginals.from_weights(s, np.array([[0.0, 1.0]]))  # all the mass in [5, 10]
        >>> t = fs.with_thresholds(s, top, seed=0).threshold
        >>> bool(np.all(t[np.isfinite(t)] >= 5)), fs.with_thresholds(s, top).n_leaves.tolist() == fs.n_leaves.tolist()
        (True, True)
        """
        rng = np.random.default_rng(secrets.randbits(128) if seed is None else seed)
        threshold = redraw_thresholds(self.feature, self.child, self.leaf, schema, marginals, rng)
        return ForestStructure(self.feature, threshold, self.child, self.leaf, self.n_leaves, self.height)

    def with_stumps(self, k: int, n_attributes: int) -> ForestStructure:
        """This structure with ``k`` single-leaf trees ("prior stumps") appended after its trees.

        A stump's root is its only leaf (tests the zero column, points to
        itself, leaf number 0), so it counts every record in one cell per class:
        it releases the class totals. Data-independent like every structure.

        >>> from streamdp.records.schema import Schema
        >>> s = Schema.from_dict({"attributes": [{"name": "a", "type": "categorical", "values": [0, 1]}],
        ...                       "label": {"name": "y", "values": [0, 1]}})
        >>> fs = ForestStructure.draw(s, n_trees=2, height=1, seed=0).with_stumps(1, s.n_attributes)
        >>> fs.n_leaves.tolist(), fs.leaf[2].tolist()
        ([2, 2, 1], [0, -1, -1])
        """
        check_integer(k, "prior_trees", low=0)
        M = self.feature.shape[1]
        feature = np.full((k, M), n_attributes, dtype=self.feature.dtype)
        child = np.broadcast_to(np.arange(M, dtype=self.child.dtype), (k, M)).copy()
        leaf = np.full((k, M), -1, dtype=self.leaf.dtype)
        leaf[:, 0] = 0
        return ForestStructure(
            np.concatenate([self.feature, feature]),
            np.concatenate([self.threshold, np.full((k, M), np.inf)]),
            np.concatenate([self.child, child]),
            np.concatenate([self.leaf, leaf]),
            np.concatenate([self.n_leaves, np.ones(k, dtype=self.n_leaves.dtype)]),
            self.height,
        )

    def rows(self, trees: np.ndarray) -> ForestStructure:
        """These trees only, in this order (the same node arrays, padding and height).

        >>> from streamdp.records.datasets import load
        >>> s = load("congressional-voting").schema
        >>> fs = ForestStructure.draw(s, n_trees=3, height=2, seed=0).with_stumps(1, s.n_attributes)
        >>> fs.rows(np.array([0, 3])).n_leaves.tolist() == fs.n_leaves[[0, 3]].tolist()
        True
        """
        t = np.asarray(trees, dtype=np.int64)
        return ForestStructure(
            self.feature[t], self.threshold[t], self.child[t], self.leaf[t], self.n_leaves[t], self.height
        )

    # -- pruning ----------------------------------------------------------------
    def pruned(
        self,
        schema: Schema,
        split: Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]],
        rate: float | np.ndarray = 1.0,
        marginals: Marginals | None = None,
    ) -> tuple[ForestStructure, np.ndarray]:
        """This structure cut from the roots down by ``split``; only the nodes kept are ever visited.

        Level by level, ``split(nodes, share, rate)`` gets the kept nodes of
        the level (flat numbers ``tree * max_nodes + node``), their share of the
        records if every attribute were uniform (a categorical child gets
        ``1 / arity`` of its parent, a numeric one its part of the parent's
        range of the attribute: ``(t - lo) / (hi - lo)`` below a threshold ``t``, the declared
        range narrowed by the splits above; its part of the range's mass under ``marginals``, or the
        schema's declared quantiles, where given) and the ``rate``
        their parent passed down (``rate`` at the roots: a number or one per
        tree), and returns whether each node keeps its split and the rate its
        children inherit. A node that does not keep its split (or is a leaf)
        becomes a leaf. Reads the structure and what ``split`` says: with a
        rule computed from released numbers, pruning is post-processing.

        Returns the pruned structure (BFS order kept, leaves renumbered in BFS
        order, height the deepest path left, at least 1) and ``old_node``
        ``(n_trees, new max_nodes)``: each new node's number in the old tree
        (-1 for padding). A record reaches a new leaf exactly when it reached
        one of the old leaves below that node.

        >>> from streamdp.records.schema import Schema
        >>> s = Schema.from_dict({"attributes": [{"name": "a", "type": "categorical", "values": [0, 1]},
        ...                                      {"name": "b", "type": "categorical", "values": [0, 1, 2]}],
        ...                       "label": {"name": "y", "values": [0, 1]}})
        >>> fs = ForestStructure.draw(s, n_trees=1, height=2, seed=0)
        >>> small, old = fs.pruned(s, lambda nodes, share, rate: (share > 0.9, rate))  # the root's split only
        >>> int(small.n_leaves[0]) in (2, 3), small.height, old[0].tolist() == list(range(small.feature.shape[1]))
        (True, 1, True)
        """
        T, M = self.feature.shape
        m = schema.n_attributes
        arity = np.append(schema.arities, 0).astype(np.int64)
        is_cat = np.append(schema.is_categorical, False)

        # the node arrays read at flat node numbers, never flattened whole: a broadcast (all +inf) threshold or a
        # narrow dtype would make each call copy every node
        def at(a: np.ndarray, flat: np.ndarray) -> np.ndarray:
            return a[flat // M, flat % M]

        base = np.arange(T, dtype=np.int64) * M
        nodes, share = base, np.ones(T)
        rate = np.broadcast_to(np.asarray(rate, dtype=np.float64), (T,)).copy()
        # each visited node's narrowed range of every numeric attribute (the declared one at the roots)
        num = np.flatnonzero(~schema.is_categorical)
        col = np.full(m + 1, -1, dtype=np.int64)
        col[num] = np.arange(num.size)
        lo = np.tile([schema.attributes[j].min for j in num], (T, 1)).astype(np.float64)
        hi = np.tile([schema.attributes[j].max for j in num], (T, 1)).astype(np.float64)
        density = marginals if marginals is not None else Marginals.declared(schema)
        kept, inner, depth = [], [], 0
        height = 0
        while nodes.size:
            f = at(self.feature, nodes)
            w = np.where(at(self.leaf, nodes) >= 0, 0, np.where(is_cat[f], arity[f], np.where(f < m, 2, 0)))
            grow, rate = split(nodes, share, rate)
            grow = np.asarray(grow, dtype=bool) & (w > 0)
            kept.append(nodes)
            inner.append(grow)
            if grow.any():
                height = depth + 1
            w = w[grow]
            parents = nodes[grow]
            step = ragged_arange(w) if w.size else np.zeros(0, dtype=np.int64)
            nodes = (
                np.repeat(at(self.child, parents).astype(np.int64) + (parents // M) * M, w) + step
                if w.size
                else parents
            )
            # a categorical child gets 1/arity of its parent; a numeric one its part of the parent's range
            frac = np.repeat(1.0 / np.maximum(w, 1), w)
            lo, hi = np.repeat(lo[grow], w, axis=0), np.repeat(hi[grow], w, axis=0)
            c = np.repeat(col[f[grow]], w)
            r = np.flatnonzero(c >= 0)
            if r.size:
                t = np.repeat(at(self.threshold, parents), w)[r]
                a, b = lo[r, c[r]], hi[r, c[r]]
                t = np.clip(t, a, b)
                left = np.where(b > a, (t - a) / np.where(b > a, b - a, 1.0), 0.5)
                if density is not None:  # the range's mass below t, where the range holds any
                    fa, fb, ft = (density.cdf(c[r], v) for v in (a, b, t))
                    left = np.where(fb - fa > 1e-12, (ft - fa) / np.where(fb - fa > 1e-12, fb - fa, 1.0), left)
                right_side = step[r] == 1
                frac[r] = np.where(right_side, 1.0 - left, left)
                hi[r[~right_side], c[r[~right_side]]] = t[~right_side]
                lo[r[right_side], c[r[right_side]]] = t[right_side]
            # floored: a threshold at its range's end (or a range of float width) must not make a share 0, which
            # the growth rule divides by; 1e-9 of a parent expects no record either way
            share = np.repeat(share[grow], w) * np.maximum(frac, 1e-9)
            rate = np.repeat(np.broadcast_to(rate, grow.shape)[grow], w)
            depth += 1
        order = np.argsort(np.concatenate(kept), kind="stable")  # flat order = tree, then BFS position
        old = np.concatenate(kept)[order]
        is_inner = np.concatenate(inner)[order]
        tree = old // M
        first = np.searchsorted(tree, np.arange(T))
        new_index = np.arange(old.size) - first[tree]
        n_nodes = np.bincount(tree, minlength=T)
        M2 = int(n_nodes.max())
        out_feature = np.full((T, M2), m, dtype=self.feature.dtype)
        out_threshold = np.full((T, M2), np.inf)
        out_child = np.tile(np.arange(M2, dtype=self.child.dtype), (T, 1))
        out_leaf = np.full((T, M2), -1, dtype=self.leaf.dtype)
        old_node = np.full((T, M2), -1, dtype=np.int64)
        old_node[tree, new_index] = old - tree * M
        t, i, o = tree[is_inner], new_index[is_inner], old[is_inner]
        out_feature[t, i] = at(self.feature, o)
        out_threshold[t, i] = at(self.threshold, o)
        out_child[t, i] = new_index[np.searchsorted(old, at(self.child, o).astype(np.int64) + t * M)]
        is_leaf = ~is_inner
        t_leaf = tree[is_leaf]
        out_leaf[t_leaf, new_index[is_leaf]] = np.arange(t_leaf.size) - np.searchsorted(t_leaf, np.arange(T))[t_leaf]
        n_leaves = np.bincount(t_leaf, minlength=T).astype(np.int64)
        return ForestStructure(out_feature, out_threshold, out_child, out_leaf, n_leaves, max(1, height)), old_node

    # -- routing ----------------------------------------------------------------
    def apply(self, X: np.ndarray, is_categorical: np.ndarray) -> np.ndarray:
        """Leaf number of each encoded record in each tree, shape ``(n, n_trees)``.

        ``X`` is the float64 matrix from :meth:`Schema.encode`; routed by this structure's
        :class:`~streamdp.forest.routing.ForestRouter`, built at the first call and kept (the hot path of
        every worker: nothing node-sized is rebuilt per batch).
        """
        return self.router().apply(X, is_categorical)

    def router(self) -> ForestRouter:
        """This structure's router (built once, kept until a node array or the height is replaced; never pickled)."""
        cache = self._cache()
        router = cache.get("router")
        if router is None or router.height != self.height:
            router = cache["router"] = ForestRouter(self.feature, self.threshold, self.child, self.leaf, self.height)
        return router

    # -- serialization --------------------------------------------------------
    def arrays(self) -> dict[str, np.ndarray]:
        return {
            "feature": self.feature,
            "threshold": self.threshold,
            "child": self.child,
            "leaf": self.leaf,
            "n_leaves": self.n_leaves,
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], height: int, schema: Schema) -> ForestStructure:
        """Rebuild from stored arrays, checking every index so a malformed blob cannot misroute or crash."""
        raw = {name: np.asarray(arrays[name]) for name in ("feature", "threshold", "child", "leaf", "n_leaves")}
        for name in ("feature", "child", "leaf", "n_leaves"):
            a = raw[name]
            if a.dtype.kind not in "iu":
                raise ValueError(f"structure: '{name}' must hold integers, got dtype {a.dtype}")
            # Casting must not wrap around: every index fits int32 (n_leaves int64).
            if a.size and (int(a.min()) < -(2**31) or int(a.max()) >= 2**31):
                raise ValueError(f"structure: '{name}' holds values outside the int32 range")
        if raw["threshold"].dtype.kind != "f":
            raise ValueError(f"structure: 'threshold' must hold floats, got dtype {raw['threshold'].dtype}")

        # A read-only array of the structure's dtype (a view of a decoded blob's bytes) is used as it is,
        # not copied: a structure is read-only too, and the blob's bytes stay alive as the array's base.
        def own(a: np.ndarray, dtype: type) -> np.ndarray:
            return a if a.dtype == dtype and not a.flags.writeable else a.astype(dtype)

        fs = cls(
            own(raw["feature"], np.int32),
            own(raw["threshold"], np.float64),
            own(raw["child"], np.int32),
            own(raw["leaf"], np.int32),
            raw["n_leaves"].astype(np.int64),
            int(height),
        )
        fs.validate(schema)
        return fs

    def validate(self, schema: Schema) -> None:
        shape = self.feature.shape
        if len(shape) != 2 or shape[0] < 1 or shape[1] < 1:
            raise ValueError(f"structure: node arrays must be 2-D and non-empty, got {shape}")
        for name in ("threshold", "child", "leaf"):
            if getattr(self, name).shape != shape:
                raise ValueError(f"structure: '{name}' has shape {getattr(self, name).shape}, expected {shape}")
        if self.n_leaves.shape != (shape[0],):
            raise ValueError("structure: 'n_leaves' must have one entry per tree")
        if not 1 <= self.height <= MAX_HEIGHT:
            raise ValueError(f"structure: height {self.height} out of range")
        m = schema.n_attributes
        if self.feature.min() < 0 or self.feature.max() > m:
            raise ValueError("structure: a node tests an attribute outside the schema")
        if self.child.min() < 0 or self.child.max() >= shape[1]:
            raise ValueError("structure: a child index points outside the tree")
        arity = np.append(schema.arities, 0)
        is_cat = np.append(schema.is_categorical, False)
        is_leaf = self.leaf >= 0
        if np.any(is_leaf & (self.feature != m)):
            raise ValueError("structure: a leaf must test the zero column")
        if np.any(is_leaf & (self.child != np.arange(shape[1])[None, :])):
            raise ValueError("structure: a leaf must point to itself")
        for t in range(shape[0]):
            # Largest branch each node can take: arity-1 (categorical), 1 (numeric), 0 (leaf); one tree at a
            # time (for the whole forest these int64 temporaries would be several times its counts).
            f_t = self.feature[t]
            width_t = np.where(is_cat[f_t], arity[f_t] - 1, np.where(f_t < m, 1, 0))
            lf = self.leaf[t][is_leaf[t]]
            if len(lf) != self.n_leaves[t] or not np.array_equal(np.sort(lf), np.arange(len(lf))):
                raise ValueError(f"structure: tree {t} leaf numbers are not 0..n_leaves-1")
            # Walk the tree level by level: every path must end at a leaf within `height` steps,
            # and no node may be reached twice (a shared child would make the walk, and the
            # meaning of a leaf, exponential: it must be a tree, not a DAG).
            frontier = np.zeros(1, dtype=np.int64)
            seen = np.zeros(shape[1], dtype=bool)
            seen[0] = True
            n_seen = 1
            for _ in range(self.height + 1):
                frontier = frontier[~is_leaf[t][frontier]]
                if frontier.size == 0:
                    break
                w = width_t[frontier]
                first = self.child[t][frontier].astype(np.int64)
                # An inner node must test a real attribute (an arity-1 categorical has one child: w == 0).
                if np.any(self.feature[t][frontier] >= m) or np.any(first <= frontier) or np.any(first + w >= shape[1]):
                    raise ValueError(f"structure: tree {t} has a split whose children fall outside the tree")
                frontier = np.repeat(first, w + 1) + ragged_arange(w + 1)
                if np.any(seen[frontier]):
                    raise ValueError(f"structure: tree {t} reaches a node twice (not a tree)")
                seen[frontier] = True
                # a node twice in the level marks fewer new nodes than the level has (a count, not np.unique:
                # its hash table took most of a large model's load)
                n_seen, before = int(np.count_nonzero(seen)), n_seen
                if n_seen - before != frontier.size:
                    raise ValueError(f"structure: tree {t} reaches a node twice (not a tree)")
            if frontier.size:
                raise ValueError(f"structure: tree {t} is deeper than its height {self.height}")
            reached_leaves = np.flatnonzero(seen & is_leaf[t])
            if reached_leaves.size != self.n_leaves[t]:
                raise ValueError(f"structure: tree {t} has leaves no path reaches")
            num = seen & ~is_leaf[t] & (self.feature[t] < m) & ~is_cat[self.feature[t]]
            if not np.all(np.isfinite(self.threshold[t][num])):
                raise ValueError(f"structure: tree {t} has a numeric split without a finite threshold")
