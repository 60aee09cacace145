"""Shared fixtures.

``redis_url``: a real Redis: ``$REDIS_URL``, else 127.0.0.1:6379 if it answers, else an
embedded server started for the session. Tests share it, so every test uses its
own key names (``unique_name``) and never FLUSHes. Every test that uses it (directly or
through another fixture) is marked ``redis`` by :func:`pytest_collection_modifyitems`.

``cluster_url``: a three-master Redis Cluster started for the session on loopback
ports (:class:`~streamdp.service.local_cluster.LocalCluster`); skipped where
redis-server or redis-cli is missing.
"""

from __future__ import annotations

import contextlib
import time
import uuid

import pytest

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


@pytest.fixture
def unique_name():
    return f"t-{uuid.uuid4().hex[:12]}"
