"""HanischForest's two votes on the same fits: each tree alone then a majority vote, or the trees' evidence pooled.

Three readings of one release (post-processing, so the columns are the same fits): ``leaf`` (each tree's largest
noisy leaf count, majority vote: Hanisch's rule; ``vote="majority", estimator="leaf"``), ``shrink`` (each tree's
noise-aware estimate, :mod:`streamdp.estimation` with the bar lowered by sqrt(n_trees), majority vote:
``vote="majority"``, the default before this measurement) and ``pooled`` (``vote="proba"``, the default after it:
PrivateForest's probability vote, :meth:`streamdp.estimation.ForestNodes.path_proba`: at each depth the record's
nodes in all trees are summed, their noises independent, and shrunk toward the pooled estimate one level up, from
the class prior at the roots).

    python benchmarks/studies/hanisch_pooled.py --reps 10 > benchmarks/results/hanisch_pooled.log
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

from benchmarks.studies.accuracy_height import data, raw_of, split  # noqa: E402
from streamdp.learners import HanischForest  # noqa: E402

EPS = (0.5, 1.0, 2.0)
DATASETS = ("nursery", "mushroom", "congressional-voting", "tic-tac-toe", "skewed")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--max-depth", type=int, default=8)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    t0 = time.time()
    print(f"# {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    print(
        f"# {args.reps} hold-out thirds per setting (split seeds 0..reps-1), 10 trees, prior_trees=1; "
        "mean accuracy (standard error); the floor is the majority share of the test third - 0.01"
    )
    summary = {"leaf": [], "shrink": [], "pooled": []}
    for name in args.datasets.split(","):
        schema, X, y = data(name)
        Xr, yr = raw_of(schema, X, y)
        for d in range(1, min(args.max_depth, schema.n_attributes) + 1):
            try:
                HanischForest(schema, max_depth=d)._check_params()
            except ValueError as e:  # the leaf guard (Mushroom from depth 7): deeper forests are refused
                print(f"{name} depth {d}: refused ({e})")
                break
            for eps in EPS:
                acc: dict[str, list[float]] = {k: [] for k in summary}
                below = {k: 0 for k in summary}
                for rep in range(args.reps):
                    tr, te = split(len(y), np.random.default_rng(rep))
                    maj = np.bincount(y[te], minlength=schema.n_classes).max() / len(te)
                    m = HanischForest(schema, epsilon=eps, max_depth=d, n_trees=10).fit(Xr[tr], yr[tr])
                    for column, vote, estimator in (
                        ("leaf", "majority", "leaf"),
                        ("shrink", "majority", "shrink"),
                        ("pooled", "proba", "shrink"),
                    ):
                        m.set_params(vote=vote)
                        m.estimator = estimator
                        acc[column].append(float(m.score(Xr[te], yr[te])) - maj)
                for k, v in acc.items():
                    summary[k].append(np.mean(v))
                    below[k] = int(np.mean(v) < -0.01)
                print(
                    f"{name} depth {d} eps {eps:g}: "
                    + "  ".join(
                        f"{k} {np.mean(v):+.3f} ({np.std(v) / np.sqrt(len(v)):.3f}){' BELOW' if below[k] else ''}"
                        for k, v in acc.items()
                    ),
                    flush=True,
                )
    print(
        "# accuracy minus the majority share, mean over settings: "
        + ", ".join(f"{k} {np.mean(v):+.4f}" for k, v in summary.items())
    )
    print(
        "# settings whose mean is below the floor: "
        + ", ".join(f"{k} {sum(x < -0.01 for x in v)} of {len(v)}" for k, v in summary.items())
    )
    print(
        "# settings where pooled beats shrink by more than 0.01: "
        f"{sum(a - b > 0.01 for a, b in zip(summary['pooled'], summary['shrink']))}, loses by more than 0.01: "
        f"{sum(b - a > 0.01 for a, b in zip(summary['pooled'], summary['shrink']))}"
    )
    print(f"# {time.time() - t0:.0f} s; {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
