"""Coding declared values: lookup tables from a declared value to its code, vectorised over columns.

One rule (:func:`value_code`): a value's code is its index among the attribute's declared
values, matched exactly (``True`` is not ``1``), or a declared number's or boolean's text
(:func:`lookup_table`: ``"0.5"`` is ``0.5`` unless ``"0.5"`` is declared); anything else is -1
(not declared). :func:`lookup_codes` applies it to a whole column, through one table over the
column's range for integer-valued arrays and through dict probes otherwise. Used by
:class:`streamdp.records.schema.Schema`, :mod:`streamdp.records.sources` and the river encoder.

>>> lookup = {lookup_key(v): i for i, v in enumerate(("n", "y", True))}
>>> lookup_codes(lookup, np.array(["y", "n", "maybe"], dtype=object)).tolist()
[1, 0, -1]
>>> value_code(lookup, True), value_code(lookup, 1)
(2, -1)
"""

from __future__ import annotations

import decimal
import functools
import itertools
import math
import numbers
import re
from typing import Any

import numpy as np

__all__ = [
    "MISSING",
    "plain_value",
    "lookup_table",
    "text_code",
    "text_spellings",
    "is_frame",
    "to_float",
    "NUMBER_TEXT",
    "text_number",
    "cell_number",
    "number_cells",
    "is_absent",
    "is_missing_value",
    "plain",
    "lookup_key",
    "lookup_codes",
    "table_codes",
    "has_fractions",
    "value_code",
    "declared_table",
    "TABLE_SPAN",
    "BLOCK",
]

#: A cell with no value (a record without the attribute).
MISSING = object()


def is_frame(X: Any) -> bool:
    return hasattr(X, "columns") and hasattr(X, "iloc")


def to_float(col: np.ndarray) -> np.ndarray | None:
    """Fast conversion of a column to float64; None if any element is not a plain number.

    >>> col = np.array([1, 2.5, np.int8(3)], dtype=object)
    >>> to_float(col).tolist(), to_float(np.array([1, True], dtype=object)), to_float(np.array([1, None], dtype=object))
    ([1.0, 2.5, 3.0], None, None)
    """
    if col.dtype.kind in "iuf":
        return col.astype(np.float64)
    if col.dtype.kind != "O":
        return None
    # One pass in C over the values' types (not an isinstance call per value): a column
    # of plain numbers holds a handful of types, each checked once.
    if not all(_is_number_type(t) for t in set(map(type, col))):
        return None
    try:
        return col.astype(np.float64)
    except OverflowError:  # an int beyond a float's range: the caller's value-by-value path decides
        return None


@functools.lru_cache(maxsize=64)
def _is_number_type(t: type) -> bool:
    """``t`` is an int or float type (Python or numpy) but not a boolean."""
    return issubclass(t, (int, float, np.integer, np.floating)) and not issubclass(t, (bool, np.bool_))


#: A number as CSV writers spell one (ASCII digits, a sign, a point, an exponent): not ``1_0``, not other digits.
NUMBER_TEXT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def text_number(text: str) -> float | None:
    """The finite number a text spells (:data:`NUMBER_TEXT`, surrounding spaces ignored), else None.

    Why: ``csv.DictReader`` and ``read_csv(dtype=str)`` give numbers as text; ``"nan"``, ``"inf"`` or
    ``"1e999"`` name no value in a declared range, so they are refused rather than clamped.

    >>> text_number(" 5.1 "), text_number("-2e3"), text_number("1_0"), text_number("inf"), text_number("1e999")
    (5.1, -2000.0, None, None, None)
    """
    text = text.strip()
    if not NUMBER_TEXT.fullmatch(text):
        return None
    v = float(text)
    return v if math.isfinite(v) else None


