"""Multi-draw comparisons of two PrivateForestClassifier choices in river's own loop (issue 15).

    python benchmarks/river_variants.py stump    [--draws 4] [--only NAME ...]
    python benchmarks/river_variants.py variance [--draws 5] [--only NAME ...]
    # prints one line per stream and variant; results/river_variants.log keeps the runs quoted in
    # river_eval.md

``stump``: ``prior_trees=0`` against the default ``prior_trees=1``. ``variance``: estimation
weighing the counts by one release's noise variance (what the code did before
``PrivateForest.noise_variance``; reproduced here by overriding the property) against the
accumulated variance of the releases (the code now). Progressive validation
(``river.evaluate.progressive_val_score``, accuracy) over the first 10,000 records of the
streams of ``river_eval.py``, epsilon 1, mean and minimum over ``--draws`` private draws.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from river import evaluate, metrics  # noqa: E402
from river_eval import streams  # noqa: E402

import streamdp.forest as forest_module  # noqa: E402
from streamdp.river import PrivateForestClassifier  # noqa: E402
from streamdp.river.schemas import schema_for  # noqa: E402

warnings.simplefilter("ignore")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("compare", choices=("stump", "variance"))
    ap.add_argument("--draws", type=int, default=4)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args(argv)
    accumulated = forest_module.PrivateForest.noise_variance
    one_release = property(lambda self: np.full(self.structure.n_trees, self.cell_variance), accumulated.fset)
    for name, ds in streams(args.n).items():
        if args.only and name not in args.only:
            continue
        data = list(itertools.islice(ds, args.n))
        schema = schema_for(ds)
        if args.compare == "stump":
            variants = [("prior_trees=0", {"prior_trees": 0}, accumulated), ("prior_trees=1", {}, accumulated)]
        else:
            variants = [("one-release variance", {}, one_release), ("accumulated variance", {}, accumulated)]
        for label, kw, prop in variants:
            forest_module.PrivateForest.noise_variance = prop
            accs = [evaluate.progressive_val_score(data, PrivateForestClassifier(schema, epsilon=1.0, **kw),
                                                   metrics.Accuracy()).get() for _ in range(args.draws)]
            print(f"{name} | {label} | mean {np.mean(accs):.3f} | min {min(accs):.3f}", flush=True)
        forest_module.PrivateForest.noise_variance = accumulated
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
