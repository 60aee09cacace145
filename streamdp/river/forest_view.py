"""Predictions from a private forest's released counts, one record at a time or vectorised.

Shared by :class:`~streamdp.river.forest.PrivateForestClassifier` (its own
forest) and :class:`~streamdp.river.service.ServiceClassifier` (the forest the
service published). Only released (noised) counts are read. The vote is
:meth:`PrivateForest.proba_from_leaves`'s and the estimate
:mod:`streamdp.estimation`'s; the one-record path computes the same numbers
(its twins ``path_proba_one`` / ``posterior_one``) without numpy calls per record.
Below an unknown value a tree reaches several leaves: it contributes the mean
of their rows.

Speed (river's loop): the structure is converted once to Python
code (nested tests with the thresholds as literals), fused with the record
encoder's generated code (:meth:`RecordEncoder.source`), so a river record is
encoded and routed by one function call. At each release the real leaves' rows
(:meth:`ForestNodes.path_rows`: the path's counts and variances from depth 1;
the leaf paths themselves are computed once per structure) become Python lists;
a record sums its trees' rows with ``map(seq_sum, zip(...))``, left to right in tree order,
so the floats are those of the vectorised path's sums, and the noise-aware chain
(:func:`~streamdp.estimation.path_proba_one`) runs on
the pooled numbers. No numpy call per record; the predictions equal
:meth:`ForestNodes.path_proba`'s (tests/river/test_forest.py).

When the compiled kernel is built (:mod:`streamdp.river.kernel`), all of
that (encoding the river dict, the routes, the sums, the chain or the leaf
rule) runs in one C call per record, over contiguous float64 tables (per
structure the trees and each leaf's path nodes, per release the nodes' counts
and variances, or the clipped leaf counts); it gives the same floats (tests/river/test_kernel.py)
and hands back to the Python path any record it does not handle (an unknown
value, a numpy scalar, ...). The Python row lists are then built only on such
a record.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from streamdp.estimation.one_record import path_proba_one
from streamdp.estimation.rule import seq_sum
from streamdp.forest.model import PrivateForest
from streamdp.options import VOTES
from streamdp.records.schema import Categorical
from streamdp.river.encoding import RecordEncoder
from streamdp.river.kernel import constants as kernel_constants
from streamdp.river.kernel import new_kernel

__all__ = ["ForestView"]


class ForestView:
    """Fast ``predict_proba_one`` on a :class:`~streamdp.forest.PrivateForest`.

    Call :meth:`refresh` after every change of the forest's counts.

    >>> from streamdp.river.schemas import stagger_schema
    >>> forest = PrivateForest.create(stagger_schema(), n_trees=3, epsilon=1.0)
    >>> view = ForestView(forest)
    >>> view.predict_proba_one({"size": 0, "color": 1, "shape": 2})  # no counts yet: the uniform prior
    {0: 0.5, 1: 0.5}
    """

    def __init__(self, forest: PrivateForest, encoder: RecordEncoder | None = None):
        if forest.vote not in VOTES:
            raise ValueError(f"a river view reads the votes {VOTES}, not {forest.vote!r} (set the forest's vote first)")
        self.forest = forest
        self.encoder = RecordEncoder(forest.schema) if encoder is None else encoder
        self._structure = s = forest.structure  # the compiled routes follow it (a pruned refit replaces it)
        arity = [a.arity if isinstance(a, Categorical) else 2 for a in forest.schema.attributes]
        is_cat = self.encoder.is_cat
        self._arity = arity
        self._L = L = forest.shape[1]
        # Per tree, one tuple per node: (attribute, threshold, first child, categorical) at a split,
        # (-1, None, flat leaf index, False) at a leaf: one list index and one unpack per level.
        self._trees: list[list[tuple]] = []
        T = forest.n_trees  # the random trees: prior stumps (the structure's last rows) take no part in the vote
        for t, (ft, th, ch, lf) in enumerate(
            zip(s.feature[:T].tolist(), s.threshold[:T].tolist(), s.child[:T].tolist(), s.leaf[:T].tolist())
        ):
            self._trees.append(
                [
                    (-1, None, t * L + leaf, False) if leaf >= 0 else (f, thr, c, f < len(is_cat) and is_cat[f])
                    for f, thr, c, leaf in zip(ft, th, ch, lf)
                ]
            )
        # compiled on the first leaves_one: the kernel's path (and a growing forest) may never ask
        self._route: Any = _LAZY
        self._k = self._new_kernel(T)  # the compiled one-record path (streamdp.river.kernel), or None
        # compiled on the first proba_list (a service view may never use it)
        self._route_x: Callable[[dict], list | None] | None = None
        self._route_x_ready: bool | None = None
        self._paths_of: object = None  # the structure whose leaf paths self._paths holds (compared by identity)
        self._kernel_paths_of: np.ndarray | None = None  # the paths the kernel holds
        self.refresh()

    def __getstate__(self) -> dict:
        return {"forest": self.forest, "encoder": self.encoder}  # the compiled routes are rebuilt on load

    def __setstate__(self, state: dict) -> None:
        ForestView.__init__(self, state["forest"], state["encoder"])

    def refresh(self) -> None:
        """Forget the cached rows (call after every merge into the forest).

        The rows are what the vote reads per leaf (flat ``tree * max_leaves + leaf``):
        ``"path"`` (probability vote, noise-aware estimate) its path's counts and
        variances (:meth:`ForestNodes.path_rows`), ``"sum"`` (probability vote,
        ``estimator="leaf"``) its clipped counts, ``"majority"`` its
        :meth:`PrivateForest.leaf_proba`. Under the probability vote the rows of
        the real leaves (not the padding past a tree's last leaf) are kept as
        Python lists too, keyed by flat leaf: a record sums them without numpy.
        """
        f = self.forest
        self._key = (f.version, f.estimator, f.vote)
        # held, not only compared by id: a prior set without a new release (a growing river classifier's prior
        # phase) must refresh the rows, and a freed array's id could come back
        self._class_prior = f.__dict__.get("class_prior")
        prior = f.prior()
        T, L, C = f.n_trees, self._L, f.shape[2]
        self._root: tuple[float, float] = (0.0, 0.0)  # the pooled roots' records and variance (the "path" mode's)
        # _rows: made from _rows_src on first use (_python_rows)
        self._rows: dict[int, list[float]] | None = None
        self._rows_src: tuple[np.ndarray, Callable[[], np.ndarray]] | None = None
        # "majority", "sum": the leaves' rows; "path": None (the rows are _rows_src's) or (nodes, flat leaf -> node)
        self._table: Any
        if f.vote == "majority":
            self._mode, self._table = "majority", f.leaf_proba().reshape(-1, C)
        elif f.estimator == "leaf":
            self._mode, self._table = "sum", np.maximum(f.counts[:T].reshape(-1, C), 0)
            real, table = self._real_leaves(), self._table
            self._rows_src = (real, lambda: table[real])
        else:
            self._mode, nodes = "path", f.estimation_nodes()
            self._root = (nodes.records, nodes.root_var)
            real = self._real_leaves()
            node_flat = real // L * nodes.leaf_node.shape[1] + real % L  # the same leaves in the nodes' numbering
            width = (int(nodes.depth.max(initial=0)) + 1) * (C + 1)
            if real.size * width <= PATH_TABLE_CELLS:
                if self._paths_of is not f.structure:  # the paths depend on the structure alone: kept across releases
                    self._paths, self._paths_of = nodes.path_nodes(node_flat), f.structure
                # The roots take the prior (streamdp.estimation): the rows start at depth 1.
                paths = self._paths
                self._rows_src = (real, lambda: nodes.path_rows(path=paths)[:, C + 1 :])
                self._nodes = nodes
                self._table = None
            else:  # a table too large to keep: each record's rows from the nodes
                self._table = (nodes, dict(zip(real.tolist(), node_flat.tolist())))
        self._prior = prior.tolist()
        self._rank = np.argsort(np.argsort(prior, kind="stable"), kind="stable") + 1  # larger prior, larger rank
        self._vote: Callable[[list], list[float]] | None = None
        if self._k is not None:
            self._kernel_rows(prior)  # the Python lists wait for a record the kernel hands back
        else:
            self._python_rows()

    def _python_rows(self) -> None:
        """The rows as Python lists keyed by flat leaf, and the plain-Python vote on them (once per release)."""
        if self._rows is None and self._rows_src is not None:
            real, rows = self._rows_src
            self._rows = dict(zip(real.tolist(), rows().tolist()))
            self._vote = self._pooled_vote()

    def _new_kernel(self, T: int):
        """The compiled kernel with this structure's random trees (None when not built or not applicable)."""
        enc = self.encoder
        k = new_kernel(enc._spec, enc._encode)
        if k is None or [s[2] is not None for s in enc._spec] != enc.is_cat:  # categorical: has a code table
            return None
        feat: list[int] = []
        thr: list[float] = []
        nxt: list[int] = []
        root: list[int] = []
        for nodes in self._trees:
            off = len(feat)
            root.append(off)
            for f, th, ch, cat in nodes:
                split = 0 <= f < len(self._arity)  # past a tree's last node: padding (attribute m), never reached
                feat.append(f if split else -1)
                thr.append(float(th) if split and not cat else 0.0)
                nxt.append(off + ch if split else ch if f < 0 else 0)
        k.set_trees(
            len(feat),
            T,
            np.array(feat, dtype=np.int32),
            np.array(thr, dtype=np.float64),
            np.array(nxt, dtype=np.int64),
            np.array(root, dtype=np.int64),
            np.array(self._arity, dtype=np.int64),
        )
        return k

    def _kernel_rows(self, prior: np.ndarray) -> None:
        """This release's numbers into the kernel, as contiguous doubles. The noise-aware estimate: per structure,
        each flat leaf's path nodes below the root (:meth:`ForestNodes.path_nodes`); per release, every node's counts
        and total variance (what :meth:`ForestNodes.path_rows` gathers). The leaf rule: the clipped counts."""
        k, T, L = self._k, self.forest.n_trees, self._L
        consts = (*self._root, *kernel_constants())
        prior = np.ascontiguousarray(prior, dtype=np.float64)
        H = 0 if self._mode != "path" or self._rows_src is None else self._paths.shape[1] - 1
        if self._rows_src is None or self._mode not in ("path", "sum") or (self._mode == "path" and H < 1):
            k.clear_rows()  # the Python path (a forest of single leaves has no path below the roots either)
            return
        if self._mode == "path":
            nodes = self._nodes
            n = nodes.y.shape[0]
            if self._kernel_paths_of is not self._paths:  # per structure (the paths are kept across releases)
                real = self._rows_src[0]
                flat = np.full((T * L, H), n, dtype=np.int64)  # n: the zero row (padding leaves are never reached)
                flat[real] = self._paths[:, 1:]
                k.set_paths(T * L, H, flat)
                self._kernel_paths_of = self._paths
            k.set_nodes(n + 1, nodes.node_table(), prior, *consts)
            return
        table = self._table
        ints = table.dtype.kind in "iu"
        if ints and float(np.abs(table).max(initial=0)) * table.shape[0] * table.shape[1] >= 2.0**53:
            k.clear_rows()  # sums not exact as doubles (never in practice): the Python path
            return
        k.set_rows(2, T * L, table.shape[1], np.ascontiguousarray(table, dtype=np.float64), prior, *consts)

    def _real_leaves(self) -> np.ndarray:
        """Flat numbers (``tree * max_leaves + leaf``) of the random trees' real leaves, in order."""
        f = self.forest
        n_leaves = (f.structure.leaf[: f.n_trees] >= 0).sum(axis=1)
        return np.flatnonzero(np.arange(self._L)[None, :] < n_leaves[:, None])

    # -- routing --------------------------------------------------------------------
    def leaves_one(self, row: list) -> list:
        """Per tree, the flat leaf index (``tree * max_leaves + leaf``) the encoded record reaches, or,
        below an unknown value (``None``), the tuple of every leaf it could reach with its share of the combinations
        of the unknown values (``(leaf, share)`` pairs: :meth:`_below`)."""
        self._fresh()  # routes of the current trees (a growing forest changes them: a stale route names no leaf)
        if self._route is _LAZY:
            self._route = _compile_routes(self._trees, self._arity)
        if self._route is not None and None not in row:
            return self._route(row)
        out = []
        for nodes in self._trees:
            f, th, ch, cat = nodes[0]
            while f >= 0:
                v = row[f]
                if v is None:
                    out.append(tuple(self._below(nodes, ch, f, row)))
                    break
                f, th, ch, cat = nodes[ch + (v if cat else v > th)]
            else:
                out.append(ch)
        return out

    def _below(self, nodes: list, ch: int, f: int, row: list) -> list[tuple[int, float]]:
        """Every leaf below a split on an unknown value (and below any further unknown one), with the share of the
        combinations of the unknown values that reach it: each unknown split's branches share their node's
        equally, so leaves reached alike are the average over the values also where one unknown split lies below
        some branches of another."""
        leaves = []
        k = self._arity[f]
        stack = [(ch + b, 1.0 / k) for b in range(k)]
        while stack:
            node, w = stack.pop()
            f, th, ch, cat = nodes[node]
            if f < 0:
                leaves.append((ch, w))
                continue
            v = row[f]
            if v is None:
                k = self._arity[f]
                stack.extend((ch + b, w / k) for b in range(k))
            else:
                stack.append((ch + (v if cat else v > th), w))
        return leaves

    # -- the vote (same numbers as PrivateForest.proba_from_leaves) ------------------
    def _cells(self, leaves: list) -> np.ndarray:
        """The rows of a record's leaves, one per tree (below an unknown value, the reachable leaves' rows averaged by
        their shares of the unknown values' combinations)."""
        if self._rows is not None:
            rows = self._rows

            def get(ks: list) -> np.ndarray:
                return np.array([rows[k] for k in ks], dtype=np.float64)
        elif self._mode == "path":  # a path table too large to keep: the record's rows only (below the roots)
            nodes, node_flat = self._table

            def get(ks: list) -> np.ndarray:
                return nodes.path_rows([node_flat[k] for k in ks])[:, len(self._prior) + 1 :]
        else:
            get = self._table.__getitem__
        if tuple in map(type, leaves):
            return np.stack(
                [
                    get([k])[0]
                    if type(k) is int
                    else np.average(get([leaf for leaf, _ in k]), axis=0, weights=[w for _, w in k])
                    for k in leaves
                ]
            )
        return get(leaves)

    def _fresh(self) -> None:
        f = self.forest
        if f.structure is not self._structure:  # refit with pruning: new trees, new routes
            ForestView.__init__(self, f, self.encoder)
        elif self._key != (f.version, f.estimator, f.vote) or self._class_prior is not f.__dict__.get("class_prior"):
            self.refresh()

    def proba_one(self, leaves: list) -> list[float]:
        """Class probabilities (schema label order) of one record from :meth:`leaves_one`."""
        self._fresh()
        if self._mode == "majority":
            cells = self._cells(leaves)
            votes = np.where(cells == cells.max(axis=1, keepdims=True), self._rank, 0).argmax(axis=1)
            return (np.bincount(votes, minlength=len(self._prior)) / len(leaves)).tolist()
        self._python_rows()
        if self._vote is not None and tuple not in map(type, leaves):
            return self._vote(leaves)
        return self._from_sums(self._cells(leaves).sum(axis=0).tolist())

    def _pooled_vote(self):
        """The probability vote of a record reaching one leaf per tree (flat numbers), in plain Python,
        as a function with this release's rows and prior bound (the river loop's hot path)."""
        get, prior, finish, root = self._rows.__getitem__, self._prior, self._from_sums, self._root
        if self._mode == "path":
            # The rows summed tree by tree in order: the floats of the vectorised path's sums.
            def vote(leaves: list) -> list[float]:
                return path_proba_one(list(map(seq_sum, zip(*map(get, leaves)))), prior, *root)
        else:

            def vote(leaves: list) -> list[float]:
                return finish(list(map(seq_sum, zip(*map(get, leaves)))))

        return vote

    def _from_sums(self, s: list) -> list[float]:
        if self._mode == "path":
            return path_proba_one(s, self._prior, *self._root)
        tot = seq_sum(s)
        return [v / tot for v in s] if tot > 0 else list(self._prior)

    def proba_list(self, x: dict) -> list[float]:
        """Class probabilities of one river record, in the schema's label order."""
        self._fresh()
        if self._k is not None:
            p = self._k.proba(x)
            if p is not None:
                return p
        if self._route_x_ready is None:
            # The river loop's path: the record dict encoded and routed by one generated function (None: an unknown value).
            ns: dict = {}
            self._route_x = _compile_routes(self._trees, self._arity, prelude=self.encoder.source(ns), ns=ns)
            self._route_x_ready = True
        self._python_rows()
        if self._vote is not None and self._route_x is not None:
            leaves = self._route_x(x)
            if leaves is not None:
                return self._vote(leaves)
        return self.proba_one(self.leaves_one(self.encoder.encode_one(x)))

    def predict_proba_one(self, x: dict) -> dict:
        """Class probabilities of one river record, keyed by label."""
        return dict(zip(self.encoder.label_values, self.proba_list(x)))

    def predict_one(self, x: dict):
        """The most probable label of one river record (the first in label order on ties, like river's ``max``)."""
        self._fresh()
        if self._k is not None:
            i = self._k.predict(x)  # the kernel's proba_list and p.index(max(p)), without the list
            if i is not None:
                return self.encoder.label_values[i]
        p = self.proba_list(x)
        return self.encoder.label_values[p.index(max(p))]

    def predict_proba_encoded(self, X: np.ndarray) -> np.ndarray:
        """Probabilities for complete encoded records (schema order), shape ``(n, n_classes)``."""
        return self.forest.proba_from_leaves(self.forest.structure.apply(X, self.forest.schema.is_categorical))


_LAZY = object()  # a route not compiled yet

#: Largest path table (numbers) built whole per release (:meth:`ForestNodes.path_rows`; 32 MiB); above it, leaf by leaf.
PATH_TABLE_CELLS = 4 * 2**20

#: Largest forest (nodes over all trees) and deepest nesting routed by generated code.
ROUTE_CODE_MAX_NODES = 200_000
ROUTE_CODE_MAX_NEST = 90  # Python's tokenizer allows 100 levels of indentation


def _compile_routes(trees: list, arity: list, prelude: list | None = None, ns: dict | None = None):
    """One Python function routing an encoded record (no unknown value) through every tree.

    With ``prelude`` (:meth:`RecordEncoder.source`, its objects in ``ns``) the
    function takes the river record itself, encodes it into locals and
    returns None when a value is unknown.

    The trees become nested ``if`` tests with their thresholds as literals
    (categorical splits as a binary search over the codes), so a level costs one
    comparison instead of several list look-ups: the one-record path is several
    times faster. The source holds only numbers formatted here from the
    structure's arrays (ints and float reprs), never data. Returns None when the
    forest is too large or too deep for generated code (the loop is used then).
    """
    if sum(len(t) for t in trees) > ROUTE_CODE_MAX_NODES:
        return None
    if prelude is None:
        lines, value = ["def route(r):"], "r[{}]"
    else:
        m = len(arity)
        lines = [
            "def route(x):",
            " get = x.get",
            *prelude,
            " if " + " or ".join(f"a{j} is None" for j in range(m)) + ": return None",
        ]  # identity tests only
        value = "a{}"

    def emit(nodes: list, node: int, t: int, ind: int) -> bool:
        if ind > ROUTE_CODE_MAX_NEST:
            return False
        f, th, ch, cat = nodes[node]
        pad = " " * ind
        if f < 0:
            lines.append(f"{pad}l{t} = {int(ch)}")
            return True
        if not cat:
            lines.append(f"{pad}if {value.format(int(f))} > {float(th)!r}:")
            if not emit(nodes, ch + 1, t, ind + 1):
                return False
            lines.append(f"{pad}else:")
            return emit(nodes, ch, t, ind + 1)
        kids = [nodes[ch + b] for b in range(arity[f])]
        if all(k[0] < 0 for k in kids):  # every child a leaf (the bottom level): one tuple index
            lines.append(f"{pad}l{t} = {tuple(int(k[2]) for k in kids)!r}[{value.format(int(f))}]")
            return True
        lines.append(f"{pad}v = {value.format(int(f))}")
        return bisect(nodes, ch, 0, arity[f], t, ind)

    def bisect(nodes: list, ch: int, lo: int, hi: int, t: int, ind: int) -> bool:
        if hi - lo == 1:
            return emit(nodes, ch + lo, t, ind)
        mid = (lo + hi) // 2
        pad = " " * ind
        lines.append(f"{pad}if v < {mid}:")
        ok = bisect(nodes, ch, lo, mid, t, ind + 1)
        lines.append(f"{pad}else:")
        return ok and bisect(nodes, ch, mid, hi, t, ind + 1)

    for t, nodes in enumerate(trees):
        if not emit(nodes, 0, t, 1):
            return None
    lines.append(" return [" + ", ".join(f"l{t}" for t in range(len(trees))) + "]")
    namespace: dict = {} if ns is None else ns
    exec(compile("\n".join(lines), "<streamdp forest routes>", "exec"), namespace)  # noqa: S102 (numbers only)
    return namespace["route"]
