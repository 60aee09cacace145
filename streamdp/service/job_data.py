"""A batch job's data: a model's retained stream records, or a dataset file pinned at submit.

A dataset is checked against the SHA-256 pinned when the job was submitted, and its columns against the
schema, BEFORE the job's charge; it is then read from a private copy of the very bytes checked, so what a
job reads after its charge is what its submitter's checks saw.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from typing import IO, Any, cast

import numpy as np

from streamdp.jobs.runner import JobError
from streamdp.privacy.ledger import stream_sha256
from streamdp.records.datasets import DatasetChanged, pinned_lines
from streamdp.records.read_errors import FILE_ERRNOS, SourceError
from streamdp.records.schema import Schema
from streamdp.records.sources import check_columns, check_decompresses, compression_of, read_bundled, read_dataset
from streamdp.service import codec
from streamdp.service.keys import Keys, as_str

__all__ = ["read_model_records", "dataset_loader"]


def read_model_records(r: Any, name: str, schema: Schema, *, chunk: int = 100, ids: bool = False) -> tuple:
    """Encoded ``(X, y)`` of model ``name``'s retained records (stream entries up to its newest id now).

    Each batch counts once, as in the stream: a retried push (an entry with a
    batch id already seen) is skipped, so its people are read once and cost
    a job's epsilon once. The rule: every decodable entry whose ``batch_id``
    has not been read earlier in stream order, merged yet or still pending (a
    pending batch is merged once or dead-lettered; reading its records once is
    what the job's charge covers). Undecodable entries are skipped (the stream
    worker dead-letters them), and so are the bad rows of a decodable one.

    ``ids=True`` (a model whose unit is a person): ``(X, y, ids)`` with each record's privacy id; an entry without
    ids is skipped (the stream worker dead-letters it too).
    """
    stream = Keys(name).records
    newest = r.xrevrange(stream, "+", "-", count=1)
    empty = (np.empty((0, schema.n_attributes)), np.empty(0, dtype=np.int64))
    if not newest:
        return (*empty, np.empty(0, dtype=object)) if ids else empty
    end = as_str(newest[0][0])
    Xs, ys, Is = [], [], []
    seen: set[str] = set()
    start = "-"
    while True:
        entries = r.xrange(stream, start, end, count=chunk)
        for eid, fields in entries:
            data = fields.get(b"d", fields.get("d"))
            try:
                b = codec.decode(schema, data)
            except codec.EnvelopeError:
                continue  # undecodable: the stream worker dead-letters it
            if b.batch_id in seen:
                continue  # a retried push of a batch already read: the stream merges it once
            if ids and b.ids is None:
                continue  # no person to bound its records by (dead-lettered by the stream worker too)
            seen.add(b.batch_id)
            Xs.append(b.X)
            ys.append(b.y)
            if ids:
                col = np.empty(len(b.ids or []), dtype=object)
                col[:] = b.ids or []
                Is.append(col)
        if len(entries) < chunk:
            break
        start = "(" + as_str(entries[-1][0])
    if not Xs:
        return (*empty, np.empty(0, dtype=object)) if ids else empty
    X, y = np.concatenate(Xs).astype(np.float64), np.concatenate(ys).astype(np.int64)
    return (X, y, np.concatenate(Is)) if ids else (X, y)


def dataset_loader(doc: dict, schema: Schema, stack: contextlib.ExitStack) -> Callable[[], tuple]:
    """The job's dataset, checked against the SHA-256 pinned at submit BEFORE the charge, and read once.

    A bundled dataset is loaded by name, never looked up in this worker's directory (where a file of that
    name could stand in for it), from lines read once and found to be the bytes pinned (parsing the same
    lines, nothing swapped in later is read). A user's file is copied aside while it is hashed (one read,
    :func:`_pinned_copy`) and the copy is parsed: else a file replaced or rewritten between the check and the
    read (after the charge) would be read as it then is.
    The copy takes the file's size in the temporary folder until it is parsed, under no name."""
    path = doc["dataset"]
    digest = doc.get("dataset_sha256") or ""
    header = doc.get("header", "1") != "0"  # (jobs queued by an earlier version: a header, the label by name)
    label = json.loads(doc.get("label") or "null")
    privacy_id = doc.get("privacy_id") or None
    if doc.get("bundled") == "1":
        try:
            lines = pinned_lines(path, digest)
        except DatasetChanged:
            raise JobError(
                f"dataset {path!r} here is not the one submitted (sha256 {digest[:16]}... "
                "expected); nothing was charged or read"
            ) from None
        except (KeyError, FileNotFoundError) as e:
            raise JobError(f"{e}; nothing was charged") from None

        def read() -> tuple:
            return read_bundled(path, schema, lines)
    else:
        copy = _pinned_copy(path, digest, stack)
        compression = compression_of(path)  # (the copy has no name to infer it from: ``.tar.gz`` included)
        try:  # the columns of the very bytes pinned (submit checked them on a read of its own), before the charge
            check_columns(
                copy,
                schema,
                header=header,
                label=label,
                first_label=False,
                compression=compression,
                privacy_id=privacy_id,
            )
            # (submit read these bytes whole; this worker may lack a library submit had, a .zst's, or run a job
            # queued before submits did: a failure after the charge is a charge for nothing)
            check_decompresses(copy, compression, path)
        except SourceError as e:
            raise JobError(f"{e}; nothing was charged") from None

        def read() -> tuple:
            with copy:  # parsed: the copy of the user's data goes now, not after the fit
                copy.seek(0)
                return read_dataset(
                    copy, schema, header=header, label=label, compression=compression, privacy_id=privacy_id
                )

    def load() -> tuple[np.ndarray, np.ndarray]:
        try:
            return read()
        except SourceError as e:
            raise JobError(str(e)) from None
        except Exception as e:  # (after the charge) a reader's own message may quote the data
            raise JobError(f"dataset {path!r} could not be read ({type(e).__name__}; no content is shown)") from None

    return load


