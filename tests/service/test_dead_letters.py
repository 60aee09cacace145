"""A producer allowed only XADD cannot fill Redis through the dead-letter stream (the deploy ACL, a real Redis).

The ``producer`` user of ``deploy/users.acl`` pushes large undecodable entries; the ``worker`` user dead-letters
them. Each dead letter is bounded in bytes (a reason and the payload's size; its head and digest only where the
model retains records), the acked entries leave the record stream even when no commit merged anything, and dead
letters follow the model's record retention.
"""

from __future__ import annotations

import logging
import shutil

import msgpack
import pytest

from streamdp.records.datasets import load
from streamdp.service import Keys, Worker, create_model
from streamdp.service.codec import DEAD_DETAIL_MAX, DEAD_HEAD, DEAD_REASON_MAX
from streamdp.service.embedded import EmbeddedRedis
from streamdp.service.retention import get_retention, set_retention
from tests.service.deploy_server import DEPLOY, acl_tool

pytestmark = [
    pytest.mark.redis,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs the redis-server binary"),
]
N_BAD = 40
MIB = 1 << 20
SECRET = b"alice-ssn-078-05-1120"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    pws = {u: f"test-{u}-pw" for u in ("admin", "producer", "worker", "jobworker", "consumer")}
    text, _ = acl_tool().render((DEPLOY / "users.acl").read_text(), pws)
    path = tmp_path_factory.mktemp("acl") / "users.acl"
    path.write_text(text)
    with EmbeddedRedis.start(args=["--aclfile", str(path)]) as emb:
        hp = emb.url.split("//", 1)[1].rsplit("/", 1)[0]
        yield lambda user: f"redis://{user}:{pws[user]}@{hp}/0"


def _bad_payload(i: int) -> bytes:
    """1 MiB that is not a batch (msgpack of a plain string), with a secret inside."""
    return msgpack.packb(SECRET.decode() + "x" * (MIB - 64) + f"{i:04d}")


def _push_bad(url, name: str) -> None:
    import redis

    p = redis.Redis.from_url(url("producer"))
    for i in range(N_BAD):
        p.xadd(Keys(name).records, {"d": _bad_payload(i)})  # XADD is all this user may do


def _memory(admin, key) -> int:
    return int(admin.memory_usage(key, samples=0) or 0)


def test_large_bad_entries_leave_bounded_dead_letters(server, unique_name, caplog):
    import redis

    admin = redis.Redis.from_url(server("admin"))
    name = unique_name
    create_model(server("admin"), name, load("congressional-voting").schema, n_trees=2, height=3, release="batch")
    k = Keys(name)
    try:
        _push_bad(server, name)
        assert _memory(admin, k.records) > N_BAD * MIB  # the raw entries are in Redis until a worker acks them
        w = Worker(server("worker"), name, block_ms=50, batch_entries=4, trim_every=1)
        with caplog.at_level(logging.DEBUG):
            for _ in range(100):  # step, never stop (stopping trims too): the commits alone must trim
                if w.step() == 0 and w.drained():
                    break
        assert admin.xlen(k.dead) == N_BAD
        letters = admin.xrange(k.dead)
        for _, f in letters:
            assert len(f[b"reason"]) <= DEAD_REASON_MAX and len(f[b"detail"]) <= DEAD_DETAIL_MAX
            assert msgpack.unpackb(f[b"detail"]) == {"bytes": len(_bad_payload(0))}  # no retention: no payload bytes
        per_letter = 2 * (DEAD_REASON_MAX + DEAD_DETAIL_MAX)  # with the stream's own overhead
        assert _memory(admin, k.dead) < N_BAD * per_letter
        # dead-letter-only commits trimmed the record stream: the acked 1 MiB entries are gone
        assert admin.xlen(k.records) == 0 and _memory(admin, k.records) < MIB
        assert not any(SECRET.decode() in rec.getMessage() for rec in caplog.records)
    finally:
        admin.delete(*admin.keys(f"sdp:{{{name}}}:*"))
        admin.hdel("sdp:registry", name)


def test_dead_letters_follow_the_record_retention(server, unique_name):
    import redis

    admin = redis.Redis.from_url(server("admin"))
    name = unique_name
    create_model(server("admin"), name, load("congressional-voting").schema, n_trees=2, height=3, release="batch")
    k = Keys(name)
    try:
        set_retention(admin, name, seconds=3600)  # raw records kept an hour: a dead letter keeps the payload's head
        _push_bad(server, name)
        w = Worker(server("worker"), name, block_ms=50, batch_entries=8, trim_every=1)
        w.run(until_drained=True, max_seconds=60, handle_signals=False)
        detail = msgpack.unpackb(admin.xrange(k.dead, count=1)[0][1][b"detail"])
        assert detail["bytes"] == len(_bad_payload(0)) and len(detail["head"]) == DEAD_HEAD
        assert len(detail["sha256"]) == 64
        set_retention(admin, name, records=5)  # the newest 5 records: the newest 5 dead letters
        w.trim()
        assert admin.xlen(k.dead) == 5
        assert admin.hget(k.stats, "dead_trimmed") == str(N_BAD - 5).encode()
    finally:
        admin.delete(*admin.keys(f"sdp:{{{name}}}:*"))
        admin.hdel("sdp:registry", name)


def test_refused_batches_are_marked_once_and_the_marks_follow_the_dead_letters(server, unique_name):
    """The deploy users: the ``producer`` pushes a batch with a refused row twice and another batch, the ``worker``
    writes one dead letter per batch id; trimming the dead letters to the newest one drops the older batch's mark
    (its re-push is refused again, once) and keeps the newer's (its re-push adds nothing)."""
    import redis

    from streamdp.service import Producer

    admin = redis.Redis.from_url(server("admin"))
    name = unique_name
    ds = load("congressional-voting")
    create_model(server("admin"), name, ds.schema, n_trees=2, height=3, release="batch")
    k = Keys(name)
    recs = [dict(zip(ds.schema.names, row), party=lab) for row, lab in zip(ds.X[:10], ds.y[:10])]
    recs[2]["crime"] = SECRET.decode()
    w = Worker(server("worker"), name, block_ms=50, trim_every=10**6)

    def push(source):
        with Producer(server("producer"), name, on_invalid="dead-letter") as p:
            p.push_records(recs, source=source)
        w.run(until_drained=True, max_seconds=60, handle_signals=False)

    try:
        set_retention(admin, name, seconds=3600)
        push("a")
        push("a")
        first_ms = int(admin.xrange(k.dead)[0][0].split(b"-")[0])
        while int(admin.time()[0]) * 1000 + int(admin.time()[1]) // 1000 <= first_ms:  # (the next ms, polled)
            pass
        push("b")
        assert admin.xlen(k.dead) == 2 and admin.zcard(k.dead_batches) == 2
        set_retention(admin, name, records=1)
        assert w.trimmer.trim_dead(get_retention(admin, name)) == 1
        assert admin.xlen(k.dead) == 1 and admin.zcard(k.dead_batches) == 1
        push("b")  # (each run trims to the newest letter when it stops: the counter says what was written)
        assert admin.hget(k.stats, "dead_letters") == b"2"
        push("a")
        assert admin.hget(k.stats, "dead_letters") == b"3" and admin.zcard(k.dead_batches) == 1
        assert not any(SECRET in v for _, f in admin.xrange(k.dead) for v in f.values())
    finally:
        admin.delete(*admin.keys(f"sdp:{{{name}}}:*"))
        admin.hdel("sdp:registry", name)
