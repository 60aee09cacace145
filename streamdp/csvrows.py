"""CSV cells to the declared values of a schema (shared by ``streamdp push`` and dataset jobs).

>>> from streamdp import Schema
>>> s = Schema.from_dict({"attributes": [{"name": "a", "type": "categorical", "values": [1, 2]},
...                                      {"name": "x", "type": "numeric", "min": 0, "max": 9}],
...                       "label": {"name": "y", "values": [True, False]}})
>>> parse_row(s, ["2", " 3.5", "true"], cols=[0, 1], label_col=2)
([2, 3.5], True)
"""

from __future__ import annotations

from typing import Any, Sequence

from .schema import Categorical, Schema

__all__ = ["convert", "parse_row"]


def convert(values: tuple, raw: str) -> Any:
    """A CSV string to the declared value it spells (declared values may be ints or booleans); else the string."""
    for v in values:
        if str(v) == raw or (isinstance(v, bool) and raw.lower() == str(v).lower()):
            return v
    return raw


def parse_row(schema: Schema, row: Sequence[str], cols: Sequence[int], label_col: int) -> tuple[list, Any]:
    """One CSV row to ``(record in schema order, label)``; missing cells become None (the schema rejects them)."""
    rec: list[Any] = []
    for a, j in zip(schema.attributes, cols):
        cell = row[j].strip() if j < len(row) else None
        if cell is None:
            rec.append(None)
        elif isinstance(a, Categorical):
            rec.append(convert(a.values, cell))
        else:
            try:
                rec.append(float(cell))
            except ValueError:
                rec.append(cell)
    label = convert(schema.label.values, row[label_col].strip()) if label_col < len(row) else None
    return rec, label
