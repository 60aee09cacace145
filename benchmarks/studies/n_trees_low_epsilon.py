"""Fewer trees at low epsilon? The default forest's fit with 10, 5, 3 and 1 random trees (one prior stump each) at
epsilon 0.1 and 0.5, on the small datasets of ``accuracy_small_data``: 6 random 80/20 hold-outs per cell (the
same splits for every tree count; a quick check, not a CV).

    python benchmarks/studies/n_trees_low_epsilon.py > benchmarks/results/n_trees_low_epsilon.log
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.studies.accuracy_small_data import DATASETS, load_encoded  # noqa: E402
from streamdp import PrivateForest  # noqa: E402

TREES = (10, 5, 3, 1)


def main() -> None:
    print(f"# load at start: {os.getloadavg()}")
    for name in DATASETS:
        schema, X, y = load_encoded(name, np.random.default_rng(7))
        n = len(y)
        for eps in (0.1, 0.5):
            means = []
            for trees in TREES:
                accs = []
                for rep in range(6):
                    perm = np.random.default_rng(100 + rep).permutation(n)
                    tr, te = perm[: int(0.8 * n)], perm[int(0.8 * n) :]
                    f = PrivateForest.create(schema, n_trees=trees, epsilon=eps).fit_encoded(X[tr], y[tr])
                    leaves = f.structure.apply(X[te], schema.is_categorical)
                    accs.append(float((f.proba_from_leaves(leaves).argmax(axis=1) == y[te]).mean()))
                means.append(np.mean(accs))
            print(name, eps, " ".join(f"T{t}:{m:.3f}" for t, m in zip(TREES, means)), flush=True)
    print(f"# load at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
