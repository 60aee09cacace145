"""Shared fixtures.

``redis_url``: a real Redis: ``$REDIS_URL``, else 127.0.0.1:6379 if it answers, else an
embedded server started for the session. Tests share it, so every test uses its
own key names (``unique_name``) and never FLUSHes. Every test that uses it (directly or
through another fixture) is marked ``redis`` by :func:`pytest_collection_modifyitems`.

``cluster_url``: a three-master Redis Cluster started for the session on loopback
ports (:class:`~streamdp.service.local_cluster.LocalCluster`); skipped where
redis-server or redis-cli is missing.

``unique_name``: a model name of the test's own; every key of that name on the shared servers the test uses
(``redis_url``, ``cluster_url``) is deleted at teardown by a finalizer, also when the test fails (:func:`purge_name`).
``job_queue``: a job queue of the test's own, deleted with its jobs and their results at teardown.
"""

from __future__ import annotations

import contextlib
import time
import uuid

import pytest
import redis

from streamdp.service.embedded import resolve_redis
from streamdp.service.local_cluster import LocalCluster


@pytest.fixture(autouse=True, scope="session")
def _producer_key_file(tmp_path_factory):
    """Producers key their batch ids by a key file (streamdp.service.producer.producer_id_key): the tests use
    one of their own, never the user's ~/.config/streamdp/producer.key."""
    import os

    from streamdp.service.producer import ENV_PRODUCER_KEY

    old = os.environ.get(ENV_PRODUCER_KEY)
    os.environ[ENV_PRODUCER_KEY] = str(tmp_path_factory.mktemp("producer") / "producer.key")
    yield
    if old is None:
        os.environ.pop(ENV_PRODUCER_KEY, None)
    else:
        os.environ[ENV_PRODUCER_KEY] = old


def pytest_addoption(parser):
    parser.addoption(
        "--perf",
        action="store_true",
        default=False,
        help="assert the wall-clock bounds of the tests marked perf (off by default: timing follows the machine's load)",
    )


class WallClock:
    """``with wall_clock.within(seconds):`` times a block; the bound is asserted only under ``--perf``."""

    def __init__(self, enforce: bool) -> None:
        self.enforce = enforce

    @contextlib.contextmanager
    def within(self, limit: float, clock=time.perf_counter):
        t0 = clock()
        yield
        elapsed = clock() - t0
        if self.enforce:
            assert elapsed < limit, f"took {elapsed:.2f} s, bound {limit} s"


@pytest.fixture
def wall_clock(request) -> WallClock:
    return WallClock(request.config.getoption("--perf"))


def pytest_collection_modifyitems(config, items):
    """Mark ``redis`` every test that uses a real Redis through ``redis_url`` (directly or via a fixture), and
    ``perf`` every test that takes ``wall_clock``."""
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "wall_clock" in names and item.get_closest_marker("perf") is None:
            item.add_marker(pytest.mark.perf)
        if ("redis_url" in names or "cluster_url" in names) and item.get_closest_marker("redis") is None:
            item.add_marker(pytest.mark.redis)


@pytest.fixture(scope="session")
def redis_url():
    try:
        url, emb = resolve_redis()
    except RuntimeError as e:  # pragma: no cover - only on machines with no way to run Redis
        pytest.skip(f"no Redis available: {e}")
    yield url
    if emb is not None:
        emb.stop()


@pytest.fixture(scope="session")
def cluster_url():
    if LocalCluster.missing():
        pytest.skip(f"no Redis Cluster: {LocalCluster.missing()} is not on PATH (apt-get install redis-server)")
    with LocalCluster.start() as c:
        yield c.url


def purge_name(r, name: str) -> int:
    """Delete every key of model ``name`` on client ``r`` (a cluster: every primary): its keys ``sdp:{NAME}:*``
    (ledger included), the batch-job results named ``NAME...`` (``sdp:{job:NAME...}:*``) and its fields in the
    registries. Returns how many keys went. Only for test names (``t-`` + hex: no glob characters)."""
    assert name.startswith("t-") and name[2:].isalnum(), name
    nodes = [n.redis_connection for n in r.get_primaries()] if hasattr(r, "get_primaries") else [r]
    gone = 0
    for node in nodes:
        for pattern in (f"sdp:{{{name}}}:*", f"sdp:{{job:{name}*}}:*"):
            keys = list(node.scan_iter(match=pattern, count=10_000))
            for k in keys:  # one by one: a cluster node refuses a multi-key DEL across slots
                gone += node.delete(k)
    for registry in ("sdp:registry", "sdp:job-results", "sdp:job-names"):
        fields = [f for f in r.hkeys(registry) if f.decode(errors="replace").startswith(name)]
        if fields:
            r.hdel(registry, *fields)
    files = [f for f, src in r.hgetall("sdp:ledger:files").items() if src.decode(errors="replace") == name]
    if files:  # (the dataset files first submitted under this source)
        r.hdel("sdp:ledger:files", *files)
    return gone


def _purge_on(request, fixture: str, name: str) -> None:
    """Register the teardown of ``name``'s keys on the server of ``fixture`` when the test uses it."""
    if fixture not in request.fixturenames:
        return
    url = request.getfixturevalue(fixture)

    def purge():
        from streamdp.service.connection import connect

        client = connect(url)
        try:
            purge_name(client, name)
        except redis.RedisError as e:  # the server may be gone (a test that stopped it): nothing left to clean
            print(f"could not clean the keys of {name}: {e}")
        finally:
            client.close()

    request.addfinalizer(purge)


@pytest.fixture
def unique_name(request):
    """A model name of the test's own, whose keys are deleted at teardown even when the test fails."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    for fixture in ("redis_url", "cluster_url"):
        _purge_on(request, fixture, name)
    return name


@pytest.fixture
def job_queue(request, redis_url):
    """A job queue name of the test's own (``sdp:jobs:t-...``); at teardown, even when the test fails, the queue,
    its index, its jobs and their published results are deleted."""
    from streamdp.service import job_queue as jq
    from streamdp.service.connection import connect
    from streamdp.service.keys import JOB_RESULTS, Keys

    q = f"sdp:jobs:t-{uuid.uuid4().hex[:10]}"

    def purge():
        r = connect(redis_url)
        try:
            for job_id in [i.decode() for i in r.zrange(f"{q}:index", 0, -1)]:
                result = r.hget(jq.job_key(job_id), "result")
                if result:
                    r.hdel(JOB_RESULTS, result.decode())
                    r.hdel(jq.RESULT_NAMES, result.decode())
                    for key in list(r.scan_iter(match=Keys(result.decode(), job=True).prefix + ":*", count=10_000)):
                        r.delete(key)
                r.delete(jq.job_key(job_id))
            r.delete(q, f"{q}:index")
        finally:
            r.close()

    request.addfinalizer(purge)
    return q
