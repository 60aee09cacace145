"""The declared domains of a schema's columns: a categorical attribute's values, a numeric attribute's
range, the label's classes; each checked when declared.

Declared up front because differential privacy needs the domains public: a range or a value set learned
from the data would itself leak the records at its edges.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from streamdp.records.coding import lookup_key, plain

__all__ = ["SchemaError", "Categorical", "Numeric", "Label", "Attribute"]


class SchemaError(ValueError):
    """A schema definition is malformed."""


def _check_values(owner: str, values: Any) -> tuple:
    if not isinstance(values, (list, tuple)) or len(values) == 0:
        raise SchemaError(f"{owner}: 'values' must be a non-empty list, got {values!r}")
    values = [plain(v) for v in values]  # numpy scalars (list(np.array(...))) as the Python values they hold
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


#: Most quantiles a numeric attribute may declare (a threshold draw reads them all).
MAX_QUANTILES = 1024


@dataclass(frozen=True)
class Numeric:
    """An attribute with a declared range ``[min, max]``; values outside are clamped.

    ``quantiles`` (optional, public): increasing cut points strictly inside the range that split the
    attribute's values into equal shares (a published or guessed distribution, never one read from the
    private records). Random trees draw their thresholds from the piecewise-uniform density they
    define (equal mass between consecutive cut points) instead of uniformly over the range.

    >>> Numeric("age", 0, 120, quantiles=[20, 35, 50]).quantiles
    (20.0, 35.0, 50.0)
    >>> Numeric("age", 0, 120, quantiles=[20, 130])
    Traceback (most recent call last):
    ...
    streamdp.records.domains.SchemaError: attribute 'age': quantile 130 is not strictly inside the range [0, 120]
    """

    name: str
    min: float
    max: float
    quantiles: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        for bound in ("min", "max"):
            v = plain(getattr(self, bound))  # (a numpy scalar as its Python value)
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

        if self.quantiles is not None:
            object.__setattr__(self, "quantiles", self._checked_quantiles(self.quantiles))

    def _checked_quantiles(self, quantiles: Any) -> tuple[float, ...]:
        where = f"attribute {self.name!r}"
        if not isinstance(quantiles, (list, tuple)) or not 1 <= len(quantiles) <= MAX_QUANTILES:
            raise SchemaError(f"{where}: 'quantiles' must be a list of 1 to {MAX_QUANTILES} numbers, got {quantiles!r}")
        out: list[float] = []
        for q in map(plain, quantiles):
            if isinstance(q, bool) or not isinstance(q, (int, float)) or not math.isfinite(q):
                raise SchemaError(f"{where}: quantile {q!r} must be a finite number")
            if not self.min < q < self.max:
                raise SchemaError(
                    f"{where}: quantile {q!r} is not strictly inside the range [{self.min:g}, {self.max:g}]"
                )
            if out and not q > out[-1]:
                raise SchemaError(f"{where}: quantiles must increase strictly ({out[-1]:g} then {q!r})")
            out.append(float(q))
        return tuple(out)

    def to_dict(self) -> dict:
        d: dict = {"name": self.name, "type": "numeric", "min": self.min, "max": self.max}
        if self.quantiles is not None:
            d["quantiles"] = list(self.quantiles)
        return d


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
