"""A package's public names imported on first use (a module ``__getattr__``, PEP 562).

Why: ``import streamdp`` and its packages stay light, so a producer or a worker process loads only the code
it runs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(package: str, where: Mapping[str, str], namespace: dict, prefix: str = "") -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: name ``n`` is imported from module ``prefix + where[n]`` on first use
    and kept in ``namespace`` (the package's globals), so later uses do not come back here.

    Raises AttributeError (in the returned function) for a name not in ``where``.

    >>> ns: dict = {}
    >>> get = lazy_names("pkg", {"sqrt": "math"}, ns)
    >>> get("sqrt")(4.0), "sqrt" in ns
    (2.0, True)
    >>> get("nope")
    Traceback (most recent call last):
    ...
    AttributeError: module 'pkg' has no attribute 'nope'
    """

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(prefix + where[name]), name)
        namespace[name] = value
        return value

    return __getattr__
