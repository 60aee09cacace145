"""A worker behind the clock: seconds per due window, and what its stored noise leaves in Redis (issue 14).

A ``window`` model over Adult is created on a real Redis, its schedule start moved ``--windows`` windows
into the past (a model created long before its first push, or workers down meanwhile), and one worker's
closer releases every due window (each alone, in order; they are empty). Measured per height: seconds per
window, and Redis's ``used_memory`` growth once every window is released (against the counts' size: the
retained versions, ``keep_versions`` 20, and ``pub:model``; before round 2's ninth session also each
window's stored noise, kept 7 days, and the state's copy of the counts). ``--reps`` models each.

    python benchmarks/studies/window_catchup.py > benchmarks/results/window_catchup.log
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

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from streamdp.records.datasets import load  # noqa: E402
from streamdp.service.keys import Keys  # noqa: E402
from streamdp.service.registry import create_model, delete_model  # noqa: E402
from streamdp.service.stream_worker import Worker  # noqa: E402


def catch_up(r: redis.Redis, url: str, windows: int, height: int | None) -> tuple[float, float, float]:
    """Seconds per window, Redis memory growth (MiB) and the counts' MiB for one model ``windows`` behind."""
    name = f"bench-catchup-{uuid.uuid4().hex[:8]}"
    create_model(r, name, load("adult").schema, epsilon=1.0, height=height, release="window", release_every=1.0)
    try:
        w = Worker(url, name)
        start = time.time() - windows - 0.5
        r.hset(Keys(name).state, "release_start", repr(start))
        w.closer.start = start
        before = int(r.info("memory")["used_memory"])
        t = time.perf_counter()
        released = w.closer.tick(start + windows + 0.25)
        dt = time.perf_counter() - t
        assert released == windows, released
        grown = (int(r.info("memory")["used_memory"]) - before) / 2**20
        return dt / windows, grown, w.spec.counts.nbytes / 2**20
    finally:
        delete_model(r, name)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--redis", default="redis://127.0.0.1:6379")
    ap.add_argument("--windows", type=int, default=30)
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args()
    r = redis.Redis.from_url(a.redis)
    print(
        f"# python benchmarks/studies/window_catchup.py --windows {a.windows} --reps {a.reps}; git "
        f"{subprocess.getoutput('git rev-parse --short HEAD')}; load at start: {subprocess.getoutput('uptime')}"
    )
    print(f"# Adult, window, epsilon 1, {a.windows} windows due, keep_versions 20")
    print(
        "| height | counts (MiB) | seconds per window: mean (max) | Redis memory growth (MiB): mean | growth / counts |",
        "|---|---|---|---|---|",
        sep="\n",
    )
    for height in (5, None):
        runs = [catch_up(r, a.redis, a.windows, height) for _ in range(a.reps)]
        per, grown, counts = [x[0] for x in runs], np.mean([x[1] for x in runs]), np.mean([x[2] for x in runs])
        print(
            f"| {height or 'default (7)'} | {counts:.1f} | {np.mean(per):.3f} ({max(per):.3f}) | {grown:.0f} | "
            f"{grown / counts:.1f} |",
            flush=True,
        )
    print(f"\n# load at end: {subprocess.getoutput('uptime')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
