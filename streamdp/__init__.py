"""streamdp: differentially private random forests over a Redis stream.

>>> import streamdp
>>> sorted(n for n in ("Schema", "PrivateForest") if hasattr(streamdp, n))
['PrivateForest', 'Schema']
"""

from streamdp.forest.model import PrivateForest
from streamdp.forest.structure import ForestStructure, TooLargeError
from streamdp.privacy.mechanisms import NotPrivateWarning, SecureRandom, kanon_delta, kanon_min_epsilon
from streamdp.records.domains import SchemaError
from streamdp.records.schema import Schema

__version__ = "0.1.0"

__all__ = [
    "Schema",
    "SchemaError",
    "PrivateForest",
    "ForestStructure",
    "TooLargeError",
    "SecureRandom",
    "NotPrivateWarning",
    "kanon_delta",
    "kanon_min_epsilon",
]


def __getattr__(name):
    # The service parts pull in redis; import them only when asked for.
    if name in ("Producer", "Consumer"):
        from streamdp import service

        return getattr(service, name)
    raise AttributeError(f"module 'streamdp' has no attribute {name!r}")
