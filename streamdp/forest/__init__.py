"""The private random forest: structure, draw, routing, tally, growth, pruning and the model itself."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time each name is imported on first use (below)
    from streamdp.forest.model import PrivateForest
    from streamdp.forest.structure import ForestStructure, TooLargeError

#: Where each public name lives: a module of this package (``persistence``, ``routing``) loads without the model.
_WHERE = {"PrivateForest": "model", "ForestStructure": "structure", "TooLargeError": "structure"}

__all__ = ["PrivateForest", "ForestStructure", "TooLargeError"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'streamdp.forest' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"streamdp.forest.{_WHERE[name]}"), name)
    globals()[name] = value
    return value
