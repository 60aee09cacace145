"""The default threshold share against none and others on the held-out sets, paired, many splits (issue #33).

A check, not a tuning run: the held-out sets validate defaults and choose none (``accuracy_heldout``). Each
split fits every column on the same training records; the differences are paired against the first column
(the default), with their standard error. Columns are ``name={create kwargs}`` (a Python dict literal).

    python benchmarks/studies/threshold_share_check.py sk-breast-cancer 0.1 'default={}' 'ts0={"threshold_share": 0.0}'
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accuracy_heldout import load_encoded  # noqa: E402
from accuracy_small_data import cv_splits  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset")
    ap.add_argument("epsilon", type=float)
    ap.add_argument("columns", nargs="+", help="name={create kwargs}; the first is the reference")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--car", default=None)
    args = ap.parse_args()
    from streamdp import PrivateForest

    columns = {k: ast.literal_eval(v) for k, v in (c.split("=", 1) for c in args.columns)}
    schema, X, y = load_encoded(args.dataset, args.car)
    splits = cv_splits(len(y), args.repeats, args.folds, np.random.default_rng(7))
    acc: dict[str, list[float]] = {k: [] for k in columns}
    for train, test in splits:
        for name, kw in columns.items():
            f = PrivateForest.create(schema, epsilon=args.epsilon, **kw).fit_encoded(X[train], y[train])
            pred = f.proba_from_leaves(f.structure.apply(X[test], schema.is_categorical)).argmax(axis=1)
            acc[name].append(float((pred == y[test]).mean()))
    ref = np.array(acc[next(iter(columns))])
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"# {args.dataset} epsilon {args.epsilon:g}, {len(splits)} splits; load at end: {load}")
    for name, v in acc.items():
        d = np.array(v) - ref
        print(
            f"{args.dataset} {args.epsilon:g} {name:10s} {np.mean(v):.3f}  d {d.mean():+.3f} se {d.std(ddof=1) / np.sqrt(len(d)):.3f}"
        )


if __name__ == "__main__":
    main()
