"""Agrawal with data-dependent private splits: DiffPC45 vs the streaming forest's random splits.

    python benchmarks/studies/agrawal_batch.py      # writes results/agrawal_batch.{md,json}

River's Agrawal generator (seed 42), functions 0..9, 50,000 records, epsilon 1.

1. Batch: train on the first 40,000, test on the last 10,000, three fits per cell. The
   streaming private forest (random structure, river_eval.md) cannot isolate age in
   [40, 60) on function 0; DiffPC45 chooses numeric split points with the exponential
   mechanism over ranges.
2. Online: progressive validation (river's progressive_val_score, one record at a time)
   of streamdp.river.PrivateWindowClassifier (DiffPC45 gini, depth 3, refit on each
   disjoint 5,000-record window, the last 3 window models vote) beside river's
   HoeffdingTreeClassifier; two runs of the private model.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from river import evaluate, metrics, tree
from river.datasets import synth

from benchmarks.common import machine, sh  # noqa: E402
from streamdp import PrivateForest  # noqa: E402
from streamdp.learners import DiffPC45  # noqa: E402
from streamdp.privacy.mechanisms import NotPrivateWarning  # noqa: E402
from streamdp.river import PrivateWindowClassifier  # noqa: E402
from streamdp.river.schemas import agrawal_schema  # noqa: E402

warnings.simplefilter("ignore", NotPrivateWarning)
OUT = Path(__file__).resolve().parents[1] / "results"
N, N_TRAIN, EPS, FITS = 50_000, 40_000, 1.0, 3


def data(fn: int, schema):
    rows, ys = zip(*synth.Agrawal(classification_function=fn, seed=42).take(N))
    X = np.array([[r[a.name] for a in schema.attributes] for r in rows], dtype=object)
    return X, np.array(ys, dtype=object)


def online(schema, runs: int = 2) -> dict:
    out = {}
    for fn in range(10):
        stream = list(synth.Agrawal(classification_function=fn, seed=42).take(N))
        accs, sps = [], []
        for _ in range(runs):
            m = PrivateWindowClassifier(schema, learner_params={"scorer": "gini"})
            t = time.perf_counter()
            accs.append(evaluate.progressive_val_score(stream, m, metrics.Accuracy()).get())
            sps.append(N / (time.perf_counter() - t))
        t = time.perf_counter()
        ht = evaluate.progressive_val_score(stream, tree.HoeffdingTreeClassifier(), metrics.Accuracy()).get()
        out[fn] = {
            "private": float(np.mean(accs)),
            "private_runs": accs,
            "private_sps": float(np.median(sps)),
            "ht": ht,
            "ht_sps": N / (time.perf_counter() - t),
        }
        print("online", fn, out[fn], flush=True)
    return out


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
    info["online"] = online(schema)
    info["uptime_end"], info["seconds"] = sh("uptime"), time.time() - t0
    OUT.mkdir(exist_ok=True)
    (OUT / "agrawal_batch.json").write_text(json.dumps(info, indent=1))
    names = [k for k in info["results"][0] if k != "majority"]
    m = info["machine"]
    L = [
        "# Agrawal with data-dependent private splits (benchmarks/studies/agrawal_batch.py)",
        "",
        f"{N_TRAIN:,} training / {N - N_TRAIN:,} test records of river's Agrawal (seed 42), epsilon {EPS}, "
        f"mean ± sd over {FITS} fits. Machine: {m['nproc']} x {m['cpu']}; {info['seconds']:.0f} s; load at start "
        f"`{info['uptime_start']}`, at end `{info['uptime_end']}`.",
        "",
        "| function | majority | " + " | ".join(names) + " |",
        "|---" * (len(names) + 2) + "|",
    ]
    for fn, row in info["results"].items():
        L.append(
            f"| {fn} | {row['majority']:.3f} | "
            + " | ".join(f"{row[n]['accuracy']:.3f} ± {row[n]['sd']:.3f}" for n in names)
            + " |"
        )
    L += [
        "",
        "Median fit seconds (function 0): "
        + ", ".join(f"{n} {info['results'][0][n]['fit_s']:.2f}" for n in names)
        + ".",
        "",
    ]
    L += [
        "## Online: progressive validation, 50,000 records, epsilon 1",
        "",
        "PrivateWindowClassifier(learner='diffp-c45', scorer gini, max_depth 3, window 5,000, n_models 3), "
        "mean of two runs (the first 5,000 records are predicted uniformly: no model yet); river's "
        "HoeffdingTreeClassifier (not private) on the same stream. Samples/s: predict + learn, one record at a time.",
        "",
        "| function | private window (DiffPC45) | HoeffdingTree | gap (points) | private samples/s | HT samples/s |",
        "|---|---|---|---|---|---|",
    ]
    for fn, r in info["online"].items():
        L.append(
            f"| {fn} | {r['private']:.3f} | {r['ht']:.3f} | {100 * (r['ht'] - r['private']):.1f} | "
            f"{r['private_sps']:,.0f} | {r['ht_sps']:,.0f} |"
        )
    L.append("")
    (OUT / "agrawal_batch.md").write_text("\n".join(L))


if __name__ == "__main__":
    main()
