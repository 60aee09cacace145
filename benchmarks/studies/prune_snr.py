"""Choosing the pruning bar (pruning.PRUNE_SNR) and the probe's share (pruning.PRUNE_PROBE) by measurement.

For each candidate ``SNR:PROBE``: the default one-shot fit (``PrivateForest.fit``: pruned, 10 trees and one
prior stump, split budget, probability vote, geometric noise) on every shared dataset and the skewed data,
at epsilon 0.5, 1 and 2 and every height up to the tallest (``fit_height_ceiling.py``'s size guard),
``--reps`` hold-out thirds each (the same splits for every candidate; new structure and noise per fit).
Reported per dataset and epsilon: the tallest height's accuracy, the mean over heights, and the settings
whose worst rep falls below the majority share minus 0.01.

    python benchmarks/studies/prune_snr.py --candidates 4:0.1,6:0.05 > benchmarks/results/prune_snr.log

A candidate ``4c:0.1`` scales the bar with the classes, ``4 sqrt(C / 2)`` at every node (estimation tests a
node's total, whose noise sums C cells; two-class data keep 4), ``4k:0.1`` at categorical splits only (the
library's rule since round 2's twelfth session, ``pruning.CLASS_SCALED``); ``4`` alone is the bar unscaled. ``--datasets`` also takes river's multi-class data as
``river:LED`` (10 classes, 17 irrelevant attributes, 10% noise, 5,000 records), ``river:ImageSegments``
(7 classes, numeric) and ``river:Waveform`` (3 classes, numeric, 5,000 records), and two concepts nobody tuned on: ``river:RandomTreeCat5`` (5
classes, 8 categorical attributes) and ``river:RandomTreeMixed4`` (4 classes, 4 numeric and 6 categorical).

    python benchmarks/studies/prune_snr.py --candidates 4:0.1,4c:0.1,4k:0.1 --reps 16 --datasets nursery,skewed,river:LED,\
river:ImageSegments,river:Waveform,river:RandomTreeCat5,river:RandomTreeMixed4 >> benchmarks/results/prune_snr_classes.log
    python benchmarks/studies/prune_snr.py --candidates 4:0.1,4k:0.1 --reps 16 --datasets nursery --per-height \
        >> benchmarks/results/prune_snr_classes.log
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
from streamdp.forest import pruning
from streamdp.forest.model import PrivateForest  # noqa: E402

PRUNE_DEFAULTS = (pruning.PRUNE_SNR, pruning.PRUNE_PROBE, pruning.CLASS_SCALED)


def river_data(name: str):
    """(schema, encoded X, y) of one of river's multi-class datasets (``--datasets river:NAME``)."""
    from river import datasets

    from benchmarks.studies.grow_ceiling import encode
    from streamdp.river import schemas as rs

    if name == "LED":
        schema, pairs = (
            rs.led_schema(True),
            list(datasets.synth.LED(seed=1, noise_percentage=0.1, irrelevant_features=True).take(5000)),
        )
    elif name == "ImageSegments":
        schema, pairs = rs.image_segments_schema(), list(datasets.ImageSegments())
    elif name == "Waveform":
        schema, pairs = rs.waveform_schema(), list(datasets.synth.Waveform(seed=1).take(5000))
    elif name == "RandomTreeCat5":  # 5 classes, 8 categorical attributes of 4 values
        schema = rs.random_tree_schema(5, 0, 8, 4)
        pairs = list(
            datasets.synth.RandomTree(
                seed_tree=23,
                seed_sample=1,
                n_classes=5,
                n_num_features=0,
                n_cat_features=8,
                n_categories_per_feature=4,
                max_tree_depth=6,
                first_leaf_level=2,
            ).take(5000)
        )
    elif name == "RandomTreeMixed4":  # 4 classes, 4 numeric and 6 categorical attributes of 3 values
        schema = rs.random_tree_schema(4, 4, 6, 3)
        pairs = list(
            datasets.synth.RandomTree(
                seed_tree=29,
                seed_sample=1,
                n_classes=4,
                n_num_features=4,
                n_cat_features=6,
                n_categories_per_feature=3,
                max_tree_depth=6,
                first_leaf_level=2,
            ).take(5000)
        )
    else:
        raise KeyError(name)
    return (schema, *encode(schema, pairs))


