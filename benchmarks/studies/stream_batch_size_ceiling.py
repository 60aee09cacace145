"""What the service's Nursery benchmark can reach: the one-shot fit on the same split (issue 13's 0.90 goal).

``stream_batch_size.py`` pushes Nursery (5 classes; shuffled with seed 13, the last 648 records held out)
through the service at epsilon 1 and asks for 0.90 at every batch size. A window or grown model that
released every record in one window is one draw of the one-shot fit (``PrivateForest.fit``); more
windows only add noise. So the fit's mean on the same split is what a batch size can reach on average
(a single run of 3 repeats can land above it, as single draws of the fit do). Per height: the fit at
epsilon 1 (drawn and pruned, ``--draws`` new structures and noise) and the drawn forest with exact counts
(not private, 3 draws: what the forest could reach without noise).

    python benchmarks/studies/stream_batch_size_ceiling.py > benchmarks/results/stream_batch_size_ceiling.log
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

from benchmarks.studies.stream_batch_size import nursery_split  # noqa: E402
from streamdp.forest.model import PrivateForest  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--draws", type=int, default=20)
    ap.add_argument("--trees", type=int, default=10)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    ds, tr, te = nursery_split()
    enc = ds.schema.encode(ds.X, ds.y)
    X, y = enc.X, enc.y
    t0 = time.time()
    print(
        f"# python benchmarks/studies/stream_batch_size_ceiling.py --draws {args.draws} --trees {args.trees}; git "
        f"{subprocess.getoutput('git rev-parse --short HEAD')}; load {subprocess.getoutput('uptime')}"
    )
    print(
        f"# Nursery, 5 classes, {len(tr)} training records, {len(te)} held out (majority {np.bincount(y[te]).max() / len(te):.3f}); "
        f"{args.trees} trees and one prior stump, geometric noise, split budget, probability vote"
    )
    print(
        "| height | epsilon 1, drawn: mean (min-max) | epsilon 1, pruned (the default fit) | exact counts, drawn (not private, 3 draws) |"
    )
    print("|---|---|---|---|")
    for h in range(1, ds.schema.n_attributes + 1):
        cells = []
        for eps, prune, draws in ((1.0, False, args.draws), (1.0, True, args.draws), (np.inf, False, 3)):
            acc = []
            for _ in range(draws):
                f = PrivateForest.create(ds.schema, n_trees=args.trees, height=h, epsilon=eps)
                f.fit_encoded(X[tr], y[tr], prune=prune)
                acc.append(
                    float(
                        (
                            f.proba_from_leaves(f.structure.apply(X[te], ds.schema.is_categorical)).argmax(axis=1)
                            == y[te]
                        ).mean()
                    )
                )
            cells.append(f"{np.mean(acc):.3f} ({np.min(acc):.3f}-{np.max(acc):.3f})")
        print(f"| {h} | " + " | ".join(cells) + " |", flush=True)
    print(f"# {time.time() - t0:.0f} s; load at end {subprocess.getoutput('uptime')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
