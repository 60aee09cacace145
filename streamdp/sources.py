"""Reading data sources: CSV cells to a schema's declared values, CSV files and known datasets to ``(X, y)``.

Shared by ``streamdp push`` and dataset jobs.

>>> from streamdp import Schema
>>> s = Schema.from_dict({"attributes": [{"name": "a", "type": "categorical", "values": [1, 2]},
...                                      {"name": "x", "type": "numeric", "min": 0, "max": 9}],
...                       "label": {"name": "y", "values": [True, False]}})
>>> parse_row(s, ["2", " 3.5", "true"], cols=[0, 1], label_col=2)
([2, 3.5], True)
"""

from __future__ import annotations

import csv
import os
from typing import Any, Sequence

import numpy as np

from .datasets import DATASETS, load
from .schema import Categorical, Schema

__all__ = ["SourceError", "convert", "parse_row", "read_dataset"]


class SourceError(ValueError):
    """A data source that cannot be read against its schema (the message names the file and what is wrong)."""


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


def read_dataset(path: str, schema: Schema) -> tuple[np.ndarray, np.ndarray]:
    """Encoded ``(X, y)`` of a CSV file with a header (attribute and label names), or a known dataset by name.

    Rows with values outside the declared schema are dropped; a file without the
    schema's columns raises :class:`SourceError`.
    """
    if not os.path.exists(path) and path in DATASETS:
        ds = load(path)
        enc = schema.encode(ds.X, ds.y, on_invalid="drop")
        return enc.X, enc.y
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        raise SourceError(f"{path}: empty file")
    head = [h.strip() for h in rows[0]]
    missing = [n for n in [*schema.names, schema.label.name] if n not in head]
    if missing:
        raise SourceError(f"{path}: the header lacks the columns {missing} (it has {head})")
    cols = [head.index(n) for n in schema.names]
    li = head.index(schema.label.name)
    X, y = [], []
    for row in rows[1:]:
        if not row or all(not c.strip() for c in row) or len(row) < len(head):
            continue
        rec, lab = parse_row(schema, row, cols, li)
        X.append(rec)
        y.append(lab)
    if not X:
        return np.empty((0, schema.n_attributes)), np.empty(0, dtype=np.int64)
    enc = schema.encode(np.array(X, dtype=object), y, on_invalid="drop")
    return enc.X, enc.y
