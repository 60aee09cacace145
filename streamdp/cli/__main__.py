"""``python -m streamdp.cli ARGS`` is ``streamdp ARGS``."""

import sys

from . import main

sys.exit(main())
