"""The stream worker on fakeredis (Lua via lupa): exactly-once merges, dead letters, survival."""

from __future__ import annotations

import json
import logging
import math

import msgpack
import numpy as np
import pytest

fakeredis = pytest.importorskip("fakeredis")
pytest.importorskip("lupa")

from streamdp import PrivateForest  # noqa: E402
from streamdp.service import codec  # noqa: E402
from streamdp.service.consumer import Consumer  # noqa: E402
from streamdp.service.draw_once import noise_from_bytes  # noqa: E402
from streamdp.service.keys import GROUP, Keys  # noqa: E402
from streamdp.service.producer import Producer  # noqa: E402
from streamdp.service.published import forest_from_record  # noqa: E402
from streamdp.service.registry import show_model  # noqa: E402
from streamdp.service.stats import collect  # noqa: E402
from tests.service.conftest import DS, _drain, _model, _worker  # noqa: E402


def _stored_delta(r, name, batch_id):
    from streamdp.service.registry import load_spec

    return noise_from_bytes(r.get(Keys.of(r, name).delta(batch_id)), load_spec(r, name))


def test_public_keys_hold_no_exact_record_count(r):
    f = _model(r)
    Producer(r, "m").push(DS.X[:100], DS.y[:100])
    _drain(_worker(r, "m"))
    k = Keys("m")
    assert r.hget(k.stats, "records_merged") == b"100"  # private counter only
    assert r.hget(k.pub_model, "blob") is None  # a stream model publishes counts on its spec, no blob
    blobs = [r.get(k.spec), r.get(k.pub_version(1))]
    for b in blobs:
        doc = msgpack.unpackb(b, raw=False)
        assert set(doc) <= {
            "format",
            "format_version",
            "schema",
            "params",
            "privacy",
            "structure",
            "counts",
            "version",
            "n_releases",
            "noise_variance",
            "node_variance",
            "created",
        }
        # noise_variance: public (the schedule); node_variance: public (the grown structures, cut by released numbers)
        assert 100 not in (doc["version"], doc["n_releases"])
    assert set(r.hkeys(k.pub_model)) <= {
        b"version",
        b"blob",
        b"updated",
        b"releases",
        b"counts",
        b"model_id",
        b"release",
        b"release_start",
        b"noise_variance",
        b"unit",  # the unit of privacy (public; empty: a record)
    }
    f = forest_from_record(PrivateForest.from_bytes(r.get(k.spec)), r.get(k.pub_version(1)))
    assert r.hget(k.pub_model, "counts") == f.counts.astype("<i8").tobytes()  # the same noisy counts
    assert Consumer(r, "m").latest().counts.tolist() == f.counts.tolist()
    assert show_model(r, "m")["batches_merged"] == 1


# -- worker -------------------------------------------------------------------------------
def test_exact_counts_with_infinite_epsilon(r):
    _model(r, epsilon=math.inf)
    p = Producer(r, "m", batch_size=40)
    p.push(DS.X[:300], DS.y[:300])
    w = _worker(r, "m", batch_entries=3)
    _drain(w)
    spec = w.spec
    expect = spec.noisy_delta(DS.X[:300], DS.y[:300])
    got = Consumer(r, "m").latest()
    assert np.array_equal(got.counts, expect)
    assert got.version == 3 and got.n_releases == 8  # 8 batches, 3 per commit
    assert int(r.hget(Keys("m").stats, "batches_merged")) == 8
    assert r.xpending(Keys("m").records, GROUP)["pending"] == 0


def test_released_counts_are_the_sum_of_stored_deltas(r):
    _model(r)
    p = Producer(r, "m", batch_size=50)
    p.push(DS.X[:200], DS.y[:200])
    bids = p.last_batch_ids
    _drain(_worker(r, "m", batch_entries=2, delta_ttl_s=3600))  # kept an hour after the merge, for this check
    f = Consumer(r, "m").latest()
    total = sum(_stored_delta(r, "m", b) for b in bids)
    assert np.array_equal(f.counts, total) and f.private
    assert all(0 < r.ttl(Keys.of(r, "m").delta(b)) <= 3600 for b in bids)


