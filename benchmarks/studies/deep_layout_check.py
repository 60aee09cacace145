"""Issue #33, Breast Cancer's low-epsilon cells: do deeper trees of diffprivlib's layout (disjoint budget, hard votes)
lift the numeric sets, where ``low_signal_layout.py`` measured heights 3-5 only? Results:
``results/deep_layout_check.log``.

Every cell (dataset, CV split, epsilon) fits, on the same training folds (paired): ``default``
(``PrivateForest.create(s, epsilon=e).fit``) and ``djH`` for H = 5, 7, 9: 10 random trees of height H, each on its
tenth of the records at the whole ``e`` (disjoint budget), unpruned, no stump, no threshold share; each leaf votes
its noisy counts' argmax, ties (an empty leaf's noise included) broken at random, and the trees' hard votes too.

    python benchmarks/studies/deep_layout_check.py NAMES REPEATS EPS OUT.json
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tree_vote_explore as tve  # noqa: E402

HEIGHTS = (5, 7, 9)


def deep_vote(s, e: float, X, y, Xte, height: int, rng) -> np.ndarray:
    """Predicted label codes of the ``dj{height}`` layout (module docstring)."""
    from streamdp import PrivateForest

    f = PrivateForest.create(
        s, n_trees=10, height=height, epsilon=e, budget="disjoint", prior_trees=0, threshold_share=0
    ).fit_encoded(X, y, prune=False)
    T, L, C = f.n_trees, f.structure.max_leaves, s.n_classes
    noisy = np.asarray(f.counts[:T], dtype=float).reshape(T * L, C)
    label = (noisy + 1e-3 * rng.random(noisy.shape)).argmax(1)
    leaves = f.structure.apply(Xte, s.is_categorical)[:, :T]
    votes = tve._hard(label[leaves + np.arange(T) * L], C, 0)
    return (votes + 1e-3 * rng.random(votes.shape)).argmax(1)


def main(names: list[str], reps: int, eps: list[float], out: str) -> None:
    from streamdp import PrivateForest

    warnings.simplefilter("ignore")
    rng = np.random.default_rng()
    rows = []
    for name in names:
        s, X, y, srng = tve.load(name)
        for i, (tr, te) in enumerate(tve.splits(len(y), reps, srng)):
            for e in eps:
                row = {"dataset": name, "split": i, "eps": e}
                f = PrivateForest.create(s, epsilon=e).fit_encoded(X[tr], y[tr])
                row["default"], row["k"] = tve.accuracy(f, X[te], y[te]), f.n_trees
                for h in HEIGHTS:
                    row[f"dj{h}"] = float((deep_vote(s, e, X[tr], y[tr], X[te], h, rng) == y[te]).mean())
                rows.append(row)
        Path(out).write_text(json.dumps(rows))
        for e in eps:
            r = [x for x in rows if x["dataset"] == name and x["eps"] == e]
            d = np.array([x["default"] for x in r])
            cols = []
            for h in HEIGHTS:
                diff = np.array([x[f"dj{h}"] - x["default"] for x in r])
                cols.append(f"dj{h} {diff.mean():+.3f} ({diff.std() / np.sqrt(len(r)):.3f})")
            k = np.mean([x["k"] for x in r])
            print(f"{name:22s} e={e:<5g} default {d.mean():.3f} k {k:.1f} | {' '.join(cols)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1].split(","), int(sys.argv[2]), [float(v) for v in sys.argv[3].split(",")], sys.argv[4])
