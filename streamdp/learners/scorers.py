"""Split quality functions of Friedman & Schuster, with their sensitivities.

A scorer maps class contingency tables ``tau`` of shape ``(..., k, C)``
(``k`` parts of a candidate split, ``C`` classes; counts as floats) to one
score per table (higher is better), vectorized over the leading axes.
``sensitivity(n_bound)`` bounds how much one added or removed record can
change a score when the node holds at most ``n_bound`` records; the
exponential mechanism divides by it. tests/test_scorers.py brute-forces
neighbouring tables and checks every bound.

>>> import numpy as np
>>> t = np.array([[8.0, 2.0], [1.0, 9.0]])
>>> round(float(MaxScorer()(t)), 6), round(float(GiniScorer()(t)), 6)
(17.0, -5.0)
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["Scorer", "InfoGainScorer", "GiniScorer", "MaxScorer", "get_scorer", "SCORERS"]


def _xlog2x(x: np.ndarray) -> np.ndarray:
    """``x * log2(x)`` with ``0 log 0 = 0``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x > 0, x * np.log2(np.where(x > 0, x, 1.0)), 0.0)


class Scorer:
    name = "scorer"

    def __call__(self, tau: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def sensitivity(self, n_bound: float) -> float:
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


SCORERS: dict[str, type[Scorer]] = {"infogain": InfoGainScorer, "gini": GiniScorer, "max": MaxScorer}


def get_scorer(name: str | Scorer) -> Scorer:
    if isinstance(name, Scorer):
        return name
    try:
        return SCORERS[name]()
    except (KeyError, TypeError):
        raise ValueError(f"unknown scorer {name!r}; choose one of {sorted(SCORERS)}") from None
