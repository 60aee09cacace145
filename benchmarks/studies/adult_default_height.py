"""Adult's one-shot fit at the leaf-budget default height against height 7 (half its attributes, the default
before the leaf budget), on the same hold-out splits.

    python benchmarks/studies/adult_default_height.py [--splits 3]

Writes ``results/adult_default_height.log``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.common import machine, sh  # noqa: E402
from streamdp import PrivateForest  # noqa: E402
from streamdp.records.datasets import load  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--splits", type=int, default=3)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    ds = load("adult")
    enc = ds.schema.encode(ds.X, ds.y)
    X, y = enc.X, enc.y
    rng = np.random.default_rng(5)
    m = machine()
    lines = [
        f"# python benchmarks/studies/adult_default_height.py --splits {args.splits}; git {sh('git rev-parse --short HEAD')}; "
        f"{m['nproc']} x {m['cpu']}; load at start: {sh('uptime')}",
        "# one-shot fit (pruned), 10 trees, hold-out third; mean (min) over the splits; majority share "
        f"{(y == np.bincount(y).argmax()).mean():.3f}",
        "| epsilon | default height (drawn) | default: accuracy | default: blob MB, create s | height 7: accuracy "
        "| height 7: blob MB, create s |",
        "|---|---|---|---|---|---|",
    ]
    splits = []
    for _ in range(args.splits):
        perm = rng.permutation(len(y))
        splits.append((perm[len(y) // 3 :], perm[: len(y) // 3]))
    for eps in (0.5, 1.0, 2.0):
        acc: dict = {None: [], 7: []}
        size: dict = {None: [], 7: []}
        secs: dict = {None: [], 7: []}
        heights = []
        for tr, te in splits:
            for h in (None, 7):
                t = time.perf_counter()
                f = PrivateForest.create(ds.schema, height=h, epsilon=eps)
                secs[h].append(time.perf_counter() - t)
                size[h].append(len(f.to_bytes()) / 1e6)
                if h is None:
                    heights.append(f.height)
                f.fit_encoded(X[tr], y[tr])
                p = f.proba_from_leaves(f.structure.apply(X[te], ds.schema.is_categorical)).argmax(axis=1)
                acc[h].append(float((p == y[te]).mean()))

        def cell(h):
            return f"{np.mean(acc[h]):.3f} ({min(acc[h]):.3f})", f"{np.mean(size[h]):.1f}, {np.mean(secs[h]):.2f}"

        a0, s0 = cell(None)
        a7, s7 = cell(7)
        lines.append(f"| {eps:g} | {sorted(set(heights))} | {a0} | {s0} | {a7} | {s7} |")
        print(lines[-1], flush=True)
    lines.append(f"# load at end: {sh('uptime')}")
    out = Path(__file__).resolve().parents[1] / "results" / "adult_default_height.log"
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
