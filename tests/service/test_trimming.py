"""Stream trimming on fakeredis: merged entries go, pending ones stay."""

from __future__ import annotations

import pytest

fakeredis = pytest.importorskip("fakeredis")
pytest.importorskip("lupa")

from streamdp.service import codec  # noqa: E402
from streamdp.service.keys import GROUP, Keys  # noqa: E402
from streamdp.service.producer import Producer  # noqa: E402
from streamdp.service.stats import collect  # noqa: E402
from tests.service.conftest import DS, _drain, _model, _worker  # noqa: E402


def test_trim_never_drops_pending_entries(r):
    _model(r)
    k = Keys("m")
    p = Producer(r, "m", batch_size=10)
    p.push(DS.X[:30], DS.y[:30])
    w = _worker(r, "m")
    _drain(w)  # three entries merged and acked
    p.push(DS.X[30:60], DS.y[30:60])
    held = r.xreadgroup(GROUP, "slow", {k.records: ">"}, count=1)[0][1][0][0]  # pending, never acked
    for _ in range(5):
        w.step(block_ms=10)
    assert w.trim() == 3  # the acked entries older than the held one
    ids = [e for e, _ in r.xrange(k.records)]
    assert ids[0] == held and len(ids) == 3
    st = collect(r, "m")
    assert st["pending"] == 1


def test_trim_drops_every_merged_entry_by_default_the_last_one_too(r):
    """With no retention set nothing merged is kept: XTRIM MINID keeps the entry equal to MINID, so the worker
    trims past the last delivered entry (it used to keep the last merged batch's raw records forever)."""
    _model(r)
    k = Keys("m")
    Producer(r, "m", batch_size=10).push(DS.X[:30], DS.y[:30])
    w = _worker(r, "m")
    _drain(w)
    w.trim()
    assert r.xlen(k.records) == 0
    Producer(r, "m", batch_size=10, dedup=False).push(DS.X[:10], DS.y[:10])
    w.run(until_drained=True, handle_signals=False)  # stopping trims too
    assert r.xlen(k.records) == 0


def test_a_worker_of_a_deleted_model_trims_nothing_and_logs_no_failure(r, caplog):
    """A worker stopping after its model was deleted trims at its stop: the stream is gone, which is no
    failure (it logged ``worker.trim_failed``, 'no such key', as if Redis had refused)."""
    import logging

    from streamdp.service.registry import delete_model

    _model(r)
    Producer(r, "m", batch_size=10).push(DS.X[:30], DS.y[:30])
    w = _worker(r, "m")
    _drain(w)
    delete_model(r, "m")
    with caplog.at_level(logging.WARNING, logger="streamdp.worker"):
        assert w.trim() == 0
    assert not [x for x in caplog.records if "trim_failed" in x.getMessage()]


def test_entries_with_ids_ahead_of_the_clock_do_not_outlive_a_time_retention(r):
    """A producer's XADD with an explicit id 23 h ahead kept its records a day past a 1 s
    retention (MINID trimming goes by id) and the stats alarm (a day ahead) stayed 0. Merged entries ahead of the
    clock are deleted where retention is bounded in time, and the alarm is at a minute."""
    import time

    from streamdp.service.retention import set_retention

    _model(r)
    k = Keys("m")
    set_retention(r, "m", seconds=1)
    Producer(r, "m", batch_size=10).push(DS.X[:10], DS.y[:10])
    ahead = int(time.time() * 1000) + 23 * 3600 * 1000
    entry = r.xrange(k.records, count=1)[0][1]
    r.xadd(k.records, {b"d": codec.encode_batch(DS.schema, DS.X[10:20], DS.y[10:20])}, id=f"{ahead}-0")
    assert collect(r, "m")["stream_ids_blocked"] == 1
    w = _worker(r, "m")
    _drain(w)
    assert collect(r, "m")["records_merged"] == 20  # both batches merged
    w.trim()
    assert not r.xrange(k.records, f"{ahead}-0", "+")  # the future entry is gone, not kept 23 h
    assert entry is not None
