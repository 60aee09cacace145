"""Predictions from a private forest's released counts, one record at a time or vectorised.

Shared by :class:`~streamdp.river.forest.PrivateForestClassifier` (its own
forest) and :class:`~streamdp.river.service.ServiceClassifier` (the forest the
service published). Only released (noised) counts are read. The vote is
:meth:`PrivateForest.proba_from_leaves`'s, the one place it is defined; the
one-record path computes the same numbers without numpy calls per record.

Speed: the structure is converted once, to Python code (nested tests with
the thresholds as literals). After a release a small model's clipped counts
are converted whole (up to ``EAGER_CELLS``, about a millisecond); a large
one's are read leaf by leaf (one small ``tolist``) the first time a record
reaches the leaf, so a release never costs a conversion of the whole model.
"""

from __future__ import annotations

import numpy as np

from streamdp.forest import PrivateForest
from streamdp.river.encoding import RecordEncoder

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
        self.forest = forest
        self.encoder = RecordEncoder(forest.schema) if encoder is None else encoder
        s = forest.structure
        arity = [a.arity if c else 2 for a, c in zip(forest.schema.attributes, self.encoder.is_cat)]
        is_cat = self.encoder.is_cat
        self._arity = arity
        self._is_cat = is_cat
        self._L = L = forest.shape[1]
        # Per tree, one tuple per node: (attribute, threshold, first child, categorical) at a split,
        # (-1, None, flat leaf index, False) at a leaf: one list index and one unpack per level.
        self._trees = []
        for t, (ft, th, ch, lf) in enumerate(zip(s.feature.tolist(), s.threshold.tolist(), s.child.tolist(),
                                                 s.leaf.tolist())):
            self._trees.append([(-1, None, t * L + leaf, False) if leaf >= 0 else (f, thr, c, f < len(is_cat) and is_cat[f])
                                for f, thr, c, leaf in zip(ft, th, ch, lf)])
        self._route = _compile_routes(self._trees, arity)
        self.refresh()

    def __getstate__(self) -> dict:
        return {"forest": self.forest, "encoder": self.encoder}  # the compiled routes are rebuilt on load

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["forest"], state["encoder"])

    def refresh(self) -> None:
        """Forget the cached rows (call after every merge into the forest)."""
        self._flat = self.forest.counts.reshape(-1, self.forest.shape[2])  # a view: no copy
        # A small model is converted whole (a list indexed by flat leaf); a large one leaf by leaf, on first use.
        self._rows = np.maximum(self._flat, 0).tolist() if self._flat.size <= EAGER_CELLS else {}
        prior = self.forest.prior()
        self._prior = prior.tolist()
        rank = np.argsort(np.argsort(prior, kind="stable"), kind="stable") + 1  # larger prior, larger rank
        self._rank = rank.tolist()
        self._prior_best = int(np.argmax(rank))

    # -- routing --------------------------------------------------------------------
    def leaves_one(self, row: list) -> list:
        """Per tree, the flat leaf index (``tree * max_leaves + leaf``) the encoded record reaches, or,
        below an unknown value (``None``), the tuple of every leaf it could reach."""
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

    def _below(self, nodes: list, ch: int, f: int, row: list) -> list:
        """Every leaf below a split on an unknown value (and below any further unknown one)."""
        leaves = []
        stack = [ch + b for b in range(self._arity[f])]
        while stack:
            f, th, ch, cat = nodes[stack.pop()]
            if f < 0:
                leaves.append(ch)
                continue
            v = row[f]
            if v is None:
                stack.extend(ch + b for b in range(self._arity[f]))
            else:
                stack.append(ch + (v if cat else v > th))
        return leaves

    # -- the vote (same numbers as PrivateForest.proba_from_leaves) ------------------
    def _cell(self, k) -> list:
        """Clipped counts of flat leaf ``k`` (read on first use after a release), or the mean over a tuple of leaves."""
        if type(k) is tuple:  # an unknown value: the mean of the reachable leaves
            rows = [self._cell(j) for j in k]
            return [sum(c) / len(rows) for c in zip(*rows)]
        if type(self._rows) is list:
            return self._rows[k]
        r = self._rows[k] = [v if v > 0 else 0 for v in self._flat[k].tolist()]
        return r

    def proba_one(self, leaves: list) -> list[float]:
        """Class probabilities (schema label order) of one record from :meth:`leaves_one`."""
        rows = self._rows
        if type(rows) is list:
            cells = [rows[k] if type(k) is int else self._cell(k) for k in leaves]
        else:
            get = rows.get
            cells = [get(k) or self._cell(k) for k in leaves]
        if self.forest.vote == "proba":
            s = [sum(c) for c in zip(*cells)]
            tot = sum(s)
            return [v / tot for v in s] if tot > 0 else list(self._prior)
        rank = self._rank
        votes = [0.0] * len(rank)
        for vec in cells:
            top = max(vec)
            if top <= 0:
                votes[self._prior_best] += 1
            else:
                votes[max((c for c, v in enumerate(vec) if v == top), key=rank.__getitem__)] += 1
        return [v / len(cells) for v in votes]

    def predict_proba_one(self, x: dict) -> dict:
        """Class probabilities of one river record, keyed by label."""
        return dict(zip(self.encoder.label_values, self.proba_one(self.leaves_one(self.encoder.encode_one(x)))))

    def predict_proba_encoded(self, X: np.ndarray) -> np.ndarray:
        """Probabilities for complete encoded records (schema order), shape ``(n, n_classes)``."""
        return self.forest.proba_from_leaves(self.forest.structure.apply(X, self.forest.schema.is_categorical))


#: Largest model (cells) whose clipped counts are converted whole after a release (about a millisecond).
EAGER_CELLS = 65_536

#: Largest forest (nodes over all trees) and deepest nesting routed by generated code.
ROUTE_CODE_MAX_NODES = 200_000
ROUTE_CODE_MAX_NEST = 90  # Python's tokenizer allows 100 levels of indentation


def _compile_routes(trees: list, arity: list):
    """One Python function routing an encoded record (no unknown value) through every tree.

    The trees become nested ``if`` tests with their thresholds as literals
    (categorical splits as a binary search over the codes), so a level costs one
    comparison instead of several list look-ups: the one-record path is several
    times faster. The source holds only numbers formatted here from the
    structure's arrays (ints and float reprs), never data. Returns None when the
    forest is too large or too deep for generated code (the loop is used then).
    """
    if sum(len(t) for t in trees) > ROUTE_CODE_MAX_NODES:
        return None
    lines = ["def route(r):"]

    def emit(nodes: list, node: int, t: int, ind: int) -> bool:
        if ind > ROUTE_CODE_MAX_NEST:
            return False
        f, th, ch, cat = nodes[node]
        pad = " " * ind
        if f < 0:
            lines.append(f"{pad}a{t} = {int(ch)}")
            return True
        if not cat:
            lines.append(f"{pad}if r[{int(f)}] > {float(th)!r}:")
            return emit(nodes, ch + 1, t, ind + 1) and (lines.append(f"{pad}else:") or True) and emit(nodes, ch, t, ind + 1)
        lines.append(f"{pad}v = r[{int(f)}]")
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
    lines.append(" return [" + ", ".join(f"a{t}" for t in range(len(trees))) + "]")
    namespace: dict = {}
    exec(compile("\n".join(lines), "<streamdp forest routes>", "exec"), namespace)  # noqa: S102 (numbers only)
    return namespace["route"]
