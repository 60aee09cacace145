"""Forgetting on a drifting stream: decayed counts against no forgetting and river's adaptive Hoeffding tree.

In-process, pure core (no Redis): river's ``ConceptDriftStream`` from Agrawal's function A to function B
(a sudden drift of width 1,000 at the middle of the stream). The private forest (epsilon 1, 10 trees, one
prior stump, the defaults' height 6) is released in windows of ``WINDOW`` records (one noised delta each, as
``release="window"``), tested on each window before it is released (prequential), with the published counts:

* ``no forgetting``: the running sum of the deltas (what ``window`` publishes today);
* ``half-life H records``: :class:`streamdp.release.decay.DecayedCounts` over the same deltas
  (post-processing; ``half_life_unit="records"``), the noise variance bounded by ``v / (1 - lam^2)``;
* river's ``HoeffdingAdaptiveTreeClassifier`` (not private; ADWIN drift detection), record by record.

Accuracy before the drift, over the 10,000 records after it, over the last 10,000, and overall; the majority
share of each stretch beside it. Run: ``PYTHONPATH=. python3 benchmarks/drift_forgetting.py``.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
from river import tree
from river.datasets import synth

from streamdp.forest.model import PrivateForest
from streamdp.records.schema import Schema
from streamdp.release.continual import ReleasePolicy
from streamdp.release.decay import DecayedCounts, variance_bound

N = 60_000
DRIFT_AT = 30_000
WIDTH = 1_000
WINDOW = 1_000
EPSILON = 1.0
N_TREES = 10
HEIGHT = 6
HALF_LIVES = (2_000, 5_000, 15_000)
SEEDS = (1, 2, 3)
FUNCTIONS = ((0, 2), (1, 3))  # Agrawal's classification functions before and after the drift
OUT = Path(__file__).resolve().parent / "results" / "drift_forgetting.json"

# Agrawal's generator draws every attribute from these ranges (river.datasets.synth.Agrawal): public.
SCHEMA = Schema.from_dict(
    {
        "attributes": [
            {"name": "salary", "type": "numeric", "min": 20_000, "max": 150_000},
            {"name": "commission", "type": "numeric", "min": 0, "max": 85_000},
            {"name": "age", "type": "numeric", "min": 20, "max": 80},
            {"name": "elevel", "type": "categorical", "values": [0, 1, 2, 3, 4]},
            {"name": "car", "type": "categorical", "values": list(range(1, 21))},
            {"name": "zipcode", "type": "categorical", "values": list(range(9))},
            {"name": "hvalue", "type": "numeric", "min": 0, "max": 1_200_000},
            {"name": "hyears", "type": "numeric", "min": 1, "max": 30},
            {"name": "loan", "type": "numeric", "min": 0, "max": 500_000},
        ],
        "label": {"name": "class", "values": [0, 1]},
    }
)
NAMES = [a.name for a in SCHEMA.attributes]


def stream(seed: int, before: int, after: int) -> tuple[list[dict], np.ndarray]:
    s = synth.ConceptDriftStream(
        stream=synth.Agrawal(classification_function=before, seed=seed),
        drift_stream=synth.Agrawal(classification_function=after, seed=seed + 100),
        position=DRIFT_AT,
        width=WIDTH,
        seed=seed,
    )
    X, y = [], []
    for x, label in itertools.islice(s, N):
        X.append(x)
        y.append(int(label))
    return X, np.array(y)


def private_runs(X: list[dict], y: np.ndarray) -> dict[str, np.ndarray]:
    """Prequential correctness per record for each private variant (one forest, one noise per window)."""
    spec = PrivateForest.create(SCHEMA, n_trees=N_TREES, height=HEIGHT, epsilon=EPSILON, prior_trees=1)
    v = spec.cell_variance
    enc = SCHEMA.encode([[x[a] for a in NAMES] for x in X], y)
    variants: dict[str, DecayedCounts | None] = {"no forgetting": None}
    for h in HALF_LIVES:
        variants[f"half-life {h:,} records"] = DecayedCounts(
            ReleasePolicy("window", half_life=float(h), half_life_unit="records")
        )
    counts = {k: np.zeros(spec.shape) for k in variants}
    right = {k: np.zeros(len(y), bool) for k in variants}
    final_sd = {}
    for r, lo in enumerate(range(0, len(y), WINDOW)):
        hi = min(lo + WINDOW, len(y))
        for k, dec in variants.items():
            if r:
                var = r * v if dec is None else dec.variance(v)
                model = spec.with_counts(
                    np.rint(counts[k]).astype(np.int64), version=r, n_releases=r, noise_variance=var
                )
                leaves = model.structure.apply(enc.X[lo:hi], SCHEMA.is_categorical)
                right[k][lo:hi] = model.proba_from_leaves(leaves).argmax(axis=1) == y[lo:hi]
        delta = spec.noisy_delta_encoded(enc.X[lo:hi], enc.y[lo:hi])  # one release, shared by every variant
        for k, dec in variants.items():
            counts[k] = counts[k] + delta if dec is None else dec.update(delta)
    n_rel = math.ceil(len(y) / WINDOW)
    for k, dec in variants.items():
        final_sd[k] = math.sqrt(n_rel * v if dec is None else dec.variance(v))
        if dec is not None:
            assert dec.variance(v) <= variance_bound(dec.policy, v) * (1 + 1e-9)
    return right | {"_sd": final_sd}  # type: ignore[return-value]


def hatc_run(X: list[dict], y: np.ndarray) -> np.ndarray:
    model = tree.HoeffdingAdaptiveTreeClassifier(seed=0)
    right = np.zeros(len(y), bool)
    for i, (x, label) in enumerate(zip(X, y)):
        right[i] = model.predict_one(x) == label
        model.learn_one(x, int(label))
    return right


def stretches(right: np.ndarray) -> dict[str, float]:
    return {
        "before drift (5k-30k)": float(right[5_000:DRIFT_AT].mean()),
        "10k after drift": float(right[DRIFT_AT : DRIFT_AT + 10_000].mean()),
        "last 10k": float(right[-10_000:].mean()),
        "overall": float(right.mean()),
    }


def majority(y: np.ndarray) -> dict[str, float]:
    def share(a: np.ndarray) -> float:
        return float(max(a.mean(), 1 - a.mean()))

    return {
        "before drift (5k-30k)": share(y[5_000:DRIFT_AT]),
        "10k after drift": share(y[DRIFT_AT : DRIFT_AT + 10_000]),
        "last 10k": share(y[-10_000:]),
        "overall": share(y),
    }


def main() -> int:
    t0 = time.time()
    load0 = os.getloadavg()
    results: dict = {
        "setup": {
            "records": N,
            "drift_at": DRIFT_AT,
            "drift_width": WIDTH,
            "window_records": WINDOW,
            "epsilon": EPSILON,
            "n_trees": N_TREES,
            "height": HEIGHT,
            "seeds": list(SEEDS),
            "functions": [list(f) for f in FUNCTIONS],
            "load_at_start": [round(x, 2) for x in load0],
        },
        "runs": [],
    }
    for before, after in FUNCTIONS:
        for seed in SEEDS:
            X, y = stream(seed, before, after)
            runs = private_runs(X, y)
            sd = runs.pop("_sd")
            row = {"functions": [before, after], "seed": seed, "majority": majority(y)}
            row["accuracy"] = {k: stretches(v) for k, v in runs.items()}
            row["accuracy"]["river HoeffdingAdaptiveTree (not private)"] = stretches(hatc_run(X, y))
            row["final_noise_sd_per_cell"] = {k: round(float(s), 2) for k, s in sd.items()}  # type: ignore[union-attr]
            results["runs"].append(row)
            print(json.dumps(row), flush=True)
    # means over seeds per drift
    summary = {}
    for before, after in FUNCTIONS:
        rows = [r for r in results["runs"] if r["functions"] == [before, after]]
        keys = list(rows[0]["accuracy"])
        summary[f"A{before}->A{after}"] = {
            k: {s: round(float(np.mean([r["accuracy"][k][s] for r in rows])), 4) for s in rows[0]["accuracy"][k]}
            for k in keys
        } | {"majority": {s: round(float(np.mean([r["majority"][s] for r in rows])), 4) for s in rows[0]["majority"]}}
    results["mean_over_seeds"] = summary
    results["seconds"] = round(time.time() - t0, 1)
    results["load_at_end"] = [round(x, 2) for x in os.getloadavg()]
    OUT.write_text(json.dumps(results, indent=1))
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
