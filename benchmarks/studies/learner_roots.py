"""A learner's root estimate: shrunk toward the prior (batch fits) or the prior itself, on the same fits.

    python benchmarks/studies/learner_roots.py [--reps 3] > results/learner_roots.log

:func:`streamdp.estimation.tree_node_proba` can make every learner tree's root its class prior
(``roots_are_prior``, as the forest does); measured here for batch fits (their own prior: the trees' leaf
sums). Kept for :class:`streamdp.river.PrivateWindowClassifier`'s pooled prior only: for batch fits this
comparison found no difference on average. Estimation is post-processing, so both rules score the SAME
fitted model: the difference is paired. HanischForest (10 trees, majority vote), DPEA (``embed_depth=1``)
and DiffPC45 (gini) on every shared dataset (Adult: its categorical attributes for Hanisch and DPEA) and
the synthetic skewed data, max_depth 1..min(6, categorical attributes), epsilon 0.5, 1, 2, one hold-out
split (2/3 train), ``--reps`` fits each. Prints one line per cell and the largest losses.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import streamdp.estimation as estimation  # noqa: E402
from benchmarks.studies.accuracy_height import DATASETS, EPS, data, raw_of, split  # noqa: E402
from streamdp.learners import DPEA, DiffPC45, HanischForest  # noqa: E402
from streamdp.privacy.mechanisms import NotPrivateWarning  # noqa: E402
from streamdp.records.schema import Categorical  # noqa: E402

warnings.simplefilter("ignore", NotPrivateWarning)
ROOTS_PRIOR = estimation.node_distributions


def roots_shrunk(*a, roots_are_prior=False, **kw):
    return ROOTS_PRIOR(*a, **kw)


def roots_prior(*a, roots_are_prior=False, **kw):
    return ROOTS_PRIOR(*a, roots_are_prior=True, **kw)


def score(model, X, y, rule) -> float:
    estimation.node_distributions = rule
    try:
        return float(model.score(X, y))
    finally:
        estimation.node_distributions = ROOTS_PRIOR


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)
    print(
        f"# load {os.getloadavg()[0]:.1f} at start; paired: the same fit scored with the root shrunk toward the prior and the root = the prior",
        flush=True,
    )
    diffs = []
    for name in DATASETS:
        schema, X, y = data(name)
        Xraw, yraw = raw_of(schema, X, y)
        tr, te = split(len(y), np.random.default_rng(0))
        n_cat = sum(isinstance(a, Categorical) for a in schema.attributes)
        makers = {"DiffPC45": lambda d, e: DiffPC45(schema, epsilon=e, max_depth=d, scorer="gini")}
        if n_cat == schema.n_attributes:
            makers["HanischForest"] = lambda d, e: HanischForest(
                schema, epsilon=e, max_depth=d, n_trees=10, vote="majority"
            )  # (as measured; pooled: no roots)
            makers["DPEA"] = lambda d, e: DPEA(schema, max_depth=d, embed_depth=1, epsilon=e)
        for model, make in makers.items():
            for d in range(1, min(6, schema.n_attributes) + 1):
                for eps in EPS:
                    before, now = [], []
                    try:
                        for _ in range(args.reps):
                            m = make(d, eps).fit(Xraw[tr], yraw[tr])
                            before.append(score(m, Xraw[te], yraw[te], roots_shrunk))
                            now.append(score(m, Xraw[te], yraw[te], roots_prior))
                    except ValueError as e:  # Hanisch's leaf guard
                        print(f"{name} {model} d={d}: {e}", flush=True)
                        break
                    diff = float(np.mean(now) - np.mean(before))
                    diffs.append((diff, name, model, d, eps))
                    print(
                        f"{name} | {model} | d={d} | eps={eps} | shrunk {np.mean(before):.3f} | prior {np.mean(now):.3f} | "
                        f"{diff:+.3f}",
                        flush=True,
                    )
    d = np.array([x[0] for x in diffs])
    print(
        f"# {len(d)} cells: mean {d.mean():+.4f}, better {int((d > 0.0005).sum())}, worse {int((d < -0.0005).sum())}, "
        f"largest loss {d.min():+.3f} {min(diffs)[1:]}, largest gain {d.max():+.3f} {max(diffs)[1:]}"
    )
    print(f"# load {os.getloadavg()[0]:.1f} at end", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
