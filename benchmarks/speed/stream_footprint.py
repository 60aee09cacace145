"""A release policy's footprint at height 10: the published value per release, Redis's memory, the worker's peak.

bench_worker_memory.py's run (16 categorical attributes, 10 trees, height 10, epsilon 1, one worker
process) with ``BATCHES`` pushes of 10,000 records and 5 s windows; prints its numbers, among them
``published_mib`` (grow: the model blob; window: the counts), ``redis_used_peak_above_start_mib`` and
the worker's ``peak_mib`` (VmHWM). Copy the line into ``results/stream_small.log``.

    python benchmarks/speed/stream_footprint.py grow 50
    python benchmarks/speed/stream_footprint.py window 50
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.speed.bench_worker_memory import run  # noqa: E402

if __name__ == "__main__":
    warnings.simplefilter("ignore")
    run(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"), 10, sys.argv[1], int(sys.argv[2]), 5.0)
