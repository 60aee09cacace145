"""Producers push labelled records onto a model's record stream.

The example needs a running Redis holding model ``votes`` (see
:func:`streamdp.service.registry.create_model`), so the doctest run skips it;
``tests/test_service_redis.py`` exercises the producer against a real server.

>>> from streamdp.datasets import load
>>> votes = load("congressional-voting")
>>> p = Producer("redis://localhost:6379/0", "votes")  # doctest: +SKIP
>>> p.push(votes.X[:100], votes.y[:100])  # doctest: +SKIP
'...-0'
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from . import codec
from .connection import connect
from .keys import Keys
from .registry import load_spec

__all__ = ["Producer"]


class Producer:
    """Encode records against the model's schema and XADD them in batches.

    Records are validated and encoded here (compact raw numpy codes); the
    worker validates again. ``on_invalid="raise"`` (default) raises on a bad
    record before anything is sent; ``"dead-letter"`` sends the valid rows and
    lists the bad ones so they land in the model's dead-letter stream.
    Credentials and TLS come from the URL (``rediss://user:pass@host``).
    """

    def __init__(self, redis_url: Any = None, model: str = "", *, batch_size: int = 10_000,
                 on_invalid: str = "raise", maxlen: int | None = None):
        if not model:
            raise ValueError("Producer needs a model name")
        if batch_size < 1 or batch_size > codec.MAX_RECORDS:
            raise ValueError(f"batch_size must be in 1..{codec.MAX_RECORDS}")
        self.redis = connect(redis_url)
        self._owns_client = self.redis is not redis_url  # a caller's client stays open (a closed RedisCluster is dead)
        self.keys = Keys(model)
        self.model = model
        self.schema = load_spec(self.redis, model).schema
        self.batch_size = batch_size
        self.on_invalid = on_invalid
        self.last_batch_ids: list[str] = []

    def _send(self, payloads: list[bytes]) -> list[str]:
        p = self.redis.pipeline(transaction=False)
        for d in payloads:
            p.xadd(self.keys.records, {"d": d})
        return [x.decode() if isinstance(x, bytes) else x for x in p.execute()]

    def push(self, X: Any, y: Any, *, batch_id: str | None = None) -> str | list[str]:
        """Send ``X`` (2-D array-like or list of dicts) with labels ``y``.

        Returns the stream entry id, or a list of ids when the input was split
        into several batches of ``batch_size``. ``batch_id`` (only for a single
        batch) makes a retried push idempotent: the workers merge it once.
        """
        rows = X if isinstance(X, np.ndarray) or hasattr(X, "iloc") else list(X)
        ys = y if isinstance(y, np.ndarray) else list(y)
        n = len(rows)
        if len(ys) != n:
            raise ValueError(f"X has {n} records but y has {len(ys)} labels")
        if n > self.batch_size and batch_id is not None:
            raise ValueError("batch_id applies to a single batch; lower the input size or raise batch_size")
        payloads, ids = [], []
        for s in range(0, max(n, 1), self.batch_size):
            chunk = rows.iloc[s:s + self.batch_size] if hasattr(rows, "iloc") else rows[s:s + self.batch_size]
            env = codec.encode_batch(self.schema, chunk, ys[s:s + self.batch_size], batch_id=batch_id,
                                     on_invalid=self.on_invalid)
            payloads.append(env)
            ids.append(codec.peek_batch_id(env))
        self.last_batch_ids = ids
        out = self._send(payloads)
        return out[0] if len(out) == 1 else out

    def push_records(self, records: Iterable[dict], label: str | None = None, labels: Any = None,
                     **kw) -> str | list[str]:
        """Send dict records; the label is taken from field ``label`` (default: the schema's label name)."""
        recs = list(records)
        if labels is None:
            label = label or self.schema.label.name
            labels, stripped = [], []
            for i, r in enumerate(recs):
                if label not in r:
                    raise ValueError(f"record {i} has no label field {label!r}")
                labels.append(r[label])
                stripped.append({k: v for k, v in r.items() if k != label})
            recs = stripped
        return self.push(recs, labels, **kw)

    def push_raw(self, payload: bytes) -> str:
        """XADD an already-built envelope (see :mod:`streamdp.service.codec`)."""
        return self._send([payload])[0]

    def close(self) -> None:
        if self._owns_client:
            self.redis.close()

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
