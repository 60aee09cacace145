"""Will a Redis restart replay everything? A check for servers that drop transactions when they reload their AOF.

Redis replays its append-only file (AOF) as the ``default`` user, and EXEC re-checks the ACL of every queued
command, also while the AOF is loading (upstream redis/redis#14541, valkey#3983; fixed by redis/redis#14545).
Every commit, window add, release and model create of streamdp is a script or a MULTI, and is written to the AOF
as MULTI/EXEC. So a server with AOF on whose ``default`` user may not run those commands silently drops them at
restart: the models are erased, deleted noise comes back. The deploy ACL therefore keeps ``default`` disabled
(``off``: nobody can log in as it) but with every right, which is what the replay needs.

:func:`replay_risks` asks each node (admin rights: INFO, CONFIG GET, ACL DRYRUN) and returns what is wrong;
:func:`check_replay` refuses (``model create``) or logs a warning (a worker that is allowed to ask).

>>> affected(("redis", (7, 0, 15)))
True
>>> affected(("redis", (5, 0, 0)))
False
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

__all__ = [
    "ReplayRisk",
    "ReplayUnsafe",
    "AFFECTED_SINCE",
    "FIXED_IN",
    "REPLAYED_COMMANDS",
    "affected",
    "parse_version",
    "replay_risks",
    "check_replay",
]

log = logging.getLogger("streamdp.durability")

# ACLs (and the EXEC re-check) exist from Redis 6.0; Valkey forked from Redis 7.2.4 (its own numbering from 7.2).
AFFECTED_SINCE = {"redis": (6, 0, 0), "valkey": (7, 2, 0)}
# The first release of each line known to skip the re-check while loading the AOF. None is known to this check:
# add a line's fixed release here once it ships (e.g. "redis": {(8, 4): (8, 4, 1)}), and such servers pass.
FIXED_IN: dict[str, dict[tuple[int, int], tuple[int, int, int]]] = {"redis": {}, "valkey": {}}

# What streamdp writes inside scripts and MULTI (each is replayed inside MULTI/EXEC), with a model-like key.
REPLAYED_COMMANDS: tuple[tuple[str, ...], ...] = (
    ("SET", "sdp:{x}:priv:k", "v"),
    ("DEL", "sdp:{x}:priv:k"),
    ("UNLINK", "sdp:{x}:priv:k"),
    ("HSET", "sdp:{x}:pub:model", "f", "v"),
    ("HDEL", "sdp:{x}:pub:model", "f"),
    ("HINCRBY", "sdp:{x}:priv:stats", "f", "1"),
    ("ZADD", "sdp:{x}:priv:merged", "1", "m"),
    ("ZREMRANGEBYSCORE", "sdp:{x}:priv:merged", "0", "1"),
    ("SADD", "sdp:{x}:ledger:keys", "m"),
    ("RPUSH", "sdp:{x}:ledger:spends", "m"),
    ("XADD", "sdp:{x}:priv:dead", "*", "f", "v"),
    ("XACK", "sdp:{x}:priv:records", "workers", "0-1"),
    ("XTRIM", "sdp:{x}:priv:records", "MINID", "0-1"),
    ("XDEL", "sdp:{x}:priv:records", "0-1"),
    ("PEXPIRE", "sdp:{x}:pub:v:1", "1000"),
    ("HSET", "sdp:registry", "f", "v"),
)


class ReplayUnsafe(ValueError):
    """The Redis server would drop streamdp's transactions when it reloads its append-only file (a ValueError: a
    configuration the service refuses, reported by the CLI as an error, not a traceback)."""


@dataclass(frozen=True)
class ReplayRisk:
    """One node that loses transactions at restart: its address, server and version, and the replayed commands its
    ``default`` user is denied (each a command name)."""

    node: str
    server: str
    version: tuple[int, int, int]
    denied: tuple[str, ...]

    def __str__(self) -> str:
        v = ".".join(map(str, self.version))
        return (
            f"{self.node} ({self.server} {v}) has appendonly yes and its 'default' user may not run "
            f"{', '.join(self.denied)}: at restart it replays the append-only file as 'default' and drops every "
            "MULTI/EXEC that holds them (streamdp's commits, releases and models). Give 'default' every right and "
            "keep it off: 'user default off resetpass ~* &* +@all' (deploy/users.acl), or turn AOF off "
            "(docs/security.md, 'Losing or double-counting records')"
        )


def parse_version(text: str) -> tuple[int, int, int]:
    """``"7.0.15"`` -> ``(7, 0, 15)`` (missing parts are 0; a non-numeric tail is ignored).

    >>> parse_version("7.2"), parse_version("255.255.255"), parse_version("8.0.0-rc1")
    ((7, 2, 0), (255, 255, 255), (8, 0, 0))
    """
    m = re.match(r"\s*(\d+)(?:\.(\d+))?(?:\.(\d+))?", text)
    if m is None:
        raise ValueError(f"not a server version: {text!r}")
    return int(m[1]), int(m[2] or 0), int(m[3] or 0)


def affected(server_version: tuple[str, tuple[int, int, int]]) -> bool:
    """True when server ``(name, version)`` re-checks ACLs in EXEC while loading its AOF (:data:`AFFECTED_SINCE`,
    :data:`FIXED_IN`). An unknown server name is treated like Redis."""
    name, version = server_version
    name = name if name in AFFECTED_SINCE else "redis"
    if version < AFFECTED_SINCE[name]:
        return False
    fixed = FIXED_IN.get(name, {}).get(version[:2])
    return fixed is None or version < fixed


def _server(info: dict) -> tuple[str, tuple[int, int, int]]:
    if info.get("valkey_version"):
        return "valkey", parse_version(str(info["valkey_version"]))
    return str(info.get("server_name") or "redis"), parse_version(str(info.get("redis_version", "0")))


def _denied(node: Any) -> tuple[str, ...]:
    """The replayed commands the node's ``default`` user may not run (ACL DRYRUN, Redis >= 7.0; before it, the
    user's rules from ACL GETUSER must be ``+@all`` and ``~*``)."""
    out = []
    try:
        for cmd in REPLAYED_COMMANDS:
            reply = node.execute_command("ACL", "DRYRUN", "default", *cmd)
            if reply is not True and (reply.decode() if isinstance(reply, bytes) else str(reply)) != "OK":
                out.append(cmd[0])
        return tuple(dict.fromkeys(out))
    except redis.ResponseError as e:
        if "unknown subcommand" not in str(e).lower() and "dryrun" not in str(e).lower():
            raise
    user = node.acl_getuser("default") or {}
    cmds = " ".join(map(str, user.get("commands") or ()))
    keys = user.get("keys") or ()
    keys = [keys] if isinstance(keys, (str, bytes)) else list(keys)
    ok = "+@all" in cmds.split() and any(str(k).lstrip("~") == "*" or k in (b"~*", b"*") for k in keys)
    return () if ok else ("every command (ACL rules are not +@all ~*)",)


