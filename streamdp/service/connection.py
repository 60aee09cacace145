"""Redis clients: one place that builds them, with explicit socket timeouts.

Every client gets an explicit socket timeout (:data:`SOCKET_TIMEOUT`; redis-py
8 would default to 5 s). A blocking command (``XREADGROUP BLOCK``, ``BLPOP``,
a pub/sub wait) must run on a client whose socket timeout is longer than its
block time, or the client gives up before the server answers: build such a
client with ``connect(r, block_s=...)`` (or :func:`for_blocking` on a client).

>>> blocking_timeout(1.0)
10.0
>>> blocking_timeout(120)
125.0
"""

from __future__ import annotations

import os
from typing import Any

import redis

__all__ = ["connect", "for_blocking", "blocking_timeout", "SOCKET_TIMEOUT", "CONNECT_TIMEOUT"]

SOCKET_TIMEOUT = 10.0    # seconds a plain command may take on a loaded machine
CONNECT_TIMEOUT = 10.0
BLOCK_MARGIN = 5.0       # a blocking call's socket timeout exceeds its block time by this much


def blocking_timeout(block_s: float) -> float:
    """The socket timeout for a command that blocks up to ``block_s`` seconds (never below the default)."""
    return max(SOCKET_TIMEOUT, float(block_s) + BLOCK_MARGIN)


def connect(r: "redis.Redis | str | None" = None, *, block_s: float = 0.0) -> redis.Redis:
    """A client from a client, a URL, or None (``$REDIS_URL``, else localhost), fit to block ``block_s`` seconds.

    A URL gets explicit socket and connect timeouts (a ``socket_timeout`` in
    the URL's query wins). A client is returned as is when its socket timeout
    allows ``block_s``, else a copy with a longer timeout (:func:`for_blocking`).
    """
    if isinstance(r, (str, type(None))):
        from .embedded import DEFAULT_URL

        url = r or os.environ.get("REDIS_URL") or DEFAULT_URL
        return redis.Redis.from_url(url, socket_timeout=blocking_timeout(block_s),
                                    socket_connect_timeout=CONNECT_TIMEOUT)
    return for_blocking(r, block_s) if block_s > 0 else r


def for_blocking(r: redis.Redis, block_s: float) -> redis.Redis:
    """``r``, or a client on the same server whose socket timeout exceeds ``block_s`` (a new connection pool).

    A client without a socket timeout (``None``: wait forever), or one that is
    not a redis-py TCP/unix client (fakeredis, which never times out), is returned unchanged.
    """
    pool = getattr(r, "connection_pool", None)
    cls = getattr(pool, "connection_class", None)
    if cls is None or not cls.__module__.startswith("redis."):
        return r
    # redis-py keeps pool-wide helper objects and the original settings in the kwargs; a new pool makes its own
    kwargs = {k: v for k, v in pool.connection_kwargs.items()
              if k not in _POOL_OWNED and not k.startswith("orig_")}
    current = cls(**kwargs).socket_timeout  # the effective timeout (defaults included); does not connect
    if current is None or current > block_s:
        return r
    kwargs["socket_timeout"] = blocking_timeout(block_s)
    return redis.Redis(connection_pool=type(pool)(connection_class=cls, **kwargs))


_POOL_OWNED = ("himport_registry", "maint_notifications_pool_handler")
