"""A worker behind the clock: seconds per due window, each window sealed alone against the due ones at once (issue 14).

A ``window`` model over Adult at the default height (7, 10 trees) is created on a real Redis, its schedule
start moved ``--windows`` windows into the past (a model created long before its first push, or workers
down meanwhile), and one worker's closer releases every due window: once with ``fold=1`` (each window
sealed and released alone: its noise stored, then state, ``pub:model`` and the retained version written,
four counts-sized writes) and once with the default (up to :data:`streamdp.service.windows.FOLD_MAX`
windows a seal, closed in one pass: per window its stored noise and, where the retention keeps it
(the last 20), its version; state and ``pub:model`` once). Both publish the same versions. ``--reps``
models each, fresh structures.

    python benchmarks/window_catchup.py > benchmarks/results/window_catchup.log
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streamdp.datasets import load  # noqa: E402
from streamdp.service.keys import Keys  # noqa: E402
from streamdp.service.registry import create_model, delete_model, show_model  # noqa: E402
from streamdp.service.stream_worker import Worker  # noqa: E402
from streamdp.service.windows import FOLD_MAX  # noqa: E402


def catch_up(r: redis.Redis, url: str, windows: int, fold: int) -> tuple[float, int, float]:
    """Seconds per window, versions published, and the counts' MiB for one model ``windows`` behind."""
    name = f"bench-catchup-{uuid.uuid4().hex[:8]}"
    create_model(r, name, load("adult").schema, epsilon=1.0, release="window", release_every=1.0)
    try:
        w = Worker(url, name)
        w.closer.fold = fold
        start = time.time() - windows - 0.5
        r.hset(Keys(name).state, "release_start", repr(start))
        w.closer.start = start
        t = time.perf_counter()
        released = w.closer.tick(start + windows + 0.25)
        dt = time.perf_counter() - t
        assert released == windows, released
        return dt / windows, int(show_model(r, name)["version"]), w.spec.counts.nbytes / 2**20
    finally:
        delete_model(r, name)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--redis", default="redis://127.0.0.1:6379")
    ap.add_argument("--windows", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    r = redis.Redis.from_url(a.redis)
    print(f"# python benchmarks/window_catchup.py --windows {a.windows} --reps {a.reps}; git "
          f"{subprocess.getoutput('git rev-parse --short HEAD')}; load at start: {subprocess.getoutput('uptime')}")
    print(f"# Adult, window, default height, epsilon 1; {a.windows} windows due; FOLD_MAX {FOLD_MAX}")
    print("| windows a seal | counts (MiB) | seconds per window: mean (max) over reps | versions published |", "|---|---|---|---|",
          sep="\n")
    results = {}
    for fold in (1, FOLD_MAX):
        runs = [catch_up(r, a.redis, a.windows, fold) for _ in range(a.reps)]
        per = [x[0] for x in runs]
        results[fold] = float(np.mean(per))
        print(f"| {fold} | {np.mean([x[2] for x in runs]):.0f} | {np.mean(per):.3f} ({max(per):.3f}) | "
              f"{runs[0][1]} |", flush=True)
    print(f"\n# at once / alone: {results[FOLD_MAX] / results[1]:.2f} (speed-up {results[1] / results[FOLD_MAX]:.1f}x); "
          f"load at end: {subprocess.getoutput('uptime')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
