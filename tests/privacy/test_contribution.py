"""Per-person contribution bounds: at most K records per privacy id, a uniform sample, hostile ids refused or
handled."""

from __future__ import annotations

import time

import numpy as np
import pytest
from scipy import stats

from streamdp.privacy.contribution import (
    MAX_RECORDS_PER_ID,
    bound_contributions,
    check_unit,
    id_codes,
    per_record_epsilon,
)
from streamdp.privacy.secure_random import NotPrivateWarning, SecureRandom

P_FAIL = 1e-6


def test_at_most_k_per_id_and_every_record_of_a_small_id_kept():
    ids = np.array(["a"] * 10 + ["b"] * 2 + ["c"] * 5 + ["a"] * 3, dtype=object)
    kept = bound_contributions(ids, 3, SecureRandom())
    assert np.all(np.diff(kept) > 0)  # ascending positions, no duplicates
    u, c = np.unique(ids[kept], return_counts=True)
    assert dict(zip(u.tolist(), c.tolist())) == {"a": 3, "b": 2, "c": 3}
    assert set(kept.tolist()) >= {10, 11}  # b's two records are both kept


def test_the_sample_per_id_is_uniform():
    """One id with 6 records and K = 2: each record is kept with probability 1/3 (binomial test per record,
    Bonferroni over the 6 at a fixed failure probability)."""
    ids = np.array([7] * 6)
    trials = 6000
    rng = SecureRandom()
    hits = np.zeros(6, dtype=np.int64)
    for _ in range(trials):
        hits[bound_contributions(ids, 2, rng)] += 1
    assert hits.sum() == 2 * trials
    for h in hits:
        assert stats.binomtest(int(h), trials, 1 / 3).pvalue > P_FAIL / 6


def test_the_sample_draws_from_the_secure_source():
    """Two seeded sources give the same sample; the default source gives different ones across calls."""
    ids = np.zeros(1000, dtype=np.int64)
    with pytest.warns(NotPrivateWarning):
        a = bound_contributions(ids, 10, SecureRandom(3))
        b = bound_contributions(ids, 10, SecureRandom(3))
    assert a.tolist() == b.tolist()
    rng = SecureRandom()
    assert len({tuple(bound_contributions(ids, 10, rng).tolist()) for _ in range(5)}) == 5


def test_hostile_ids_huge_and_not_utf8_are_compared_never_decoded():
    huge = "x" * (4 << 20)
    raw = [b"\xff\xfe\x00", b"\xff\xfe\x00", b"\xc3\x28", huge, huge, huge, 10**40, 10**40]
    kept = bound_contributions(raw, 1, SecureRandom())
    assert sorted({repr(raw[i])[:20] for i in kept}) == sorted({repr(r)[:20] for r in raw})
    assert len(kept) == 4


def test_a_million_distinct_ids_in_one_batch():
    ids = np.array([f"user-{i}" for i in range(1_000_000)], dtype=object)
    t0 = time.perf_counter()
    kept = bound_contributions(ids, 1, SecureRandom())
    assert kept.shape == (1_000_000,) and kept[0] == 0 and kept[-1] == 999_999
    assert time.perf_counter() - t0 < 60  # (a bound that catches a quadratic path, not a benchmark)


def test_records_without_an_id_or_bad_bounds_are_refused():
    with pytest.raises(ValueError, match="record 1 .* no privacy id"):
        id_codes(["a", None, "b"])
    with pytest.raises(ValueError, match="record 0 .* no privacy id"):
        id_codes(np.array([np.nan, 1.0]))
    with pytest.raises(ValueError, match="hashable"):
        id_codes([{"a": 1}])  # a dict is no id
    with pytest.raises(ValueError, match="max_records_per_id needs privacy_id"):
        check_unit(None, 5)
    with pytest.raises(ValueError, match="privacy_id needs max_records_per_id"):
        check_unit("user", None)
    for bad in (0, -1, 2.5, True, MAX_RECORDS_PER_ID + 1):
        with pytest.raises(ValueError, match="max_records_per_id"):
            check_unit("user", bad)
    with pytest.raises(ValueError, match="3 ids for 2 records"):
        id_codes(["a", "b", "c"], 2)


def test_per_record_epsilon_is_epsilon_over_k():
    assert per_record_epsilon(2.0, 4) == 0.5
    assert per_record_epsilon(1.0, 1) == 1.0
