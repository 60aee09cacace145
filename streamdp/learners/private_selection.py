"""Data-layer operations for choosing among learners privately: random shares, a forest's fit, a noisy best.

Part of the private data layer (:class:`~streamdp.learners.private_data.PrivateDataset` inherits them), kept
in its own module because they serve one concept, private learner selection
(:mod:`streamdp.learners.selection`):

* :meth:`~SelectionOps.split`: disjoint random shares. Each record goes to share ``i`` with probability
  ``shares[i]``, drawn independently per record from the secure source: the assignment of one record
  depends neither on the data nor on the other records, so the shares are a partition fixed before any
  record is read and their spends compose in parallel (the parent is charged the max over its shares).
* :meth:`~SelectionOps.forest_release`: Jagannathan et al.'s one-shot fit of a
  :class:`~streamdp.PrivateForest` on the records of this part, charged ``epsilon`` first; the forest's own
  guarantee is ``epsilon / K`` per record (``K`` records per person), so ``epsilon`` per person.
* :meth:`~SelectionOps.most_accurate`: the exponential mechanism over candidate predictors, scored by the
  number of this part's records each one labels correctly.

Proof sketch of :meth:`~SelectionOps.most_accurate` (``epsilon``-DP). Fix the predictors (released models
or any pure functions of public values). A candidate's score ``q_r(D)`` counts the records it labels
correctly, so adding one record raises every score by 0 or 1: the scores are monotone with sensitivity 1.
Candidate ``r`` is drawn with probability ``exp(e q_r) / Z(D)``, ``e = epsilon / K``. For ``D' = D + x``,
``exp(e q_r(D')) <= e^e exp(e q_r(D))`` and ``Z(D') >= Z(D)``, so ``P'(r) <= e^e P(r)``; and
``exp(e q_r(D)) <= exp(e q_r(D'))``, ``Z(D') <= e^e Z(D)``, so ``P(r) <= e^e P'(r)``. Monotone scores need
no factor 2 (McSherry and Talwar's mechanism with Dwork and Roth's remark on monotone queries). A person
with ``k <= K`` records moves each score by at most ``k`` in one direction: ``(k epsilon / K)``-DP.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Self, cast

import numpy as np

from streamdp.privacy.mechanisms import exponential_mechanism

if TYPE_CHECKING:
    from streamdp.forest import PrivateForest
    from streamdp.privacy.mechanisms import SecureRandom
    from streamdp.records.schema import Schema

__all__ = ["SelectionOps"]


class SelectionOps:
    """The selection operations of :class:`~streamdp.learners.private_data.PrivateDataset` (a mixin)."""

    if TYPE_CHECKING:
        schema: Schema
        epsilon: float
        records_per_unit: int
        path: tuple
        _rng: SecureRandom
        _bounds: dict
        _groups: list

        def _charge(self, epsilon: float, what: str) -> None: ...
        def _noise_epsilon(self, epsilon: float) -> float: ...

    def _rows(self) -> tuple[np.ndarray, np.ndarray]:
        return self._PrivateDataset__X, self._PrivateDataset__y  # type: ignore[attr-defined]

    def split(self, shares: Sequence[float]) -> list[Self]:
        """Disjoint random shares of the records, one per entry of ``shares`` (positive, summing to 1).

        Costs nothing; the shares' spends compose in parallel (module docstring).

        >>> from streamdp.records.datasets import load
        >>> from streamdp.learners.private_data import PrivateDataset
        >>> ds = load("congressional-voting")
        >>> pds = PrivateDataset.from_records(ds.schema, ds.X, ds.y, epsilon=1.0)
        >>> a, b = pds.split([0.5, 0.5])
        >>> _ = a.noisy_count(1.0); _ = b.noisy_count(1.0)
        >>> pds.spent
        1.0
        """
        w = np.asarray(shares, dtype=np.float64)
        if w.ndim != 1 or w.size < 1 or not np.all(np.isfinite(w)) or np.any(w <= 0):
            raise ValueError(f"shares must be positive numbers, one per share, got {list(np.ravel(w))}")
        if not math.isclose(float(w.sum()), 1.0, rel_tol=1e-9):
            raise ValueError(f"shares must sum to 1, got {float(w.sum()):g}")
        X, y = self._rows()
        edges = np.cumsum(w)[:-1]
        which = np.searchsorted(edges, self._rng.uniform(y.size), side="right")
        parts = [
            cast(Any, type(self))(
                self.schema,
                X[which == i],
                y[which == i],
                epsilon=self.epsilon,
                rng=self._rng,
                records_per_unit=self.records_per_unit,
                _parent=self,
                _bounds=self._bounds,
                _path=self.path + (("share", i),),
            )
            for i in range(w.size)
        ]
        self._groups.append(parts)
        return parts

    def forest_release(self, forest: PrivateForest, epsilon: float) -> PrivateForest:
        """Fit the unfitted geometric ``forest`` on this part's records (one-shot, pruned), charged ``epsilon``.

        The forest must have been created at ``epsilon / K`` (:attr:`records_per_unit`), its noise per record;
        :class:`ValueError` otherwise, before anything is charged or read.
        """
        if forest.mechanism != "geometric":
            raise ValueError(f"forest_release fits geometric forests only, got mechanism={forest.mechanism!r}")
        if forest.n_releases:
            raise ValueError("forest_release needs an unfitted forest: this one holds a release")
        if forest.schema != self.schema:
            raise ValueError("the forest's schema differs from the private dataset's")
        if not math.isclose(forest.epsilon, self._noise_epsilon(epsilon), rel_tol=1e-12):
            raise ValueError(
                f"the forest was created at epsilon={forest.epsilon:g}, but epsilon={epsilon:g} with "
                f"{self.records_per_unit} records per person needs {self._noise_epsilon(epsilon):g}"
            )
        self._charge(epsilon, "forest_release")
        X, y = self._rows()
        return forest.fit_encoded(X, y, rng=self._rng)

    def most_accurate(self, predictors: Sequence[Callable[[np.ndarray], Any]], epsilon: float) -> int:
        """Index of a predictor drawn by the exponential mechanism on its correct count here (module docstring).

        Each predictor maps encoded records (``float64``, shape ``(n, attributes)``) to label codes, shape
        ``(n,)``; it must be a pure function (the layer passes a copy and uses only the correct count).
        Charged ``epsilon`` before any record is read.
        """
        if not predictors:
            raise ValueError("most_accurate needs at least one predictor")
        self._charge(epsilon, f"most_accurate({len(predictors)} candidates)")
        X, y = self._rows()
        scores = np.empty(len(predictors))
        for i, predict in enumerate(predictors):
            pred = np.asarray(predict(X.copy()))
            if pred.shape != y.shape:
                raise ValueError(f"predictor {i} returned shape {pred.shape}, expected {y.shape}")
            scores[i] = float(np.sum(pred == y))
        # monotone scores of sensitivity 1: exp(e q), which is exp(e q / (2 * 0.5)) in the shared sampler
        return exponential_mechanism(scores, self._noise_epsilon(epsilon), 0.5, self._rng)