def test_stored_deltas_are_dropped_at_their_merge_by_default(r):
    """Nothing reads a merged batch's delta again (merged ids are only acked), and each is counts-sized: kept
    7 days before, they filled Redis at high batch rates."""
    _model(r)
    p = Producer(r, "m", batch_size=50)
    p.push(DS.X[:200], DS.y[:200])
    _drain(_worker(r, "m", batch_entries=2))
    assert Consumer(r, "m").latest().n_releases == 4
    assert not r.keys("sdp:{m}:priv:delta*")


def test_redelivered_batch_reuses_its_stored_delta(r):
    _model(r)
    p = Producer(r, "m")
    p.push(DS.X[:50], DS.y[:50])
    bid = p.last_batch_ids[0]
    # worker A reads and noises the batch, then "dies" before its commit
    a = _worker(r, "m", consumer="A")
    resp = r.xreadgroup(GROUP, "A", {Keys("m").records: ">"}, count=1)
    (e,) = a._entries(a.reader.parse(resp))
    a._decode(e)
    drawn = a.merger.delta(e.batch)
    assert np.array_equal(_stored_delta(r, "m", bid), drawn)
    # worker B reclaims it after the idle time (0 here) and merges the STORED delta
    b = _worker(r, "m", consumer="B", claim_idle_ms=0, claim_every_s=0)
    _drain(b)
    assert np.array_equal(Consumer(r, "m").latest().counts, drawn)
    st = collect(r, "m")
    assert st["claimed"] >= 1 and st["delta_reused"] >= 1 and st["batches_merged"] == 1
    # the stale worker's commit is refused and writes nothing
    version = Consumer(r, "m").version()
    a.merger.commit({bid: e}, drawn.copy(), [])
    assert Consumer(r, "m").version() == version
    assert collect(r, "m")["commit_rejections"] >= 1


def test_duplicate_xadd_of_a_batch_is_merged_once(r):
    _model(r, epsilon=math.inf)
    p = Producer(r, "m")
    for _ in range(3):
        p.push(DS.X[:30], DS.y[:30], batch_id="same-batch")  # a producer retrying
    w = _worker(r, "m", batch_entries=2)
    _drain(w)
    p.push(DS.X[:30], DS.y[:30], batch_id="same-batch")  # a late retry after the merge
    _drain(w)
    f = Consumer(r, "m").latest()
    assert np.array_equal(f.counts, w.spec.noisy_delta(DS.X[:30], DS.y[:30]))
    assert f.n_releases == 1
    st = collect(r, "m")
    assert st["batches_merged"] == 1 and st["acked_without_merge"] == 3 and st["pending"] == 0


def test_bad_input_is_dead_lettered_and_good_batches_merge(r):
    _model(r, epsilon=math.inf)
    k = Keys("m")
    p = Producer(r, "m", on_invalid="dead-letter")
    recs = [dict(zip(DS.schema.names, row), party=lab) for row, lab in zip(DS.X[:20], DS.y[:20])]
    recs[3]["crime"] = "perhaps"
    recs[5]["party"] = "whig"
    p.push_records(recs)
    p.push_raw(b"not msgpack at all")
    r.xadd(k.records, {"x": b"no d field"})
    p.push_raw(codec.encode_records([{"crime": "y"}], ["democrat"]))  # every record bad
    p.push(DS.X[20:40], DS.y[20:40])
    w = _worker(r, "m", batch_entries=2)
    _drain(w)
    good = [i for i in range(40) if i not in (3, 5)]
    f = Consumer(r, "m").latest()
    assert np.array_equal(f.counts, w.spec.noisy_delta(DS.X[good], DS.y[good]))
    dead = r.xrange(k.dead)
    reasons = [d[b"reason"].decode() for _, d in dead]
    assert any("2 invalid record(s)" in x and "record 3 (0-based) of the batch" in x for x in reasons)
    assert any("not msgpack" in x for x in reasons)
    assert any("no 'd' field" in x for x in reasons)
    assert any("1 invalid record(s) of 1" in x for x in reasons)
    rows = msgpack.unpackb([d for _, d in dead if b"record 3 " in d[b"reason"]][0][b"detail"])["rows"]
    assert [row for row, _ in rows] == [3, 5] and rows[1][
        1
    ] == "producer: label 'party' has a class not declared in the schema"
    assert collect(r, "m")["pending"] == 0


