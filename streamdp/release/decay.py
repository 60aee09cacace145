"""Forgetting for drifting streams: exponentially decayed counts from the released window deltas.

With a half-life ``H`` the published counts are ``C_t = lam_t * C_(t-1) + D_t`` over the released
noisy deltas ``D_t`` of ``release="window"``: records older than a few half-lives fade, which is what
a drifting concept needs, and the noise stops growing.

* ``half_life_unit="releases"``: ``lam = 0.5 ** (1 / H)`` per release.
* ``half_life_unit="records"``: ``lam_t = 0.5 ** (max(n_t, 1) / H)``, ``n_t`` the release's noisy record
  count (:func:`released_records`, a released value): a release counts as at least one record, so
  ``lam_t <= 0.5 ** (1 / H)`` and idle releases still fade.

Privacy: a function of released deltas only (post-processing): no epsilon, no ledger charge.
Noise: the deltas' noises are independent with variance ``v`` per cell, so
``Var C_t = sum_k v * prod lam^2 <= v / (1 - lam_max**2)`` for every ``t``: bounded forever
(:func:`variance_bound`; :func:`decayed_variance` is the exact value for a run of factors).

>>> d = DecayedCounts(ReleasePolicy("window", half_life=1.0))
>>> d.update(np.array([8.0])).tolist(), d.update(np.array([0.0])).tolist()
([8.0], [4.0])
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from streamdp.release.policy import ReleasePolicy

__all__ = [
    "decay_factor",
    "max_decay_factor",
    "variance_bound",
    "decayed_variance",
    "released_records",
    "DecayedCounts",
]


def _check(policy: ReleasePolicy) -> float:
    if policy.half_life is None:
        raise ValueError(f"the policy has no half_life (no forgetting): {policy}")
    return policy.half_life


def decay_factor(policy: ReleasePolicy, records: float | None = None) -> float:
    """The factor ``lam`` the counts are multiplied by before a release's delta is added.

    ``records``: the release's noisy record count (``half_life_unit="records"`` only; a released value).

    >>> round(decay_factor(ReleasePolicy("window", half_life=2.0)), 4)
    0.7071
    >>> decay_factor(ReleasePolicy("window", half_life=10.0, half_life_unit="records"), records=20.0)
    0.25
    """
    h = _check(policy)
    if policy.half_life_unit == "releases":
        return 0.5 ** (1.0 / h)
    if records is None:
        raise ValueError("half_life_unit='records' needs each release's noisy record count")
    return 0.5 ** (max(float(records), 1.0) / h)


def max_decay_factor(policy: ReleasePolicy) -> float:
    """The largest factor any release can have (``0.5 ** (1 / H)`` in either unit)."""
    return 0.5 ** (1.0 / _check(policy))


def variance_bound(policy: ReleasePolicy, variance: float) -> float:
    """``v / (1 - lam_max**2)``: no decayed cell's noise variance ever exceeds it (``variance`` = ``v``, one delta's).

    >>> round(variance_bound(ReleasePolicy("window", half_life=1.0), 3.0), 6)
    4.0
    """
    lam = max_decay_factor(policy)
    return variance / (1.0 - lam * lam)


def decayed_variance(factors: Iterable[float], variance: float) -> float:
    """Exact noise variance of a decayed cell after releases with these factors (oldest first; the first
    release's factor multiplies nothing): ``V_t = lam_t**2 V_(t-1) + v``."""
    v = 0.0
    for lam in factors:
        v = lam * lam * v + variance
    return v


def released_records(delta: np.ndarray) -> float:
    """A release's noisy record count from its delta: each tree (axis 0) counts every record once, so the
    mean over trees of their totals, floored at 0 (post-processing of released values)."""
    delta = np.asarray(delta)  # (summed as float64 where it lies: no float copy of a counts-sized delta)
    if delta.ndim == 0:
        return max(float(delta), 0.0)
    return max(float(delta.reshape(delta.shape[0], -1).sum(axis=1, dtype=np.float64).mean()), 0.0)


class DecayedCounts:
    """The decayed counts of a ``window`` model with a half-life, updated release by release (float)."""

    def __init__(self, policy: ReleasePolicy):
        _check(policy)
        self.policy = policy
        self.counts: np.ndarray | None = None
        self.factors: list[float] = []

    def update(self, delta: np.ndarray, records: float | None = None) -> np.ndarray:
        """Fold in one release's noisy delta (``records``: its noisy record count, default
        :func:`released_records` of the delta); returns the decayed counts."""
        delta = np.asarray(delta, dtype=np.float64)
        if self.policy.half_life_unit == "records" and records is None:
            records = released_records(delta)
        lam = decay_factor(self.policy, records)
        self.factors.append(lam)
        self.counts = delta.copy() if self.counts is None else lam * self.counts + delta
        return self.counts

    def variance(self, variance: float) -> float:
        """Noise variance of one decayed cell now (``variance``: one delta's)."""
        return decayed_variance(self.factors, variance)