def _pinned_copy(path: str, digest: str, stack: contextlib.ExitStack) -> IO[bytes]:
    """A private copy of the user's file ``path``, written while its bytes are hashed, rewound; :class:`JobError`
    unless they are the ``digest`` pinned at submit. It answers to ``path``'s name (the readers' messages name the
    file submitted) and is closed with ``stack`` if not before.

    The copy is an anonymous temporary file: it has no name in any folder, so nobody else can open it and it is
    gone with its last descriptor, a worker killed mid-read included.
    ``path`` is opened without blocking (nor as a terminal) and must be a regular file (a FIFO or a device swapped
    in would hang the worker or fill the disk), and no more than its size is read. A file gone or no longer reachable
    "changed"; one this worker may not read says so. The worker's own troubles are raised as they are, so the
    attempt fails and is retried: out of file descriptors, an error mid-copy, a file that does not fit the
    temporary folder's room (checked before any byte is copied: a sparse file would fill the disk at every attempt).

    >>> import hashlib
    >>> with tempfile.NamedTemporaryFile(suffix=".csv") as f, contextlib.ExitStack() as stack:
    ...     _ = f.write(b"a,b"); f.flush()
    ...     copy = _pinned_copy(f.name, hashlib.sha256(b"a,b").hexdigest(), stack)
    ...     copy.read(), copy.name == f.name
    (b'a,b', True)
    """
    changed = JobError(
        f"dataset file {path!r} changed or vanished since the job was submitted "
        f"(sha256 {digest[:16]}... expected); nothing was charged or read"
    )
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as e:
        if e.errno in (errno.EACCES, errno.EPERM):
            raise JobError(
                f"dataset file {path!r} cannot be read by the job worker (permission denied: it runs as "
                "another user than the submitter?); nothing was charged or read"
            ) from None
        if e.errno in FILE_ERRNOS:
            raise changed from None
        raise
    try:
        st = os.fstat(fd)
        if not digest or not stat.S_ISREG(st.st_mode):
            raise changed
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)  # (a FUSE file's EAGAIN)
        if st.st_size > shutil.disk_usage(tempfile.gettempdir()).free - _SPARE_BYTES:
            raise OSError(errno.ENOSPC, "the dataset file does not fit this worker's temporary folder")
        src = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with src:
        copy = stack.enter_context(tempfile.TemporaryFile())  # (an error mid-copy: the attempt fails, is retried)
        got = stream_sha256(src, copy, limit=st.st_size)
    if got != digest:
        raise changed
    copy.seek(0)
    cast(Any, copy.raw).name = path  # (its own name is a descriptor number)
    return copy


#: Room left in the temporary folder after a copy (the rest of the worker's writes).
_SPARE_BYTES = 64 << 20
