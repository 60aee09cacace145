"""How much of the stream the k-anonymity threshold keeps, by batch size.

Each batch's sampled leaf counts below k are zeroed before the merge, so small
batches lose most records. Nursery (12,960 rows), 10 trees, height 4, k=5,
beta=0.1 and epsilon=10 (the forest total; the k-threshold needs
epsilon/tree >= -ln(1-beta)). Reports the fraction of sampled (record, tree)
pairs that reach the model and the accuracy on the training stream.

Run: python benchmarks/studies/kanon_batch.py  (writes benchmarks/results/kanon_batch.md/.json)
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time

import numpy as np

from streamdp import PrivateForest
from streamdp.records.datasets import load

OUT = os.path.join(os.path.dirname(__file__), "..", "results")


def main() -> None:
    ds = load("nursery")
    rng = np.random.default_rng(0)
    order = rng.permutation(len(ds.y))
    X, y = ds.X[order], ds.y[order]
    k, beta, eps, T, h = 5, 0.1, 10.0, 10, 4
    rows = []
    for B in (100, 300, 1000, 3000, 12960):
        kept, acc = [], []
        for rep in range(3):
            f = PrivateForest.create(ds.schema, n_trees=T, height=h, epsilon=eps, mechanism="kanon", k=k, beta=beta)
            for s in range(0, len(y), B):
                f.update(X[s : s + B], y[s : s + B])
            kept.append(float(f.counts.sum()) / (beta * len(y) * T))
            acc.append(float(np.mean(f.predict(X) == y)))
        rows.append({"batch_size": B, "kept_fraction": float(np.mean(kept)), "accuracy": float(np.mean(acc))})
        print(rows[-1], flush=True)
    machine = {
        "uname": " ".join(platform.uname()),
        "nproc": os.cpu_count(),
        "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    with open(os.path.join(OUT, "kanon_batch.json"), "w") as fh:
        json.dump(
            {"machine": machine, "k": k, "beta": beta, "epsilon": eps, "n_trees": T, "height": h, "rows": rows},
            fh,
            indent=1,
        )
    lines = [
        "# k-anonymity mode: what the threshold keeps, by batch size (benchmarks/studies/kanon_batch.py)",
        "",
        f"Nursery, {T} trees, height {h}, k={k}, beta={beta}, epsilon={eps}; 3 repeats; {machine['when']}; "
        f"`{machine['uptime']}`.",
        "",
        "kept = released mass / expected sampled mass (beta x records x trees).",
        "",
        "| batch size | kept fraction | training accuracy |",
        "|---|---|---|",
    ]
    lines += [f"| {r['batch_size']:,} | {r['kept_fraction']:.3f} | {r['accuracy']:.3f} |" for r in rows]
    with open(os.path.join(OUT, "kanon_batch.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
