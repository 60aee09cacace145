"""In-memory records (a DataFrame, rows, dicts) and CSV text coded against a schema, column by column.

Each column is coded by vectorised lookups: a column of text is factorised (one hash pass in C) and only
its distinct values go through the schema's lookup (:meth:`Schema.encode`'s dict and table paths), other
columns through :meth:`Schema.encode`'s column coder. A CSV cell spells a declared value as ``str(value)``
(booleans in any case); surrounding spaces are ignored. Bad values raise (or, with ``on_invalid="drop"``,
drop the row and list it) in the words of :mod:`streamdp.records.read_errors`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pandas as pd

from streamdp.records.coding import lookup_codes, number_cells, value_code
from streamdp.records.domains import Categorical
from streamdp.records.read_errors import MISSING_WORDS, NOT_NUMBER_WORDS, UNDECLARED_WORDS, SourceError, row_words
from streamdp.records.schema import Encoded, Schema

__all__ = ["CHUNK_ROWS", "Chunk", "encode_frame", "frame_chunks", "as_frame"]

#: Rows per chunk read from a CSV file.
CHUNK_ROWS = 65_536


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
    ids: np.ndarray | None = None  # the kept rows' privacy ids (object; NaN: none), when a privacy id column is read

    def where(self, row: int) -> str:
        """Row ``row`` of the chunk in words: ``"line 4"`` (CSV) or ``"record 2 (0-based)"``.

        >>> c = Chunk(10, np.empty((0, 1)), np.empty(0), 5, np.empty(0, np.int64))
        >>> c.where(2), Chunk(10, c.X, c.y, 5, c.kept, line0=12).where(2)
        ('record 12 (0-based)', 'line 14')
        """
        return row_words(row, self.offset, self.line0)


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
    if not frame.columns.is_unique:
        twice = [n for n in schema.names if int((frame.columns == n).sum()) > 1]
        if twice:
            raise SourceError(f"the data has the attribute columns {twice} more than once")
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
            lookup = schema.value_codes[j]
            assert lookup is not None  # a categorical attribute's
            codes, miss = _column_codes(a.values, lookup, col, text)
            flag(~miss, f"{what} {MISSING_WORDS}")
            flag(codes >= 0, f"{what} {UNDECLARED_WORDS}")
            out[:, j] = np.maximum(codes, 0)
        else:
            vals, miss = _numbers(col, text)
            ok = ~np.isnan(vals)
            flag(ok | ~miss, f"{what} {MISSING_WORDS}")
            flag(ok, f"{what} {NOT_NUMBER_WORDS}")
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
        flag(~miss, f"{what} {MISSING_WORDS}")
        flag(yc >= 0, f"{what} has a class not declared in the schema")
        yc = np.maximum(yc, 0)
    if not bad.any():
        return Encoded(out, yc, np.arange(n))
    if on_invalid == "raise":
        raise SourceError(f"{row_words(first[0], row0, line0)}: {first[1]}")
    keep = ~bad
    dropped = (
        sorted(reasons.items())
        if len(reasons) == int(bad.sum())
        else [(int(i), reasons.get(int(i), "invalid record")) for i in np.flatnonzero(bad)]
    )
    return Encoded(out[keep], None if yc is None else yc[keep], np.flatnonzero(keep), dropped)


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
        yield Chunk(s, enc.X, cast(np.ndarray, enc.y), len(enc.kept) + len(enc.dropped), enc.kept, enc.dropped)


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


def _codes_of_text(lookup: dict, col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Codes of a column of text (-1: not declared; :func:`value_code`'s rule, a cell's surrounding spaces
    ignored) and its missing cells; distinct values looked up once."""
    codes, uniq = _factorize(col)
    codes_u = np.array([value_code(lookup, str(u).strip()) for u in uniq] + [-1], dtype=np.int64)
    return codes_u[codes], codes < 0


def _factorize(col: pd.Series) -> tuple[np.ndarray, Any]:
    """``(codes, distinct values)`` of a column, -1 for missing cells (a categorical column is already coded)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return col.cat.codes.to_numpy(), col.cat.categories
    return pd.factorize(col, use_na_sentinel=True)


def _factorizable(col: pd.Series) -> bool:
    if isinstance(col.dtype, (pd.StringDtype, pd.CategoricalDtype)):
        return True
    return col.dtype == object and pd.api.types.infer_dtype(col, skipna=True) in ("string", "empty")


def _column_codes(values: tuple, lookup: dict, col: pd.Series, text: bool) -> tuple[np.ndarray, np.ndarray]:
    if text:
        return _codes_of_text(lookup, col)
    if isinstance(col.dtype, pd.CategoricalDtype):
        return _codes_of_values(lookup, col)
    if _factorizable(col) and not all(isinstance(v, str) for v in values):  # text for numbers or booleans
        return _codes_of_text(lookup, col)
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


def _numbers(col: pd.Series, text: bool) -> tuple[np.ndarray, np.ndarray]:
    """A numeric column as float64, NaN where a cell is missing or not a number, and its missing cells.

    CSV text (``text``) is parsed by pandas, to the rule of :func:`~streamdp.records.coding.text_number`
    (a finite number: ``inf`` or ``1e999`` is none); other object columns follow :func:`number_cells`, the
    rule :meth:`Schema.encode` applies (numbers, and text spelling a finite number; not booleans).
    """
    if col.dtype.kind in "iuf":
        vals = col.to_numpy(dtype=np.float64, na_value=np.nan)
        miss = np.isnan(vals)
        return (np.where(np.isinf(vals), np.nan, vals) if text else vals), miss
    if text:
        stripped = col.astype("string").str.strip()
        vals = pd.to_numeric(stripped, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        blank = (stripped.isna() | (stripped == "")).to_numpy(dtype=bool, na_value=True)  # (a tab or no-break space
        return np.where(np.isinf(vals), np.nan, vals), blank  # alone is blank text, missing: text_number's rule)
    vals, miss, _ = number_cells(col.to_numpy(dtype=object))
    return vals, miss | col.isna().to_numpy()


def _series(y: Any) -> pd.Series:
    if y is None:
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
