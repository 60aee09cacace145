"""Noise mechanisms, sampling and privacy accounting formulas.

Every random draw that protects privacy comes from :class:`SecureRandom`,
which reads the operating system's CSPRNG (``os.urandom``). A test may pass a
``seed``; the generator is then a seeded numpy PCG64, ``private`` is False,
and everything built from it is marked as not private.

Mechanisms
----------
* :func:`geometric_noise`: two-sided geometric (discrete Laplace),
  ``P(k) = (1-a)/(1+a) * a**|k|`` with ``a = exp(-epsilon/sensitivity)``. Integer
  counts get integer noise, so the released value is ``count + k`` with no
  floating-point representation to attack (Mironov 2012).
* :func:`laplace_noise`: continuous Laplace, kept for paper-faithful comparison.
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

import math
import os
import secrets
import warnings

import numpy as np

from .validation import check_epsilon, check_integer, check_probability

__all__ = [
    "SecureRandom",
    "NotPrivateWarning",
    "geometric_noise",
    "geometric_pmf",
    "laplace_noise",
    "exponential_mechanism",
    "bernoulli_sample",
    "kanon_delta",
    "kanon_min_epsilon",
    "kanon_check",
]

_TWO_POW_64 = float(2**64)


class NotPrivateWarning(UserWarning):
    """Noise was drawn from a seeded (reproducible) generator: the output is not private."""


class SecureRandom:
    """Uniform and exponential variates for noise.

    With ``seed=None`` (the default and the only private setting) every variate
    comes from ``os.urandom``: 64 random bits per uniform, mapped to
    ``(u + 0.5) / 2**64``, so a uniform is never 0 and its resolution near 0 is
    2**-64 (this bounds how far the tail of a sampled distribution can be cut;
    see :func:`geometric_noise`). Nothing reproducible is kept: no seed, no state.

    ``seed=int`` is for tests only: draws become reproducible, ``private`` is
    False and a :class:`NotPrivateWarning` is issued.
    """

    def __init__(self, seed: int | None = None):
        self.private = seed is None
        self._test_rng = None
        if seed is not None:
            warnings.warn(
                "SecureRandom(seed=...) gives reproducible noise: for tests only, the output is NOT private",
                NotPrivateWarning,
                stacklevel=2,
            )
            self._test_rng = np.random.default_rng(seed)

    def _bits(self, n: int) -> np.ndarray:
        if self._test_rng is not None:
            return self._test_rng.integers(0, 2**64, size=n, dtype=np.uint64, endpoint=False)
        return np.frombuffer(os.urandom(8 * n), dtype="<u8")

    def uniform(self, size: int | tuple = ()) -> np.ndarray:
        """Uniform variates in the open interval (0, 1]."""
        shape = (size,) if isinstance(size, int) else tuple(size)
        n = int(np.prod(shape, dtype=np.int64))
        u = self._bits(n).astype(np.float64)
        u += 0.5
        u *= 1.0 / _TWO_POW_64
        return u.reshape(shape)

    def exponential(self, size: int | tuple = ()) -> np.ndarray:
        """Standard exponential variates, ``-log(U)``."""
        return -np.log(self.uniform(size))

    def integers(self, high: int, size: int | tuple = ()) -> np.ndarray:
        """Uniform integers in ``[0, high)`` (rejection-free: 64-bit modulo bias < 2**-40 for high < 2**24)."""
        if not 0 < high < 2**24:
            raise ValueError(f"high must be in (0, 2**24), got {high}")
        shape = (size,) if isinstance(size, int) else tuple(size)
        n = int(np.prod(shape, dtype=np.int64))
        return (self._bits(n) % np.uint64(high)).astype(np.int64).reshape(shape)

    def token_bytes(self, n: int) -> bytes:
        if self._test_rng is not None:
            return self._test_rng.bytes(n)
        return secrets.token_bytes(n)


def geometric_noise(
    shape: int | tuple, epsilon: float, rng: SecureRandom, sensitivity: float = 1.0
) -> np.ndarray:
    """Two-sided geometric noise with ``P(k) ∝ exp(-epsilon*|k|/sensitivity)`` over the integers.

    Drawn as the difference of two one-sided geometrics, each
    ``floor(E / lambda)`` with ``E`` standard exponential and
    ``lambda = epsilon/sensitivity``, since ``P(floor(E/lambda) >= k) = exp(-lambda k)``.

    Privacy sketch: for integer counts ``c`` and ``c'`` with ``|c - c'| <= sensitivity``,
    ``P(c + K = v) / P(c' + K = v) = a**(|v-c| - |v-c'|) <= exp(epsilon)``. The
    sampler's uniforms have 2**-64 resolution, so only tail values with
    probability below about 2**-60 can be misweighted; no output value
    carries any information about ``c`` other than through ``v - c``.
    """
    check_epsilon(epsilon, allow_inf=True)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if math.isinf(epsilon):
        return np.zeros(shape, dtype=np.int64)
    lam = epsilon / sensitivity
    e = rng.exponential((2,) + shape)
    g = np.floor(e / lam)
    # A one-sided geometric above 2**62 has probability exp(-lam * 2**62): clip to keep int64 exact.
    np.minimum(g, 2.0**62, out=g)
    g = g.astype(np.int64)
    return g[0] - g[1]


def geometric_pmf(k: np.ndarray, epsilon: float, sensitivity: float = 1.0) -> np.ndarray:
    """Exact pmf of :func:`geometric_noise`."""
    a = math.exp(-epsilon / sensitivity)
    return (1 - a) / (1 + a) * a ** np.abs(np.asarray(k, dtype=np.float64))


def laplace_noise(shape: int | tuple, epsilon: float, rng: SecureRandom, sensitivity: float = 1.0) -> np.ndarray:
    """Continuous Laplace noise with scale ``sensitivity/epsilon``.

    Kept for paper-faithful comparison (``mechanism="laplace"``). Floating-point
    Laplace output is open to Mironov's least-significant-bit attack; prefer
    :func:`geometric_noise` for counts.
    """
    check_epsilon(epsilon, allow_inf=True)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if math.isinf(epsilon):
        return np.zeros(shape, dtype=np.float64)
    e = rng.exponential((2,) + shape)
    return (e[0] - e[1]) * (sensitivity / epsilon)


def exponential_mechanism(
    scores: np.ndarray,
    epsilon: float,
    sensitivity: float,
    rng: SecureRandom,
    measure: np.ndarray | None = None,
) -> int:
    """Index ``r`` drawn with probability ∝ ``measure_r * exp(epsilon * scores_r / (2 * sensitivity))``.

    Implemented with the Gumbel-max trick (``argmax(logits + Gumbel)`` has
    exactly the softmax distribution), with the Gumbel variates built from
    secure uniforms. Candidates of measure 0 are never chosen.
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
    """The exact distribution :func:`exponential_mechanism` samples from (for tests and reports)."""
    check_epsilon(epsilon, allow_inf=True)
    q = np.asarray(scores, dtype=np.float64).ravel()
    logits = _em_logits(q, epsilon, sensitivity, measure)
    logits = logits - logits.max()
    p = np.exp(logits)
    return p / p.sum()


