"""Redis memory of dead letters when a producer pushes large undecodable entries.

Pushes N undecodable entries of SIZE bytes into a model's record stream on a private redis-server, lets one stream
worker dead-letter them, and reports the dead-letter stream's bytes (MEMORY USAGE) and the server's used_memory
growth. Beside it, in the same run: the plain way, a stream holding a whole copy of each payload (what a dead
letter that copies its entry costs). Writes benchmarks/results/dead_letters.json.

    PYTHONPATH=. python3 benchmarks/speed/bench_dead_letters.py [--n 300] [--size 1048576]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import msgpack
import redis

from streamdp.records.datasets import load
from streamdp.service import Keys, Worker, create_model
from streamdp.service.embedded import EmbeddedRedis


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--size", type=int, default=1 << 20)
    args = ap.parse_args()
    payloads = [msgpack.packb("x" * (args.size - 64) + f"{i:08d}") for i in range(args.n)]  # a string: not a batch
    with EmbeddedRedis.start() as emb:
        r = redis.Redis.from_url(emb.url)
        create_model(emb.url, "bench", load("congressional-voting").schema, n_trees=2, height=3, release="batch")
        k = Keys("bench")
        base = int(r.info("memory")["used_memory"])
        for p in payloads:
            r.xadd(k.records, {"d": p})
        Worker(emb.url, "bench", block_ms=50).run(until_drained=True, max_seconds=600, handle_signals=False)
        dead_bytes = int(r.memory_usage(k.dead, samples=0))
        grown = int(r.info("memory")["used_memory"]) - base
        for i, p in enumerate(payloads):  # the plain way: a dead letter holding its entry whole
            r.xadd("plain:dead", {"entry": f"{i}-1", "reason": "undecodable", "detail": p})
        plain_bytes = int(r.memory_usage("plain:dead", samples=0))
    out = {
        "entries": args.n,
        "entry_bytes": args.size,
        "dead_letters_bytes": dead_bytes,
        "used_memory_growth_bytes": grown,
        "whole_copy_dead_letters_bytes": plain_bytes,
        "ratio_whole_copy_to_bounded": round(plain_bytes / dead_bytes, 1),
        "load_average": "%.2f %.2f %.2f" % os.getloadavg(),
    }
    print(json.dumps(out, indent=2))
    path = Path(__file__).resolve().parents[1] / "results" / "dead_letters.json"
    path.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
