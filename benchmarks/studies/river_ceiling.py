"""How close random trees can come to HoeffdingTree on river's streams at all: the forest without noise.

Issue 15 asks for the private forest within 10 points of ``HoeffdingTreeClassifier`` on at least half of
``river_eval.py``'s nine streams. This script measures the structural ceiling of that goal:
``PrivateForestClassifier`` at ``epsilon=inf`` (exact counts: no noise, the same data-independent random
trees) at its default height and at taller heights and more trees, ``--draws`` draws each (the best draw
is reported), beside HoeffdingTree and the same settings at epsilon 1 (mean over the draws). A stream
where even the best noise-free forest is more than 10 points below HoeffdingTree cannot meet the goal
with this family of models at any epsilon; one where only the noise-free forest passes shows what the
noise of epsilon 1 on these few records costs.

    python benchmarks/studies/river_ceiling.py --draws 3 > benchmarks/results/river_ceiling.log
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from river import evaluate, metrics, tree  # noqa: E402

from benchmarks.studies.river_eval import streams  # noqa: E402
from streamdp.river import PrivateForestClassifier  # noqa: E402
from streamdp.river.schemas import schema_for  # noqa: E402

#: (label, keyword arguments) of the noise-free forests.
SETTINGS = [
    ("default", {}),
    ("h6", {"height": 6}),
    ("h8", {"height": 8}),
    ("h6 x30 trees", {"height": 6, "n_trees": 30}),
]


def score(data, model) -> float:
    return evaluate.progressive_val_score(data, model, metrics.Accuracy()).get()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--draws", type=int, default=2)
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    print(
        f"# python benchmarks/studies/river_ceiling.py --n {a.n} --draws {a.draws}; load at start: "
        f"{subprocess.getoutput('uptime')}"
    )
    print(
        "| stream | HoeffdingTree - 0.10 | "
        + " | ".join(f"{s}: no noise (best) / eps 1 (mean)" for s, _ in SETTINGS)
        + " | no-noise forest within 10 pts of HT | eps-1 forest within 10 pts |"
    )
    print("|---|---|" + "---|" * len(SETTINGS) + "---|---|", flush=True)
    met = met_private = 0
    for name, ds in streams(a.n).items():
        schema, data = schema_for(ds), list(ds.take(a.n))
        ht = score(data, tree.HoeffdingTreeClassifier())
        best = [
            max(score(data, PrivateForestClassifier(schema, epsilon=float("inf"), **kw)) for _ in range(a.draws))
            for _, kw in SETTINGS
        ]
        private = [
            np.mean([score(data, PrivateForestClassifier(schema, epsilon=1.0, **kw)) for _ in range(a.draws)])
            for _, kw in SETTINGS
        ]
        ok, ok_private = max(best) >= ht - 0.10, max(private) >= ht - 0.10
        met, met_private = met + ok, met_private + ok_private
        print(
            f"| {name} | {ht - 0.10:.3f} | "
            + " | ".join(f"{b:.3f} / {p:.3f}" for b, p in zip(best, private))
            + f" | {'yes' if ok else 'NO'} | {'yes' if ok_private else 'no'} |",
            flush=True,
        )
    print(
        f"# within 10 points of HoeffdingTree: the best noise-free forest on {met} of {len(streams(a.n))} streams, "
        f"the best epsilon-1 setting's mean on {met_private}; load at end: {subprocess.getoutput('uptime')}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
