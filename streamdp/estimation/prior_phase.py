"""The prior phase's schedule: how many records each of a river classifier's first releases holds.

Those releases carry class totals alone, in batches doubling from a first size set by the noise, so a
classifier predicts a measured prior early (public: a function of the mechanism and the release count).
"""

from __future__ import annotations

import math

__all__ = ["prior_phase_first", "prior_phase_size"]


def prior_phase_first(variance: float) -> int:
    """Records of a prior phase's first release: twice the noise sd of a difference of two noisy class totals,
    ``ceil(2 sqrt(2 v))`` for ``v`` one class total's noise variance, so that even the first noisy prior mostly
    names the class of a pure batch (public: from the mechanism's parameters).

    >>> from streamdp.estimation.rule import cell_variance
    >>> prior_phase_first(cell_variance("geometric", 1.0))
    4
    """
    return max(1, math.ceil(2.0 * math.sqrt(2.0 * variance)))


def prior_phase_size(k: int, first: int, total: int) -> int:
    """Records of release ``k`` (from 0) of a prior phase of ``total`` records: ``first * 2**k``, the last one cut
    to end the phase, 0 once it is over (public: a function of the release count). The river classifiers' first
    records are released as class totals alone on this schedule, so they predict a measured prior early.

    >>> [prior_phase_size(k, 4, 100) for k in range(6)]
    [4, 8, 16, 32, 40, 0]
    """
    done = min(first * ((1 << min(k, 62)) - 1), total)
    return min(first << min(k, 62), total - done)
