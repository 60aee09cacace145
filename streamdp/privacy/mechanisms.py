"""Noise mechanisms, sampling and privacy accounting formulas.

Every random draw that protects privacy comes from :class:`SecureRandom`
(:mod:`streamdp.privacy.secure_random`: an AES-CTR keystream keyed from ``os.urandom``,
or from a secret key and a context). A test may pass a ``seed``; the generator
is then a seeded numpy PCG64, ``private`` is False, and everything built from
it is marked as not private. The noise samplers live in :mod:`streamdp.privacy.noise`.

Mechanisms
----------
* :func:`geometric_noise`: two-sided geometric (discrete Laplace),
  ``P(k) = (1-a)/(1+a) * a**|k|`` with ``a = exp(-epsilon/sensitivity)``. Integer
  counts get integer noise, so the released value is ``count + k`` with no
  floating-point representation to attack (Mironov 2012).
* :func:`laplace_noise`: Laplace on a power-of-two grid (safe in floating point).
* :func:`exponential_mechanism`: picks index ``r`` with probability
  proportional to ``measure_r * exp(epsilon * q_r / (2 * sensitivity))``.
* :func:`bernoulli_sample`: keep each item independently with probability beta.
* :func:`kanon_delta` / :func:`kanon_min_epsilon`: (epsilon, delta) of
  "k-anonymity after beta-sampling" (Li, Qardaji, Su 2012, Theorem 5).

>>> rng = SecureRandom()
>>> noise = geometric_noise((3, 4), epsilon=1.0, rng=rng)
>>> noise.dtype, noise.shape
(dtype('int64'), (3, 4))
"""

from __future__ import annotations

import decimal
import functools
import math

import numpy as np

from streamdp.privacy.noise import geometric_noise, geometric_pmf, laplace_granularity, laplace_noise
from streamdp.privacy.secure_random import NearlyExactWarning, NotPrivateWarning, SecureRandom
from streamdp.validation import check_epsilon, check_integer, check_probability

__all__ = [
    "SecureRandom",
    "NotPrivateWarning",
    "NearlyExactWarning",
    "geometric_noise",
    "geometric_pmf",
    "laplace_noise",
    "laplace_granularity",
    "exponential_mechanism",
    "bernoulli_sample",
    "kanon_delta",
    "kanon_min_epsilon",
    "kanon_check",
]


def exponential_mechanism(
    scores: np.ndarray,
    epsilon: float,
    sensitivity: float,
    rng: SecureRandom,
    measure: np.ndarray | None = None,
) -> int:
    """Index ``r`` drawn with probability ∝ ``measure_r * exp(epsilon * scores_r / (2 * sensitivity))``.

    McSherry and Talwar's exponential mechanism: ``epsilon``-DP when one record moves any score by at
    most ``sensitivity``. Implemented with the Gumbel-max trick (``argmax(logits + Gumbel)`` has
    exactly the softmax distribution), with the Gumbel variates built from
    secure uniforms. Candidates of measure 0 are never chosen.

    Parameters: ``scores`` (finite, one per candidate), ``epsilon`` (> 0, ``inf``: uniform over the best
    candidates), ``sensitivity`` (> 0), ``rng`` (the secure source), ``measure`` (optional base measure:
    finite, non-negative, one per candidate, not all zero).

    Raises :class:`ValueError` on an invalid epsilon or sensitivity, no candidate, a non-finite score or
    an invalid measure.

    >>> exponential_mechanism(np.array([0.0, 5.0]), float("inf"), 1.0, SecureRandom())
    1
    >>> exponential_mechanism(np.array([0.0, 5.0, 5.0]), 1.0, 1.0, SecureRandom(), measure=np.array([0, 1, 0]))
    1
    """
    check_epsilon(epsilon, allow_inf=True)
    if sensitivity <= 0:
        raise ValueError(f"sensitivity must be positive, got {sensitivity}")
    q = np.asarray(scores, dtype=np.float64).ravel()
    if q.size == 0:
        raise ValueError("the exponential mechanism needs at least one candidate")
    if not np.all(np.isfinite(q)):
        raise ValueError("scores must be finite")
    logits = _em_logits(q, epsilon, sensitivity, measure)
    gumbel = -np.log(rng.exponential(q.size))
    # A measure-0 candidate (logit -inf) stays -inf even if a Gumbel variate is +inf.
    return int(np.argmax(np.where(np.isneginf(logits), -np.inf, logits + gumbel)))


