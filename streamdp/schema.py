"""Deprecated import path: use :mod:`streamdp.records.schema`."""

import warnings

from streamdp.records.schema import *  # noqa: F403
from streamdp.records.schema import __all__  # noqa: F401

warnings.warn("streamdp.schema is deprecated; import from streamdp.records.schema", DeprecationWarning, stacklevel=2)
