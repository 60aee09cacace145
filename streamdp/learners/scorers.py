"""Split quality functions of Friedman & Schuster, with their sensitivities.

A scorer maps class contingency tables ``tau`` of shape ``(..., k, C)``
(``k`` parts of a candidate split, ``C`` classes; counts as floats) to one
score per table (higher is better), vectorized over the leading axes.
``sensitivity(n_bound)`` bounds how much one added or removed record can
change a score when the node holds at most ``n_bound`` records; the
exponential mechanism divides by it. tests/learners/test_scorers.py brute-forces
neighbouring tables and checks every bound.

>>> import numpy as np
>>> t = np.array([[8.0, 2.0], [1.0, 9.0]])
>>> round(float(MaxScorer()(t)), 6), round(float(GiniScorer()(t)), 6)
(17.0, -5.0)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from streamdp.validation import check_integer

__all__ = [
    "Scorer",
    "InfoGainScorer",
    "GiniScorer",
    "MaxScorer",
    "GainRatioScorer",
    "get_scorer",
    "checked_scorer",
    "record_bound",
    "SCORERS",
]


def _xlog2x(x: np.ndarray) -> np.ndarray:
    """``x * log2(x)`` with ``0 log 0 = 0``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x > 0, x * np.log2(np.where(x > 0, x, 1.0)), 0.0)


