"""Declared data domains: every attribute's values or range, and the class labels.

Differential privacy needs the domains to be public: a range or a value set
learned from the data would itself leak the records at its edges. A
:class:`Schema` is therefore declared up front and records are validated
against it.

>>> s = Schema.from_dict({
...     "attributes": [
...         {"name": "colour", "type": "categorical", "values": ["red", "blue"]},
...         {"name": "size", "type": "numeric", "min": 0, "max": 10},
...     ],
...     "label": {"name": "ok", "values": ["no", "yes"]},
... })
>>> enc = s.encode([{"colour": "blue", "size": 12.0}], ["yes"])
>>> enc.X.tolist(), enc.y.tolist()
([[1.0, 10.0]], [1])
"""

from __future__ import annotations

import collections
import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike
from typing import Any, cast

import numpy as np

from streamdp.records.coding import (
    BLOCK,
    MISSING,
    declared_table,
    is_frame,
    is_missing_value,
    lookup_codes,
    lookup_table,
    number_cells,
    to_float,
    value_code,
)
from streamdp.records.domains import Attribute, Categorical, Label, Numeric, SchemaError
from streamdp.records.read_errors import (
    MISSING_WORDS,
    NAN_WORDS,
    NOT_NUMBER_WORDS,
    UNDECLARED_CLASS_WORDS,
    UNDECLARED_WORDS,
)

__all__ = ["Categorical", "Numeric", "Label", "Schema", "Encoded", "SchemaError", "value_code"]


def _listed(**named: Any) -> str:
    """The non-empty lists among ``named`` for an error, e.g. ``" (missing: ['max'])"``; ``""`` when all are empty.

    >>> _listed(missing=["max"], extra=set()), _listed(missing=[], extra=[])
    (" (missing: ['max'])", '')
    """
    parts = [f"{k}: {sorted(v)}" for k, v in named.items() if v]
    return f" ({'; '.join(parts)})" if parts else ""


def _text_hint(v: Any, declared: tuple) -> str:
    """``"; it is text ..."`` when a text value meets declared values none of which is text (numbers read from
    a CSV as text: ``csv.DictReader``), else ``""``. The value's type only, never the value.

    >>> _text_hint("2", (1, 2)), _text_hint("b", ("a",)), _text_hint(2.5, (1, 2))
    ('; it is text, none of the declared values is', '', '')
    """
    if isinstance(v, str) and not any(isinstance(d, str) for d in declared):
        return "; it is text, none of the declared values is"
    return ""


def _raise_first(bad: dict[int, str], on_invalid: str) -> None:
    """Under ``on_invalid="raise"``, a :class:`ValueError` naming the first bad record (by row) and its reason."""
    if bad and on_invalid == "raise":
        row = min(bad)
        raise ValueError(f"record {row} (0-based): {bad[row]}")


@dataclass
class Encoded:
    """Records encoded against a schema.

    ``X`` is float64 of shape (n, n_attributes): categorical codes (0..arity-1)
    and clamped numeric values. ``y`` holds label codes (or is None).
    ``dropped`` lists ``(row, reason)`` for rows removed with ``on_invalid="drop"``;
    ``kept`` maps the remaining rows back to the input rows.
    """

    X: np.ndarray
    y: np.ndarray | None
    kept: np.ndarray
    dropped: list[tuple[int, str]] = field(default_factory=list)

    @property
    def n_dropped(self) -> int:
        return len(self.dropped)

    def __len__(self) -> int:
        return len(self.X)


