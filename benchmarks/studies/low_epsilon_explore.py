"""Exploration harness for docs/decisions/019-low-epsilon-defaults.md (results: results/low_epsilon_explore.log).

    REP=4 ESTS=shrink,leaf python benchmarks/studies/low_epsilon_explore.py 0.1,0.5 "T3:T=3;k4:kappa=4" [datasets]

One forest per split and configuration, several estimators read from it (post-processing, module
constants patched in-process): ``T`` n_trees (``auto``: from the exact training size, an approximation of the
sized rule), ``P`` prior_trees, ``h`` height, ``prune=0`` the drawn trees kept, ``snr`` pruning.PRUNE_SNR,
``kappa`` estimation.rule.KAPPA, ``tps`` sizing.TREES_PER_SIGNAL. Estimators: ``shrink`` (the default),
``leaf`` (clipped counts summed), ``raw`` (counts summed), ``gZ`` (the prior's class unless the summed
evidence clears Z standard deviations). On the accuracy_small_data datasets and splits only.
"""

import os
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
warnings.simplefilter("ignore")
from accuracy_small_data import DATASETS, cv_splits, load_encoded

import streamdp.estimation.rule as rule
import streamdp.forest.pruning as pruning
import streamdp.forest.sizing as sizing
from streamdp import PrivateForest


def parse(c):
    name, _, kv = c.partition(":")
    return name, dict(item.split("=") for item in filter(None, kv.split(",")))


eps_list = [float(e) for e in sys.argv[1].split(",")]
cfgs = [parse(c) for c in sys.argv[2].split(";")]
datasets = sys.argv[3].split(",") if len(sys.argv) > 3 else list(DATASETS)
REP = int(os.environ.get("REP", 2))
ESTS = os.environ.get("ESTS", "shrink,leaf,raw,g1,g2,g3").split(",")


def predict(f, Xte, est):
    s = f.structure
    T = f.n_trees
    leaves = s.apply(Xte, f.schema.is_categorical)[:, :T]
    if est == "shrink":
        f.estimator = "shrink"
        return f.proba_from_leaves(leaves).argmax(1)
    if est == "leaf":
        f.estimator = "leaf"
        p = f.proba_from_leaves(leaves).argmax(1)
        f.estimator = "shrink"
        return p
    cnt = f.counts[:T].astype(float)  # (T, L, C)
    Y = cnt[np.arange(T)[None, :], leaves].sum(axis=1)  # (n, C)
    V = np.asarray(f.noise_variance, float)[:T].sum()
    prior = f.prior()
    k = int(np.argmax(prior))
    if est == "raw":
        return Y.argmax(1)
    z = float(est[1:])
    cstar = Y.argmax(1)
    clear = Y[np.arange(len(Y)), cstar] - Y[:, k] >= z * np.sqrt(2 * V)
    return np.where(clear, cstar, k)


tot = {}
for ds in datasets:
    rng = np.random.default_rng(sum(map(ord, ds)))
    schema, X, y = load_encoded(ds, rng)
    splits = cv_splits(len(y), REP, 5, rng)
    for eps in eps_list:
        maj = np.mean([np.mean(y[te] == np.bincount(y[tr]).argmax()) for tr, te in splits])
        for name, d in cfgs:
            kw = {}
            if "T" in d:
                kw["n_trees"] = (
                    int(d["T"])
                    if d["T"] != "auto"
                    else int(min(10, max(1, round((len(splits[0][0]) * eps) ** 0.5 / float(d.get("c", 3))))))
                )
            rule.KAPPA = float(d.get("kappa", 8))
            if "P" in d:
                kw["prior_trees"] = int(d["P"])
            if "h" in d:
                kw["height"] = int(d["h"])
            pruning.PRUNE_SNR = float(d.get("snr", 4.0))
            sizing.TREES_PER_SIGNAL = float(d.get("tps", 3.0))
            accs = {e: [] for e in ESTS}
            for tr, te in splits:
                f = PrivateForest.create(schema, epsilon=eps, **kw).fit_encoded(
                    X[tr], y[tr], prune=d.get("prune", "1") == "1"
                )
                for e in ESTS:
                    accs[e].append(np.mean(predict(f, X[te], e) == y[te]))
            row = f"{ds[:14]:14s} {eps:<4g} maj={maj:.3f} {name:8s}"
            for e in ESTS:
                a = float(np.mean(accs[e]))
                tot.setdefault((eps, name, e), []).append(a - maj)
                row += f" {e}={a:.3f}"
            print(row, flush=True)
for eps in eps_list:
    print(f"eps {eps} mean over maj / worst:")
    for name, _ in cfgs:
        print(
            "   ",
            name,
            " ".join(f"{e}={np.mean(tot[(eps, name, e)]):+.3f}/{np.min(tot[(eps, name, e)]):+.3f}" for e in ESTS),
        )
