"""Stream retention on a real Redis: idle streams trimmed to their window, pending entries kept."""

from __future__ import annotations

import numpy as np
import pytest

from streamdp.service import codec
from streamdp.service.connection import connect
from streamdp.service.job_data import read_model_records
from streamdp.service.keys import GROUP, Keys
from streamdp.service.ledger_store import ledger_keys
from streamdp.service.producer import Producer
from streamdp.service.registry import create_model, delete_model
from streamdp.service.retention import get_retention, set_retention
from streamdp.service.stream_worker import Worker
from tests.service.conftest import VOTES  # noqa: E402


@pytest.fixture
def r(redis_url):
    return connect(redis_url)


# -- retention -------------------------------------------------------------------------------
def _xadd(r, name, ms: int | None = None, n: int = 10) -> str:
    i = np.random.default_rng(ms or 0).integers(0, len(VOTES.y), n)
    env = codec.encode_batch(VOTES.schema, VOTES.X[i], VOTES.y[i])
    return r.xadd(Keys(name).records, {"d": env}, id=f"{ms}-0" if ms else "*").decode()


def test_idle_stream_is_trimmed_to_its_window_without_new_traffic(r, unique_name):
    """Retention must hold when nothing arrives: an idle worker step trims every trim_idle_s."""
    name = unique_name
    create_model(r, name, VOTES.schema, n_trees=2, height=2, epsilon=1.0, release="batch")
    set_retention(r, name, seconds=10**6)  # keep everything while the first worker runs (stopping trims too)
    try:
        sec, _ = r.time()
        old = _xadd(r, name, int(sec) * 1000 - 100_000)
        new = _xadd(r, name)
        lazy = Worker(r, name, trim_every=10**9, trim_idle_s=10**9, block_ms=20)
        lazy.run(until_drained=True, handle_signals=False)
        set_retention(r, name, seconds=75)
        assert lazy.step(block_ms=1) == 0
        assert r.xlen(Keys(name).records) == 2  # not due yet: nothing trimmed
        eager = Worker(r, name, trim_every=10**9, trim_idle_s=0, block_ms=20)
        assert eager.step(block_ms=1) == 0
        assert [e[0].decode() for e in r.xrange(Keys(name).records)] == [new]
        assert old != new
    finally:
        delete_model(r, name)
        r.delete(*ledger_keys(name))


def test_retention_trim_keeps_the_window_and_pending_entries(r, unique_name):
    name = unique_name
    create_model(r, name, VOTES.schema, n_trees=2, height=2, epsilon=1.0, release="batch")
    set_retention(r, name, seconds=10**6)  # keep everything while the worker runs (stopping trims too)
    try:
        sec, _ = r.time()
        now = int(sec) * 1000
        old = [_xadd(r, name, now - 100_000), _xadd(r, name, now - 50_000)]
        new = [_xadd(r, name) for _ in range(4)]
        w = Worker(r, name, trim_every=10**9, block_ms=20)
        w.run(until_drained=True, handle_signals=False)
        ids = lambda: [e[0].decode() for e in r.xrange(Keys(name).records)]  # noqa: E731
        assert ids() == old + new  # nothing trimmed yet (trim_every is huge)
        set_retention(r, name, seconds=75)
        assert get_retention(r, name).seconds == 75.0
        w.trim()
        assert ids() == old[1:] + new  # 100 s old is out of the 75 s window
        set_retention(r, name, seconds=75, records=3)
        w.trim()
        assert ids() == new[1:]  # both caps: the 3 newest
        assert len(read_model_records(r, name, VOTES.schema)[1]) == 30  # a job sees exactly the window
        # Pending (delivered, unacked) entries are never trimmed, whatever the policy.
        pend = [_xadd(r, name) for _ in range(3)]
        r.xreadgroup(GROUP, "stalled", {Keys(name).records: ">"}, count=3)
        set_retention(r, name, records=1)
        w.trim()
        assert ids() == pend  # the window (1 entry) is inside the pending ones: all 3 kept
        set_retention(r, name)  # default: nothing beyond the unacked entries
        assert get_retention(r, name).keeps_nothing
        w.trim()
        assert ids() == pend
    finally:
        delete_model(r, name)
        r.delete(*ledger_keys(name))


def test_setting_retention_after_merges_says_what_was_not_kept(r, redis_url, unique_name, capsys):
    """Setting retention after the data was merged and ran a job on no record (charged): the command now
    says so (the release count is public; whether records are retained is not, so the job is not refused)."""
    from streamdp.cli import main

    create_model(r, unique_name, VOTES.schema, n_trees=2, height=2, epsilon=1.0, release="batch")
    try:
        u = ["--redis-url", redis_url]
        assert main(u + ["model", "retention", unique_name, "--records", "5"]) == 0  # before any release: no note
        assert "were not kept" not in capsys.readouterr().err
        assert main(u + ["model", "retention", unique_name, "--clear"]) == 0
        Producer(r, unique_name, batch_size=100).push(VOTES.X[:100], VOTES.y[:100])
        Worker(r, unique_name, block_ms=10).run(until_drained=True, handle_signals=False)
        assert main(u + ["model", "retention", unique_name, "--seconds", "60"]) == 0
        assert "records merged before now were not kept" in capsys.readouterr().err
    finally:
        delete_model(r, unique_name)
        r.delete(*ledger_keys(unique_name))
