"""Where the data is, per numeric attribute: the densities random trees draw their thresholds from.

A :class:`Marginals` holds, for each numeric attribute of a schema (in schema order), a piecewise-uniform
density over the declared range: bin edges and the cumulative mass at each edge. Three sources:

* :meth:`Marginals.uniform`: one bin per attribute (Fan et al.'s draw, uniform over the range);
* :meth:`Marginals.declared`: the public ``quantiles`` a schema declares (equal mass between consecutive
  cut points), uniform for an attribute that declares none;
* :func:`noisy_marginals`: a differentially private histogram of the records, one per attribute.

Thresholds drawn from any of them are a function of public or released numbers only (post-processing).

Privacy of :func:`noisy_marginals` (proof sketch). Each attribute's histogram has ``bins`` equal-width bins
over the declared range; a record falls in exactly one bin of each (values are clamped to the range
when encoded), so adding or removing one record changes each histogram by 1 in L1, and the ``d``
histograms together by ``d`` (``d`` numeric attributes). Every bin gets two-sided geometric noise at
``epsilon / d`` (:func:`streamdp.privacy.noise.geometric_noise`): each histogram is
``epsilon / d``-DP and, by sequential composition over the ``d`` attributes, the release is
``epsilon``-DP. The densities are computed from the noisy counts alone (post-processing): bins at or
below the noise scale ``d / epsilon`` are dropped, each other bin weighs its count above that floor, and
every bin weighs one noise scale more (a uniform prior that dominates where the noise does).
``tests/forest/test_marginals.py`` audits the release empirically.

>>> import numpy as np
>>> from streamdp.records.schema import Schema
>>> s = Schema.from_dict({"attributes": [{"name": "x", "type": "numeric", "min": 0, "max": 100,
...                                       "quantiles": [10, 20, 30]}], "label": {"name": "y", "values": [0, 1]}})
>>> m = Marginals.declared(s)
>>> float(m.cdf(np.array([0]), np.array([20.0]))[0])  # half the mass lies below the middle cut point
0.5
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streamdp.privacy.mechanisms import SecureRandom
from streamdp.privacy.noise import geometric_noise
from streamdp.records.schema import Numeric, Schema
from streamdp.validation import check_epsilon, check_integer

__all__ = ["Marginals", "noisy_histograms", "noisy_marginals", "HISTOGRAM_BINS", "NOISE_FLOOR", "NOISE_PRIOR"]

#: Equal-width bins of each numeric attribute's noisy histogram.
HISTOGRAM_BINS = 16
#: A noisy bin weighs its count above this many noise scales (``d / epsilon``); below it, nothing.
NOISE_FLOOR = 1.0
#: Every bin weighs this many noise scales more: where the noise swamps the records the density stays
#: close to uniform, not a few bins the noise happened to lift.
NOISE_PRIOR = 1.0


@dataclass(frozen=True)
class Marginals:
    """Per numeric attribute (schema order) a piecewise-uniform density: ``edges[k]`` increasing from the
    declared minimum to the maximum, ``cum[k]`` the mass below ``edges[k]`` (0 first, 1 last)."""

    edges: tuple[np.ndarray, ...]
    cum: tuple[np.ndarray, ...]

    @classmethod
    def uniform(cls, schema: Schema) -> Marginals:
        """Uniform over each declared range."""
        ranges = _ranges(schema)
        return cls(tuple(np.array(r) for r in ranges), tuple(np.array([0.0, 1.0]) for _ in ranges))

    @classmethod
    def declared(cls, schema: Schema) -> Marginals | None:
        """The densities of the schema's declared ``quantiles`` (uniform where none), or None if no
        attribute declares any."""
        numeric = [a for a in schema.attributes if isinstance(a, Numeric)]
        if not any(a.quantiles for a in numeric):
            return None
        edges, cum = [], []
        for a in numeric:
            cuts = a.quantiles or ()
            edges.append(np.array([a.min, *cuts, a.max]))
            cum.append(np.linspace(0.0, 1.0, len(cuts) + 2))
        return cls(tuple(edges), tuple(cum))

    @classmethod
    def from_weights(cls, schema: Schema, weights: np.ndarray) -> Marginals:
        """Equal-width bins over each declared range weighted by ``weights`` ``(d, bins)`` (non-negative);
        an attribute whose weights are all zero is uniform."""
        edges, cum = [], []
        for (lo, hi), w in zip(_ranges(schema), np.asarray(weights, dtype=np.float64)):
            total = float(w.sum())
            if total <= 0:
                w, total = np.ones_like(w), float(w.size)
            edges.append(np.linspace(lo, hi, w.size + 1))
            c = np.concatenate([[0.0], np.cumsum(w) / total])
            c[-1] = 1.0
            cum.append(c)
        return cls(tuple(edges), tuple(cum))

    def __post_init__(self) -> None:
        # Every attribute's CDF on one axis, attribute k on [2k, 2k + 1] (its range scaled to [0, 1]) and its
        # mass on [2k, 2k + 1] too: one np.interp evaluates (or inverts) the CDFs of any mix of attributes.
        lo = np.array([e[0] for e in self.edges], dtype=np.float64)
        width = np.array([e[-1] - e[0] for e in self.edges], dtype=np.float64)
        axis = np.concatenate([(e - e[0]) / (e[-1] - e[0]) + 2 * k for k, e in enumerate(self.edges)])
        mass = np.concatenate([c + 2 * k for k, c in enumerate(self.cum)])
        object.__setattr__(self, "_flat", (lo, width, axis, mass))

    def cdf(self, q: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Mass below ``x[i]`` of numeric attribute ``q[i]`` (its column among the numeric attributes)."""
        lo, width, axis, mass = self._flat  # type: ignore[attr-defined]
        z = np.clip((np.asarray(x, dtype=np.float64) - lo[q]) / width[q], 0.0, 1.0) + 2 * q
        return np.interp(z, axis, mass) - 2 * q

    def sample(self, q: np.ndarray, lo: np.ndarray, hi: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """A threshold of attribute ``q[i]`` in ``[lo[i], hi[i]]`` drawn from its density restricted to that
        range (uniform in the range where the density puts no mass there)."""
        u = rng.random(np.shape(q))
        a, b = self.cdf(q, lo), self.cdf(q, hi)
        # the inverse of a piecewise-linear CDF; a flat stretch (an empty bin) is hit with probability 0
        start, width, axis, mass = self._flat  # type: ignore[attr-defined]
        z = np.interp(np.clip(a + u * (b - a), 0.0, 1.0) + 2 * q, mass, axis) - 2 * q
        drawn = start[q] + z * width[q]
        out = np.where(b - a > 1e-12, drawn, lo + u * (hi - lo))  # no mass in the range: uniform
        return np.clip(out, lo, hi)


def _ranges(schema: Schema) -> list[tuple[float, float]]:
    return [(a.min, a.max) for a in schema.attributes if isinstance(a, Numeric)]


def noisy_histograms(
    X: np.ndarray, schema: Schema, epsilon: float, rng: SecureRandom, bins: int = HISTOGRAM_BINS
) -> np.ndarray:
    """The ``epsilon``-DP release: each numeric attribute's histogram of the encoded records ``X``
    (:meth:`Schema.encode`) over ``bins`` equal-width bins of its declared range, two-sided geometric noise at
    ``epsilon / d`` on every bin; integers of shape ``(d, bins)`` (module docstring: the proof sketch)."""
    check_epsilon(epsilon)
    check_integer(bins, "bins", low=1, high=1 << 16)
    num = np.flatnonzero(~schema.is_categorical)
    if num.size == 0:
        raise ValueError("noisy_marginals: the schema has no numeric attribute")
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != schema.n_attributes:
        raise ValueError(f"noisy_marginals: X must be encoded records of shape (n, {schema.n_attributes})")
    ranges = np.array(_ranges(schema))
    pos = (X[:, num] - ranges[:, 0]) / (ranges[:, 1] - ranges[:, 0]) * bins
    b = np.clip(np.floor(np.nan_to_num(pos, nan=bins / 2)), 0, bins - 1).astype(np.int64)  # clamped, as encoded
    counts = np.stack([np.bincount(b[:, j], minlength=bins) for j in range(num.size)]).astype(np.int64)
    return counts + geometric_noise(counts.shape, epsilon / num.size, rng)


def noisy_marginals(
    X: np.ndarray, schema: Schema, epsilon: float, rng: SecureRandom, bins: int = HISTOGRAM_BINS
) -> Marginals:
    """An ``epsilon``-DP :class:`Marginals` of the encoded records ``X``: :func:`noisy_histograms`, then
    densities from the noisy counts alone (module docstring); ``epsilon`` is the whole share.

    >>> import numpy as np
    >>> from streamdp.records.schema import Schema
    >>> s = Schema.from_dict({"attributes": [{"name": "x", "type": "numeric", "min": 0, "max": 100}],
    ...                       "label": {"name": "y", "values": [0, 1]}})
    >>> X = np.full((5000, 1), 5.0)  # every record in the first bin
    >>> m = noisy_marginals(X, s, 1.0, SecureRandom())
    >>> bool(m.cdf(np.array([0]), np.array([100 / 16]))[0] > 0.9)
    True
    """
    noisy = noisy_histograms(X, schema, epsilon, rng, bins)
    scale = noisy.shape[0] / epsilon  # the noise scale of every bin: d / epsilon
    return Marginals.from_weights(schema, np.maximum(noisy - NOISE_FLOOR * scale, 0.0) + NOISE_PRIOR * scale)
