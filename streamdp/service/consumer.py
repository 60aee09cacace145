"""Consumers read published private models (and only those).

A consumer touches ``sdp:registry``, ``sdp:{NAME}:spec`` and
``sdp:{NAME}:pub:*`` only, so it runs under the ``consumer`` ACL user.
Every blob is validated (:meth:`PrivateForest.from_bytes`) before use.
"""

from __future__ import annotations

import time
from typing import Any

import msgpack
import numpy as np
import redis

from .. import blob
from ..forest import FORMAT, FORMAT_VERSION, PrivateForest
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
        self._template: tuple[PrivateForest, dict] | None = None
        self._model_id: bytes | None = None

    def version(self) -> int:
        """The latest published version number (one small read)."""
        v = self.redis.hget(self.keys.pub_model, "version")
        if v is None:
            raise ModelNotFound(f"no published model named {self.model!r}")
        return int(v)

    def latest(self) -> PrivateForest:
        """The latest published :class:`PrivateForest` (``.version`` set); cached while unchanged."""
        if self._cached is not None:
            v, mid = self.redis.hmget(self.keys.pub_model, "version", "model_id")
            if v is not None and int(v) == self._cached.version and mid == self._model_id:
                return self._cached
        if self._template is not None:  # same structure: fetch only the (noisy) counts, not the whole blob
            version, counts, releases, mid = self.redis.hmget(self.keys.pub_model, "version", "counts", "releases",
                                                              "model_id")
            forest = self._from_counts(version, counts, releases) if mid == self._model_id else None
            if forest is not None:
                self._cached = forest
                return forest
        version, data, mid = self.redis.hmget(self.keys.pub_model, "version", "blob", "model_id")
        if data is None:
            raise ModelNotFound(f"no published model named {self.model!r}")
        self._template = None  # the full blob is validated again (the model may have been re-created)
        forest = self._load(data, int(version))
        self._model_id = mid
        self._cached = forest
        return forest

    def _load(self, data: bytes, version: int | None) -> PrivateForest:
        forest = self._load_fast(data)
        if forest is None:
            forest = PrivateForest.from_bytes(data)  # full validation; raises ValueError on anything malformed
            self._template = (forest, msgpack.unpackb(data, raw=False))
        if version is not None and forest.version != version:
            raise ValueError(f"published blob has version {forest.version}, the index says {version}")
        return forest

    def _from_counts(self, version: Any, counts: Any, releases: Any) -> PrivateForest | None:
        if version is None or counts is None or releases is None:
            return None
        base, _ = self._template
        dt = np.dtype("<f8" if base.mechanism == "laplace" else "<i8")
        if len(counts) != dt.itemsize * int(np.prod(base.shape)):
            return None
        arr = np.frombuffer(counts, dtype=dt).reshape(base.shape)
        if dt.kind == "f" and not np.all(np.isfinite(arr)):
            return None
        try:
            return PrivateForest(base.schema, base.structure, epsilon=base.epsilon, mechanism=base.mechanism,
                                 k=base.k, beta=base.beta, vote=base.vote, budget=base.budget,
                                 counts=arr.astype(dt.newbyteorder("=")), version=int(version),
                                 n_releases=int(releases), private=base.private)
        except ValueError:
            return None

    def _load_fast(self, data: bytes) -> PrivateForest | None:
        """Versions of one model share schema, settings and structure: when those bytes equal the ones
        already fully validated, only the counts and version are new and are checked on their own."""
        if self._template is None:
            return None
        base, tdoc = self._template
        try:
            doc = blob.loads(data, FORMAT, FORMAT_VERSION)
            if any(doc.get(f) != tdoc.get(f) for f in ("schema", "params", "privacy", "structure")):
                return None
            counts = blob.unpack_array(doc.get("counts"), "counts", "<f8" if base.mechanism == "laplace" else "<i8",
                                       ndim=3)
            version = blob.field(doc, "version", int, FORMAT)
            releases = blob.field(doc, "n_releases", int, FORMAT)
            return PrivateForest(base.schema, base.structure, epsilon=base.epsilon, mechanism=base.mechanism,
                                 k=base.k, beta=base.beta, vote=base.vote, budget=base.budget, counts=counts.copy(),
                                 version=version, n_releases=releases, private=base.private)
        except ValueError:
            return None  # let the full validation give the error

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