@pytest.mark.parametrize("release", ["batch", "window"])
def test_a_repushed_batch_is_refused_once_and_another_batch_with_the_same_row_again(r, release, caplog):
    """A trial's finding: each re-push of a file with a bad row added one more dead letter, although its good
    records merged once. A batch id (content, position, source) is refused once, as it is merged once; the same
    bad row in another batch (another --source) is refused again. Both commit scripts (batch, window add).
    The ``worker.dead_letter`` warning follows the letters: once per batch id, not at each re-push (a later
    trial's finding); a re-push says at INFO that its letter was recorded before."""
    kw = {"release_every": 3600} if release == "window" else {}
    _model(r, epsilon=math.inf, release=release, **kw)
    k = Keys("m")
    recs = [dict(zip(DS.schema.names, row), party=lab) for row, lab in zip(DS.X[:20], DS.y[:20])]
    recs[3]["crime"] = "perhaps"
    every_bad = [dict(recs[0], crime="perhaps")]
    w = _worker(r, "m", batch_entries=1)

    def read_all():  # (the hour's window stays open: every entry read and added, none released)
        for _ in range(100):
            if w.step(block_ms=1) == 0 and w.reader.drained():
                return
        raise AssertionError("stream not read")

    def said(event):
        return sum(json.loads(m)["event"] == event for m in caplog.messages if m.startswith("{"))

    with caplog.at_level(logging.INFO, logger="streamdp.worker"):
        for _ in range(3):  # the same pushes three times: the batch ids repeat
            p = Producer(r, "m", on_invalid="dead-letter", batch_size=10)
            p.push_records(recs)
            p.push_records(every_bad, source="all-bad")  # a batch of refused rows alone: nothing merges
            read_all()
    assert said("worker.dead_letter") == 2 and said("worker.dead_letter_recorded_before") == 4
    letters = [f for _, f in r.xrange(k.dead)]
    assert len(letters) == 2 and collect(r, "m")["dead_letters"] == 2
    assert sorted(f[b"reason"].decode().split(";")[0] for f in letters) == [
        "1 invalid record(s) of 1",
        "1 invalid record(s) of 10",
    ]
    assert collect(r, "m")["records_merged"] == 19 and collect(r, "m")["pending"] == 0
    Producer(r, "m", on_invalid="dead-letter", batch_size=10).push_records(recs, source="tuesday")  # new batches
    with caplog.at_level(logging.INFO, logger="streamdp.worker"):
        read_all()
    assert said("worker.dead_letter") == 3
    assert r.xlen(k.dead) == 3 and collect(r, "m")["records_merged"] == 38
    assert all(b"perhaps" not in v for f in (f for _, f in r.xrange(k.dead)) for v in f.values())


def test_poison_entry_is_dead_lettered_after_max_deliveries(r):
    _model(r)
    k = Keys("m")
    Producer(r, "m").push(DS.X[:10], DS.y[:10])
    for i in range(3):  # three workers take it and die
        r.xreadgroup(GROUP, f"dead{i}", {k.records: ">" if i == 0 else "0"}, count=1)
        r.xclaim(k.records, GROUP, f"dead{i}", 0, [r.xrange(k.records)[0][0]]) if i else None
    w = _worker(r, "m", claim_idle_ms=0, claim_every_s=0, max_deliveries=2)
    _drain(w)
    dead = r.xrange(k.dead)
    assert len(dead) == 1 and b"poison" in dead[0][1][b"reason"]
    assert Consumer(r, "m").version() == 0 and collect(r, "m")["poison"] == 1


