"""tracemalloc phases of a ``release="grow"`` window close on Adult (budgeted draw, height None), a few windows.

Prints, per close: the peak above what the worker held before the close (bytes and x the grown counts),
what it holds after, the phase marks (current/peak at entry and exit of the close's steps), and the sha256
of each stored release blob (with a fixed noise key: the same bytes before and after a change).

    PYTHONPATH=. python3 benchmarks/studies/grow_close_memory.py [--records 2000,10000,10000] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import os
import tempfile
import tracemalloc
import uuid

import numpy as np
import redis

from streamdp.records.datasets import load
from streamdp.service import windows as W
from streamdp.service.keys import Keys
from streamdp.service.producer import Producer
from streamdp.service.registry import create_model, delete_model, load_policy
from streamdp.service.stream_worker import Worker

MARKS: list[tuple[str, int, int]] = []


def _mark(label: str) -> None:
    if tracemalloc.is_tracing():
        cur, peak = tracemalloc.get_traced_memory()
        MARKS.append((label, cur, peak))


def _wrap(obj, name: str, label: str) -> None:
    f = getattr(obj, name)

    @functools.wraps(f)
    def g(*a, **k):
        _mark(label + ">")
        try:
            return f(*a, **k)
        finally:
            _mark(label + "<")

    setattr(obj, name, g)


def hooks() -> None:
    from streamdp.forest import growing, growth
    from streamdp.forest.model import PrivateForest

    _wrap(W, "read_acc_counts", "read_acc")
    _wrap(W, "stored_once", "stored_once")
    _wrap(W.WindowCloser, "_release", "publish")
    _wrap(PrivateForest, "from_bytes", "from_bytes")
    _wrap(PrivateForest, "to_bytes", "to_bytes")
    _wrap(growing.Growing, "grow_exact", "grow_exact")
    _wrap(growing.Growing, "holding", "holding")
    _wrap(growth, "drawn_nodes", "drawn_nodes")
    from streamdp.forest.structure import ForestStructure

    _wrap(ForestStructure, "pruned", "pruned")
    for f in ("leaves_below", "_anchors", "aggregate", "noisy_node", "held_leaves"):
        _wrap(growth, f, f)
    from streamdp.forest import node_links

    _wrap(node_links, "up_links", "up_links")  # (a node's parent and a leaf's node: once per structure)
    _wrap(growing, "grown_release", "grown_release")
    _wrap(growing, "held_leaves", "held_leaves")


def timeless(blob: bytes) -> bytes:
    """A blob's bytes with its creation time (the last field, a msgpack float64) zeroed."""
    at = blob.rindex(b"\xa7created\xcb") + 9
    return blob[:at] + bytes(8) + blob[at + 8 :]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    ap.add_argument("--records", default="2000,10000,10000,10000")
    ap.add_argument("--release", default="grow")
    ap.add_argument("--height", type=int, default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--no-hooks", action="store_true")
    args = ap.parse_args()
    if not args.no_hooks:
        hooks()
    ds = load("adult")
    r = redis.Redis.from_url(args.url)
    name = "growmemfixed"  # (fixed, with a fixed model id below: keyed noise draws the same on every run)
    for k in r.scan_iter(match=f"{Keys(name).prefix}*"):
        r.delete(k)
    keyf = tempfile.NamedTemporaryFile(delete=False)
    keyf.write(bytes(range(32)))
    keyf.close()
    out: dict = {"closes": []}
    try:
        fixed = uuid.UUID(int=0x5EED)
        real_uuid4, uuid.uuid4 = uuid.uuid4, lambda: fixed
        try:
            spec = create_model(
                args.url,
                name,
                ds.schema,
                height=args.height,
                seed=7,
                release=args.release,
                release_every=3600.0,
                noise_key_file=keyf.name,
            )
        finally:
            uuid.uuid4 = real_uuid4
        out["drawn_counts_bytes"] = int(spec.counts.nbytes)
        del spec
        w = Worker(args.url, name, block_ms=1, batch_entries=8, noise_key_file=keyf.name)
        p = Producer(args.url, name)
        start = load_policy(r, name)[1]
        at = 0
        for i, n in enumerate(int(x) for x in args.records.split(",")):
            rows = np.arange(at, at + n) % len(ds.y)  # (Adult again from its start past its end)
            X, y = ds.X[rows], ds.y[rows]
            at += n
            p.push(X, y)
            while w.step(block_ms=1):
                pass
            w.step(block_ms=1)
            MARKS.clear()
            tracemalloc.start()
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            got = w.closer.tick(start + 3600.0 * (i + 1) + 0.001)
            cur, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            blob = r.hget(Keys(name).pub_model, "blob")
            counts = r.hget(Keys(name).pub_model, "counts")
            from streamdp.forest.model import PrivateForest

            if blob:
                f = PrivateForest.from_bytes(blob)
                grown_counts = int(f.counts.nbytes)
                struct = int(sum(a.nbytes for a in f.structure.arrays().values() if 0 not in a.strides))
                digest = hashlib.sha256(timeless(blob)).hexdigest()[:16]
                if os.environ.get("GROW_BLOB_DIR"):
                    with open(os.path.join(os.environ["GROW_BLOB_DIR"], f"w{i + 1}.blob"), "wb") as fh:
                        fh.write(blob)
                size = len(blob)
                height = f.height
                del f
            else:
                grown_counts, struct, size, height = len(counts or b""), 0, len(counts or b""), None
                digest = hashlib.sha256(counts or b"").hexdigest()[:16]
            rec = {
                "window": i + 1,
                "records": n,
                "released": got,
                "peak_above": peak - base,
                "held_after": cur - base,
                "grown_counts": grown_counts,
                "grown_structure": struct,
                "blob": size,
                "height": height,
                "peak_x_counts": (peak - base) / max(grown_counts, 1),
                "held_x_counts": (cur - base) / max(grown_counts, 1),
                "sha256": digest,
                "marks": [(lab, c - base, pk - base) for lab, c, pk in MARKS],
            }
            out["closes"].append(rec)
            print(f"drawn counts {out['drawn_counts_bytes'] / 2**20:.2f} MiB")
            print(
                f"w{i + 1} n={n} h={height} counts={grown_counts / 2**20:.2f}MiB struct={struct / 2**20:.2f}MiB "
                f"blob={size / 2**20:.2f}MiB peak+={rec['peak_x_counts']:.2f}x held+={rec['held_x_counts']:.2f}x "
                f"sha={digest}"
            )
            for lab, c, pk in rec["marks"]:
                print(f"    {lab:16s} cur {c / grown_counts:6.2f}x peak {pk / grown_counts:6.2f}x")
    finally:
        with contextlib.suppress(Exception):
            delete_model(r, name)
        for k in r.scan_iter(match=f"{Keys(name).prefix}*"):
            r.delete(k)
        os.unlink(keyf.name)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
