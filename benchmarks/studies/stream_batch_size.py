"""Accuracy against the producers' batch size, per release policy, through the real service.

Nursery (12,960 records, shuffled with a fixed seed; the last 648 held out) is pushed by a
Producer in batches of 10, 100, 1,000 and 10,000 records into a model at epsilon 1
(10 trees, default height); two real worker processes (WorkerPool) merge it; when the
stream is drained and the last window released, the latest published model is scored on
the held-out records. release=batch noises every pushed batch (Jagannathan et al.);
release=window noises each 1-second window once; release=tree runs the windows through
continual counting with no horizon (streamdp.release.tree); release=grow uses the 1-second
windows on trees that deepen as the released counts allow (height is a ceiling). `window`
and `grow` also run at height 8 (= Nursery's attributes: a height guessed too tall).

    python benchmarks/studies/stream_batch_size.py [--repeats 3] [--redis-url URL]

Writes benchmarks/results/stream_batch_size.{md,json}, with the machine load.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import uuid
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import machine, sh, write_keeping_reading  # noqa: E402
from streamdp.records.datasets import load  # noqa: E402
from streamdp.service.consumer import Consumer  # noqa: E402
from streamdp.service.keys import Keys  # noqa: E402
from streamdp.service.pool import WorkerPool  # noqa: E402
from streamdp.service.producer import Producer  # noqa: E402
from streamdp.service.registry import create_model, delete_model  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "results"
SIZES = (10, 100, 1000, 10_000)
# (release, release_every seconds, tree levels (unused since the tree has no horizon), height or None): window at the default 1 s
# and at 5 s (fewer windows over the same stream, so fewer noise draws), tree with L=10 (T_max = 1,023
# windows per epoch), grow (its default height is structure.ceiling_height: 5 on Nursery) and grow at 4 (the
# drawn default, half the attributes, which grow used before); window and grow again at height 8.
POLICIES = (
    ("batch", 1.0, 10, None),
    ("window", 1.0, 10, None),
    ("window", 5.0, 10, None),
    ("tree", 1.0, 10, None),
    ("grow", 1.0, 10, None),
    ("grow", 1.0, 10, 4),
    ("window", 1.0, 10, 8),
    ("grow", 1.0, 10, 8),
)
HOLDOUT = 648


def _wait(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)  # polling a condition with a deadline


def run_one(url: str, ds, train: np.ndarray, test: np.ndarray, size: int, config: tuple) -> dict:
    import redis

    policy, every, levels, height = config
    name = f"bench-bs-{uuid.uuid4().hex[:8]}"
    create_model(
        url,
        name,
        ds.schema,
        n_trees=10,
        height=height,
        epsilon=1.0,
        release=policy,
        release_every=None if policy == "batch" else every,
    )
    r = redis.Redis.from_url(url)
    keys = Keys(name)
    pool = WorkerPool(name, 2, url, block_ms=100, log_level=logging.ERROR).start()
    t0 = time.monotonic()
    try:
        with Producer(url, name, batch_size=size) as prod:
            prod.push(ds.X[train], ds.y[train])

        def drained() -> bool:
            g = r.xinfo_groups(keys.records)[0]
            return g["pending"] == 0 and (g.get("lag") or 0) == 0

        _wait(drained, 600, "the workers to drain the stream")
        if policy != "batch":  # the window holding the last entries must be released too
            last = int(r.hget(keys.state, "open"))
            _wait(lambda: int(r.hget(keys.state, "releases") or 0) >= last, 120, "the last window's release")
        elapsed = time.monotonic() - t0
        forest = Consumer(url, name).latest()
        acc = float(np.mean(forest.predict(ds.X[test]) == ds.y[test]))
        label = (policy if policy == "batch" else f"{policy} {every:g} s") + (f", height {height}" if height else "")
        return {
            "policy": label,
            "batch_size": size,
            "accuracy": acc,
            "releases": forest.n_releases,
            "height_published": forest.height,
            "seconds": round(elapsed, 2),
        }
    finally:
        pool.stop()
        delete_model(url, name)


def nursery_split():
    """Nursery, its training records (shuffled with seed 13) and the last ``HOLDOUT`` held out."""
    ds = load("nursery")
    perm = np.random.default_rng(13).permutation(len(ds.y))
    return ds, perm[:-HOLDOUT], perm[-HOLDOUT:]


def arguments(doc: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    return ap.parse_args()


def main() -> None:
    args = arguments(__doc__)
    ds, train, test = nursery_split()
    info = {"machine": machine(), "uptime_start": sh("uptime"), "git": sh("git rev-parse --short HEAD")}
    rows = []
    for rep in range(args.repeats):
        for size in SIZES:
            for config in POLICIES:
                row = run_one(args.redis_url, ds, train, test, size, config)
                row["repeat"] = rep
                row["load"] = sh("uptime").split("load average:")[-1].strip()
                rows.append(row)
                print(json.dumps(row), flush=True)
    info["uptime_end"] = sh("uptime")
    majority = max(np.mean(ds.y[test] == c) for c in set(ds.y[test]))
    (RESULTS / "stream_batch_size.json").write_text(
        json.dumps({"info": info, "rows": rows, "majority": majority}, indent=1)
    )
    lines = [
        "# Accuracy against the producers' batch size, per release policy (Nursery, epsilon 1)",
        "",
        f"Real service: Producer -> Redis stream -> 2 worker processes -> Consumer; 10 trees, default height "
        "(4; `grow`'s default is its ceiling rule, 5 here) unless the policy says a height, "
        f"geometric noise, {len(train):,} training records pushed at full speed, accuracy on {HOLDOUT} "
        f"held-out records (majority class {majority:.3f}); mean (min-max) over {args.repeats} repeats. "
        "`window 1 s`/`window 5 s`: release_every 1 or 5 s; `tree 1 s`: the same 1 s windows through "
        "continual counting with no horizon; `grow 1 s`: the same windows on trees that deepen as the "
        "released counts allow, never past the height (published height: the deepest path at the end). Releases are what consumers saw; every window after the "
        "model's creation is released, so the stream's duration (push + processing, under this machine's "
        "load) sets the number of windows. Prediction: the noise-aware estimation with one prior stump "
        "(PrivateForest defaults).",
        "",
        f"Machine: {info['machine']['nproc']} x {info['machine']['cpu']}; git {info['git']}; "
        f"load at start `{info['uptime_start'].split('load average:')[-1].strip()}`, "
        f"at end `{info['uptime_end'].split('load average:')[-1].strip()}` (shared machine).",
        "",
        "| policy | batch size | accuracy | releases | published height | seconds |",
        "|---|---|---|---|---|---|",
    ]
    for policy in dict.fromkeys(r["policy"] for r in rows):
        for size in SIZES:
            sel = [r for r in rows if r["policy"] == policy and r["batch_size"] == size]
            a = [r["accuracy"] for r in sel]
            lines.append(
                f"| {policy} | {size:,} | {np.mean(a):.3f} ({min(a):.3f}-{max(a):.3f}) | "
                f"{np.mean([r['releases'] for r in sel]):.0f} | {np.mean([r['height_published'] for r in sel]):.1f} | "
                f"{np.mean([r['seconds'] for r in sel]):.1f} |"
            )
    write_keeping_reading(RESULTS / "stream_batch_size.md", [*lines, ""])
    print("\n".join(lines))


if __name__ == "__main__":
    main()
