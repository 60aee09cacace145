"""Deprecated import path: use :mod:`streamdp.learners.private_data`."""

import warnings

from streamdp.learners.private_data import *  # noqa: F403
from streamdp.learners.private_data import __all__  # noqa: F401

warnings.warn(
    "streamdp.private_data is deprecated; import from streamdp.learners.private_data", DeprecationWarning, stacklevel=2
)