def _nodes(r: Any) -> list[tuple[str, Any]]:
    """``(address, client)`` of every node: a cluster's nodes (replicas replay their AOF too), else ``r`` itself."""
    get_nodes = getattr(r, "get_nodes", None)
    if get_nodes is None:
        kw = getattr(getattr(r, "connection_pool", None), "connection_kwargs", {})
        return [(f"{kw.get('host', '?')}:{kw.get('port', '?')}", r)]
    return [(n.name, n.redis_connection) for n in get_nodes() if n.redis_connection is not None]


def replay_risks(r: Any) -> list[ReplayRisk]:
    """The nodes of ``r`` (a client; every node of a cluster) that would drop transactions when they reload their
    AOF: an :func:`affected` version, ``appendonly yes``, and a ``default`` user denied some :data:`REPLAYED_COMMANDS`.

    Needs INFO, CONFIG GET and ACL DRYRUN (the deploy ``admin`` user): raises
    :class:`redis.exceptions.NoPermissionError` for a user without them.
    """
    risks = []
    for name, node in _nodes(r):
        server = _server(node.info("server"))
        if not affected(server):
            continue
        aof = node.config_get("appendonly").get("appendonly")
        if str(aof.decode() if isinstance(aof, bytes) else aof).lower() != "yes":
            continue
        denied = _denied(node)
        if denied:
            risks.append(ReplayRisk(name, server[0], server[1], denied))
    return risks


def check_replay(r: Any, *, refuse: bool, warn: Callable[[str], None] | None = None) -> list[ReplayRisk] | None:
    """Check :func:`replay_risks`: raise :class:`ReplayUnsafe` (``refuse``) or warn once per risky node (``warn``,
    default: a WARNING on this module's logger).

    Returns the risks found (empty: safe), or None when this user may not ask or the server does not know the
    commands (logged at debug level: the worker user of the deploy ACL is not allowed INFO or CONFIG; ``model
    create``, run as admin, is).
    """
    try:
        risks = replay_risks(r)
    except (redis.ResponseError, redis.AuthenticationError) as e:  # NOPERM, or a server without these commands
        log.debug("replay check skipped: INFO, CONFIG GET or ACL DRYRUN refused (%s)", e)
        return None
    if risks and refuse:
        raise ReplayUnsafe("refusing: a Redis restart would erase this model. " + "; ".join(map(str, risks)))
    for risk in risks:
        (warn or (lambda msg: log.warning("DATA LOSS ON RESTART: %s", msg)))(str(risk))
    return risks
