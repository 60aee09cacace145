"""Per-person state of a stream model: worker throughput with and without ids, and bytes per id in Redis.

Run on a Redis server of its own (``--port``: started here on 127.0.0.1, stopped at the end), so its memory
figures are the model's alone:

1. throughput: ``--records`` records pushed three times, to a window model without a privacy id (the plain
   stream), to one with ids all distinct (K = 1: every record a new person, the worst case), and to one with
   ``--distinct`` ids repeating (K = ``--k``: people come back; every record kept when K covers them); a worker
   in this process adds each stream (no window closes: the schedule is an hour), timed from its first read to
   the drained stream. The ratios with / without are the cost of the per-id bound;
2. bytes per id: ``MEMORY USAGE`` of the ids hash after (1), divided by its length; then the hash filled directly
   to ``--ids`` fields of the same form (16-byte keyed hashes, count 1) by pipelined HSETs, and measured again;
3. layouts (``--layout-ids`` ids each, on an emptied server): the server's ``used_memory`` growth per id for
   one hash of 16-byte fields (the stored form), one of 8-byte fields, and the ids spread over buckets of about
   64 fields (small hashes Redis keeps as listpacks) with 16- and 8-byte fields;
4. ``--cluster``: (1)'s plain and all-new streams on a three-master local cluster
   (:class:`~streamdp.service.local_cluster.LocalCluster`), with the memory of the slot's node.

    python -m benchmarks.speed.bench_units --records 1000000 --ids 10000000 --cluster

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
from typing import Any

import numpy as np
import redis

from streamdp.records.datasets import load
from streamdp.service.connection import connect
from streamdp.service.keys import Keys
from streamdp.service.local_cluster import LocalCluster
from streamdp.service.producer import Producer
from streamdp.service.registry import create_model
from streamdp.service.stream_worker import Worker

RESULTS = Path(__file__).resolve().parents[1] / "results"
DS = load("congressional-voting")


def _server(port: int, workdir: str) -> subprocess.Popen:
    cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    proc = subprocess.Popen([*cmd, "--dir", workdir], stdout=subprocess.DEVNULL)
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


def _redis_cpu(nodes: list[redis.Redis]) -> float:
    """CPU seconds the servers used so far (user + system)."""
    return sum(float(n.info("cpu")["used_cpu_user"]) + float(n.info("cpu")["used_cpu_sys"]) for n in nodes)


def _drain(url: str, name: str, key: str, nodes: list[redis.Redis]) -> tuple[float, float, float]:
    """Wall seconds, worker CPU seconds and Redis CPU seconds for a worker to add the whole stream."""
    w = Worker(url, name, block_ms=10, noise_key_file=key, batch_entries=4)
    t0, c0, r0 = time.perf_counter(), time.process_time(), _redis_cpu(nodes)
    while not w.reader.drained():
        w.step()
    return time.perf_counter() - t0, time.process_time() - c0, _redis_cpu(nodes) - r0


def _push(url: str, name: str, n: int, batch: int, distinct: int | None) -> None:
    """``n`` records; ids ``user-<i mod distinct>`` (all distinct when ``distinct`` is 0), none when None."""
    with Producer(url, name, batch_size=batch) as p:
        for s in range(0, n, batch):
            idx = np.arange(s, min(s + batch, n))
            ids = None if distinct is None else [f"user-{i % distinct if distinct else i}" for i in idx]
            p.push(DS.X[idx % len(DS.y)], DS.y[idx % len(DS.y)], ids=ids)


SCENARIOS = {  # label: (ids per record: None none, 0 all distinct, else that many repeating; K)
    "without_ids": (None, None),
    "all_new": (0, 1),
    "repeating": ("distinct", "k"),
}


def streams(url: str, keyfile: str, args: Any, labels: tuple[str, ...], prefix: str, nodes: list) -> dict:
    """Push and drain each scenario's stream; records/s, CPU microseconds per record (the worker's and Redis'),
    and their ratios to the plain stream (CPU: a figure the machine's load moves less than wall time)."""
    out: dict = {}
    for label in labels:
        distinct, k = SCENARIOS[label]
        distinct = getattr(args, distinct) if isinstance(distinct, str) else distinct
        k = getattr(args, k) if isinstance(k, str) else k
        kw = {} if distinct is None else {"privacy_id": "user", "max_records_per_id": k}
        name = f"{prefix}-{label}"
        create_model(url, name, DS.schema, n_trees=10, height=4, epsilon=1.0, release="window",
                     release_every=3600.0, noise_key_file=keyfile, ledger_budget=10.0, **kw)  # fmt: skip
        t = time.perf_counter()
        _push(url, name, args.records, args.batch, distinct)
        out[f"push_s_{label}"] = time.perf_counter() - t
        wall, cpu, rcpu = _drain(url, name, keyfile, nodes)
        out[f"worker_s_{label}"] = wall
        out[f"records_per_s_{label}"] = args.records / wall
        out[f"worker_cpu_us_per_record_{label}"] = cpu / args.records * 1e6
        out[f"redis_cpu_us_per_record_{label}"] = rcpu / args.records * 1e6
    for label in labels[1:]:
        out[f"ratio_{label}"] = out[f"records_per_s_{label}"] / out["records_per_s_without_ids"]
        out[f"cpu_ratio_{label}"] = (
            out[f"worker_cpu_us_per_record_{label}"] + out[f"redis_cpu_us_per_record_{label}"]
        ) / (out["worker_cpu_us_per_record_without_ids"] + out["redis_cpu_us_per_record_without_ids"])
    return out


def layouts(r: redis.Redis, n: int) -> dict:
    """``used_memory`` growth per id of four layouts of ``n`` ids (each on an emptied server)."""
    rng = np.random.default_rng(0)
    out = {}
    for width in (16, 8):
        for buckets in (1, max(1, n // 64)):
            r.flushall()
            used0 = int(r.info("memory")["used_memory"])
            for s in range(0, n, 50_000):
                raw = rng.bytes(width * min(50_000, n - s))
                fields = [raw[i : i + width] for i in range(0, len(raw), width)]
                p = r.pipeline(transaction=False)
                if buckets == 1:
                    p.hset("ids", mapping=dict.fromkeys(fields, 1))
                else:
                    for f in fields:  # the bucket from the field's first bytes (a keyed hash: uniform)
                        p.hset(f"ids:{int.from_bytes(f[:4], 'little') % buckets}", f, 1)
                p.execute()
            name = f"{'one_hash' if buckets == 1 else 'buckets_of_64'}_{width}B"
            out[name] = (int(r.info("memory")["used_memory"]) - used0) / n
    r.flushall()
    return out


def on_cluster(keyfile: str, args: Any) -> dict:
    """The plain and all-new streams on a local three-master cluster; the ids' slot node's memory."""
    with LocalCluster.start(3) as c:
        rc = connect(c.url)
        nodes = {n.port: redis.Redis(port=n.port, socket_timeout=60) for n in rc.get_primaries()}
        before = {p: int(x.info("memory")["used_memory"]) for p, x in nodes.items()}
        out = streams(c.url, keyfile, args, ("without_ids", "all_new"), "cl", list(nodes.values()))
        ids_key = Keys("cl-all_new").ids
        node = rc.get_node_from_key(ids_key)
        n = int(rc.hlen(ids_key))
        out["ids"] = n
        out["bytes_per_id"] = int(nodes[node.port].memory_usage(ids_key, samples=0)) / max(n, 1)
        out["slot_node_used_memory_growth_mb"] = (
            int(nodes[node.port].info("memory")["used_memory"]) - before[node.port]
        ) / 2**20
        out["other_nodes_used_memory_growth_mb"] = [
            (int(x.info("memory")["used_memory"]) - before[p]) / 2**20 for p, x in nodes.items() if p != node.port
        ]
        rc.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--distinct", type=int, default=10_000)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--ids", type=int, default=10_000_000)
    ap.add_argument("--layout-ids", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--port", type=int, default=6397)
    ap.add_argument("--cluster", action="store_true")
    ap.add_argument("--out", default=str(RESULTS / "bench_units"))
    ap.add_argument("--compare", nargs="+", metavar="LABEL=JSON", help="only tabulate earlier results side by side")
    args = ap.parse_args()
    if args.compare:
        runs = {a.split("=", 1)[0]: json.loads(Path(a.split("=", 1)[1]).read_text()) for a in args.compare}
        Path(args.out + ".json").write_text(json.dumps(runs, indent=1))
        Path(args.out + ".md").write_text("\n".join(compare(runs)) + "\n")
        return
    load_before = os.getloadavg()
    work = tempfile.mkdtemp(prefix="bench-units-")
    keyfile = os.path.join(work, "noise.key")
    with open(keyfile, "wb") as f:
        f.write(os.urandom(64))
    os.chmod(keyfile, 0o600)
    proc = _server(args.port, work)
    url = f"redis://127.0.0.1:{args.port}/0"
    r = redis.Redis.from_url(url, socket_timeout=120)
    out: dict = {"records": args.records, "batch": args.batch, "distinct": args.distinct, "k": args.k}
    try:
        out.update(streams(url, keyfile, args, tuple(SCENARIOS), "bench", [r]))
        ids_key = Keys("bench-all_new").ids
        n = int(r.hlen(ids_key))
        out["ids_after_stream"] = n
        out["bytes_per_id_after_stream"] = int(r.memory_usage(ids_key, samples=0)) / max(n, 1)
        rng = np.random.default_rng(0)
        t = time.perf_counter()
        for s in range(n, args.ids, 100_000):  # the same form as the workers write: 16-byte hash -> count
            m = min(100_000, args.ids - s)
            keys = rng.bytes(16 * m)
            r.hset(ids_key, mapping={keys[16 * i : 16 * i + 16]: 1 for i in range(m)})
        out["fill_s"] = time.perf_counter() - t
        out["ids_filled"] = int(r.hlen(ids_key))
        out["bytes_per_id_filled"] = int(r.memory_usage(ids_key, samples=0)) / out["ids_filled"]
        out["layout_ids"] = args.layout_ids
        out["layouts_bytes_per_id"] = layouts(r, args.layout_ids)
    finally:
        proc.terminate()
        proc.wait(30)
    if args.cluster:
        out["cluster"] = on_cluster(keyfile, args)
    shutil.rmtree(work, ignore_errors=True)
    out["load_before"], out["load_after"] = load_before, os.getloadavg()
    out["cpus"] = os.cpu_count()
    Path(args.out + ".json").write_text(json.dumps(out, indent=1))
    lines = render(out)
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def compare(runs: dict[str, dict]) -> list[str]:
    """Earlier results side by side (e.g. two commits run alternately): ratios to the plain stream."""
    lines = [
        "# Per-person state: runs side by side (bench_units.py --compare)",
        "",
        "Ratio: records/s with ids over without, in the same run (wall time); CPU ratio: the worker's and Redis' CPU "
        "per record with ids over without. Repeating: the run's distinct ids over its records, K covering them.",
        "",
        "| run | records | load before/after | all new: records/s, ratio, CPU ratio | "
        "repeating: records/s, ratio, CPU ratio |",
        "|---|---|---|---|---|",
    ]
    for label, o in runs.items():
        lines.append(
            f"| {label} | {o['records']:,} | {o['load_before'][0]:.1f}/{o['load_after'][0]:.1f} | "
            f"{o['records_per_s_all_new']:,.0f}, {o['ratio_all_new']:.3f}, {o['cpu_ratio_all_new']:.2f} | "
            f"{o['records_per_s_repeating']:,.0f}, {o['ratio_repeating']:.3f}, {o['cpu_ratio_repeating']:.2f} |"
        )
    return lines


def render(out: dict) -> list[str]:
    """The result's Markdown lines."""
    lines = [
        "# Per-person state: worker throughput and bytes per id (bench_units.py)",
        "",
        f"Own redis-server; {out['records']:,} records per stream, batches of {out['batch']:,}; load (1 min) "
        f"before/after {out['load_before'][0]:.2f}/{out['load_after'][0]:.2f} on {out['cpus']} cpus.",
        "",
        "| stream | worker records/s | worker s | push s | ratio | worker CPU us/record | Redis CPU us/record | "
        "CPU ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    names = {
        "without_ids": "without ids",
        "all_new": "ids, every record a new id (K = 1)",
        "repeating": f"ids, {out['distinct']:,} distinct repeating (K = {out['k']})",
    }
    for label, title in names.items():
        ratio, cpu_ratio = out.get(f"ratio_{label}", 1.0), out.get(f"cpu_ratio_{label}", 1.0)
        lines.append(
            f"| {title} | {out[f'records_per_s_{label}']:,.0f} | {out[f'worker_s_{label}']:.1f} | "
            f"{out[f'push_s_{label}']:.1f} | {ratio:.3f} | {out[f'worker_cpu_us_per_record_{label}']:.2f} | "
            f"{out[f'redis_cpu_us_per_record_{label}']:.2f} | {cpu_ratio:.2f} |"
        )
    lines += [
        "",
        "Ratio: records/s with ids over without (wall time, moved by the machine's load); CPU ratio: the worker's "
        "and Redis' CPU per record with ids over without (how many times the work).",
        "",
        f"Bytes per id (MEMORY USAGE of the ids hash): {out['bytes_per_id_after_stream']:.1f} at "
        f"{out['ids_after_stream']:,} ids; filled directly to {out['ids_filled']:,} ids: "
        f"{out['bytes_per_id_filled']:.1f}.",
        "",
        f"Layouts at {out['layout_ids']:,} ids (used_memory growth per id): "
        + ", ".join(f"{k} {v:.1f}" for k, v in out["layouts_bytes_per_id"].items())
        + ".",
    ]
    c = out.get("cluster")
    if c:
        lines += [
            "",
            f"Local three-master cluster, the same {out['records']:,} records: without ids "
            f"{c['records_per_s_without_ids']:,.0f} records/s, every record a new id {c['records_per_s_all_new']:,.0f} "
            f"(ratio {c['ratio_all_new']:.3f}; CPU per record {c['cpu_ratio_all_new']:.1f} times); the ids' slot holds {c['ids']:,} ids at {c['bytes_per_id']:.1f} bytes "
            f"each; its node's used_memory grew {c['slot_node_used_memory_growth_mb']:.0f} MB, the other nodes' "
            + ", ".join(f"{v:.0f}" for v in c["other_nodes_used_memory_growth_mb"])
            + " MB.",
        ]
    return lines


if __name__ == "__main__":
    main()
