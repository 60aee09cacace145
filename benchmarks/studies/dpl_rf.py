"""diffprivlib RandomForestClassifier on the folds written by accuracy_rdt.py.

Runs in its own venv: diffprivlib 0.6.6 (the latest) imports ``DOUBLE`` from ``sklearn.tree._tree``,
which scikit-learn 1.9 removed ("ImportError: cannot import name 'DOUBLE'"). Tested pair (PyPI,
2026-11-23): diffprivlib 0.6.6 + scikit-learn 1.8.0 + numpy 2.4.6 (Python 3.11); the ``dpl`` extra
of pyproject.toml pins it:

    python -m venv /tmp/dpl && /tmp/dpl/bin/pip install 'diffprivlib==0.6.6' 'scikit-learn>=1.3,<1.9' numpy
    /tmp/dpl/bin/python benchmarks/studies/dpl_rf.py jobs.json out.json

Features are the ordinal category codes with declared bounds (0, arity-1),
classes are declared, max_depth = our tree height, n_estimators = our n_trees.
"""

import json
import sys
import time
import warnings

import numpy as np
import sklearn

try:
    import diffprivlib
    from diffprivlib.accountant import BudgetAccountant
    from diffprivlib.models import RandomForestClassifier
    from diffprivlib.utils import PrivacyLeakWarning
except ImportError as e:  # absent, or a scikit-learn it does not support
    sys.exit(
        f"dpl_rf.py needs diffprivlib 0.6.6 with scikit-learn < 1.9 (this python has scikit-learn "
        f"{sklearn.__version__}): {e}\n  python -m venv /tmp/dpl && /tmp/dpl/bin/pip install "
        "'diffprivlib==0.6.6' 'scikit-learn>=1.3,<1.9' numpy"
    )


def main(jobs_path, out_path):
    warnings.simplefilter("error", PrivacyLeakWarning)  # bounds and classes are declared: no leak allowed
    jobs = json.load(open(jobs_path))
    rows = []
    t0 = time.time()
    for job in jobs:
        d = np.load(job["npz"])
        X, y, folds = d["X"], d["y"], d["folds"]
        bounds = (np.zeros(X.shape[1]), np.maximum(d["arities"] - 1, 1).astype(float))
        classes = list(range(int(d["n_classes"])))
        for h in job["heights"]:
            for eps in job["epsilons"]:
                e = float("inf") if eps == "inf" else float(eps)
                for run, fold in enumerate(folds):
                    for k in np.unique(fold):
                        tr, te = fold != k, fold == k
                        clf = RandomForestClassifier(
                            n_estimators=job["n_trees"],
                            epsilon=e,
                            bounds=bounds,
                            classes=classes,
                            max_depth=h,
                            accountant=BudgetAccountant(),
                        )
                        clf.fit(X[tr], y[tr])
                        acc = float((clf.predict(X[te]) == y[te]).mean())
                        rows.append(
                            {"dataset": job["dataset"], "height": h, "eps": e, "run": run, "fold": int(k), "acc": acc}
                        )
    json.dump(
        {
            "rows": rows,
            "diffprivlib": diffprivlib.__version__,
            "sklearn": sklearn.__version__,
            "runtime_s": time.time() - t0,
        },
        open(out_path, "w"),
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
