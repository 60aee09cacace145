"""Forgetting (streamdp.release.decay): decayed counts from released deltas, noise bounded forever.

Statistical checks use a normal z bound of 5.0 (two-sided P ~ 5.7e-7 each).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from streamdp.estimation import cell_variance
from streamdp.privacy.mechanisms import SecureRandom
from streamdp.release.continual import Counter, ReleasePolicy
from streamdp.release.decay import (
    DecayedCounts,
    decay_factor,
    decayed_variance,
    max_decay_factor,
    released_records,
    variance_bound,
)

Z = 5.0


def test_without_noise_the_published_counts_are_the_exactly_decayed_sums():
    policy = ReleasePolicy("window", half_life=4.0)
    lam = 0.5 ** (1 / 4)
    c = Counter(policy, (3,), math.inf, SecureRandom())
    gen = np.random.default_rng(0)
    want = np.zeros(3)
    for _ in range(50):
        x = gen.integers(0, 1000, 3)
        want = lam * want + x
        c.add(x)
        c.close()
        np.testing.assert_array_equal(c.published, np.rint(want).astype(np.int64))
    # a record four releases old counts half
    d = DecayedCounts(policy)
    d.update(np.array([16.0]))
    for _ in range(4):
        out = d.update(np.array([0.0]))
    assert out[0] == pytest.approx(8.0)


@pytest.mark.parametrize("unit", ["releases", "records"])
def test_the_decayed_noise_variance_stays_below_its_bound_forever(unit):
    """20,000 cells of pure noise (window deltas at epsilon 1) decayed over 400 releases, half-life 10: the
    empirical variance matches the exact recursion and never passes v / (1 - lam_max^2); without forgetting it
    grows past the bound (the bound is not trivially loose)."""
    eps, n, H = 1.0, 20_000, 10.0
    policy = ReleasePolicy("window", half_life=H, half_life_unit=unit)
    v = cell_variance("geometric", eps)
    bound = variance_bound(policy, v)
    assert bound == pytest.approx(v / (1 - 0.5 ** (2 / H)))
    c = Counter(policy, (n,), eps, SecureRandom())
    plain = Counter(ReleasePolicy("window"), (n,), eps, SecureRandom())
    for t in range(1, 401):
        c.add(np.zeros(n, np.int64))
        c.close()
        plain.add(np.zeros(n, np.int64))
        plain.close()
        if t in (1, 5, 30, 100, 400):
            exact = c.decayed.variance(v)
            assert exact <= bound * (1 + 1e-12)
            e = c.decayed.counts
            sq = e**2
            s2, se = float(sq.mean()), float(sq.std() / math.sqrt(n))
            assert abs(s2 - exact) < Z * se, (t, s2, exact)
            assert s2 < bound + Z * se
    assert float(np.mean(plain.published.astype(float) ** 2)) > 5 * bound  # 400 v without forgetting
    assert c.decayed.variance(v) == pytest.approx(bound, rel=1e-6)  # at 40 half-lives: at the bound


def test_records_half_life_uses_the_released_totals_and_counts_an_idle_release_as_one_record():
    policy = ReleasePolicy("window", half_life=100.0, half_life_unit="records")
    assert decay_factor(policy, records=100.0) == pytest.approx(0.5)
    assert decay_factor(policy, records=-30.0) == decay_factor(policy, records=0.0) == max_decay_factor(policy)
    with pytest.raises(ValueError, match="record count"):
        decay_factor(policy)
    # a forest-shaped delta: 3 trees, each counting the release's ~40 records once
    delta = np.zeros((3, 4, 2))
    delta[:, 0, 0] = [38.0, 41.0, 41.0]
    assert released_records(delta) == pytest.approx(40.0)
    assert released_records(-delta) == 0.0
    d = DecayedCounts(policy)
    d.update(delta)
    d.update(delta)
    assert d.factors[1] == pytest.approx(0.5 ** (40 / 100))
    assert decayed_variance(d.factors, 1.0) == pytest.approx(1 + 0.5 ** (80 / 100))


def test_no_half_life_no_decay():
    with pytest.raises(ValueError, match="no half_life"):
        DecayedCounts(ReleasePolicy("window"))
    with pytest.raises(ValueError, match="no half_life"):
        variance_bound(ReleasePolicy("window"), 1.0)
