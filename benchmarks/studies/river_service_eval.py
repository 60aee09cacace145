"""End-to-end progressive validation of the live service through ServiceClassifier.

Creates a model on a Redis (embedded if none answers), runs one stream worker in a
thread, and streams Agrawal(function 0, seed=42) through
river.evaluate.progressive_val_score twice: synchronous (wait for each push to be
published) and asynchronous (whatever has been published so far).

    python benchmarks/studies/river_service_eval.py [n] [batch_size]
"""

from __future__ import annotations

import sys
import threading
import time
import uuid

from river import datasets, evaluate, metrics

from streamdp.river import ServiceClassifier
from streamdp.river.schemas import agrawal_schema
from streamdp.service.embedded import resolve_redis
from streamdp.service.registry import create_model, delete_model
from streamdp.service.stream_worker import Worker


def run(url: str, n: int, bs: int, sync: float) -> None:
    name = "river-eval-" + uuid.uuid4().hex[:8]
    create_model(url, name, agrawal_schema(), n_trees=10, epsilon=1.0)
    w = Worker(url, name)
    th = threading.Thread(target=w.run, kwargs={"handle_signals": False}, daemon=True)
    th.start()
    try:
        clf = ServiceClassifier(url, name, batch_size=bs, refresh_every=0.05, sync_timeout=sync)
        data = list(datasets.synth.Agrawal(seed=42).take(n))  # the generator itself runs at ~10k/s: not timed
        t = time.perf_counter()
        m = evaluate.progressive_val_score(data, clf, metrics.Accuracy())
        secs = time.perf_counter() - t
        clf.flush()
        print(
            f"sync_timeout={sync:<4} n={n} batch={bs}: {m}  {n / secs:,.0f} samples/s  "
            f"model version used at the end {clf.version}, records pushed {clf.n_pushed}",
            flush=True,
        )
    finally:
        w.stop()
        th.join(10)
        delete_model(url, name)


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    bs = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    url, emb = resolve_redis()
    try:
        for sync in (10.0, 0.0):
            run(url, n, bs, sync)
    finally:
        if emb is not None:
            emb.stop()
