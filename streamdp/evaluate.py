"""Deprecated import path: use :mod:`streamdp.river.evaluate` (or ``streamdp evaluate``)."""

import warnings

from streamdp.river.evaluate import *  # noqa: F403
from streamdp.river.evaluate import __all__  # noqa: F401

warnings.warn("streamdp.evaluate is deprecated; import from streamdp.river.evaluate", DeprecationWarning, stacklevel=2)

if __name__ == "__main__":  # python -m streamdp.evaluate ARGS is streamdp evaluate ARGS
    import sys

    from streamdp.cli import main

    sys.exit(main(["evaluate", *sys.argv[1:]]))
