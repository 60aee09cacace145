"""The river forest on the same seeded releases, read by the estimate of the checkout on PYTHONPATH.

``PrivateForestClassifier(schema, epsilon=e, seed=...)`` (seeded noise: not private, the same releases in two
checkouts) fed the training folds (``learn_encoded``, ``flush``) of 5-fold CV and scored on the test fold, on
the datasets of ``estimation_posterior``. Run once per checkout and compare the printed lines; ``one-class``
counts folds where every test record got one class other than the training majority.

    PYTHONPATH=/path/to/checkout python benchmarks/studies/river_estimate_pair.py synth-linear,uci-nursery
"""

import sys
import warnings
from pathlib import Path

import numpy as np


def main(names: list[str]) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from estimation_posterior import load

    from streamdp.river import PrivateForestClassifier

    warnings.simplefilter("ignore")
    cells = []
    for name in names:
        schema, X, y = load(name, np.random.default_rng(sum(map(ord, name))))
        perm = np.random.default_rng(3).permutation(len(y))
        for eps in (0.1, 0.5, 1.0, 2.0):
            acc, one, maj = [], 0, []
            for k, test in enumerate(np.array_split(perm, 5)):
                train = np.setdiff1d(perm, test)
                top = np.bincount(y[train]).argmax()
                model = PrivateForestClassifier(schema, epsilon=eps, seed=100 * k + int(10 * eps))
                model.learn_encoded(X[train], y[train])
                model.flush()
                pred = model.predict_proba_encoded(X[test]).argmax(axis=1)
                acc.append(float((pred == y[test]).mean()))
                one += int(len(np.unique(pred)) == 1 and pred[0] != top)
                maj.append(float((y[test] == top).mean()))
            cells.append((np.mean(acc), one, np.mean(acc) < np.mean(maj) - 0.01))
            print(f"{name} {eps} acc {np.mean(acc):.3f} one-class {one} maj {np.mean(maj):.3f}", flush=True)
    print(
        f"mean {np.mean([c[0] for c in cells]):.3f} one-class {sum(c[1] for c in cells)} "
        f"below {sum(c[2] for c in cells)} of {len(cells)}"
    )


if __name__ == "__main__":
    main(sys.argv[1].split(","))
