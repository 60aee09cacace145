"""Pooling a shallower leaf at the deeper depths (ForestNodes.path_proba), against leaving its tree out.

Pruned and grown trees are unbalanced: a record's path ends at depth 3 in one tree and at depth 6 in another.
The rule before pooled, at depth ``d``, only the trees whose path reaches ``d``; the rule now pools a
shallower tree's leaf again at every deeper depth (and skips a depth whose pool no tree deepens). Same fits, two estimates (post-processing of the same
released counts), so the difference is paired: the default one-shot fit (``PrivateForest.fit``: pruned,
10 trees and one prior stump, split budget, probability vote, geometric noise) on every shared dataset and
the skewed data, at epsilon 0.5, 1 and 2 and every height up to the tallest (``fit_height_ceiling.py``'s size
guard), ``--reps`` hold-out thirds each (a new split, structure and noise per rep).

    python benchmarks/studies/estimation_shallow_leaves.py > benchmarks/results/estimation_shallow_leaves.log

``--grown N``: the same paired comparison on trees grown release by release (``grow_ceiling.py``'s streams
and ceilings: N records in 10 releases, epsilon 1, 5,000 held-out records), ``--reps`` draws each.
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

from benchmarks.studies import estimation_variants  # noqa: E402
from benchmarks.studies.accuracy_height import data, split  # noqa: E402
from benchmarks.studies.fit_height_ceiling import DATASETS, EPS, heights_for  # noqa: E402
from streamdp.estimation import PRIOR_WEIGHT, ForestNodes  # noqa: E402
from streamdp.forest.model import PrivateForest  # noqa: E402


def before(nodes: ForestNodes, leaves: np.ndarray) -> np.ndarray:
    """The rule before: at depth ``d`` only the trees whose path reaches ``d`` are pooled (estimation_variants.py's
    rule at the library's weight; the same floats as the code before, up to the order of a sum: 3e-16, a reviewer's
    check; no prediction differs)."""
    return estimation_variants.proba(nodes, leaves, lambda d: PRIOR_WEIGHT)


def grown(n: int, reps: int) -> None:
    """The paired comparison on grown trees (``--grown``)."""
    import itertools

    from benchmarks.studies.grow_ceiling import ceilings, encode, grown_forest, synthetic

    print(
        f"| stream ({n:,} records, grown in 10 releases) | ceiling | height | before | now | paired difference (se) |"
    )
    print("|---|---|---|---|---|---|")
    for name in ("RandomTree cat8 d5", "RandomTree cat10 d7", "LED irrelevant, 10% noise"):
        gen, schema = synthetic(name, 1)
        X, y = encode(schema, list(itertools.islice(gen, n)))
        Xt, yt = encode(schema, list(itertools.islice(synthetic(name, 99)[0], 5000)))
        for label, h in ceilings(schema).items():
            now, old = [], []
            for _ in range(reps):
                f = grown_forest(schema, X, y, h)
                leaves = f.structure.apply(Xt, schema.is_categorical)
                now.append(float((f.proba_from_leaves(leaves).argmax(axis=1) == yt).mean()))
                old.append(float((before(f.estimation_nodes(), leaves).argmax(axis=1) == yt).mean()))
            d = np.array(now) - np.array(old)
            print(
                f"| {name} | {label} | {h} | {np.mean(old):.3f} | {np.mean(now):.3f} | {d.mean():+.4f} "
                f"({d.std(ddof=1) / np.sqrt(d.size):.4f}) |",
                flush=True,
            )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--grown", type=int, default=0, help="records of the grown streams instead (0: the fits)")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    t0 = time.time()
    if args.grown:
        print(
            f"# python benchmarks/studies/estimation_shallow_leaves.py --grown {args.grown} --reps {args.reps}; git "
            f"{subprocess.getoutput('git rev-parse --short HEAD')}; load {subprocess.getoutput('uptime')}"
        )
        grown(args.grown, args.reps)
        print(f"# {time.time() - t0:.0f} s; load at end {subprocess.getoutput('uptime')}")
        return 0
    print(
        f"# python benchmarks/studies/estimation_shallow_leaves.py --reps {args.reps}; git "
        f"{subprocess.getoutput('git rev-parse --short HEAD')}; load {subprocess.getoutput('uptime')}"
    )
    print(
        "| dataset | epsilon | heights | majority | before: tallest | now: tallest | before: mean over heights | "
        "now: mean over heights | paired difference, all heights (se) | settings now worse by > 0.01 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in args.datasets.split(","):
        schema, X, y = data(name)
        heights = heights_for(schema)
        for eps in EPS:
            acc = {"before": {}, "now": {}}
            majority = []
            for h in heights:
                for rep in range(args.reps):
                    tr, te = split(len(y), np.random.default_rng(rep))
                    majority.append(np.bincount(y[te]).max() / len(te))
                    f = PrivateForest.create(schema, n_trees=10, height=h, epsilon=eps)
                    f.fit_encoded(X[tr], y[tr])
                    leaves = f.structure.apply(X[te], schema.is_categorical)
                    now = f.proba_from_leaves(leaves)
                    old = before(f.estimation_nodes(), leaves)
                    acc["now"].setdefault(h, []).append(float((now.argmax(axis=1) == y[te]).mean()))
                    acc["before"].setdefault(h, []).append(float((old.argmax(axis=1) == y[te]).mean()))
            diff = np.array([a - b for h in heights for a, b in zip(acc["now"][h], acc["before"][h])])
            per = [np.mean(acc["now"][h]) - np.mean(acc["before"][h]) for h in heights]
            tall = heights[-1]
            print(
                f"| {name} | {eps:g} | 1-{tall} | {np.mean(majority):.3f} | {np.mean(acc['before'][tall]):.3f} | "
                f"{np.mean(acc['now'][tall]):.3f} | {np.mean([np.mean(v) for v in acc['before'].values()]):.3f} | "
                f"{np.mean([np.mean(v) for v in acc['now'].values()]):.3f} | {diff.mean():+.4f} "
                f"({diff.std(ddof=1) / np.sqrt(diff.size):.4f}) | {sum(d < -0.01 for d in per)} of {len(heights)} |",
                flush=True,
            )
    print(f"# {time.time() - t0:.0f} s; load at end {subprocess.getoutput('uptime')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
