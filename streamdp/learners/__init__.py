"""Private decision-tree learners of the literature, as scikit-learn style estimators.

Every learner reaches data only through :class:`streamdp.learners.private_data.PrivateDataset`
(the privacy boundary is the import list: no learner module imports the
schema's encoder, the tally or the subtree samplers, and a test checks it).
The learners, their parameters and blob formats are listed in
:mod:`streamdp.learners.catalogue` (``SuLQID3``, ``DiffPID3``, ``DiffPC45``,
``HanischForest``, ``DPEA``); each class is imported when first used. ``AutoPrivateClassifier`` and
``select_learner`` choose among them privately (:mod:`streamdp.learners.selection`).

Fitted models serialize with ``to_bytes()`` (msgpack, no pickle);
:func:`load_model` decodes any of them, and the stream's
:class:`~streamdp.PrivateForest`, by the blob's format tag.

>>> from streamdp.records.datasets import load
>>> ds = load("congressional-voting")
>>> from streamdp.learners import SuLQID3
>>> m = load_model(SuLQID3(ds.schema, epsilon=5.0, max_depth=2).fit(ds.X, ds.y).to_bytes())
>>> type(m).__name__
'SuLQID3'
"""

from __future__ import annotations

from typing import Any

from streamdp.blob import BlobError, format_of
from streamdp.learners.catalogue import AlgorithmError, by_format, learners

__all__ = [
    "SuLQID3",
    "DiffPID3",
    "DiffPC45",
    "HanischForest",
    "DPEA",
    "AutoPrivateClassifier",
    "select_learner",
    "load_model",
    "LEARNERS",
    "IgnoredAttributesWarning",
]

# class name -> module, from the catalogue (imported lazily: one learner's import cost is paid only when used)
LEARNERS = {a.learner: a.module for a in learners().values()}


def __getattr__(name: str) -> Any:
    if name in LEARNERS:
        return getattr(__import__(LEARNERS[name], fromlist=[name]), name)
    if name in ("AutoPrivateClassifier", "select_learner"):  # (private learner selection: not a window learner)
        from streamdp.learners import selection

        return getattr(selection, name)
    if name == "IgnoredAttributesWarning":  # (a learner given numeric attributes it does not split on)
        from streamdp.learners._base import IgnoredAttributesWarning

        return IgnoredAttributesWarning
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_model(data: bytes) -> Any:
    """Decode any streamdp model blob (forest or batch learner) by its format tag."""
    fmt = format_of(data)
    try:
        cls = by_format(fmt).cls()
    except AlgorithmError as e:
        raise BlobError(f"not a streamdp model blob ({e})") from None
    return cls.from_bytes(bytes(data))