def test_retained_versions_are_bounded_in_bytes(r):
    """A default Adult model (54-75 MiB of counts a version) kept 20 versions, filling Redis
    within seconds; now no more are kept than fit in ``keep_bytes`` (here two versions' worth), at least one."""
    spec = _model(r)
    p = Producer(r, "m")
    w = _worker(r, "m", keep_versions=20, keep_bytes=2 * spec.counts.nbytes + 1)
    for i in range(5):
        p.push(DS.X[i * 10 : (i + 1) * 10], DS.y[i * 10 : (i + 1) * 10])
        w.step(block_ms=10)
    assert [v for v in range(1, 6) if r.exists(Keys("m").pub_version(v))] == [4, 5]
    assert Consumer(r, "m").get(5).version == 5
    # workers that kept more (an upgrade, a lower bound): a starting worker removes what it would not keep
    w = _worker(r, "m", keep_versions=20, keep_bytes=0)
    for i in range(5, 10):
        p.push(DS.X[i * 10 : (i + 1) * 10], DS.y[i * 10 : (i + 1) * 10])
        w.step(block_ms=10)
    assert [v for v in range(11) if r.exists(Keys("m").pub_version(v))] == [4, 5, 6, 7, 8, 9, 10]
    assert _worker(r, "m", keep_versions=20, keep_bytes=1).keep_versions == 1  # never none
    assert [v for v in range(11) if r.exists(Keys("m").pub_version(v))] == [10]


def test_worker_survives_garbage_fuzz(r):
    _model(r, epsilon=math.inf)
    k = Keys("m")
    rng = np.random.default_rng(0)
    for i in range(200):
        r.xadd(k.records, {"d": rng.bytes(int(rng.integers(0, 64)))})
    Producer(r, "m").push(DS.X[:50], DS.y[:50])
    w = _worker(r, "m", batch_entries=16)
    _drain(w)
    f = Consumer(r, "m").latest()
    assert np.array_equal(f.counts, w.spec.noisy_delta(DS.X[:50], DS.y[:50]))
    assert r.xlen(k.dead) == 200


def test_idle_consumers_without_pending_entries_are_forgotten(r):
    import time

    _model(r)
    k = Keys("m")
    Producer(r, "m", batch_size=10).push(DS.X[:20], DS.y[:20])
    r.xreadgroup(GROUP, "holder", {k.records: ">"}, count=1)  # keeps one pending entry
    r.xgroup_createconsumer(k.records, GROUP, "ghost")  # a SIGKILLed worker with nothing in hand
    w = _worker(r, "m", forget_consumers_s=0.001)
    deadline = time.monotonic() + 5
    gone = []
    while not gone and time.monotonic() < deadline:  # bounded wait: idle must exceed 1 ms
        gone = w.forget_idle_consumers()
    assert gone == ["ghost"]
    names = {c["name"].decode() for c in r.xinfo_consumers(k.records, GROUP)}
    assert "holder" in names and "ghost" not in names


def _worker_failing_once(r, error: Exception):
    """A worker of model "m" (10 records pushed) whose first step raises ``error``; and its step/wait log."""
    _model(r)
    Producer(r, "m").push(DS.X[:10], DS.y[:10])
    w = _worker(r, "m")
    real_step, calls = w.step, []

    def step(*a, **kw):
        calls.append(1)
        if len(calls) == 1:
            raise error
        return real_step(*a, **kw)

    w.step = step
    w._stop.wait = lambda s: calls.append(("waited", s))  # the backoff, without a real wait
    return w, calls


def test_worker_survives_a_lost_connection(r, caplog):
    """...and says when it is back (an operator saw worker.disconnected, then nothing)."""
    import redis as _redis

    w, calls = _worker_failing_once(r, _redis.ConnectionError("Redis went away"))
    with caplog.at_level(logging.WARNING, logger="streamdp.worker"):
        w.run(until_drained=True, handle_signals=False, max_seconds=30)
    assert ("waited", 0.1) in calls and Consumer(r, "m").version() == 1
    events = [json.loads(m)["event"] for m in caplog.messages]
    assert events.count("worker.disconnected") == 1 and events.count("worker.reconnected") == 1, events
    assert events.index("worker.reconnected") > events.index("worker.disconnected")


