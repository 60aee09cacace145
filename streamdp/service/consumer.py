"""Consumers read published private models (and only those).

A consumer touches ``sdp:registry``, ``sdp:{NAME}:spec`` and
``sdp:{NAME}:pub:*`` (or a batch job's forest, ``sdp:{job:NAME}:pub:*``) only, so it runs under the ``consumer`` ACL user.
Every blob is validated (:meth:`PrivateForest.from_bytes`) before use.
"""

from __future__ import annotations

import time
from typing import Any

import redis

from streamdp.forest import persistence
from streamdp.forest.model import PrivateForest
from streamdp.service.connection import connect
from streamdp.service.keys import Keys
from streamdp.service.published import forest_from_counts, forest_from_doc, forest_from_record, is_release_record
from streamdp.service.registry import ModelNotFound, published_keys

__all__ = ["Consumer", "VersionNotAvailable"]


_WAIT_S = 5.0  # longest single pub/sub wait; the version is re-read after each


class VersionNotAvailable(LookupError):
    pass


class Consumer:
    """Fetch the latest published model, a retained older version, or wait for a newer one."""

    def __init__(self, redis_url: Any = None, model: str = ""):
        if not model:
            raise ValueError("Consumer needs a model name")
        self.redis = connect(redis_url)
        self._owns_client = self.redis is not redis_url  # a caller's client stays open (a closed RedisCluster is dead)
        Keys(model)  # check the name now
        self._keys: Keys | None = None
        self.model = model
        self._cached: PrivateForest | None = None
        self._template: tuple[PrivateForest, dict] | None = None
        self._model_id: bytes | None = None
        self._listener: redis.Redis | None = None

    @property
    def keys(self) -> Keys:
        """The model's keys: a stream model's, or a batch job's forest (its own key space), found at first use."""
        if self._keys is None:
            self._keys = published_keys(self.redis, self.model)
        return self._keys

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
            version, counts, releases, mid, variance = self.redis.hmget(
                self.keys.pub_model, "version", "counts", "releases", "model_id", "noise_variance"
            )
            forest = self._from_counts(version, counts, releases, variance) if mid == self._model_id else None
            if forest is not None:
                self._cached = forest
                return forest
        # The first read, or another structure: the published blob where the structure changes (release="grow", a
        # batch job's model), else the spec (validated in full, once per model) and the counts.
        version, data, mid, counts, releases, variance = self.redis.hmget(
            self.keys.pub_model, "version", "blob", "model_id", "counts", "releases", "noise_variance"
        )
        self._template = None  # validated again in full (the model may have been re-created)
        if data is not None:
            forest = self._load(data, int(version))
        elif counts is not None:
            # (no MULTI: the consumer ACL user has none; the model id read after the spec tells a re-creation apart)
            p = self.redis.pipeline(transaction=False)
            p.get(self.keys.spec)
            p.hget(self.keys.pub_model, "model_id")
            spec, mid_after = p.execute()
            if spec is None or mid != mid_after:
                raise ModelNotFound(f"no published model named {self.model!r} (deleted or re-created while read)")
            forest = forest_from_counts(self._load(spec, None), counts, version, releases, variance)
        else:
            raise ModelNotFound(f"no published model named {self.model!r}")
        self._model_id = mid
        self._cached = forest
        return forest

    def _load(self, data: bytes, version: int | None) -> PrivateForest:
        forest = self._load_fast(data)
        if forest is None:
            doc = persistence.loads(data)  # decoded once: the template keeps the document
            forest = PrivateForest.from_doc(doc)  # full validation; raises ValueError on anything malformed
            self._template = (forest, doc)
        if version is not None and forest.version != version:
            raise ValueError(f"published blob has version {forest.version}, the index says {version}")
        return forest

    def _from_counts(self, version: Any, counts: Any, releases: Any, variance: Any = None) -> PrivateForest | None:
        if version is None or counts is None or releases is None:
            return None
        try:
            return forest_from_counts(self._template[0], counts, version, releases, variance)
        except ValueError:
            return None

    def _load_fast(self, data: bytes) -> PrivateForest | None:
        """Versions of one model share schema, settings and structure: when those bytes equal the ones
        already fully validated, only the counts and version are new and are checked on their own."""
        if self._template is None:
            return None
        base, tdoc = self._template
        try:
            doc = persistence.loads(data)
            if any(doc.get(f) != tdoc.get(f) for f in ("schema", "params", "privacy", "structure")):
                return None
            return forest_from_doc(base, doc, persistence.FORMAT)
        except ValueError:
            return None  # let the full validation give the error

    def get(self, version: int) -> PrivateForest:
        """A given version: the latest, or a retained older one (:class:`VersionNotAvailable` otherwise)."""
        version = int(version)
        if (
            self._cached is not None
            and self._cached.version == version
            and (self.redis.hget(self.keys.pub_model, "model_id") == self._model_id)
        ):  # not a re-created model's
            return self._cached
        data = self.redis.get(self.keys.pub_version(version))
        if data is None:
            cur = self.latest()
            if cur.version == version:
                return cur
            raise VersionNotAvailable(f"version {version} of {self.model!r} is not retained (latest {cur.version})")
        if is_release_record(data):  # window/tree policies retain the release alone: the structure is the latest's
            # (version 0's, the spec's: a growing model's latest may have grown since)
            base = self.latest() if version else self._load_spec()
            forest = forest_from_record(base, data)
            if forest.version != version:
                raise ValueError(f"retained version {version} holds version {forest.version}")
            return forest
        return self._load(data, version)

    def _load_spec(self) -> PrivateForest:
        spec = self.redis.get(self.keys.spec)
        if spec is None:
            raise ModelNotFound(f"no published model named {self.model!r}")
        return self._load(spec, None)

    def wait_newer(self, version: int, timeout: float | None = None) -> PrivateForest | None:
        """Block until a version newer than ``version`` is published; None on timeout.

        Listens on the ``pub:events`` channel (no polling); the current version is
        re-read after subscribing and every few seconds, so a lost message only
        delays, never hangs.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._listener is None:  # a client whose socket timeout outlasts one wait
            self._listener = connect(self.redis, block_s=_WAIT_S)
        ps = self._listener.pubsub(ignore_subscribe_messages=True)
        try:
            ps.subscribe(self.keys.pub_events)
            while True:
                if self.version() > version:
                    return self.latest()
                left = _WAIT_S if deadline is None else min(_WAIT_S, deadline - time.monotonic())
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
        if self._listener is not None and self._listener is not self.redis:
            self._listener.close()
        if self._owns_client:
            self.redis.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
