"""The record encoder of the river classifiers: river's dict records to the schema's codes.

The rules are :class:`~streamdp.records.schema.Schema`'s (:func:`~streamdp.records.schema.value_code`,
its lookup tables, :meth:`Schema.encode` for frames); this module adds only
river's policy for missing values and a fast path for one dict record, with
no numpy call per record, so that ``learn_one`` / ``predict_proba_one`` stay fast.

River's policy: a missing number (absent, None or NaN) becomes the midpoint of
its declared range, a public constant (river's records may lose features); a
missing, undeclared or malformed value (a categorical value not declared, a
number that is not a number) is *unknown*: ``None`` in :meth:`encode_one`,
flagged by :meth:`encode_frame`. Classifiers do not learn from a record with
an unknown value and, in prediction, average over the branches of its splits.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from streamdp.records.coding import MISSING, cell_number, is_frame, is_missing_value, value_code
from streamdp.records.domains import Categorical, Numeric
from streamdp.records.read_errors import MISSING_WORDS, UNDECLARED_CLASS_WORDS
from streamdp.records.schema import Schema
from streamdp.river.kernel import new_kernel

__all__ = ["RecordEncoder", "labels_of", "UndeclaredValueWarning", "UnknownAttributesWarning"]


class UndeclaredValueWarning(UserWarning):
    """A record held a value its attribute does not declare (or a malformed one): it was not learned from.

    Named by attribute and the value's type only (never the value: warnings end up in logs). A missing
    value (absent, None, NaN) is river's normal case and is not warned about. The warning is raised
    from raw data in the data owner's process and is outside the privacy guarantee: that it appears,
    and which attribute and type it names, says that some record held such a value (under Python's
    default filter once per attribute, type and call site; under "always" once per dropped record).
    Keep it out of anything released, or silence it with ``warnings.filterwarnings``.
    """


class UnknownAttributesWarning(UserWarning):
    """The first record (or frame) a river classifier saw holds none of its schema's attribute names: its numbers
    would all be range midpoints. Names the keys only (feature names, never values). Why: a misspelt feature
    name is otherwise learned from silently, as river's missing features are."""


_MISSING = object()


def _fold(name: Any) -> str:
    """A feature name as compared for a hint: case, ``-``, ``_`` and spaces aside."""
    return "".join(c for c in str(name).casefold() if c not in "-_ ")


