"""Is reading a DPEA step root's own release worth its selection bias? (a reviewer's finding)

A step root's own class counts are the release that cleared the bar to split, so they run high; estimation
averages them with the leaves' sum anyway (:func:`streamdp.estimation.released_node_counts`). Same fits, two
estimates: "combined" (the default) and "leaves only" (inner nodes' own releases ignored: ``own_var`` set to 0 on
inner nodes). 10-fold CV x 2 per cell; the paired difference and its standard error.

    python benchmarks/studies/dpea_inner_releases.py > benchmarks/results/dpea_inner_releases.log
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sklearn.model_selection import StratifiedKFold  # noqa: E402

from streamdp.learners import DPEA  # noqa: E402
from streamdp.records.datasets import load, skewed  # noqa: E402


def main() -> int:
    warnings.simplefilter("ignore")
    print(
        f"# python benchmarks/studies/dpea_inner_releases.py; git {subprocess.getoutput('git rev-parse --short HEAD')}; "
        f"load {subprocess.getoutput('uptime')}"
    )
    print("| dataset | embed_depth | epsilon | max_depth | combined | leaves only | difference (se) |")
    print("|---|---|---|---|---|---|---|")
    for name in ("congressional-voting", "nursery", "mushroom", "skewed", "tic-tac-toe"):
        ds = skewed(6000, seed=7) if name == "skewed" else load(name)
        y = np.asarray(ds.y)
        for ed, eps in ((1, 1.0), (2, 1.0), (1, 0.1)):
            for D in (4, 8):
                a, b = [], []
                for r in range(2):
                    for tr, te in StratifiedKFold(10, shuffle=True, random_state=r).split(ds.X, y):
                        m = DPEA(ds.schema, max_depth=D, embed_depth=ed, epsilon=eps).fit(ds.X[tr], y[tr])
                        a.append(np.mean(m.predict(ds.X[te]) == y[te]))
                        t = m.trees_[0]
                        t.own_var = np.where(t.feature >= 0, 0.0, t.own_var)
                        b.append(np.mean(m.predict(ds.X[te]) == y[te]))
                d = np.array(a) - np.array(b)
                print(
                    f"| {name} | {ed} | {eps:g} | {D} | {np.mean(a):.3f} | {np.mean(b):.3f} | "
                    f"{d.mean():+.4f} ({d.std() / np.sqrt(d.size):.4f}) |",
                    flush=True,
                )
    print(f"\n# load at end {subprocess.getoutput('uptime')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
