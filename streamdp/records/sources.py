"""Reading data sources: CSV files and DataFrames to schema codes, chunk by chunk.

Shared by ``streamdp push``, :class:`~streamdp.service.producer.Producer` and
batch jobs. CSV is parsed by pandas' C reader in chunks (a 1 M-row file never
sits in memory as Python objects); each column is coded by vectorised lookups:
a column of text is factorised (one hash pass in C) and only its distinct
values go through the schema's lookup (:meth:`Schema.encode`'s dict and
table paths), other columns through :meth:`Schema.encode`'s column coder.
A CSV cell spells a declared value as ``str(value)`` (booleans in any case);
surrounding spaces are ignored.

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

import errno
import gzip
import lzma
import math
import os
import queue
import re
import tarfile
import threading
import warnings
import zipfile
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import IO, Any

import numpy as np
import pandas as pd
from pandas.io.common import get_handle, infer_compression

from streamdp.records.coding import lookup_codes
from streamdp.records.datasets import parse
from streamdp.records.schema import Categorical, Encoded, Schema

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
]

#: Rows per chunk read from a CSV file (about 10 MB of Adult-like text).
CHUNK_ROWS = 65_536


class SourceError(ValueError):
    """A data source that cannot be read against its schema (the message names the file and what is wrong).

    ``n_pushed``: when it stopped a push part way, the records pushed before it (None otherwise)."""

    n_pushed: int | None = None


@dataclass
class Chunk:
    """Consecutive records of a source, coded: rows ``offset .. offset + n_in - 1`` of its data rows.

    ``X``/``y`` hold the valid rows' codes (as :class:`~streamdp.records.schema.Encoded`);
    ``dropped`` lists ``(row within the chunk, reason)`` of rows left out. ``line0``: the file
    line of the chunk's first row, for CSV input (numbered as :func:`read_csv_chunks` says);
    :meth:`where` names a row for a message.
    """

    offset: int
    X: np.ndarray
    y: np.ndarray
    n_in: int
    kept: np.ndarray  # positions (within the chunk) of the rows in X
    dropped: list[tuple[int, str]] = field(default_factory=list)
    line0: int | None = None

    def where(self, row: int) -> str:
        """Row ``row`` of the chunk in words: ``"line 4"`` (CSV) or ``"record 2 (0-based)"``.

        >>> c = Chunk(10, np.empty((0, 1)), np.empty(0), 5, np.empty(0, np.int64))
        >>> c.where(2), Chunk(10, c.X, c.y, 5, c.kept, line0=12).where(2)
        ('record 12 (0-based)', 'line 14')
        """
        return _row_words(row, self.offset, self.line0)


def _row_words(i: int, row0: int, line0: int | None) -> str:
    """Row ``i`` of a frame whose first row is record ``row0`` (0-based), or file line ``line0``."""
    return f"record {row0 + i} (0-based)" if line0 is None else f"line {line0 + i}"


def _text_values(values: tuple) -> dict:
    out: dict = {}
    for v in values:
        out.setdefault(str(v), v)
    return out


def _bool_text(values: tuple) -> dict:
    return {str(v).lower(): v for v in values if isinstance(v, bool)}


def _number_text(values: tuple) -> dict:
    """Declared numbers by exact value, for text spelling them otherwise (``1.0`` for a declared ``1``: a file
    pandas wrote from river's data had every record refused, where the river encoder takes ``1.0`` for ``1``)."""
    return {
        Decimal(repr(v) if isinstance(v, float) else v): v
        for v in values
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    }


#: A number as CSV writers spell one (ASCII digits, a sign, a point, an exponent): not ``1_0``, not other digits.
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _as_number(text: str) -> Decimal | None:
    """The exact value of a plain number's text, else None.

    >>> _as_number("1.0") == 1, _as_number("1_0"), _as_number("nan")
    (True, None, None)
    """
    return Decimal(text) if _NUMBER.fullmatch(text) else None


# Reasons name the attribute (or label) and what is wrong in fixed words, never the value
# (the wording of streamdp.service.codec's value-free reasons).
_MISSING_WORDS = "is missing"
_UNDECLARED_WORDS = "has a value not declared in the schema"


def _codes_of_text(values: tuple, lookup: dict, col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Codes of a column of CSV text (-1: not declared) and its missing cells; distinct values looked up once."""
    codes, uniq = _factorize(col)
    text, btext, ntext = _text_values(values), _bool_text(values), _number_text(values)
    decl = np.empty(len(uniq) + 1, dtype=object)
    for i, u in enumerate(uniq):
        u = str(u).strip()
        decl[i] = text.get(u, btext.get(u.lower(), _UNDECLARED))
        if decl[i] is _UNDECLARED and ntext:
            decl[i] = ntext.get(_as_number(u), _UNDECLARED)
    decl[-1] = None  # NaN cells: factorize's -1 indexes the last slot
    return lookup_codes(lookup, decl)[codes], codes < 0


_UNDECLARED = object()


def _factorize(col: pd.Series) -> tuple[np.ndarray, Any]:
    """``(codes, distinct values)`` of a column, -1 for missing cells (a categorical column is already coded)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return col.cat.codes.to_numpy(), col.cat.categories
    return pd.factorize(col, use_na_sentinel=True)


def _factorizable(col: pd.Series) -> bool:
    if isinstance(col.dtype, (pd.StringDtype, pd.CategoricalDtype)):
        return True
    return col.dtype == object and pd.api.types.infer_dtype(col, skipna=True) in ("string", "empty")


def encode_frame(
    schema: Schema,
    frame: pd.DataFrame,
    y: Any = None,
    *,
    text: bool = False,
    on_invalid: str = "raise",
    row0: int = 0,
    line0: int | None = None,
) -> Encoded:
    """Code a DataFrame holding the schema's attributes by name (and labels ``y``) against ``schema``.

    ``text=True``: cells are CSV text (``"2"`` spells the declared value 2). String columns are
    factorised; other columns go through :meth:`Schema.encode`'s coder. ``on_invalid="raise"``
    raises :class:`SourceError` naming the attribute and the first bad row: ``record N (0-based)``
    (N = ``row0`` + position), or ``line N`` (N = ``line0`` + position) when ``line0``, the file line
    of the frame's first row, is given; ``"drop"`` leaves bad rows out and lists them (positions
    within the frame).

    >>> from streamdp.records.datasets import load
    >>> ds = load("congressional-voting")
    >>> df = pd.DataFrame(ds.X[:3], columns=ds.schema.names)
    >>> enc = encode_frame(ds.schema, df, ds.y[:3])
    >>> enc.X.shape, enc.y.tolist() == ds.schema.encode(ds.X[:3], ds.y[:3]).y.tolist()
    ((3, 16), True)
    """
    if on_invalid not in ("raise", "drop"):
        raise ValueError(f"on_invalid must be 'raise' or 'drop', got {on_invalid!r}")
    missing = [n for n in schema.names if n not in frame.columns]
    if missing:
        raise SourceError(f"the data lacks the attribute columns {missing}")
    n = len(frame)
    out = np.empty((n, schema.n_attributes), dtype=np.float64)
    bad = np.zeros(n, dtype=bool)
    reasons: dict[int, str] = {}
    first: list = [n, ""]  # under "raise": the first bad record and its first bad value (schema order)

    def flag(ok: np.ndarray, what: str) -> None:
        if ok.all():
            return
        new = np.flatnonzero(~ok & ~bad)
        if on_invalid == "raise":  # every column is checked before the error names the first bad record
            if len(new) and new[0] < first[0]:
                first[:] = [int(new[0]), what]
        else:
            for i in new[:10_000]:
                reasons[int(i)] = what
        bad[new] = True

    for j, a in enumerate(schema.attributes):
        col = frame[a.name]
        what = f"attribute {a.name!r}"
        if isinstance(a, Categorical):
            codes, miss = _column_codes(a.values, schema.value_codes[j], col, text)
            flag(~miss, f"{what} {_MISSING_WORDS}")
            flag(codes >= 0, f"{what} {_UNDECLARED_WORDS}")
            out[:, j] = np.maximum(codes, 0)
        else:
            vals = _numbers(col, text)
            ok = ~np.isnan(vals)
            flag(ok | ~col.isna().to_numpy(), f"{what} {_MISSING_WORDS}")
            flag(ok, f"{what} is not a number")
            vals = np.where(ok, vals, a.min)
            np.minimum(np.maximum(vals, a.min, out=vals), a.max, out=vals)
            out[:, j] = vals
    yc = None
    if y is not None:
        ys = _series(y)
        if len(ys) != n:
            raise ValueError(f"y has {len(ys)} labels but X has {n} records")
        yc, miss = _column_codes(schema.label.values, schema.label_codes, ys, text)
        what = f"label {schema.label.name!r}"
        flag(~miss, f"{what} {_MISSING_WORDS}")
        flag(yc >= 0, f"{what} has a class not declared in the schema")
        yc = np.maximum(yc, 0)
    if not bad.any():
        return Encoded(out, yc, np.arange(n))
    if on_invalid == "raise":
        raise SourceError(f"{_row_words(first[0], row0, line0)}: {first[1]}")
    keep = ~bad
    dropped = (
        sorted(reasons.items())
        if len(reasons) == int(bad.sum())
        else [(int(i), reasons.get(int(i), "invalid record")) for i in np.flatnonzero(bad)]
    )
    return Encoded(out[keep], None if yc is None else yc[keep], np.flatnonzero(keep), dropped)


def _column_codes(values: tuple, lookup: dict, col: pd.Series, text: bool) -> tuple[np.ndarray, np.ndarray]:
    if text:
        return _codes_of_text(values, lookup, col)
    if isinstance(col.dtype, pd.CategoricalDtype):
        return _codes_of_values(lookup, col)
    if _factorizable(col):  # strings: only the declared strings can match, found by one index lookup per cell
        strs = [(i, v) for i, v in enumerate(values) if isinstance(v, str)]
        pos = pd.Index([v for _, v in strs], dtype=object).get_indexer(col)
        codes = np.array([i for i, _ in strs] + [-1], dtype=np.int64)[pos]
        return codes, _missing_where(col, codes)
    arr = col.to_numpy()  # numbers, booleans, mixed objects: Schema.encode's table and dict paths
    if arr.dtype == object:
        miss = col.isna().to_numpy()
    elif arr.dtype.kind in "fc":  # NaN: a missing cell (a key absent from every dict record makes a float column)
        miss = np.isnan(arr)
    else:
        miss = np.zeros(len(arr), bool)
    return lookup_codes(lookup, arr), miss


def _missing_where(col: pd.Series, codes: np.ndarray) -> np.ndarray:
    """Missing cells among those without a code (checking only those: isna is slow on Python strings)."""
    miss = np.zeros(len(codes), dtype=bool)
    nocode = np.flatnonzero(codes < 0)
    if len(nocode):
        miss[nocode] = col.iloc[nocode].isna().to_numpy()
    return miss


def _codes_of_values(lookup: dict, col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Codes of a categorical column (its categories through the schema's lookup), and its missing cells."""
    codes, uniq = _factorize(col)
    decl = np.empty(len(uniq) + 1, dtype=object)
    decl[:-1] = list(uniq)
    decl[-1] = None
    return lookup_codes(lookup, decl)[codes], codes < 0


def _numbers(col: pd.Series, text: bool) -> np.ndarray:
    """A numeric column as float64, NaN where a cell is missing or not a number (booleans and strings are not)."""
    if col.dtype.kind in "iuf":
        return col.to_numpy(dtype=np.float64, na_value=np.nan)
    if text:
        return pd.to_numeric(col.astype("string").str.strip(), errors="coerce").to_numpy(
            dtype=np.float64, na_value=np.nan
        )
    vals = col.to_numpy(dtype=object)
    ok = np.fromiter(
        (type(v) not in (bool, np.bool_) and isinstance(v, (int, float, np.integer, np.floating)) for v in vals),
        dtype=bool,
        count=len(vals),
    )
    out = np.full(len(vals), np.nan)
    out[ok] = vals[ok].astype(np.float64)
    return out


def _series(y: Any) -> pd.Series:
    if y is None:  # (a new user's push(X, None): "object of type 'NoneType' has no len()")
        raise ValueError(
            "y (the labels) is required: every record needs its class; a DataFrame's label column "
            "goes in y, e.g. push(df.drop(columns=LABEL), df[LABEL])"
        )
    if isinstance(y, pd.Series):
        return y
    if isinstance(y, np.ndarray):
        return pd.Series(y, copy=False)
    arr = np.empty(len(y), dtype=object)
    arr[:] = list(y)
    return pd.Series(arr, dtype=object, copy=False)


def check_header(
    source: str | os.PathLike | IO, schema: Schema, label: str | int | None = None, *, compression: str | None = "infer"
) -> tuple[list, str]:
    """The header's column names and the label column's name; :class:`SourceError` when the header lacks a
    column the schema needs. Reads the header line only (no record), so a job can be refused before it is charged.
    A file object is read from where it stands and rewound; ``compression`` as pandas' (by a path's suffix).
    """
    name = getattr(source, "name", source)
    head = _read_head(source, name, "header", nrows=0, compression=compression).columns
    if hasattr(source, "seek"):
        source.seek(0)
    head = [str(h).strip() for h in head]
    _refuse_binary(name, head)
    lab_name = label if isinstance(label, str) else schema.label.name
    if lab_name in schema.names:  # (a red team: every row then dropped, after a job's charge)
        raise SourceError(f"{name}: the label column {lab_name!r} is an attribute of the schema")
    missing = [c for c in [*schema.names, lab_name] if c not in head]
    if missing:
        hint = (
            (
                "; if its first line is a record, the file has no header row: read it with header=False "
                "(CLI: --no-header)"
            )
            if len(missing) == len(schema.names) + 1
            else ""
        )
        raise SourceError(f"{name}: the header lacks the columns {missing} (it has {len(head)} columns){hint}")
    return head, lab_name


def _read_head(source: Any, name: Any, what: str, **kw: Any) -> pd.DataFrame:
    """The checks' read of a file's first line(s) (``pd.read_csv(source, skipinitialspace=True, **kw)``), refused in
    fixed words: empty, unreadable (``what`` names the part read), or a file that cannot be opened."""
    try:
        return pd.read_csv(source, skipinitialspace=True, **kw)
    except pd.errors.EmptyDataError:
        raise SourceError(f"{name}: empty file") from None
    except _UNREADABLE as e:
        raise SourceError(f"{name}: cannot read its {what}: {_unreadable(e)}") from None
    except OSError as e:
        raise _cannot_read(name, e) from None


def _refuse_binary(name: Any, fields: list[str]) -> None:
    """A first line holding NUL bytes is no CSV text: a tar archive under a ``.gz`` name read as plain gzip (its
    header block became a record: a new user's finding). :class:`SourceError`, no content shown."""
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
) -> None:
    """Refuse, reading the first line only, a file whose columns cannot be the schema's (a job checks this before
    it is charged): with a header, :func:`check_header`; without, the label index, the first record's field
    count (the label and the attributes: a wider line, an id column first say, would shift every column) and,
    with ``first_label``, that its label field is a declared class. That last check reads a value: only where
    the file's owner submits it (``job submit``, ``push``), never in a job worker before its charge. ``path``
    may be a binary file object (with ``compression`` given: pandas infers it from a path's suffix only), read from
    where it stands and rewound."""
    if header:
        check_header(path, schema, label, compression=compression)
        return
    name = getattr(path, "name", path)
    li = label_index(label, schema, name)
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
        # (a new user's --no-header on a file with a header; values read: only where the owner submits the file,
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
    (a truncated ``.csv.gz`` was charged, then failed: a new user's finding); it reads bytes, not records."""
    if compression is None:
        return
    try:
        with get_handle(source, "rb", compression=compression, is_text=False) as h:
            while h.handle.read(1 << 20):
                pass
    except _UNREADABLE as e:
        raise SourceError(f"{name}: cannot read it: {_unreadable(e)}") from None
    except OSError as e:
        raise _cannot_read(name, e) from None
    finally:
        source.seek(0)


class InvalidRecordsWarning(UserWarning):
    """Records of a file the schema refuses: a job reading the file drops them."""


def check_records(path: str, schema: Schema, *, header: bool = True, label: str | int | None = None) -> None:
    """Read a job's file as the job will (invalid rows dropped) where its owner submits it: refuse a file of which
    no record would be kept (misspelt values or labels are, as a rule, in every record: such a job was charged,
    then fit on none; a header alone too), and warn of the records the job will drop, how many and the first
    (a new user's file with one class misspelt was charged and fit without it, in silence). Reads values and
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
        raise _cannot_read(name, e) from None
    lab_name = schema.label.name
    if header:
        head, lab_name = check_header(source, schema, label, compression=compression)
        # the header line skipped and named here: the C reader then refuses a row wider than ``names``
        kw: dict = {"header": None, "skiprows": 1, "names": [*head, _TRAILING]}
        line0 = 2
    else:
        width = schema.n_attributes + 1
        li = label_index(label, schema, name)
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
                df = df[wanted]
                enc = encode_frame(
                    schema, df, df[lab_name], text=True, on_invalid=on_invalid, row0=offset, line0=line0 + offset
                )
                yield Chunk(offset, enc.X, enc.y, len(df), enc.kept, enc.dropped, line0=line0 + offset)
                offset += len(df)
                if progress is not None and size and fh is not None and hasattr(fh, "tell"):
                    progress(min(1.0, fh.tell() / size))
    except SourceError as e:
        raise SourceError(f"{name}: {e}") from None
    except _UNREADABLE as e:
        line = _bad_line(e)
        if line is not None:
            raise SourceError(f"{name}: line {line}: {_unreadable(e)}") from None
        raise SourceError(f"{name}: not a CSV file of the schema's columns: {_unreadable(e)}") from None
    except OSError as e:
        raise _cannot_read(name, e) from None


#: The name of the one field a row may have past the last column (a trailing comma): it must be empty.
_TRAILING = "\x00trailing field"


def _bad_line(e: Exception) -> int | None:
    """The file line (1-based, as the C reader counts) that a ParserError names, else None."""
    if isinstance(e, pd.errors.ParserError):
        msg = str(e)
        m = _EOF_IN_QUOTE.search(msg)
        if m:
            return int(m.group(1)) + 1  # the reader's rows count from 0
        m = _WIDTH.search(msg) or _LINE.search(msg)
        if m:
            return int(m.group("line"))
    return None


_WIDTH = re.compile(r"Expected (?P<want>\d+) fields in line (?P<line>\d+), saw (?P<saw>\d+)")
_EOF_IN_QUOTE = re.compile(r"EOF inside string starting at row (\d+)")
_LINE = re.compile(r"\bline (?P<line>\d+)")


#: A compressed file that is cut short or corrupt (pandas decompresses by the file's suffix), or whose format's
#: library is missing: refused with fixed words like a malformed CSV (they escaped as tracebacks: a reviewer's finding).
_DECOMPRESSION = (
    EOFError,
    zlib.error,
    lzma.LZMAError,
    tarfile.TarError,
    zipfile.BadZipFile,
    gzip.BadGzipFile,
    ImportError,
)
try:  # (pandas reads .zst with it when it is installed)
    from zstandard import ZstdError

    _DECOMPRESSION += (ZstdError,)
except ImportError:
    pass
_UNREADABLE = (pd.errors.ParserError, UnicodeDecodeError, ValueError, *_DECOMPRESSION)


def _cannot_read(name: Any, e: OSError) -> Exception:
    """A file that cannot be opened or read, in fixed words (bz2 says a corrupt stream with a plain OSError, no
    errno); the system's own troubles (out of file descriptors, a failing disk) are returned as they are, so a
    job's attempt is retried rather than failed for its data (a reviewer's finding)."""
    if e.errno is not None and e.errno not in FILE_ERRNOS:
        return e
    return SourceError(
        f"{name}: cannot read the file ({type(e).__name__}: missing, unreadable, or a corrupt "
        "compressed file; no content is shown)"
    )


#: Errors of the file itself (gone, unreachable, not ours to read), as opposed to the reading process's own.
FILE_ERRNOS = (errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.EISDIR, errno.ELOOP, errno.ENXIO)


def _unreadable(e: Exception) -> str:
    """What is wrong with an unreadable file, in fixed words: the readers' own messages quote bytes, positions
    and rows of the data (a red team found them in job failure reasons, after the charge). Only numbers are
    taken from them (a line, a count of fields), never text."""
    if isinstance(e, UnicodeDecodeError):
        return "not UTF-8 text (no content is shown)"
    if isinstance(e, ImportError):
        return f"compressed in a format whose library is not installed ({getattr(e, 'name', None) or 'unknown'})"
    if isinstance(e, _DECOMPRESSION):
        return f"a compressed file that is cut short or corrupt ({type(e).__name__}; no content is shown)"
    if isinstance(e, ValueError) and str(e).startswith("Multiple files found in"):  # (pandas' words)
        return "an archive of several files: a CSV file is read from an archive holding it alone"
    if isinstance(e, pd.errors.ParserError):
        msg = str(e)
        m = _WIDTH.search(msg)
        if m:
            return (
                f"malformed CSV: {int(m.group('saw'))} fields where {int(m.group('want'))} are expected "
                "(no content is shown)"
            )
        if _EOF_IN_QUOTE.search(msg):
            return (
                "malformed CSV: an unbalanced quote (the quoted value runs to the end of the file; no content is shown)"
            )
        return "malformed CSV: unbalanced quotes or a row of another width (no content is shown)"
    return f"values the CSV reader could not read ({type(e).__name__}; no content is shown)"


def frame_chunks(
    X: Any, y: Any, schema: Schema, *, chunk_rows: int = CHUNK_ROWS, on_invalid: str = "raise"
) -> Iterator[Chunk]:
    """Coded chunks of in-memory records: a DataFrame (attributes by name), a 2-D array or list of rows in
    schema order, or a list of dicts; ``y`` holds the labels."""
    frame = as_frame(X, schema)
    n = len(frame)
    ys = _series(y)
    if len(ys) != n:
        raise ValueError(f"X has {n} records but y has {len(ys)} labels")
    for s in range(0, n, chunk_rows):
        enc = encode_frame(
            schema, frame.iloc[s : s + chunk_rows], ys.iloc[s : s + chunk_rows], on_invalid=on_invalid, row0=s
        )
        yield Chunk(s, enc.X, enc.y, len(enc.kept) + len(enc.dropped), enc.kept, enc.dropped)


def as_frame(X: Any, schema: Schema) -> pd.DataFrame:
    """Records as a DataFrame with the schema's attribute columns (rows checked as :meth:`Schema.encode` does)."""
    if isinstance(X, pd.DataFrame):
        return X
    if isinstance(X, np.ndarray) and X.ndim == 2 and X.shape[1] == schema.n_attributes:
        return pd.DataFrame(X, columns=schema.names, copy=False)
    rows = X if isinstance(X, np.ndarray) else list(X)
    if len(rows) and all(isinstance(r, Mapping) for r in rows):
        return pd.DataFrame.from_records(rows, columns=schema.names)
    cols, _ = schema.columns(rows)  # raises naming the row of a wrong shape
    return pd.DataFrame(dict(zip(schema.names, cols)), columns=schema.names)


def prefetch(chunks: Iterable, depth: int = 2) -> Iterator:
    """Iterate ``chunks`` in a reader thread, up to ``depth`` items ahead (pandas' parser releases the GIL).

    An error in the reader is raised in the caller; closing the generator stops the reader.

    >>> list(prefetch(iter(range(5))))
    [0, 1, 2, 3, 4]
    """
    q: queue.Queue = queue.Queue(maxsize=max(1, depth))
    stop = threading.Event()
    end = object()

    def run() -> None:
        try:
            for item in chunks:
                while not stop.is_set():
                    try:
                        q.put((item, None), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put((end, None))
        except BaseException as e:  # handed to the caller
            q.put((end, e))

    t = threading.Thread(target=run, name="streamdp-reader", daemon=True)
    t.start()
    try:
        while True:
            item, err = q.get()
            if item is end:
                if err is not None:
                    raise err
                return
            yield item
    finally:
        stop.set()
        while t.is_alive():  # unblock a reader waiting on a full queue
            try:
                q.get_nowait()
            except queue.Empty:
                t.join(0.1)


def read_bundled(name: str, schema: Schema, lines: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
    """Encoded ``(X, y)`` of a bundled (or shared UCI) dataset by name, never a file of that name, from the lines
    :func:`streamdp.records.datasets.pinned_lines` read and checked."""
    ds = parse(name, lines)
    enc = schema.encode(ds.X, ds.y, on_invalid="drop")
    return enc.X, enc.y


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
) -> tuple[np.ndarray, np.ndarray]:
    """Encoded ``(X, y)`` of a CSV file (read as :func:`read_csv_chunks` reads it: ``header``, ``label``,
    ``compression``); a known
    dataset's name is :func:`read_bundled`'s (a name here is never looked up as a file, or the other way round).

    Rows with values outside the declared schema are dropped; a file without the
    schema's columns raises :class:`SourceError`.
    """
    Xs, ys = [], []
    for c in read_csv_chunks(path, schema, header=header, label=label, on_invalid="drop", compression=compression):
        Xs.append(c.X)
        ys.append(c.y)
    if not Xs:
        return np.empty((0, schema.n_attributes)), np.empty(0, dtype=np.int64)
    return np.concatenate(Xs), np.concatenate(ys).astype(np.int64)
