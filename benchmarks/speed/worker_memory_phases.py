"""A window worker's memory phase by phase, in process (tracemalloc), beside bench_worker_memory.py's RSS.

bench_worker_memory.py's schema (16 categorical attributes, 10 trees) at height ``argv[1]`` (default 10),
``release="window"``; three entries of 10,000 records added one per step, the window closed, one more added,
the next window closed. Prints, per phase, the traced peak above what was allocated before it and what it
kept, in units of the counts. Appends nothing: copy its output into a log.

    python benchmarks/speed/worker_memory_phases.py 10
"""

import sys
import tracemalloc
import uuid
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
warnings.simplefilter("ignore")
import numpy as np
import redis

from benchmarks.speed.bench_worker_memory import ARITIES, cat16
from streamdp.service.keys import Keys
from streamdp.service.producer import Producer
from streamdp.service.registry import create_model, delete_model, load_policy
from streamdp.service.stream_worker import Worker

url = "redis://127.0.0.1:6379/0"
name = "m10-" + uuid.uuid4().hex[:6]
r = redis.Redis.from_url(url)
try:
    spec = create_model(
        url,
        name,
        cat16(),
        n_trees=10,
        height=int(sys.argv[1]) if len(sys.argv) > 1 else 10,
        epsilon=1.0,
        seed=1,
        release="window",
        release_every=3600.0,
    )
    counts = spec.counts.nbytes
    del spec
    w = Worker(url, name, block_ms=1, batch_entries=1)
    rng = np.random.default_rng(0)
    p = Producer(url, name)

    def push(k):
        for _ in range(k):
            p.push(np.column_stack([rng.integers(a, size=10000) for a in ARITIES]), rng.integers(2, size=10000))

    def peak_of(fn, what):
        tracemalloc.start()
        b, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        fn()
        cur, pk = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(what, "peak above", round((pk - b) / counts, 2), "kept", round((cur - b) / counts, 2), flush=True)

    push(3)
    peak_of(lambda: w.step(block_ms=1), "add 1st entry")
    peak_of(lambda: w.step(block_ms=1), "add 2nd entry")
    peak_of(lambda: w.closer.tick(load_policy(r, name)[1] + 3600.0 + 0.001), "close 1")
    push(1)
    peak_of(lambda: w.step(block_ms=1), "add after close")
    peak_of(lambda: w.closer.tick(load_policy(r, name)[1] + 7200.0 + 0.001), "close 2")
finally:
    delete_model(r, name)
    for k in r.scan_iter(match=f"{Keys(name).prefix}:ledger*"):
        r.delete(k)
