"""Producers push labelled records onto a model's record stream, idempotently.

Records are coded chunk by chunk (:mod:`streamdp.records.sources`) and each chunk's
batches are sent (one pipelined round trip) while the next chunk is coded.

**Batch ids and the rule for producers.** By default a batch's id is derived
from what it holds, keyed by the producer's secret id key: ``HMAC-SHA256(key, model
spec, source label, the batch's first row in the input, its rows, its codes and
labels)``. The key (:func:`producer_id_key`: ``$STREAMDP_PRODUCER_KEY_FILE``, else
``~/.config/streamdp/producer.key``, 32 random bytes made on first use, mode 0600)
stays with the producer: without it, anyone allowed to push and read the published
model could push a guessed record and see from the release count whether it was
merged before (a membership test, under ``release="batch"``). Pushes
share a deduplication only when they share the key (one user, or a key file given
to every producer of the same data). The stream workers merge a
batch id once for the model's lifetime (``priv:merged`` keeps every merged
id), so pushing the same records again, in the same order, with the same
``batch_size`` and ``source``, merges nothing new, and a push interrupted
half way can simply be repeated. Records that are genuinely new but identical
to ones pushed before at the same position (a second file with the same
rows, the same DataFrame on another day) need their own ``source`` label
(e.g. the file's date), or ``dedup=False`` (random ids: every push counts).

The example needs a running Redis holding model ``votes`` (see
:func:`streamdp.service.registry.create_model`), so the doctest run skips it;
``tests/service/test_producer.py`` exercises the producer against a real server.

>>> from streamdp.records.datasets import load
>>> votes = load("congressional-voting")
>>> p = Producer("redis://localhost:6379/0", "votes")  # doctest: +SKIP
>>> p.push(votes.X[:100], votes.y[:100])  # doctest: +SKIP
'...-0'
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import warnings
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import redis

from streamdp import blob
from streamdp.records import frames, read_errors
from streamdp.records.declarations import with_declaration
from streamdp.records.schema import Schema
from streamdp.service import codec
from streamdp.service.connection import connect
from streamdp.service.group import holders
from streamdp.service.keys import GROUP, REGISTRY, Keys
from streamdp.service.model_store import ModelNotFound, batch_id_salt, no_stream_model
from streamdp.validation import check_choice

__all__ = ["Producer", "PushResult", "producer_id_key", "ENV_PRODUCER_KEY"]

#: Batches in flight (sent, reply not read) while the next chunk is coded.
_IN_FLIGHT = 2


class PushResult(list):
    """The stream entry ids of one push (a list), with ``n_records``, ``n_invalid``, ``first_invalid`` (the
    first bad row's reason: attribute and row with the schema's declaration, never the value) and ``batch_ids``."""

    n_records: int = 0
    n_invalid: int = 0
    first_invalid: str = ""
    batch_ids: list


#: Where a producer keeps its secret batch-id key by default (``$STREAMDP_PRODUCER_KEY_FILE`` overrides).
ENV_PRODUCER_KEY = "STREAMDP_PRODUCER_KEY_FILE"


def producer_id_key(path: str | os.PathLike | None = None) -> bytes:
    """The producer's secret batch-id key: the file ``path``, ``$STREAMDP_PRODUCER_KEY_FILE`` or
    ``$XDG_CONFIG_HOME/streamdp/producer.key`` (``~/.config``), made with 32 bytes from the OS CSPRNG
    (mode 0600) when it does not exist; a file of fewer than 16 bytes is refused."""
    if path is None:
        path = os.environ.get(ENV_PRODUCER_KEY) or os.path.join(
            os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config"),
            "streamdp",
            "producer.key",
        )
    path = os.fspath(path)
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        # written whole to a private temporary file, then linked into place: a producer racing this one
        # never reads a half-written key (os.link fails if the key exists: that one is read instead)
        tmp = f"{path}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(os.urandom(32))
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass
        finally:
            os.unlink(tmp)
    with open(path, "rb") as f:
        key = f.read()
    if len(key) < 16:
        raise ValueError(f"producer key file {path!r} holds {len(key)} bytes; at least 16 random bytes are needed")
    return key


#: What a producer does with a record the schema refuses: raise, or send the valid ones and dead-letter the rest.
ON_INVALID = ("raise", "dead-letter")


class Producer:
    """Code records against the model's schema and XADD them in batches.

    ``on_invalid="raise"`` (default) raises :class:`~streamdp.records.sources.SourceError` (a
    ``ValueError``) naming the attribute and row of the first bad record (``record N
    (0-based)``; a CSV file's ``line N``); batches of earlier chunks may already be sent:
    the error says how many records were, and (content ids) that pushing the corrected data
    again with the same ``batch_size`` and ``source`` does not count them twice.
    ``"dead-letter"`` sends the valid rows and lists the bad ones so they land in the
    model's dead-letter stream. ``dedup`` (default) derives batch ids from the content (see
    the module docstring); ``False`` draws random ones. Credentials and TLS come from the URL.
    """

    def __init__(
        self,
        redis_url: Any = None,
        model: str = "",
        *,
        batch_size: int = 10_000,
        on_invalid: str = "raise",
        maxlen: int | None = None,
        dedup: bool = True,
        id_key: bytes | None = None,
    ):
        if not model:
            raise ValueError("Producer needs a model name")
        if batch_size < 1 or batch_size > codec.MAX_RECORDS:
            raise ValueError(f"batch_size must be in 1..{codec.MAX_RECORDS}")
        check_choice(on_invalid, "on_invalid", ON_INVALID)
        self.redis = connect(redis_url)
        self._owns_client = self.redis is not redis_url  # a caller's client stays open (a closed RedisCluster is dead)
        self.keys = Keys(model)
        self.model = model
        # The schema alone (the structure, validated by workers, is not needed to code records) and the
        # batch-id salt, from the registry summary; a model created before they were stored there: the spec.
        summary = self.redis.hget(REGISTRY, model)
        info = json.loads(summary) if summary is not None else {}
        if isinstance(info.get("schema"), dict) and isinstance(info.get("batch_id_salt"), str):
            self.schema = Schema.from_dict(info["schema"])
            self._salt = bytes.fromhex(info["batch_id_salt"])
        else:
            spec = self.redis.get(self.keys.spec)
            if spec is None:
                raise no_stream_model(self.redis, model)
            from streamdp.forest import persistence

            self.schema = Schema.from_dict(blob.field(persistence.loads(spec), "schema", dict))
            self._salt = batch_id_salt(spec)
        self.batch_size = batch_size
        self.on_invalid = on_invalid
        self.dedup = dedup
        self._id_key = None if id_key is None else bytes(id_key)  # else read (or made) on the first content id
        self._key_of_process = False  # the id key is this process's own (no key file): a re-push elsewhere counts
        self.last_batch_ids: list[str] = []

    @property
    def id_key(self) -> bytes:
        """The secret key of this producer's content ids (:func:`producer_id_key`, read on first use). Where no
        key file can be read or made (no writable home: a container), a key for this process, with a warning:
        its retries still count once, a later process's do not."""
        if self._id_key is None:
            try:
                self._id_key = producer_id_key()
            except OSError as e:
                warnings.warn(
                    f"no producer key file ({type(e).__name__}: set {ENV_PRODUCER_KEY} to a writable "
                    "path): batch ids are keyed for this process only, so a push repeated by another "
                    "process counts again",
                    RuntimeWarning,
                    stacklevel=3,
                )
                self._id_key = os.urandom(32)
                self._key_of_process = True
        return self._id_key

    def batch_id(self, source: str, offset: int, n_in: int, invalid: Iterable[int]) -> Callable:
        """The content id of a batch: a function of its packed codes (see :func:`codec.encode_codes`)."""
        key = self.id_key

        def make(xb: np.ndarray, yb: np.ndarray) -> str:
            h = hmac.new(key, self._salt, hashlib.sha256)
            src = source.encode()
            h.update(len(src).to_bytes(8, "little") + src)
            h.update(np.array([offset, n_in, *xb.shape], dtype="<i8").tobytes())
            h.update(np.asarray(list(invalid), dtype="<i8").tobytes() + b"\0")
            for a in (xb, yb):  # the arrays' bytes, uncopied (an empty array too)
                h.update(a.dtype.str.encode())
                h.update(np.ascontiguousarray(a))
            return h.hexdigest()

        return make

    def _send(self, payloads: list[bytes]) -> list[str]:
        p = self.redis.pipeline(transaction=False)
        for d in payloads:
            # NOMKSTREAM: a deleted model's (or one still being created) stream is not made again, which would
            # keep raw records no worker reads or trims
            p.xadd(self.keys.records, {"d": d}, nomkstream=True)
        ids = p.execute()
        if any(x is None for x in ids):
            raise ModelNotFound(
                f"model {self.model!r} has no record stream (deleted, or not fully created yet): "
                f"{sum(x is None for x in ids)} of {len(ids)} batches not sent"
            )
        return [x.decode() if isinstance(x, bytes) else x for x in ids]

    def _envelopes(self, chunk: frames.Chunk, source: str, batch_id: str | None) -> tuple[list[bytes], list[str]]:
        """A chunk cut into envelopes of ``batch_size`` input rows each (offsets in the whole input)."""
        out, ids = [], []
        bs = self.batch_size
        row_of_kept = chunk.kept
        bad = np.array([r for r, _ in chunk.dropped], dtype=np.int64)
        reasons = [why for _, why in chunk.dropped]
        for s in range(0, max(chunk.n_in, 1), bs):
            e = min(s + bs, chunk.n_in)
            lo, hi = np.searchsorted(row_of_kept, [s, e])
            blo, bhi = np.searchsorted(bad, [s, e])
            invalid = [(int(bad[i]) - s, reasons[i]) for i in range(blo, bhi)]
            if batch_id is not None:
                bid: Any = batch_id
            elif self.dedup:
                bid = self.batch_id(source, chunk.offset + s, e - s, (r for r, _ in invalid))
            else:
                bid = codec.new_batch_id()
            env = codec.encode_codes(
                self.schema,
                chunk.X[lo:hi],
                chunk.y[lo:hi],
                batch_id=bid,
                invalid=invalid,
                ids=None if chunk.ids is None else chunk.ids[lo:hi],
            )
            out.append(env)
            ids.append(codec.peek_batch_id(env) if callable(bid) else bid)
        return out, ids

    def push_chunks(
        self,
        chunks: Iterable[frames.Chunk],
        *,
        source: str = "",
        batch_id: str | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> PushResult:
        """Send coded chunks (:func:`streamdp.records.sources.read_csv_chunks` or :func:`~streamdp.records.sources.frame_chunks`).

        Each chunk's batches go out in one pipelined round trip on a sender thread while
        the next chunk is read and coded. ``progress(records done)`` after each chunk: the
        records whose batches Redis has taken.

        A :class:`~streamdp.records.sources.SourceError` from ``chunks`` (a malformed line, a bad value)
        comes after the batches of the chunks before it are sent; its message adds how many
        records were pushed and what pushing again does, and its ``n_pushed`` holds that count.
        """
        res = PushResult()
        res.batch_ids = []
        pending: list[tuple[Future, int]] = []
        sent = 0
        failed: read_errors.SourceError | None = None
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="streamdp-send") as pool:
            try:
                for chunk in chunks:
                    envs, ids = self._envelopes(chunk, source, batch_id)
                    res.batch_ids += ids
                    res.n_records += chunk.n_in
                    res.n_invalid += len(chunk.dropped)
                    if chunk.dropped and not res.first_invalid:
                        row, why = chunk.dropped[0]
                        # the user's text names the schema's declaration (public); the dead letters store `why` alone
                        res.first_invalid = f"{chunk.where(row)}: {with_declaration(self.schema, why)}"
                    pending.append((pool.submit(self._send, envs), chunk.n_in))
                    while len(pending) > _IN_FLIGHT:
                        fut, n = pending.pop(0)
                        res += fut.result()
                        sent += n
                    if progress is not None:
                        progress(sent)
            except read_errors.SourceError as e:  # raised below, once what is in flight is sent
                failed = e
            finally:
                while pending:  # wait for what is in flight (and raise its error) before returning
                    fut, n = pending.pop(0)
                    res += fut.result()
                    sent += n
        self.last_batch_ids = res.batch_ids
        if failed is not None:
            err = read_errors.SourceError(f"{failed}; {self._pushed_before(res.n_records, batch_id)}")
            err.n_pushed = res.n_records
            raise err from None
        return res

    def _pushed_before(self, n: int, batch_id: str | None) -> str:
        """What a push that failed part way has sent, and what pushing again does (value-free words)."""
        if n == 0:
            return "no record was pushed"
        done = f"the first {n:,} records were pushed before the error"
        if batch_id is not None or not self.dedup:
            return f"{done}; pushing them again counts them again (no content ids): push only the rest"
        again = (
            "pushing the corrected data again (same records before the error, same batch size and source) "
            "merges only the rest: batch ids derive from each batch's content and position, and workers "
            "merge an id once"
        )
        if self._key_of_process:
            again += " (in this process only: without a producer key file another process's ids differ)"
        return f"{done}; {again}"

    def push(
        self, X: Any, y: Any, *, batch_id: str | None = None, source: str = "", ids: Any = None
    ) -> str | list[str]:
        """Send ``X`` (DataFrame with the attributes by name, 2-D array-like or list of dicts) with labels ``y``.

        Returns the stream entry id, or a list of ids when the input was split into several
        batches of ``batch_size``. Ids follow the module's rule (``source`` labels genuinely
        new records); ``batch_id`` (a single batch only) sets the id explicitly.

        ``ids``: one privacy id per record (str or bytes), for a model whose unit is a person
        (:mod:`.units`); each batch then gets a new batch id unless ``batch_id`` is given (a retried push must
        pass the same one to be merged once).
        """
        n = len(X)
        if batch_id is not None and n > self.batch_size:
            raise ValueError("batch_id applies to a single batch; lower the input size or raise batch_size")
        if ids is not None:
            return self._push_people(X, y, ids, batch_id)
        rows = max(self.batch_size, (frames.CHUNK_ROWS // self.batch_size) * self.batch_size)
        chunks = frames.frame_chunks(
            X, y, self.schema, chunk_rows=rows, on_invalid="raise" if self.on_invalid == "raise" else "drop"
        )
        if n == 0:
            chunks = iter(
                [
                    frames.Chunk(
                        0, np.empty((0, self.schema.n_attributes)), np.empty(0, np.int64), 0, np.empty(0, np.int64)
                    )
                ]
            )
        out = self.push_chunks(chunks, source=source, batch_id=batch_id)
        return out[0] if len(out) == 1 else list(out)

    def push_records(
        self, records: Iterable[dict], label: str | None = None, labels: Any = None, **kw
    ) -> str | list[str]:
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

    def _push_people(self, X: Any, y: Any, ids: Any, batch_id: str | None) -> str | list[str]:
        """:meth:`push` with a privacy id per record: ``batch_size`` records per envelope, ids beside them."""
        ids = list(ids)
        rows = list(X) if not hasattr(X, "iloc") else [X.iloc[i] for i in range(len(X))]
        ys = list(y)
        if not (len(ids) == len(rows) == len(ys)):
            raise ValueError(f"{len(ids)} privacy ids for {len(rows)} records and {len(ys)} labels")
        mode = "raise" if self.on_invalid == "raise" else "dead-letter"
        out = []
        for s in range(0, max(len(rows), 1), self.batch_size):
            env = codec.encode_batch(
                self.schema,
                rows[s : s + self.batch_size],
                ys[s : s + self.batch_size],
                batch_id=batch_id,
                on_invalid=mode,
                ids=ids[s : s + self.batch_size],
            )
            out += self._send([env])
        return out[0] if len(out) == 1 else out

    def push_raw(self, payload: bytes) -> str:
        """XADD an already-built envelope (see :mod:`streamdp.service.codec`)."""
        return self._send([payload])[0]

    def consumers(self) -> int | None:
        """How many workers are in the model's consumer group (XINFO GROUPS; 0 when no worker ever joined it),
        or None when this user may not ask (the deploy ACL's producer may not read the stream) or the
        stream is absent. A worker that died without leaving stays counted until a live one forgets it."""
        try:
            groups = self.redis.xinfo_groups(self.keys.records)
        except redis.RedisError:  # NOPERM, no such key: a push that succeeded does not fail for a note
            return None
        for g in groups:
            if g.get("name") in (GROUP, GROUP.encode()):
                return int(g.get("consumers", 0))
        return 0

    def live_consumers(self) -> int | None:
        """How many workers of the model's consumer group are live (:attr:`.group.Holder.live`: read within
        :data:`.group.LIVE_IDLE_S` and not provably gone, so a worker killed moments ago is not counted); None as
        :meth:`consumers`."""
        n = self.consumers()
        if not n:
            return n
        return sum(h.live for h in holders(self.redis, self.keys.records, GROUP))

    def close(self) -> None:
        """Close the Redis client if this producer made it (not one passed in)."""
        if self._owns_client:
            self.redis.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
