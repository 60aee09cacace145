"""The class prior a river forest classifier measures and falls back to.

The prior phase releases a stream's first records to the prior stumps alone, on a public schedule; every
release's stump totals are pooled by :func:`streamdp.estimation.release_prior`; and the optional guard
releases each batch's noisy advantage of the forest over that prior, so the model votes with the prior
while the forest does no better. All of it reads released numbers or public schedules only.
"""

from __future__ import annotations

import collections
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from streamdp.estimation.prior import release_prior
from streamdp.estimation.prior_phase import prior_phase_first, prior_phase_size
from streamdp.estimation.rule import cell_variance
from streamdp.forest.model import PrivateForest
from streamdp.options import VOTES
from streamdp.river.encoding import RecordEncoder
from streamdp.river.forest_view import ForestView
from streamdp.validation import check_choice

__all__ = ["PriorVote", "PRIOR_CLEAR", "PRIOR_LOSS"]

#: The prior phase goes on while the released prior's top-two margin is within this many noise sds ...
PRIOR_CLEAR = 2.0
#: ... and a wrong majority could cost more than this share of accuracy (:meth:`PriorVote._prior_unsettled`).
PRIOR_LOSS = 0.02


class PriorVote:
    """The prior phase, the pooled class prior and the guard of :class:`~streamdp.river.PrivateForestClassifier`
    (a mixin)."""

    @property
    def vote(self) -> str:
        """How the trees combine: ``"proba"`` or ``"majority"`` (:data:`streamdp.options.VOTES`; the one-record
        paths implement these, not the library forest's ``"trees"``); another value raises ``ValueError``."""
        return self._vote

    @vote.setter
    def vote(self, value: str) -> None:
        if value == "trees":
            raise ValueError(
                "vote='trees' is the library forest's (PrivateForest); the river classifier's one-record paths "
                "take 'proba' or 'majority'"
            )
        check_choice(value, "vote", VOTES)
        self._vote = value

    if TYPE_CHECKING:  # what the classifier provides
        forest: PrivateForest
        encoder: RecordEncoder
        epsilon: float
        first_batch: int
        prior_records: int | None
        guard: float
        window: int | None
        _n_prior_releases: int
        _guard_log: collections.deque
        _view: ForestView

    @property
    def n_prior_records(self) -> int:
        """Records of the prior phase: ``prior_records``, or ``first_batch`` when None and the forest has stumps."""
        if not self.forest.prior_trees:
            return 0
        return self.first_batch if self.prior_records is None else self.prior_records

    @property
    def prior_first(self) -> int:
        """Records of the prior phase's first release (:func:`streamdp.estimation.prior_phase_first` of one stump
        cell's variance at ``epsilon / prior_trees``)."""
        f = self.forest
        if not f.prior_trees:
            return 1
        return prior_phase_first(cell_variance(f.mechanism, self.epsilon / f.prior_trees))

    @property
    def in_prior_phase(self) -> bool:
        """Whether the open batch goes to the prior stumps alone (public: a function of the released values)."""
        k = self._n_prior_releases
        return prior_phase_size(k, self.prior_first, self.n_prior_records) > 0 or self._prior_unsettled(k)

    def _prior_unsettled(self, k: int) -> bool:
        """Whether the prior phase goes on past :attr:`n_prior_records`: its ``k`` releases (released totals, public
        sizes and noise variances) neither name the majority class clearly (top-two margin over ``PRIOR_CLEAR``
        noise sds ``s``) nor make a wrong name cheap (a wrong majority costs at most about ``0.17 s / N`` of accuracy
        on ``N`` records, the maximum over margins ``m`` of ``m P(noise > m)``; the phase ends once that is at most
        ``PRIOR_LOSS``). Post-processing of released values: a schedule on them is still one release per record.
        Why: a small epsilon's first records give a prior that may name a minority class, and a forest falling
        back to it would predict that class for every record."""
        log = self.__dict__.get("_prior_log")
        if not k or not self.n_prior_records or self.window is not None or log is None or len(log) < k:
            return False
        totals = np.sum([t for t, _, _ in list(log)[:k]], axis=0)
        n = sum(size for _, size, _ in list(log)[:k])
        sd = math.sqrt(2.0 * sum(v for _, _, v in list(log)[:k]))  # the noise of a difference of two class totals
        top = np.sort(totals)[::-1]
        margin = float(top[0] - top[1]) if top.size > 1 else math.inf
        return margin <= PRIOR_CLEAR * sd and 0.17 * sd > PRIOR_LOSS * n

    def _guard_release(self, X: np.ndarray, y: np.ndarray) -> None:
        """Release this batch's noisy advantage of the forest over the prior (the ``guard`` parameter)."""
        if not self.guard:
            return
        right = int((self._view.predict_proba_encoded(X).argmax(axis=1) == y).sum())
        prior_right = int((y == int(np.argmax(self.forest.prior()))).sum())
        self._guard_log.append(self.forest.noisy_statistic(right - prior_right, self.epsilon * self.guard))
        if self.window is not None and len(self._guard_log) > self.window:
            self._guard_log.popleft()

    @property
    def forest_votes(self) -> bool:
        """Whether the forest predicts (else the class prior): the released advantages sum above 0 (``guard``)."""
        return not self.guard or not self._guard_log or sum(self._guard_log) > 0

    def _log_prior(self, stumps: np.ndarray, var: float, n: int | None) -> None:
        """Keep this release's stump totals ``(prior_trees, C)``, size and noise (``var``: one stump cell's
        noise variance; public numbers) and set the forest's class prior from the kept releases
        (:func:`streamdp.estimation.release_prior`; the last ``window`` under a window)."""
        f = self.forest
        P = f.prior_trees
        if not P:
            return
        totals = np.asarray(stumps, dtype=np.float64).mean(axis=0)
        # a full batch's size is the schedule's (public); a flushed partial batch's (n None), its noisy total
        size = float(n) if n is not None else max(1.0, float(totals.sum()))
        log = self.__dict__.setdefault("_prior_log", collections.deque())
        log.append((totals, size, var / P))
        if self.window is not None and len(log) > self.window:
            log.popleft()
        t, sz, v = (np.array(c) for c in zip(*log))
        f.class_prior = release_prior(t, sz, v)

    def _prior_vote(self) -> tuple[dict, Any]:
        """The class prior as river's probabilities and its most probable label (first on ties), per release."""
        got = self.__dict__.get("_prior_of")
        key = (self.forest.version, self.forest.class_prior)  # a growing model's prior phase moves the prior alone
        if got is None or got[0] != key[0] or got[3] is not key[1]:
            p = self.forest.prior()
            got = self._prior_of = (
                self.forest.version,
                dict(zip(self.encoder.label_values, p.tolist())),
                self.encoder.label_values[int(np.argmax(p))],
                self.forest.class_prior,
            )
        return got[1], got[2]
