"""Reading data sources: CSV files and DataFrames to schema codes, chunk by chunk.

Shared by ``streamdp push``, :class:`~streamdp.service.producer.Producer` and
batch jobs. CSV is parsed by pandas' C reader in chunks (a large file never
sits in memory as Python objects), each chunk coded by :mod:`streamdp.records.frames`;
the checks here refuse a file before a job reading it is charged. In-memory
records (:func:`frame_chunks`), the error wording (:mod:`streamdp.records.read_errors`)
and reading ahead (:func:`prefetch`) have their own modules, re-exported here.

Bad values raise (or, with ``on_invalid="drop"``, drop the row and list it)
with a reason naming the attribute and where the row is, never the value:
reasons reach logs and dead letters. A CSV row is named by its line in the
file (``line 4``: 1-based, the header being line 1, see :func:`read_csv_chunks`),
an in-memory record by its 0-based position (``record 2 (0-based)``).

>>> import io
>>> from streamdp import Schema
>>> s = Schema.from_dict({"attributes": [{"name": "a", "type": "categorical", "values": [1, 2]},
...                                      {"name": "x", "type": "numeric", "min": 0, "max": 9}],
...                       "label": {"name": "y", "values": [True, False]}})
>>> [(c.offset, c.X.tolist(), c.y.tolist(), c.dropped)
...  for c in read_csv_chunks(io.StringIO("a,x,y\\n2, 3.5,true\\n7,1,false\\n"), s, on_invalid="drop")]
[(0, [[1.0, 3.5]], [0], [(1, "attribute 'a' has a value not declared in the schema")])]
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from typing import IO, Any, cast

import numpy as np
import pandas as pd
from pandas.io.common import get_handle, infer_compression

from streamdp.records.datasets import parse
from streamdp.records.domains import Categorical
from streamdp.records.frames import CHUNK_ROWS, Chunk, as_frame, encode_frame, frame_chunks
from streamdp.records.prefetch import prefetch
from streamdp.records.read_errors import (
    FILE_ERRNOS,
    UNREADABLE,
    InvalidRecordsWarning,
    SourceError,
    bad_line,
    cannot_read,
    row_words,
    unreadable,
)
from streamdp.records.schema import Schema

__all__ = [
    "check_columns",
    "label_index",
    "SourceError",
    "Chunk",
    "encode_frame",
    "check_header",
    "read_csv_chunks",
    "read_bundled",
    "frame_chunks",
    "prefetch",
    "read_dataset",
    "as_frame",
    "CHUNK_ROWS",
    "check_decompresses",
    "check_records",
    "compression_of",
    "InvalidRecordsWarning",
    "FILE_ERRNOS",
]


def check_header(
    source: str | os.PathLike | IO,
    schema: Schema,
    label: str | int | None = None,
    *,
    compression: str | None = "infer",
    privacy_id: str | None = None,
) -> tuple[list, str]:
    """The header's column names and the label column's name; :class:`SourceError` when the header lacks a
    column the schema needs (or the ``privacy_id`` column, which must be neither an attribute nor the label).
    Reads the header line only (no record), so a job can be refused before it is charged.
    A file object is read from where it stands and rewound; ``compression`` as pandas' (by a path's suffix).
    """
    name = getattr(source, "name", source)
    first = _read_head(
        source, name, "header", header=None, nrows=1, dtype=str, keep_default_na=False, compression=compression
    )
    if hasattr(source, "seek"):
        source.seek(0)
    head = [str(h).strip() for h in (first.iloc[0] if len(first) else [])]
    _refuse_binary(name, head)
    twice = [i + 1 for i, h in enumerate(head) if h and head.index(h) < i]
    if twice:  # (a reader would take one of them, or rename the other 'age.1', without a word)
        # by position, not name: in a file without a header the first line is a record
        raise SourceError(f"{name}: the header names a column twice (again at column {twice[0]})")
    lab_name = label if isinstance(label, str) else schema.label.name
    if lab_name in schema.names:  # (else every row is dropped, after a job's charge)
        raise SourceError(f"{name}: the label column {lab_name!r} is an attribute of the schema")
    if privacy_id is not None and (privacy_id in schema.names or privacy_id == lab_name):
        raise SourceError(f"{name}: the privacy id column {privacy_id!r} is an attribute or the label of the schema")
    missing = [c for c in [*schema.names, lab_name, *([privacy_id] if privacy_id else [])] if c not in head]
    if missing:
        hint = (
            (
                "; if its first line is a record, the file has no header row: read it with header=False "
                "(CLI: --no-header)"
            )
            if len(missing) == len(schema.names) + 1
            else ""
        )
        # (its own names are not shown: in a file without a header the first line is a record)
        raise SourceError(f"{name}: the header lacks the columns {missing} (it has {len(head)} columns){hint}")
    return head, lab_name


def _read_head(source: Any, name: Any, what: str, **kw: Any) -> pd.DataFrame:
    """The checks' read of a file's first line(s) (``pd.read_csv(source, skipinitialspace=True, **kw)``), refused in
    fixed words: empty, unreadable (``what`` names the part read), or a file that cannot be opened."""
    try:
        return pd.read_csv(source, skipinitialspace=True, **kw)
    except pd.errors.EmptyDataError:
        raise SourceError(f"{name}: empty file") from None
    except UNREADABLE as e:
        raise SourceError(f"{name}: cannot read its {what}: {unreadable(e)}") from None
    except OSError as e:
        raise cannot_read(name, e) from None


def _refuse_binary(name: Any, fields: list[str]) -> None:
    """A first line holding NUL bytes is no CSV text: a tar archive under a ``.gz`` name read as plain gzip (its
    header block would become a record). :class:`SourceError`, no content shown."""
    if any("\x00" in f for f in fields):
        raise SourceError(
            f"{name}: its first line holds binary bytes (NUL), not CSV text: an archive under another "
            "name? (a gzipped tar archive must be named .tar.gz; no content is shown)"
        )


def label_index(label: str | int | None, schema: Schema, name: str = "the file") -> int:
    """The label's column (0-based) in a file without a header: ``label`` (default 0, negative from the end) among
    the schema's ``n_attributes + 1`` columns; :class:`SourceError` outside them.

    >>> from streamdp.records.datasets import load
    >>> s = load("congressional-voting").schema
    >>> label_index(None, s), label_index(-1, s)
    (0, 16)
    """
    width = schema.n_attributes + 1
    try:
        li = 0 if label is None else int(label)
        if label is not None and not isinstance(label, str) and li != label:  # (3.7 is no column)
            raise ValueError
    except (TypeError, ValueError):
        raise SourceError(f"{name}: without a header the label column is an index, got {label!r}") from None
    if isinstance(label, bool) or not -width <= li < width:  # (a wrapped index would shift every column)
        raise SourceError(
            f"{name}: label column {label!r} is outside the {width} columns "
            f"({schema.n_attributes} attributes and the label): use -{width}..{width - 1}"
        )
    return li % width


def check_columns(
    path: str | IO,
    schema: Schema,
    *,
    header: bool = True,
    label: str | int | None = None,
    first_label: bool = True,
    compression: str | None = "infer",
    privacy_id: str | None = None,
) -> None:
    """Refuse, reading the first line only, a file whose columns cannot be the schema's (a job checks this before
    it is charged): with a header, :func:`check_header`; without, the label index, the first record's field
    count (the label and the attributes: a wider line, an id column first say, would shift every column) and,
    with ``first_label``, that its label field is a declared class. That last check reads a value: only where
    the file's owner submits it (``job submit``, ``push``), never in a job worker before its charge. ``path``
    may be a binary file object (with ``compression`` given: pandas infers it from a path's suffix only), read from
    where it stands and rewound."""
    if header:
        check_header(path, schema, label, compression=compression, privacy_id=privacy_id)
        return
    if privacy_id is not None:
        raise SourceError(
            f"{getattr(path, 'name', path)}: a privacy id column is found by its name: the file needs a header"
        )
    name = getattr(path, "name", path)
    li = label_index(label, schema, str(name))
    # read as read_csv_chunks reads (pandas: blank lines skipped, a compressed file by its suffix)
    head = _read_head(
        path, name, "first record", header=None, nrows=1, dtype=str, keep_default_na=False, compression=compression
    )
    if hasattr(path, "seek"):
        path.seek(0)
    first = [str(v) for v in head.iloc[0]] if len(head) else []
    if not first:
        raise SourceError(f"{name}: empty file")
    _refuse_binary(name, first)
    width = schema.n_attributes + 1
    if first_label and {*schema.names, schema.label.name} <= {f.strip() for f in first}:
        # (--no-header on a file with a header; values read: only where the owner submits the file,
        # and all the columns' names, the label's too: a schema whose names are digits has records of digits)
        raise SourceError(
            f"{name}: its first line holds the schema's column names: the file has a header row, "
            "so read it without header=False (CLI: drop --no-header)"
        )
    if len(first) < width or any(f.strip() for f in first[width:]):  # (empty fields past the last: trailing commas)
        raise SourceError(
            f"{name}: its first record has {len(first)} fields; without a header a record is the "
            f"label and {schema.n_attributes} attributes ({width} fields)"
        )
    if first_label and first[li].strip() not in {str(v) for v in schema.label.values}:
        # (the submitter's own file, read where it is submitted: a label column on an attribute fit no record)
        raise SourceError(
            f"{name}: column {li} of its first record is not one of the classes "
            f"{list(schema.label.values)}: is the label column --label INDEX?"
        )


def check_decompresses(source: IO[bytes], compression: str | None, name: str) -> None:
    """Read a compressed file to its end (``source``, rewound after; nothing when ``compression`` is None):
    :class:`SourceError` in fixed words when it is cut short or corrupt. A job worker checks this before its charge
    (else a truncated ``.csv.gz`` is charged, then fails); it reads bytes, not records."""
    if compression is None:
        return
    try:
        with get_handle(source, "rb", compression=compression, is_text=False) as h:
            while h.handle.read(1 << 20):
                pass
    except UNREADABLE as e:
        raise SourceError(f"{name}: cannot read it: {unreadable(e)}") from None
    except OSError as e:
        raise cannot_read(name, e) from None
    finally:
        source.seek(0)


def check_records(path: str, schema: Schema, *, header: bool = True, label: str | int | None = None) -> None:
    """Read a job's file as the job will (invalid rows dropped) where its owner submits it: refuse a file of which
    no record would be kept (misspelt values or labels are, as a rule, in every record: such a job would be
    charged, then fit on none; a header alone too), and warn of the records the job will drop, how many and the first
    (else a file with one class misspelt is charged and fit without it, in silence). Reads values and
    counts them: only in the owner's process, for the owner. :class:`SourceError` in the reader's value-free words."""
    name = getattr(path, "name", path)
    n_in = n_kept = 0
    first_bad = None
    for c in read_csv_chunks(path, schema, header=header, label=label, on_invalid="drop"):
        n_in, n_kept = n_in + c.n_in, n_kept + len(c.y)
        if first_bad is None and c.dropped:
            row, why = c.dropped[0]
            first_bad = f"{c.where(row)}: {why}"
    hint = "are its values spelt as the schema declares them? is it the label column and the header the file has?"
    if not n_in:
        raise SourceError(f"{name}: holds no record" + ("" if not header else " (a header line alone?)"))
    if not n_kept:
        raise SourceError(f"{name}: none of its {n_in:,} records is one of the schema's (first: {first_bad}): {hint}")
    if first_bad is not None:
        warnings.warn(
            f"{name}: {n_in - n_kept:,} of its {n_in:,} records are not the schema's and a job drops them "
            f"(first: {first_bad}): {hint}",
            InvalidRecordsWarning,
            stacklevel=2,
        )


def read_csv_chunks(
    source: str | os.PathLike | IO,
    schema: Schema,
    *,
    label: str | int | None = None,
    header: bool = True,
    chunk_rows: int = CHUNK_ROWS,
    on_invalid: str = "raise",
    progress: Any = None,
    compression: str | None = "infer",
    privacy_id: str | None = None,
) -> Iterator[Chunk]:
    """Coded chunks of a CSV file (path, or a text or binary stream; ``compression`` as pandas' takes it, inferred
    from a path's suffix by default, never from a stream's name).

    With ``header`` the columns are found by name (the label column is ``label`` or the
    schema's label name); without, the label is column ``label`` (default 0) and the
    attributes follow in schema order. ``progress(done_fraction)`` is called after each chunk
    when given. Chunk offsets and ``dropped`` positions count data rows from 0.

    **Where errors point.** A bad value is named by its line in the file, 1-based, the header
    being line 1 (``line 4``: the third record). Blank lines are skipped and *not* counted
    there, nor are the extra lines of a quoted value spanning several lines: after such lines
    the real line is that many further down. A malformed line (an unbalanced quote, a row of
    another width) is named by the CSV reader's own count, which does count blank lines (but
    also counts a quoted value spanning lines as one). Errors never show the file's content.

    **Rows of another width.** A row may end in one empty field past the header's (a trailing comma,
    common in exported files); a row with a non-empty field there, or with more fields, is a
    :class:`SourceError` naming its line, never a record. A row with fewer fields has its last columns
    missing (an invalid row).

    A :class:`SourceError` raised while reading (a malformed line, a bad value with
    ``on_invalid="raise"``) comes after the chunks of the records before it were yielded.
    """
    name = getattr(source, "name", source)
    try:
        size = os.path.getsize(source) if isinstance(source, (str, os.PathLike)) else 0
    except OSError as e:
        raise cannot_read(name, e) from None
    lab_name = schema.label.name
    if privacy_id is not None and not header:
        raise SourceError(f"{name}: a privacy id column is found by its name: the file needs a header")
    if header:
        head, lab_name = check_header(source, schema, label, compression=compression, privacy_id=privacy_id)
        # the header line skipped and named here: the C reader then refuses a row wider than ``names``
        kw: dict = {"header": None, "skiprows": 1, "names": [*head, _TRAILING]}
        line0 = 2
    else:
        width = schema.n_attributes + 1
        li = label_index(label, schema, str(name))
        cols = [c for c in range(width) if c != li]
        names = [""] * width
        for c, a in zip(cols, schema.names):
            names[c] = a
        names[li] = lab_name
        kw = {"header": None, "names": [*names, _TRAILING]}
        line0 = 1
    cat = {a.name for a in schema.attributes if isinstance(a, Categorical)} | {lab_name}
    try:
        # (only an empty field is missing: pandas' default also took "NA", "null", "None", "nan"... for missing,
        # so a class or value of that name was dropped after a job's charge, where check_columns had read it)
        wanted = [*schema.names, lab_name]
        reader = pd.read_csv(  # (no usecols: with it the C reader lets rows of any width through)
            source,
            dtype={c: "category" if c in cat else "object" for c in kw["names"] if c in cat or c not in wanted},
            skipinitialspace=True,
            chunksize=chunk_rows,
            engine="c",
            keep_default_na=False,
            na_values=[""],
            compression=compression,
            **kw,
        )
        fh = getattr(getattr(reader, "handles", None), "handle", None)
        offset = 0
        with reader:
            for df in reader:
                wide = df[_TRAILING].notna().to_numpy()
                if wide.any():
                    at = line0 + offset + int(np.argmax(wide))
                    raise SourceError(f"line {at}: a field past the last column (a row wider than the header)")
                pids = None if privacy_id is None else df[privacy_id].to_numpy(dtype=object)
                df = df[wanted]
                # (with privacy ids, rows are dropped first: a missing id may come before the first bad value)
                mode = "drop" if pids is not None else on_invalid
                enc = encode_frame(
                    schema, df, df[lab_name], text=True, on_invalid=mode, row0=offset, line0=line0 + offset
                )
                X, y, kept, dropped = enc.X, cast(np.ndarray, enc.y), enc.kept, enc.dropped
                ids = None
                if pids is not None:  # a record without its person cannot be bounded: invalid, as the worker says
                    ids = pids[kept]
                    has = np.array([isinstance(v, str) and v != "" for v in ids], dtype=bool)
                    why = f"privacy id {privacy_id!r} missing"
                    dropped = sorted([*dropped, *((int(r), why) for r in kept[~has])])
                    X, y, kept, ids = X[has], y[has], kept[has], ids[has]
                    if dropped and on_invalid == "raise":
                        raise SourceError(f"{row_words(dropped[0][0], offset, line0 + offset)}: {dropped[0][1]}")
                yield Chunk(offset, X, y, len(df), kept, dropped, line0=line0 + offset, ids=ids)
                offset += len(df)
                if progress is not None and size and fh is not None and hasattr(fh, "tell"):
                    progress(min(1.0, fh.tell() / size))
    except SourceError as e:
        raise SourceError(f"{name}: {e}") from None
    except UNREADABLE as e:
        line = bad_line(e)
        if line is not None:
            raise SourceError(f"{name}: line {line}: {unreadable(e)}") from None
        raise SourceError(f"{name}: not a CSV file of the schema's columns: {unreadable(e)}") from None
    except OSError as e:
        raise cannot_read(name, e) from None


#: The name of the one field a row may have past the last column (a trailing comma): it must be empty.
_TRAILING = "\x00trailing field"


def read_bundled(name: str, schema: Schema, lines: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
    """Encoded ``(X, y)`` of a bundled (or shared UCI) dataset by name, never a file of that name, from the lines
    :func:`streamdp.records.datasets.pinned_lines` read and checked."""
    ds = parse(name, lines)
    enc = schema.encode(ds.X, ds.y, on_invalid="drop")
    return enc.X, cast(np.ndarray, enc.y)


def compression_of(path: str | os.PathLike) -> str | None:
    """The compression pandas infers from ``path``'s suffix (None: none), to read a copy of that file from a stream
    as the file itself is read (pandas infers nothing from a stream).

    >>> compression_of("votes.csv.gz"), compression_of("votes.tar.gz"), compression_of("votes.csv")
    ('gzip', 'tar', None)
    """
    return infer_compression(os.fspath(path), "infer")


def read_dataset(
    path: str | IO,
    schema: Schema,
    *,
    header: bool = True,
    label: str | int | None = None,
    compression: str | None = "infer",
    privacy_id: str | None = None,
) -> tuple:
    """Encoded ``(X, y)`` of a CSV file (read as :func:`read_csv_chunks` reads it: ``header``, ``label``,
    ``compression``); a known
    dataset's name is :func:`read_bundled`'s (a name here is never looked up as a file, or the other way round).

    Rows with values outside the declared schema are dropped; a file without the
    schema's columns raises :class:`SourceError`. With ``privacy_id`` (a column of the header), ``(X, y, ids)``:
    the ids as strings (object array), rows with an empty id dropped (no person to bound them by).
    """
    Xs, ys, ids = [], [], []
    chunks = read_csv_chunks(
        path, schema, header=header, label=label, on_invalid="drop", compression=compression, privacy_id=privacy_id
    )
    for c in chunks:
        if c.ids is not None:
            has = np.array([isinstance(v, str) and v != "" for v in c.ids], dtype=bool)
            Xs.append(c.X[has])
            ys.append(c.y[has])
            ids.append(c.ids[has])
        else:
            Xs.append(c.X)
            ys.append(c.y)
    if not Xs:
        empty = (np.empty((0, schema.n_attributes)), np.empty(0, dtype=np.int64))
        return empty if privacy_id is None else (*empty, np.empty(0, dtype=object))
    X, y = np.concatenate(Xs), np.concatenate(ys).astype(np.int64)
    return (X, y) if privacy_id is None else (X, y, np.concatenate(ids))