class Schema:
    """Attributes (categorical or numeric) and a label, all with declared domains."""

    def __init__(self, attributes: Sequence[Attribute], label: Label):
        if not attributes:
            raise SchemaError("a schema needs at least one attribute")
        names = [a.name for a in attributes]
        for n in names + [label.name]:
            if not isinstance(n, str) or not n:
                raise SchemaError(f"names must be non-empty strings, got {n!r}")
        dup = {n for n, c in collections.Counter(names).items() if c > 1}
        if dup:
            raise SchemaError(f"attribute names must be unique, repeated: {sorted(dup)}")
        if label.name in names:
            raise SchemaError(f"the label {label.name!r} is also listed as an attribute")
        self.attributes: tuple[Attribute, ...] = tuple(attributes)
        self.label = label
        self._lookup = [lookup_table(a.values) if isinstance(a, Categorical) else None for a in self.attributes]
        self._label_lookup = lookup_table(label.values)

    @property
    def value_codes(self) -> list[dict | None]:
        """Per attribute, the lookup table of :func:`value_code` (None for a numeric attribute); do not modify."""
        return self._lookup

    @property
    def label_codes(self) -> dict:
        """The labels' lookup table of :func:`value_code`; do not modify."""
        return self._label_lookup

    # -- construction -------------------------------------------------------
    @classmethod
    def from_dict(cls, d: Mapping) -> Schema:
        if not isinstance(d, Mapping):
            raise SchemaError(f"a schema must be a mapping, got {type(d).__name__}")
        unknown = set(d) - {"attributes", "label"}
        if unknown:
            raise SchemaError(f"unknown schema keys: {sorted(unknown)}")
        if "attributes" not in d or "label" not in d:
            raise SchemaError("a schema needs 'attributes' and 'label'")
        attrs: list[Attribute] = []
        if not isinstance(d["attributes"], (list, tuple)):
            raise SchemaError("'attributes' must be a list")
        for i, a in enumerate(d["attributes"]):
            if not isinstance(a, Mapping) or "name" not in a:
                raise SchemaError(f"attribute #{i} must be a mapping with a 'name'")
            kind = a.get("type")
            if kind == "categorical":
                extra = set(a) - {"name", "type", "values"}
                if "quantiles" in extra:
                    raise SchemaError(
                        f"attribute {a['name']!r}: 'quantiles' apply to numeric attributes only, not categorical"
                    )
                if extra or "values" not in a:
                    why = _listed(missing=[] if "values" in a else ["values"], extra=extra)
                    raise SchemaError(f"attribute {a['name']!r}: categorical needs exactly 'values'{why}")
                attrs.append(Categorical(a["name"], a["values"]))
            elif kind == "numeric":
                extra = set(a) - {"name", "type", "min", "max", "quantiles"}
                missing = [k for k in ("min", "max") if k not in a]
                if extra or missing:
                    why = _listed(missing=missing, extra=extra)
                    raise SchemaError(
                        f"attribute {a['name']!r}: numeric needs 'min' and 'max', and may declare 'quantiles'{why}"
                    )
                attrs.append(Numeric(a["name"], a["min"], a["max"], a.get("quantiles")))
            else:
                raise SchemaError(f"attribute {a['name']!r}: type must be 'categorical' or 'numeric', got {kind!r}")
        lab = d["label"]
        if not isinstance(lab, Mapping) or "name" not in lab or "values" not in lab:
            raise SchemaError("'label' must be a mapping with 'name' and 'values'")
        return cls(attrs, Label(lab["name"], lab["values"]))

    @classmethod
    def from_json(cls, source: str | PathLike) -> Schema:
        """A schema from a JSON file's path, or from JSON text (what :meth:`to_json` gives, so
        ``Schema.from_json(s.to_json())`` round-trips rather than being taken for a file name).

        >>> s = Schema.from_dict({"attributes": [{"name": "a", "type": "numeric", "min": 0, "max": 1}],
        ...                       "label": {"name": "y", "values": [0, 1]}})
        >>> Schema.from_json(s.to_json()) == s
        True
        """
        if isinstance(source, str) and (source.lstrip()[:1] in ("{", "[", '"', "") or "\n" in source):
            text, where = source, "the JSON text"  # JSON text (a file name never starts so nor holds a newline)
        else:
            with open(source, encoding="utf-8") as f:
                text, where = f.read(), str(source)
        try:
            return cls.from_dict(json.loads(text))
        except json.JSONDecodeError as e:
            raise SchemaError(f"{where}: not valid JSON ({e})") from None
        except RecursionError:  # a hostile file of 100,000 nested brackets
            raise SchemaError(f"{where}: nested too deeply for a schema") from None

    def to_dict(self) -> dict:
        return {"attributes": [a.to_dict() for a in self.attributes], "label": self.label.to_dict()}

    def to_json(self) -> str:
        """The schema as JSON text (:meth:`from_json` reads it back, or a file holding it)."""
        return json.dumps(self.to_dict())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Schema) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return f"Schema({len(self.attributes)} attributes, label {self.label.name!r} with {self.n_classes} classes)"

    # -- facts --------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return [a.name for a in self.attributes]

    @property
    def n_attributes(self) -> int:
        return len(self.attributes)

    @property
    def n_classes(self) -> int:
        return len(self.label.values)

    @property
    def classes(self) -> tuple:
        return self.label.values

    @property
    def is_categorical(self) -> np.ndarray:
        return np.array([isinstance(a, Categorical) for a in self.attributes])

    @property
    def arities(self) -> np.ndarray:
        """Number of values of each categorical attribute (0 for numeric ones)."""
        return np.array([a.arity if isinstance(a, Categorical) else 0 for a in self.attributes])

    def index(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise KeyError(f"no attribute named {name!r}; the schema has {self.names}") from None

    # -- encoding -----------------------------------------------------------
    def encode(
        self,
        X: Any,
        y: Iterable | None = None,
        *,
        on_invalid: str = "raise",
        fill_missing: bool = False,
    ) -> Encoded:
        """Validate and encode records.

        ``X`` is a list of dicts keyed by attribute name, or a 2-D array-like in
        schema order. ``on_invalid="raise"`` raises :class:`ValueError` naming the
        attribute and row of the first bad value; ``"drop"`` removes bad rows
        and reports them in ``Encoded.dropped``. ``fill_missing=True`` replaces
        a missing numeric value (absent, None or NaN) by the midpoint of its
        declared range, a public constant (river's records may lose features);
        a value that is not a number is still invalid.
        """
        if on_invalid not in ("raise", "drop"):
            raise ValueError(f"on_invalid must be 'raise' or 'drop', got {on_invalid!r}")
        fast = self._encode_matrix(X)
        if fast is not None:  # every value valid: the labels decide
            bad_y: dict[int, str] = {}
            y_codes = None if y is None else self._encode_labels(y, len(fast), bad_y, on_invalid == "raise")
            if not bad_y:
                return Encoded(fast, y_codes, np.arange(len(fast)))
            _raise_first(bad_y, on_invalid)
        columns, n = self.columns(X)
        bad: dict[int, str] = {}  # row -> the reason of its first bad value in schema order (the label last)
        first = on_invalid == "raise"  # each column's first bad row only: the error needs the least of them
        out = np.empty((n, self.n_attributes), dtype=np.float64)
        for j, (attr, col) in enumerate(zip(self.attributes, columns)):
            out[:, j] = self._encode_column(j, attr, col, bad, fill_missing, first)
        y_codes = None
        if y is not None:
            y_codes = self._encode_labels(y, n, bad, first)
        if not bad:
            return Encoded(out, y_codes, np.arange(n))
        _raise_first(bad, on_invalid)  # (the first bad record, not the first bad column's)
        keep = np.ones(n, dtype=bool)
        keep[list(bad)] = False
        return Encoded(
            out[keep],
            None if y_codes is None else y_codes[keep],
            np.flatnonzero(keep),
            sorted(bad.items()),
        )

    def _encode_matrix(self, X: Any) -> np.ndarray | None:
        """Codes of a numeric 2-D array in a few passes per row block (one table over every categorical
        column's declared whole numbers, or value - lowest when they are consecutive from code 0); None
        when a value is invalid or a declared span too wide (the column coder then names it)."""
        if not (
            isinstance(X, np.ndarray)
            and X.ndim == 2
            and X.dtype.kind in "iuf"
            and X.shape[1] == self.n_attributes
            and X.shape[0]
        ):
            return None
        cat = self.is_categorical
        out = np.empty(X.shape, dtype=np.float64)
        if not cat.all():
            num = np.flatnonzero(~cat)
            vals = X[:, num].astype(np.float64)
            if np.isnan(vals).any():
                return None
            ranges = [cast(Numeric, self.attributes[j]) for j in num]
            lo = np.array([a.min for a in ranges])
            hi = np.array([a.max for a in ranges])
            for k, j in enumerate(num.tolist()):
                out[:, j] = np.clip(vals[:, k], lo[k], hi[k])
        cj = np.flatnonzero(cat)
        if not len(cj):
            return out
        plan = self._declared_tables
        if plan is None or (X.dtype.kind == "u" and X.dtype.itemsize >= np.dtype(np.intp).itemsize):
            return None  # a column with no whole number declared (or too wide a span), or uint64: column by column
        lo, span, start, table = plan
        C = X[:, cj] if not cat.all() else X
        codes = out if len(cj) == self.n_attributes else np.empty(C.shape, dtype=np.float64)
        for s in range(0, len(C), BLOCK):  # row blocks that stay in cache (whole-matrix temporaries do not)
            block = C[s : s + BLOCK]
            with np.errstate(invalid="ignore"):  # NaN and infinities cast to garbage: the comparison catches them
                idx = block.astype(np.intp)
            if X.dtype.kind == "f" and (idx != block).any():  # 2.5 is not the declared value 2; NaN is nothing
                return None
            if lo is not None:
                idx -= lo
            if (idx.view(np.uintp) >= span).any():  # outside [lo, hi] (below lo wraps around to huge)
                return None
            if table is None:  # every column declares lo, lo + 1, ..., hi in this order: the code is value - lo
                codes[s : s + BLOCK] = idx
                continue
            idx += start
            np.take(table, idx, out=codes[s : s + BLOCK])
            if (codes[s : s + BLOCK] < 0).any():  # a gap in the declared values
                return None
        if codes is not out:
            for k, j in enumerate(cj.tolist()):  # column by column: a fancy-indexed assignment is slower
                out[:, j] = codes[:, k]
        return out

    @functools.cached_property
    def _declared_tables(self) -> tuple | None:
        """For the whole-matrix coder, over the categorical columns: the declared lowest whole number
        per column (None if all 0), the span per column, and per-column table offsets with the
        concatenated tables (None, None when every code is value - lowest); None if a column has none."""
        found = [declared_table(cast(dict, self._lookup[j])) for j in np.flatnonzero(self.is_categorical).tolist()]
        tables = [t for t in found if t is not None]
        if len(tables) < len(found):
            return None
        lo = np.array([t[0] for t in tables], dtype=np.intp)
        span = np.array([len(t[1]) for t in tables], dtype=np.uintp)
        if all(np.array_equal(t[1], np.arange(len(t[1]))) for t in tables):
            return (lo if lo.any() else None), span, None, None
        start = np.concatenate([[0], np.cumsum(span[:-1])]).astype(np.intp)
        return (lo if lo.any() else None), span, start, np.concatenate([t[1] for t in tables]).astype(np.float64)

    def encode_labels(self, y: Iterable) -> np.ndarray:
        ys = list(y) if not isinstance(y, np.ndarray) else y
        bad: dict[int, str] = {}
        codes = self._encode_labels(ys, len(ys), bad, first=True)
        _raise_first(bad, "raise")
        return codes

    def columns(self, X: Any) -> tuple[list[np.ndarray], int]:
        """The records as one array per attribute (object or numeric) and their number; raises naming a bad row."""
        if isinstance(X, Mapping):
            raise ValueError("X must be a list of records (dicts) or a 2-D array, not a single dict")
        if is_frame(X):
            cols = list(X.columns)
            twice = [name for name in self.names if cols.count(name) > 1]
            if twice:
                raise ValueError(f"X has the attribute columns {twice} more than once")
            if all(name in cols for name in self.names):
                X = X[self.names]  # by name: a frame's column order need not be the schema's
            elif any(isinstance(c, str) for c in cols):
                missing = [name for name in self.names if name not in cols]
                raise ValueError(f"X is missing the schema attributes {missing} (its columns: {cols})")
        if isinstance(X, np.ndarray) or is_frame(X):
            arr = np.asarray(X, dtype=object if not isinstance(X, np.ndarray) else None)
            if arr.ndim != 2:
                raise ValueError(f"X must be 2-D (records x attributes), got shape {arr.shape}")
            if arr.shape[1] != self.n_attributes:
                raise ValueError(
                    f"X has {arr.shape[1]} columns but the schema has {self.n_attributes} attributes {self.names}"
                )
            return [arr[:, j] for j in range(self.n_attributes)], arr.shape[0]
        rows = list(X)
        n = len(rows)
        if n and all(isinstance(r, Mapping) for r in rows):
            cols = []
            for a in self.attributes:
                col = np.empty(n, dtype=object)
                col[:] = [r.get(a.name, MISSING) for r in rows]
                cols.append(col)
            return cols, n
        if n == 0:
            return [np.empty(0, dtype=object) for _ in self.attributes], 0
        for i, r in enumerate(rows):
            if isinstance(r, Mapping) or isinstance(r, (str, bytes)) or not hasattr(r, "__len__"):
                one = "" if isinstance(r, Mapping) else "; one record? pass [record] or df.iloc[[i]]"
                raise ValueError(
                    f"record {i} (0-based): expected a record dict or a sequence of {self.n_attributes} values, got {type(r).__name__}{one}"
                )
            if len(r) != self.n_attributes:
                raise ValueError(
                    f"record {i} (0-based): has {len(r)} values but the schema has {self.n_attributes} attributes {self.names}"
                )
        arr = np.empty((n, self.n_attributes), dtype=object)
        arr[:] = rows
        return [arr[:, j] for j in range(self.n_attributes)], n

    def _encode_column(
        self, j: int, attr: Attribute, col: np.ndarray, bad: dict, fill_missing: bool = False, first: bool = False
    ) -> np.ndarray:
        """One attribute's codes; its bad rows' reasons into ``bad`` (``first``: its first bad row only, as the
        error names the least over the columns: formatting every bad cell's reason is costly on a file of
        wrong columns; it then adds the declaration). Never the value: :mod:`.read_errors`' words."""
        if isinstance(attr, Numeric):
            vals = to_float(col)
            if vals is None:  # slow path: text and other objects, by the one rule of number_cells
                vals, missing, not_number = number_cells(col)
                if fill_missing:
                    missing[:] = False
                for i in np.flatnonzero(missing | not_number).tolist():
                    if missing[i]:
                        self._bad(bad, i, f"attribute {attr.name!r} {MISSING_WORDS}")
                    else:
                        why = f" (declared: a number in [{attr.min:g}, {attr.max:g}])" if first else ""
                        self._bad(bad, i, f"attribute {attr.name!r} {NOT_NUMBER_WORDS}{why}")
                    if first:
                        break
            if fill_missing:
                return np.where(np.isnan(vals), (attr.min + attr.max) / 2.0, np.clip(vals, attr.min, attr.max))
            nan = np.flatnonzero(np.isnan(vals))
            for r in nan:
                if int(r) not in bad:
                    self._bad(bad, int(r), f"attribute {attr.name!r} {NAN_WORDS}")
                    if first:
                        break
            with np.errstate(invalid="ignore"):
                vals = np.clip(vals, attr.min, attr.max)
            return np.where(np.isnan(vals), attr.min, vals)
        codes = lookup_codes(cast(dict, self._lookup[j]), col)
        for r in np.flatnonzero(codes < 0):
            what = (  # never the value: reasons reach logs and dead letters (the declared values are public)
                MISSING_WORDS
                if is_missing_value(col[r])
                else UNDECLARED_WORDS
                + (f" (declared: {list(attr.values)}{_text_hint(col[r], attr.values)})" if first else "")
            )
            self._bad(bad, int(r), f"attribute {attr.name!r} {what}")
            if first:
                break
        return np.maximum(codes, 0).astype(np.float64)

    def _encode_labels(self, y: Iterable, n: int, bad: dict, first: bool = False) -> np.ndarray:
        if getattr(y, "ndim", 1) != 1:  # (a frame iterates its column names)
            raise ValueError(
                f"y must hold one label per record (1-D), got {getattr(y, 'ndim')}-D: pass its label column"
            )
        ylist = list(y) if not isinstance(y, np.ndarray) else y
        if len(ylist) != n:
            raise ValueError(f"y has {len(ylist)} labels but X has {n} records")
        if isinstance(ylist, np.ndarray) and ylist.ndim == 1 and ylist.dtype.kind in "iufUS":
            ys = ylist  # typed labels: coded without a detour through Python objects
        else:
            ys = np.empty(n, dtype=object)
            ys[:] = list(ylist)
        codes = lookup_codes(self._label_lookup, ys)
        for i in np.flatnonzero(codes < 0):
            what = (
                MISSING_WORDS
                if is_missing_value(ys[i])
                else UNDECLARED_CLASS_WORDS
                + (f" (declared: {list(self.label.values)}{_text_hint(ys[i], self.label.values)})" if first else "")
            )
            self._bad(bad, int(i), f"label {self.label.name!r} {what}")
            if first:
                break
        return np.maximum(codes, 0)

    @staticmethod
    def _bad(bad: dict, row: int, reason: str) -> None:
        bad.setdefault(row, reason)

    def decode_labels(self, codes: np.ndarray) -> np.ndarray:
        labels = np.empty(len(self.label.values), dtype=object)
        labels[:] = list(self.label.values)
        return labels[np.asarray(codes, dtype=np.int64)]
