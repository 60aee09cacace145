"""One-record copies of the rule in plain Python: what the river classifiers (and the C kernel beside
them, which must give the same floats) run per record, without numpy's per-call cost.

Each is tested equal, float for float, to the array rule of :mod:`streamdp.estimation.rule`.
"""

from __future__ import annotations

import math

from streamdp.estimation.rule import MIN_WEIGHT, PRIOR_WEIGHT, SNR_MIN, seq_sum

__all__ = ["shrink_one", "path_proba_one"]


def shrink_one(y: list, var_total: float, parent_p: list, snr_min: float | None = None) -> list:
    """:func:`shrink` for one node, in plain Python (the one-record path of the river classifiers).

    >>> import numpy as np
    >>> from streamdp.estimation.rule import shrink
    >>> shrink_one([68.0, 2.0], 0.0, [0.7, 0.3]) == shrink(np.array([[68.0, 2.0]]), np.zeros(1), np.array([0.7, 0.3]))[0].tolist()
    True
    """
    tot = seq_sum(y)
    v = var_total if var_total > 0 else 0.0
    if not (tot > 0 and tot >= (SNR_MIN if snr_min is None else snr_min) * math.sqrt(v)):
        return parent_p
    a = PRIOR_WEIGHT * v / (tot if tot > 1.0 else 1.0) + MIN_WEIGHT
    den = tot + a
    q = [(yc + a * pc) / den for yc, pc in zip(y, parent_p)]
    if min(q) < 0:
        q = [x if x > 0 else 0.0 for x in q]
    s = seq_sum(q)
    return [x / s for x in q] if s > 0 else parent_p


def path_proba_one(pooled: list, prior: list) -> list:
    """:meth:`ForestNodes.path_proba` for one record, from the sum of its leaves' :meth:`ForestNodes.path_rows`.

    ``pooled`` holds, depth by depth from depth 1 (the river path; or from the
    root, with ``prior`` the estimate above it), the record's pooled class counts
    then their pooled total variance (``C + 1`` numbers per depth). A depth whose
    numbers equal the depth above's is skipped; the first given is always weighed.
    """
    C = len(prior)
    if C == 2:
        return _path_proba_two(pooled, prior)
    p = prior
    for d in range(0, len(pooled), C + 1):
        if d and pooled[d : d + C + 1] == pooled[d - C - 1 : d]:
            continue  # the same counts and variance as one level up: nothing new to weigh
        p = shrink_one(pooled[d : d + C], pooled[d + C], p)
    return p


def _path_proba_two(pooled: list, prior: list) -> list:
    """:func:`path_proba_one` for two classes: :func:`shrink_one`'s steps unrolled, the same operations
    in the same order (so the same floats), without a list per step: the river loop's binary streams are
    the common case. Tested equal to the general loop."""
    p0, p1 = prior
    bar, sqrt = SNR_MIN, math.sqrt
    it = iter(pooled)
    last = None
    for y0, y1, v in zip(it, it, it):
        if last == (y0, y1, v):
            continue  # the same pool as one level up: nothing new to weigh
        last = (y0, y1, v)
        tot = y0 + y1
        if not v > 0:
            v = 0.0
        if not (tot > 0 and tot >= bar * sqrt(v)):
            continue  # not informative: the parent's estimate
        a = PRIOR_WEIGHT * v / (tot if tot > 1.0 else 1.0) + MIN_WEIGHT
        den = tot + a
        q0 = (y0 + a * p0) / den
        q1 = (y1 + a * p1) / den
        if q0 < 0 or q1 < 0:
            q0 = q0 if q0 > 0 else 0.0
            q1 = q1 if q1 > 0 else 0.0
        s = q0 + q1
        if s > 0:
            p0, p1 = q0 / s, q1 / s
    return [p0, p1]
