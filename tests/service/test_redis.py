"""Integration tests of the service on a real Redis (the ``redis_url`` fixture)."""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import pytest
import redis

from streamdp.records.datasets import load
from streamdp.service import Consumer, Keys, Producer, Worker, WorkerPool, create_model, delete_model
from streamdp.service.connection import connect
from streamdp.service.stats import collect

# create_model(not_private=True)'s own NotPrivateWarning, expected here
pytestmark = [
    pytest.mark.redis,
    pytest.mark.filterwarnings("ignore:model .*NOT private:streamdp.privacy.secure_random.NotPrivateWarning"),
]
DS = load("congressional-voting")


@pytest.fixture
def model(redis_url, unique_name):
    yield unique_name
    try:
        delete_model(redis_url, unique_name)
    except KeyError:
        pass


def _wait(cond, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)  # bounded wait on a condition


def test_two_worker_processes_merge_every_batch_exactly_once(redis_url, model):
    create_model(
        redis_url, model, DS.schema, n_trees=4, height=3, epsilon=math.inf, seed=2, release="batch", not_private=True
    )
    p = Producer(redis_url, model, batch_size=7)
    p.push(DS.X, DS.y)  # 63 batches
    p.push(DS.X[:7], DS.y[:7], batch_id=p.last_batch_ids[0])  # a retried XADD of batch 0
    with WorkerPool(model, 2, redis_url, until_drained=True, batch_entries=4, block_ms=100, log_level=30) as pool:
        assert pool.wait(120), "workers did not drain the stream"
    f = Consumer(redis_url, model).latest()
    w = Worker(redis_url, model)
    assert np.array_equal(f.counts, w.spec.noisy_delta(DS.X, DS.y))
    assert f.n_releases == 63
    st = collect(redis_url, model)
    assert st["batches_merged"] == 63 and st["pending"] == 0 and st["lag"] == 0
    assert st["records_merged"] == len(DS.y)


def test_consumer_wait_newer_wakes_on_publish(redis_url, model):
    create_model(redis_url, model, DS.schema, n_trees=3, height=3, epsilon=1.0, release="batch")
    c = Consumer(redis_url, model)
    assert c.wait_newer(0, timeout=0.2) is None  # nothing new: returns after the timeout
    got = {}

    def waiter():
        t0 = time.monotonic()
        got["forest"] = c.wait_newer(0, timeout=20)
        got["waited"] = time.monotonic() - t0

    th = threading.Thread(target=waiter)
    th.start()
    Producer(redis_url, model).push(DS.X[:20], DS.y[:20])
    w = Worker(redis_url, model, block_ms=100)
    _wait(lambda: w.step() > 0, what="the worker to take the batch")
    th.join(20)
    assert got["forest"] is not None and got["forest"].version == 1
    assert got["waited"] < 10
    assert c.latest() is c.latest()  # cached while unchanged


def test_sigterm_stops_a_worker_gracefully(redis_url, model):
    create_model(redis_url, model, DS.schema, n_trees=3, height=3, epsilon=1.0, release="batch")
    pool = WorkerPool(model, 1, redis_url, block_ms=100, log_level=30).start()
    Producer(redis_url, model).push(DS.X[:30], DS.y[:30])
    c = Consumer(redis_url, model)
    assert c.wait_newer(0, timeout=60) is not None
    codes = pool.stop(timeout=20)
    assert codes == [0]
    r = connect(redis_url)
    assert r.xinfo_groups(Keys(model).records)[0]["consumers"] == 0  # left the group cleanly