def bernoulli_sample(beta: float, size: int | tuple, rng: SecureRandom) -> np.ndarray:
    """Boolean mask, each entry True independently with probability ``beta``."""
    check_probability(beta, "beta", closed="right")
    return rng.uniform(size) <= beta


# -- k-anonymity after beta-sampling ---------------------------------------------


def kanon_check(k: int, beta: float, epsilon: float) -> None:
    """Raise ValueError unless (k, beta, epsilon) is a valid setting for one tree."""
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
    ``delta = max_{n >= ceil(k/gamma - 1)} sum_{j > gamma n}^{n} C(n, j) beta**j (1-beta)**(n-j)``.
    A forest of N trees is ``(N*epsilon, N*delta)``-DP.

    The maximum over infinitely many n is exact: the scan stops once the
    Chernoff bound ``exp(-n * KL(gamma || beta))`` on every later term is below
    the best term found (gamma > beta whenever epsilon > 0).
    """
    from scipy.stats import binom

    kanon_check(k, beta, epsilon)
    # Work with c = 1 - gamma = (1-beta) e^-eps: for a large epsilon gamma rounds to 1.0
    # in floating point, which would make every tail empty and report delta = 0, while
    # the true delta tends to beta**k (n = k records, all sampled). e^-eps is kept
    # above the float underflow (epsilon <= 700): delta is then beta**k to full precision.
    c = (1 - beta) * math.exp(-min(float(epsilon), 700.0))
    gamma = 1 - c
    # ceil(k/gamma - 1) = k - 1 + ceil(k c / gamma), exact even when k/gamma rounds to k
    n0 = max(1, k - 1 + math.ceil(k * c / gamma))
    kl = gamma * math.log(gamma / beta) + c * math.log(c / (1 - beta))
    best = 0.0
    start = n0
    chunk = 4096
    while True:
        n = np.arange(start, start + chunk)
        # j > gamma n  <=>  j > floor(n - n c) = n - ceil(n c)
        tail = binom.sf(n - np.ceil(n * c), n, beta)
        best = max(best, float(tail.max()))
        nxt = start + chunk
        bound = math.exp(-nxt * kl) if kl > 0 else 1.0
        if bound <= best or best == 0.0 and bound < 1e-300:
            return best
        start = nxt
        chunk = min(chunk * 2, 1 << 20)


def kanon_min_epsilon(k: int, beta: float, delta: float, tol: float = 1e-6) -> float:
    """Smallest per-tree epsilon with ``kanon_delta(k, beta, epsilon) <= delta``.

    Scans upward from ``-ln(1-beta)`` for the first epsilon that meets the target
    and refines by bisection between the last failing and the first passing
    grid point (delta is not monotone in epsilon at a fine scale, so a plain
    bisection over the whole range could return a point past a dip).
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