class Scorer:
    """A split quality for the exponential mechanism: a score per candidate and a bound on how far one record
    moves it.

    ``scorer(tau)`` takes contingency tables ``tau`` of shape ``(..., values, classes)`` (exact counts, seen
    only inside the data layer) and returns one score per table, higher is better; ``sensitivity(n_bound)``
    bounds the change of that score when one record is added or removed, for nodes of at most ``n_bound``
    records. The mechanism's privacy rests on that bound, which the tests brute-force.
    """

    name = "scorer"

    def __call__(self, tau: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def sensitivity(self, n_bound: float) -> float:
        """The most one record moves a score, at nodes of at most ``n_bound`` records."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class InfoGainScorer(Scorer):
    """``q = -sum_j sum_c tau_jc log2(tau_jc / tau_j)`` (minus N times the conditional entropy).

    Sensitivity ``log2(N + 1) + 1/ln 2`` for nodes of at most ``N`` records.
    """

    name = "infogain"

    def __call__(self, tau: np.ndarray) -> np.ndarray:
        tau = np.asarray(tau, dtype=np.float64)
        tj = tau.sum(axis=-1)
        return (_xlog2x(tau).sum(axis=-1) - _xlog2x(tj)).sum(axis=-1)

    def sensitivity(self, n_bound: float) -> float:
        return math.log2(n_bound + 1) + 1 / math.log(2)


class GiniScorer(Scorer):
    """``q = -sum_j tau_j (1 - sum_c (tau_jc / tau_j)^2)``; sensitivity 2."""

    name = "gini"

    def __call__(self, tau: np.ndarray) -> np.ndarray:
        tau = np.asarray(tau, dtype=np.float64)
        tj = tau.sum(axis=-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            sq = np.where(tj > 0, (tau**2).sum(axis=-1) / np.where(tj > 0, tj, 1.0), 0.0)
        return -(tj - sq).sum(axis=-1)

    def sensitivity(self, n_bound: float) -> float:
        return 2.0


class MaxScorer(Scorer):
    """``q = sum_j max_c tau_jc`` (records a majority vote per part gets right); sensitivity 1."""

    name = "max"

    def __call__(self, tau: np.ndarray) -> np.ndarray:
        return np.asarray(tau, dtype=np.float64).max(axis=-1).sum(axis=-1)

    def sensitivity(self, n_bound: float) -> float:
        return 1.0


class GainRatioScorer(Scorer):
    """Gain ratio: information gain (in records x bits) over the split information (bits), floored at 1.

    ``q = IG / max(SI, 1)`` with ``IG = N H(C) - N H(C|A)`` and ``SI = H(A)``,
    the entropy of the candidate's value distribution. Flooring ``SI`` at one
    bit is what keeps the score stable: C4.5's raw ratio explodes when one
    value holds almost every record, and so does its sensitivity.

    Sensitivity sketch, with ``L = log2(N + 1) + 1/ln 2`` (one record moves
    ``x log2 x`` sums by at most ``L``): ``|dIG| <= 2L`` (the two entropy
    terms of the infogain scorer); ``N SI`` moves by at most ``L`` and
    ``SI <= log2 k``, so ``|dSI| <= (L + log2 k) / M`` for ``M`` the larger
    record count; with ``D = max(SI, 1) >= 1``,
    ``|q - q'| <= |dIG| / D' + IG |1/D - 1/D'| <= 2L + M log2|C| (L + log2 k) / M``.
    Hence ``S = 2L + log2|C| (L + log2 k)`` for ``k`` the largest arity; the
    scorer needs both numbers (they are public: the schema's).
    """

    name = "gainratio"

    def __init__(self, n_classes: int, max_arity: int):
        if n_classes < 2 or max_arity < 2:
            raise ValueError(f"gainratio needs n_classes >= 2 and max_arity >= 2, got {n_classes}, {max_arity}")
        self.n_classes = int(n_classes)
        self.max_arity = int(max_arity)

    def __call__(self, tau: np.ndarray) -> np.ndarray:
        tau = np.asarray(tau, dtype=np.float64)
        tj = tau.sum(axis=-1)  # (..., k)
        tc = tau.sum(axis=-2)  # (..., C)
        n = tj.sum(axis=-1)
        n_h_c = _xlog2x(n) - _xlog2x(tc).sum(axis=-1)
        n_h_c_given_a = (_xlog2x(tj) - _xlog2x(tau).sum(axis=-1)).sum(axis=-1)
        ig = n_h_c - n_h_c_given_a
        with np.errstate(divide="ignore", invalid="ignore"):
            si = np.where(n > 0, (_xlog2x(n) - _xlog2x(tj).sum(axis=-1)) / np.where(n > 0, n, 1.0), 0.0)
        return ig / np.maximum(si, 1.0)

    def sensitivity(self, n_bound: float) -> float:
        L = math.log2(n_bound + 1) + 1 / math.log(2)
        return 2 * L + math.log2(self.n_classes) * (L + math.log2(self.max_arity))

    def __repr__(self) -> str:
        return f"GainRatioScorer(n_classes={self.n_classes}, max_arity={self.max_arity})"


SCORERS: dict[str, type[Scorer]] = {
    "infogain": InfoGainScorer,
    "gini": GiniScorer,
    "max": MaxScorer,
    "gainratio": GainRatioScorer,
}


def get_scorer(name: str | Scorer, schema=None) -> Scorer:
    """A scorer by name; "gainratio" needs the schema (its sensitivity depends on |C| and the largest arity)."""
    if isinstance(name, Scorer):
        return name
    if name == "gainratio":
        if schema is None:
            raise ValueError(
                "scorer 'gainratio' needs the schema (its sensitivity depends on the class count and the largest arity)"
            )
        arities = [int(a) for a in schema.arities if a > 0] + [2]
        return GainRatioScorer(max(schema.n_classes, 2), max(arities))
    try:
        return SCORERS[name]()
    except (KeyError, TypeError):
        raise ValueError(f"unknown scorer {name!r}; choose one of {sorted(SCORERS)}") from None


def checked_scorer(name: Any, n_bound: Any, schema=None) -> Scorer:
    """A learner's ``scorer`` and ``n_bound`` parameters validated; the scorer they name.

    ``n_bound`` is None or a positive integer: the most records a split's
    scores may use (enforced by the data layer, see :func:`record_bound`).
    """
    if n_bound is not None:
        check_integer(n_bound, "n_bound (a public bound on the record count)")
    if not isinstance(name, str):
        raise ValueError(f"scorer must be a scorer name (str), got {type(name).__name__}")
    return get_scorer(name, schema)  # raises ValueError naming the choices


def record_bound(scorer: Scorer, n_bound: int | None, noisy_root_count: float, epsilon: float) -> int | None:
    """The record bound the data layer enforces on a learner's split scores (None: the scorer needs none).

    Scorers whose sensitivity grows with the record count (InfoGain,
    GainRatio) get ``n_bound`` when the user gave one, else the root's
    released noisy count (geometric noise with ``epsilon``) plus a margin
    that the noise exceeds with probability below 1e-6: post-processing of a
    released value, no extra budget. Either way the layer computes the
    scores on at most that many records (a uniform subset when a node holds
    more) with twice the scorer's sensitivity at the bound, so the bound
    holds by construction; a bound below the true count only costs accuracy.

    >>> record_bound(InfoGainScorer(), None, 1000.4, 0.1)
    1139
    >>> record_bound(GiniScorer(), None, 1000.4, 0.1) is None
    True
    """
    if math.isfinite(scorer.sensitivity(math.inf)):
        return None
    if n_bound is not None:
        return int(n_bound)
    return max(1, math.ceil(noisy_root_count + math.log(1e6) / epsilon))
