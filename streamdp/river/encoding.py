"""The record encoder of the river classifiers: river's dict records to the schema's codes.

One pass over a record (or a column-wise pass over many) with no per-record
numpy call, so that ``learn_one`` / ``predict_proba_one`` stay fast.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from streamdp.schema import Categorical, Schema

__all__ = ["RecordEncoder"]


_MISSING = object()


def _key(v: Any) -> Any:
    return ("bool", v) if isinstance(v, bool) else v


def _norm(v: Any) -> Any:
    """Normalise a raw categorical value or label to its lookup key (same rules as Schema.encode)."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float):
        if math.isnan(v) or not v.is_integer():
            return _MISSING
        v = int(v)
    return _key(v)


class RecordEncoder:
    """Encodes river records (dicts, or a DataFrame) against a schema, in schema order.

    Categorical values become their codes (``None`` when missing or undeclared),
    numbers are clamped to their declared range (a missing number becomes the
    midpoint of its range, a public constant), labels become their codes. A
    record key may be the attribute name or, for digit names, the integer.

    >>> from streamdp.river.schemas import stagger_schema
    >>> enc = RecordEncoder(stagger_schema())
    >>> enc.encode_one({"size": 2, "color": 0, "shape": 1})
    [2, 0, 1]
    >>> enc.encode_one({"size": 2, "color": 7})
    [2, None, None]
    >>> enc.encode_label(1)
    1
    """

    def __init__(self, schema: Schema):
        self.names = schema.names
        self.alt = [int(n) if n.isdigit() else None for n in self.names]
        self.is_cat = [isinstance(a, Categorical) for a in schema.attributes]
        self.lookup = [
            {_key(v): i for i, v in enumerate(a.values)} if isinstance(a, Categorical) else None
            for a in schema.attributes
        ]
        self.lo = [None if c else a.min for a, c in zip(schema.attributes, self.is_cat)]
        self.hi = [None if c else a.max for a, c in zip(schema.attributes, self.is_cat)]
        self.mid = [None if c else (a.min + a.max) / 2.0 for a, c in zip(schema.attributes, self.is_cat)]
        self.labels = {_key(v): i for i, v in enumerate(schema.label.values)}
        self.label_values = list(schema.label.values)
        self.spec = list(zip(self.names, self.alt, self.is_cat, self.lookup, self.lo, self.hi, self.mid))

    def get(self, x: dict, name: str, alt: int | None) -> Any:
        v = x.get(name, _MISSING)
        if v is _MISSING and alt is not None:
            v = x.get(alt, _MISSING)
        return v

    def encode_one(self, x: dict) -> list:
        """Encoded values in schema order; ``None`` for a missing/undeclared categorical value."""
        out = []
        for name, alt, cat, lookup, lo, hi, mid in self.spec:
            v = x.get(name, _MISSING)
            if v is _MISSING and alt is not None:
                v = x.get(alt, _MISSING)
            if cat:
                if v is _MISSING or v is None:
                    out.append(None)
                    continue
                try:
                    out.append(lookup.get(_norm(v)))
                except TypeError:  # unhashable
                    out.append(None)
            else:
                try:
                    if v is _MISSING or v is None or isinstance(v, (str, bytes)):
                        raise TypeError
                    f = float(v)
                    if math.isnan(f):
                        raise TypeError
                except (TypeError, ValueError):
                    out.append(mid)
                    continue
                out.append(lo if f < lo else hi if f > hi else f)
        return out

    def encode_many(self, xs: list) -> tuple[np.ndarray, np.ndarray]:
        """Column-wise :meth:`encode_one` for a list of dicts: (X float64, rows with a missing categorical)."""
        n = len(xs)
        out = np.empty((n, len(self.spec)), dtype=np.float64)
        bad = np.zeros(n, dtype=bool)
        for j, (name, alt, cat, lookup, lo, hi, mid) in enumerate(self.spec):
            col = [x.get(name, _MISSING) for x in xs]
            if alt is not None:
                col = [x.get(alt, _MISSING) if v is _MISSING else v for v, x in zip(col, xs)]
            if cat:
                codes = []
                for v in col:
                    tv = type(v)
                    if tv is int or tv is str:
                        c = lookup.get(v)
                    elif v is _MISSING or v is None:
                        c = None
                    else:
                        try:
                            c = lookup.get(_norm(v))
                        except TypeError:
                            c = None
                    codes.append(-1 if c is None else c)
                a = np.array(codes, dtype=np.float64)
                miss = a < 0
                if miss.any():
                    bad |= miss
                    a[miss] = 0
                out[:, j] = a
            else:
                try:
                    if any(type(v) is bool or type(v) is str for v in col):
                        raise TypeError
                    a = np.array(col, dtype=np.float64)
                except (TypeError, ValueError):
                    a = np.array([_to_num(v) if v is not _MISSING else math.nan for v in col], dtype=np.float64)
                out[:, j] = np.where(np.isnan(a), mid, np.clip(a, lo, hi))
        return out, bad

    def encode_label(self, y: Any) -> int:
        try:
            code = self.labels.get(_norm(y))
        except TypeError:
            code = None
        if code is None:
            raise ValueError(f"unknown class {y!r}: the schema declares {self.label_values}")
        return code

    def encode_frame(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised encoding of a DataFrame (columns = feature names). Returns (X, has_missing_cat)."""
        n = len(X)
        m = len(self.names)
        out = np.empty((n, m), dtype=np.float64)
        bad = np.zeros(n, dtype=bool)
        cols = set(X.columns)
        for j, (name, alt, cat, lookup, lo, hi, mid) in enumerate(self.spec):
            col = name if name in cols else alt if (alt is not None and alt in cols) else _MISSING
            if col is _MISSING:
                if cat:
                    out[:, j] = 0
                    bad[:] = True
                else:
                    out[:, j] = mid
                continue
            values = X[col].to_numpy()
            if cat:
                codes = np.empty(n, dtype=np.float64)
                for i, v in enumerate(values):
                    if v is None:
                        c = None
                    else:
                        try:
                            c = lookup.get(_norm(v))
                        except TypeError:
                            c = None
                    if c is None:
                        bad[i] = True
                        codes[i] = 0
                    else:
                        codes[i] = c
                out[:, j] = codes
            else:
                if values.dtype.kind in "iuf":
                    f = values.astype(np.float64)
                else:
                    f = np.array([_to_num(v) for v in values], dtype=np.float64)
                f = np.where(np.isnan(f), mid, np.clip(f, lo, hi))
                out[:, j] = f
        return out, bad


def _to_num(v: Any) -> float:
    if v is None or isinstance(v, (str, bytes)):
        return math.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan
