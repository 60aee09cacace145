"""HanischForest with a prior stump (``prior_trees=1``, the default) against without (Hanisch's forest as published).

Every shared dataset and the skewed one, epsilon 0.1 to 2, depths 3 (the default) and 5, ``--reps`` hold-out thirds
(the same splits for both settings; a new structure and new noise per fit). A stump releases the class totals in
one cell per class at one tree's share of epsilon, so the class prior every swamped leaf falls back to is measured
with one cell's noise instead of a root's sum over its leaves (the trees get ``n_trees / (n_trees + 1)`` of the
budget). Prints, per setting, the mean accuracy minus the majority share (its standard error) and the share of fits
below the floor (majority - 0.01), and the mean over settings.

    python benchmarks/studies/hanisch_prior.py --reps 20 > benchmarks/results/hanisch_prior.log
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
from benchmarks.studies.fit_height_ceiling import DATASETS  # noqa: E402
from streamdp.learners import HanischForest  # noqa: E402

EPS = (0.1, 0.25, 0.5, 1.0, 2.0)
DEPTHS = (3, 5)
STUMPS = (0, 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--datasets", default=",".join(DATASETS))
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    t0 = time.time()
    print(
        f"# python benchmarks/studies/hanisch_prior.py --reps {args.reps} --datasets {args.datasets}; git "
        f"{subprocess.getoutput('git rev-parse --short HEAD')}; load {subprocess.getoutput('uptime')}"
    )
    print("# per cell: mean(accuracy - majority) (standard error) share of fits below majority - 0.01")
    print("| dataset | depth | epsilon | " + " | ".join(f"prior_trees={p}" for p in STUMPS) + " | paired difference |")
    print("|---|---|---|" + "---|" * (len(STUMPS) + 1))
    over = {p: [] for p in STUMPS}
    for name in args.datasets.split(","):
        schema, X, y = data(name)
        splits = [split(len(y), np.random.default_rng(rep)) for rep in range(args.reps)]
        for depth in DEPTHS:
            for eps in EPS:
                gaps = {p: [] for p in STUMPS}
                for tr, te in splits:
                    majority = np.bincount(y[te]).max() / len(te)
                    for p in STUMPS:
                        m = _fit(schema, X[tr], y[tr], eps, depth, p)
                        gaps[p].append(
                            float((m.predict_proba_encoded(X[te]).argmax(axis=1) == y[te]).mean()) - majority
                        )
                cells = []
                for p in STUMPS:
                    g = np.array(gaps[p])
                    over[p].append(g.mean())
                    cells.append(f"{g.mean():+.3f} ({g.std() / np.sqrt(len(g)):.3f}) {np.mean(g < -0.01):.2f}")
                d = np.array(gaps[1]) - np.array(gaps[0])
                cells.append(f"{d.mean():+.3f} ({d.std() / np.sqrt(len(d)):.3f})")
                print(f"| {name} | {depth} | {eps:g} | " + " | ".join(cells) + " |", flush=True)
    print(
        "# mean over settings of (accuracy - majority): "
        + ", ".join(f"prior_trees={p} {np.mean(v):+.4f}" for p, v in over.items())
    )
    print(f"# {time.time() - t0:.0f} s; load at end {subprocess.getoutput('uptime')}")
    return 0


def _fit(schema, X, y, eps: float, depth: int, prior_trees: int) -> HanischForest:
    """A fit on encoded records, through the private data layer as ``fit`` does."""
    from streamdp.learners.private_data import PrivateDataset

    # (measured with Hanisch's majority vote, the default until hanisch_pooled.py: kept so the log reproduces)
    m = HanischForest(schema, epsilon=eps, max_depth=depth, prior_trees=prior_trees, vote="majority")
    return m.fit(PrivateDataset(schema, X, y, epsilon=eps))


if __name__ == "__main__":
    raise SystemExit(main())
