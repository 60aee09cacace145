"""``python -m streamdp ARGS`` is ``streamdp ARGS`` (the ``[project.scripts]`` entry point, :func:`streamdp.cli.main`)."""

import sys

from streamdp.cli import main

sys.exit(main())
