"""Additive noise for counts: exact two-sided geometric, and Laplace on a power-of-two grid.

Both samplers turn uniform 64-bit words from :class:`~streamdp.privacy.secure_random.SecureRandom`
into integers by comparing them with precomputed 128-bit thresholds, so
the distribution does not depend on floating-point rounding.

* :func:`geometric_noise`: ``P(k) = (1-a)/(1+a) * a**|k|``, ``a = exp(-epsilon/sensitivity)``.
* :func:`laplace_noise`: Laplace of scale ``sensitivity/epsilon`` discretised on
  the grid ``g * Z`` (``g`` a power of two at most ``scale / 2**20`` and at
  most 1): the discrete Laplace of OpenDP and Google's differential privacy
  library: a floating-point Laplace falls to Mironov's (2012)
  least-significant-bit attack.

>>> from streamdp.privacy.secure_random import SecureRandom
>>> x = laplace_noise(1000, 1.0, SecureRandom())
>>> bool(np.all(x / laplace_granularity(1.0) == np.round(x / laplace_granularity(1.0))))
True
"""

from __future__ import annotations

import bisect
import decimal
import functools
import math
import sys

import numpy as np

from streamdp.privacy.secure_random import SecureRandom
from streamdp.validation import check_epsilon

__all__ = ["geometric_noise", "geometric_pmf", "laplace_noise", "laplace_granularity"]

_TABLE = 1 << 14  # thresholds per stage
_TWO_128 = 1 << 128
_MASK64 = (1 << 64) - 1
_MIN_LAMBDA = 1e-15  # noise scale up to 1e15


class _Stage:
    """One table of thresholds ``T_r = round(S_r * 2**128)``, ``S_r = P(R >= r)``.

    ``kind`` "geometric": ``S_r = a**r``. "block" (length L): geometric conditioned
    on ``R < L``, ``S_r = (a**r - a**L) / (1 - a**L)``. "folded": the magnitude
    of the two-sided geometric, ``S_r = 2 a**r / (1 + a)`` for ``r >= 1``. Tables
    stop where ``S_r * 2**128 < 1/2``. ``R = #{r >= 1 : u < T_r}`` for ``u``
    uniform on ``[0, 2**128)``, so ``P(R >= r) = T_r / 2**128`` exactly.
    """

    def __init__(self, lam: float, kind: str, length: int = 0, scale: int = 1):
        self.lam, self.scale = lam, scale
        with decimal.localcontext() as ctx:
            ctx.prec = 60
            a = (-decimal.Decimal(lam)).exp()
            top = length - 1 if kind == "block" else math.ceil(129 * math.log(2) / lam) + 1
            aL = a**length if kind == "block" else decimal.Decimal(0)
            mult = 2 / (1 + a) if kind == "folded" else 1 / (1 - aL)
            thresholds, p = [_TWO_128], a
            for _ in range(top):
                thresholds.append(int(((p - aL) * mult * _TWO_128).to_integral_value(decimal.ROUND_HALF_EVEN)))
                p *= a
        thresholds.append(0)  # P(R > top) = 0: a cut tail has mass below 2**-129
        self.top = top  # R in [0, top]
        self._neg = [-t for t in thresholds[1:]]  # ascending, for the exact path
        self.hi = np.array([min(t >> 64, _MASK64) for t in thresholds], dtype=np.uint64)
        # guide: R at the start of each of 2**16 buckets of u (Chen & Asau's indexed search),
        # stored as ~R (negative) where a threshold falls inside the bucket so R may change in it.
        # Only those buckets (at most one per threshold) are checked against the thresholds.
        b = np.arange(1 << 16)
        ceil_top = np.array(sorted(-((-t) >> 112) for t in thresholds[1:]), dtype=np.int64)
        floor_top = np.array(sorted(t >> 112 for t in thresholds[1:]), dtype=np.int64)
        start = ceil_top.size - np.searchsorted(ceil_top, b, side="right")  # #{r: T_r > b * 2**112}
        end = floor_top.size - np.searchsorted(floor_top, b + 1, side="left")  # #{r: T_r >= (b+1) * 2**112}
        assert top < 2**15
        self.guide = np.where(start == end, start, ~start).astype(np.int16)  # 128 KiB: stays in L2 cache
        self.c0 = math.exp(-lam * length) if kind == "block" else 0.0
        self.c1 = -math.expm1(-lam * length) if kind == "block" else float((1 + a) / 2) if kind == "folded" else 1.0

    def _wrong(self, h: np.ndarray, g: np.ndarray) -> np.ndarray:
        """Where the first 64 bits do not prove ``T_(g+1) <= u < T_g``."""
        return np.flatnonzero(~((h < self.hi[g]) & (h > self.hi[g + 1])))

    def draw(self, rng: SecureRandom, n: int) -> np.ndarray:
        h = rng.bits(n)
        gs = self.guide[_top16(h)]
        g = gs.astype(np.int64)
        amb = np.flatnonzero(gs < 0)  # R is the guide's everywhere else in the bucket
        g[amb] = ~g[amb]
        bad = amb[self._wrong(h[amb], g[amb])]
        if bad.size:  # u not between the bucket start's thresholds: invert in floating point, check again
            hb = h[bad]
            u = (hb.astype(np.float64) + 0.5) * (1.0 / 2.0**64)
            gb = np.ceil(-np.log(self.c0 + self.c1 * u) / self.lam) - 1
            gb = np.clip(gb, 0, self.top).astype(np.int64)
            g[bad] = gb
            bad = bad[self._wrong(hb, gb)]
        if bad.size:  # u within rounding of a threshold (probability ~1e-12): decide with 128 bits
            for i, lo in zip(bad.tolist(), rng.bits(bad.size).tolist()):
                g[i] = bisect.bisect_left(self._neg, -((int(h[i]) << 64) | lo))
        return g


