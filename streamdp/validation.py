"""One rule for each kind of parameter: epsilon, delta, probabilities, sizes, choices.

Every check returns the value in its plain Python type (``float``, ``int``,
``bool``) or raises :class:`ValueError` naming the parameter and what is
wrong, in the spirit of diffprivlib's ``check_epsilon_delta`` and
scikit-learn's parameter constraints. ``bool`` is never a number here and
NaN is never in range.

The constraint objects (:class:`Interval`, :class:`Options`, :class:`Flag`,
:class:`AnyOf`) describe a parameter for the catalogue of algorithms
(:mod:`streamdp.learners.catalogue`); the functions are the shorthands code calls.

>>> check_epsilon(0.5)
0.5
>>> check_epsilon(float("inf"), allow_inf=True)
inf
>>> check_epsilon(float("inf"))
Traceback (most recent call last):
...
ValueError: epsilon must be a finite number > 0, got inf
>>> check_delta(1e-6)
1e-06
>>> check_integer(3, "n_trees", low=1, high=1000)
3
>>> check_integer(True, "n_trees")
Traceback (most recent call last):
...
ValueError: n_trees must be an integer >= 1, got True
>>> str(Interval(float, 0, 1, closed="neither"))
'a number in (0, 1)'
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_BLOCK_MS",
    "Interval",
    "Options",
    "Flag",
    "AnyOf",
    "check_epsilon",
    "check_delta",
    "check_probability",
    "check_integer",
    "check_number",
    "check_choice",
    "check_flag",
    "NotFittedError",
]


class NotFittedError(ValueError, AttributeError):
    """A model asked to predict (or be saved) before it was fitted: nothing learned, so no class to give.

    A ValueError and an AttributeError, as scikit-learn's ``sklearn.exceptions.NotFittedError``, so code that
    catches either (or scikit-learn's checks) sees it.
    """


def _shown(value: Any) -> str:
    """A parameter value for an error message, kept short."""
    r = repr(value)
    return r if len(r) <= 40 else r[:37] + "..."


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


@dataclass(frozen=True)
class Interval:
    """Integers (``kind=int``) or numbers (``kind=float``) between ``low`` and ``high`` (None: unbounded).

    ``closed``: which ends belong to the interval ("both", "left", "right", "neither").

    >>> Interval(int, 1, 30).check(5, "max_depth")
    5
    >>> Interval(int, 1, 30).check(31, "max_depth")
    Traceback (most recent call last):
    ...
    ValueError: max_depth must be an integer in [1, 30], got 31
    """

    kind: type
    low: float | None = None
    high: float | None = None
    closed: str = "both"

    def __str__(self) -> str:
        what = "an integer" if self.kind is int else "a number"
        lo_in, hi_in = self.closed in ("both", "left"), self.closed in ("both", "right")

        def n(v: float) -> str:  # (an integer bound in digits, 1000000 not 1e+06; a huge one as 3.4e+38)
            return f"{int(v)}" if self.kind is int and abs(v) < 1e9 else f"{v:g}"

        if self.low is not None and self.high is not None:
            return f"{what} in {'[' if lo_in else '('}{n(self.low)}, {n(self.high)}{']' if hi_in else ')'}"
        if self.low is not None:
            return f"{what} {'>=' if lo_in else '>'} {n(self.low)}"
        if self.high is not None:
            return f"{what} {'<=' if hi_in else '<'} {n(self.high)}"
        return what

    def accepts(self, value: Any) -> bool:
        if not (_is_int(value) if self.kind is int else _is_real(value)):
            return False
        if self.kind is not int and math.isnan(value):
            return False
        lo_in, hi_in = self.closed in ("both", "left"), self.closed in ("both", "right")
        if self.low is not None and not (value >= self.low if lo_in else value > self.low):
            return False
        return self.high is None or (value <= self.high if hi_in else value < self.high)

    def check(self, value: Any, name: str) -> Any:
        if not self.accepts(value):
            raise ValueError(f"{name} must be {self}, got {_shown(value)}")
        return int(value) if self.kind is int else float(value)


@dataclass(frozen=True)
class Options:
    """One of a fixed tuple of values (strings, or None).

    >>> Options(("proba", "majority")).check("vote", "vote")
    Traceback (most recent call last):
    ...
    ValueError: vote must be one of 'proba', 'majority', got 'vote'
    """

    choices: tuple

    def __str__(self) -> str:
        return "one of " + ", ".join(repr(c) for c in self.choices)

    def accepts(self, value: Any) -> bool:
        return any(value is c or (isinstance(value, str) and value == c) for c in self.choices)

    def check(self, value: Any, name: str) -> Any:
        if not self.accepts(value):
            raise ValueError(f"{name} must be {self}, got {_shown(value)}")
        return value


@dataclass(frozen=True)
class Flag:
    """True or False (numpy booleans too; never 0 or 1)."""

    def __str__(self) -> str:
        return "True or False"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, bool) or type(value).__name__ == "bool_"

    def check(self, value: Any, name: str) -> bool:
        if not self.accepts(value):
            raise ValueError(f"{name} must be {self}, got {_shown(value)}")
        return bool(value)


@dataclass(frozen=True)
class AnyOf:
    """A value meeting any one of several constraints (e.g. an integer or ``"whole"``; a size or None).

    >>> AnyOf((Interval(int, 1), Options((None,)))).check(None, "n_bound") is None
    True
    """

    rules: tuple

    def __str__(self) -> str:
        return " or ".join(str(r) for r in self.rules)

    def accepts(self, value: Any) -> bool:
        return any(r.accepts(value) for r in self.rules)

    def check(self, value: Any, name: str) -> Any:
        for r in self.rules:
            if r.accepts(value):
                return r.check(value, name)
        raise ValueError(f"{name} must be {self}, got {_shown(value)}")


def check_epsilon(value: Any, name: str = "epsilon", *, allow_inf: bool = False, allow_zero: bool = False) -> float:
    """A privacy budget: a number > 0 (>= 0 with ``allow_zero``), finite unless ``allow_inf``.

    ``allow_inf`` is for the documented non-private mode (``math.inf``: no
    noise); ``allow_zero`` for ledger amounts, where a zero charge is legal.

    >>> check_epsilon(0, "budget", allow_zero=True)
    0.0
    >>> check_epsilon(float("nan"))
    Traceback (most recent call last):
    ...
    ValueError: epsilon must be a finite number > 0, got nan
    """
    if allow_inf:
        what = f"a number {'>=' if allow_zero else '>'} 0 (inf for no noise)"
    else:
        what = f"a finite number {'>=' if allow_zero else '>'} 0"
    ok = _is_real(value) and not math.isnan(value) and (value >= 0 if allow_zero else value > 0)
    if not ok or (math.isinf(value) and not allow_inf):
        raise ValueError(f"{name} must be {what}, got {_shown(value)}")
    return float(value)


def check_delta(value: Any, name: str = "delta") -> float:
    """A privacy delta: a number in [0, 1).

    >>> check_delta(1.0)
    Traceback (most recent call last):
    ...
    ValueError: delta must be < 1 (a delta of 1 promises nothing), got 1.0
    """
    if not _is_real(value) or math.isnan(value) or math.isinf(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0 (and < 1), got {_shown(value)}")
    if value >= 1:
        raise ValueError(f"{name} must be < 1 (a delta of 1 promises nothing), got {_shown(value)}")
    return float(value)


def check_probability(value: Any, name: str, *, closed: str = "both") -> float:
    """A probability or fraction in [0, 1]; ``closed`` drops ends ("left": [0, 1), "neither": (0, 1)).

    >>> check_probability(0.25, "cf", closed="neither")
    0.25
    """
    return Interval(float, 0, 1, closed=closed).check(value, name)


#: Longest blocking read a stream or job worker may ask for (an hour; 0 would block forever in Redis, a huge
#: value overflowed the client's timeout).
MAX_BLOCK_MS = 3_600_000


def check_integer(value: Any, name: str, *, low: int | None = 1, high: int | None = None) -> int:
    """An integer in ``[low, high]`` (None: unbounded); the default is a positive integer."""
    return Interval(int, low, high).check(value, name)


def check_number(value: Any, name: str, *, low: float | None = None, high: float | None = None) -> float:
    """A real number (not NaN, not bool) in ``[low, high]``.

    >>> check_number(20, "min_instances", low=0)
    20.0
    """
    return Interval(float, low, high).check(value, name)


def check_choice(value: Any, name: str, choices: tuple) -> Any:
    """One of ``choices``."""
    return Options(tuple(choices)).check(value, name)


def check_flag(value: Any, name: str) -> bool:
    """True or False."""
    return Flag().check(value, name)
