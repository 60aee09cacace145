"""The drawn default height: half the attributes, and the fallback where such trees exceed the leaf guard.

``ForestStructure.draw(height=None)`` draws at half the attributes (Fan et al.); only where that draw is
refused by the leaf guard does the default become ``structure.fitting_height`` (the tallest at which no tree
can exceed the guard, every node splitting on the widest attribute left). This script shows why the
worst case is not applied everywhere: the largest drawn tree against the worst case on Mushroom and Adult,
and Adult's pruned fit at the worst-case height (5) against the drawn default (7), epsilon 0.5 / 1 / 2, 10
trees, one fixed hold-out third, ``--draws`` fits each; and Adult's drawn trees (what a ``window`` stream model
releases: Adult has numeric attributes, so its stream default does not grow) at heights 3-7; and the default Adult
model's counts per release (what a retained version holds).

    python benchmarks/studies/default_height.py --draws 5 > benchmarks/results/default_height.log
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from streamdp import PrivateForest  # noqa: E402
from streamdp.forest.structure import DEFAULT_MAX_CELLS, ForestStructure, fitting_height, max_possible_leaves  # noqa: E402
from streamdp.records.datasets import load  # noqa: E402

DRAWN_HEIGHTS = (3, 4, 5, 6, 7)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=5)
    a = ap.parse_args()
    print(
        f"# python benchmarks/studies/default_height.py --draws {a.draws}; git "
        f"{subprocess.getoutput('git rev-parse --short HEAD')}; load at start: {subprocess.getoutput('uptime')}"
    )
    print(
        "| dataset | default height | worst-case height (fitting_height) | height | largest of 10 drawn trees "
        "(leaves, max over draws) | worst case | guard |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in ("mushroom", "adult"):
        s = load(name).schema
        guard = DEFAULT_MAX_CELLS // (s.n_classes * 10)
        default = PrivateForest.create(s, n_trees=10, epsilon=1.0).height
        for h in range(5, 9):
            drawn = max(int(ForestStructure.draw(s, 10, height=h, max_cells=2**34).n_leaves.max()) for _ in range(3))
            print(
                f"| {name} | {default} | {fitting_height(s, s.n_attributes // 2, 10)} | {h} | {drawn:,} | "
                f"{max_possible_leaves(s, h):,} | {guard:,} |",
                flush=True,
            )
    # what a default Adult stream model writes a release (its counts: a retained version, pub:v:N, holds them)
    sizes = [PrivateForest.create(load("adult").schema, epsilon=1.0).counts.nbytes / 2**20 for _ in range(a.draws)]
    print(
        f"\n# Adult, default model (height {PrivateForest.create(load('adult').schema, epsilon=1.0).height}, 10 trees "
        f"and a stump): counts per release {min(sizes):.1f}-{max(sizes):.1f} MiB over {a.draws} draws; 20 retained "
        f"versions {20 * min(sizes) / 1024:.2f}-{20 * max(sizes) / 1024:.2f} GiB"
    )
    ds = load("adult")
    n = len(ds.y)
    p = np.random.default_rng(0).permutation(n)
    te, tr = p[: n // 3], p[n // 3 :]
    majority = max(np.mean(ds.y[te] == v) for v in set(ds.y[te]))
    print(f"\n# Adult, pruned fit, hold-out third (majority {majority:.3f})")
    print("| epsilon | height 5: mean (min) | height 7: mean (min) |", "|---|---|---|", sep="\n")
    for eps in (0.5, 1.0, 2.0):
        cells = []
        for h in (5, 7):
            accs = [
                float(
                    np.mean(
                        PrivateForest.create(ds.schema, n_trees=10, height=h, epsilon=eps)
                        .fit(ds.X[tr], ds.y[tr])
                        .predict(ds.X[te])
                        == ds.y[te]
                    )
                )
                for _ in range(a.draws)
            ]
            cells.append(f"{np.mean(accs):.3f} ({min(accs):.3f})")
        print(f"| {eps:g} | " + " | ".join(cells) + " |", flush=True)
    print("\n# Adult, drawn trees (one release of the training records, two thirds, not pruned: a window model)")
    print(
        "| epsilon | " + " | ".join(f"height {h}: mean (min)" for h in DRAWN_HEIGHTS) + " |",
        "|---|" + "---|" * len(DRAWN_HEIGHTS),
        sep="\n",
    )
    for eps in (0.5, 1.0, 2.0):
        cells = []
        for h in DRAWN_HEIGHTS:
            accs = [
                float(
                    np.mean(
                        PrivateForest.create(ds.schema, n_trees=10, height=h, epsilon=eps)
                        .update(ds.X[tr], ds.y[tr])
                        .predict(ds.X[te])
                        == ds.y[te]
                    )
                )
                for _ in range(a.draws)
            ]
            cells.append(f"{np.mean(accs):.3f} ({min(accs):.3f})")
        print(f"| {eps:g} | " + " | ".join(cells) + " |", flush=True)
    print(f"# load at end: {subprocess.getoutput('uptime')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
