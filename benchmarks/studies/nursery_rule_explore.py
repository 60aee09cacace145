"""Exploration (issue 13): does a per-tree *balanced* pruning depth close Nursery's tallest-height gap?

The one-shot fit prunes node by node (``streamdp.forest.growth._rule``: a node splits where it expects
``PRUNE_SNR`` noise sd of records), which leaves paths of uneven depth; the drawn height-4 forest that
reaches 0.915 on Nursery is even. ``bal`` replaces the rule, for this run only, by one depth per tree and
level: every node of a tree's level splits when the geometric mean of the level's expected counts clears
the bar. Protocol of ``nursery_ceiling_cv.py`` (Nursery, 3 classes, epsilon 1, stratified 10-fold CV,
``--runs`` runs, height 8, 10 trees and a stump); ``h4`` is the drawn height-4 forest on the same folds.

    python benchmarks/studies/nursery_rule_explore.py {per,bal,h4} SNR PROBE RUNS
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.studies.accuracy_rdt import prepare, stratified_folds  # noqa: E402
from streamdp.forest import growth, pruning
from streamdp.forest.model import PrivateForest  # noqa: E402


def balanced_rule(max_nodes: int):
    def rule(bar, anchors, n_random, keep=None):
        def split(nodes, share, rate):
            if anchors is not None and anchors[0].size:
                at = np.minimum(np.searchsorted(anchors[0], nodes), anchors[0].size - 1)
                rate = np.where(anchors[0][at] == nodes, anchors[1][at] / share, rate)
            _, inv = np.unique(nodes // max_nodes, return_inverse=True)
            e = np.log(np.maximum(rate * share, 1e-12))
            grow = np.exp(np.bincount(inv, e) / np.bincount(inv))[inv] >= bar
            if keep is not None and keep.size:
                grow |= np.isin(nodes, keep, assume_unique=True)
            return grow & (nodes < n_random), rate

        return split

    return rule


def main() -> int:
    warnings.simplefilter("ignore")
    mode, snr, probe, runs = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    pruning.PRUNE_SNR, pruning.PRUNE_PROBE = snr, probe
    schema, X, y = prepare("nursery")
    acc = []
    for run in range(runs):
        fold = stratified_folds(y, 10, np.random.default_rng(run))
        per = []
        for k in range(10):
            tr, te = fold != k, fold == k
            f = PrivateForest.create(schema, n_trees=10, height=4 if mode == "h4" else 8, epsilon=1.0)
            if mode == "bal":
                growth._rule = balanced_rule(f.structure.feature.shape[1])
            f.fit_encoded(X[tr], y[tr], prune=mode != "h4")
            leaves = f.structure.apply(X[te], schema.is_categorical)
            per.append(float((f.proba_from_leaves(leaves).argmax(axis=1) == y[te]).mean()))
        acc.append(np.mean(per))
    print(mode, snr, probe, f"{np.mean(acc):.3f} +- {np.std(acc):.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
