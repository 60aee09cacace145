"""Empirical privacy audits: Mironov's floating-point attack and epsilon lower bounds from samples.

An audit releases ``c + noise`` many times for neighbouring counts ``c = 0``
and ``c = 1``, takes events S, and bounds ``P_1(S) / P_0(S)`` from below with
Clopper-Pearson intervals (a lower bound on one probability over an upper
bound on the other). If the mechanism is epsilon-DP the true ratio is at most
``e**epsilon``, so the audit's lower bound exceeds epsilon only when some
interval fails: all intervals hold together with probability at least
``1 - P_FAIL`` (Bonferroni over every interval computed in a test).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from streamdp.privacy.mechanisms import SecureRandom, geometric_noise, laplace_granularity, laplace_noise

P_FAIL = 1e-6
N = 200_000  # releases per world


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """Two-sided (1 - alpha) interval for a binomial proportion."""
    lo = 0.0 if k == 0 else float(stats.beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - alpha / 2, k + 1, n - k))
    return lo, hi


def epsilon_lower_bound(events0: list[int], events1: list[int], n: int) -> float:
    """max over events and both directions of ln(CP_lower(p_a) / CP_upper(p_b)), failure probability P_FAIL."""
    alpha = P_FAIL / (2 * len(events0))
    best = -math.inf
    for k0, k1 in zip(events0, events1):
        lo0, hi0 = clopper_pearson(k0, n, alpha)
        lo1, hi1 = clopper_pearson(k1, n, alpha)
        for lo, hi in ((lo1, hi0), (lo0, hi1)):
            if lo > 0:
                best = max(best, math.log(lo / hi))
    return best


def releases(mechanism, c: int, eps: float) -> np.ndarray:
    """``c + noise`` as the forest computes it (float64 counts plus float noise, or int64 plus int)."""
    noise = mechanism(N, eps, SecureRandom())
    return np.full(N, c, dtype=noise.dtype) + noise


def naive_float_laplace(n: int, eps: float, rng: SecureRandom) -> np.ndarray:
    """What mechanism="laplace" did before: (E1 - E2) * b in floating point."""
    e = rng.exponential((2, n))
    return (e[0] - e[1]) / eps


def mironov_test(y: np.ndarray) -> np.ndarray:
    """Fires on |y| < 0.5 with y not a multiple of 2**-53: impossible for 1 + noise, common for 0 + noise."""
    return (np.abs(y) < 0.5) & (np.ldexp(y, 53) != np.round(np.ldexp(y, 53)))


def test_mironov_attack_breaks_naive_float_laplace():
    """The attack has power: against the old mechanism it proves epsilon far above the declared 1."""
    y0, y1 = releases(naive_float_laplace, 0, 1.0), releases(naive_float_laplace, 1, 1.0)
    f0, f1 = int(mironov_test(y0).sum()), int(mironov_test(y1).sum())
    assert f1 == 0 and f0 > 0.1 * N
    assert epsilon_lower_bound([f0], [f1], N) > 5


@pytest.mark.parametrize("eps", [1.0, 0.1])
def test_mironov_attack_fails_against_grid_laplace(eps):
    y0, y1 = releases(laplace_noise, 0, eps), releases(laplace_noise, 1, eps)
    g = laplace_granularity(1 / eps)
    # The test of Mironov's paper, and the general one: is y in the image of c + noise for c = 0, 1?
    in_image = [
        lambda y, c=c: np.ldexp(y - c, -int(math.log2(g))) == np.round(np.ldexp(y - c, -int(math.log2(g))))
        for c in (0, 1)
    ]
    events = [mironov_test, in_image[0], in_image[1], lambda y: in_image[0](y) & ~in_image[1](y)]
    k0 = [int(e(y0).sum()) for e in events]
    k1 = [int(e(y1).sum()) for e in events]
    assert k0[0] == k1[0] == 0  # never fires
    assert k0[1] == k1[1] == k0[2] == k1[2] == N  # every output is in both images
    assert k0[3] == k1[3] == 0
    assert epsilon_lower_bound(k0, k1, N) <= eps


def _threshold_events(y: np.ndarray, ts) -> list[int]:
    return [int(np.sum(y >= t)) for t in ts] + [int(np.sum(y < t)) for t in ts]


@pytest.mark.parametrize("mechanism", [geometric_noise, laplace_noise])
def test_empirical_epsilon_audit(mechanism):
    """Histogram events {y >= t}, {y < t}, {y = v} and low-bit events for c = 0 vs c = 1 at epsilon 1.

    The lower bound must not exceed 1 (privacy) and must come close to it
    (power: {y >= 1} has ratio exactly e for both mechanisms).
    """
    eps = 1.0
    y0, y1 = releases(mechanism, 0, eps), releases(mechanism, 1, eps)
    ts = [-2, -1, -0.5, 0, 0.5, 1, 1.5, 2, 3]
    vals = [-1, 0, 1, 2]
    g = laplace_granularity(1 / eps) if mechanism is laplace_noise else 1.0

    def events(y):
        lowbit = np.round(y / g).astype(np.int64) & 1  # parity of the grid index
        return _threshold_events(y, ts) + [int(np.sum(np.abs(y - v) < g / 2)) for v in vals] + [int(lowbit.sum())]

    lb = epsilon_lower_bound(events(y0), events(y1), N)
    assert 0.8 < lb <= eps, lb
