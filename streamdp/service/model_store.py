"""Reading a stored model: its spec, release policy and unit of privacy, and the errors for a missing one.

Split from :mod:`streamdp.service.registry` (which creates, lists and deletes models) so that processes that
only read a model import the read side alone.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import redis

from streamdp.service.connection import connect
from streamdp.service.keys import JOB_RESULTS, REGISTRY, Keys
from streamdp.service.units import Unit

if TYPE_CHECKING:  # (imported where used: a producer reads the registry's summary, not the forest's code)
    from streamdp.forest.model import PrivateForest
    from streamdp.release.continual import ReleasePolicy

__all__ = [
    "ModelNotFound",
    "ModelExists",
    "batch_id_salt",
    "load_spec",
    "read_published_counts",
    "require_model",
    "no_stream_model",
    "published_keys",
    "load_policy",
    "load_unit",
]


class ModelNotFound(KeyError):
    """No model of that name (a KeyError, shown as its message: a KeyError's own str quotes it).

    >>> str(ModelNotFound("no model named 'x'"))
    "no model named 'x'"
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ModelExists(ValueError):
    pass


SPEC_READ_PART = 16 << 20
#: Most bytes per GETRANGE when a worker reads a retained version's counts (:func:`read_published_counts`): a
#: sixteenth of the counts where that is less (at least 64 KiB), so the parts in flight stay small beside them.
COUNTS_READ_PART = 4 << 20


def _read_range(r: Any, key: str, start: int, n: int, part: int, take: Callable[[int, bytes], None]) -> bool:
    """Pass string ``key``'s ``n`` bytes from ``start`` on to ``take(offset, part)``, ``part`` bytes per
    GETRANGE; False when the key ended early or changed length meanwhile (deleted, expired). One GET of a large
    value makes redis-py hold its read buffer, the reply and the reply's slice at once (three times the value);
    parts hold three parts."""
    size = int(r.strlen(key))
    if size < start + n:
        return False
    for off in range(0, n, part):
        got = r.getrange(key, start + off, start + min(off + part, n) - 1)
        if len(got) != min(part, n - off):
            return False
        take(off, got)
        del got
    return int(r.strlen(key)) == size


def _read_spec(r: Any, key: str) -> bytes | bytearray | None:
    """The spec's bytes, or None. A large spec is read in parts into one preallocated buffer."""
    size = int(r.strlen(key))
    if size <= SPEC_READ_PART:
        return r.get(key)
    buf = bytearray(size)

    def put(off: int, got: bytes) -> None:
        buf[off : off + len(got)] = got

    if not _read_range(r, key, 0, size, SPEC_READ_PART, put):
        raise ModelNotFound(f"the spec {key} changed while it was read (the model was deleted?)")
    return buf


def read_published_counts(
    r: Any, keys: Keys, version: int, spec: PrivateForest, into: np.ndarray | None = None
) -> np.ndarray | None:
    """Version ``version``'s published counts of a stream model added into ``into`` (writable, of the counts'
    shape and native dtype; default: a new zero array), which is returned; None when ``version`` is no longer
    the published one (another closer released meanwhile) or its retained copy vanished while it was read:
    ``into`` then holds part of them, to be dropped (the caller looks again).

    A retained version (``pub:v:<version>``, :func:`.published.release_record_parts`) ends with its counts'
    bytes: they are read from there in parts (:data:`COUNTS_READ_PART`) and added as they come, so a closer
    holds its release and a part, not the counts three times over as one HGET of ``pub:model``'s counts would.
    Where that version is not retained (or too small for a 32-bit length), ``pub:model``'s counts are read
    whole.

    >>> import fakeredis
    >>> from streamdp.records.datasets import load
    >>> from streamdp.forest.model import PrivateForest
    >>> from streamdp.service.published import release_record
    >>> f = PrivateForest.create(load("adult").schema, n_trees=2, height=6, seed=1)
    >>> f = f.with_counts(f.counts + 7 * f.real_cells, version=3, n_releases=3)
    >>> r, keys = fakeredis.FakeRedis(), Keys("m")
    >>> _ = r.set(keys.pub_version(3), release_record(f))
    >>> got = read_published_counts(r, keys, 3, f)
    >>> bool((got == f.counts).all()), read_published_counts(r, keys, 4, f)
    (True, None)
    >>> bool((read_published_counts(r, keys, 3, f, into=f.counts + 1) == 2 * f.counts + 1).all())
    True
    """
    from streamdp.service.published import counts_dtype, counts_from_bytes  # (the forest's code: read side only)

    dt = np.dtype(counts_dtype(spec.mechanism))  # (as stored: little-endian)
    out = np.zeros(spec.shape, dt.newbyteorder("=")) if into is None else into
    if out.shape != spec.shape or out.dtype != dt.newbyteorder("=") or not out.flags.c_contiguous:
        raise ValueError(f"counts of shape {spec.shape} and dtype {dt} expected, got {out.shape} {out.dtype}")
    flat, n, key = out.reshape(-1), out.nbytes, keys.pub_version(version)
    head = int(r.strlen(key)) - n
    marker = b"\xa4data\xc6" + n.to_bytes(4, "big") if n < 1 << 32 else b""  # (msgpack: "data", a bin32 of n bytes)
    if marker and head >= len(marker) and bytes(r.getrange(key, head - len(marker), head - 1)) == marker:

        def add(off: int, got: bytes) -> None:
            flat[off // dt.itemsize : (off + len(got)) // dt.itemsize] += np.frombuffer(got, dt)

        # (a retained version that vanished midway: dropped as newer ones were released, or expired; look again)
        part = max(64 << 10, min(COUNTS_READ_PART, n // 16))
        return out if _read_range(r, key, head, n, part - part % dt.itemsize, add) else None
    now_version, counts_b = r.hmget(keys.pub_model, "version", "counts")
    if int(now_version or 0) != version:
        return None
    out += counts_from_bytes(counts_b, spec, copy=False)
    return out


def load_spec(r: Any, name: str) -> PrivateForest:
    """The empty forest of model ``name`` (schema + settings + structure), validated.

    Memory: the spec's bytes are dropped once decoded, before the forest is built; the structure
    views the decoded document (:meth:`PrivateForest.from_doc`): at most about twice the blob at once.
    """
    from streamdp.forest import persistence
    from streamdp.forest.model import PrivateForest

    r = connect(r)
    data = _read_spec(r, Keys(name).spec)
    if data is None:
        raise no_stream_model(r, name)
    doc = persistence.loads(data)
    del data
    return PrivateForest.from_doc(doc)


def batch_id_salt(spec: bytes) -> bytes:
    """The salt of a model's batch ids: keyed by its spec (the random structure, public), so an id alone
    says nothing about the records. Stored in the registry summary at creation, so a producer codes
    records from the summary alone, without reading the spec (its structure: gigabytes at height 10)."""
    return hashlib.sha256(b"streamdp.batch-id/1\0" + spec).digest()


def require_model(r: Any, name: str) -> None:
    """Raise :class:`ModelNotFound` unless stream model ``name`` exists (its spec's key; nothing is read or
    decoded: a process that only starts workers holds no model)."""
    r = connect(r)
    if not r.exists(Keys(name).spec):
        raise no_stream_model(r, name)


def no_stream_model(r: Any, name: str) -> ModelNotFound:
    """The error for ``name`` having no stream model, saying why: a batch job's result of that name (listed beside
    the models, so records are pushed to it by mistake), or nothing at all."""
    try:
        job = bool(r.hexists(JOB_RESULTS, name))
    except redis.exceptions.NoPermissionError:  # (a producer may not read the job results)
        job = False
    if job:
        return ModelNotFound(
            f"{name!r} is a batch job's model, not a stream model: it takes no records and has no "
            "workers (records go to a stream model: streamdp model create)"
        )
    return ModelNotFound(f"no model named {name!r} (streamdp model list shows the models)")


def published_keys(r: Any, name: str) -> Keys:
    """The keys of what is published under ``name``: the stream model's, else a batch job's model's (if any)."""
    keys = Keys(name)
    if not r.exists(keys.pub_model):
        job = Keys(name, job=True)
        if r.exists(job.pub_model):
            return job
    return keys


def load_policy(r: Any, name: str) -> tuple[ReleasePolicy, float]:
    """The release policy of model ``name`` and its schedule's start (epoch seconds), from the worker-only state.

    A model created before release policies existed releases per batch.
    """
    from streamdp.release.continual import ReleasePolicy

    r = connect(r)
    raw, start = r.hmget(Keys(name).state, "release", "release_start")
    if raw is None:
        return ReleasePolicy("batch"), 0.0
    return ReleasePolicy.from_dict(json.loads(raw)), float(start)


def load_unit(r: Any, name: str) -> Unit | None:
    """Model ``name``'s unit of privacy (None: a record), from its registry summary: public, and readable by every
    user that handles the model's records (producer, worker, job worker)."""
    raw = connect(r).hget(REGISTRY, name)
    unit = json.loads(raw).get("unit") if raw is not None else None
    return None if not unit else Unit.from_json(json.dumps(unit))
