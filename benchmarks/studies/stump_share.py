"""Decision 027's study: the sized fit's stumps without decision 019's second release, paired on the same splits.

Run at git 6d83282, before 027: the library's fit (``default``) still released the stumps twice; ``notopup``
patches in what 027 adopted (the stumps released once at ``e / (T + P)``, each kept tree given
``(e - P e / (T + P)) / k``). On a later commit both columns are 027's fit. Results: ``results/stump_share.md``.

    cd benchmarks/studies
    python stump_share.py run SETS REPEATS EPSILONS OUT.json     # SETS, EPSILONS: comma lists
    python stump_share.py summary OUT.json [...]
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tree_vote_explore as tve  # noqa: E402

KEYS = ("majority", "default", "notopup", "trees")


def _sized_once(orig):
    """``Growing._sized`` with the stumps released once and the kept trees given what they left."""
    from streamdp.estimation.rule import cell_variance
    from streamdp.forest import pruning
    from streamdp.forest.growth import grown_release
    from streamdp.forest.sizing import trees_for_signal
    from streamdp.release.noisy import noisy_node

    def sized(self, X, y, rng):
        if not (self.trees_by_signal and self.budget == "split" and self.mechanism != "kanon"):
            return orig(self, X, y, rng)
        self.n_releases = 0
        T, P = self.n_trees, self.prior_trees
        exact = np.stack([np.bincount(y, minlength=self.schema.n_classes)] * P)[:, None, :]
        e = self.epsilon_per_tree * (T + P)
        first = noisy_node(exact, e / (T + P), self.mechanism, rng)
        k = trees_for_signal(float(first.sum(axis=(1, 2)).mean()), e, T)
        if k < T:
            self.__dict__.setdefault("_all_drawn", self.drawn)
            self.drawn = self.structure = self.drawn.rows(np.r_[0:k, T : T + P])
            self._forget_cells()
        old = self._counts_share
        self._counts_share = old * (k + P) * T / (k * (T + P))  # each kept tree: (e - P e / (T + P)) / k
        try:
            self._counts = np.zeros(self.shape, dtype=self._counts.dtype)
            released = (first, cell_variance(self.mechanism, e / (T + P)))
            return self._released(
                *grown_release(self, self._tallies(X, y, rng)[0], exact, rng, pruning.PRUNE_PROBE, released)
            )
        finally:
            self._counts_share = old

    return sized


def run(names: list[str], reps: int, epsilons: tuple[float, ...], out: str) -> None:
    from streamdp import PrivateForest
    from streamdp.forest import growing

    orig = growing.Growing._sized
    tve.EPS = epsilons
    rows = []
    try:
        for s, X, y, tr, te, e, row in tve.cells(names, reps):
            growing.Growing._sized = orig
            row["default"] = tve.accuracy(PrivateForest.create(s, epsilon=e).fit_encoded(X[tr], y[tr]), X[te], y[te])
            growing.Growing._sized = _sized_once(orig)
            f = PrivateForest.create(s, epsilon=e).fit_encoded(X[tr], y[tr])
            row["notopup"], row["trees"] = tve.accuracy(f, X[te], y[te]), f.n_trees
            rows.append(dict(row))
    finally:
        growing.Growing._sized = orig
    json.dump(rows, open(out, "w"))


def summary(paths: list[str]) -> None:
    """Per cell: means, the paired difference and its standard error; then over the cells."""
    cells = collections.defaultdict(list)
    for r in (r for p in paths for r in json.load(open(p))):
        cells[(r["dataset"], r["eps"])].append(r)
    diffs, below = [], {"default": 0, "notopup": 0}
    for (name, eps), rs in cells.items():
        m = {c: np.mean([r[c] for r in rs]) for c in KEYS}
        d = np.array([r["notopup"] - r["default"] for r in rs])
        diffs.append(d.mean())
        for c in below:
            below[c] += int(m[c] < m["majority"] - 0.01)
        print(
            f"{name:26s} {eps:4g} n{len(rs):3d} k {m['trees']:.1f} maj {m['majority']:.3f} def {m['default']:.3f} "
            f"notopup {m['notopup']:.3f}  d {d.mean():+.3f} ({d.std(ddof=1) / np.sqrt(len(d)):.3f})"
        )
    print(
        f"mean {np.mean(diffs):+.4f} worst {min(diffs):+.3f} cells<-0.01 {sum(x < -0.01 for x in diffs)} "
        f">+0.01 {sum(x > 0.01 for x in diffs)} of {len(diffs)}; below the majority share - 0.01: {below}"
    )


if __name__ == "__main__":
    cmd, *rest = sys.argv[1:]
    if cmd == "run":
        run(rest[0].split(","), int(rest[1]), tuple(float(e) for e in rest[2].split(",")), rest[3])
    else:
        summary(rest)
