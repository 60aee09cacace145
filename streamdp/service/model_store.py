"""Reading a stored model: its spec, release policy and unit of privacy, and the errors for a missing one.

Split from :mod:`streamdp.service.registry` (which creates, lists and deletes models) so that processes that
only read a model import the read side alone.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

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


def _read_spec(r: Any, key: str) -> bytes | bytearray | None:
    """The spec's bytes, or None. A large spec is read in parts into one preallocated buffer: one GET
    made redis-py hold its read buffer and its copy of the whole value at once (twice the blob)."""
    size = int(r.strlen(key))
    if size <= SPEC_READ_PART:
        return r.get(key)
    buf = bytearray(size)
    for off in range(0, size, SPEC_READ_PART):
        part = r.getrange(key, off, off + SPEC_READ_PART - 1)
        if len(part) != min(SPEC_READ_PART, size - off):
            raise ModelNotFound(f"the spec {key} changed while it was read (the model was deleted?)")
        buf[off : off + len(part)] = part
        del part
    if int(r.strlen(key)) != size:
        raise ModelNotFound(f"the spec {key} changed while it was read (the model was deleted?)")
    return buf


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
