"""Service statistics and their Prometheus text: no exact record count leaves by default."""

from __future__ import annotations

import time

import pytest

fakeredis = pytest.importorskip("fakeredis")
pytest.importorskip("lupa")

from streamdp.service import group  # noqa: E402
from streamdp.service.consumer import Consumer  # noqa: E402
from streamdp.service.keys import GROUP, Keys  # noqa: E402
from streamdp.service.producer import Producer  # noqa: E402
from streamdp.service.registry import create_model  # noqa: E402
from streamdp.service.stats import collect, prometheus_text, public  # noqa: E402
from tests.service.conftest import DS, _drain, _model, _worker  # noqa: E402


def test_stats_and_prometheus_text(r):
    _model(r)
    Producer(r, "m").push(DS.X[:10], DS.y[:10])
    _drain(_worker(r, "m"))
    st = collect(r, "m")
    assert st["batches_merged"] == 1 and st["version"] == 1 and st["lag"] == 0
    text = prometheus_text({"m": st})
    assert 'streamdp_batches_merged_total{model="m"} 1' in text
    assert "# TYPE streamdp_pending gauge" in text


def test_prometheus_exports_no_exact_counts_by_default(r):
    """Exact record counts leave only with exact=True; the default has a noisy estimate."""
    _model(r)
    Producer(r, "m").push(DS.X[:100], DS.y[:100])
    _drain(_worker(r, "m"))
    st = collect(r, "m")
    assert st["records_merged"] == 100  # the worker-side dict keeps everything (private users only)
    assert st["estimated_records"] == Consumer(r, "m").latest().estimated_records()
    text = prometheus_text({"m": st})
    for k in ("records_merged", "dead_letters", "acked_without_merge", "poison", "dead_letter_length"):
        assert f"streamdp_{k}" not in text
    assert 'streamdp_batches_merged_total{model="m"} 1' in text and "streamdp_estimated_records" in text
    exact = prometheus_text({"m": st}, exact=True)
    assert 'streamdp_records_merged_total{model="m"} 100' in exact
    assert "EXACT" in exact.split("streamdp_records_merged_total", 1)[1].splitlines()[0]


def test_batch_level_figures_are_exact_under_window_policies(r):
    """Under release windows, 37 one-record entries exported entries_read_total 37 and
    batches_merged_total 37 by default ("every merged batch is a published release" holds for batch only)."""
    create_model(r, "w", DS.schema, n_trees=2, height=2, epsilon=1.0, seed=1, release="window", release_every=3600)
    p = Producer(r, "w", batch_size=1)
    p.push(DS.X[:37], DS.y[:37])
    w = _worker(r, "w")
    for _ in range(100):  # the stream read (the hour-long window stays open)
        if w.step(block_ms=10) == 0 and w.reader.drained():
            break
    st = collect(r, "w")
    assert st["windowed"] == 1 and st["entries_read"] == 37 and st["batches_merged"] == 37
    text = prometheus_text({"w": st})
    for k in ("entries_read", "batches_merged", "commits", "stream_length", "pending", "lag", "last_commit_seconds"):
        assert f"streamdp_{k}" not in text, k
    assert "streamdp_version" in text and "streamdp_windowed" in text
    exact = prometheus_text({"w": st}, exact=True)
    assert 'streamdp_entries_read_total{model="w"} 37' in exact
    _model(r)  # a batch model: batch-level figures stay public (each batch is a release)
    st_b = collect(r, "m")
    assert st_b["windowed"] == 0 and "streamdp_entries_read_total" in prometheus_text({"m": st_b})


def test_metrics_keep_full_precision():
    """A Unix time printed with :g lost about 10**4 seconds; metrics print at full precision."""
    from streamdp.service.stats import metric_value

    assert metric_value(1795450011.123) == "1795450011.123" and metric_value(12.0) == "12"


def test_stats_tell_live_consumers_from_silent_ones(r, monkeypatch):
    """A trial's finding: after a kill -9 the dead worker still counted in ``consumers`` until forgotten (an hour),
    so stats looked as if a worker ran. ``consumers`` stays the group's total; ``consumers_live`` counts those that
    read or claimed within :data:`LIVE_IDLE_S`, ``consumers_silent`` the others (public, as ``consumers``)."""
    # (30 s in service: a test does not wait that long; Holder.live reads group.LIVE_IDLE_S, which stats imports)
    monkeypatch.setattr(group, "LIVE_IDLE_S", 0.2)
    _model(r)
    Producer(r, "m").push(DS.X[:10], DS.y[:10])
    records = Keys("m").records
    r.xreadgroup(GROUP, "killed", {records: ">"}, count=1)  # took the entry, then was killed
    deadline = time.monotonic() + 10
    while collect(r, "m")["consumers_silent"] < 1:
        r.xreadgroup(GROUP, "live", {records: ">"}, count=1, block=20)  # a live worker keeps reading
        assert time.monotonic() < deadline, "the killed consumer never turned silent"
    r.xreadgroup(GROUP, "live", {records: ">"}, count=1)
    st = public(collect(r, "m"))
    assert (st["consumers"], st["consumers_live"], st["consumers_silent"]) == (2, 1, 1)
    text = prometheus_text({"m": st})
    assert 'streamdp_consumers_silent{model="m"} 1' in text and "workers that died" in text


def test_lag_is_zero_once_every_entry_is_delivered_whatever_redis_counts(r):
    """Once every entry is delivered the lag is 0, even where Redis's own group lag says otherwise (after a kill -9
    and an AOF replay its entries-read counter falls behind, so a lag alert would never clear): the same wrong
    counter, set directly, reads as no lag; entries not yet delivered still count."""
    _model(r)
    with Producer(r, "m", batch_size=5) as p:
        p.push(DS.X[:20], DS.y[:20])
    assert collect(r, "m")["lag"] == 4  # nothing delivered yet
    _drain(_worker(r, "m"))
    stream = Keys("m").records
    top = r.xrevrange(stream, count=1)[0][0]
    r.execute_command("XGROUP", "SETID", stream, GROUP, top, "ENTRIESREAD", 0)  # Redis's counter, as after the replay
    assert r.xinfo_groups(stream)[0]["lag"] == 4  # what Redis says
    assert collect(r, "m")["lag"] == 0
    Producer(r, "m", batch_size=5).push(DS.X[20:30], DS.y[20:30])
    assert collect(r, "m")["lag"] > 0  # undelivered entries are lag again
