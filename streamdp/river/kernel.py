"""The optional compiled one-record path of the river classifiers (``streamdp/river/_kernel.c``).

Built by ``pip install`` (``setup.py``, an optional extension: without a C
compiler the install still succeeds). When it is missing, or when
``STREAMDP_NO_KERNEL=1`` is set, :func:`new_kernel` returns None and the
plain-Python path runs: the predictions are the same floats either way
(tests/test_river_kernel.py compares them record by record).

The kernel mirrors, for one schema, :meth:`RecordEncoder.source`'s encoder,
:class:`~streamdp.river.forest_view.ForestView`'s routes and vote, and
:func:`streamdp.estimation.path_proba_one`; the estimation constants are read
from :mod:`streamdp.estimation` at every release (:func:`constants`), so a change of
their values needs no change here; a change of the rule's form must be mirrored in
``_kernel.c``.

>>> from streamdp.river.schemas import stagger_schema
>>> from streamdp.river.encoding import RecordEncoder
>>> enc = RecordEncoder(stagger_schema())
>>> k = new_kernel(enc._spec, enc._encode)
>>> k is None or k.encode({"size": 2, "color": 0, "shape": 1}) == [2, 0, 1]
True
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from streamdp import estimation
from streamdp.records.coding import lookup_key

try:
    import streamdp.river._kernel as _kernel  # a C extension: no stub, so typed Any
except ImportError:  # not built (no compiler at install time): the plain-Python path
    _kernel = None

__all__ = ["available", "new_kernel", "constants"]

#: The estimate the kernel's chain must mirror (``KERNEL_CHAIN`` in ``_kernel.c``): a kernel built from other
#: source (an install older than this code) is not used, and the plain-Python path runs.
CHAIN = 2
#: Integers up to this size are exact as doubles (the kernel compares numbers as doubles).
_EXACT = 2**53


def available() -> bool:
    """True when the compiled kernel is built from this source (:data:`CHAIN`) and not disabled
    (``STREAMDP_NO_KERNEL=1``)."""
    return _kernel is not None and getattr(_kernel, "CHAIN", 0) == CHAIN and not os.environ.get("STREAMDP_NO_KERNEL")


def _exact_double(b: Any) -> bool:
    t = type(b)
    return t is float or t is np.float64 or (t is int and -_EXACT <= b <= _EXACT)


def new_kernel(spec: list, fallback: Callable[[dict], list]):
    """A kernel for :class:`~streamdp.river.encoding.RecordEncoder`'s ``_spec``, or None (not built, disabled,
    or a numeric bound the kernel cannot compare exactly as a double); ``fallback`` encodes the records the
    kernel hands back (values of other types)."""
    if not available():
        return None
    for _name, _alt, lookup, lo, hi, mid in spec:
        if lookup is None and not all(_exact_double(b) for b in (lo, hi, mid)):
            return None
        if lookup is not None and type(lookup) is not dict:
            return None
    return _kernel.Kernel(list(spec), fallback, lookup_key(False), lookup_key(True))


def constants() -> tuple[float, float]:
    """:mod:`streamdp.estimation`'s ``KAPPA, SHARE_SPREAD``, read now (the kernel's chain takes them)."""
    return float(estimation.KAPPA), float(estimation.SHARE_SPREAD)