def _fits(lam: float) -> bool:
    return 129 * math.log(2) / lam + 2 <= _TABLE


@functools.lru_cache(maxsize=32)
def _stages(lam: float) -> tuple[_Stage, ...]:
    """``G = sum_i scale_i * R_i`` with independent stages (see :func:`geometric_noise`)."""
    stages, scale = [], 1
    while not _fits(lam):
        stages.append(_Stage(lam, "block", _TABLE, scale))
        lam, scale = lam * _TABLE, scale * _TABLE
    stages.append(_Stage(lam, "geometric", 0, scale))
    return tuple(stages)


@functools.lru_cache(maxsize=32)
def _folded(lam: float) -> _Stage:
    return _Stage(lam, "folded")


def _one_sided(n: int, lam: float, rng: SecureRandom) -> np.ndarray:
    out = np.zeros(n, dtype=np.int64)
    for st in _stages(lam):
        r = st.draw(rng, n)
        out += r * st.scale if st.scale != 1 else r
    return out


def _two_sided(shape: tuple, lam: float, rng: SecureRandom) -> np.ndarray:
    if not lam >= _MIN_LAMBDA:
        raise ValueError(f"noise scale 1/{lam:g} is beyond the supported 1e15 (epsilon/sensitivity too small)")
    n = int(np.prod(shape, dtype=np.int64))
    if not _fits(lam):
        return (_one_sided(n, lam, rng) - _one_sided(n, lam, rng)).reshape(shape)
    k = _folded(lam).draw(rng, n)  # |K|, then a fair sign
    sign = np.unpackbits(np.frombuffer(rng.random_bytes((n + 7) // 8), dtype=np.uint8), count=n).view(np.int8)
    sign *= -2  # 1 - 2 * bit, in one byte a cell: no sign array as large as the noise
    sign += 1
    np.multiply(k, sign, out=k)
    return k.reshape(shape)


def _top16(h: np.ndarray) -> np.ndarray:
    """``h >> 48`` of uint64 ``h``, as a view where the machine is little-endian (each value's last 16-bit
    word): a draw over every cell of a model holds no shifted copy of its bits."""
    if sys.byteorder == "little" and h.flags.c_contiguous:
        return h.view(np.uint16)[3::4]
    return (h >> np.uint64(48)).view(np.int64)


def geometric_noise(shape: int | tuple, epsilon: float, rng: SecureRandom, sensitivity: float = 1.0) -> np.ndarray:
    """Two-sided geometric noise with ``P(k) ∝ exp(-epsilon*|k|/sensitivity)`` over the integers.

    ``K = G1 - G2`` with ``G1, G2`` iid geometric, ``P(G >= k) = a**k``,
    ``a = exp(-lambda)``, ``lambda = epsilon/sensitivity``.

    Sampler (exact up to 2**-110 in total variation per value): a geometric
    splits as ``G = (G mod L) + L * (G div L)``, the two parts independent, ``G
    mod L`` geometric truncated to ``[0, L)`` and ``G div L`` geometric with
    ``a**L`` (``P(G = qL + r) = (1-a**L) a**(qL) * (1-a) a**r / (1-a**L)``).
    Stages of ``L = 2**14`` are split off until the remaining geometric fits
    a table (``a**r`` down to 2**-129; at most 5 stages for lambda >= 1e-15).
    Each stage is drawn by inversion against thresholds ``T_r``, ``P(R >= r)``
    times 2**128 rounded, computed with 60-digit decimals: ``P(R >= r)`` is
    then ``T_r / 2**128`` exactly, off the ideal by at most 2**-128.9 per r,
    so a stage of at most 2**14 + 90 values is within ``2**14.1 * 2**-128.9 <
    2**-114`` in total variation, and ``K`` (two draws of at most five stages)
    within 2**-110. Floating point only proposes a candidate; the
    comparison with the thresholds decides, with all 128 bits where the first
    64 do not.

    Privacy sketch: for integer counts ``c``, ``c'`` with ``|c - c'| <= sensitivity``,
    ``P(c + K = v) / P(c' + K = v) = a**(|v-c| - |v-c'|) <= exp(epsilon)``; the
    sampler adds at most 2**-110 to delta. Integer output has no floating-point
    representation to attack (Mironov 2012).

    Parameters: ``shape`` of the int64 array returned, ``epsilon`` (> 0; ``inf``: zeros), ``rng`` (the
    secure source), ``sensitivity`` (> 0). Raises :class:`ValueError` on an invalid epsilon, or a scale
    ``sensitivity / epsilon`` beyond ``1e15``.

    >>> geometric_noise(3, float("inf"), SecureRandom()).tolist()
    [0, 0, 0]
    """
    check_epsilon(epsilon, allow_inf=True)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if math.isinf(epsilon):
        return np.zeros(shape, dtype=np.int64)
    return _two_sided(shape, epsilon / sensitivity, rng)


def geometric_pmf(k: np.ndarray, epsilon: float, sensitivity: float = 1.0) -> np.ndarray:
    """Exact pmf of :func:`geometric_noise` at the integers ``k`` (for tests and audits).

    >>> geometric_pmf(np.array([0, 1]), 1.0).round(4).tolist()
    [0.4621, 0.17]
    """
    a = math.exp(-epsilon / sensitivity)
    return (1 - a) / (1 + a) * a ** np.abs(np.asarray(k, dtype=np.float64))


def laplace_granularity(scale: float) -> float:
    """Grid step of :func:`laplace_noise`: the largest power of two ``<= scale / 2**20``, at most 1.

    >>> laplace_granularity(1.0) == 2.0**-20, laplace_granularity(2.0**30)
    (True, 1.0)
    """
    return min(1.0, 2.0 ** math.floor(math.log2(scale) - 20))


def laplace_noise(shape: int | tuple, epsilon: float, rng: SecureRandom, sensitivity: float = 1.0) -> np.ndarray:
    """Laplace noise of scale ``b = sensitivity/epsilon`` on the grid ``g * Z``, safe in floating point.

    Returns ``g * K`` with ``K`` two-sided geometric of ``lambda = g/b`` (drawn
    as :func:`geometric_noise`) and ``g = laplace_granularity(b)``: a power of
    two at most ``b / 2**20`` (a relative resolution of one millionth of the
    scale) and at most 1. ``P(g*K = x) ∝ exp(-|x| / b)`` on the grid.

    Why a grid: ``count + (E1 - E2) * b`` computed in floating point has
    low-order bits that depend on the count, so some outputs are possible with
    a record and impossible without it (Mironov 2012). Every output of this
    sampler lies on the grid, whatever the count.

    Privacy sketch: counts are integers, so multiples of ``g`` (``1/g`` is an
    integer); for ``|c - c'| <= sensitivity``, ``P(c + gK = v) / P(c' + gK = v)
    = exp((|v - c'| - |v - c|) / b) <= exp(epsilon)`` for every grid point v.
    ``g * K`` is exact in float64 (a power of two times an integer below 2**53
    except with probability ``exp(-2**33)``). Adding it to a count in float64
    is correctly rounded: the result is a function of the exact sum ``c + gK``
    alone, post-processing of a private value; no bit of it depends on ``c`` in
    any other way. The sampler adds at most 2**-110 to delta.

    Parameters and errors as :func:`geometric_noise`; returns float64 (zeros for ``epsilon=inf``).
    """
    check_epsilon(epsilon, allow_inf=True)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if math.isinf(epsilon):
        return np.zeros(shape, dtype=np.float64)
    b = sensitivity / epsilon
    g = laplace_granularity(b)
    return _two_sided(shape, g / b, rng).astype(np.float64) * g
