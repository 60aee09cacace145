"""``python -m streamdp.cli ARGS`` is ``streamdp ARGS``."""

import sys

from streamdp.cli import main

sys.exit(main())
