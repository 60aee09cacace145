"""``TREES_PER_SIGNAL`` after decision 027 (issue #33): the sized fit's tree count rule, paired on the same splits.

Decision 019 tuned ``TREES_PER_SIGNAL`` (``k = round(sqrt(n e) / c)`` trees kept, :mod:`streamdp.forest.sizing`)
while the stumps were released twice; decision 027 gives each kept tree ``(e - P e / (T + P)) / k`` instead.
Columns (each its own default fit on the same training folds, :func:`tree_vote_explore.cells`): ``c2`` ``c2.5``
``c3`` (the default) ``c3.5`` ``c4`` ``c5``: the constant ``c``; ``f2``: ``c`` 3 with at least 2 trees; ``l4``:
``c`` 4 where ``c`` 3 keeps 3 trees or fewer (two other rules at low signal). ``k...``: the trees each kept.
Results: ``results/sizing_retune.md`` and ``.log``.

    cd benchmarks/studies
    python sizing_retune.py run SETS REPEATS EPSILONS OUT.json [VARIANTS]   # comma lists
    python sizing_retune.py summary OUT.json[,...] [DPL.json[,...]]        # DPL: tree_vote_explore.py dpl
"""

from __future__ import annotations

import collections
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tree_vote_explore as tve  # noqa: E402

BASE = "c3"
VARIANTS = ("c2", "c2.5", "c3", "c4", "c5", "f2", "l4")


def _rule(variant: str, original):
    """The tree count rule of a variant, over the library's ``original`` (which reads ``TREES_PER_SIGNAL``)."""
    import streamdp.forest.sizing as sizing

    def rule(n: float, epsilon: float, most: int) -> int:
        if variant == "f2":
            sizing.TREES_PER_SIGNAL = 3.0
            return max(min(2, most), original(n, epsilon, most))
        if variant == "l4":
            sizing.TREES_PER_SIGNAL = 3.0
            k = original(n, epsilon, most)
            sizing.TREES_PER_SIGNAL = 4.0
            return k if k > 3 else original(n, epsilon, most)
        sizing.TREES_PER_SIGNAL = float(variant[1:])
        return original(n, epsilon, most)

    return rule


def run(names: list[str], reps: int, epsilons: tuple[float, ...], out: str, variants=VARIANTS) -> None:
    import streamdp.forest.sizing as sizing
    from streamdp import PrivateForest

    kept_c, kept_rule = sizing.TREES_PER_SIGNAL, sizing.trees_for_signal
    tve.EPS = epsilons
    rows = []
    try:
        for s, X, y, tr, te, e, row in tve.cells(names, reps):
            for v in variants:
                sizing.trees_for_signal = _rule(v, kept_rule)
                f = PrivateForest.create(s, epsilon=e).fit_encoded(X[tr], y[tr])
                row[v], row[f"k{v}"] = tve.accuracy(f, X[te], y[te]), f.n_trees
            rows.append(dict(row))
    finally:
        sizing.TREES_PER_SIGNAL, sizing.trees_for_signal = kept_c, kept_rule
    json.dump(rows, open(out, "w"))


def summary(paths: str, dpl_paths: str = "") -> None:
    """Per cell: the base's mean, each variant's paired difference from it (standard error), the trees kept;
    then per variant over the cells: mean difference, cells beyond +-0.01 and beyond 2 standard errors, cells
    below the majority share - 0.01."""
    rows = [r for p in paths.split(",") for r in json.load(open(p))]
    dpl = [r for p in dpl_paths.split(",") if p for r in json.load(open(p))]
    variants = [v for v in rows[0] if v[0] in "cfl" and v[1:2].isdigit()]
    others = [v for v in variants if v != BASE]
    cells = collections.defaultdict(list)
    for r in rows:
        cells[(r["dataset"], r["eps"])].append(r)
    print(f"{'dataset':24s} {'eps':>4s} {'n':>3s} {'maj':>5s} {'dpl':>5s} {BASE:>5s}", end="")
    print("".join(f" {'d' + v:>14s}" for v in others), " trees kept", " ".join(variants))
    agg = {v: [] for v in variants}
    for (name, eps), rs in cells.items():
        mj = np.mean([r["majority"] for r in rs])
        d = [x["acc"] for x in dpl if x["dataset"] == name and math.isclose(x["epsilon"], eps)]
        base = np.array([r[BASE] for r in rs])
        line = f"{name[:24]:24s} {eps:4g} {len(rs):3d} {mj:5.3f} {np.mean(d) if d else np.nan:5.3f} {base.mean():5.3f}"
        for v in variants:
            diff = np.array([r[v] for r in rs]) - base
            se = diff.std(ddof=1) / np.sqrt(len(diff)) if len(diff) > 1 else np.nan
            m = float(np.mean([r[v] for r in rs]))
            agg[v].append((diff.mean(), se, m, mj, np.mean(d) if d else np.nan))
            if v != BASE:
                line += f" {diff.mean():+7.3f} ({se:.3f})"
        print(line, "", " ".join(f"{np.mean([r['k' + v] for r in rs]):4.1f}" for v in variants))
    print(f"\nover {len(cells)} cells: mean difference from {BASE}; cells < -0.01 / > +0.01; of those beyond 2 s.e.;")
    print("cells below the majority share - 0.01; mean accuracy; mean minus diffprivlib")
    for v in variants:
        a = np.array(agg[v])
        dd, se = a[:, 0], a[:, 1]
        print(
            f"{v:5s} d {dd.mean():+.4f}  worst {dd.min():+.3f} best {dd.max():+.3f}  "
            f"<-0.01 {int((dd < -0.01).sum())} >+0.01 {int((dd > 0.01).sum())}  "
            f"sig- {int((dd < -2 * se).sum())} sig+ {int((dd > 2 * se).sum())}  "
            f"below-floor {int((a[:, 2] < a[:, 3] - 0.01).sum())}  mean {a[:, 2].mean():.4f}  "
            f"vs dpl {np.nanmean(a[:, 2] - a[:, 4]) if dpl else np.nan:+.4f}"
        )
    print(f"\nmean difference from {BASE} over every split of an epsilon (standard error), then over all")
    for v in others:
        line = f"{v:5s}"
        for eps in sorted({r["eps"] for r in rows}):
            d = np.array([r[v] - r[BASE] for r in rows if r["eps"] == eps])
            line += f"  {eps:g}: {d.mean():+.4f} ({d.std(ddof=1) / np.sqrt(len(d)):.4f})"
        d = np.array([r[v] - r[BASE] for r in rows])
        print(line + f"  all: {d.mean():+.4f} ({d.std(ddof=1) / np.sqrt(len(d)):.4f})")


if __name__ == "__main__":
    cmd, *rest = sys.argv[1:]
    if cmd == "run":
        vs = tuple(rest[4].split(",")) if len(rest) > 4 else VARIANTS
        run(rest[0].split(","), int(rest[1]), tuple(float(e) for e in rest[2].split(",")), rest[3], vs)
    else:
        summary(*rest)
