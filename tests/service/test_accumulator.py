"""The window accumulator read back in groups: every add counted once, a bounded read, a vanished window seen."""

from __future__ import annotations

import fakeredis
import numpy as np
import pytest

from streamdp.service.accumulator import AccumulatorGone, acc_counts, joined_cells, read_acc_counts


def _adds(r, key: str, n: int, size: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    want = np.zeros(size, np.int64)
    for i in range(n):
        idx, val = rng.integers(size, size=50), rng.integers(1, 4, size=50)
        np.add.at(want, idx, val)
        r.hset(key, f"b:{i}", joined_cells([(idx, val)]))
    r.hset(key, "7", 5)  # a bare cell (what earlier workers added with HINCRBY)
    want[7] += 5
    return want


@pytest.mark.parametrize("read_bytes", [1, 1000, 1 << 20])
def test_groups_of_any_size_read_every_add_once(read_bytes):
    r = fakeredis.FakeRedis()
    want = _adds(r, "acc", 40, 300)
    calls = []
    hmget = r.hmget
    r.hmget = lambda key, fields: calls.append(len(fields)) or hmget(key, fields)
    got = read_acc_counts(r, "acc", r.hkeys("acc"), (3, 100), read_bytes=read_bytes)
    assert got.shape == (3, 100) and np.array_equal(got.reshape(-1), want)
    assert np.array_equal(got, acc_counts(r.hgetall("acc"), (3, 100)))
    assert sum(calls) == 41
    # each group holds at most read_bytes of adds, or one add alone (50 cells: 800 bytes each; the bare cell 1)
    assert max(calls) == {1: 1, 1000: 2, 1 << 20: 41}[read_bytes]


def test_no_field_is_no_entry():
    assert read_acc_counts(fakeredis.FakeRedis(), "acc", [], (2, 2)) is None


def test_a_field_deleted_meanwhile_says_the_window_was_released():
    r = fakeredis.FakeRedis()
    _adds(r, "acc", 10, 100)
    fields = r.hkeys("acc")
    hmget = r.hmget

    def released_meanwhile(key, group):
        r.delete(key)  # another closer's release deletes the accumulator
        return hmget(key, group)

    r.hmget = released_meanwhile
    with pytest.raises(AccumulatorGone):
        read_acc_counts(r, "acc", fields, (100,), read_bytes=1000)


def test_a_malformed_or_outside_add_is_refused():
    r = fakeredis.FakeRedis()
    r.hset("acc", "b:1", b"x" * 15)
    with pytest.raises(ValueError, match="malformed"):
        read_acc_counts(r, "acc", r.hkeys("acc"), (4,))
    r.hset("acc", "b:1", joined_cells([(np.array([9]), np.array([1]))]))
    with pytest.raises(ValueError, match="outside the forest"):
        read_acc_counts(r, "acc", r.hkeys("acc"), (4,))
