"""The tree-mean vote (decision 026) on the river classifier's forest: paired against its pooled vote.

Each split: ``PrivateForestClassifier(schema, epsilon=e)`` learns the training records (``learn_encoded``,
``flush``) and is scored twice on the same release: its own prediction (``proba``: the pooled vote behind its
prior guard) and its library forest voting ``"trees"`` (``trees``; the prior's class where the classifier's
forest does not vote yet). A question behind issue #33's "tree-mean vote in the river path": what the one-record
path and the compiled kernel would gain. The sets and splits are ``accuracy_small_data``'s.

    python benchmarks/studies/river_tree_mean.py [--repeats 2 --folds 5] > results/river_tree_mean.log
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accuracy_small_data import DATASETS, EPSILONS, cv_splits, load_encoded  # noqa: E402


def paired(schema, X, y, train, test, eps: float) -> tuple[float, float, float]:
    """(pooled, tree-mean, majority share) accuracy of one river forest on one split."""
    from streamdp.river import PrivateForestClassifier

    model = PrivateForestClassifier(schema, epsilon=eps)
    model.learn_encoded(X[train], y[train])
    model.flush()
    own = model.predict_proba_encoded(X[test]).argmax(axis=1)
    tree = own
    if model.forest_votes:
        f = model.forest
        f.vote = "trees"
        tree = f.proba_from_leaves(f.structure.apply(X[test], schema.is_categorical)).argmax(axis=1)
    yte = y[test]
    majority = np.bincount(y[train], minlength=schema.n_classes).argmax()
    return float((own == yte).mean()), float((tree == yte).mean()), float((yte == majority).mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--folds", type=int, default=5)
    args = ap.parse_args()
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"# river_tree_mean.py --repeats {args.repeats} --folds {args.folds}; git {git}\n# load at start: {load}")
    print(f"{'dataset':28s} {'eps':>4s} {'maj':>6s} {'proba':>6s} {'trees':>6s} {'d':>7s} {'se':>6s}")
    diffs, below = [], {"proba": 0, "trees": 0}
    for name in DATASETS:
        schema, X, y = load_encoded(name, np.random.default_rng(0))
        splits = cv_splits(len(y), args.repeats, args.folds, np.random.default_rng(1))
        for eps in EPSILONS:
            a = np.array([paired(schema, X, y, tr, te, eps) for tr, te in splits])
            d = a[:, 1] - a[:, 0]
            diffs.append(d.mean())
            m = a.mean(axis=0)
            below["proba"] += m[0] < m[2] - 0.01
            below["trees"] += m[1] < m[2] - 0.01
            se = d.std(ddof=1) / np.sqrt(len(d))
            print(f"{name:28s} {eps:4g} {m[2]:6.3f} {m[0]:6.3f} {m[1]:6.3f} {d.mean():+7.3f} {se:6.3f}", flush=True)
    print(
        f"# mean trees - proba over {len(diffs)} cells: {np.mean(diffs):+.4f}; worst {min(diffs):+.3f}; "
        f"cells below the majority share - 0.01: proba {below['proba']}, trees {below['trees']}"
    )
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"# load at end: {load}")


if __name__ == "__main__":
    main()
