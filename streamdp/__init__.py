"""streamdp: differentially private random forests over a Redis stream.

>>> import streamdp
>>> sorted(n for n in ("Schema", "PrivateForest") if hasattr(streamdp, n))
['PrivateForest', 'Schema']
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamdp.lazy import lazy_names

if TYPE_CHECKING:  # the names' types for checkers; at run time each is imported on first use (below)
    from streamdp.forest.model import PrivateForest
    from streamdp.forest.structure import ForestStructure, TooLargeError
    from streamdp.privacy.mechanisms import (
        NearlyExactWarning,
        NotPrivateWarning,
        SecureRandom,
        kanon_delta,
        kanon_min_epsilon,
    )
    from streamdp.records.domains import SchemaError
    from streamdp.records.schema import Schema

__version__ = "0.1.0"

#: Where each public name lives; imported on first use, so a command line tool (``streamdp push``, a worker)
#: starts without loading the forest's learning code it does not run.
_WHERE = {
    "Schema": "streamdp.records.schema",
    "SchemaError": "streamdp.records.domains",
    "PrivateForest": "streamdp.forest.model",
    "ForestStructure": "streamdp.forest.structure",
    "TooLargeError": "streamdp.forest.structure",
    "SecureRandom": "streamdp.privacy.mechanisms",
    "NotPrivateWarning": "streamdp.privacy.mechanisms",
    "NearlyExactWarning": "streamdp.privacy.mechanisms",
    "kanon_delta": "streamdp.privacy.mechanisms",
    "kanon_min_epsilon": "streamdp.privacy.mechanisms",
    "Producer": "streamdp.service.producer",  # (the service parts pull in redis)
    "Consumer": "streamdp.service.consumer",
}

__all__ = [
    "Schema",
    "SchemaError",
    "PrivateForest",
    "ForestStructure",
    "TooLargeError",
    "SecureRandom",
    "NotPrivateWarning",
    "NearlyExactWarning",
    "kanon_delta",
    "kanon_min_epsilon",
]


__getattr__ = lazy_names("streamdp", _WHERE, globals())


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
