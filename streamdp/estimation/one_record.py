"""One-record copies of the rule in plain Python: what the river classifiers (and the C kernel beside
them, which must give the same floats) run per record, without numpy's per-call cost.

Each is tested equal, float for float, to the array step of :mod:`streamdp.estimation.rule` and the vote of
:class:`~streamdp.estimation.nodes.ForestNodes`.
"""

from __future__ import annotations

from streamdp.estimation.rule import KAPPA, SHARE_SPREAD, seq_sum

__all__ = ["posterior_one", "path_proba_one"]


def posterior_one(y: list, var_total: float, parent_p: list, parent_n: float, share: float) -> tuple[list, float]:
    """:func:`~streamdp.estimation.rule.posterior_step` for one node, in plain Python: the same operations in
    the same order, so the same floats.

    >>> import numpy as np
    >>> from streamdp.estimation.rule import posterior_step
    >>> p, n = posterior_one([60.0, 10.0], 8.0, [0.5, 0.5], 140.0, 0.5)
    >>> q, k = posterior_step(np.array([[60.0, 10.0]]), np.array([8.0]), np.array([[0.5, 0.5]]), np.array([140.0]), np.array([0.5]))
    >>> p == q[0].tolist() and n == float(k[0])
    True
    """
    C = len(y)
    t = seq_sum(y)
    v = var_total if var_total > 0 else 0.0
    m = parent_n * share if share > 0 else parent_n
    sm = SHARE_SPREAD * m
    vm = sm * sm + 1.0
    n = (t / v + m / vm) / (1.0 / v + 1.0 / vm) if v > 0 else t
    if not n > 0:
        return parent_p, 0.0
    at = -t if t < 0 else t
    den = at if at > n else n
    nn = n * n
    kn = KAPPA * n
    s2 = v / C
    q = []
    for yc, pc in zip(y, parent_p):
        pq = pc * (1.0 - pc)
        if not pq > 1e-6:
            pq = 1e-6
        w = nn / (nn + kn + KAPPA * s2 / pq)
        x = pc + w * (yc - t * pc) / den
        q.append(x if x > 0 else 0.0)
    s = seq_sum(q)
    return ([x / s for x in q] if s > 0 else parent_p), n


def path_proba_one(pooled: list, prior: list, records: float, root_var: float) -> list:
    """:meth:`ForestNodes.path_proba` for one record, from the sum of its leaves' :meth:`ForestNodes.path_rows`.

    ``pooled`` holds, depth by depth from depth 1, the record's pooled class counts
    then their pooled total variance (``C + 1`` numbers per depth); ``prior``, ``records``
    and ``root_var``: the roots' (:class:`ForestNodes`' fields). A depth whose
    numbers equal the depth above's is skipped; the first given is always weighed.
    """
    C = len(prior)
    p, m, above = prior, records, root_var
    for d in range(0, len(pooled), C + 1):
        if d and pooled[d : d + C + 1] == pooled[d - C - 1 : d]:
            continue  # the same counts and variance as one level up: nothing new to weigh
        v = pooled[d + C]
        share = v / above if above > 0 else 0.0
        p, m = posterior_one(pooled[d : d + C], v, p, m, share)
        above = v
    return p
