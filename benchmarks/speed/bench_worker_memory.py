"""Peak memory of a `streamdp worker` process beside the counts it holds (issue 14: at most about 2x).

A model of 16 categorical attributes (3-5 values) and 10 trees at ``--height`` (10: ~150 MiB
of int64 counts, a ~400 MiB blob) is created, one worker process (``streamdp worker``) is
started, ``--batches`` batches of 10,000 records are pushed, and once the published model
holds every batch the worker's peak resident set (``VmHWM``) is read from /proc, next to
its resident set at start (interpreter, numpy, the model's structure) and the counts'
size. Both release policies: ``batch`` (one commit per batch) and ``window`` (one
release per window, ``--release-every`` seconds: a height-10 release takes seconds, and a
worker that cannot keep up with its windows releases back to back while Redis keeps each
window's stored noise for a week).

    python benchmarks/speed/bench_worker_memory.py                 # writes benchmarks/results/worker_memory.{md,json}
    python benchmarks/speed/bench_worker_memory.py --height 8 --no-write
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

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from streamdp.records.schema import Schema  # noqa: E402
from streamdp.service.keys import Keys  # noqa: E402
from streamdp.service.producer import Producer  # noqa: E402
from streamdp.service.registry import create_model, delete_model  # noqa: E402

ARITIES = [3, 4, 5] * 5 + [3]
RESULTS = ROOT / "benchmarks" / "results"


def cat16() -> Schema:
    return Schema.from_dict(
        {
            "attributes": [
                {"name": f"a{j}", "type": "categorical", "values": list(range(a))} for j, a in enumerate(ARITIES)
            ],
            "label": {"name": "y", "values": [0, 1]},
        }
    )


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


def run(url: str, height: int, release: str, batches: int, release_every: float = 20.0) -> dict:
    r = redis.Redis.from_url(url, socket_timeout=120)
    model = f"bench-wmem-{uuid.uuid4().hex[:8]}"
    forest = create_model(
        url,
        model,
        cat16(),
        n_trees=10,
        height=height,
        epsilon=1.0,
        release=release,
        release_every=None if release == "batch" else release_every,
    )
    keys = Keys(model)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    w = subprocess.Popen(
        [sys.executable, "-m", "streamdp.cli", "--redis-url", url, "worker", model, "--processes", "1"],
        env=env,
        stdout=subprocess.DEVNULL,
    )
    try:
        child = _child_of(w)  # the pool's one worker
        while mem(child)["VmRSS"] < (forest.counts.nbytes + forest.structure.arrays()["feature"].nbytes) / 2**20:
            time.sleep(0.5)  # the worker has loaded the spec (structure and the published counts)
            assert w.poll() is None, "the worker pool exited"
        time.sleep(2.0)
        start = mem(child)  # VmHWM here: the peak of loading the model
        rng = np.random.default_rng(0)
        with Producer(url, model) as p:
            for _ in range(batches):
                X = np.column_stack([rng.integers(a, size=10_000) for a in ARITIES])
                p.push(X, rng.integers(2, size=10_000))
        deadline = time.monotonic() + 600
        used0, used_peak = int(r.info("memory")["used_memory"]), 0
        while True:
            used_peak = max(used_peak, int(r.info("memory")["used_memory"]))
            if r.zcard(keys.merged) >= batches:
                last = r.zrange(keys.merged, -1, -1, withscores=True)
                if int(r.hget(keys.pub_model, "releases") or 0) >= int(last[0][1]):
                    break
            assert time.monotonic() < deadline, "the worker did not publish every batch in time"
            time.sleep(0.2)
        end = mem(child)
        published = max(r.hstrlen(keys.pub_model, "blob"), r.hstrlen(keys.pub_model, "counts"))  # grow: blob
        time.sleep(5.0)
        settled = mem(child)  # the release just seen may still be in the worker's hands at `end`
    finally:
        w.terminate()
        w.wait(60)
        delete_model(url, model)
        for k in list(r.scan_iter(match=f"{keys.prefix}:ledger*", count=1000)):
            r.delete(k)
    counts_mib = forest.counts.nbytes / 2**20
    blob_mib = len(forest.to_bytes()) / 2**20
    out = {
        "height": height,
        "release": release,
        "batches": batches,
        "release_every": release_every,
        "counts_mib": counts_mib,
        "blob_mib": blob_mib,
        "rss_start_mib": start.get("VmRSS"),
        "load_peak_mib": start.get("VmHWM"),
        "peak_mib": end.get("VmHWM"),
        "rss_end_mib": end.get("VmRSS"),
        "rss_settled_mib": settled.get("VmRSS"),
        "peak_over_counts": end.get("VmHWM", 0) / counts_mib,
        "peak_above_start_over_counts": (end.get("VmHWM", 0) - start.get("VmRSS", 0)) / counts_mib,
        "published_mib": published / 2**20,
        "redis_used_peak_above_start_mib": (used_peak - used0) / 2**20,
        "uptime": uptime(),
    }
    print(out, flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    ap.add_argument("--height", type=int, default=10)
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--release-every", type=float, default=20.0, help="window length of the window run (seconds)")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    res = {
        "uptime_before": uptime(),
        "runs": [
            run(args.redis_url, args.height, rel, args.batches, args.release_every) for rel in ("batch", "window")
        ],
    }
    res["uptime_after"] = uptime()
    if not args.no_write:
        write(res, args.batches)


def write(res: dict, batches: int) -> None:
    (RESULTS / "worker_memory.json").write_text(json.dumps(res, indent=1))
    lines = [
        "# Worker peak memory beside its counts (benchmarks/speed/bench_worker_memory.py)",
        "",
        "One `streamdp worker --processes 1` (the measured process is the pool's worker child); 16 categorical "
        "attributes (3-5 values), 10 trees (+1 prior stump), epsilon 1; "
        f"{batches} batches of 10,000 records; start = VmRSS once the model is loaded, before the first batch "
        "(interpreter, numpy, the structure); load peak = VmHWM then; peak = VmHWM once the model holds every "
        "batch (the whole life, load included); end = VmRSS then, settled = VmRSS 5 s later. The window run's windows are "
        f"{res['runs'][-1].get('release_every', 2.0):g} s.",
        "",
        f"Load: before `{res['uptime_before']}`; after `{res['uptime_after']}`.",
        "",
        "| height | release | counts | blob | RSS at start | load peak | peak | RSS at end | settled | peak / counts "
        "| (peak - start) / counts |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for o in res["runs"]:
        lines.append(
            f"| {o['height']} | {o['release']} | {o['counts_mib']:.0f} MiB | {o['blob_mib']:.0f} MiB | "
            f"{o['rss_start_mib']:.0f} MiB | {o['load_peak_mib']:.0f} MiB | {o['peak_mib']:.0f} MiB | "
            f"{o['rss_end_mib']:.0f} MiB | {o.get('rss_settled_mib', 0):.0f} MiB | {o['peak_over_counts']:.1f} | "
            f"{o['peak_above_start_over_counts']:.1f} |"
        )
    lines += ["", "## Reading", "", READING, ""]
    (RESULTS / "worker_memory.md").write_text("\n".join(lines) + "\n")


#: The explanation under the table (what a worker holds, and what a release adds); the numbers are the table's.
READING = """\
What a worker holds between releases (RSS at start, and "settled" after the releases): the
interpreter and numpy, and the model's structure (its node arrays, kept as views of the decoded
spec; and the routing tables, where they fit in 64 MiB). It holds no counts between releases.

What a release adds on top: a window close reads its window's adds a group of at most 1 MiB at a
time into the exact tally (`accumulator.read_acc_counts`), noises that tally in place block by block
over each tree's real cells (`RealRows`: no counts-sized mask), stores it as its own bytes, and adds
the published counts into it a part at a time from the retained version (`model_store.read_published_counts`):
one counts-sized array, which it then publishes as views. A batch commit sums its batches' noised
deltas (the first delta is the sum, each next one drawn and added in turn: the sum and one delta),
then adds the published counts into the sum the same way. So (peak - start) / counts is about 1 for
a window model and about 2 for a batch model, plus what tracemalloc does not see (redis-py's buffers,
allocator slack). Earlier designs and their figures are in this file's history (git log -p).
"""


if __name__ == "__main__":
    main()