class RecordEncoder:
    """Encodes river records (dicts, or a DataFrame) against a schema, in schema order.

    Categorical values become their codes (``None`` when missing or undeclared),
    numbers are clamped to their declared range (a missing number becomes the
    midpoint of its range), labels become their codes. A record key may be the
    attribute name or, for digit names, the integer (river's LED and SEA use
    integer keys).

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
        self.schema = schema
        self.names = schema.names
        self.is_cat = [isinstance(a, Categorical) for a in schema.attributes]
        alt = [int(n) if n.isdigit() else None for n in self.names]
        lo = [a.min if isinstance(a, Numeric) else None for a in schema.attributes]
        hi = [a.max if isinstance(a, Numeric) else None for a in schema.attributes]
        mid = [(a.min + a.max) / 2.0 if isinstance(a, Numeric) else None for a in schema.attributes]
        self.label_values = list(schema.label.values)
        self._spec = list(zip(self.names, alt, schema.value_codes, lo, hi, mid))
        self._fast = self._compile()
        self.encode_one = self._check_first  # type: ignore[method-assign]  # (the first record: undone by it)

    def _compile(self):
        """``self._fast``: the compiled kernel's encoder (:mod:`streamdp.river.kernel`) when built, which hands
        the records it does not handle inline to the generated Python encoder; else that encoder itself."""
        py = self._compile_python()
        k = new_kernel(self._spec, py)
        return py if k is None else k.encode

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_fast", None)  # generated code: rebuilt on load
        state.pop("encode_one", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._fast = self._compile()

    def encode_one(self, x: dict) -> list:
        """Encoded values in schema order; ``None`` for an unknown value (see the module docstring).

        Runs the compiled kernel (:mod:`streamdp.river.kernel`) or else the generated
        copy of :meth:`_encode`: cheaper
        than checking that a remembered record is unchanged, so river's
        predict-then-learn encodes a record twice.
        """
        return self._fast(x)

    def _check_first(self, x: Any) -> list:
        """The first record's :meth:`encode_one`, after :meth:`check_keys`; later records skip the check."""
        self._first_seen(x.keys() if isinstance(x, dict) else ())
        return self._fast(x)

    def _first_seen(self, keys: Any) -> None:
        """:meth:`check_keys` on the first record or frame this encoder sees (not again after that)."""
        if self.__dict__.pop("encode_one", None) is not None:
            self.check_keys(keys)

    def check_keys(self, keys: Any) -> None:
        """Warn (:class:`UnknownAttributesWarning`) when ``keys`` (a record's or a frame's) name none of the
        schema's attributes. The warning names schema attributes only (and a key that is one of them but for case,
        ``-``/``_`` or spaces): river's keys can be data themselves (a bag of words' tokens), so none other is shown.

        >>> import warnings
        >>> from streamdp.river.schemas import stagger_schema
        >>> with warnings.catch_warnings(record=True) as w:
        ...     warnings.simplefilter("always")
        ...     RecordEncoder(stagger_schema()).check_keys(["Size", "colour"])
        >>> print(w[0].message)  # doctest: +ELLIPSIS
        the record's keys name none of the schema's attributes ('size', 'color', 'shape'); 'Size' is 'size' but for case...
        """
        keys = list(keys)
        known = {k for name, alt, *_ in self._spec for k in (name, alt) if k is not None}
        if any(k in known for k in keys):
            return
        folded = {_fold(n): n for n in self.names}
        cased = [f"{k!r} is {folded[_fold(k)]!r}" for k in keys if isinstance(k, str) and _fold(k) in folded][:8]
        hint = f"; {', '.join(cased)} but for case or separators" if cased else ""
        warnings.warn(
            "the record's keys name none of the schema's attributes "
            f"({', '.join(repr(n) for n in self.names[:8])}{', ...' if len(self.names) > 8 else ''}){hint}: its "
            "numbers become range midpoints and its categories unknown; rename the features to the schema's names",
            UnknownAttributesWarning,
            stacklevel=4,
        )

    def source(self, ns: dict) -> list[str]:
        """Python statements (one-space indent) setting ``a0``, ``a1``, ... to :meth:`encode_one`'s values
        of the record ``x`` (``get`` bound to ``x.get``); the objects they use are bound in ``ns``.

        :meth:`_encode` as straight-line code (no loop over the attributes, bounds
        as literals): the common types take the inlined branch (a float or int in
        a numeric attribute, an int or str in a categorical one), with the same
        expressions as :meth:`_encode_value`, which handles every other value.
        The text holds only attribute positions and the reprs of finite int and
        float bounds; names, lookup tables and other bounds are bound in ``ns``.
        """
        ns.update(MISSING=_MISSING, slow=self._encode_value)
        lines = []
        for j, (name, alt, lookup, lo, hi, mid) in enumerate(self._spec):
            ns[f"N{j}"], ns[f"A{j}"], ns[f"T{j}"] = name, alt, lookup
            lines.append(f" v = get(N{j}, MISSING)")
            if alt is not None:
                lines.append(f" if v is MISSING: v = get(A{j}, MISSING)")
            lines.append(" t = type(v)")
            if lookup is not None:
                lines.append(f" a{j} = T{j}.get(v) if t is int or t is str else slow({j}, v)")
                lines.append(f" if a{j} is None and t is str: a{j} = slow({j}, v)")  # (text spelling a number)
            else:
                lo, hi, mid = (_literal(ns, f"{k}{j}", b) for k, b in (("LO", lo), ("HI", hi), ("MID", mid)))
                lines.append(
                    f" a{j} = ({mid} if v != v else {lo} if v < {lo} else {hi} if v > {hi} else v) "
                    f"if t is float or t is int else slow({j}, v)"
                )
        return lines

    def _compile_python(self):
        ns: dict = {}
        lines = [
            "def encode(x):",
            " get = x.get",
            *self.source(ns),
            " return [" + ", ".join(f"a{j}" for j in range(len(self._spec))) + "]",
        ]
        exec(compile("\n".join(lines), "<streamdp record encoder>", "exec"), ns)  # noqa: S102 (positions and numbers only)
        return ns["encode"]

    def _encode(self, x: dict) -> list:
        """The rules of the module docstring, attribute by attribute (:meth:`encode_one` runs a compiled copy)."""
        out = []
        get = x.get
        for j, (name, alt, *_) in enumerate(self._spec):
            v = get(name, _MISSING)
            if v is _MISSING and alt is not None:
                v = get(alt, _MISSING)
            out.append(self._encode_value(j, v))
        return out

    def _encode_value(self, j: int, v: Any) -> Any:
        """Attribute ``j``'s code of value ``v`` (``_MISSING`` when absent); ``None`` when unknown."""
        name, alt, lookup, lo, hi, mid = self._spec[j]
        t = type(v)
        if lookup is not None:
            if t is int:  # value_code's answer for an int, without the call
                return lookup.get(v)
            c = value_code(lookup, v)
            return None if c < 0 else c
        if t is float or t is int:
            return mid if v != v else lo if v < lo else hi if v > hi else v
        if v is _MISSING:
            return mid
        f = cell_number(v)  # Schema.encode's rule (numpy numbers, Decimal, a number's text, ...)
        if f is None:  # not a number: unknown
            return None
        return mid if f is MISSING or f != f else lo if f < lo else hi if f > hi else f

    def encode_many(self, xs: list) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`encode_one` for a list of dicts: ``(X float64, unknown)``, rows with an unknown value hold zeros."""
        if xs:
            self._first_seen(xs[0].keys() if isinstance(xs[0], dict) else ())
        rows = [self._fast(x) for x in xs]
        unknown = np.array([None in r for r in rows], dtype=bool)
        for i in np.flatnonzero(unknown):
            rows[i] = [0 if v is None else v for v in rows[i]]
        X = np.array(rows, dtype=np.float64) if rows else np.empty((0, len(self.names)))
        return X, unknown

    def encode_label(self, y: Any) -> int:
        """Code of a label; :class:`ValueError` for a class the schema does not declare."""
        t = type(y)
        code = self.schema.label_codes.get(y, -1) if t is int or t is str else value_code(self.schema.label_codes, y)
        if code < 0 and t is str:  # (a text spelling a declared number or boolean: value_code's rule)
            code = value_code(self.schema.label_codes, y)
        if code < 0:
            if is_missing_value(y):
                raise ValueError(
                    f"label {self.schema.label.name!r} {MISSING_WORDS}: every record learned needs its class"
                )
            raise ValueError(  # never the class given: applications log errors (the declared classes are public)
                f"label {self.schema.label.name!r} {UNDECLARED_CLASS_WORDS} (declared: {self.label_values})"
            )
        return code

    def encode_labels(self, y: Any) -> np.ndarray:
        """Codes of many labels (a list, array or Series); :class:`ValueError` names the first unknown one."""
        return self.schema.encode_labels(y.tolist() if hasattr(y, "tolist") else list(y))

    def encode_frame(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Encode a DataFrame (columns = feature names) with :meth:`Schema.encode`'s rules.

        Returns ``(X, unknown)``: the float64 codes in schema order (rows with an
        unknown value hold zeros) and the mask of those rows. Absent columns are
        missing values; integer column names stand for digit attribute names. :class:`TypeError` for
        anything but a DataFrame (river's ``learn_many`` and ``predict_many`` take one).
        """
        if not is_frame(X):
            raise TypeError(
                f"X must be a pandas DataFrame (river's mini-batch methods take one), got {type(X).__name__}; "
                "for records one at a time use learn_one / predict_one, or pd.DataFrame(records)"
            )
        n = len(X)
        cols = list(X.columns)
        self._first_seen(cols)
        have = set(cols)
        data = {}
        for name, alt, *_ in self._spec:
            key = name if name in have else alt if (alt is not None and alt in have) else None
            if key is None:
                col = np.empty(n, dtype=object)
                col[:] = None
                data[name] = col
            else:
                data[name] = X[key].to_numpy()
        frame = [data[name] for name in self.names]
        if all(c.dtype.kind in "iuf" for c in frame):
            arr = np.column_stack(frame).astype(np.float64) if n else np.empty((0, len(frame)))
        else:
            arr = np.empty((n, len(frame)), dtype=object)
            for j, c in enumerate(frame):
                arr[:, j] = c
        enc = self.schema.encode(arr, on_invalid="drop", fill_missing=True)
        out = np.zeros((n, len(self.names)), dtype=np.float64)
        out[enc.kept] = enc.X
        unknown = np.ones(n, dtype=bool)
        unknown[enc.kept] = False
        return out, unknown

    def warn_unlearned(self, x: dict, row: list) -> bool:
        """Warn (:class:`UndeclaredValueWarning`) for each attribute of ``x`` whose value is present but encoded to
        ``None`` in ``row`` (:meth:`encode_one`'s output): undeclared or malformed, so the record is not learned.
        Called only for a record that is dropped; Python shows each attribute and type once per call site.
        Returns whether it warned (False: only missing values)."""
        warned = False
        for j, (name, alt, _, _, _, _) in enumerate(self._spec):
            if row[j] is not None:
                continue
            v = x.get(name, _MISSING)
            if v is _MISSING and alt is not None:
                v = x.get(alt, _MISSING)
            if v is _MISSING or _absent(v):
                continue
            attr = self.schema.attributes[j]
            if isinstance(attr, Categorical):  # (a lookup of declared values)
                types = ", ".join(sorted({type(d).__name__ for d in attr.values}))
                why = (
                    f"is not among its declared values (of type {types}); records with it are not learned from "
                    "(declare the value in the schema, or map it to a declared one before learning"
                )
                if isinstance(v, (float, np.floating)):  # (river's StandardScaler before it turns codes into floats)
                    why += "; a numeric preprocessing step before the classifier, such as StandardScaler, must leave "
                    why += "categorical attributes out: compose.Select or compose.Discard"
                why += ")"
            else:
                why = "is not a number; records with it are not learned from (map it to a number before learning)"
            warnings.warn(
                f"attribute {name!r}: a value of type {type(v).__name__} {why}", UndeclaredValueWarning, stacklevel=3
            )
            warned = True
        return warned

    def warn_unlearned_rows(self, X: Any, unknown: np.ndarray, limit: int = 1000) -> None:
        """:meth:`warn_unlearned` for a frame's dropped rows (``unknown``, :meth:`encode_frame`'s flags), up to the
        first row that warns (at most ``limit`` rows looked at: rows dropped for a missing value say nothing)."""
        for i in np.flatnonzero(unknown)[:limit]:
            x = self.frame_row(X, int(i))
            if self.warn_unlearned(x, self.encode_one(x)):
                return

    def frame_row(self, X: Any, i: int | np.integer) -> dict:
        """Row ``i`` of a frame as a river record (absent values left out), for :meth:`encode_one`."""
        row = X.iloc[i]
        return {k: v for k, v in row.items() if not _absent(v)}


def _literal(ns: dict, key: str, b: Any) -> str:
    """A finite int or float as its literal; anything else (inf, a numpy scalar) as a name bound in ``ns``."""
    if type(b) in (int, float) and math.isfinite(b):
        return repr(b)
    ns[key] = b
    return key


def _absent(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip())


def labels_of(proba: Any, labels: list):
    """The most probable label of every row of a probability DataFrame, as a Series (the first on ties, like ``max``)."""
    import pandas as pd

    out = np.empty(len(labels), dtype=object)
    out[:] = labels
    return pd.Series(out[proba.to_numpy().argmax(axis=1)], index=proba.index)
