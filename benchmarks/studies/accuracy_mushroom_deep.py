"""Mushroom at the deepest height the default size guard accepts (8; k/2 = 10 is refused).

Too slow for the main grid (a draw takes ~15 s, each release noises ~22M cells), so one run of
stratified 5-fold CV (the first 5 of ``accuracy_rdt.py``'s folds scheme), geometric noise, split
budget, proba vote only. Writes benchmarks/results/accuracy_mushroom_deep.json, which
report_accuracy.py shows when present.

    python benchmarks/studies/accuracy_mushroom_deep.py [--height 8] [--folds 5]
"""

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from benchmarks.studies.accuracy_rdt import EPSILONS, accuracy, prepare, release, stratified_folds  # noqa: E402
from streamdp.forest.structure import ForestStructure, TooLargeError  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--height", type=int, default=8)
    ap.add_argument("--folds", type=int, default=5)
    args = ap.parse_args()
    schema, X, y = prepare("mushroom")
    fold = stratified_folds(y, args.folds, np.random.default_rng([0, sum(map(ord, "mushroom"))]))
    rng = np.random.default_rng([0, 3000 + args.height])
    rows, refused, t0, leaves = [], 0, time.time(), []
    for k in range(args.folds):
        tr, te = fold != k, fold == k
        try:
            st = ForestStructure.draw(schema, 10, args.height, seed=int(rng.integers(2**63)))
        except TooLargeError:
            refused += 1
            continue
        leaves.append(int(st.max_leaves))
        lte = st.apply(X[te], schema.is_categorical)
        for eps in EPSILONS:
            f = release(schema, st, X[tr], y[tr], epsilon=eps, mechanism="geometric")
            rows.append({"eps": "inf" if math.isinf(eps) else f"{eps:g}", "fold": k, "acc": accuracy(f, lte, y[te])})
        print(f"fold {k} done at {time.time() - t0:.0f}s", flush=True)
    summ = {}
    for e in {r["eps"] for r in rows}:
        a = [r["acc"] for r in rows if r["eps"] == e]
        summ[e] = {
            "mean": float(np.mean(a)),
            "sd_over_folds": float(np.std(a, ddof=1)) if len(a) > 1 else 0.0,
            "folds": len(a),
        }
    out = {
        "height": args.height,
        "folds": args.folds,
        "refused_draws": refused,
        "max_leaves_per_tree": leaves,
        "runtime_s": time.time() - t0,
        "summary": summ,
    }
    (HERE.parent / "results" / "accuracy_mushroom_deep.json").write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