def cell_number(v: Any) -> Any:
    """The one rule for a numeric attribute's cell: its number as a float, :data:`MISSING`, or None (not a number).

    A number (int, float, ``Decimal``, ``Fraction``; Python or numpy; not a boolean) is its value (NaN stays
    NaN for the caller to name; an int beyond a float's range is an infinity, clamped by the caller); a text
    spelling a finite number (:func:`text_number`) is that number; :data:`MISSING`, None, pandas' NA and a
    blank text are missing; anything else (booleans, other text, other objects) is not a number. Why numbers
    of every kind: a database driver gives ``Decimal`` for SQL ``NUMERIC``, ``csv.DictReader`` gives text.

    >>> from decimal import Decimal
    >>> [cell_number(v) for v in (3, " 2.5", Decimal("1.5"), True, "x")], cell_number("") is MISSING
    ([3.0, 2.5, 1.5, None, None], True)
    """
    if isinstance(v, str):
        x = text_number(v)
        return x if x is not None else None if v.strip() else MISSING
    if is_absent(v):
        return MISSING
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (numbers.Real, decimal.Decimal)):
        return None
    if isinstance(v, decimal.Decimal) and v.is_nan():  # (float() refuses a signalling NaN)
        return math.nan
    try:
        return float(v)
    except OverflowError:  # an int beyond a float's range: outside the declared one, clamped
        return math.inf if v > 0 else -math.inf  # type: ignore[operator]


