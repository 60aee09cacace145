"""Deprecated import path: use :mod:`streamdp.privacy.ledger`."""

import warnings

from streamdp.privacy.ledger import *  # noqa: F403
from streamdp.privacy.ledger import __all__  # noqa: F401

warnings.warn("streamdp.ledger is deprecated; import from streamdp.privacy.ledger", DeprecationWarning, stacklevel=2)
