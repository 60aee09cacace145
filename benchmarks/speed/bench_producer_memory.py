"""A producer's memory and start-up time beside a large model (issue 14): it needs the schema and the
batch-id salt, not the structure.

A height-``--height`` model of bench_worker_memory's schema (16 categorical attributes, 10 trees) is
created on a real Redis; then, each in a fresh process, ``Producer(url, name)`` is built and pushes 10,000
records, (a) as today (schema and salt from the registry summary) and (b) as before (the summary's two
fields removed, so the producer reads and decodes the spec). Reported: VmHWM (peak RSS) and the
construction time. Prints a table; ``--log`` appends it to benchmarks/results/producer_memory.log.

    python benchmarks/speed/bench_producer_memory.py [--height 10] [--redis-url URL] [--log]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.speed.bench_worker_memory import cat16, uptime  # noqa: E402

CHILD = """
import os, sys, time, numpy as np
sys.path.insert(0, {root!r})
from streamdp.service.producer import Producer
t = time.perf_counter()
p = Producer({url!r}, {name!r})
build = time.perf_counter() - t
rng = np.random.default_rng(0)
p.push(np.column_stack([rng.integers(a, size=10000) for a in {arities!r}]), rng.integers(2, size=10000))
hwm = [int(l.split()[1]) / 1024 for l in open("/proc/self/status") if l.startswith("VmHWM")][0]
print(build, hwm)
"""


def run_child(url: str, name: str) -> tuple[float, float]:
    from benchmarks.speed.bench_worker_memory import ARITIES

    out = subprocess.run(
        [sys.executable, "-c", CHILD.format(root=str(ROOT), url=url, name=name, arities=ARITIES)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return float(out[0]), float(out[1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--height", type=int, default=10)
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--log", action="store_true")
    a = ap.parse_args()
    import redis

    from streamdp.service.keys import Keys
    from streamdp.service.registry import PRODUCER_FIELDS, REGISTRY, create_model, delete_model

    r = redis.Redis.from_url(a.redis_url)
    name = f"bench-pmem-{uuid.uuid4().hex[:8]}"
    before = uptime()
    try:
        spec = create_model(
            a.redis_url,
            name,
            cat16(),
            n_trees=10,
            height=a.height,
            epsilon=1.0,
            seed=1,
            release="window",
            release_every=3600.0,
        )
        spec_mib = r.strlen(Keys(name).spec) / 2**20
        counts_mib = spec.counts.nbytes / 2**20
        del spec
        now = run_child(a.redis_url, name)
        info = json.loads(r.hget(REGISTRY, name))
        r.hset(REGISTRY, name, json.dumps({k: v for k, v in info.items() if k not in PRODUCER_FIELDS}))
        old = run_child(a.redis_url, name)
    finally:
        delete_model(r, name)
        for k in r.scan_iter(match=f"{Keys(name).prefix}:ledger*"):
            r.delete(k)
    lines = [
        f"# Producer memory beside a height-{a.height} model (benchmarks/speed/bench_producer_memory.py)",
        f"spec {spec_mib:.0f} MiB, counts {counts_mib:.0f} MiB; load before: {before}; after: {uptime()}",
        "| producer | construction | peak RSS (VmHWM) after 10,000 records pushed |",
        "|---|---|---|",
        f"| schema and salt from the registry summary (now) | {now[0] * 1000:.0f} ms | {now[1]:.0f} MiB |",
        f"| schema decoded from the spec (before) | {old[0] * 1000:.0f} ms | {old[1]:.0f} MiB |",
        "",
    ]
    print("\n".join(lines))
    if a.log:
        with open(ROOT / "benchmarks" / "results" / "producer_memory.log", "a") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
