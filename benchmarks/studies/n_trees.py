"""The number of trees of the default fit, by measurement: 5, 10 (the default) and 20 on every shared dataset.

``PrivateForest.fit`` (pruned, one prior stump, split budget, probability vote, geometric noise) at epsilon 0.5,
1 and 2 and three heights per dataset (the default height, the middle and the tallest of
``fit_height_ceiling.py``'s), ``--reps`` hold-out thirds (the same splits for every number of trees; a new
structure and new noise per fit). Prints the accuracy per height and the mean over datasets, epsilons and heights
of accuracy minus the majority share.

    python benchmarks/studies/n_trees.py --reps 6 > benchmarks/results/n_trees.log
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.studies.accuracy_height import data, split  # noqa: E402
from benchmarks.studies.fit_height_ceiling import DATASETS, EPS, heights_for  # noqa: E402
from streamdp.forest.model import PrivateForest  # noqa: E402

TREES = (5, 10, 20)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=6)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    t0 = time.time()
    print(
        f"# python benchmarks/studies/n_trees.py --reps {args.reps}; git {subprocess.getoutput('git rev-parse --short HEAD')}; "
        f"load {subprocess.getoutput('uptime')}"
    )
    print("| dataset | epsilon | heights | " + " | ".join(f"{t} trees" for t in TREES) + " |")
    print("|---|---|---|" + "---|" * len(TREES))
    over = {t: [] for t in TREES}
    for name in DATASETS:
        schema, X, y = data(name)
        hs = heights_for(schema)
        hs = sorted({hs[len(hs) // 2], hs[-1], PrivateForest.create(schema, n_trees=10, epsilon=1.0).height} & set(hs))
        splits = [split(len(y), np.random.default_rng(rep)) for rep in range(args.reps)]
        majority = float(np.mean([np.bincount(y[te]).max() / len(te) for _, te in splits]))
        for eps in EPS:
            cells = []
            for n_trees in TREES:
                accs = []
                for h in hs:
                    hits = []
                    for tr, te in splits:
                        f = PrivateForest.create(schema, n_trees=n_trees, height=h, epsilon=eps)
                        f.fit_encoded(X[tr], y[tr])
                        leaves = f.structure.apply(X[te], schema.is_categorical)
                        hits.append(float((f.proba_from_leaves(leaves).argmax(axis=1) == y[te]).mean()))
                    accs.append(np.mean(hits))
                over[n_trees].append(np.mean(accs) - majority)
                cells.append(" / ".join(f"{a:.3f}" for a in accs))
            print(f"| {name} | {eps:g} | {', '.join(map(str, hs))} | " + " | ".join(cells) + " |", flush=True)
    print(
        "# mean over datasets, epsilons and heights of (accuracy - majority): "
        + ", ".join(f"{t} trees {np.mean(v):+.4f}" for t, v in over.items())
    )
    print(f"# {time.time() - t0:.0f} s; load at end {subprocess.getoutput('uptime')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