SCALED = {"c": "all", "k": "categorical"}


def set_bar(spec: str) -> None:
    """A candidate's bar: ``4`` as given, ``4c`` scaled by ``sqrt(C / 2)`` at every node, ``4k`` at nodes
    splitting on a categorical attribute (:func:`streamdp.forest.pruning.node_bars`)."""
    pruning.CLASS_SCALED = SCALED.get(spec[-1], "none")
    pruning.PRUNE_SNR = float(spec.rstrip("ck"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--candidates", default=f"{pruning.PRUNE_SNR:g}k:{pruning.PRUNE_PROBE:g}")  # the library's rule
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument(
        "--per-height",
        action="store_true",
        help="also each height's accuracy per candidate, and the last candidate's difference from the "
        "first paired on the splits (+- its standard error)",
    )
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    cands = [(c.split(":")[0], float(c.split(":")[1])) for c in args.candidates.split(",")]
    t0 = time.time()
    print(
        f"# python benchmarks/studies/prune_snr.py --candidates {args.candidates} --reps {args.reps}; git "
        f"{subprocess.getoutput('git rev-parse --short HEAD')}; load {subprocess.getoutput('uptime')}"
    )
    print("# per candidate SNR:PROBE: tallest height / mean over heights / settings with a rep below the floor")
    print("| dataset | epsilon | majority | " + " | ".join(f"{s}:{p:g}" for s, p in cands) + " |")
    print("|---|---|---|" + "---|" * len(cands))
    totals = {c: [] for c in cands}
    for name in args.datasets.split(","):
        schema, X, y = river_data(name[6:]) if name.startswith("river:") else data(name)
        heights = heights_for(schema)
        splits = [split(len(y), np.random.default_rng(rep)) for rep in range(args.reps)]
        majority = float(np.mean([np.bincount(y[te]).max() / len(te) for _, te in splits]))
        for eps in EPS:
            cells, per_cand = [], []
            for c in cands:
                set_bar(c[0])
                pruning.PRUNE_PROBE = c[1]
                acc = {}
                for h in heights:
                    for tr, te in splits:
                        f = PrivateForest.create(schema, n_trees=10, height=h, epsilon=eps)
                        f.fit_encoded(X[tr], y[tr])
                        leaves = f.structure.apply(X[te], schema.is_categorical)
                        hit = float((f.proba_from_leaves(leaves).argmax(axis=1) == y[te]).mean())
                        acc.setdefault(h, []).append(hit - np.bincount(y[te]).max() / len(te))  # over the majority
                per_cand.append(acc)
                means = [np.mean(v) for v in acc.values()]
                below = sum(min(v) < -0.01 for v in acc.values())
                totals[c].append(np.mean(means))
                cells.append(f"{majority + np.mean(acc[heights[-1]]):.3f} / {majority + np.mean(means):.3f} / {below}")
            print(f"| {name} | {eps:g} | {majority:.3f} | " + " | ".join(cells) + " |", flush=True)
            if args.per_height:
                for h in heights:
                    d = np.array(per_cand[-1][h]) - np.array(per_cand[0][h])
                    print(
                        f"|   height {h} | {eps:g} | | "
                        + " | ".join(f"{majority + np.mean(a[h]):.3f}" for a in per_cand)
                        + f" | {d.mean():+.3f} +- {d.std(ddof=1) / np.sqrt(d.size):.3f} |",
                        flush=True,
                    )
    print(
        "# mean over datasets and epsilons of (accuracy - majority), averaged over heights: "
        + ", ".join(f"{s}:{p:g} {np.mean(v):+.4f}" for (s, p), v in totals.items())
    )
    print(f"# {time.time() - t0:.0f} s; load at end {subprocess.getoutput('uptime')}")
    pruning.PRUNE_SNR, pruning.PRUNE_PROBE, pruning.CLASS_SCALED = PRUNE_DEFAULTS
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
