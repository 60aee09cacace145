"""Deprecated import path: use :mod:`streamdp.records.datasets`."""

import warnings

from streamdp.records.datasets import *  # noqa: F403
from streamdp.records.datasets import __all__  # noqa: F401

warnings.warn(
    "streamdp.datasets is deprecated; import from streamdp.records.datasets", DeprecationWarning, stacklevel=2
)
