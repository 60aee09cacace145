"""Peak memory of a `streamdp worker` process beside the counts it holds (issue 14: at most about 2x).

A model of 16 categorical attributes (3-5 values) and 10 trees at ``--height`` (10: ~150 MiB
of int64 counts, a ~400 MiB blob) is created, one worker process (``streamdp worker``) is
started, ``--batches`` batches of 10,000 records are pushed, and once the published model
holds every batch the worker's peak resident set (``VmHWM``) is read from /proc, next to
its resident set at start (interpreter, numpy, the model's structure) and the counts'
size. Both release policies: ``batch`` (one commit per batch) and ``window`` (one
release per window).

    python benchmarks/bench_worker_memory.py                 # writes benchmarks/results/worker_memory.{md,json}
    python benchmarks/bench_worker_memory.py --height 8 --no-write
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from streamdp.schema import Schema  # noqa: E402
from streamdp.service.keys import Keys  # noqa: E402
from streamdp.service.producer import Producer  # noqa: E402
from streamdp.service.registry import create_model, delete_model  # noqa: E402

ARITIES = [3, 4, 5] * 5 + [3]
RESULTS = ROOT / "benchmarks" / "results"


def cat16() -> Schema:
    return Schema.from_dict({"attributes": [{"name": f"a{j}", "type": "categorical", "values": list(range(a))}
                                            for j, a in enumerate(ARITIES)], "label": {"name": "y", "values": [0, 1]}})


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def mem(pid: int) -> dict:
    out = {}
    for ln in open(f"/proc/{pid}/status"):
        if ln.startswith(("VmRSS", "VmHWM")):
            k, v = ln.split(":")
            out[k] = int(v.split()[0]) / 1024  # MiB
    return out


def _child_of(w: subprocess.Popen) -> int:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert w.poll() is None, "the worker pool exited"
        kids = Path(f"/proc/{w.pid}/task/{w.pid}/children").read_text().split()
        for k in kids:  # the spawned worker, not multiprocessing's resource tracker
            if b"resource_tracker" not in Path(f"/proc/{k}/cmdline").read_bytes():
                return int(k)
        time.sleep(0.2)
    raise RuntimeError("no worker process started")


def run(url: str, height: int, release: str, batches: int) -> dict:
    r = redis.Redis.from_url(url, socket_timeout=120)
    model = f"bench-wmem-{uuid.uuid4().hex[:8]}"
    forest = create_model(url, model, cat16(), n_trees=10, height=height, epsilon=1.0, release=release,
                          release_every=2.0)
    keys = Keys(model)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    w = subprocess.Popen([sys.executable, "-m", "streamdp.cli", "--redis-url", url, "worker", model, "--processes", "1"],
                         env=env, stdout=subprocess.DEVNULL)
    try:
        child = _child_of(w)  # the pool's one worker
        while mem(child)["VmRSS"] < (forest.counts.nbytes + forest.structure.arrays()["feature"].nbytes) / 2**20:
            time.sleep(0.5)  # the worker has loaded the spec (structure and the published counts)
            assert w.poll() is None, "the worker pool exited"
        time.sleep(2.0)
        start = mem(child)
        rng = np.random.default_rng(0)
        with Producer(url, model) as p:
            for _ in range(batches):
                X = np.column_stack([rng.integers(a, size=10_000) for a in ARITIES])
                p.push(X, rng.integers(2, size=10_000))
        deadline = time.monotonic() + 600
        while True:
            if r.zcard(keys.merged) >= batches:
                last = r.zrange(keys.merged, -1, -1, withscores=True)
                if int(r.hget(keys.pub_model, "releases") or 0) >= int(last[0][1]):
                    break
            assert time.monotonic() < deadline, "the worker did not publish every batch in time"
            time.sleep(0.2)
        end = mem(child)
    finally:
        w.terminate()
        w.wait(60)
        delete_model(url, model)
        for k in list(r.scan_iter(match=f"{keys.prefix}:ledger*", count=1000)):
            r.delete(k)
    counts_mib = forest.counts.nbytes / 2**20
    out = {"height": height, "release": release, "batches": batches, "counts_mib": counts_mib,
           "rss_start_mib": start.get("VmRSS"), "peak_mib": end.get("VmHWM"),
           "peak_over_counts": end.get("VmHWM", 0) / counts_mib,
           "peak_above_start_over_counts": (end.get("VmHWM", 0) - start.get("VmRSS", 0)) / counts_mib,
           "uptime": uptime()}
    print(out, flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    ap.add_argument("--height", type=int, default=10)
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    res = {"uptime_before": uptime(), "runs": [run(args.redis_url, args.height, rel, args.batches)
                                               for rel in ("batch", "window")]}
    res["uptime_after"] = uptime()
    if not args.no_write:
        write(res, args.batches)


def write(res: dict, batches: int) -> None:
    (RESULTS / "worker_memory.json").write_text(json.dumps(res, indent=1))
    lines = ["# Worker peak memory beside its counts (benchmarks/bench_worker_memory.py)", "",
             "One `streamdp worker --processes 1` (the measured process is the pool's worker child); 16 categorical attributes (3-5 values), 10 trees, epsilon 1; "
             f"{batches} batches of 10,000 records; peak = VmHWM once the model holds every batch; "
             "start = VmRSS before the first batch (interpreter, numpy, the structure).", "",
             f"Load: before `{res['uptime_before']}`; after `{res['uptime_after']}`.", "",
             "| height | release | counts | RSS at start | peak | peak / counts | (peak - start) / counts |",
             "|---|---|---|---|---|---|---|"]
    for o in res["runs"]:
        lines.append(f"| {o['height']} | {o['release']} | {o['counts_mib']:.0f} MiB | {o['rss_start_mib']:.0f} MiB | "
                     f"{o['peak_mib']:.0f} MiB | {o['peak_over_counts']:.1f} | {o['peak_above_start_over_counts']:.1f} |")
    lines += ["", "Redis holds every published version's blob (pub:v:<N>, 20 kept by default): at height 10 the window "
              "run's Redis grew by several GB (each empty window is released too); run it on a server with room.", ""]
    (RESULTS / "worker_memory.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
