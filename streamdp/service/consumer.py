"""Consumers read published private models (and only those).

A consumer touches ``sdp:registry``, ``sdp:{NAME}:spec`` and
``sdp:{NAME}:pub:*`` only, so it runs under the ``consumer`` ACL user.
Every blob is validated (:meth:`PrivateForest.from_bytes`) before use.
"""

from __future__ import annotations

import time
from typing import Any

import redis

from ..forest import PrivateForest
from .keys import Keys
from .registry import ModelNotFound, connect

__all__ = ["Consumer", "VersionNotAvailable"]


class VersionNotAvailable(LookupError):
    pass


class Consumer:
    """Fetch the latest published model, a retained older version, or wait for a newer one."""

    def __init__(self, redis_url: Any = None, model: str = ""):
        if not model:
            raise ValueError("Consumer needs a model name")
        self.redis = connect(redis_url)
        self.keys = Keys(model)
        self.model = model
        self._cached: PrivateForest | None = None

    def version(self) -> int:
        """The latest published version number (one small read)."""
        v = self.redis.hget(self.keys.pub_model, "version")
        if v is None:
            raise ModelNotFound(f"no published model named {self.model!r}")
        return int(v)

    def latest(self) -> PrivateForest:
        """The latest published :class:`PrivateForest` (``.version`` set); cached while unchanged."""
        if self._cached is not None and self.version() == self._cached.version:
            return self._cached
        version, data = self.redis.hmget(self.keys.pub_model, "version", "blob")
        if data is None:
            raise ModelNotFound(f"no published model named {self.model!r}")
        forest = self._load(data, int(version))
        self._cached = forest
        return forest

    def _load(self, data: bytes, version: int | None) -> PrivateForest:
        forest = PrivateForest.from_bytes(data)  # validates; raises ValueError on anything malformed
        if version is not None and forest.version != version:
            raise ValueError(f"published blob has version {forest.version}, the index says {version}")
        return forest

    def get(self, version: int) -> PrivateForest:
        """A given version: the latest, or a retained older one (:class:`VersionNotAvailable` otherwise)."""
        version = int(version)
        if self._cached is not None and self._cached.version == version:
            return self._cached
        data = self.redis.get(self.keys.pub_version(version))
        if data is None:
            cur = self.latest()
            if cur.version == version:
                return cur
            raise VersionNotAvailable(f"version {version} of {self.model!r} is not retained (latest {cur.version})")
        return self._load(data, version)

    def wait_newer(self, version: int, timeout: float | None = None) -> PrivateForest | None:
        """Block until a version newer than ``version`` is published; None on timeout.

        Listens on the ``pub:events`` channel (no polling); the current version is
        re-read after subscribing and every few seconds, so a lost message only
        delays, never hangs.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        ps = self.redis.pubsub(ignore_subscribe_messages=True)
        try:
            ps.subscribe(self.keys.pub_events)
            while True:
                if self.version() > version:
                    return self.latest()
                left = 5.0 if deadline is None else min(5.0, deadline - time.monotonic())
                if left <= 0:
                    return None
                try:
                    msg = ps.get_message(timeout=left)
                except redis.ConnectionError:
                    msg = None
                if msg is not None and msg.get("type") == "message":
                    try:
                        if int(msg["data"]) <= version:
                            continue
                    except (TypeError, ValueError):
                        pass
        finally:
            try:
                ps.close()
            except Exception:
                pass

    def close(self) -> None:
        self.redis.close()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
