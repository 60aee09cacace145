"""Stopped branches: what their unspent budget (and DPEA's step roots' releases) are worth (a trial's finding).

Bai et al.'s budget (``streamdp/learners/dpea.py``) gives each of a branch's ``n = ceil(D / d)`` steps
``eps / (n + 1)`` and each count release ``eps / (n + 1)**2``; a branch that stops after one or two steps (its
noisy count below the bar) left the rest unspent, its leaf counted at ``eps / 49`` for D = 6 one-step, and
estimation read only the leaves. One-step DPEA at depth 6 on Votes then named a single class (the minority in
some fits). Now a stopped branch releases its leaf's class counts again with what it has left (averaged with the
first release by inverse variance) and estimation combines every step root's own release with its leaves' sum
(:func:`streamdp.estimation.released_node_counts`). ``--learner id3``: Friedman & Schuster's SuLQ-ID3 and
DiffPID3 (max scorer), whose branches stop the same way (a level's ``2 B / (2 (d + 1))`` each, the leaf counted at
``B / (2 (d + 1))``) and whose stopped leaves are topped up the same way. 10-fold CV per setting (one run), accuracy
and the folds below the majority share - 0.01.

    git worktree add /tmp/dpea-before 3f89e09   # the code before (has streamdp.records.datasets.skewed too)
    python benchmarks/studies/dpea_stopped_branches.py --root /tmp/dpea-before > benchmarks/results/dpea_stopped_branches.log
    python benchmarks/studies/dpea_stopped_branches.py >> benchmarks/results/dpea_stopped_branches.log
    python benchmarks/studies/dpea_stopped_branches.py --learner id3 --root /tmp/id3-before > benchmarks/results/id3_stopped_branches.log
    python benchmarks/studies/dpea_stopped_branches.py --learner id3 >> benchmarks/results/id3_stopped_branches.log
    python benchmarks/studies/dpea_stopped_branches.py --learner c45 ...   # the same for DiffPC4.5 (c45_stopped_branches.log)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

GRID = [  # (embed_depth, epsilon)
    (1, 1.0),
    (1, 0.1),
    (2, 1.0),
    ("whole", 1.0),
]
DATASETS = ("congressional-voting", "mushroom", "tic-tac-toe", "nursery", "skewed")  # skewed: issue 13's 4 classes
DEPTHS = (2, 4, 6, 8)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[2]), help="the checkout to measure")
    ap.add_argument("--runs", type=int, default=1, help="10-fold CV runs per setting")
    ap.add_argument("--learner", choices=("dpea", "id3", "c45"), default="dpea")
    a = ap.parse_args()
    sys.path.insert(0, a.root)
    from sklearn.model_selection import StratifiedKFold

    import streamdp
    from streamdp.learners import DPEA, DiffPID3, SuLQID3
    from streamdp.records.datasets import load, skewed

    if a.learner == "dpea":
        grid = [
            (f"{ed}", eps, lambda sc, D, ed=ed, eps=eps: DPEA(sc, max_depth=D, embed_depth=ed, epsilon=eps))
            for ed, eps in GRID
        ]
        depths, head = DEPTHS, "embed_depth"
    elif a.learner == "id3":
        grid = [
            (lab, eps, make)
            for eps in (0.5, 1.0)
            for lab, make in (
                ("SuLQ-ID3", lambda sc, D, eps=eps: SuLQID3(sc, epsilon=eps, max_depth=D)),
                ("DiffPID3 max", lambda sc, D, eps=eps: DiffPID3(sc, epsilon=eps, max_depth=D, scorer="max")),
            )
        ]
        depths, head = (2, 4, 6, 10), "learner"
    else:
        from streamdp.learners import DiffPC45

        grid = [
            ("DiffPC4.5 gini", eps, lambda sc, D, eps=eps: DiffPC45(sc, epsilon=eps, max_depth=D)) for eps in (0.5, 1.0)
        ]
        depths, head = (2, 4, 6, 10), "learner"
    datasets = DATASETS if a.learner != "c45" else ("congressional-voting", "nursery", "adult", "skewed")

    warnings.simplefilter("ignore")
    rev = subprocess.getoutput(f"git -C {a.root} rev-parse --short HEAD")
    print(
        f"# python benchmarks/studies/dpea_stopped_branches.py --learner {a.learner} --root {a.root} --runs {a.runs}; streamdp from "
        f"{Path(streamdp.__file__).parent} at git {rev}; load {subprocess.getoutput('uptime')}"
    )
    print(f"| dataset (majority) | {head} | epsilon | " + " | ".join(f"D={d}" for d in depths) + " |")
    print("|---|---|---|" + "---|" * len(depths))
    t0 = time.time()
    for name in datasets:
        ds = skewed(6000, seed=7) if name == "skewed" else load(name)
        y = np.asarray(ds.y)
        maj = max(float(np.mean(y == c)) for c in set(y))
        for lab, eps, make in grid:
            cells = []
            for D in depths:
                acc = []
                for r in range(a.runs):
                    for tr, te in StratifiedKFold(10, shuffle=True, random_state=r).split(ds.X, y):
                        m = make(ds.schema, D).fit(ds.X[tr], y[tr])
                        acc.append(float(np.mean(m.predict(ds.X[te]) == y[te])))
                acc = np.array(acc)
                low = int(np.sum(acc < maj - 0.01))
                cells.append(f"{acc.mean():.3f}" + (f" ({low}/{acc.size} low)" if low else ""))
            print(f"| {name} ({maj:.3f}) | {lab} | {eps:g} | " + " | ".join(cells) + " |", flush=True)
    print(f"\n# {time.time() - t0:.0f} s; load at end {subprocess.getoutput('uptime')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
