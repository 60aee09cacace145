"""Agrawal with data-dependent private splits: DiffPC45 / DiffPID3 vs the streaming forest's random splits.

    python benchmarks/agrawal_batch.py      # writes results/agrawal_batch.{md,json}

River's Agrawal generator (seed 42), functions 0..9, 50,000 records: train on the first
40,000, test on the last 10,000, epsilon 1, three fits per cell. The streaming private
forest (random structure, river_eval.md) cannot isolate age in [40, 60) on function 0;
DiffPC45 chooses numeric split points with the exponential mechanism over ranges.
"""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import numpy as np
from river.datasets import synth

from common import machine, sh  # noqa: E402
from streamdp import PrivateForest  # noqa: E402
from streamdp.learners import DiffPC45  # noqa: E402
from streamdp.privacy import NotPrivateWarning  # noqa: E402
from streamdp.river_schemas import agrawal_schema  # noqa: E402

warnings.simplefilter("ignore", NotPrivateWarning)
OUT = Path(__file__).parent / "results"
N, N_TRAIN, EPS, FITS = 50_000, 40_000, 1.0, 3


def data(fn: int, schema):
    rows, ys = zip(*synth.Agrawal(classification_function=fn, seed=42).take(N))
    X = np.array([[r[a.name] for a in schema.attributes] for r in rows], dtype=object)
    return X, np.array(ys, dtype=object)


def main() -> None:
    t0 = time.time()
    schema = agrawal_schema()
    info: dict = {"machine": machine(), "uptime_start": sh("uptime"), "results": {}}
    for fn in range(10):
        X, y = data(fn, schema)
        Xtr, ytr, Xte, yte = X[:N_TRAIN], y[:N_TRAIN], X[N_TRAIN:], y[N_TRAIN:]
        row = {"majority": float(max(np.mean(yte == c) for c in set(yte)))}
        makers = {
            "DiffPC45 max, depth 5": lambda: DiffPC45(schema, epsilon=EPS, max_depth=5, scorer="max"),
            "DiffPC45 gini, depth 5": lambda: DiffPC45(schema, epsilon=EPS, max_depth=5, scorer="gini"),
            "PrivateForest 10 trees (one batch)": lambda: PrivateForest.create(schema, n_trees=10, epsilon=EPS),
        }
        for name, make in makers.items():
            accs, secs = [], []
            for _ in range(FITS):
                t = time.perf_counter()
                m = make().fit(Xtr, ytr)
                secs.append(time.perf_counter() - t)
                accs.append(float(np.mean(m.predict(Xte) == yte)))
            row[name] = {"accuracy": float(np.mean(accs)), "sd": float(np.std(accs)), "fit_s": float(np.median(secs))}
        info["results"][fn] = row
        print(fn, {k: (v if isinstance(v, float) else round(v["accuracy"], 3)) for k, v in row.items()}, flush=True)
    info["uptime_end"], info["seconds"] = sh("uptime"), time.time() - t0
    OUT.mkdir(exist_ok=True)
    (OUT / "agrawal_batch.json").write_text(json.dumps(info, indent=1))
    names = [k for k in info["results"][0] if k != "majority"]
    m = info["machine"]
    L = ["# Agrawal with data-dependent private splits (benchmarks/agrawal_batch.py)", "",
         f"{N_TRAIN:,} training / {N - N_TRAIN:,} test records of river's Agrawal (seed 42), epsilon {EPS}, "
         f"mean ± sd over {FITS} fits. Machine: {m['nproc']} x {m['cpu']}; {info['seconds']:.0f} s; load at start "
         f"`{info['uptime_start']}`, at end `{info['uptime_end']}`.", "",
         "| function | majority | " + " | ".join(names) + " |", "|---" * (len(names) + 2) + "|"]
    for fn, row in info["results"].items():
        L.append(f"| {fn} | {row['majority']:.3f} | "
                 + " | ".join(f"{row[n]['accuracy']:.3f} ± {row[n]['sd']:.3f}" for n in names) + " |")
    L += ["", "Median fit seconds (function 0): "
          + ", ".join(f"{n} {info['results'][0][n]['fit_s']:.2f}" for n in names) + ".", ""]
    (OUT / "agrawal_batch.md").write_text("\n".join(L))


if __name__ == "__main__":
    main()