@pytest.mark.parametrize("refusal", ["OutOfMemoryError", "ReadOnlyError", "ResponseError"])
def test_worker_waits_out_a_redis_that_refuses_writes(r, refusal, caplog):
    """A user's worker died with a traceback when Redis reached maxmemory: it logs, waits and goes on
    (ResponseError: how Redis 6.2 reports it from inside a script)."""
    import redis as _redis

    text = (
        "Error running script (call to f_0): @user_script:9: -OOM command not allowed when used memory > 'maxmemory'."
        if refusal == "ResponseError"
        else "used memory > 'maxmemory'"
    )
    w, calls = _worker_failing_once(r, getattr(_redis.exceptions, refusal)(text))
    with caplog.at_level(logging.ERROR, logger="streamdp.worker"):
        w.run(until_drained=True, handle_signals=False, max_seconds=30)
    assert ("waited", 1.0) in calls and Consumer(r, "m").version() == 1
    assert "worker.redis_refused" in caplog.text


def test_non_utf8_field_name_is_dead_lettered_between_good_batches(r):
    _model(r, epsilon=math.inf)
    p = Producer(r, "m")
    k = Keys("m")
    p.push(DS.X[:10], DS.y[:10])
    r.xadd(k.records, {b"\xff": b"x"})
    p.push(DS.X[10:30], DS.y[10:30])
    w = _worker(r, "m", batch_entries=1)
    _drain(w)
    f = Consumer(r, "m").latest()
    assert f.n_releases == 2 and np.array_equal(f.counts, w.spec.noisy_delta(DS.X[:30], DS.y[:30]))
    (dead,) = r.xrange(k.dead)
    assert dead[1][b"reason"] == b"entry has no 'd' field"
    # the model retains no records: its dead letter keeps the payload's size, nothing of its bytes
    assert msgpack.unpackb(dead[1][b"detail"]) == {"bytes": len(msgpack.packb({b"\xff": b"x"}, use_bin_type=True))}


# -- no record value in logs or dead-letter reasons ------------------
def test_worker_logs_and_dead_letter_reasons_never_contain_record_values(r, caplog):
    import logging

    secret = "alice-ssn-078-05-1120"
    _model(r, epsilon=math.inf)
    k = Keys("m")
    recs = [dict(zip(DS.schema.names, row)) for row in DS.X[:4]]
    recs[1]["crime"] = secret  # an undeclared categorical value
    labels = list(DS.y[:4])
    labels[2] = secret + "-label"  # an undeclared class
    # the producer lists the bad rows (on_invalid="dead-letter"), and a records envelope is encoded by the worker
    Producer(r, "m", on_invalid="dead-letter").push(recs, labels)
    r.xadd(k.records, {"d": codec.encode_records(recs, labels)})
    with caplog.at_level(logging.DEBUG):
        _drain(_worker(r, "m"))
    assert any(rec.name == "streamdp.worker" and "dead_letter" in rec.getMessage() for rec in caplog.records)
    for rec in caplog.records:
        assert secret not in rec.getMessage(), rec.getMessage()
        # nor exact counts ("2 invalid record(s) of 4" in the default log)
        assert "record(s) of" not in rec.getMessage() and '"n":' not in rec.getMessage(), rec.getMessage()
        # nor how many entries a commit merged, acked or sent to the dead letters (exact: stats --exact)
        assert not any(f'"{k}":' in rec.getMessage() for k in ("batches", "acked", "dead")), rec.getMessage()
    reasons = [f[b"reason"].decode() for _, f in r.xrange(k.dead)]
    assert len(reasons) == 2 and not any(secret in x for x in reasons), reasons
    assert (
        "record 1 (0-based) of the batch: producer: attribute 'crime' has a value not declared in the schema"
        in reasons[0]
    )
    assert "record 1 (0-based) of the batch: attribute 'crime' has a value not declared in the schema" in reasons[1]
    details = [msgpack.unpackb(f[b"detail"]) for _, f in r.xrange(k.dead)[:2]]
    assert [row[0] for row in details[1]["rows"]] == [1, 2]
    assert details[1]["rows"][1][1] == "label 'party' has a class not declared in the schema"
    assert not any(secret in why for d in details for _, why in d["rows"])


