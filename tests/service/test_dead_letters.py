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
from streamdp.service.retention import set_retention
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
