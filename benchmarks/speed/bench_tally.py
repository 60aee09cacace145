"""Tally / predict throughput of the fixed random forest (records per second per core).

10 trees of height 8 over 16 attributes, in three schema variants:

* ``binary``  - 16 binary categorical attributes (256 leaves per tree),
* ``numeric`` - 16 numeric attributes (binary threshold splits, 256 leaves),
* ``mixed``   - 8 categorical (arity 2..4) + 8 numeric attributes,
* ``cat3to5`` - 16 categorical attributes of arity 3..5, height 6 (guard-sized),
  which exercises the general categorical path (no small-domain lookup table).

Timed, per batch size (10k and 100k records):

* ``apply+tally``: ``ForestStructure.apply`` + ``tally`` from already-encoded X
  (the worker's hot path), also for the pre-optimisation implementation copied
  below (``before``), which is checked to give identical leaves;
* ``encode``: ``Schema.encode`` of raw 2-D values;
* ``noisy_delta``: ``PrivateForest.noisy_delta`` end to end (encode, route, tally, noise);
* ``predict_proba`` from raw values.

Everything runs single-threaded (numpy does not parallelise these ops), so
records/s is per core. Best of ``--repeat`` runs (the machine is shared).

    python benchmarks/speed/bench_tally.py            # full run, writes benchmarks/results/tally.{md,json}
    python benchmarks/speed/bench_tally.py --quick    # fewer repeats, 10k only, no files
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from streamdp.forest.model import PrivateForest  # noqa: E402
from streamdp.forest.structure import ForestStructure  # noqa: E402
from streamdp.forest.tally import tally  # noqa: E402
from streamdp.records.schema import Schema  # noqa: E402

N_TREES, HEIGHT, N_ATTR = 10, 8, 16


# --- the implementation before optimisation (commit 70458e5), kept as the reference -------------
def apply_before(fs: ForestStructure, X: np.ndarray, is_categorical: np.ndarray) -> np.ndarray:
    n, m = X.shape
    out = np.empty((n, fs.n_trees), dtype=np.int64)
    if n == 0:
        return out
    is_cat = np.append(np.asarray(is_categorical, dtype=bool), False)
    all_cat = bool(np.all(is_cat[:-1]))
    all_num = not bool(np.any(is_cat))
    Xz = np.zeros((n, m + 1), dtype=np.int32 if all_cat else np.float64)
    Xz[:, :m] = X
    Xf = Xz.ravel()
    m += 1
    cat_node = None if (all_cat or all_num) else is_cat[fs.feature]
    rowbase = np.arange(n, dtype=np.int64) * m
    for t in range(fs.n_trees):
        feat, thr, child = fs.feature[t], fs.threshold[t], fs.child[t]
        node = np.zeros(n, dtype=np.int64)
        for _ in range(fs.height):
            v = Xf.take(rowbase + feat.take(node))
            if all_cat:
                branch = v
            elif all_num:
                branch = v > thr.take(node)
            else:
                branch = np.where(cat_node[t].take(node), v, v > thr.take(node)).astype(np.int64)
            node = child.take(node) + branch
        out[:, t] = fs.leaf[t].take(node)
    return out


def tally_before(leaves, y, shape, mask=None):
    n_trees, max_leaves, n_classes = shape
    flat = (leaves + np.arange(n_trees, dtype=np.int64) * max_leaves) * n_classes + y[:, None]
    if mask is not None:
        flat = flat[mask]
    counts = np.bincount(flat.ravel(), minlength=n_trees * max_leaves * n_classes)
    return counts.astype(np.int64, copy=False).reshape(shape)


# --- schemas and data ------------------------------------------------------------------------------
def make_schema(kind: str) -> tuple[Schema, int]:
    attrs = []
    rng = np.random.default_rng(7)
    for j in range(N_ATTR):
        if kind == "binary" or (kind == "mixed" and j % 2 == 0):
            ar = 2 if kind == "binary" else int(rng.integers(2, 5))
            attrs.append({"name": f"a{j}", "type": "categorical", "values": list(range(ar))})
        elif kind == "cat3to5":
            attrs.append({"name": f"a{j}", "type": "categorical", "values": list(range(int(rng.integers(3, 6))))})
        else:
            attrs.append({"name": f"a{j}", "type": "numeric", "min": 0.0, "max": 1.0})
    height = 6 if kind == "cat3to5" else HEIGHT
    return Schema.from_dict({"attributes": attrs, "label": {"name": "y", "values": [0, 1]}}), height


def make_raw(schema: Schema, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    cols = []
    for a in schema.attributes:
        d = a.to_dict()
        if d["type"] == "categorical":
            cols.append(rng.integers(0, len(d["values"]), n).astype(np.float64))
        else:
            cols.append(rng.uniform(d["min"], d["max"], n))
    X = np.column_stack(cols)
    y = rng.integers(0, 2, n)
    return X, y


def timeit(fn, repeat: int) -> float:
    fn()  # warm up
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    # best of N: on a shared machine the minimum is the least contaminated by other jobs
    return float(np.min(ts))


def machine() -> dict:
    def sh(cmd):
        try:
            return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=10).stdout.strip()
        except Exception as e:  # pragma: no cover
            return f"({e})"

    return {
        "lscpu": sh("lscpu | head -20"),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "uptime_before": sh("uptime"),
        "date": sh("date -u"),
    }


KIND_DESC = {
    "binary": "16 binary categorical attributes, height 8 (256 leaves/tree)",
    "numeric": "16 numeric attributes, height 8 (256 leaves/tree)",
    "mixed": "8 categorical (arity 2-4) + 8 numeric, height 8",
    "cat3to5": "16 categorical attributes of arity 3-5, height 6 (domain too large for key tables: general router)",
}


def render_md(info: dict, rows: list[dict], args) -> str:
    M = lambda x: f"{x / 1e6:.2f}M"  # noqa: E731
    L = [
        "# Tally / predict throughput\n",
        "Generated by `python benchmarks/speed/bench_tally.py` (raw numbers in `tally.json`). Records per second on ONE core "
        f"(numpy runs these operations single-threaded), best (minimum) of {args.repeat} timed runs after a warm-up, "
        "since other jobs share the cores; "
        f"{N_TREES} trees over {N_ATTR} attributes, 2 classes.\n",
        "- **before**: `ForestStructure.apply` + `tally` as of commit 70458e5 (copied into the script, checked to give identical leaves and counts)",
        "- **apply**, **apply+tally**: the worker's hot path from already-encoded X (current code)",
        "- **encode**: `Schema.encode` of raw 2-D values with labels; **noisy_delta**: `PrivateForest.noisy_delta` "
        "end to end (encode + apply + tally + geometric noise); **predict_proba**: from raw values (encode + apply + vote)\n",
        "| schema | batch | leaves/tree (max) | before: apply+tally | apply | **apply+tally** | speed-up | encode | noisy_delta | predict_proba |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        L.append(
            f"| {r['kind']} | {r['n']:,} | {r['max_leaves']:,} | {M(r['before_apply_tally_rps'])} | {M(r['apply_rps'])} | "
            f"**{M(r['apply_tally_rps'])}** | {r['before_apply_tally_s'] / r['apply_tally_s']:.1f}x | {M(r['encode_rps'])} | "
            f"{M(r['noisy_delta_rps'])} | {M(r['predict_proba_rps'])} |"
        )
    L += [
        "",
        "Schemas: " + "; ".join(f"`{k}`: {v}" for k, v in KIND_DESC.items()) + ".\n",
        "## Against the goal (>= 3M records/s/core for the tally)\n",
        "- **Met** for the stated case, binary categorical attributes (256 leaves/tree): about 5x the previous code, "
        "via the key tables. Nursery's schema (12,960 code combinations x 10 trees) also qualifies for them (not timed here).",
        "- **Not met** by the general router (numeric, mixed, and categorical schemas whose joint domain is too large "
        "for key tables, e.g. Mushroom or cat3to5): about 1-2M records/s/core, 1.0-2.6x the previous code. "
        "Getting 3M there would take a compiled kernel (numba or C), which the brief asked to avoid.",
        "- End to end from raw values, `noisy_delta` runs at 0.5-1.4M and `predict_proba` at 0.6-1.0M records/s. "
        "`Schema.encode` codes integer columns through a table over their range and object columns with one dict "
        "probe per value (it used `np.unique` over Python objects: 0.07M records/s on `binary` at 100k before, "
        "commit 'Schema.encode: ...' of 2026-11-23); workers that receive already-encoded records skip it.\n",
        "## What the optimisation does\n",
        "- **Key tables (all-categorical schemas with a small joint domain).** A record's leaf depends only on the codes "
        "of the attributes the trees test, so when n_trees x (product of their arities) <= 2**21, every code "
        "combination is routed once (cached on the structure; built once the structure has routed a quarter "
        "of the domain's size in records, so a worker's steady stream of 10k batches gets it after the first batches "
        "while a one-off small predict never pays for it; the warm-up call in this benchmark counts towards that) and a batch then costs one mixed-radix key per record (integer matmul) and one row gather. "
        "Used here by `binary` (2**16 keys); among the UCI sets by Nursery (12,960 keys) and Tic-Tac-Toe (19,683). "
        "Codes outside the declared arities fall back to the router.",
        "- **Router (everything else).** Cache-sized chunks (16k records categorical, 8k otherwise) transposed once "
        "(categorical codes as uint8/int16), a per-node column-offset table so each level is gather offset, add record "
        "index, gather value, gather child, add; intp node indices (np.take converts any other index dtype first), "
        "preallocated buffers with `out=` and `mode='clip'` (no bounds-check copy), no extra zero column copy of X, "
        "and the root level computed directly from one column. numpy's gather costs ~2 ns per element here, "
        "so with ~5 passes per level x height x 10 trees the router tops out around 2M records/s/core.",
        "- **tally**: the flat (tree, leaf, class) index is built in one buffer with in-place adds (no temporaries), then one bincount.",
        "- Not done: numba/C (a new dependency; the brief asked for numpy unless it cannot get close).\n",
        "## Machine\n",
        "```",
        info["lscpu"],
        "```",
        f"Python {info['python']}, numpy {info['numpy']}. Run at {info['date']}.\n",
        f"Load: before `{info['uptime_before']}`; after `{info['uptime_after']}`. The machine has 2 cores shared with "
        "5 other engineers' jobs; a load average above ~1 means our single-threaded process was competing for a core "
        "and the numbers are pessimistic.\n",
    ]
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="10k batches, 3 repeats, no result files")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--kinds", default="binary,numeric,mixed,cat3to5")
    ap.add_argument("--sizes", default=None, help="batch sizes (default 10000,100000; --quick: 10000)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "results" / "tally"))
    ap.add_argument("--render", action="store_true", help="only re-render tally.md from tally.json")
    args = ap.parse_args(argv)
    if args.render:
        doc = json.loads(Path(args.out).with_suffix(".json").read_text())
        args.repeat = doc["machine"].get("repeat", 9)
        Path(args.out).with_suffix(".md").write_text(render_md(doc["machine"], doc["rows"], args))
        return 0
    if args.quick:
        args.repeat = 3
    args.sizes = args.sizes or ("10000" if args.quick else "10000,100000")
    info = machine()
    info["repeat"] = args.repeat
    print(info["uptime_before"], flush=True)
    rows = []
    for kind in args.kinds.split(","):
        schema, height = make_schema(kind)
        forest = PrivateForest.create(schema, n_trees=N_TREES, height=height, epsilon=1.0, seed=1)
        fs, is_cat = forest.structure, schema.is_categorical
        for n in map(int, args.sizes.split(",")):
            rng = np.random.default_rng(n)
            Xraw, yraw = make_raw(schema, n, rng)
            enc = schema.encode(Xraw, yraw)
            X, y = enc.X, enc.y
            shape = forest.shape
            # correctness against the reference before timing
            ref = apply_before(fs, X, is_cat)
            new = fs.apply(X, is_cat)
            assert np.array_equal(ref, new), f"{kind}: apply differs from the reference"
            assert np.array_equal(tally_before(ref, y, shape), tally(new, y, shape)), f"{kind}: tally differs"
            r = {"kind": kind, "n": n, "height": height, "max_leaves": int(fs.max_leaves)}
            r["before_apply_tally_s"] = timeit(lambda: tally_before(apply_before(fs, X, is_cat), y, shape), args.repeat)
            r["apply_s"] = timeit(lambda: fs.apply(X, is_cat), args.repeat)
            r["apply_tally_s"] = timeit(lambda: tally(fs.apply(X, is_cat), y, shape), args.repeat)
            r["encode_s"] = timeit(lambda: schema.encode(Xraw, yraw), max(1, args.repeat // 2))
            r["noisy_delta_s"] = timeit(lambda: forest.noisy_delta(Xraw, yraw), max(1, args.repeat // 2))
            forest.fit(Xraw, yraw)
            r["predict_proba_s"] = timeit(lambda: forest.predict_proba(Xraw), max(1, args.repeat // 2))
            for key in [k for k in r if k.endswith("_s")]:
                r[key.replace("_s", "_rps")] = n / r[key]
            rows.append(r)
            print(
                f"{kind:8s} n={n:>7,} leaves={r['max_leaves']:>5}  before {r['before_apply_tally_rps'] / 1e6:6.2f}M/s  "
                f"apply {r['apply_rps'] / 1e6:6.2f}M/s  apply+tally {r['apply_tally_rps'] / 1e6:6.2f}M/s  "
                f"encode {r['encode_rps'] / 1e6:6.2f}M/s  noisy_delta {r['noisy_delta_rps'] / 1e6:6.2f}M/s  "
                f"predict_proba {r['predict_proba_rps'] / 1e6:6.2f}M/s",
                flush=True,
            )
    info["uptime_after"] = subprocess.run("uptime", shell=True, capture_output=True, text=True).stdout.strip()
    print(info["uptime_after"])
    if not args.quick:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".json").write_text(json.dumps({"machine": info, "rows": rows}, indent=1))
        out.with_suffix(".md").write_text(render_md(info, rows, args))
        print(f"wrote {out.with_suffix('.json')} and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