def test_a_duplicate_batch_whose_twin_merged_first_leaves_no_stored_delta_forever(r):
    """A review: with deltas dropped at their merge, a worker that passed the 'already merged?' check just before
    its twin merged drew a new delta and stored it without a TTL (never published: the commit refuses it as a
    duplicate). Every stored delta now expires if its merge never comes."""
    from streamdp.service.draw_once import PENDING_TTL_S

    _model(r)
    Producer(r, "m").push(DS.X[:20], DS.y[:20], batch_id="twin")
    Producer(r, "m").push(DS.X[:20], DS.y[:20], batch_id="twin")  # a retried XADD: the same batch id twice
    a, b = _worker(r, "m", batch_entries=1), _worker(r, "m", batch_entries=1)
    real = b.merger.sum_deltas
    b.merger.sum_deltas = lambda *x, **kw: (a.step(block_ms=1), real(*x, **kw))[1]  # A merges the twin meanwhile
    b.step(block_ms=1)
    a.step(block_ms=1)
    key = Keys.of(r, "m").delta("twin")
    assert Consumer(r, "m").latest().n_releases == 1
    assert not r.exists(key) or 0 < r.ttl(key) <= PENDING_TTL_S


def test_a_commit_that_lost_the_version_race_is_retried_on_the_new_version(r):
    """Two workers commit at once: the one whose version moved under it retries on the new one (commit_retries),
    so both batches are merged once. The fault-injection run only sees this path when its timing falls so."""
    _model(r, epsilon=math.inf)
    p = Producer(r, "m")
    p.push(DS.X[:30], DS.y[:30], batch_id="first")
    p.push(DS.X[30:60], DS.y[30:60], batch_id="second")
    b = _worker(r, "m", consumer="B", batch_entries=1)
    raced = []

    def race(point: str) -> None:  # B commits the other batch between A's read of the version and A's commit
        if point == "before_commit" and not raced:
            raced.append(1)
            assert b.step(block_ms=10) == 1

    a = _worker(r, "m", consumer="A", batch_entries=1, faults=race)
    assert a.step(block_ms=10) == 1
    st = collect(r, "m")
    assert raced and st["commit_retries"] >= 1 and st["batches_merged"] == 2 and st["version"] == 2
    f = Consumer(r, "m").latest()
    assert f.counts.sum() == 60 * (f.n_trees + f.prior_trees)  # each record once in each tree and stump


def test_a_worker_busy_in_a_long_step_stays_live(r, monkeypatch):
    """A step longer than the live window (a large release or merge) does not show the worker as silent: under
    run, one heartbeat thread refreshes its consumer's idle while a step runs (``stats``' consumers_live,
    ``push``'s no-worker note); a step run by hand, outside run, has none (the test can fail)."""
    import threading
    import time

    from streamdp.service import stream_worker
    from streamdp.service.group import holders

    _model(r)
    monkeypatch.setattr(stream_worker, "LIVE_IDLE_S", 0.3)  # a beat every 0.1 s
    w = _worker(r, "m")
    idle_at_end = []
    handle = w._handle

    def slow(entries):
        time.sleep(0.8)  # the step outlasts the live window of 0.3 s
        idle_at_end.append(max(h.idle_ms for h in holders(r, Keys("m").records, GROUP)))
        handle(entries)

    monkeypatch.setattr(w, "_handle", slow)
    with Producer(r, "m", batch_size=100) as p:
        p.push(DS.X[:100], DS.y[:100])

    def beats() -> int:  # (another test's worker in this process may still run its own)
        return sum(t.name == "streamdp-beat" for t in threading.enumerate())

    before = beats()
    assert w.run(once=True, handle_signals=False) == 1
    assert idle_at_end[0] < 300, idle_at_end  # without the beat: >= 800 (the last read was before the sleep)
    idle_at_end.clear()
    with Producer(r, "m", batch_size=100) as p:
        p.push(DS.X[100:200], DS.y[100:200])
    assert w.step() == 1 and idle_at_end[0] >= 800, idle_at_end  # (by hand: no run, no beat)
    assert beats() == before  # the run's own heartbeat stopped with it