def _em_logits(q: np.ndarray, epsilon: float, sensitivity: float, measure: np.ndarray | None) -> np.ndarray:
    m = None
    if measure is not None:
        m = np.asarray(measure, dtype=np.float64).ravel()
        if m.shape != q.shape or not np.all(np.isfinite(m)) or np.any(m < 0) or not np.any(m > 0):
            raise ValueError("measure must be finite, non-negative, one per candidate, not all zero")
    if math.isinf(epsilon):
        # The limit of the distribution: uniform (by measure) over the best candidates of positive measure.
        best = q[m > 0].max() if m is not None else q.max()
        logits = np.where(q == best, 0.0, -np.inf)
    else:
        logits = epsilon * q / (2.0 * sensitivity)
    if m is not None:
        with np.errstate(divide="ignore"):
            logits = logits + np.log(m)
    return logits


def exponential_mechanism_probabilities(
    scores: np.ndarray, epsilon: float, sensitivity: float, measure: np.ndarray | None = None
) -> np.ndarray:
    """The exact distribution :func:`exponential_mechanism` samples from (for tests and reports).

    Same parameters and errors as :func:`exponential_mechanism`, without ``rng``.

    >>> exponential_mechanism_probabilities(np.array([0.0, 1.0]), 2.0, 1.0).round(4).tolist()
    [0.2689, 0.7311]
    """
    check_epsilon(epsilon, allow_inf=True)
    q = np.asarray(scores, dtype=np.float64).ravel()
    logits = _em_logits(q, epsilon, sensitivity, measure)
    logits = logits - logits.max()
    p = np.exp(logits)
    return p / p.sum()


def bernoulli_sample(beta: float, size: int | tuple, rng: SecureRandom) -> np.ndarray:
    """Boolean mask of shape ``size``, each entry True independently with probability ``beta``.

    The sampling step of k-anonymity after beta-sampling. Raises :class:`ValueError` unless
    ``0 < beta <= 1``.

    >>> bernoulli_sample(1.0, 3, SecureRandom()).tolist()
    [True, True, True]
    """
    if not 0 < beta <= 1:
        raise ValueError(f"beta must be in (0, 1], got {beta}")
    return rng.uniform(size) <= beta


# -- k-anonymity after beta-sampling ---------------------------------------------


def kanon_check(k: int, beta: float, epsilon: float) -> None:
    """Raise :class:`ValueError` unless (k, beta, epsilon) is a valid setting for one tree.

    ``k`` a positive integer, ``0 < beta < 1``, and ``epsilon >= -ln(1 - beta)``: below that floor no
    delta makes the mechanism ``(epsilon, delta)``-DP (Li, Qardaji and Su). The message says which
    bound is broken and how to meet it.

    >>> kanon_check(5, 0.5, 0.1)
    Traceback (most recent call last):
    ...
    ValueError: k-anonymity after beta-sampling needs epsilon >= -ln(1-beta) = 0.693147 per tree (beta=0.5); got epsilon=0.1. Lower beta or raise epsilon.
    """
    check_integer(k, "k")
    check_probability(beta, "beta", closed="neither")
    check_epsilon(epsilon, allow_inf=True)
    floor = -math.log1p(-beta)
    if epsilon < floor:
        raise ValueError(
            f"k-anonymity after beta-sampling needs epsilon >= -ln(1-beta) = {floor:.6g} per tree "
            f"(beta={beta}); got epsilon={epsilon:.6g}. Lower beta or raise epsilon."
        )


def kanon_delta(k: int, beta: float, epsilon: float) -> float:
    """delta of ONE tree under k-anonymity after beta-sampling (Li–Qardaji–Su, Theorem 5).

    ``gamma = (e**eps - 1 + beta) / e**eps`` and
    ``delta = max_{n >= ceil(k/gamma - 1)} P(Binomial(n, beta) > gamma n)``.
    A forest of N trees is ``(N*epsilon, N*delta)``-DP.

    The maximum is taken over segments, not single n: on the n with
    ``floor(gamma n) = m - 1`` the tail ``P(Bin(n, beta) >= m)`` grows with n, so
    the segment's maximum is at its last n, ``n_m = ceil(m/gamma) - 1``. Those
    n_m are computed with 80-digit decimals and integers (``gamma n`` rounded
    in floating point can skip the maximising n and under-report delta at a tiny
    beta). The scan over m stops once the Chernoff bound
    ``exp(-n KL(gamma || beta))`` on every later tail is below the best found;
    parameters whose scan would pass ``2**22`` segments are refused.
    Results are cached (a model blob carries k, beta, epsilon).

    Raises :class:`ValueError` where :func:`kanon_check` does, or where the scan would be too long.

    >>> round(kanon_delta(5, 0.1, 1.0), 6)
    0.000177
    """
    kanon_check(k, beta, epsilon)
    return _kanon_delta(int(k), float(beta), float(epsilon))


