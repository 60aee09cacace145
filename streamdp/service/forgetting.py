"""Forgetting in the service: a ``window`` model with a half-life publishes decayed counts.

The pure rule is :mod:`streamdp.release.decay`; here the window closer (:mod:`.windows`) keeps its running
value. Each merged release ``t`` publishes ``C_t = lam_t * C_(t-1) + D_t`` over the released noisy deltas
``D_t`` (the ones stored SET NX before the merge), rounded to the counts' integers for the integer mechanisms.
The unrounded ``C_t`` (little-endian float64) and its noise variance live in the model's state (fields
``decayed`` and ``decayed_variance``), written in the release's own MULTI/EXEC with the version they belong to.

* ``lam_t``: :func:`streamdp.release.decay.decay_factor`; with ``half_life_unit="records"`` from the release's
  noisy record count, :func:`release_records` (a released value: the prior stumps' total where the model has
  them, whose noise does not grow with the trees' size).
* A release the adaptive cadence leaves out of the published estimate (:func:`streamdp.release.cadence.keeps`)
  is not merged, so it does not decay the counts either: ``lam = 1`` for it. A half-life in releases counts
  the merged releases (``n_releases``); idle windows neither add noise nor fade what the model learnt. With the
  fixed cadence (``cadence="fixed"``) every window is merged and decays.

Privacy (proof sketch): ``C_t`` is a function of the released deltas ``D_1..D_t`` and of public parameters
only (``lam_t`` of ``D_t`` itself, the merge decision of released totals): post-processing of an
``epsilon``-DP transcript, so no epsilon is spent and no ledger charged. Exact counts are never decayed or
read here. Exactly once: the base ``C_(t-1)`` is read with the version it belongs to (one HMGET of the state),
the delta is the stored draw, and the merge is the closer's CAS on that version: a retried or racing close
computes the same ``C_t`` from the same inputs, and only one is written, so no release decays twice. A Redis
rollback restores ``decayed`` with the version it was written with (the same hash).

>>> from streamdp.records.datasets import load
>>> from streamdp.forest.model import PrivateForest
>>> spec = PrivateForest.create(load("congressional-voting").schema, n_trees=1, height=1, seed=1)
>>> d = Decay(ReleasePolicy("window", half_life=1.0), spec)
>>> delta = np.zeros(spec.shape); delta[1, 0] = [5.0, 3.0]  # the stump's release: 8 noisy records
>>> b = d.fold(None, delta, 2.0)
>>> float(b.value.sum()), b.variance
(8.0, 2.0)
>>> b = d.fold(b, np.zeros(spec.shape), 2.0)
>>> float(b.value.sum()), b.variance, int(d.published(b, np.dtype(np.int64)).sum())
(4.0, 2.5, 4)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from streamdp.forest.model import PrivateForest
from streamdp.release.cadence import release_total
from streamdp.release.decay import decay_factor, released_records
from streamdp.release.policy import ReleasePolicy

__all__ = ["Decay", "Decayed", "release_records"]

#: The state fields of a decayed model's running value (float64 counts) and its noise variance per cell.
FIELDS = ("decayed", "decayed_variance")


def release_records(delta: np.ndarray, spec: PrivateForest) -> float:
    """A release's noisy record count from its delta (released values, floored at 0): with prior stumps their
    mean class total (:func:`streamdp.release.cadence.release_total`: the few cells that hold every record, so
    its noise is small whatever the trees' size; times the trees with the disjoint budget); without, the mean
    over the trees of their totals (:func:`streamdp.release.decay.released_records`).

    >>> from streamdp.records.datasets import load
    >>> spec = PrivateForest.create(load("congressional-voting").schema, n_trees=1, height=1, seed=1)
    >>> delta = np.zeros(spec.shape); delta[0] = 50.0; delta[1, 0] = [5.0, 3.0]
    >>> release_records(delta, spec)   # the stump's, not the noisier tree's total
    8.0
    """
    delta = np.asarray(delta)  # (only the stumps' cells are made float: no copy of a counts-sized delta)
    rows = spec.structure.n_trees
    if spec.prior_trees >= 1:
        return max(release_total(delta[spec.n_trees :, 0].astype(np.float64), spec.budget, rows), 0.0)
    n = released_records(delta)
    return n * rows if spec.budget == "disjoint" else n


@dataclass(frozen=True)
class Decayed:
    """The decayed counts ``value`` (float64) after ``version`` and the noise variance of one of its cells."""

    version: int
    value: np.ndarray
    variance: float


class Decay:
    """One decayed model's rule in the closer: read the base, fold in a release, the counts it publishes."""

    def __init__(self, policy: ReleasePolicy, spec: PrivateForest):
        if policy.half_life is None:
            raise ValueError(f"the policy has no half_life: {policy}")
        self.policy, self.spec = policy, spec
        self.cached: Decayed | None = None  # the last one this closer wrote

    def base(self, r: Any, state_key: str, version: int, shape: tuple) -> Decayed | None:
        """The decayed counts the model holds at ``version`` (version 0: none yet); None if the state has moved on
        (released meanwhile: the caller looks again)."""
        if version == 0:
            return None
        if self.cached is not None and self.cached.version == version:
            return self.cached
        v, raw, var = r.hmget(state_key, "version", *FIELDS)
        if int(v or 0) != version:
            return None
        if raw is None or var is None:
            raise RuntimeError(f"a decayed model's state at version {version} holds no decayed counts: corrupted state")
        value = np.frombuffer(raw, dtype="<f8")
        if value.size != int(np.prod(shape)):
            raise RuntimeError(f"the stored decayed counts have {value.size} cells, the model {shape}: corrupted state")
        return Decayed(version, value.reshape(shape).astype(np.float64), float(var))

    def fold(self, base: Decayed | None, delta: np.ndarray, variance: float) -> Decayed:
        """``lam_t * C_(t-1) + D_t`` (``base`` None: the first merged release, ``C_1 = D_1``) and its noise variance
        ``lam_t**2 V_(t-1) + v`` (``variance``: one delta's per cell)."""
        delta = np.asarray(delta, dtype=np.float64)
        lam = decay_factor(self.policy, release_records(delta, self.spec))
        if base is None:
            return Decayed(1, delta.copy(), float(variance))
        return Decayed(base.version + 1, lam * base.value + delta, lam * lam * base.variance + float(variance))

    def published(self, d: Decayed, dtype: np.dtype) -> np.ndarray:
        """The counts published from ``d``: rounded to integers for the integer mechanisms (post-processing)."""
        return np.rint(d.value).astype(dtype) if dtype.kind in "iu" else d.value.astype(dtype)

    @staticmethod
    def fields(d: Decayed) -> dict[str, Any]:
        """The state fields holding ``d`` (written in the release's MULTI/EXEC)."""
        return {FIELDS[0]: np.ascontiguousarray(d.value, dtype="<f8").tobytes(), FIELDS[1]: repr(d.variance)}
