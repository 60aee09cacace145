"""Redis clients: one place that builds them, with explicit socket timeouts.

Every client gets an explicit socket timeout (:data:`SOCKET_TIMEOUT`; redis-py
8 would default to 5 s). A blocking command (``XREADGROUP BLOCK``, ``BLPOP``,
a pub/sub wait) must run on a client whose socket timeout is longer than its
block time, or the client gives up before the server answers: build such a
client with ``connect(r, block_s=...)`` (or :func:`for_blocking` on a client).

Redis Cluster: a URL naming any node of a cluster gives a
:class:`redis.cluster.RedisCluster` client (it discovers the other nodes and
follows MOVED/ASK redirections), with the same timeouts. The mode is detected
once per URL and process with ``CLUSTER INFO`` (a standalone server answers
"cluster support disabled"; a user not allowed CLUSTER INFO is taken as
standalone), or set explicitly: ``redis+cluster://...`` or ``?cluster=1``
(``?cluster=0`` forces a plain client). Every key of a model carries the hash
tag ``{NAME}`` (:mod:`.keys`), so each script and MULTI touches one slot.

>>> blocking_timeout(1.0)
10.0
>>> blocking_timeout(120)
125.0
>>> cluster_option("redis+cluster://h:7000/0"), cluster_option("redis://h:7000/0?cluster=0&socket_timeout=3")
(('redis://h:7000/0', True), ('redis://h:7000/0?socket_timeout=3', False))
>>> cluster_option("redis://h:6379/0")
('redis://h:6379/0', None)
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
from redis.cluster import ClusterNode, RedisCluster

__all__ = [
    "connect",
    "heal",
    "for_blocking",
    "blocking_timeout",
    "is_cluster",
    "cluster_option",
    "SOCKET_TIMEOUT",
    "CONNECT_TIMEOUT",
]

SOCKET_TIMEOUT = 10.0  # seconds a plain command may take on a loaded machine
CONNECT_TIMEOUT = 10.0
BLOCK_MARGIN = 5.0  # a blocking call's socket timeout exceeds its block time by this much


def blocking_timeout(block_s: float) -> float:
    """The socket timeout for a command that blocks up to ``block_s`` seconds (never below the default)."""
    return max(SOCKET_TIMEOUT, float(block_s) + BLOCK_MARGIN)


def connect(r: redis.Redis | RedisCluster | str | None = None, *, block_s: float = 0.0) -> Any:
    """A client from a client, a URL, or None (``$REDIS_URL``, else localhost), fit to block ``block_s`` seconds.

    A URL gets explicit socket and connect timeouts (a ``socket_timeout`` in
    the URL's query wins) and a cluster client when it names a cluster node.
    A client is returned as is when its socket timeout allows ``block_s``,
    else a copy with a longer timeout (:func:`for_blocking`).
    """
    if isinstance(r, (str, type(None))):
        from streamdp.service.embedded import DEFAULT_URL

        url, cluster = cluster_option(r or os.environ.get("REDIS_URL") or DEFAULT_URL)
        kw: dict[str, Any] = dict(socket_timeout=blocking_timeout(block_s), socket_connect_timeout=CONNECT_TIMEOUT)
        if cluster if cluster is not None else is_cluster(url):
            return RedisCluster.from_url(url, **kw)
        return redis.Redis.from_url(url, **kw, **_driver())
    return for_blocking(r, block_s) if block_s > 0 else r


def _driver() -> dict[str, Any]:
    """The client's library name and version for ``CLIENT SETINFO``, given: left out, redis-py 8 reads them from
    the installed package's metadata (a file parsed) for every client it makes, a new consumer's first call.

    >>> sorted(_driver()) in ([], ["driver_info"])
    True
    """
    try:
        from redis.driver_info import DriverInfo
    except ImportError:  # an older redis-py: its own default
        return {}
    return {"driver_info": DriverInfo(lib_version=redis.__version__)}


_CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
_TRUE, _FALSE = ("1", "yes", "true", "on"), ("0", "no", "false", "off")


def cluster_option(url: str) -> tuple[str, bool | None]:
    """``url`` without streamdp's cluster option, and that option (None: not given, detect).

    ``redis+cluster://`` (``rediss+cluster://``) and ``?cluster=1`` ask for a
    cluster client, ``?cluster=0`` for a plain one. redis-py would pass an
    unknown query option on to its connections, so it is removed here.
    """
    parts = urlsplit(url)
    scheme, cluster = parts.scheme, None
    if scheme in _CLUSTER_SCHEMES:
        scheme, cluster = _CLUSTER_SCHEMES[scheme], True
    query = parse_qsl(parts.query, keep_blank_values=True)
    rest = []
    for k, v in query:
        if k != "cluster":
            rest.append((k, v))
        elif v.lower() in _TRUE + _FALSE:
            cluster = v.lower() in _TRUE
        else:
            raise ValueError(f"the Redis URL option cluster must be 1 or 0, got {v!r}")
    if cluster is None and scheme == parts.scheme:
        return url, None
    return urlunsplit((scheme, parts.netloc, parts.path, urlencode(rest), parts.fragment)), cluster


_MODE: dict[str, bool] = {}


def is_cluster(url: str) -> bool:
    """Whether the server at ``url`` is a Redis Cluster node (``CLUSTER INFO``; cached per URL in this process).

    A server that refuses the command for want of permission (an ACL user
    without ``cluster|info``) is taken as standalone: grant it, or put
    ``?cluster=1`` in the URL. A server that cannot be reached is not
    cached (the caller's client reports the connection error).
    """
    if url not in _MODE:
        kw = dict(socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=CONNECT_TIMEOUT)
        probe = redis.Redis.from_url(url, **kw, **_driver())
        try:
            info = probe.execute_command("CLUSTER INFO")
            _MODE[url] = isinstance(info, dict) and "cluster_state" in info
        except redis.ResponseError:  # "cluster support disabled", NOPERM
            _MODE[url] = False
        except (redis.RedisError, OSError):
            return False
        finally:
            probe.close()
    return _MODE[url]


def for_blocking(r: Any, block_s: float) -> Any:
    """``r``, or a client on the same server whose socket timeout exceeds ``block_s`` (a new connection pool).

    A client without a socket timeout (``None``: wait forever), or one that is
    not a redis-py TCP/unix client (fakeredis, which never times out), is returned unchanged.
    A cluster client gets a new cluster client started from the nodes it knows.
    """
    if isinstance(r, RedisCluster):
        kwargs = {k: v for k, v in r.get_connection_kwargs().items() if k not in _CLUSTER_OWNED}
        current = kwargs.get("socket_timeout")
        if current is None or current > block_s:
            return r
        kwargs["socket_timeout"] = blocking_timeout(block_s)
        nodes = [ClusterNode(n.host, n.port) for n in r.get_nodes()]
        return RedisCluster(startup_nodes=nodes, **kwargs)
    pool = getattr(r, "connection_pool", None)
    cls = getattr(pool, "connection_class", None)
    if cls is None or not cls.__module__.startswith("redis."):
        return r
    # redis-py keeps pool-wide helper objects and the original settings in the kwargs; a new pool makes its own
    kwargs = {k: v for k, v in pool.connection_kwargs.items() if k not in _POOL_OWNED and not k.startswith("orig_")}
    current = cls(**kwargs).socket_timeout  # the effective timeout (defaults included); does not connect
    if current is None or current > block_s:
        return r
    kwargs["socket_timeout"] = blocking_timeout(block_s)
    return redis.Redis(connection_pool=type(pool)(connection_class=cls, **kwargs))


_POOL_OWNED = ("himport_registry", "maint_notifications_pool_handler")
# set by RedisCluster itself on every node's connections (a new client makes its own)
_CLUSTER_OWNED = (
    "redis_connect_func",
    "oss_cluster_maint_notifications_handler",
    "himport_registry",
    "maint_notifications_pool_handler",
)


def heal(r: Any) -> None:
    """After a lost connection, make a Redis Cluster client look for the cluster again: its slot map and default
    node read anew from any node that answers (the failed one last), else another primary as its default node; a
    no-op for a plain client, and errors are left to the next command.

    Why: redis-py asks its default node for the keys of a command whose keys move (``XREADGROUP``) before it
    chooses a node; with that node killed it never looked elsewhere, and a worker retried it until the node
    came back, though its replica had taken over.
    """
    if not isinstance(r, RedisCluster):
        return
    failed = r.get_default_node()
    try:
        r.nodes_manager.initialize(last_failed_node_name=failed.name if failed is not None else None)
    except (redis.RedisError, redis.exceptions.RedisClusterException):
        try:
            r.replace_default_node()
        except (redis.RedisError, redis.exceptions.RedisClusterException):
            pass
