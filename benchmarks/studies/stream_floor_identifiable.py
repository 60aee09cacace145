"""Which of stream_height_ceiling.md's floor misses could any post-processing avoid? (issue 13)

The majority class can only be kept by a model whose released numbers name it. On a stream of W
windows the prior stump's class totals carry W releases of noise (variance ``W s^2`` per total,
``s^2`` one cell's at ``epsilon / (n_trees + 1)``, the split budget of 10 trees and one stump), so the
released prior separates the top two classes with ``z = n (p1 - p2) / sqrt(2 W s^2)`` (n training
records, p1 and p2 the top two class shares: the analysis reads the true shares; the model never
does). Below z = 3 no rule reading the released counts can reliably name the majority (the random
trees' roots add little: each is about its number of leaves times noisier). Reads
results/stream_height_ceiling.json (its grow rows) and prints each setting with z < 3 or a floor miss.

    python benchmarks/studies/stream_floor_identifiable.py >> benchmarks/results/stream_floor_identifiable.log
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.studies.accuracy_height import data  # noqa: E402
from streamdp.estimation import cell_variance  # noqa: E402


def main() -> None:
    rows = json.loads((ROOT / "benchmarks" / "results" / "stream_height_ceiling.json").read_text())["rows"]
    gaps: dict[str, tuple[int, float]] = {}
    print("| dataset | eps | windows | z of the released prior | grow mean | grow min | floor (majority - 0.01) |")
    print("|---|---|---|---|---|---|---|")
    misses = hidden = 0
    for r in (r for r in rows if r["how"] == "grow"):
        name = r["dataset"]
        if name not in gaps:
            _, _, y = data(name)
            shares = np.sort(np.bincount(y) / len(y))[::-1]
            gaps[name] = (len(y) - len(y) // 3, float(shares[0] - shares[1]))
        n, gap = gaps[name]
        z = n * gap / math.sqrt(2 * r["windows"] * cell_variance("geometric", r["eps"] / 11))
        miss = r["min"] < r["majority"] - 0.01
        misses += miss
        hidden += miss and z < 3
        if miss or z < 3:
            print(
                f"| {name} | {r['eps']:g} | {r['windows']} | {z:.1f} | {r['acc']:.3f} | {r['min']:.3f} | "
                f"{'MISSED' if miss else 'kept'} |"
            )
    print(f"\n{misses} floor misses of {sum(r['how'] == 'grow' for r in rows)} settings; {hidden} of them where z < 3.")


if __name__ == "__main__":
    main()
