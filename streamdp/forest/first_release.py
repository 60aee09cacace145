"""Thresholds where the data is, in a stream: drawn from the trees' first release, then fixed.

A stream's trees are drawn before any record (:meth:`streamdp.PrivateForest.create`), so their numeric
thresholds are uniform over the declared ranges (or follow declared ``quantiles``). With ``threshold_share``
``s > 0`` the trees' first release (the one-shot :meth:`~streamdp.PrivateForest.fit`, or the first
:meth:`~streamdp.PrivateForest.update` / :meth:`~streamdp.PrivateForest.grow` of a fresh forest, or the river
classifier's first release of its trees) does what the fit does: it spends ``s * epsilon`` of its records on the
numeric attributes' noisy histograms (:func:`streamdp.forest.marginals.noisy_marginals`), redraws every numeric
threshold from them keeping the trees' shape (:mod:`streamdp.forest.thresholds`), and releases its counts on the
redrawn trees at ``(1 - s) * epsilon``. After it the structure is fixed: every later release tallies other
records into the same trees (or a pruning of them, :mod:`streamdp.forest.growth`) with the whole ``epsilon``.

Privacy (proof sketch; the unit is one record, DESIGN.md's contract). The stream is cut into disjoint batches
``B_1, B_2, ...`` whose bounds are public (a function of the release number, the clock, or released values:
ALGORITHMS.md section 10); release ``R_k`` reads ``B_k`` and the earlier releases only.

* ``R_1 = (H, C_1)``: ``H`` is ``s * epsilon``-DP with respect to ``B_1`` (:mod:`streamdp.forest.marginals`:
  one record moves each of the ``d`` histograms by 1, each noised at ``s * epsilon / d``). The thresholds are
  a function of ``H`` and public randomness (post-processing). Given ``H``, ``C_1`` is ``B_1``'s tally on those
  trees noised at ``(1 - s) * epsilon`` (per tree as the budget shares it; a pruned first release spends its
  probe inside that budget): ``(1 - s) * epsilon``-DP. By adaptive sequential composition ``R_1`` is
  ``epsilon``-DP with respect to ``B_1``.
* ``R_k``, ``k >= 2``: ``B_k``'s tally on trees fixed by ``R_1`` (cut from them by released numbers only, when
  growing) noised with the whole ``epsilon``: given ``R_1 .. R_{k-1}``, ``epsilon``-DP with respect to ``B_k``,
  and it reads no other batch.
* Neighbouring streams differ in one record ``r`` in one batch ``B_j``. Given the same history the batch
  bounds agree; the releases before ``j`` have the same distribution, ``R_j``'s likelihood ratio is at most
  ``e**epsilon``, and every release after ``j`` reads the same batch and the same history, so its conditional
  distribution is the same. The transcript is ``epsilon``-DP (adaptive parallel composition): each record pays
  ``epsilon`` once, in its own release (``s * epsilon + (1 - s) * epsilon`` in the first, ``epsilon`` in any
  other). Keeping later releases at ``(1 - s) * epsilon`` would buy nothing: the histograms read ``B_1`` alone.
* The split is fixed before any record is read: ``s``, ``epsilon`` and which release is the first (the release
  number) are public parameters, and so is whether a stream spends a share at all (:func:`stream_share`: the
  schedule's size, never the batch's), so a ledger charges ``epsilon`` for the stream as it does without one.
  With a privacy unit of ``K`` records per person (ALGORITHMS.md section 12) each record costs ``epsilon / K``
  in its release by the same accounting.

:class:`FirstRelease` is the part of :class:`~streamdp.forest.model.PrivateForest` that draws them; its
:meth:`~FirstRelease.first_release` wraps the one release that spends the share.

>>> import numpy as np
>>> from streamdp import PrivateForest, Schema
>>> s = Schema.from_dict({"attributes": [{"name": "x", "type": "numeric", "min": 0, "max": 100}],
...                       "label": {"name": "y", "values": [0, 1]}})
>>> f = PrivateForest.create(s, n_trees=4, height=3, epsilon=2.0, threshold_share=0.25)
>>> X = np.full((500, 1), 41.0)
>>> _ = f.update_encoded(X, np.zeros(500, dtype=np.int64))  # the first release: 0.5 on histograms, 1.5 on counts
>>> f.threshold_spent, f.epsilon_per_tree * f.n_released_trees  # the next releases: the whole epsilon
(0.25, 2.0)
>>> t = f.structure.threshold[0, 0]
>>> _ = f.update_encoded(X, np.ones(500, dtype=np.int64))
>>> bool(f.structure.threshold[0, 0] == t)  # fixed after the first release
True
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from streamdp.estimation.rule import cell_variance
from streamdp.forest.marginals import HISTOGRAM_BINS, Marginals, noisy_marginals
from streamdp.forest.structure import ForestStructure
from streamdp.forest.thresholds import default_threshold_share
from streamdp.privacy.mechanisms import SecureRandom
from streamdp.records.schema import Schema

__all__ = ["FirstRelease", "released_variance", "stream_share"]


def stream_share(schema: Schema, epsilon: float, mechanism: str, share: float | None, first_records: int) -> float:
    """The threshold share of a stream model whose trees' first release has ``first_records`` records by its
    public schedule: ``share`` when given; by default (None) :func:`~streamdp.forest.thresholds.default_threshold_share`
    if those records, spread evenly over the :data:`~streamdp.forest.marginals.HISTOGRAM_BINS` bins, would fill a
    bin to the histograms' noise scale (``d / (share * epsilon)``, :mod:`streamdp.forest.marginals`), else 0: a
    histogram the noise swamps draws no better thresholds and costs the first release's counts the share. A
    function of public parameters only (the schedule's size, not the records').

    >>> from streamdp.river.schemas import bananas_schema
    >>> stream_share(bananas_schema(), 2.0, "geometric", None, 100), stream_share(bananas_schema(), 1.0, "geometric", None, 100)
    (0.2, 0.0)
    """
    if share is not None:
        return float(share)
    s = default_threshold_share(schema, mechanism)
    d = int((~schema.is_categorical).sum())
    return s if s and first_records / HISTOGRAM_BINS >= d / (s * epsilon) else 0.0


def released_variance(
    mechanism: str, epsilon: float, threshold_spent: float, n_trees: int, budget: str, releases: int
) -> float:
    """The noise variance on a cell after ``releases`` fixed-structure releases of a forest whose first release
    spent ``threshold_spent`` of ``epsilon`` on thresholds before this rule (its later releases did too): what a
    blob that stored no variance carries (:func:`streamdp.forest.persistence.from_doc`).

    >>> released_variance("geometric", 1.0, 0.0, 2, "split", 2) == 2 * cell_variance("geometric", 0.5)
    True
    """
    counts = epsilon * (1.0 - threshold_spent)
    return releases * cell_variance(mechanism, counts / n_trees if budget == "split" else counts)


class FirstRelease:
    """The trees' first release, which may redraw the numeric thresholds, for a
    :class:`~streamdp.forest.model.PrivateForest` (a mixin; module docstring)."""

    if TYPE_CHECKING:  # what the forest provides
        schema: Schema
        structure: ForestStructure
        drawn: ForestStructure
        n_releases: int
        threshold_share: float
        threshold_spent: float
        marginals: Marginals | None
        _rng: SecureRandom

        @property
        def epsilon(self) -> float: ...
        @property
        def cell_variance(self) -> float: ...
        def merge(self, delta: np.ndarray, releases: int = 1, variance: Any = None) -> Self: ...
        def noisy_delta_encoded(self, X: np.ndarray, y: np.ndarray, rng: SecureRandom | None = None) -> np.ndarray: ...
        def _checked(self, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    #: Share of epsilon the counts of the release in progress get (``1 - threshold_share`` inside
    #: :meth:`first_release` when it draws, else 1); a class default, so forests pickled before it have it.
    _counts_share: float = 1.0

    @property
    def thresholds_due(self) -> bool:
        """Whether the next :meth:`update` or :meth:`grow` is the trees' first release and spends the share:
        a share, finite epsilon, nothing released yet (public facts)."""
        return bool(self.threshold_share) and not math.isinf(self.epsilon) and self.n_releases == 0

    @contextlib.contextmanager
    def first_release(
        self, X: np.ndarray, y: np.ndarray, rng: SecureRandom | None = None, due: bool | None = None
    ) -> Iterator[bool]:
        """Wrap one release of the encoded records ``(X, y)``; when it is the trees' first (``due``, default
        :attr:`thresholds_due`) and the forest has a share, spend ``threshold_share * epsilon`` on their noisy
        histograms and redraw the numeric thresholds of the drawn trees first (the same trees: attributes,
        children and leaves kept), and give the counts released inside the block the rest. Yields whether
        it drew. A caller that releases the trees after other releases (the river classifier's prior phase)
        passes ``due`` from its own public count of the trees' releases."""
        draw = (self.thresholds_due if due is None else due) and self.threshold_share > 0
        if not draw or math.isinf(self.epsilon):
            yield False
            return
        X, _ = self._checked(X, y)
        rng = rng or self._rng
        self.marginals = noisy_marginals(X, self.schema, self.threshold_share * self.epsilon, rng)
        # the draw's randomness is public (so are the thresholds): fresh, but a seeded (test) source's for repeatability
        seed = None if rng.private else int.from_bytes(rng.random_bytes(16), "little")
        self.drawn = self.structure = self.drawn.with_thresholds(self.schema, self.marginals, seed)
        self.threshold_spent = self.threshold_share
        self._counts_share = 1.0 - self.threshold_share
        try:
            yield True
        finally:
            self._counts_share = 1.0

    def _fixed_release(self, X: np.ndarray, y: np.ndarray, rng: SecureRandom | None = None) -> Self:
        """One release added to the trees as they are (:meth:`update` on drawn trees), the first one spending
        the share; its noise variance is recorded (a first release's differs from the later ones')."""
        with self.first_release(X, y, rng) as first:
            delta = self.noisy_delta_encoded(X, y, rng)
            return self.merge(delta, variance=self.cell_variance if first else None)
