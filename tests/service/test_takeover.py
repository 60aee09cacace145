"""A worker restarted after a SIGKILL takes over its predecessor's entries at once, never a live worker's (a real
Redis).

A trial's finding: a worker started again after ``kill -9`` of the one before waited ``claim_idle_ms`` (30 s)
in silence before it merged what the dead one held, and looked hung. Consumer names carry the pid and a tag of
the boot and pid namespace (:func:`~streamdp.service.group.consumer_name`), so a new worker of the same host can
see that the holder's process is gone (:func:`~streamdp.service.group.gone`) and move its entries atomically;
entries of a consumer whose process runs wait ``claim_idle_ms`` as before, and the worker says so.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys

import pytest

from streamdp.records.datasets import load
from streamdp.service import Producer, Worker, create_model
from streamdp.service.connection import connect
from streamdp.service.group import PID_SPACE, gone, holders
from streamdp.service.keys import GROUP, Keys
from streamdp.service.stats import collect

pytestmark = [
    pytest.mark.redis,
    pytest.mark.skipif(not PID_SPACE, reason="needs /proc (the boot id and pid namespace)"),
]
DS = load("congressional-voting")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A worker stand-in in a process of its own: takes one entry as a consumer named by consumer_name(), says its name
# and then waits to be killed (nothing in it ever acks).
_HOLDER = """
import sys, time, redis
from streamdp.service.group import consumer_name
r = redis.Redis.from_url(sys.argv[1])
name = consumer_name()
got = r.xreadgroup(sys.argv[3], name, {sys.argv[2]: ">"}, count=1)
print(name if got else "", flush=True)
time.sleep(600)
"""


@pytest.fixture
def model(redis_url, unique_name):
    """A batch-release model with one batch in its stream, held by a consumer in another process (``holder``)."""
    r = connect(redis_url)
    create_model(r, unique_name, DS.schema, n_trees=2, height=3, epsilon=1.0, release="batch")
    Producer(r, unique_name).push(DS.X[:40], DS.y[:40])
    yield r, unique_name
    r.close()


def _holder(redis_url, name) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, redis_url, Keys(name).records, GROUP],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    consumer = p.stdout.readline().strip()
    assert consumer, "the holder took no entry"
    return p, consumer


def test_a_restarted_worker_takes_a_killed_workers_entries_at_once(redis_url, model, caplog):
    r, name = model
    p, dead = _holder(redis_url, name)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert gone(dead) and r.xpending(Keys(name).records, GROUP)["pending"] == 1
    st = collect(r, name)  # stats see it at once as not live (its process is gone), not after 30 s of silence
    assert (st["consumers"], st["consumers_live"], st["consumers_silent"]) == (1, 0, 1)
    w = Worker(redis_url, name, block_ms=10)  # claim_idle_ms at its default, 30 s
    assert w.config.claim_idle_ms == 30_000
    with caplog.at_level(logging.INFO, logger="streamdp.worker"):
        assert w.step() == 1  # the first step merges the dead worker's batch (it used to return 0 for 30 s)
    st = collect(r, name)
    assert st["version"] == 1 and st["batches_merged"] == 1 and st["pending"] == 0 and st["claimed"] == 1
    assert dead not in {h.name for h in holders(r, Keys(name).records, GROUP)}  # its consumer is removed
    events = [json.loads(m)["event"] for m in caplog.messages]
    assert "worker.claimed" in events and "worker.pending_elsewhere" not in events
    assert w.step() == 0 and collect(r, name)["batches_merged"] == 1  # merged once


def test_a_live_workers_entries_are_not_taken_early_and_the_wait_is_said(redis_url, model, caplog):
    r, name = model
    p, live = _holder(redis_url, name)
    try:
        assert not gone(live) and collect(r, name)["consumers_live"] == 1
        w = Worker(redis_url, name, block_ms=10)
        with caplog.at_level(logging.INFO, logger="streamdp.worker"):
            assert [w.step() for _ in range(3)] == [0, 0, 0]
        pending = r.xpending_range(Keys(name).records, GROUP, "-", "+", 10)
        assert [as_name(e["consumer"]) for e in pending] == [live]  # still the live holder's
        said = [json.loads(m) for m in caplog.messages if "worker.pending_elsewhere" in m]
        assert len(said) == 1 and said[0]["consumers"] == 1 and 0 < said[0]["claimed_within_s"] <= 30
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()


def test_a_running_worker_takes_a_sibling_that_died_since_within_a_claim_interval(redis_url, model):
    """A pool's process killed while its siblings run: they took its entries after claim_idle_ms (30 s), as a
    restarted worker did before; now at their next claim interval."""
    import time

    r, name = model
    p, dead = _holder(redis_url, name)  # a live sibling holding the batch
    w = Worker(redis_url, name, block_ms=10)
    assert w.step() == 0  # running, its start-up look for gone consumers done: the live sibling's batch stays
    p.send_signal(signal.SIGKILL)
    p.wait()
    deadline = time.monotonic() + 10  # the claim interval is 1 s: well within 10 s, far below 30 s
    while w.step() == 0:
        assert time.monotonic() < deadline, "the dead sibling's batch was not taken over"
    st = collect(r, name)
    assert st["batches_merged"] == 1 and st["pending"] == 0
    assert dead not in {h.name for h in holders(r, Keys(name).records, GROUP)}


def test_a_name_of_another_host_or_given_by_hand_is_never_gone():
    me = os.getpid()
    assert not gone(f"otherhost-{me + 10**6}-abcdef-00000000")  # (another boot or pid namespace)
    assert not gone("worker-1") and not gone(f"h-{me}-abcdef-{PID_SPACE}")  # running: this process


def as_name(x) -> str:
    return x.decode() if isinstance(x, bytes) else x
