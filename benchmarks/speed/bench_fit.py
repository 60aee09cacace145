"""Structure drawing, fit and update-from-raw timings of the pure core (issue 14).

* drawing: ``ForestStructure.draw`` of 10 trees by height, on Adult, Nursery and
  16 categorical attributes of 3-5 values (``cat16``);
* fit: ``PrivateForest`` on Adult at the default height (pruned, the default, and unpruned), by
  stage of the unpruned fit (draw, encode, apply + tally, noise), beside diffprivlib's ``RandomForestClassifier`` when installed
  (``pip install .[dpl]``, its own venv: diffprivlib 0.6.6 needs scikit-learn < 1.9);
* update from raw values vs apply + tally on ``cat16`` at height 8, with epsilon=inf
  so the noise draw (privacy.py, measured apart) is excluded;
* peak traced memory of ``update`` + ``to_bytes`` on a height-10 ``cat16`` model.

CPU seconds (``time.process_time``), best of ``--repeat``: the machine is shared;
``uptime`` is recorded beside the numbers.

    python benchmarks/speed/bench_fit.py             # writes benchmarks/results/fit.{md,json}
    python benchmarks/speed/bench_fit.py --quick     # no files
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from streamdp.forest.model import PrivateForest  # noqa: E402
from streamdp.forest.structure import ForestStructure, TooLargeError  # noqa: E402
from streamdp.forest.tally import tally  # noqa: E402
from streamdp.records.datasets import load, load_schema  # noqa: E402
from streamdp.records.schema import Schema  # noqa: E402

ARITIES = [3, 4, 5] * 5 + [3]


def cat16() -> Schema:
    return Schema.from_dict(
        {
            "attributes": [
                {"name": f"a{j}", "type": "categorical", "values": list(range(a))} for j, a in enumerate(ARITIES)
            ],
            "label": {"name": "y", "values": [0, 1]},
        }
    )


def best(fn, repeat: int) -> float:
    ts = []
    for _ in range(repeat):
        t = time.process_time()
        fn()
        ts.append(time.process_time() - t)
    return min(ts)


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def drawing(repeat: int) -> list[dict]:
    rows = []
    for name, schema in (("adult", load_schema("adult")), ("nursery", load_schema("nursery")), ("cat16", cat16())):
        for h in (4, 6, 7, 8, 10):
            try:
                fs = ForestStructure.draw(schema, 10, h, seed=h)
                leaves = int(fs.n_leaves.sum())
            except TooLargeError:
                leaves = None
            s = best(lambda: _draw_or_refuse(schema, h), repeat)
            rows.append({"schema": name, "height": h, "seconds": s, "leaves": leaves})
            print(rows[-1], flush=True)
    return rows


def _draw_or_refuse(schema, h):
    try:
        ForestStructure.draw(schema, 10, h)
    except TooLargeError:
        pass


def fit_adult(repeat: int) -> dict:
    ds = load("adult")
    out: dict = {"n": len(ds.X)}
    out["fit_s"] = best(lambda: PrivateForest.create(ds.schema, 10, epsilon=1.0).fit(ds.X, ds.y), repeat)
    out["fit_unpruned_s"] = best(
        lambda: PrivateForest.create(ds.schema, 10, epsilon=1.0).fit(ds.X, ds.y, prune=False), repeat
    )
    f = PrivateForest.create(ds.schema, 10, epsilon=1.0, seed=0)
    out["height"] = f.height
    out["draw_s"] = best(lambda: ForestStructure.draw(ds.schema, 10), repeat)
    out["encode_s"] = best(lambda: ds.schema.encode(ds.X, ds.y), repeat)
    enc = ds.schema.encode(ds.X, ds.y)
    out["apply_tally_s"] = best(
        lambda: tally(f.structure.apply(enc.X, ds.schema.is_categorical), enc.y, f.shape), repeat
    )
    out["noise_s"] = best(lambda: f._noise(np.zeros(f.shape, dtype=np.int64)), repeat)
    out["cells"] = int(np.prod(f.shape))
    try:
        from diffprivlib.models import RandomForestClassifier
    except ImportError:
        out["diffprivlib_s"] = None
    else:
        import pandas as pd

        Xd = pd.DataFrame(ds.X, columns=ds.schema.names)
        num = [a.name for a in ds.schema.attributes if not hasattr(a, "values")]
        Xn = pd.get_dummies(Xd, columns=[c for c in ds.schema.names if c not in num]).astype(float).to_numpy()
        bounds = (Xn.min(axis=0), Xn.max(axis=0))  # for timing only; a private fit must declare them
        out["diffprivlib_s"] = best(
            lambda: RandomForestClassifier(
                n_estimators=10, epsilon=1.0, bounds=bounds, classes=list(ds.schema.classes)
            ).fit(Xn, ds.y),
            repeat,
        )
    print(out, flush=True)
    return out


def update_ratio(repeat: int, n: int = 100_000) -> dict:
    schema = cat16()
    f = PrivateForest.create(schema, 10, 8, epsilon=math.inf, seed=1, max_cells=2**27)
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.integers(a, size=n).astype(np.float64) for a in ARITIES])
    y = rng.integers(2, size=n)
    enc = schema.encode(X, y)
    f.update(X[:20_000], y[:20_000])  # warm the routing tables
    at = best(lambda: tally(f.structure.apply(enc.X, schema.is_categorical), enc.y, f.shape), repeat)
    up = best(lambda: f.update(X, y), repeat)
    out = {
        "n": n,
        "cells": int(np.prod(f.shape)),
        "apply_tally_rps": n / at,
        "update_raw_rps": n / up,
        "ratio": at / up,
        "encode_s": best(lambda: schema.encode(X, y), repeat),
    }
    print(out, flush=True)
    return out


def memory_height10() -> dict:
    schema = cat16()
    f = PrivateForest.create(schema, 10, 10, epsilon=math.inf, seed=2, max_cells=2**28)
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.integers(a, size=50_000) for a in ARITIES])
    y = rng.integers(2, size=50_000)
    f.update(X, y)
    tracemalloc.start()
    f.update(X, y)
    upd = tracemalloc.get_traced_memory()[1]
    tracemalloc.reset_peak()
    b = f.to_bytes()
    blob_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    out = {
        "counts_mib": f.counts.nbytes / 2**20,
        "structure_mib": sum(
            a.nbytes if 0 not in a.strides else a.itemsize  # a broadcast value: one element
            for a in f.structure.arrays().values()
        )
        / 2**20,
        "update_peak_mib": upd / 2**20,
        "to_bytes_peak_mib": blob_peak / 2**20,
        "blob_mib": len(b) / 2**20,
    }
    print(out, flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rep = 1 if args.quick else args.repeat
    res = {
        "machine": f"{platform.processor() or platform.machine()}, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, numpy {np.__version__}",
        "uptime_before": uptime(),
    }
    res["drawing"] = drawing(rep)
    res["fit_adult"] = fit_adult(rep)
    res["update"] = update_ratio(rep)
    res["memory_height10"] = memory_height10()
    res["uptime_after"] = uptime()
    if args.quick:
        return
    d = Path(__file__).resolve().parents[1] / "results"
    (d / "fit.json").write_text(json.dumps(res, indent=1))
    fa, up, mem = res["fit_adult"], res["update"], res["memory_height10"]
    lines = [
        "# Drawing, fit and update from raw values (pure core)",
        "",
        "Generated by `python benchmarks/speed/bench_fit.py` (raw numbers in `fit.json`). CPU seconds, best of "
        f"{rep}, on a shared 2-core machine: {res['machine']}.",
        "",
        f"Load: before `{res['uptime_before']}`; after `{res['uptime_after']}`.",
        "",
        "## Drawing 10 trees",
        "",
        "| schema | height | seconds | leaves (10 trees) |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {r['schema']} | {r['height']} | {r['seconds']:.3f} | {r['leaves'] if r['leaves'] is not None else 'refused (max_cells)'} |"
        for r in res["drawing"]
    ]
    dpl = f"{fa['diffprivlib_s']:.2f} s" if fa["diffprivlib_s"] is not None else "not installed"
    lines += [
        "",
        f"## PrivateForest fit on Adult ({fa['n']} records, 10 trees, height {fa['height']}, {fa['cells']:,} cells)",
        "",
        f"- end to end (`create` + `fit`, pruned by default: height a ceiling): {fa['fit_s']:.2f} s; "
        f"`fit(prune=False)` (the drawn trees): {fa['fit_unpruned_s']:.2f} s; stages of the unpruned fit: "
        f"draw {fa['draw_s']:.2f} s, encode {fa['encode_s']:.2f} s, "
        f"apply + tally {fa['apply_tally_s']:.2f} s, geometric noise {fa['noise_s']:.2f} s",
        f"- diffprivlib RandomForestClassifier (10 trees, one-hot): {dpl}",
        "",
        f"## update from raw values, cat16, height 8 ({up['cells']:,} cells, epsilon=inf: noise excluded)",
        "",
        f"- apply + tally {up['apply_tally_rps'] / 1e6:.2f} M records/s; update from raw float codes "
        f"{up['update_raw_rps'] / 1e6:.2f} M/s; ratio **{up['ratio']:.2f}**; encode {up['encode_s'] * 1e3:.0f} ms per {up['n']:,}",
        "",
        "## Memory, cat16 at height 10 (tracemalloc peaks)",
        "",
        f"- counts {mem['counts_mib']:.0f} MiB, structure {mem['structure_mib']:.0f} MiB; update peak "
        f"{mem['update_peak_mib']:.0f} MiB (noise included); to_bytes peak {mem['to_bytes_peak_mib']:.0f} MiB "
        f"for a {mem['blob_mib']:.0f} MiB blob",
        "",
    ]
    (d / "fit.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
