"""RSS of one worker process on Adult at the default draw (height None) under ``release="grow"`` or ``"window"``:
the records pushed in windows of ``--window`` records, each window closed by the worker's closer at its
scheduled time (driven, not waited for). Prints JSON: the process's RSS after the worker is built (its code,
the spec, the routing tables), its peak (VmHWM) and last RSS after all closes, the published counts' or grown
blob's size, and the close times.

    PYTHONPATH=. python3 benchmarks/studies/grow_worker_rss.py --release grow --rows 300000 --window 10000
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid

import numpy as np
import redis

from streamdp.records.datasets import load
from streamdp.service.keys import Keys
from streamdp.service.producer import Producer
from streamdp.service.registry import create_model, delete_model, load_policy
from streamdp.service.stream_worker import Worker

MiB = 1 << 20


def status_kb(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    ap.add_argument("--release", default="grow")
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--window", type=int, default=10_000)
    ap.add_argument("--height", type=int, default=None)
    args = ap.parse_args()
    ds = load("adult")
    r = redis.Redis.from_url(args.url)
    name = "growrss" + uuid.uuid4().hex[:8]
    out: dict = {"release": args.release, "height": args.height, "rows": args.rows, "window": args.window}
    try:
        spec = create_model(
            args.url, name, ds.schema, height=args.height, seed=7, release=args.release, release_every=3600.0
        )
        out["drawn_counts_mib"] = spec.counts.nbytes / MiB
        out["drawn_structure_mib"] = sum(a.nbytes for a in spec.structure.arrays().values() if 0 not in a.strides) / MiB
        del spec
        w = Worker(args.url, name, block_ms=1, batch_entries=8)
        p = Producer(args.url, name)
        start = load_policy(r, name)[1]
        n_all = len(ds.y)
        # the worker built (its spec, routing tables on the first batch), no close yet
        p.push(ds.X[:10], ds.y[:10])
        while w.step(block_ms=1):
            pass
        out["rss_start_mib"] = status_kb("VmRSS") / 1024
        out["hwm_start_mib"] = status_kb("VmHWM") / 1024
        closes, rss, at, i = [], [], 0, 0
        while at < args.rows:
            idx = np.arange(at, at + args.window) % n_all
            at += args.window
            p.push(ds.X[idx], ds.y[idx])
            while w.step(block_ms=1):
                pass
            i += 1
            t0 = time.perf_counter()
            w.closer.tick(start + 3600.0 * i + 0.001)
            closes.append(time.perf_counter() - t0)
            rss.append(status_kb("VmRSS") / 1024)
        out["closes"] = len(closes)
        out["close_s_median"] = float(np.median(closes))
        out["close_s_last"] = closes[-1]
        out["rss_after_close_mib"] = rss
        out["rss_end_mib"] = status_kb("VmRSS") / 1024
        out["hwm_mib"] = status_kb("VmHWM") / 1024
        pub = r.hgetall(Keys(name).pub_model)
        out["published_mib"] = len(pub.get(b"blob") or pub.get(b"counts") or b"") / MiB
        out["version"] = int(pub[b"version"])
    finally:
        delete_model(r, name)
        for k in r.scan_iter(match=f"{Keys(name).prefix}*"):
            r.delete(k)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
