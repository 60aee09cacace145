"""Stream tally worker: ``python workers/stream_worker.py MODEL [--processes N]``.

A thin entry point; the logic is :mod:`streamdp.service.stream_worker`
(same as ``streamdp worker MODEL``).
"""

from __future__ import annotations

import sys

from streamdp.cli import main

if __name__ == "__main__":
    sys.exit(main(["worker", *sys.argv[1:]]))
