"""Learning a schema from data, which leaks, and says so loudly (:class:`PrivacyLeakWarning`).

Differential privacy needs attribute domains declared in advance (:mod:`streamdp.river.schemas` has
river's); :func:`infer_schema` is for public data, or data whose domains may be disclosed.

>>> import warnings
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     s = infer_schema([({"a": 1.5, "b": "x"}, 0), ({"a": 4.0, "b": "y"}, 1)])
>>> s.names, caught[0].category.__name__
(['a', 'b'], 'PrivacyLeakWarning')
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable
from typing import Any

import numpy as np

from streamdp.records.coding import MISSING, cell_number
from streamdp.records.domains import Categorical, Label, Numeric
from streamdp.records.schema import Schema

__all__ = ["PrivacyLeakWarning", "infer_schema"]


class PrivacyLeakWarning(UserWarning):
    """Something was learned from the private data outside the privacy mechanism (e.g. attribute domains)."""


def infer_schema(
    stream: Iterable[tuple[dict, Any]],
    *,
    max_categories: int = 32,
    label_name: str = "class",
) -> Schema:
    """Learn a schema from data: numeric ranges from min/max, categorical values and labels as seen.

    THIS LEAKS: the min and max of a numeric attribute are individual records'
    values, and a rare category reveals that some record has it. The resulting
    model is not differentially private with respect to the records used here.
    A :class:`PrivacyLeakWarning` is always issued. Use it only on public data
    or data you may disclose; otherwise declare the domains.

    Numbers (not bool) become :class:`Numeric` unless they take at most
    ``max_categories`` integer values; everything else becomes :class:`Categorical`.
    """
    warnings.warn(
        "infer_schema() reads attribute domains from the data: numeric min/max and the set of "
        "categories are disclosed by the schema and by every model built on it, so the model is NOT "
        "differentially private with respect to these records. Declare the domains instead.",
        PrivacyLeakWarning,
        stacklevel=2,
    )
    seen: dict[Any, set] = {}
    lo: dict[Any, float] = {}
    hi: dict[Any, float] = {}
    numeric: dict[Any, bool] = {}
    labels: list = []
    label_set: set = set()
    order: list = []
    for x, y in stream:
        if isinstance(y, np.generic):
            y = y.item()
        if y not in label_set:
            label_set.add(y)
            labels.append(y)
        for k, v in x.items():
            if isinstance(v, np.generic):
                v = v.item()
            if k not in numeric:
                numeric[k] = True
                seen[k] = set()
                order.append(k)
            if numeric[k] and isinstance(v, (int, float)) and not isinstance(v, bool):
                if isinstance(v, float) and math.isnan(v):
                    continue
                lo[k] = min(lo.get(k, v), v)
                hi[k] = max(hi.get(k, v), v)
            else:
                numeric[k] = False
            if len(seen[k]) <= max_categories:
                seen[k].add(v)
    attrs: list = []
    for k in order:
        name = str(k)
        vals = seen[k]
        ints = all(isinstance(v, int) or (isinstance(v, float) and v.is_integer()) for v in vals)
        if numeric[k] and not (ints and len(vals) <= max_categories):
            a, b = float(lo[k]), float(hi[k])
            attrs.append(Numeric(name, a, b if b > a else a + 1.0))
        else:
            if len(vals) > max_categories:
                texts = [v for v in vals if isinstance(v, str)]
                hint = (
                    "its values are text spelling numbers (as csv.DictReader gives them): convert them to numbers "
                    "first to infer a numeric range"
                    if texts and all(cell_number(v) is not None and cell_number(v) is not MISSING for v in texts)
                    else "declare its domain in a schema, or raise max_categories"
                )
                raise ValueError(f"attribute {k!r} has more than {max_categories} categories: {hint}")
            vs = sorted({int(v) if isinstance(v, float) else v for v in vals}, key=lambda v: (type(v).__name__, v))
            attrs.append(Categorical(name, tuple(vs)))
    try:
        labels = sorted(labels)
    except TypeError:
        pass
    return Schema(attrs, Label(label_name, tuple(labels)))
