"""The declared domains of a schema's columns: a categorical attribute's values, a numeric attribute's
range, the label's classes; each checked when declared.

Declared up front because differential privacy needs the domains public: a range or a value set learned
from the data would itself leak the records at its edges.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from streamdp.records.coding import lookup_key

__all__ = ["SchemaError", "Categorical", "Numeric", "Label", "Attribute"]


class SchemaError(ValueError):
    """A schema definition is malformed."""


def _check_values(owner: str, values: Any) -> tuple:
    if not isinstance(values, (list, tuple)) or len(values) == 0:
        raise SchemaError(f"{owner}: 'values' must be a non-empty list, got {values!r}")
    for v in values:
        if not isinstance(v, (str, int, bool, float)) or (isinstance(v, float) and not math.isfinite(v)):
            raise SchemaError(f"{owner}: value {v!r} must be a string, integer, finite number or boolean")
        if isinstance(v, int) and not -(2**63) <= v < 2**64:  # what a model blob (msgpack) can store
            raise SchemaError(f"{owner}: integer value {v!r} is outside the 64-bit range a model can store")
    seen: set = set()
    for v in values:  # one pass: a hostile schema of many values must not cost n**2
        kk = lookup_key(v)  # True and 1 (False and 0) are different declared values
        if kk in seen:
            raise SchemaError(f"{owner}: value {v!r} is declared twice")
        seen.add(kk)
    return tuple(values)


@dataclass(frozen=True)
class Categorical:
    """An attribute with a declared, finite set of values."""

    name: str
    values: tuple

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", _check_values(f"attribute {self.name!r}", self.values))

    @property
    def arity(self) -> int:
        return len(self.values)

    def to_dict(self) -> dict:
        return {"name": self.name, "type": "categorical", "values": list(self.values)}


@dataclass(frozen=True)
class Numeric:
    """An attribute with a declared range ``[min, max]``; values outside are clamped."""

    name: str
    min: float
    max: float

    def __post_init__(self) -> None:
        for bound in ("min", "max"):
            v = getattr(self, bound)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise SchemaError(f"attribute {self.name!r}: '{bound}' must be a finite number, got {v!r}")
        if not self.min < self.max:
            raise SchemaError(f"attribute {self.name!r}: min ({self.min}) must be below max ({self.max})")
        object.__setattr__(self, "min", float(self.min))
        object.__setattr__(self, "max", float(self.max))
        if not math.isfinite(self.max - self.min):  # split points are drawn uniformly in the range
            raise SchemaError(
                f"attribute {self.name!r}: the range [{self.min:g}, {self.max:g}] is wider than a float "
                "can hold (max - min overflows)"
            )

    def to_dict(self) -> dict:
        return {"name": self.name, "type": "numeric", "min": self.min, "max": self.max}


@dataclass(frozen=True)
class Label:
    """The class attribute and its declared labels (their order is the column order of probabilities)."""

    name: str
    values: tuple

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", _check_values(f"label {self.name!r}", self.values))
        if len(self.values) < 2:
            raise SchemaError(f"label {self.name!r}: at least two classes are needed, got {list(self.values)}")

    def to_dict(self) -> dict:
        return {"name": self.name, "values": list(self.values)}


Attribute = Categorical | Numeric
