"""The height ceiling of a growing stream model: how tall a default lets more data keep paying off.

A ``release="grow"`` model (the service's default on all-categorical schemas) starts from its trees'
roots and deepens them as released counts allow, never past the drawn height: the height is a ceiling.
This script measures what the ceiling costs on short streams and gains on long ones, in process
(``PrivateForest.grow_encoded``, the same release the service's closer makes from a window's tally):
streams of 1,000 to 1,000,000 records in 10 equal releases (10 windows), 10 trees and one prior
stump, epsilon 1, accuracy on 5,000 held-out records of the same concept, ``--draws`` draws (structure
and noise) per cell, mean (min).

Ceilings: ``half`` = ``PrivateForest.create``'s default (half the attributes, Fan et al.'s default,
lowered where a tree that tall could exceed the leaf guard); ``ceiling`` =
:func:`streamdp.forest.structure.ceiling_height` (the river classifier's default: tallest up to 8 with at most
2,048 leaves per tree); ``tall`` = tallest up to the number of attributes with at most 2**14 leaves per
tree. Streams with a known answer (river's RandomTree concept over
categorical attributes; LED with 17 irrelevant attributes and 10% noise) and UCI Nursery and
Mushroom (90% of the records streamed, 10% held out).

    python benchmarks/studies/grow_ceiling.py --draws 3 > benchmarks/results/grow_ceiling.log
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from river.datasets import synth  # noqa: E402

from streamdp import PrivateForest  # noqa: E402
from streamdp.forest.structure import ceiling_height, max_possible_leaves  # noqa: E402
from streamdp.river import schemas as rs  # noqa: E402
from streamdp.river import uci  # noqa: E402

LENGTHS = (1_000, 10_000, 100_000, 1_000_000)


def synthetic(name: str, seed: int):
    if name == "RandomTree cat8 d5":
        return synth.RandomTree(
            seed_tree=7,
            seed_sample=seed,
            n_classes=2,
            n_num_features=0,
            n_cat_features=8,
            n_categories_per_feature=3,
            max_tree_depth=5,
            first_leaf_level=2,
        ), rs.random_tree_schema(2, 0, 8, 3)
    if name == "RandomTree cat10 d7":
        return synth.RandomTree(
            seed_tree=11,
            seed_sample=seed,
            n_classes=3,
            n_num_features=0,
            n_cat_features=10,
            n_categories_per_feature=3,
            max_tree_depth=7,
            first_leaf_level=3,
        ), rs.random_tree_schema(3, 0, 10, 3)
    if name == "LED irrelevant, 10% noise":
        return synth.LED(seed=seed, noise_percentage=0.1, irrelevant_features=True), rs.led_schema(True)
    raise KeyError(name)


def encode(schema, pairs):
    X = np.array([[x[k] if k in x else x[int(k)] for k in schema.names] for x, _ in pairs], dtype=object)
    enc = schema.encode(X, np.array([y for _, y in pairs], dtype=object))
    return enc.X, enc.y


def streams(max_n: int):
    """name -> (schema, train X, train y, test X, test y, lengths)."""
    for name in ("RandomTree cat8 d5", "RandomTree cat10 d7", "LED irrelevant, 10% noise"):
        gen, schema = synthetic(name, 1)
        X, y = encode(schema, list(itertools.islice(gen, max_n)))
        Xt, yt = encode(schema, list(itertools.islice(synthetic(name, 99)[0], 5000)))
        yield name, schema, X, y, Xt, yt, [n for n in LENGTHS if n <= max_n]
    for name in ("nursery", "mushroom"):
        schema, pairs = uci.uci_stream(name)
        X, y = encode(schema, pairs)
        cut = len(y) // 10
        yield f"UCI {name}", schema, X[cut:], y[cut:], X[:cut], y[:cut], [len(y) - cut]


def ceilings(schema) -> dict:
    tall = 1
    while tall < schema.n_attributes and max_possible_leaves(schema, tall + 1) <= 2**14:
        tall += 1
    return {
        "half": PrivateForest.create(schema, n_trees=10, epsilon=1.0).height,
        "ceiling": ceiling_height(schema),
        "tall": tall,
    }


def grown_forest(schema, X, y, height: int) -> PrivateForest:
    """The stream of ``(X, y)`` grown in 10 equal releases (10 trees, one prior stump, epsilon 1)."""
    f = PrivateForest.create(schema, n_trees=10, height=height, epsilon=1.0)
    for part in np.array_split(np.arange(len(y)), 10):
        f = f.grow_encoded(X[part], y[part])
    return f


def run(schema, X, y, Xt, yt, height: int) -> tuple[float, int]:
    f = grown_forest(schema, X, y, height)
    pred = f.proba_from_leaves(f.structure.apply(Xt, schema.is_categorical)).argmax(axis=1)
    return float(np.mean(pred == yt)), f.structure.height


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=3)
    ap.add_argument("--max-n", type=int, default=LENGTHS[-1])
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    t0 = time.time()
    print(
        f"# python benchmarks/studies/grow_ceiling.py --draws {a.draws} --max-n {a.max_n}; git "
        f"{subprocess.getoutput('git rev-parse --short HEAD')}; load at start: {subprocess.getoutput('uptime')}"
    )
    print("| stream | records | majority | half: accuracy mean (min), depth | ceiling | tall |")
    print("|---|---|---|---|---|---|", flush=True)
    for name, schema, X, y, Xt, yt, lengths in streams(a.max_n):
        hs = ceilings(schema)
        majority = np.bincount(yt).max() / len(yt)
        for n in lengths:
            cells = []
            for label, h in hs.items():
                got = [run(schema, X[:n], y[:n], Xt, yt, h) for _ in range(a.draws)]
                accs = [g[0] for g in got]
                cells.append(f"h{h}: {np.mean(accs):.3f} ({min(accs):.3f}), depth {max(g[1] for g in got)}")
            print(f"| {name} | {n:,} | {majority:.3f} | " + " | ".join(cells) + " |", flush=True)
    print(f"# {time.time() - t0:.0f} s; load at end: {subprocess.getoutput('uptime')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
