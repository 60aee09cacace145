"""The private random forest: structure, draw, routing, tally, growth, pruning and the model itself."""

from streamdp.forest.model import PrivateForest
from streamdp.forest.structure import ForestStructure, TooLargeError

__all__ = ["PrivateForest", "ForestStructure", "TooLargeError"]
