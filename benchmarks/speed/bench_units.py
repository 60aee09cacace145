"""Per-person state of a stream model: bytes per privacy id in Redis, and worker throughput with and without ids.

Run on a Redis server of its own (``--port``: started here on 127.0.0.1, stopped at the end), so its memory
figures are the model's alone:

1. throughput: ``--records`` records with distinct ids (K = 1) pushed to a window model with a privacy id, and
   the same records without ids to the same model without one; a worker in this process adds them all (no
   window closes: the schedule is an hour), timed from its first read to the drained stream. The ratio
   with / without is the cost of the per-id bound;
2. bytes per id: ``MEMORY USAGE`` of the ids hash after (1), divided by its length; then the hash filled directly
   to ``--ids`` fields of the same form (16-byte keyed hashes, count 1) by pipelined HSETs, and measured again
   (the server's ``used_memory`` before and after too).

    python -m benchmarks.speed.bench_units --records 1000000 --ids 10000000

Writes ``benchmarks/results/bench_units.json`` and ``.md`` (with the machine's load before and after).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import redis

from streamdp.records.datasets import load
from streamdp.service.keys import Keys
from streamdp.service.producer import Producer
from streamdp.service.registry import create_model
from streamdp.service.stream_worker import Worker

RESULTS = Path(__file__).resolve().parents[1] / "results"


def _server(port: int, workdir: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            workdir,
        ],
        stdout=subprocess.DEVNULL,
    )
    r = redis.Redis(port=port, socket_timeout=60)
    deadline = time.monotonic() + 20
    while True:
        try:
            r.ping()
            return proc
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # bounded wait for the server to listen


def _drain(url: str, name: str, key: str) -> float:
    w = Worker(url, name, block_ms=10, noise_key_file=key, batch_entries=4)
    t0 = time.perf_counter()
    while not w.reader.drained():
        w.step()
    return time.perf_counter() - t0


def _push(url: str, name: str, n: int, batch: int, ids: bool) -> None:
    ds = load("congressional-voting")
    X = ds.schema.encode(ds.X, ds.y)
    with Producer(url, name, batch_size=batch) as p:
        for s in range(0, n, batch):
            idx = np.arange(s, min(s + batch, n)) % len(ds.y)
            p.push(ds.X[idx], ds.y[idx], ids=[f"user-{i}" for i in range(s, s + len(idx))] if ids else None)
    del X


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--ids", type=int, default=10_000_000)
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--port", type=int, default=6397)
    args = ap.parse_args()
    load_before = os.getloadavg()
    work = tempfile.mkdtemp(prefix="bench-units-")
    keyfile = os.path.join(work, "noise.key")
    with open(keyfile, "wb") as f:
        f.write(os.urandom(64))
    os.chmod(keyfile, 0o600)
    proc = _server(args.port, work)
    url = f"redis://127.0.0.1:{args.port}/0"
    r = redis.Redis.from_url(url, socket_timeout=120)
    out: dict = {"records": args.records, "batch": args.batch}
    try:
        ds = load("congressional-voting")
        for label, kw in (("without_ids", {}), ("with_ids", {"privacy_id": "user", "max_records_per_id": 1})):
            name = f"bench-{label}"
            create_model(url, name, ds.schema, n_trees=10, height=4, epsilon=1.0, release="window",
                         release_every=3600.0, noise_key_file=keyfile, ledger_budget=10.0, **kw)  # fmt: skip
            t = time.perf_counter()
            _push(url, name, args.records, args.batch, bool(kw))
            out[f"push_s_{label}"] = time.perf_counter() - t
            out[f"worker_s_{label}"] = _drain(url, name, keyfile)
            out[f"records_per_s_{label}"] = args.records / out[f"worker_s_{label}"]
        ids_key = Keys("bench-with_ids").ids
        n = int(r.hlen(ids_key))
        out["ids_after_stream"] = n
        out["bytes_per_id_after_stream"] = int(r.memory_usage(ids_key, samples=0)) / max(n, 1)
        out["throughput_ratio_with_over_without"] = out["records_per_s_with_ids"] / out["records_per_s_without_ids"]
        used0 = int(r.info("memory")["used_memory"])
        rng = np.random.default_rng(0)
        t = time.perf_counter()
        for s in range(n, args.ids, 100_000):  # the same form as the workers write: 16-byte hash -> count
            m = min(100_000, args.ids - s)
            keys = rng.bytes(16 * m)
            r.hset(ids_key, mapping={keys[16 * i : 16 * i + 16]: 1 for i in range(m)})
        out["fill_s"] = time.perf_counter() - t
        n = int(r.hlen(ids_key))
        out["ids_filled"] = n
        out["bytes_per_id_filled"] = int(r.memory_usage(ids_key, samples=0)) / n
        out["used_memory_growth_per_id"] = (int(r.info("memory")["used_memory"]) - used0) / max(
            n - out["ids_after_stream"], 1
        )
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(work, ignore_errors=True)
    out["load_before"], out["load_after"] = load_before, os.getloadavg()
    out["cpus"] = os.cpu_count()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bench_units.json").write_text(json.dumps(out, indent=1))
    lines = render(out)
    (RESULTS / "bench_units.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def render(out: dict) -> list[str]:
    """The result's Markdown lines."""
    lines = [
        "# Per-person state: bytes per id and worker throughput (bench_units.py)",
        "",
        f"Own redis-server; {out['records']:,} records, batches of {out['batch']:,}; load before/after "
        f"{out['load_before'][0]:.2f}/{out['load_after'][0]:.2f} on {out['cpus']} cpus.",
        "",
        "| | without ids | with ids (K = 1, every id new) |",
        "|---|---|---|",
        f"| worker records/s | {out['records_per_s_without_ids']:,.0f} | {out['records_per_s_with_ids']:,.0f} |",
        f"| worker seconds | {out['worker_s_without_ids']:.1f} | {out['worker_s_with_ids']:.1f} |",
        f"| push seconds | {out['push_s_without_ids']:.1f} | {out['push_s_with_ids']:.1f} |",
        "",
        f"Throughput ratio with / without: {out['throughput_ratio_with_over_without']:.3f}.",
        f"Bytes per id (MEMORY USAGE of the ids hash): {out['bytes_per_id_after_stream']:.1f} at "
        f"{out['ids_after_stream']:,} ids.",
    ]
    if out["ids_filled"] > out["ids_after_stream"]:
        lines.append(
            f"Filled directly to {out['ids_filled']:,} ids in {out['fill_s']:.0f} s: {out['bytes_per_id_filled']:.1f} "
            f"bytes per id; used_memory grew {out['used_memory_growth_per_id']:.1f} bytes per id added."
        )
    return lines


if __name__ == "__main__":
    main()