_KANON_MAX_SEGMENTS = 1 << 22
_QBITS = 256


@functools.lru_cache(maxsize=1024)
def _kanon_delta(k: int, beta: float, epsilon: float) -> float:
    from scipy.stats import binom

    # Work with c = 1 - gamma = (1-beta) e^-eps: gamma itself rounds to 1.0 for a large epsilon.
    # e^-eps is kept above the float underflow (eps <= 700): delta is then beta**k to full precision.
    eps = min(epsilon, 700.0)
    with decimal.localcontext() as ctx:
        ctx.prec = 80
        c_d = (1 - decimal.Decimal(beta)) * (-decimal.Decimal(eps)).exp()
        q_d = c_d / (1 - c_d)  # c / gamma
        ceil = lambda x: int(x.to_integral_value(decimal.ROUND_CEILING))  # noqa: E731
        n0 = max(1, k - 1 + ceil(k * q_d))  # ceil(k/gamma - 1), exact even when k/gamma rounds to k
        m0 = n0 - ceil(n0 * c_d) + 1  # floor(gamma n0) + 1 = n0 - ceil(n0 c) + 1
        q = ceil(q_d * (1 << _QBITS))  # rounded up: ceil(m q) stays right however small q is
    c = float(c_d)
    gamma = 1 - c
    kl = gamma * math.log(gamma / beta) + c * math.log(c / (1 - beta))  # > 0: gamma >= 2 beta - beta**2 > beta

    def last_n(ms: range) -> np.ndarray:  # n_m = ceil(m/gamma) - 1 = m - 1 + ceil(m c / gamma)
        return np.array([m - 1 - ((-m * q) >> _QBITS) for m in ms], dtype=np.float64)

    first = float(binom.sf(m0 - 1, last_n(range(m0, m0 + 1))[0], beta))
    n_stop = max(-math.log(first) if first > 0 else 0.0, 691.0) / kl
    if gamma * (n_stop - n0) > _KANON_MAX_SEGMENTS:
        raise ValueError(
            f"kanon_delta(k={k}, beta={beta}, epsilon={epsilon:.6g}) would scan about {gamma * (n_stop - n0):.3g} "
            f"candidate record counts (limit {_KANON_MAX_SEGMENTS}); use a smaller k or a larger epsilon"
        )
    best, m, chunk = first, m0 + 1, 64
    while True:
        ms = range(m, m + chunk)
        ns = last_n(ms)
        best = max(best, float(binom.sf(np.arange(m - 1, m - 1 + chunk), ns, beta).max()))
        bound = math.exp(-(ns[-1] + 1) * kl)
        if bound <= best or best == 0.0 and bound < 1e-300:
            return best
        m, chunk = m + chunk, min(chunk * 2, 1 << 16)


def kanon_min_epsilon(k: int, beta: float, delta: float, tol: float = 1e-6) -> float:
    """Smallest per-tree epsilon with ``kanon_delta(k, beta, epsilon) <= delta``.

    Scans upward from ``-ln(1-beta)`` for the first epsilon that meets the target
    and refines by bisection between the last failing and the first passing
    grid point (delta is not monotone in epsilon at a fine scale, so a plain
    bisection over the whole range could return a point past a dip).

    Raises :class:`ValueError` unless ``0 < delta < 1`` and (k, beta) are valid, or where no
    epsilon up to 50 reaches ``delta``.

    >>> eps = kanon_min_epsilon(5, 0.1, 1e-3)
    >>> kanon_delta(5, 0.1, eps) <= 1e-3 < kanon_delta(5, 0.1, eps - 0.01)
    True
    """
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    lo = -math.log1p(-beta)
    kanon_check(k, beta, max(lo, 1e-12))
    if kanon_delta(k, beta, lo) <= delta:
        return lo
    step = 0.05
    prev = lo
    eps = lo + step
    while kanon_delta(k, beta, eps) > delta:
        prev = eps
        eps += step
        if eps > 50:
            raise ValueError(f"no epsilon <= 50 reaches delta={delta} with k={k}, beta={beta}")
    a, b = prev, eps
    while b - a > tol:
        mid = (a + b) / 2
        if kanon_delta(k, beta, mid) <= delta:
            b = mid
        else:
            a = mid
    return b
