"""The per-person bound under release="batch" (fakeredis): each batch's kept records claimed once, before its
noise is drawn; a redelivered or re-claimed batch keeps the same records and moves no count twice."""

from __future__ import annotations

import math

import numpy as np
import pytest

fakeredis = pytest.importorskip("fakeredis")
pytest.importorskip("lupa")

from streamdp.service.codec import Batch  # noqa: E402
from streamdp.service.keys import Keys  # noqa: E402
from streamdp.service.producer import Producer  # noqa: E402
from streamdp.service.registry import create_model  # noqa: E402
from streamdp.service.stats import collect  # noqa: E402
from streamdp.service.stream_worker import Worker  # noqa: E402
from tests.service.test_units import DS, _add_all, _exact, _first_k, _published  # noqa: E402

# create_model(not_private=True)'s own NotPrivateWarning, expected here
pytestmark = pytest.mark.filterwarnings("ignore:model .*NOT private:streamdp.privacy.secure_random.NotPrivateWarning")


def _model(r, k, key_file, epsilon=math.inf):
    return create_model(
        r, "m", DS.schema, n_trees=3, height=3, seed=1, epsilon=epsilon, release="batch", privacy_id="user",
        max_records_per_id=k, noise_key_file=key_file, not_private=math.isinf(epsilon),
    )  # fmt: skip


def test_batch_release_keeps_at_most_k_records_per_person_over_batches_and_redeliveries(r, key_file):
    spec = _model(r, 2, key_file)
    w = Worker(r, "m", block_ms=1, noise_key_file=key_file)
    p = Producer(r, "m")
    rng = np.random.default_rng(3)
    all_idx, all_ids = [], []
    for b in range(4):
        idx = rng.integers(0, len(DS.y), 25)
        ids = [f"user-{int(v)}" for v in rng.integers(0, 10, 25)]
        p.push(DS.X[idx], DS.y[idx], ids=ids, batch_id=f"b{b}")
        p.push(DS.X[idx], DS.y[idx], ids=ids, batch_id=f"b{b}")  # the same batch again: merged once
        all_idx.append(idx)
        all_ids += ids
        _add_all(w)
    idx = np.concatenate(all_idx)
    np.testing.assert_array_equal(_published(r, spec), _exact(spec, idx[_first_k(all_ids, 2)]))
    counts = r.hgetall(Keys("m").ids)
    assert sorted(int(c) for c in counts.values()) == sorted(min(all_ids.count(u), 2) for u in set(all_ids))
    assert not r.keys("*claim*")  # dropped once merged
    # the records past K, counted once per batch in its claim (the redelivered batches not again)
    assert collect(r, "m")["records_dropped_over_k"] == len(all_ids) - len(_first_k(all_ids, 2))


def test_a_worker_killed_after_its_claim_is_not_counted_twice(r, key_file):
    """The claim ran and the delta was drawn, then the worker died before its commit: another worker gets the
    stored claim back (the same records), the ids' counts do not move again, and the batch is merged once."""

    class Died(Exception):
        pass

    def die(point):
        if point == "before_commit":
            raise Died(point)

    _model(r, 3, key_file, epsilon=1.0)
    a = Worker(r, "m", block_ms=1, noise_key_file=key_file, faults=die)
    p = Producer(r, "m")
    ids = [f"u{i % 4}" for i in range(30)]
    p.push(DS.X[:30], DS.y[:30], ids=ids, batch_id="x")
    with pytest.raises(Died):
        _add_all(a)
    before = r.hgetall(Keys("m").ids)
    assert {int(v) for v in before.values()} == {3} and r.exists(Keys("m").claim("x"))
    assert r.exists(a.keys.delta("x"))
    b = Worker(r, "m", block_ms=1, noise_key_file=key_file, claim_idle_ms=0)
    for _ in range(3):
        b.step()
    assert r.hgetall(Keys("m").ids) == before
    assert int(r.hget(Keys("m").stats, "batches_merged")) == 1
    assert int(r.hget(Keys("m").stats, "records_merged")) == 12  # 4 people, 3 records each
    assert int(r.hget(Keys("m").stats, "delta_reused")) == 1  # the same noise, drawn over the same records
    assert not r.exists(Keys("m").claim("x"))


def test_a_batch_merged_before_is_not_claimed_again(r, key_file):
    _model(r, 1, key_file)
    w = Worker(r, "m", block_ms=1, noise_key_file=key_file)
    Producer(r, "m").push(DS.X[:3], DS.y[:3], ids=["a", "b", "c"], batch_id="once")
    _add_all(w)
    before = r.hgetall(Keys("m").ids)
    claims = w.merger.claims  # a claim for the merged batch id finds it merged and moves nothing
    assert claims.claim(Batch("once", DS.X[:3], DS.y[:3], ids=["d", "e", "f"])) == "merged"
    assert r.hgetall(Keys("m").ids) == before


def test_a_claim_whose_counts_keep_moving_says_busy_and_writes_nothing(r, key_file):
    _model(r, 2, key_file)
    w = Worker(r, "m", block_ms=1, noise_key_file=key_file)
    claims = w.merger.claims
    r.hset(Keys("m").ids, claims.ids.hashes(["ann"])[0], 1)  # merged by another worker: this view is behind
    claims.max_retries = 0
    assert claims.claim(Batch("b", DS.X[:2], DS.y[:2], ids=["ann", "bob"])) == "busy"
    assert r.hlen(Keys("m").ids) == 1 and not r.exists(Keys("m").claim("b"))
    claims.max_retries = 1  # the reply carried the current counts: the next choice is current
    assert len(claims.claim(Batch("b", DS.X[:2], DS.y[:2], ids=["ann", "bob"])).y) == 2
    assert sorted(int(v) for v in r.hgetall(Keys("m").ids).values()) == [1, 2]
