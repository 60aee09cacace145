"""The tree-mean vote with an SNR gate: a tree's leaf whose noisy total is below ``snr`` sd of its noise falls
back to the pooled estimate (decision 026's ``vote="trees"`` has none), paired on the same releases.

    python benchmarks/studies/tree_vote_gate.py NAME[,NAME...] 0.1,0.5,1,2 REPEATS FOLDS > results/tree_vote_gate.log

(the datasets as ``tree_vote.py`` loads them; Car from /tmp/car.data when present.)
"""

import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from accuracy_small_data import cv_splits
from tree_vote import load, released

warnings.simplefilter("ignore")


VARIANTS = {"pooled": None, "trees": (0.0, 2.0), "gate1": (1.0, 2.0), "gate2": (2.0, 2.0)}
names = sys.argv[1].split(",")
eps_list = [float(e) for e in sys.argv[2].split(",")]
reps, folds = int(sys.argv[3]), int(sys.argv[4])
res = {}
for name in names:
    schema, X, y, rng = load(name, "/tmp/car.data")
    splits = cv_splits(len(y), reps, folds, rng)
    t0 = time.time()
    for split, (tr, te) in enumerate(splits):
        maj = float((y[te] == np.bincount(y[tr], minlength=schema.n_classes).argmax()).mean())
        for eps in eps_list:
            f = released(schema, X[tr], y[tr], "fit", eps)
            leaves = f.structure.apply(X[te], f.schema.is_categorical)
            f.vote = "proba"
            nodes = f.estimation_nodes()
            pooled = nodes.path_proba(leaves[:, : f.n_trees])
            for v, prm in VARIANTS.items():
                p = pooled if prm is None else nodes.tree_mean(leaves, pooled, snr_min=prm[0])
                res.setdefault((name, eps, v), []).append(float((p.argmax(1) == y[te]).mean()))
            res.setdefault((name, eps, "majority"), []).append(maj)
    print(name, f"{time.time() - t0:.0f}s", flush=True)
for name in names:
    for eps in eps_list:
        m = np.mean(res[(name, eps, "majority")])
        row = " ".join(f"{v} {np.mean(res[(name, eps, v)]):.3f}" for v in VARIANTS)
        flag = [v for v in VARIANTS if np.mean(res[(name, eps, v)]) < m - 0.01]
        print(f"{name:28s} {eps:4} maj {m:.3f} | {row} | below floor: {flag}")
