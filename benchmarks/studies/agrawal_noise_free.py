"""Why the private forest sits at the majority on Agrawal function 0: the random trees themselves, without noise.

Agrawal f0's class is ``age < 40 or age >= 60``: a tree needs two age thresholds on one path to isolate
the minority. ``PrivateForestClassifier`` at ``epsilon=inf`` (exact counts) and at epsilon 1, heights
3, 4 (the default), 5 and 8, 10,000 records (seed 42), ``--draws`` draws each; progressive accuracy
beside the majority share. Prints a table; copy it into ``results/agrawal_noise_free.log``.

    python benchmarks/studies/agrawal_noise_free.py --draws 3
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import warnings

import numpy as np
from river import evaluate, metrics
from river.datasets import synth

from streamdp.river import PrivateForestClassifier
from streamdp.river import schemas as rs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=3)
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    data = list(itertools.islice(synth.Agrawal(classification_function=0, seed=42), 10_000))
    share = float(np.mean([y for _, y in data]))
    print(f"# benchmarks/studies/agrawal_noise_free.py --draws {a.draws}; load {subprocess.getoutput('uptime')}")
    print(f"# majority share {max(share, 1 - share):.3f}")
    print("| epsilon | height | accuracy per draw |", "|---|---|---|", sep="\n")
    for eps in (float("inf"), 1.0):
        for h in (3, 4, 5, 8):
            accs = [
                evaluate.progressive_val_score(
                    data, PrivateForestClassifier(rs.agrawal_schema(), epsilon=eps, height=h), metrics.Accuracy()
                ).get()
                for _ in range(a.draws)
            ]
            print(f"| {eps:g} | {h} | {', '.join(f'{x:.3f}' for x in accs)} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
