"""The default height of categorical schemas of 2 to 5 attributes: Fan et al.'s half against the floor of 3.

Half of 3 attributes is a stump: it cannot hold STAGGER's concepts (two attributes each), even with exact
counts. The floor (:data:`streamdp.forest.heights.MIN_DEFAULT_HEIGHT`) gives such schemas 3 levels, or all
their attributes; the fit prunes what the records do not fill. Streams, at the defaults, on data no default
was tuned on:

* ``stagger-f0/f1/f2``: river's STAGGER, its three classification functions (3 attributes of 3 values);
* ``xor4``: 4 attributes of 3 values, the label the exclusive or of two of them;
* ``one5``: 5 attributes of 4 values, the label one attribute's value set, 10% of labels flipped (a concept
  the stump holds: what the taller default costs where it is not needed).

``before``: ``PrivateForest.create(schema, epsilon=e, height=max(1, n_attributes // 2)).fit(...)``;
``after``: the default. Training sets of 500 and 2,000 records, a held-out 5,000, fresh noise per draw.

    python benchmarks/studies/small_schema_height.py [--draws 10]

Writes ``results/small_schema_height.{json,md}``.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import run_info, sh, study_header, write_results  # noqa: E402

EPSILONS = (0.1, 0.5, 1.0, 2.0)
SIZES = (500, 2000)


def stagger(fn: int):
    from river import datasets

    from streamdp.river.schemas import stagger_schema

    def make(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        rows = list(datasets.synth.STAGGER(classification_function=fn, seed=seed).take(n))
        X = np.array([[x["size"], x["color"], x["shape"]] for x, _ in rows], dtype=np.float64)
        return X, np.array([int(y) for _, y in rows])

    return stagger_schema(), make


def synthetic(name: str):
    from streamdp.records.schema import Categorical, Label, Schema

    d, arity = (4, 3) if name == "xor4" else (5, 4)
    schema = Schema([Categorical(f"a{i}", tuple(range(arity))) for i in range(d)], Label("class", (0, 1)))

    def make(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(seed)
        X = rng.integers(0, arity, size=(n, d))
        if name == "xor4":
            y = ((X[:, 0] == 0) ^ (X[:, 1] == 1)).astype(int)
        else:
            y = (X[:, 2] < 2).astype(int) ^ (rng.random(n) < 0.1)
        return X.astype(np.float64), y.astype(int)

    return schema, make


DATASETS = {
    "stagger-f0": lambda: stagger(0),
    "stagger-f1": lambda: stagger(1),
    "stagger-f2": lambda: stagger(2),
    "xor4": lambda: synthetic("xor4"),
    "one5": lambda: synthetic("one5"),
}


def main() -> None:
    from streamdp import PrivateForest

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--draws", type=int, default=10)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    info = run_info(draws=args.draws)
    rows = []
    for name, load in DATASETS.items():
        schema, make = load()
        Xt, yt = make(5000, 10_000)
        majority = float(max(np.mean(yt == c) for c in np.unique(yt)))
        half = max(1, schema.n_attributes // 2)
        for n in SIZES:
            X, y = make(n, n)
            for eps in EPSILONS:
                out = {"dataset": name, "rows": n, "epsilon": eps, "majority": majority}
                for arm, height in (("before", half), ("after", None)):
                    acc = []
                    for _ in range(args.draws):
                        f = PrivateForest.create(schema, epsilon=eps, height=height).fit_encoded(X, y)
                        leaves = f.structure.apply(Xt, schema.is_categorical)
                        acc.append(float((f.proba_from_leaves(leaves).argmax(axis=1) == yt).mean()))
                    out[arm] = float(np.mean(acc))
                    out[arm + "_sd"] = float(np.std(acc))
                    out[arm + "_height"] = half if height else f.structure.height
                rows.append(out)
                print(out, flush=True)
    info["uptime_end"] = sh("uptime")
    lines = study_header("Default height of small categorical schemas", "small_schema_height.py", info)
    lines += [
        f"Mean held-out accuracy over {args.draws} fits (fresh noise); `before` at Fan et al.'s half, `after` the",
        "default (the floor of 3). (h): `before`'s drawn height; `after`'s height once the last fit pruned it.",
        "",
        "| dataset | rows | epsilon | majority | before (h) | after (h) | after - before |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['dataset']} | {r['rows']} | {r['epsilon']:g} | {r['majority']:.3f} | "
            f"{r['before']:.3f} ({r['before_height']}) | {r['after']:.3f} ({r['after_height']}) | "
            f"{r['after'] - r['before']:+.3f} |"
        )
    diffs = np.array([r["after"] - r["before"] for r in rows])
    lines += ["", f"Mean after - before over the {len(rows)} cells: {diffs.mean():+.3f} (min {diffs.min():+.3f})."]
    if not args.no_write:
        write_results("small_schema_height", info, rows, lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
