"""Job worker: ``python workers/job_worker.py [--once | --until-drained]``.

A thin entry point; the logic is :mod:`streamdp.service.job_worker`
(same as ``streamdp job worker``).
"""

from __future__ import annotations

import sys

from streamdp.cli import main

if __name__ == "__main__":
    sys.exit(main(["job", "worker", *sys.argv[1:]]))
