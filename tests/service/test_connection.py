"""Every Redis client has an explicit socket timeout, longer than any block time it is used for."""

from __future__ import annotations

import pytest
import redis

from streamdp.service.connection import SOCKET_TIMEOUT, blocking_timeout, connect, for_blocking


def _timeout(r: redis.Redis) -> float | None:
    pool = r.connection_pool
    return pool.connection_class(
        **{k: v for k, v in pool.connection_kwargs.items() if k in ("host", "port", "socket_timeout")}
    ).socket_timeout


def test_a_url_client_gets_an_explicit_timeout_not_redis_py_s_default():
    r = connect("redis://127.0.0.1:6379/0?cluster=0")
    assert _timeout(r) == blocking_timeout(0) == SOCKET_TIMEOUT > 5.0


def test_a_blocking_client_outlasts_its_block_time():
    for block_s in (0.5, 5, 60, 120):
        r = connect("redis://127.0.0.1:6379/0?cluster=0", block_s=block_s)
        assert _timeout(r) > block_s and _timeout(r) == blocking_timeout(block_s)


def test_a_short_timeout_client_is_replaced_for_a_long_block():
    short = redis.Redis(host="127.0.0.1", port=6379, socket_timeout=1.0)
    longer = for_blocking(short, 60)
    assert longer is not short and _timeout(longer) > 60
    assert for_blocking(longer, 30) is longer  # already long enough: kept


def test_a_client_from_a_url_does_not_parse_redis_pys_package_metadata(monkeypatch):
    """redis-py 8 reads its version from the package's metadata for each client made without one (a file parsed:
    a new consumer's first call paid for it); connect() gives it."""
    import redis.utils

    pytest.importorskip("redis.driver_info")
    calls = []
    monkeypatch.setattr(redis.utils, "get_lib_version", lambda: calls.append(1) or "0")
    r = connect("redis://127.0.0.1:1/0")  # built, never connected
    assert not calls and r.connection_pool.connection_kwargs["driver_info"].lib_version == redis.__version__
