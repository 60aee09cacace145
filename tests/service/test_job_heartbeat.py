"""``job status`` of a running job shows its last heartbeat, and says when its worker may be lost (a real Redis):
a worker killed with SIGKILL leaves its job ``running`` until another worker claims it."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time

import pytest

from streamdp.service.connection import connect
from streamdp.service.job_queue import JobQueue
from streamdp.service.job_worker import JobWorker
from tests.service.conftest import _cli

CLAIM_MS = 300  # the killed worker's: it beats every 100 ms, so a heartbeat older than 200 ms is one missed


@pytest.fixture
def r(redis_url):
    return connect(redis_url)


def _child(url: str, q: str, consumer: str | None) -> None:
    """A job worker that SIGKILLs itself inside the job (after the charge, before publishing)."""
    w = JobWorker(connect(url), queue=q, block_ms=50, consumer=consumer, claim_idle_ms=CLAIM_MS)
    w._publish = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
    w.run(once=True, handle_signals=False)


@pytest.mark.parametrize("consumer", [None, "doomed"])  # (None: a name of this host's pid space, provably gone)
def test_a_killed_workers_job_says_its_heartbeat_is_old(r, redis_url, model, queue, consumer):
    q, _ = queue
    jq = JobQueue(r, q)
    jid = jq.submit("private-rdt", model, 0.5, {"n_trees": 2})
    p = mp.get_context("fork").Process(target=_child, args=(redis_url, q, consumer))
    p.start()
    p.join(60)
    assert p.exitcode == -signal.SIGKILL
    deadline = time.monotonic() + 20
    st = jq.status(jid)
    while not st["worker_may_be_lost"] and time.monotonic() < deadline:
        time.sleep(0.02)  # (polling the age, which only grows once the worker is dead)
        st = jq.status(jid)
    assert st["status"] == "running" and st["worker_may_be_lost"], st
    assert st["heartbeat_age_s"] > 2 * CLAIM_MS / 3000 and st["heartbeat_every_s"] == pytest.approx(0.1)
    assert st["claim_idle_s"] == pytest.approx(0.3) and st["worker_gone"] == (consumer is None)
    rc, out = _cli(redis_url, "job", "status", jid, "--queue", q)
    assert rc == 0 and "heartbeat     last " in out and "(its worker beats every 0.1 s)" in out
    if consumer is None:
        assert "its worker's process no longer runs (killed?)" in out
    else:
        assert "older than two heartbeats, so its worker may have stopped" in out
    assert "another job worker retries the job" in out
    rc, out = _cli(redis_url, "job", "list", "--queue", q)
    assert ("worker gone" if consumer is None else "worker may be lost") in out
    # and another worker does retry it, charging nothing more
    w = JobWorker(r, queue=q, block_ms=20, claim_idle_ms=CLAIM_MS, claim_every_s=0.02)
    while jq.status(jid)["status"] == "running" and time.monotonic() < deadline + 20:
        w.step()
    st = jq.status(jid)
    assert st["status"] == "done" and st["attempts"] == 2 and "heartbeat_age_s" not in st


def test_a_live_workers_heartbeat_stays_fresh(r, redis_url, model, queue):
    q, _ = queue
    jq = JobQueue(r, q)
    jid = jq.submit("private-rdt", model, 0.5, {"n_trees": 2})
    slow = JobWorker(r, queue=q, block_ms=20, claim_idle_ms=600)  # beats every 200 ms
    real, release, inside = slow._publish, threading.Event(), threading.Event()

    def publish(*a, **k):
        inside.set()
        release.wait(20)
        return real(*a, **k)

    slow._publish = publish
    t = threading.Thread(target=slow.run, kwargs={"once": True, "handle_signals": False})
    t.start()
    try:
        assert inside.wait(20)
        ages = []
        end = time.monotonic() + 1.5  # several heartbeats
        while time.monotonic() < end:
            st = jq.status(jid)
            assert st["status"] == "running" and not st["worker_may_be_lost"] and not st["worker_gone"], st
            ages.append(st["heartbeat_age_s"])
            time.sleep(0.05)
        assert max(ages) <= 0.4 and st["heartbeat_every_s"] == pytest.approx(0.2)
        rc, out = _cli(redis_url, "job", "status", jid, "--queue", q)
        assert "(its worker beats every 0.2 s)" in out and "may have stopped" not in out
    finally:
        release.set()
        t.join(20)
    assert jq.status(jid)["status"] == "done"
