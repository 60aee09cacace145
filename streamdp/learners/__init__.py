"""Private decision-tree learners of the literature, as scikit-learn style estimators.

Every learner reaches data only through :class:`streamdp.private_data.PrivateDataset`
(the privacy boundary is the import list: no learner module imports the
schema's encoder, the tally or the subtree samplers, and a test checks it).

=================  ====================================================
``SuLQID3``        Friedman & Schuster Alg. 1 (Jagannathan's "private ID3")
``DiffPID3``       Friedman & Schuster Alg. 2, scorers infogain/gini/max/gainratio
``DiffPC45``       Friedman & Schuster with numeric splits and noisy-count pruning
``HanischForest``  Hanisch's private random forest (majority vote)
``DPEA``           Bai et al.'s deep embedding with MCMC
=================  ====================================================

Fitted models serialize with ``to_bytes()`` (msgpack, no pickle);
:func:`load_model` decodes any of them, and the stream's
:class:`~streamdp.PrivateForest`, by the blob's format tag.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..blob import BlobError, format_of

__all__ = ["SuLQID3", "DiffPID3", "DiffPC45", "HanischForest", "DPEA", "load_model", "LEARNERS"]

# class name -> module (imported lazily so one learner's import cost is paid only when used)
LEARNERS = {
    "SuLQID3": "id3",
    "DiffPID3": "id3",
    "DiffPC45": "c45",
    "HanischForest": "hanisch",
    "DPEA": "dpea",
}

# blob format tag -> (module, class)
_FORMATS = {
    "streamdp.forest": ("streamdp.forest", "PrivateForest"),
    "streamdp.sulq_id3": ("streamdp.learners.id3", "SuLQID3"),
    "streamdp.diffp_id3": ("streamdp.learners.id3", "DiffPID3"),
    "streamdp.diffp_c45": ("streamdp.learners.c45", "DiffPC45"),
    "streamdp.hanisch_forest": ("streamdp.learners.hanisch", "HanischForest"),
    "streamdp.dpea": ("streamdp.learners.dpea", "DPEA"),
}


def __getattr__(name: str) -> Any:
    if name in LEARNERS:
        return getattr(importlib.import_module(f".{LEARNERS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_model(data: bytes) -> Any:
    """Decode any streamdp model blob (forest or batch learner) by its format tag."""
    fmt = format_of(data)
    if fmt not in _FORMATS:
        raise BlobError(f"not a streamdp model blob (format: {fmt!r}; known: {sorted(_FORMATS)})")
    module, cls = _FORMATS[fmt]
    return getattr(importlib.import_module(module), cls).from_bytes(bytes(data))
