"""Deploy/users.acl enforces the privacy contract on a REAL Redis.

A dedicated redis-server is started on a free port with ``--aclfile`` pointing
at a temporary copy of ``deploy/users.acl`` rendered with test passwords by
``deploy/acl_passwords.py`` (the shared server's ACL is never touched). Every
client gets its credentials through the URL (``redis://user:pass@host:port/0``).
"""

from __future__ import annotations

import importlib.util
import math
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
import redis

from streamdp.forest.model import PrivateForest
from streamdp.records.datasets import load
from streamdp.service.connection import connect
from streamdp.service.embedded import EmbeddedRedis

# create_model(not_private=True)'s own NotPrivateWarning, expected here
pytestmark = [
    pytest.mark.filterwarnings("ignore:model .*NOT private:streamdp.privacy.secure_random.NotPrivateWarning"),
    pytest.mark.redis,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs the redis-server binary"),
]

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
USERS = ("admin", "producer", "worker", "jobworker", "consumer")


def _acl_tool():
    spec = importlib.util.spec_from_file_location("acl_passwords", DEPLOY / "acl_passwords.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class AclServer:
    def __init__(self, emb: EmbeddedRedis, passwords: dict[str, str]):
        self.emb, self.passwords = emb, passwords
        self.hostport = emb.url.split("//", 1)[1].rsplit("/", 1)[0]

    def url(self, user: str) -> str:
        return f"redis://{user}:{self.passwords[user]}@{self.hostport}/0"

    def client(self, user: str) -> redis.Redis:
        return connect(self.url(user), block_s=5)  # pub/sub waits below block up to 5 s


@pytest.fixture(scope="module")
def acl(tmp_path_factory):
    tool = _acl_tool()
    pws = {u: f"test-{u}-pw" for u in USERS}
    text, used = tool.render((DEPLOY / "users.acl").read_text(), pws)
    assert set(used) == set(USERS)
    path = tmp_path_factory.mktemp("acl") / "users.acl"
    path.write_text(text)
    with EmbeddedRedis.start(args=["--aclfile", str(path)]) as emb:
        yield AclServer(emb, pws)


@pytest.fixture(scope="module")
def votes():
    return load("congressional-voting")


@pytest.fixture
def model(acl, votes, unique_name):
    """A model created by admin (eps=inf: the released counts are the exact tally)."""
    from streamdp.service.registry import create_model

    create_model(
        acl.url("admin"),
        unique_name,
        votes.schema,
        n_trees=3,
        height=4,
        epsilon=math.inf,
        seed=1,
        release="batch",
        not_private=True,
    )
    return unique_name


def _denied(fn, *args, **kw):
    with pytest.raises(redis.exceptions.NoPermissionError):
        fn(*args, **kw)


def _populate_private(acl, name):
    """Give every private key of the model a value, so a denial is not an empty answer."""
    from streamdp.service.keys import Keys

    k = Keys(name)
    a = acl.client("admin")
    a.xadd(k.records, {"d": b"raw record batch"})
    a.hset(k.state, mapping={"version": 0, "counts": b"\x00" * 8})
    a.set(k.delta("b1"), b"noised delta")
    a.zadd(k.merged, {"b1": 1})
    a.xadd(k.dead, {"entry": "1-0", "reason": "test", "detail": b"raw bad record"})
    a.hset(k.stats, "batches_merged", 1)
    return k


# -- shipped file ------------------------------------------------------------------
def test_shipped_acl_file_loads_and_nobody_can_log_in(tmp_path):
    """The file as shipped is valid Redis ACL syntax and has no usable password."""
    path = tmp_path / "users.acl"
    path.write_text((DEPLOY / "users.acl").read_text())
    with EmbeddedRedis.start(args=["--aclfile", str(path)]) as emb:
        hp = emb.url.split("//", 1)[1].rsplit("/", 1)[0]
        for user in (None, *USERS):
            url = f"redis://{user}:guess@{hp}/0" if user else f"redis://{hp}/0"
            with pytest.raises((redis.AuthenticationError, redis.ResponseError)):
                redis.Redis.from_url(url).ping()


def test_redis_conf_references_the_acl_file_and_never_evicts():
    conf = (DEPLOY / "redis.conf").read_text().splitlines()
    directives = {ln.split()[0]: ln.split()[1:] for ln in conf if ln.strip() and not ln.startswith("#")}
    assert directives["aclfile"][0].endswith("users.acl")
    assert directives["maxmemory-policy"] == ["noeviction"]
    assert directives["appendonly"] == ["yes"]


def test_default_user_is_disabled(acl):
    """``default`` keeps every right (the AOF replays as it) but is off: nobody can authenticate as it."""
    with pytest.raises((redis.AuthenticationError, redis.ResponseError)):
        redis.Redis.from_url(f"redis://{acl.hostport}/0").ping()
    for password in ("", "guess", "test-admin-pw"):
        with pytest.raises((redis.AuthenticationError, redis.ResponseError)):
            redis.Redis.from_url(f"redis://default:{password}@{acl.hostport}/0").ping()
    assert "off" in acl.client("admin").acl_getuser("default")["flags"]
    with pytest.raises(redis.AuthenticationError):
        redis.Redis.from_url(f"redis://consumer:wrong@{acl.hostport}/0").ping()


# -- consumer ----------------------------------------------------------------------
def test_consumer_cannot_touch_private_keys(acl, model):
    k = _populate_private(acl, model)
    c = acl.client("consumer")
    assert c.ping()
    # raw records: no read, no range, no XREAD, no group read (XREADGROUP writes group state)
    _denied(c.xrange, k.records)
    _denied(c.xrevrange, k.records)
    _denied(c.xread, {k.records: "0"})
    _denied(c.xreadgroup, "workers", "spy", {k.records: ">"})
    _denied(c.xreadgroup, "workers", "spy", {k.records: "0"})
    _denied(c.xlen, k.records)
    _denied(c.xinfo_stream, k.records)
    _denied(c.xpending, k.records, "workers")
    # un-noised / merge state, stored deltas, merged ids, dead letters, stats
    _denied(c.hgetall, k.state)
    _denied(c.hget, k.state, "counts")
    _denied(c.get, k.delta("b1"))
    _denied(c.mget, [k.pub_model, k.delta("b1")])  # one private key in a multi-key read is enough
    _denied(c.zrange, k.merged, 0, -1)
    _denied(c.xrange, k.dead)
    _denied(c.hgetall, k.stats)
    # key names would leak batch ids
    _denied(c.keys, "*")
    _denied(c.scan, 0)
    # no writes, no scripts, no forging announcements, no dumps
    _denied(c.hset, k.pub_model, "version", 99)
    _denied(c.set, k.pub_version(99), b"x")
    _denied(c.publish, k.pub_events, "99")
    _denied(c.eval, "return redis.call('GET', KEYS[1])", 1, k.delta("b1"))
    _denied(c.dump, k.pub_model)
    _denied(c.config_get, "*")
    _denied(c.acl_list)


def test_consumer_reads_published_models_and_subscribes(acl, model, votes):
    from streamdp.service.consumer import Consumer
    from streamdp.service.registry import list_models, show_model

    k = _populate_private(acl, model)
    with Consumer(acl.url("consumer"), model) as cons:
        f = cons.latest()
        assert isinstance(f, PrivateForest) and f.version == 0
        assert cons.get(0).version == 0
        assert cons.wait_newer(0, timeout=0.2) is None  # subscribes to pub:events (allowed), times out
    c = acl.client("consumer")
    assert c.get(k.spec) is not None
    assert model in list_models(acl.url("consumer"))
    assert show_model(acl.url("consumer"), model)["version"] == 0
    from streamdp.service.history import read_history

    assert read_history(acl.url("consumer"), model) == []  # the public release history (LRANGE on pub:*)
    ps = c.pubsub()
    ps.subscribe(k.pub_events)
    with pytest.raises((redis.exceptions.NoPermissionError, redis.ResponseError)):
        ps2 = c.pubsub()
        ps2.subscribe("sdp:{%s}:priv:anything" % model)
        ps2.get_message(timeout=1)
    ps.close()


def test_consumer_is_woken_by_a_worker_announcement(acl, model):
    """SUBSCRIBE works for the consumer and PUBLISH for the worker (no polling)."""
    from streamdp.service.keys import Keys

    k = Keys(model)
    c = acl.client("consumer").pubsub()
    c.subscribe(k.pub_events)
    confirm = c.get_message(timeout=5)  # the server has registered the subscription
    assert confirm and confirm["type"] == "subscribe"
    acl.client("worker").publish(k.pub_events, "1")
    got = None
    for _ in range(50):  # bounded
        got = c.get_message(timeout=0.1)
        if got:
            break
    c.close()
    assert got and got["data"] == b"1"


# -- producer ----------------------------------------------------------------------
def test_producer_can_push_but_read_nothing_private(acl, model, votes):
    from streamdp.service.producer import Producer

    k = _populate_private(acl, model)
    with Producer(acl.url("producer"), model) as prod:  # reads the registry summary (the spec is allowed too)
        eid = prod.push(votes.X[:20], votes.y[:20])
        assert isinstance(eid, str)
    assert acl.client("admin").xlen(k.records) == 2
    p = acl.client("producer")
    _denied(p.xrange, k.records)
    _denied(p.xread, {k.records: "0"})
    _denied(p.xreadgroup, "workers", "spy", {k.records: ">"})
    _denied(p.xlen, k.records)
    _denied(p.hgetall, k.pub_model)
    _denied(p.get, k.pub_version(0))
    _denied(p.hgetall, k.state)
    _denied(p.get, k.delta("b1"))
    _denied(p.xrange, k.dead)
    _denied(p.zrange, k.merged, 0, -1)
    _denied(p.xadd, k.dead, {"reason": "forged"})
    _denied(p.xadd, "sdp:{%s}:pub:events" % model, {"v": "1"})
    _denied(p.delete, k.records)
    _denied(p.xtrim, k.records, maxlen=0)
    _denied(p.xdel, k.records, eid)
    _denied(p.publish, k.pub_events, "1")
    _denied(p.keys, "*")


def test_producer_xadd_arguments_are_a_trust_boundary_detected_by_stats(acl, model, votes):
    """ACLs cannot restrict XADD's arguments, so a producer can trim the stream
    (MAXLEN 0) or exhaust its ids (the maximum id). Documented as a trust boundary (deploy/README.md,
    docs/security.md); `streamdp stats` flags both, and the documented repair works."""
    from streamdp.service.keys import GROUP, Keys
    from streamdp.service.producer import Producer
    from streamdp.service.stats import collect, prometheus_text
    from streamdp.service.stream_worker import Worker

    k = Keys(model)
    p = acl.client("producer")
    with Producer(acl.url("producer"), model, batch_size=10) as prod:
        prod.push(votes.X[:40], votes.y[:40])  # normal operation: merged, acked, trimmed by the worker
        Worker(acl.url("worker"), model, block_ms=20, trim_every=1, batch_entries=2).run(
            until_drained=True, max_seconds=60, handle_signals=False
        )
        prod.push(votes.X[:20], votes.y[:20])  # not delivered yet
        st = collect(acl.url("worker"), model)
        assert st["trimmed"] >= 1 and st["lag"] == 2
        assert st["deleted_undelivered"] == 0 and st["stream_ids_blocked"] == 0
        # (1) a trimming XADD deletes the batch no worker has read yet: allowed by the ACL
        p.xadd(k.records, {"d": b"x"}, maxlen=0, approximate=False)
        assert acl.client("admin").xlen(k.records) == 0
        st = collect(acl.url("worker"), model)
        assert st["deleted_undelivered"] == 1
        assert 'streamdp_deleted_undelivered{model="%s"} 1' % model in prometheus_text({model: st})
        # (2) the maximum id: every later push fails
        top = "18446744073709551615-18446744073709551615"
        p.xadd(k.records, {"d": b"x"}, id=top)
        with pytest.raises(redis.ResponseError):
            prod.push(votes.X[:5], votes.y[:5])
        assert collect(acl.url("worker"), model)["stream_ids_blocked"] == 1
    # the repair in deploy/README.md (admin): delete the entry, reset the last id, pushes work again
    a = acl.client("admin")
    a.xdel(k.records, top)
    a.execute_command("XSETID", k.records, "0-1", "MAXDELETEDID", "0-1")
    a.xgroup_setid(k.records, GROUP, "0-1")
    with Producer(acl.url("producer"), model) as prod:
        prod.push(votes.X[:5], votes.y[:5])
    assert collect(acl.url("worker"), model)["stream_ids_blocked"] == 0


def test_window_accumulators_and_tree_state_are_worker_only(acl, model):
    """The release windows' secret state (exact window tallies, tree node sums, stored noise) is never readable
    by the consumer or the producer user, and the worker user can read and write it."""
    from streamdp.service.keys import Keys

    k = Keys(model)
    a = acl.client("admin")
    a.hset(k.acc(1), mapping={"0": 5, "7": 2})
    a.set(k.tree, b"tree state with exact node sums")
    a.set(k.window_delta(1), b"noised window")
    a.set(k.node("0:1:0"), b"noised node")
    secret = [k.acc(1), k.tree, k.window_delta(1), k.node("0:1:0")]
    for user in ("consumer", "producer"):
        c = acl.client(user)
        _denied(c.hgetall, k.acc(1))
        _denied(c.hget, k.acc(1), "0")
        for key in secret[1:]:
            _denied(c.get, key)
        _denied(c.hset, k.acc(1), "0", 999)
        _denied(c.eval, "return redis.call('HGETALL', KEYS[1])", 1, k.acc(1))
    w = acl.client("worker")
    assert w.hgetall(k.acc(1)) == {b"0": b"5", b"7": b"2"} and w.get(k.tree).startswith(b"tree")
    assert w.hincrby(k.acc(1), "0", 1) == 6


# -- worker ------------------------------------------------------------------------
def test_worker_is_confined_to_model_keys(acl, model):
    w = acl.client("worker")
    _denied(w.set, "elsewhere", 1)
    _denied(w.get, "elsewhere")
    _denied(w.flushall)
    _denied(w.flushdb)
    _denied(w.keys, "*")
    _denied(w.config_get, "*")
    _denied(w.hset, "sdp:registry", "x", "y")  # registry and spec are read-only for workers
    _denied(w.set, "sdp:{%s}:spec" % model, b"x")
    _denied(w.eval, "return redis.call('SET', KEYS[1], 1)", 1, "elsewhere")  # scripts run with the caller's ACL
    _denied(w.publish, "some-other-channel", "x")
    _denied(w.acl_setuser, "worker", enabled=True, commands=["+@all"])


# -- job worker ------------------------------------------------------------------------
def test_job_worker_runs_a_job_but_reads_nothing_else_private(acl, model, votes):
    """Admin submits; the jobworker user reads the model's retained records, charges, publishes."""
    from streamdp.service.retention import set_retention

    set_retention(acl.client("admin"), model, records=10**6)  # (a job over a model that keeps nothing is refused)
    import uuid

    from streamdp.service import JobQueue, JobWorker, fetch_model
    from streamdp.service.ledger_store import RedisLedger
    from streamdp.service.producer import Producer

    with Producer(acl.url("producer"), model, batch_size=100) as prod:
        prod.push(votes.X, votes.y)
    RedisLedger(acl.client("admin")).set_budget(model, 5.0)
    q = f"sdp:jobs:t-{uuid.uuid4().hex[:8]}"
    jq = JobQueue(acl.client("admin"), q)
    jid = jq.submit("private-rdt", model, 1.0, {"n_trees": 5, "height": 3})
    jw = acl.client("jobworker")
    assert JobWorker(jw, queue=q, block_ms=50).run(until_drained=True, handle_signals=False) == 1
    st = jq.status(jid)
    assert st["status"] == "done", st
    assert [s.epsilon for s in RedisLedger(acl.client("admin")).spends(model)] == [1.0]
    forest = fetch_model(acl.client("consumer"), st["result"])
    assert set(forest.predict(votes.X[:20])) <= set(votes.schema.classes)

    k = _populate_private(acl, model)
    for key in (k.state, k.delta("b1"), k.merged, k.dead, k.stats):
        _denied(jw.dump, key)
    _denied(jw.hgetall, k.state)
    _denied(jw.get, k.delta("b1"))
    _denied(jw.xrange, k.dead)
    _denied(jw.xadd, k.records, {"d": b"x"})  # records are read-only for job workers
    _denied(jw.set, "sdp:{%s}:spec" % model, b"x")
    _denied(jw.flushall)
    _denied(jw.keys, "*")
    _denied(jw.set, "elsewhere", 1)


def test_job_worker_cannot_overwrite_a_stream_model(acl, model, votes):
    """Job outputs have their own key space; jobworker writes no stream model's keys."""
    from streamdp.service.retention import set_retention

    set_retention(acl.client("admin"), model, records=10**6)  # (a job over a model that keeps nothing is refused)
    import json
    import uuid

    from streamdp.service import JobQueue, JobWorker, fetch_model
    from streamdp.service.consumer import Consumer
    from streamdp.service.keys import JOB_RESULTS, REGISTRY, Keys
    from streamdp.service.ledger_store import RedisLedger
    from streamdp.service.producer import Producer

    k = Keys(model)
    jw = acl.client("jobworker")
    before = acl.client("admin").hgetall(k.pub_model)
    _denied(jw.hset, k.pub_model, "blob", b"forged")
    _denied(jw.hset, k.pub_model, "version", 99)
    _denied(jw.delete, k.pub_model)
    _denied(jw.set, k.pub_version(99), b"forged")
    _denied(jw.hset, REGISTRY, model, json.dumps({"forged": True}))
    _denied(jw.hdel, REGISTRY, model)
    _denied(jw.publish, k.pub_events, "99")
    _denied(jw.eval, "return redis.call('HSET', KEYS[1], 'blob', 'x')", 1, k.pub_model)
    assert acl.client("admin").hgetall(k.pub_model) == before

    # A job still runs and publishes, in sdp:{job:RESULT}:pub:*; consumers and the CLI find it by name.
    with Producer(acl.url("producer"), model, batch_size=100) as prod:
        prod.push(votes.X[:200], votes.y[:200])
    RedisLedger(acl.client("admin")).set_budget(model, 5.0)
    q = f"sdp:jobs:t-{uuid.uuid4().hex[:8]}"
    jq = JobQueue(acl.client("admin"), q)
    jid = jq.submit("private-rdt", model, 1.0, {"n_trees": 3, "height": 3}, result_name=f"{model}-rdt")
    assert JobWorker(jw, queue=q, block_ms=50).run(until_drained=True, handle_signals=False) == 1
    assert jq.status(jid)["status"] == "done"
    res = Keys(f"{model}-rdt", job=True)
    assert acl.client("consumer").hexists(JOB_RESULTS, f"{model}-rdt")
    assert not acl.client("consumer").hexists(REGISTRY, f"{model}-rdt")
    forest = fetch_model(acl.client("consumer"), f"{model}-rdt")
    with Consumer(acl.url("consumer"), f"{model}-rdt") as c:
        assert c.keys.pub_model == res.pub_model
        np.testing.assert_array_equal(c.latest().counts, forest.counts)
    assert jq.result(jid).n_trees == 3
    _denied(acl.client("consumer").hset, res.pub_model, "blob", b"x")


def test_full_pipeline_under_acl_users(acl, model, votes):
    """Producer push -> worker (as user worker) -> consumer latest: counts are the exact tally."""
    from streamdp.service.consumer import Consumer
    from streamdp.service.keys import Keys
    from streamdp.service.producer import Producer
    from streamdp.service.stream_worker import Worker

    X, y = votes.X[:300], votes.y[:300]
    with Producer(acl.url("producer"), model, batch_size=50) as prod:
        ids = prod.push(X, y)
        batch_ids = list(prod.last_batch_ids)
        # a retried XADD of the same batch id: merged once
        prod.push(X[:50], y[:50], batch_id=batch_ids[0])
    assert len(ids) == 6

    consumer = Consumer(acl.url("consumer"), model)
    seen = []

    def watch():
        f = consumer.wait_newer(0, timeout=30)
        seen.append(f)

    t = threading.Thread(target=watch)
    t.start()
    w = Worker(acl.url("worker"), model, block_ms=50, claim_idle_ms=1000, batch_entries=4)
    w.run(until_drained=True, max_seconds=60, handle_signals=False)
    t.join(30)
    assert seen and seen[0] is not None and seen[0].version >= 1

    latest = consumer.latest()
    spec = PrivateForest.from_bytes(acl.client("consumer").get(Keys(model).spec))
    expected = spec.noisy_delta(X, y)  # eps=inf: no noise, exact tally
    assert latest.n_releases == 6
    np.testing.assert_array_equal(latest.counts, expected)
    admin = acl.client("admin")
    assert admin.zcard(Keys(model).merged) == 6
    assert admin.xpending(Keys(model).records, "workers")["pending"] == 0
    consumer.close()


def test_a_worker_catches_up_due_windows_under_its_acl_user(acl, votes, unique_name):
    """A worker behind the clock releases every due window under the shipped worker user (its noise stored,
    then dropped at the release; the lease dropped by its token); consumers read every retained version."""
    from streamdp.service.consumer import Consumer
    from streamdp.service.keys import Keys
    from streamdp.service.producer import Producer
    from streamdp.service.registry import create_model, load_policy
    from streamdp.service.stream_worker import Worker

    create_model(
        acl.url("admin"),
        unique_name,
        votes.schema,
        n_trees=3,
        height=3,
        epsilon=math.inf,
        seed=1,
        release="window",
        release_every=10.0,
        cadence="fixed",  # the clock's windows, every release merged (tests/service/test_cadence.py: the variable
        not_private=True,  # ones, whose closes write the same keys)
    )
    Producer(acl.url("producer"), unique_name).push(votes.X[:60], votes.y[:60])
    w = Worker(acl.url("worker"), unique_name, block_ms=50)
    assert w.step(block_ms=50) > 0  # added into window 1
    start = load_policy(acl.client("admin"), unique_name)[1]
    assert w.closer.tick(start + 5 * 10.0 + 0.001) == 5
    consumer = Consumer(acl.url("consumer"), unique_name)
    assert consumer.latest().version == consumer.latest().n_releases == 5
    spec = PrivateForest.from_bytes(acl.client("consumer").get(Keys(unique_name).spec))
    for v in range(1, 6):  # every window's version, each holding the records (window 1) and no noise (eps inf)
        np.testing.assert_array_equal(consumer.get(v).counts, spec.noisy_delta(votes.X[:60], votes.y[:60]))
    admin = acl.client("admin")
    assert not admin.keys(f"sdp:{{{unique_name}}}:priv:wdelta*") and not admin.keys(
        f"sdp:{{{unique_name}}}:priv:closing*"
    )
    consumer.close()


def test_windows_from_the_released_rate_under_the_acl_users(acl, votes, unique_name):
    """A model with a cadence: its worker releases and leaves out windows under the shipped worker user, and
    consumers read the public schedule."""
    import json

    from streamdp.service.keys import Keys
    from streamdp.service.producer import Producer
    from streamdp.service.registry import create_model, load_policy
    from streamdp.service.stream_worker import Worker

    create_model(
        acl.url("admin"), unique_name, votes.schema, n_trees=3, height=3, epsilon=math.inf, seed=1,
        release="window", release_every=10.0, max_lag=40.0 / 0.9, not_private=True,
    )  # fmt: skip
    Producer(acl.url("producer"), unique_name).push(votes.X[:60], votes.y[:60])
    w = Worker(acl.url("worker"), unique_name, block_ms=50)
    assert w.step(block_ms=50) > 0
    start = load_policy(acl.client("admin"), unique_name)[1]
    assert w.closer.tick(start + 200.0) >= 3  # window 1 merged, the empty ones after it left out
    sched = json.loads(acl.client("consumer").hget(Keys(unique_name).pub_model, "schedule"))
    assert sched["merged"] == 1 and sched["released"] >= 3 and sched["length"] == pytest.approx(40.0)  # 0.9 of max_lag


# -- CLI under the ACL users ---------------------------------------------------------
def _cli(url: str, *argv: str, capsys) -> tuple[int, str, str]:
    from streamdp.cli import main

    capsys.readouterr()
    rc = main(["--redis-url", url, *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_under_acl_users(acl, votes, unique_name, tmp_path, capsys):
    """Create (admin) -> push (producer) -> show/list/get (consumer); stats are private (worker/admin only)."""
    import json

    from streamdp.service.stream_worker import Worker

    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(votes.schema.to_dict()))
    csv = tmp_path / "votes.csv"
    names = votes.schema.names
    csv.write_text(
        ",".join(names + ["party"])
        + "\n"
        + "\n".join(",".join(list(map(str, row)) + [str(lab)]) for row, lab in zip(votes.X[:120], votes.y[:120]))
        + "\n"
    )
    name = unique_name
    rc, _, err = _cli(
        acl.url("admin"),
        "model",
        "create",
        name,
        "--schema",
        str(schema),
        "--trees",
        "3",
        "--height",
        "4",
        "--epsilon",
        "1",
        "--release",
        "batch",
        capsys=capsys,
    )
    assert rc == 0, err
    rc, _, err = _cli(
        acl.url("producer"), "push", name, str(csv), "--label", "party", "--batch-size", "40", capsys=capsys
    )
    assert rc == 0, err
    assert "records wait" not in err  # the producer may not ask whether a worker consumes: push says nothing
    Worker(acl.url("worker"), name, block_ms=50).run(until_drained=True, max_seconds=60, handle_signals=False)
    rc, out, err = _cli(acl.url("worker"), "stats", name, capsys=capsys)
    assert rc == 0, err
    rc, out, err = _cli(acl.url("consumer"), "model", "show", name, capsys=capsys)
    assert rc == 0 and "version" in out, err
    rc, out, err = _cli(acl.url("consumer"), "model", "list", capsys=capsys)
    assert rc == 0 and name in out, err
    rc, out, err = _cli(acl.url("consumer"), "model", "get", name, "-o", str(tmp_path / "m.bin"), capsys=capsys)
    assert rc == 0, err
    assert PrivateForest.from_bytes((tmp_path / "m.bin").read_bytes()).n_releases == 3
    # the private counters are refused to the consumer, with a clear error and exit code 2
    rc, out, err = _cli(acl.url("consumer"), "stats", name, capsys=capsys)
    assert rc == 2 and "permission" in err


def test_cli_errors_do_not_print_the_password(acl, model, capsys):
    rc, out, err = _cli(acl.url("consumer"), "stats", model, capsys=capsys)
    assert rc == 2
    assert acl.passwords["consumer"] not in err + out


# -- TLS: rediss:// URLs carry credentials and CA settings ------------------------------
@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make a test certificate")
def test_tls_urls_with_credentials(tmp_path, votes, unique_name):
    import subprocess
    import time

    from streamdp.service.consumer import Consumer
    from streamdp.service.embedded import _free_port
    from streamdp.service.producer import Producer
    from streamdp.service.registry import create_model

    crt, key = tmp_path / "redis.crt", tmp_path / "redis.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout",
            str(key),
            "-out",
            str(crt),
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    pws = {u: f"tls-{u}-pw" for u in USERS}
    text, _ = _acl_tool().render((DEPLOY / "users.acl").read_text(), pws)
    (tmp_path / "users.acl").write_text(text)
    port = _free_port()
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            "0",
            "--tls-port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
            "--tls-cert-file",
            str(crt),
            "--tls-key-file",
            str(key),
            "--tls-ca-cert-file",
            str(crt),
            "--tls-auth-clients",
            "no",
            "--aclfile",
            str(tmp_path / "users.acl"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def url(user):
            return f"rediss://{user}:{pws[user]}@127.0.0.1:{port}/0?ssl_ca_certs={crt}&ssl_cert_reqs=required"

        deadline = time.monotonic() + 10
        while True:  # bounded wait for the TLS listener
            try:
                if redis.Redis.from_url(url("admin"), socket_connect_timeout=0.5).ping():
                    break
            except (redis.ConnectionError, OSError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        create_model(
            url("admin"),
            unique_name,
            votes.schema,
            n_trees=2,
            height=3,
            epsilon=math.inf,
            seed=1,
            release="batch",
            not_private=True,
        )
        with Producer(url("producer"), unique_name) as p:
            p.push(votes.X[:10], votes.y[:10])
        with Consumer(url("consumer"), unique_name) as c:
            assert c.latest().version == 0
        _denied(redis.Redis.from_url(url("consumer")).xrange, "sdp:{%s}:priv:records" % unique_name)
        with pytest.raises(redis.ConnectionError):  # the CA is checked: an unverified certificate is refused
            redis.Redis.from_url(
                f"rediss://consumer:{pws['consumer']}@127.0.0.1:{port}/0", socket_connect_timeout=2
            ).ping()
    finally:
        proc.terminate()
        proc.wait(10)


def test_per_model_worker_user_from_the_shipped_line(acl, model, votes, unique_name):
    """Deploy/README.md: replacing {*} by {NAME} in the worker line confines a worker to one model."""
    from streamdp.service.registry import create_model
    from streamdp.service.stream_worker import Worker

    line = next(ln for ln in (DEPLOY / "users.acl").read_text().splitlines() if ln.startswith("user worker "))
    rules = line.split()[2:]
    rules = [r.replace("{*}", "{%s}" % model) for r in rules if r != "resetpass"] + [">one-model-pw"]
    admin = acl.client("admin")
    admin.execute_command("ACL", "SETUSER", "worker-one", *rules)
    try:
        other = unique_name + "-other"
        create_model(
            acl.url("admin"),
            other,
            votes.schema,
            n_trees=2,
            height=3,
            epsilon=math.inf,
            seed=1,
            release="batch",
            not_private=True,
        )
        hp = acl.hostport
        url = f"redis://worker-one:one-model-pw@{hp}/0"
        w = redis.Redis.from_url(url)
        _denied(w.hgetall, "sdp:{%s}:priv:state" % other)
        _denied(w.xreadgroup, "workers", "x", {"sdp:{%s}:priv:records" % other: ">"})
        assert w.hgetall("sdp:{%s}:priv:state" % model) is not None
        Worker(url, model, block_ms=20).run(until_drained=True, max_seconds=30, handle_signals=False)
        with pytest.raises(redis.exceptions.NoPermissionError):
            Worker(url, other)
    finally:
        admin.acl_deluser("worker-one")
