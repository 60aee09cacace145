"""The worker's hot path at the defaults: routing and counting a batch on Adult's default forest, beside scikit-learn.

Adult's default forest is what ``streamdp model create`` makes for Adult's schema: 10 random trees at
the default height (``--height`` another) and the prior stump (``PrivateForest.create(schema, n_trees=10)``). Per batch
size (100, 1,000, 10,000, 100,000 records, drawn from Adult's encoded rows, a fresh batch every
repetition, the same batches for both sides):

* ``ours``: ``ForestStructure.apply`` + ``sparse_tally`` (the counting a window worker does per batch);
* ``ours_hot``: ``PrivateForest.sparse_tally_encoded``, the worker's whole call (checks included);
* ``ours_numpy``: ``ours`` with numpy's router (where the compiled one, ``streamdp/forest/_route.c``, is not built);
* ``sklearn``: a scikit-learn ``RandomForestClassifier`` of the same number of trees and depth, fitted on
  Adult, ``apply`` + ``np.bincount`` of the (tree, node, class) cells: the plain way of counting records per
  leaf without privacy.

The two sides alternate within each repetition. Reported: the median and the best wall time, the best
CPU time of the thread (the machine is shared: CPU time leaves out the time another process held the
core), records/s, and the ratio sklearn time / our time (>= 1: ours at least as fast), with the load
(``uptime``) before and after.

    python benchmarks/speed/hot_path.py            # writes benchmarks/results/hot_path.{md,json}
    python benchmarks/speed/hot_path.py --quick    # fewer repetitions, no files
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import machine, sh, write_results  # noqa: E402
from streamdp.forest.model import PrivateForest  # noqa: E402
from streamdp.forest.routing import ForestRouter, _route  # noqa: E402
from streamdp.forest.tally import sparse_tally  # noqa: E402
from streamdp.records.datasets import load, load_schema  # noqa: E402

SIZES = (100, 1_000, 10_000, 100_000)
N_TREES = 10


def timed(fn) -> tuple[float, float]:
    """(wall seconds, thread CPU seconds) of one call."""
    w, c = time.perf_counter(), time.thread_time()
    fn()
    return time.perf_counter() - w, time.thread_time() - c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--height",
        type=int,
        default=None,
        help="the forest's height (default: the schema's default); results as hot_path_h<H>",
    )
    args = ap.parse_args()
    from sklearn.ensemble import RandomForestClassifier

    uptime_start = sh("uptime")
    schema = load_schema("adult")
    ds = load("adult")
    enc = schema.encode(ds.X, ds.y)
    X, y = enc.X, enc.y.astype(np.int64)
    t0 = time.perf_counter()
    forest = PrivateForest.create(schema, n_trees=N_TREES, height=args.height, seed=1)
    draw_s = time.perf_counter() - t0
    fs = forest.structure
    t0 = time.perf_counter()
    fs.router()
    router_s = time.perf_counter() - t0
    clf = RandomForestClassifier(n_estimators=N_TREES, max_depth=fs.height, random_state=0).fit(X, y)
    sk_nodes = max(e.tree_.node_count for e in clf.estimators_)
    C = schema.n_classes

    def ours(Xb, yb):
        return sparse_tally(fs.apply(Xb, schema.is_categorical), yb, forest.shape)

    def ours_hot(Xb, yb):
        return forest.sparse_tally_encoded(Xb, yb)

    def ours_numpy(Xb, yb):
        ForestRouter.COMPILED = False
        try:
            return ours(Xb, yb)
        finally:
            ForestRouter.COMPILED = True

    def sklearn(Xb, yb):
        leaves = clf.apply(Xb)
        flat = (leaves + np.arange(N_TREES) * sk_nodes) * C + yb[:, None]
        return np.bincount(flat.ravel(), minlength=N_TREES * sk_nodes * C)

    # same leaves as the counts say: every record counted once per tree (stump included)
    idx, counts = ours(X[:1000], y[:1000])
    assert int(counts.sum()) == 1000 * fs.n_trees

    rng = np.random.default_rng(0)
    rows, lines = [], []
    for n in SIZES:
        reps = max(5, min(200, 2_000_000 // n // 10)) // (4 if args.quick else 1)
        fns = {"ours": ours, "ours_hot": ours_hot, "ours_numpy": ours_numpy, "sklearn": sklearn}
        t: dict[str, list[tuple[float, float]]] = {name: [] for name in fns}
        for fn in fns.values():  # warm-up
            sel = rng.integers(0, len(X), n)
            fn(X[sel], y[sel])
        for r in range(reps):
            sel = rng.integers(0, len(X), n)
            Xb, yb = X[sel], y[sel]
            order = list(fns) if r % 2 == 0 else list(reversed(fns))
            for name in order:
                t[name].append(timed(lambda f=fns[name]: f(Xb, yb)))
        row = {"batch": n, "reps": reps}
        for name, ts in t.items():
            row[f"{name}_wall_median_ms"] = statistics.median(w for w, _ in ts) * 1e3
            row[f"{name}_wall_best_ms"] = min(w for w, _ in ts) * 1e3
            row[f"{name}_cpu_best_ms"] = min(c for _, c in ts) * 1e3
        for name in ("ours", "ours_hot", "ours_numpy"):
            row[f"{name}_ratio_wall_median"] = row["sklearn_wall_median_ms"] / row[f"{name}_wall_median_ms"]
            row[f"{name}_ratio_cpu_best"] = row["sklearn_cpu_best_ms"] / row[f"{name}_cpu_best_ms"]
        rows.append(row)
        print(
            f"{n:>7}: ours {row['ours_wall_median_ms']:.2f} ms (cpu {row['ours_cpu_best_ms']:.2f}), "
            f"hot call {row['ours_hot_wall_median_ms']:.2f} ms, sklearn {row['sklearn_wall_median_ms']:.2f} ms "
            f"(cpu {row['sklearn_cpu_best_ms']:.2f}); ratio {row['ours_ratio_wall_median']:.2f}x wall median, "
            f"{row['ours_ratio_cpu_best']:.2f}x cpu best; numpy router {row['ours_numpy_ratio_wall_median']:.2f}x",
            flush=True,
        )
    uptime_end = sh("uptime")
    info = {
        "machine": machine(),
        "uptime_start": uptime_start,
        "uptime_end": uptime_end,
        "numpy": np.__version__,
        "sklearn": __import__("sklearn").__version__,
        "forest": {
            "n_trees": fs.n_trees,
            "height": fs.height,
            "max_nodes": int(fs.feature.shape[1]),
            "max_leaves": fs.max_leaves,
            "cells": int(np.prod(forest.shape)),
            "router_bytes": fs.router().nbytes,
            "router_dtype": str(fs.router().packed.dtype),
            "draw_s": draw_s,
            "router_build_s": router_s,
        },
        "sklearn_max_nodes": sk_nodes,
        "compiled_router": _route is not None,
    }
    print(f"load: {uptime_start} -> {uptime_end}")
    if args.quick:
        return
    f = info["forest"]
    lines = [
        "# The worker's hot path at the defaults: Adult's default forest beside scikit-learn",
        "",
        f"`python benchmarks/speed/hot_path.py`. Adult's default forest: {f['n_trees']} trees ({N_TREES} random + the prior "
        f"stump), height {f['height']}, up to {f['max_nodes']:,} nodes and {f['max_leaves']:,} leaves a tree, "
        f"{f['cells']:,} cells. Its router (built once per structure: {f['router_build_s'] * 1e3:.0f} ms) holds "
        f"{f['router_bytes'] / 2**20:.1f} MiB ({f['router_dtype']} words, one per node). scikit-learn "
        f"{info['sklearn']}: RandomForestClassifier({N_TREES} trees, max_depth {f['height']}) fitted on Adult "
        f"(up to {sk_nodes} nodes a tree), `apply` + `np.bincount`. A fresh batch of Adult rows every repetition, "
        "the same for both sides, the sides alternating.",
        "",
        "`ours` = `ForestStructure.apply` + `sparse_tally` (compiled router: "
        f"{'built' if info['compiled_router'] else 'NOT built'}); `hot call` = `PrivateForest.sparse_tally_encoded` "
        "(checks and sampling mask included); `numpy router` = `ours` without the compiled router. "
        "Ratio = sklearn's time / ours (>= 1: ours at least as fast).",
        "",
        "| batch | reps | ours ms (median / cpu best) | hot call ms (median / cpu best) | sklearn ms (median / cpu best) "
        "| ours rec/s (median) | ratio (wall median) | ratio (cpu best) | hot-call ratio (wall median) "
        "| numpy router: ms (median) / ratio |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['batch']:,} | {r['reps']} | {r['ours_wall_median_ms']:.2f} / {r['ours_cpu_best_ms']:.2f} "
            f"| {r['ours_hot_wall_median_ms']:.2f} / {r['ours_hot_cpu_best_ms']:.2f} "
            f"| {r['sklearn_wall_median_ms']:.2f} / {r['sklearn_cpu_best_ms']:.2f} "
            f"| {r['batch'] / r['ours_wall_median_ms'] * 1e3:,.0f} | {r['ours_ratio_wall_median']:.2f}x "
            f"| {r['ours_ratio_cpu_best']:.2f}x | {r['ours_hot_ratio_wall_median']:.2f}x "
            f"| {r['ours_numpy_wall_median_ms']:.2f} / {r['ours_numpy_ratio_wall_median']:.2f}x |"
        )
    m = info["machine"]
    lines += [
        "",
        f"Machine: {m['nproc']} x {m['cpu']}, Python {m['python']}, numpy {info['numpy']}. "
        f"Load: `{uptime_start}` -> `{uptime_end}`.",
        "",
    ]
    write_results("hot_path" if args.height is None else f"hot_path_h{args.height}", info, rows, lines)


if __name__ == "__main__":
    main()
