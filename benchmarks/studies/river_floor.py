"""Where the private forest loses against the running majority, release period by release period (issue 15).

    python benchmarks/studies/river_floor.py [--draws 5] [NAME ...]
    # prints, per stream: the forest's accuracy, the accuracy of its own released class prior alone, the
    # running majority's; then per release period (records predicted while the model held r releases)
    # the records won or lost (mean over draws) by the forest and by its prior against the running majority;
    # results/river_floor.log keeps the runs quoted in river_eval.md

Progressive validation by hand (predict, then learn) over the first 10,000 records of the streams of
``river_eval.py``, ``PrivateForestClassifier`` defaults at epsilon 1 (private draws). The running
majority: the most frequent label so far (first seen on ties; nothing before the first record).
Run it with ``PYTHONPATH`` at another checkout to measure that code.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import os
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.studies.river_eval import streams  # noqa: E402
from streamdp.river import PrivateForestClassifier  # noqa: E402
from streamdp.river.schemas import schema_for  # noqa: E402

warnings.simplefilter("ignore")


def run(data: list, schema, draws: int) -> list:
    out = []
    for _ in range(draws):
        m = PrivateForestClassifier(schema, epsilon=1.0)
        seen = collections.Counter()
        forest, majority, prior, releases = [], [], [], []
        for x, y in data:
            p = m.predict_proba_one(x)
            forest.append(max(p, key=p.get) == y)
            majority.append(bool(seen) and max(seen, key=seen.get) == y)
            prior.append(m.encoder.label_values[int(np.argmax(m.forest.prior()))] == y)
            releases.append(m.n_releases)
            m.learn_one(x, y)
            seen[y] += 1
        out.append(tuple(map(np.array, (forest, majority, prior, releases))))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="*")
    ap.add_argument("--draws", type=int, default=5)
    args = ap.parse_args(argv)
    print(f"# {args.draws} draws; load {os.getloadavg()[0]:.1f} at start", flush=True)
    for name, ds in streams(10_000).items():
        if args.names and name not in args.names:
            continue
        data = list(itertools.islice(ds, 10_000))
        res = run(data, schema_for(ds), args.draws)
        acc = [r[0].mean() for r in res]
        print(
            f"== {name}: forest mean {np.mean(acc):.3f} min {min(acc):.3f} | its prior alone "
            f"{np.mean([r[2].mean() for r in res]):.3f} | running majority {res[0][1].mean():.3f}"
        )
        rel = res[0][3]
        for k in range(rel.max() + 1):
            sel = rel == k
            if sel.any():
                f = np.mean([r[0][sel].sum() for r in res])
                p = np.mean([r[2][sel].sum() for r in res])
                mj = res[0][1][sel].sum()
                print(
                    f"  releases {k:2d} | records {sel.sum():5d} | forest - majority {f - mj:+6.1f} | "
                    f"prior - majority {p - mj:+6.1f} | forest - prior {f - p:+6.1f}"
                )
    print(f"# load {os.getloadavg()[0]:.1f} at end", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
