"""What a default model costs in Redis and to fetch: Adult's schema, ``create_model`` at its defaults, real Redis.

Measured, in one run:

* the Redis memory of every key of the model right after ``create_model`` (``MEMORY USAGE`` per key: the
  server is shared, so ``INFO`` would count other clients' keys), beside the counts' bytes;
* a cold ``Consumer().latest()`` (a new consumer: spec, structure and counts fetched and decoded), beside
  the floor: reading the published counts' bytes alone (``HGET``) on the same connection type;
* the same latest() again with a consumer that holds the structure (the steady state: counts only).

    python benchmarks/model_footprint.py [--redis-url URL] [--repeats 3]

Writes benchmarks/results/model_footprint.{md,json}, with the machine load. The model (and its ledger)
is deleted at the end, even on failure.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import machine, sh, write_results  # noqa: E402
from streamdp.records.datasets import load_schema  # noqa: E402
from streamdp.service.connection import connect  # noqa: E402
from streamdp.service.consumer import Consumer  # noqa: E402
from streamdp.service.keys import Keys  # noqa: E402
from streamdp.service.registry import create_model, delete_model  # noqa: E402

MiB = 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    r = connect(args.redis_url)
    name = "footprint" + uuid.uuid4().hex[:8]
    keys = Keys(name)
    uptime_start = sh("uptime")
    try:
        t0 = time.perf_counter()
        forest = create_model(r, name, load_schema("adult"))
        create_s = time.perf_counter() - t0
        counts_bytes = forest.counts.nbytes
        per_key = []
        for k in sorted(r.scan_iter(match=keys.pattern, count=1000)):
            kind = r.type(k)
            kind = kind.decode() if isinstance(kind, bytes) else kind
            per_key.append(
                {"key": k.decode() if isinstance(k, bytes) else k, "type": kind, "bytes": r.memory_usage(k, samples=0)}
            )
        total = sum(k["bytes"] or 0 for k in per_key)
        cold, floor, steady = [], [], []
        for _ in range(args.repeats):
            c = Consumer(args.redis_url, name)
            t0 = time.perf_counter()
            c.latest()
            cold.append(time.perf_counter() - t0)
            c._cached = None  # held structure, counts fetched again (what a new version costs)
            t0 = time.perf_counter()
            c.latest()
            steady.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            data = r.hget(keys.pub_model, "counts")
            floor.append(time.perf_counter() - t0)
        counts_wire = len(data or b"")
    finally:
        delete_model(r, name)
        ledger = list(r.scan_iter(match=keys.pattern, count=1000))  # the ledger stays after delete_model
        if ledger:
            r.delete(*ledger)
    uptime_end = sh("uptime")
    info = {
        "machine": machine(),
        "uptime_start": uptime_start,
        "uptime_end": uptime_end,
        "model": {
            "schema": "adult",
            "n_trees": forest.structure.n_trees,
            "height": forest.structure.height,
            "counts_dtype": str(forest.counts.dtype),
            "counts_bytes": counts_bytes,
            "create_s": create_s,
        },
    }
    row = {
        "redis_bytes_after_create": total,
        "ratio_to_counts": total / counts_bytes,
        "per_key": per_key,
        "cold_latest_s": cold,
        "steady_latest_s": steady,
        "floor_hget_counts_s": floor,
        "counts_wire_bytes": counts_wire,
        "cold_over_floor": statistics.median(cold) / statistics.median(floor),
        "steady_over_floor": statistics.median(steady) / statistics.median(floor),
    }
    m = info["model"]
    lines = [
        "# A default model's footprint in Redis and its fetch (Adult's schema)",
        "",
        f"`python benchmarks/model_footprint.py`: `create_model` at the defaults ({m['n_trees']} trees with the "
        f"prior stump, height {m['height']}), counts {m['counts_dtype']}, {counts_bytes / MiB:.1f} MiB. "
        f"Create took {create_s:.2f} s.",
        "",
        "| key | type | MiB |",
        "|---|---|---|",
        *[f"| `{k['key']}` | {k['type']} | {(k['bytes'] or 0) / MiB:.1f} |" for k in per_key],
        f"| **all keys** | | **{total / MiB:.1f}** ({row['ratio_to_counts']:.2f}x the counts) |",
        "",
        "| fetch | median s | runs |",
        "|---|---|---|",
        f"| cold `Consumer().latest()` | {statistics.median(cold):.2f} | {', '.join(f'{x:.2f}' for x in cold)} |",
        f"| latest() holding the structure | {statistics.median(steady):.2f} | "
        f"{', '.join(f'{x:.2f}' for x in steady)} |",
        f"| floor: `HGET` of the counts ({counts_wire / MiB:.1f} MiB) | {statistics.median(floor):.2f} | "
        f"{', '.join(f'{x:.2f}' for x in floor)} |",
        "",
        f"Cold fetch / floor: {row['cold_over_floor']:.1f}x; held structure / floor: {row['steady_over_floor']:.1f}x.",
        "",
        f"Machine: {info['machine']['nproc']} x {info['machine']['cpu']}. Load: `{uptime_start}` -> `{uptime_end}`.",
        "",
    ]
    print("\n".join(lines))
    write_results("model_footprint", info, [row], lines)


if __name__ == "__main__":
    main()
