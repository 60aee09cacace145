"""The private random forest: structure, draw, routing, tally, growth, pruning and the model itself."""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamdp.lazy import lazy_names

if TYPE_CHECKING:  # at run time each name is imported on first use (below)
    from streamdp.forest.model import PrivateForest
    from streamdp.forest.structure import ForestStructure, TooLargeError

#: Where each public name lives: a module of this package (``persistence``, ``routing``) loads without the model.
_WHERE = {"PrivateForest": "model", "ForestStructure": "structure", "TooLargeError": "structure"}

__all__ = ["PrivateForest", "ForestStructure", "TooLargeError"]


__getattr__ = lazy_names("streamdp.forest", _WHERE, globals(), prefix="streamdp.forest.")