def number_cells(col: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`cell_number` over a column: ``(values, missing, not_number)``, ``values`` NaN where a cell is
    missing or not a number. Used by :meth:`Schema.encode` and the frame coder alike.

    >>> v, miss, bad = number_cells(np.array([1, " 2.5", "", None, True, "x", float("nan")], dtype=object))
    >>> v.tolist()[:2], miss.tolist(), bad.tolist()
    ([1.0, 2.5], [False, False, True, True, False, False, False], [False, False, False, False, True, True, False])
    """
    n = len(col)
    vals = np.full(n, np.nan)
    missing = np.zeros(n, dtype=bool)
    not_number = np.zeros(n, dtype=bool)
    for i, v in enumerate(col):
        x = cell_number(v)
        if x is None:
            not_number[i] = True
        elif x is MISSING:
            missing[i] = True
        else:
            vals[i] = x
    return vals, missing, not_number


def is_absent(v: Any) -> bool:
    """A cell with no value: :data:`MISSING`, None or pandas' NA (NaN is a float: its callers name it).

    >>> is_absent(None), is_absent(MISSING), is_absent(float("nan")), is_absent("")
    (True, True, False, False)
    """
    return v is MISSING or v is None or type(v).__name__ == "NAType"  # (pandas' NA, without importing pandas)


def is_missing_value(v: Any) -> bool:
    """:func:`is_absent`, NaN, or a blank text (a CSV's empty cell): what a categorical attribute or a label calls
    missing rather than undeclared.

    >>> is_missing_value(float("nan")), is_missing_value(" "), is_missing_value("a"), is_missing_value(0)
    (True, True, False, False)
    """
    if isinstance(v, str):
        return not v.strip()
    return is_absent(v) or (isinstance(v, (float, np.floating)) and math.isnan(v))


def plain(v: Any) -> Any:
    """A numpy scalar as the Python value it holds (for error messages)."""
    return v.item() if isinstance(v, np.generic) else v


def lookup_key(v: Any) -> Any:
    """Lookup key of a declared value: booleans never collide with 0/1."""
    return ("bool", v) if isinstance(v, bool) else v


def text_spellings(v: Any) -> tuple[str, ...]:
    """The texts that spell a declared value that is not text, as a CSV writer or ``csv.DictReader`` gives it:
    ``str(v)``, a boolean's lower case too, a whole number's float spelling too (``"1.0"``: pandas' whole
    floats); none for a declared text.

    >>> text_spellings(2), text_spellings(True), text_spellings(0.5), text_spellings("a")
    (('2', '2.0'), ('True', 'true'), ('0.5',), ())
    """
    if isinstance(v, str):
        return ()
    if isinstance(v, bool):
        return (str(v), str(v).lower())
    if isinstance(v, int):
        return (str(v), repr(float(v)))
    if isinstance(v, float) and v.is_integer():
        return (repr(v), str(int(v)))
    return (str(v),)


def lookup_table(values: Any) -> dict:
    """The lookup table of :func:`value_code` for declared ``values``: each value's :func:`lookup_key`, and each
    :func:`text_spellings` of a value that is not text, unless a declared text (or an earlier value) has it.
    Why: records read as text (``csv.DictReader``) spell declared numbers and booleans as the CSV reader
    takes them; a declared text always means itself.

    >>> t = lookup_table((1, True, "2", 2))
    >>> [value_code(t, v) for v in (1, "1", "1.0", True, "true", "2", 2, "2.0", "x")]
    [0, 0, 0, 1, 1, 2, 3, 3, -1]
    """
    table = {lookup_key(v): i for i, v in enumerate(values)}
    for i, v in enumerate(values):
        for text in text_spellings(v):
            table.setdefault(text, i)
    return table


#: Integer-valued columns whose values span fewer than this many integers are coded by one table lookup.
TABLE_SPAN = 4096
#: Rows coded at a time by the whole-matrix path.
BLOCK = 16384


def lookup_codes(lookup: dict, col: np.ndarray) -> np.ndarray:
    """Code of every value of a column (-1 when not declared).

    Integer and float arrays go through a table over their range (floats that
    are not whole numbers, NaN and infinities are undeclared), object arrays
    through one dict probe per value, other typed arrays (strings, booleans,
    numbers spread over a wide range) through ``np.unique``. ``True == 1`` in
    Python and numpy, so booleans in an object column are looked up as booleans.
    """
    col = np.asarray(col)
    if col.size and (col.dtype.kind in "iu" or (col.dtype.kind == "f" and not has_fractions(lookup))):
        codes = table_codes(lookup, col)
        if codes is not None:
            return codes
    if col.dtype == object and col.size:
        # Fast path: one dict probe per value (hashing, no sorting of Python objects). Declared
        # values are str/int/bool, so a direct hit is the right code for anything but a boolean
        # (True == 1); booleans and misses (-2) are resolved one by one below.
        try:
            codes = np.fromiter(map(lookup.get, col, itertools.repeat(-2)), dtype=np.int64, count=col.size)
        except TypeError:  # an unhashable value (named as unknown by the caller): value by value
            return np.array([value_code(lookup, v) for v in col], dtype=np.int64)
        # A boolean can only hit a declared number (1 or 0); with no number declared it misses anyway.
        if any(type(k) in (int, float) for k in lookup):
            kinds = set(map(type, col))
            if bool in kinds or np.bool_ in kinds:
                codes[np.fromiter((type(v) in (bool, np.bool_) for v in col), dtype=bool, count=col.size)] = -2
        for i in np.flatnonzero(codes == -2):
            codes[i] = value_code(lookup, col[i])
        return codes
    uniq, inverse = np.unique(col, return_inverse=True)  # typed arrays (str, bool) sort in C
    codes_u = np.array([value_code(lookup, u) for u in uniq], dtype=np.int64)
    return codes_u[inverse.reshape(-1)]


def table_codes(lookup: dict, col: np.ndarray) -> np.ndarray | None:
    """Codes of a numeric column through a table over ``[min, max]``; None if the span is too wide."""
    lo, hi = col.min(), col.max()  # NaN propagates into both
    if col.dtype.kind == "f":
        if not (math.isfinite(lo) and math.isfinite(hi)):
            return None
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = int(lo), int(hi)
    if hi - lo >= TABLE_SPAN or lo < -(2**62) or hi >= 2**62:  # (beyond int64 indices: the general path)
        return None
    table = np.array([value_code(lookup, v) for v in range(lo, hi + 1)], dtype=np.int64)
    if col.dtype.kind != "f":
        return table[(col - lo).astype(np.intp, copy=False)] if lo else table[col.astype(np.intp, copy=False)]
    idx = col.astype(np.intp)
    codes = table[idx - lo] if lo else table[idx]
    codes[idx != col] = -1  # 2.5 is not the declared value 2
    return codes


def declared_table(lookup: dict) -> tuple[int, np.ndarray] | None:
    """The lowest declared whole number ``lo`` and the code of every integer in ``[lo, hi]``
    (-1 where not declared), ``hi`` the highest; None when no whole number is declared or
    the span reaches :data:`TABLE_SPAN`. A table over the declared values, not the data's.

    >>> lo, table = declared_table({lookup_key(v): i for i, v in enumerate((5, 3, "x", True, 2.5))})
    >>> lo, table.tolist()
    (3, [1, -1, 0])
    """
    whole = [k for k in lookup if isinstance(k, (int, float)) and float(k).is_integer()]
    if not whole:
        return None
    lo, hi = int(min(whole)), int(max(whole))
    if hi - lo >= TABLE_SPAN:
        return None
    return lo, np.array([value_code(lookup, v) for v in range(lo, hi + 1)], dtype=np.int64)


def has_fractions(lookup: dict) -> bool:
    return any(type(k) is float and not k.is_integer() for k in lookup)


def value_code(lookup: dict, v: Any) -> int:
    """Code of value ``v`` in a lookup table of :attr:`Schema.value_codes` (-1 when it is not declared).

    Exact matching, no other coercion: ``1.0`` is the declared ``1`` (equal numbers),
    ``0.5`` matches only a declared ``0.5``; a text matches a declared text, else
    the declared number or boolean it spells (:func:`lookup_table`: ``"1"`` is ``1``
    unless ``"1"`` is declared), a boolean never matches ``0``/``1`` and a number
    never matches ``True``/``False``; NaN and None match nothing. Numpy scalars
    count as the Python values they hold.

    >>> from streamdp.records.schema import Categorical, Label, Schema
    >>> s = Schema([Categorical("a", (0, 0.5, 1)), Categorical("b", (False, True))], Label("y", ("n", "p")))
    >>> [value_code(s.value_codes[0], v) for v in (0.5, 1.0, True, "1", 0.25, "one")]
    [1, 2, -1, 2, -1, -1]
    >>> [value_code(s.value_codes[1], v) for v in (True, 1, np.bool_(False))]
    [1, -1, 0]
    """
    if v is MISSING or v is None:
        return -1
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return -1
    try:
        code = lookup.get(lookup_key(v), -1)
    except TypeError:  # unhashable
        return -1
    return text_code(lookup, v) if code < 0 and isinstance(v, str) else code


def text_code(lookup: dict, text: str) -> int:
    """The code of a declared value a text spells that is not itself declared (-1 if none): a declared text with
    spaces around it, a boolean in any case (``"TRUE"``), a number by value (``"02"``, ``"2e0"``; :func:`text_number`).
    Why: CSV cells and ``csv.DictReader`` give every value as text.

    >>> t = lookup_table(("a", True, 2))
    >>> [text_code(t, v) for v in (" a ", "TRUE", "02", "2e0", "b", "1")]
    [0, 1, 2, 2, -1, -1]
    """
    t = text.strip()
    if t != text and t in lookup:
        return lookup[t]
    if t.lower() in ("true", "false"):
        return lookup.get(lookup_key(t.lower() == "true"), -1)
    x = text_number(t)
    return -1 if x is None else lookup.get(x, -1)


def plain_value(v: Any) -> Any:
    """A value msgpack has no type for as a plain one: numpy scalars, ``Decimal`` and ``Fraction`` as numbers
    (a NaN of any kind, the signalling one too, as a float NaN); anything else raises ``TypeError`` naming
    its type, never its value (a record's value is not for messages). Why: msgpack frames (``codec``) carry
    what a database driver or numpy gives.

    >>> from decimal import Decimal
    >>> [plain_value(v) for v in (np.int64(2), Decimal("1.5"), Decimal("2"), Decimal("-Infinity"), Decimal("1e400"))]
    [2, 1.5, 2, -inf, inf]
    >>> math.isnan(plain_value(Decimal("sNaN"))), plain_value(np.longdouble(0.5)), plain_value(np.bool_(True))
    (True, 0.5, True)
    """
    if isinstance(v, (np.bool_, bool)):
        return bool(v)
    if isinstance(v, decimal.Decimal):
        if v.is_nan():
            return math.nan
        small = v.is_finite() and v == v.to_integral_value() and abs(v) < 2**63  # (msgpack's integer range)
        return int(v) if small else float(v)
    if isinstance(v, (numbers.Integral, np.integer)):
        return int(v)
    if isinstance(v, (numbers.Real, np.floating)):
        return float(v)
    raise TypeError(
        f"a value of type {type(v).__name__} cannot be sent: numbers, text, bytes, None, lists and maps only"
    )
