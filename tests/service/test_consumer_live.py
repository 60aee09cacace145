"""A worker waiting on an idle stream counts as live (a real Redis).

A soak's finding: on Redis 7.0 ``streamdp stats`` showed both running workers as ``consumers_silent`` (and none
live) after 30 s without new records, because ``XINFO CONSUMERS`` ``idle`` counts from the last read that
delivered something before Redis 7.2. The reader now refreshes it after a read that returned nothing.
"""

from __future__ import annotations

import pytest

from streamdp.records.datasets import load
from streamdp.service import Producer, Worker, create_model, group
from streamdp.service.connection import connect
from streamdp.service.group import holders
from streamdp.service.keys import GROUP, Keys
from streamdp.service.stats import collect

pytestmark = pytest.mark.redis
DS = load("congressional-voting")
BLOCK_MS = 200


def test_a_worker_waiting_on_an_idle_stream_stays_live(redis_url, unique_name, monkeypatch):
    r = connect(redis_url)
    create_model(r, unique_name, DS.schema, n_trees=2, height=3, epsilon=1.0, release="batch")
    Producer(r, unique_name).push(DS.X[:40], DS.y[:40])
    w = Worker(redis_url, unique_name, block_ms=BLOCK_MS)
    while w.step():  # the batch merged
        pass
    # three reads on the idle stream, each blocking BLOCK_MS and delivering nothing: 0.6 s since the last delivery
    assert [w.step() for _ in range(3)] == [0, 0, 0]
    (h,) = holders(r, Keys(unique_name).records, GROUP)
    assert h.idle_ms < BLOCK_MS, "the consumer's idle counts from its last read, empty or not"
    monkeypatch.setattr(group, "LIVE_IDLE_S", 3 * BLOCK_MS / 1000 / 2)  # (shorter than the idle stretch above)
    s = collect(r, unique_name)
    assert (s["consumers_live"], s["consumers_silent"]) == (1, 0)
    r.close()
