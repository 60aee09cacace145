"""Consumers on fakeredis: cached and old versions, and a model created again."""

from __future__ import annotations

import numpy as np
import pytest

fakeredis = pytest.importorskip("fakeredis")
pytest.importorskip("lupa")

from streamdp.service.consumer import Consumer, VersionNotAvailable  # noqa: E402
from streamdp.service.keys import Keys  # noqa: E402
from streamdp.service.producer import Producer  # noqa: E402
from streamdp.service.registry import create_model, delete_model  # noqa: E402
from tests.service.conftest import DS, _drain, _model, _worker  # noqa: E402


def test_get_of_a_cached_version_checks_the_model_was_not_re_created(r):
    _model(r)
    Producer(r, "m").push(DS.X[:50], DS.y[:50])
    _drain(_worker(r, "m"))
    c = Consumer(r, "m")
    old = c.get(1)
    delete_model(r, "m")
    create_model(r, "m", DS.schema, n_trees=3, height=4, epsilon=1.0, seed=2, release="batch", ledger_budget=2.0)
    Producer(r, "m").push(DS.X[:50], DS.y[:50])
    _drain(_worker(r, "m"))
    new = c.get(1)
    assert new.structure.max_leaves != old.structure.max_leaves and new.shape == Consumer(r, "m").get(1).shape


def test_consumer_get_old_versions_and_validation(r):
    _model(r)
    p = Producer(r, "m")
    w = _worker(r, "m", keep_versions=2)
    for i in range(4):
        p.push(DS.X[i * 10 : (i + 1) * 10], DS.y[i * 10 : (i + 1) * 10])
        w.step(block_ms=10)
    c = Consumer(r, "m")
    assert c.latest().version == 4 and c.get(3).version == 3
    with pytest.raises(VersionNotAvailable):
        c.get(1)
    r.hset(Keys("m").pub_model, mapping={"version": 5, "blob": b"\x81\xa6format\xa3bad", "counts": b"short"})
    with pytest.raises(ValueError):
        c.latest()  # counts unusable: falls back to the blob, which is validated
    with pytest.raises(ValueError):
        Consumer(r, "m").latest()  # a new consumer validates the whole blob


def test_consumer_notices_a_recreated_model(r):
    _model(r)
    c = Consumer(r, "m")
    first = c.latest()
    delete_model(r, "m")
    create_model(r, "m", DS.schema, n_trees=3, height=3, epsilon=1.0, seed=99, ledger_budget=2.0, release="batch")
    again = c.latest()
    assert not np.array_equal(again.structure.feature, first.structure.feature) or not np.array_equal(
        again.structure.threshold, first.structure.threshold
    )


def test_fetched_counts_view_the_published_bytes_and_a_merge_copies_them(r):
    """A fetch copies no counts (a read-only view of the bytes read); merging into the fetched forest copies them
    once and leaves the fetched bytes as they were."""
    _model(r)
    Producer(r, "m").push(DS.X[:50], DS.y[:50])
    _drain(_worker(r, "m"))
    c = Consumer(r, "m")
    f = c.latest()
    assert f.version == 1 and not f._counts.flags.writeable
    before = f.counts.copy()
    one = np.zeros(f.shape, f.counts.dtype)
    one[0, 0, 0] = 1
    f.merge(one)
    assert f._counts.flags.writeable and f.counts[0, 0, 0] == before[0, 0, 0] + 1
    c._cached = None  # (the counts are read again)
    np.testing.assert_array_equal(c.latest().counts, before)


def test_a_new_models_zero_counts_are_no_bytes_and_read_as_zeros(r):
    from streamdp.service.stats import collect

    _model(r)
    k = Keys("m")
    assert r.hget(k.pub_model, "counts") == b"" == r.hget(k.state, "counts")
    f = Consumer(r, "m").latest()
    assert f.version == 0 and f.counts.shape == f.shape and not f.counts.any()
    assert collect(r, "m")["version"] == 0
    Producer(r, "m").push(DS.X[:50], DS.y[:50])
    _drain(_worker(r, "m"))  # the first merge starts from zeros
    g = Consumer(r, "m").latest()
    assert g.version == 1 and len(r.hget(k.pub_model, "counts")) == g.counts.nbytes


def test_only_version_0_may_publish_no_counts(r):
    """A published version past 0 whose counts are empty (truncated, or written by something else) is refused, not
    read as zeros."""
    _model(r)
    Producer(r, "m").push(DS.X[:50], DS.y[:50])
    _drain(_worker(r, "m"))
    r.hset(Keys("m").pub_model, "counts", b"")
    with pytest.raises(ValueError, match="only version 0"):
        Consumer(r, "m").latest()