@pytest.mark.slow
def test_a_worker_stops_when_its_pool_is_killed(redis_url, model):
    """SIGKILL to `streamdp worker` left its worker process running, orphaned, until it was
    killed by hand. Now the worker sees its parent gone, finishes its step and leaves the group."""
    import os
    import signal
    import subprocess
    import sys

    create_model(redis_url, model, DS.schema, n_trees=3, height=3, epsilon=1.0, release="batch")
    code = (
        f"from streamdp.service.pool import run_workers; run_workers({model!r}, 1, {redis_url!r}, block_ms=100, "
        "log_level=40)"
    )
    pool = subprocess.Popen([sys.executable, "-c", code])
    r = connect(redis_url)
    records = Keys(model).records
    consumers = []
    try:
        _wait(
            lambda: consumers.extend(r.xinfo_consumers(records, "workers")) or consumers,
            timeout=60,
            what="the pool's worker to join the group",
        )
        pool.kill()
        pool.wait(10)
        _wait(
            lambda: r.xinfo_groups(records)[0]["consumers"] == 0,
            timeout=20,
            what="the orphaned worker to stop and leave the group",
        )
    finally:
        pool.kill()
        for c in consumers:  # (the consumer's name holds its pid: an orphan left by a failure is not kept)
            try:
                os.kill(int(c["name"].decode().split("-")[-2]), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass


def _children(pid):
    """The spawned worker processes of ``pid`` (Linux /proc), not multiprocessing's resource tracker."""
    import pathlib

    out = []
    for task in pathlib.Path(f"/proc/{pid}/task").glob("*"):
        for c in (task / "children").read_text().split():
            cmd = pathlib.Path(f"/proc/{c}/cmdline").read_bytes() if pathlib.Path(f"/proc/{c}").exists() else b""
            if b"spawn_main" in cmd and b"resource_tracker" not in cmd:
                out.append(int(c))
    return out


def _gone(pid):
    import pathlib

    status = pathlib.Path(f"/proc/{pid}/status")
    return not status.exists() or "\nState:\tZ" in status.read_text()


@pytest.mark.slow
@pytest.mark.skipif(not __import__("pathlib").Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_a_worker_whose_pool_died_while_it_started_does_not_run(redis_url, model):
    """A pool killed while its worker was still importing left that worker running for
    good (the parent pid it read was already the adopter's). The worker now waits on its parent's sentinel."""
    import subprocess
    import sys

    create_model(redis_url, model, DS.schema, n_trees=3, height=3, epsilon=1.0, release="batch")
    code = (
        f"from streamdp.service.pool import run_workers; run_workers({model!r}, 1, {redis_url!r}, block_ms=100, "
        "log_level=40)"
    )
    pool = subprocess.Popen([sys.executable, "-c", code])
    kids = []
    try:
        _wait(lambda: kids.extend(_children(pool.pid)) or kids, timeout=60, what="the pool to spawn its worker")
        pool.kill()  # the worker is still starting (imports, the model's spec)
        pool.wait(10)
        _wait(lambda: _gone(kids[0]), timeout=60, what="the orphaned worker to stop")
        assert connect(redis_url).xinfo_groups(Keys(model).records)[0]["consumers"] == 0
    finally:
        pool.kill()
        for k in kids:
            try:
                __import__("os").kill(k, 9)
            except ProcessLookupError:
                pass


def test_a_killed_worker_process_is_logged_by_its_pool(redis_url, model, caplog):
    """A worker process killed under `streamdp worker` ended the pool with no word of it."""
    import logging
    import os
    import signal

    create_model(redis_url, model, DS.schema, n_trees=3, height=3, epsilon=1.0, release="batch")
    pool = WorkerPool(model, 1, redis_url, block_ms=100, log_level=40).start()
    try:
        os.kill(pool.procs[0].pid, signal.SIGKILL)
        pool.procs[0].join(20)
        with caplog.at_level(logging.ERROR, logger="streamdp.worker"):
            assert pool.report_deaths(set()) == {0} and pool.report_deaths({0}) == set()
        (rec,) = [r for r in caplog.records if "worker.process_died" in r.getMessage()]
        assert '"exitcode": -9' in rec.getMessage()
    finally:
        pool.stop()


def test_a_pool_restarts_a_killed_process_a_bounded_number_of_times(redis_url, model, monkeypatch):
    """An operator's pool of 2 carried on with 1 process for good after a kill -9 (the pool alive, so no supervisor
    restarted it). A process killed by a signal is restarted, up to MAX_RESTARTS in the window; one stopped with
    SIGTERM or exiting by itself is not."""
    import os
    import signal

    from streamdp.service import pool as pool_mod

    monkeypatch.setattr(pool_mod, "MAX_RESTARTS", 1)
    create_model(redis_url, model, DS.schema, n_trees=3, height=3, epsilon=1.0, release="batch")
    pool = WorkerPool(model, 2, redis_url, block_ms=100, log_level=40).start()
    try:
        first = pool.procs[0].pid
        os.kill(first, signal.SIGKILL)
        pool.procs[0].join(20)
        assert pool.restart_killed(pool.report_deaths(set())) == [0]
        assert pool.procs[0].pid != first and pool.procs[0].is_alive()
        os.kill(pool.procs[0].pid, signal.SIGKILL)  # a second kill within the window: over the bound
        pool.procs[0].join(20)
        assert pool.restart_killed({0}) == [] and not pool.procs[0].is_alive()
        monkeypatch.setattr(pool_mod, "MAX_RESTARTS", 5)
        pool.procs[1].terminate()  # SIGTERM: stopped, not restarted
        pool.procs[1].join(20)
        assert pool.restart_killed({1}) == []
    finally:
        pool.stop()


def test_deleting_a_model_stops_its_blocked_worker_cleanly(redis_url, model):
    """A worker blocked in XREADGROUP when its stream is deleted gets UNBLOCKED (Redis 7) or NOGROUP: it stops, it
    does not die with a traceback."""
    create_model(redis_url, model, DS.schema, n_trees=3, height=3, epsilon=1.0, release="batch")
    w = Worker(redis_url, model, block_ms=2000)
    errors = []

    def run():
        try:
            w.run(handle_signals=False)
        except Exception as e:  # noqa: BLE001 (the test reports it)
            errors.append(e)

    th = threading.Thread(target=run, daemon=True)
    th.start()
    _wait(
        lambda: connect(redis_url).xinfo_groups(Keys(model).records)[0]["consumers"] >= 1,
        what="the worker to join the group",
    )
    delete_model(redis_url, model)
    th.join(15)
    assert not th.is_alive() and not errors, errors


def test_model_keys_share_one_cluster_slot(redis_url, model):
    from redis.crc import key_slot

    create_model(redis_url, model, DS.schema, n_trees=2, height=2, epsilon=1.0, release="batch")
    Producer(redis_url, model).push(DS.X[:5], DS.y[:5])
    r = connect(redis_url)
    keys = list(r.scan_iter(match=Keys(model).pattern))
    assert len(keys) >= 5 and len({key_slot(k) for k in keys}) == 1


def test_entry_with_a_non_utf8_field_name_is_dead_lettered_and_the_worker_goes_on(redis_url, model):
    """``XADD stream * "\\xff" x`` (no ``d`` field, a field name that is not UTF-8) used to
    raise UnicodeDecodeError in the worker's decode step and kill every worker that read it."""
    create_model(
        redis_url, model, DS.schema, n_trees=3, height=3, epsilon=math.inf, seed=4, release="batch", not_private=True
    )
    keys = Keys(model)
    r = connect(redis_url)
    p = Producer(redis_url, model)
    p.push(DS.X[:20], DS.y[:20])
    bad = r.xadd(keys.records, {b"\xff": b"x"}).decode()
    r.xadd(keys.records, {b"\xfe\x00": b"\xff", b"e": b"1"})  # several fields, none of them d
    p.push(DS.X[20:50], DS.y[20:50])
    w = Worker(redis_url, model, block_ms=50, batch_entries=2)
    th = threading.Thread(target=w.run, kwargs={"handle_signals": False}, daemon=True)
    th.start()
    try:
        _wait(lambda: Consumer(redis_url, model).version() >= 2, what="the good batches to merge")
        p.push(DS.X[50:80], DS.y[50:80])  # pushed after the bad entries were read
        _wait(lambda: Consumer(redis_url, model).latest().n_releases == 3, what="a later batch to merge")
        assert th.is_alive(), "the worker died on the bad entries"
    finally:
        w.stop()
        th.join(10)
    f = Consumer(redis_url, model).latest()
    assert np.array_equal(f.counts, w.spec.noisy_delta(DS.X[:80], DS.y[:80]))
    dead = r.xrange(keys.dead)
    assert len(dead) == 2
    fields = dict(dead[0][1])
    assert fields[b"entry"].decode() == bad and fields[b"reason"] == b"entry has no 'd' field"
    assert collect(redis_url, model)["pending"] == 0


def test_server_value_limit_is_read_from_the_server(redis_url):
    from streamdp.service.registry import server_value_limit

    r = redis.Redis.from_url(redis_url, socket_timeout=30)
    try:
        expect = int(r.config_get("proto-max-bulk-len")["proto-max-bulk-len"])
    except redis.ResponseError:  # CONFIG not permitted for this user: the documented default
        expect = 512 << 20
    assert server_value_limit(r) == expect


@pytest.mark.slow
def test_a_pool_warns_of_unkeyed_noise_once_not_once_per_process(redis_url, model):
    """`streamdp worker --processes 3` without a noise key logs worker.unkeyed_noise once (the pool's line, with
    its process count), not once per worker process; every process still ran (merged its share)."""
    import json
    import os
    import pathlib
    import subprocess
    import sys

    create_model(redis_url, model, DS.schema, n_trees=3, height=3, epsilon=1.0, release="batch")
    Producer(redis_url, model, batch_size=20).push(DS.X[:200], DS.y[:200])
    env = {k: v for k, v in os.environ.items() if k != "STREAMDP_NOISE_KEY_FILE"}
    env["PYTHONPATH"] = str(pathlib.Path(__file__).resolve().parents[2])
    argv = ["--redis-url", redis_url, "worker", model, "--processes", "3", "--until-drained", "--block-ms", "100"]
    done = subprocess.run(
        [sys.executable, "-m", "streamdp.cli", *argv], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    unkeyed = [e for e in events if e.get("event") == "worker.unkeyed_noise"]
    assert len(unkeyed) == 1, done.stderr
    assert unkeyed[0]["model"] == model and unkeyed[0]["processes"] == 3
    assert Consumer(redis_url, model).latest().n_releases == 10  # the processes ran: every batch merged


def test_a_worker_alone_warns_of_unkeyed_noise(redis_url, model, monkeypatch, caplog):
    """A Worker run by itself (the library) still says its noise is unkeyed; a pool's processes are told not to."""
    import logging

    monkeypatch.delenv("STREAMDP_NOISE_KEY_FILE", raising=False)
    create_model(redis_url, model, DS.schema, n_trees=3, height=3, epsilon=1.0, release="batch")
    for quiet, expected in ((False, 1), (True, 0)):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="streamdp.worker"):
            w = Worker(redis_url, model, block_ms=50, warn_unkeyed=not quiet)
            w.run(until_drained=True)
        assert sum("worker.unkeyed_noise" in m for m in caplog.messages) == expected
