"""Predictions from a private forest's released counts, one record at a time or vectorised.

Shared by :class:`~streamdp.river.forest.PrivateForestClassifier` (its own
forest) and :class:`~streamdp.river.service.ServiceClassifier` (the forest the
service published). Only released (noised) counts are read; negative noised
counts are clamped to zero; a tree whose leaf is empty falls back to the class
prior of the whole forest.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from streamdp.forest import PrivateForest
from streamdp.river.encoding import RecordEncoder

__all__ = ["ForestView"]


class ForestView:
    """Prediction caches of a :class:`~streamdp.forest.PrivateForest`: fast ``predict_proba_one``.

    The structure is converted to Python lists once; the clamped counts are
    rebuilt by :meth:`refresh` after every change of the forest's counts.

    >>> from streamdp.river.schemas import stagger_schema
    >>> forest = PrivateForest.create(stagger_schema(), n_trees=3, epsilon=1.0)
    >>> view = ForestView(forest)
    >>> view.predict_proba_one({"size": 0, "color": 1, "shape": 2})  # no counts yet: the uniform prior
    {0: 0.5, 1: 0.5}
    """

    def __init__(self, forest: PrivateForest, encoder: RecordEncoder | None = None):
        self.forest = forest
        self.vote = forest.vote
        self.encoder = RecordEncoder(forest.schema) if encoder is None else encoder
        self.refresh()

    def refresh(self) -> None:
        """Rebuild the caches from the forest's released counts (call after every merge)."""
        T = self.forest.n_trees  # the random trees only: prior stumps take no part in the vote
        pos = np.clip(np.asarray(self.forest.counts[:T]), 0, None).astype(np.float64)
        C = pos.shape[2]
        prior = pos.sum(axis=(0, 1))
        prior = prior / prior.sum() if prior.sum() > 0 else np.full(C, 1.0 / C)
        self._pos = pos
        self._prior = prior.tolist()
        self._prior_rank = (np.argsort(np.argsort(prior, kind="stable"), kind="stable") + 1).tolist()
        self._prior_best = int(np.argmax(self._prior_rank))
        s = self.forest.structure
        py = getattr(self, "_py", None)
        if py is None or py[-1] is not s:  # the structure never changes: convert it once
            py = (
                s.feature[:T].tolist(), s.threshold[:T].tolist(), s.child[:T].tolist(), s.leaf[:T].tolist(), None,
                self.encoder.is_cat + [False],
                [a.arity if c else 2 for a, c in zip(self.forest.schema.attributes, self.encoder.is_cat)], s,
            )
        self._py = py  # leaf counts as nested lists are built lazily, on the first one-record prediction
        self._pos_list = None

    # -- prediction ---------------------------------------------------------------
    def tree_cells(self, row: list) -> list[list[float]]:
        """Per tree, the (averaged) clamped count vector of the leaf/leaves the record reaches."""
        feature, threshold, child, leaf, _, is_cat, arity, _ = self._py
        pos = self._pos_list
        if pos is None:
            pos = self._pos_list = self._pos.tolist()
        out = []
        for t in range(len(feature)):
            ft, th, ch, lf, pt = feature[t], threshold[t], child[t], leaf[t], pos[t]
            node = 0
            while lf[node] < 0:
                f = ft[node]
                v = row[f]
                if v is None:
                    break  # missing categorical: slow path below
                node = ch[node] + (v if is_cat[f] else (v > th[node]))
            if lf[node] >= 0:
                out.append(pt[lf[node]])
                continue
            # Descend every branch below a missing categorical value.
            leaves = []
            stack = [node]
            while stack:
                nd = stack.pop()
                if lf[nd] >= 0:
                    leaves.append(lf[nd])
                    continue
                f = ft[nd]
                v = row[f]
                if v is None:
                    stack.extend(ch[nd] + b for b in range(arity[f]))
                else:
                    stack.append(ch[nd] + (v if is_cat[f] else (v > th[nd])))
            k = len(leaves)
            vec = [sum(pt[l][c] for l in leaves) / k for c in range(len(pt[0]))]
            out.append(vec)
        return out

    def proba_from_cells(self, cells: list[list[float]]) -> list[float]:
        """Class probabilities, in the schema's label order, from :meth:`tree_cells`'s vectors."""
        C = len(self._prior)
        if self.vote == "proba":
            s = [0.0] * C
            for vec in cells:
                for c in range(C):
                    s[c] += vec[c]
            tot = sum(s)
            return [v / tot for v in s] if tot > 0 else list(self._prior)
        rank = self._prior_rank
        votes = [0.0] * C
        for vec in cells:
            top = max(vec)
            if top <= 0:
                votes[self._prior_best] += 1
                continue
            best = max((c for c in range(C) if vec[c] == top), key=lambda c: rank[c])
            votes[best] += 1
        T = len(cells)
        return [v / T for v in votes]

    def predict_proba_one(self, x: dict) -> dict:
        """Class probabilities of one river record, keyed by label."""
        row = self.encoder.encode_one(x)
        p = self.proba_from_cells(self.tree_cells(row))
        return dict(zip(self.encoder.label_values, p))

    def predict_proba_encoded(self, X: np.ndarray) -> np.ndarray:
        """Probabilities for complete encoded records (schema order), shape (n, n_classes)."""
        leaves = self.forest.structure.apply(X, self.forest.schema.is_categorical)
        T, L, C = self._pos.shape
        cells = self._pos.reshape(T * L, C)[leaves[:, :T] + np.arange(T) * L]  # (n, T, C)
        if self.vote == "proba":
            s = cells.sum(axis=1)
            tot = s.sum(axis=1, keepdims=True)
            return np.where(tot > 0, s / np.where(tot > 0, tot, 1), np.asarray(self._prior))
        return self.forest._proba_from_leaves(leaves)
