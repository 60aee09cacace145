"""Trees grown release by release (``PrivateForest.grow_encoded``) beside updates of the drawn trees, on river streams.

An in-process model of ``PrivateForestClassifier``'s schedule without its prior phase: batches of
100, 200, 400, 800, then 1,000 records; each batch is scored by the forest as it stands, then released
(``update``: one noisy delta merged into the drawn trees; ``grow``: one release that may deepen trees
that start from their roots, :mod:`streamdp.forest.growth`); the first batch scores a fixed guess. 10 trees,
one prior stump, epsilon 1, ``--draws`` draws (structure and noise) per setting; heights: the river
classifier's default (:func:`streamdp.river.forest.default_height`) and 4. Then the classifier
itself (prior phase included) on five categorical streams in river's own loop, growing and not,
beside river's HoeffdingTree, with samples/s. Prints tables; append them to ``results/river_grow.log`` by hand.

    python benchmarks/studies/river_grow.py --draws 6

``--class-scaling`` instead pairs the pruning bar's class scaling (``pruning.CLASS_SCALED``: ``"none"`` against
the library's ``"categorical"``) on the multi-class streams (LED, Nursery): the grow rows, then the classifier on
LED, ``--draws`` draws per rule, the difference with its standard error.

    python benchmarks/studies/river_grow.py --class-scaling --draws 12    # >> results/river_grow.log
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import warnings

import numpy as np
import pandas as pd
from river import datasets
from river.datasets import synth

from streamdp import PrivateForest
from streamdp.river import schemas as rs
from streamdp.river import uci
from streamdp.river.forest import default_height

STREAMS = {
    "Phishing": lambda: (list(datasets.Phishing()), rs.phishing_schema()),
    "Bananas": lambda: (list(datasets.Bananas()), rs.bananas_schema()),
    "SEA": lambda: (list(itertools.islice(synth.SEA(seed=42), 10_000)), rs.sea_schema()),
    "Hyperplane": lambda: (
        list(itertools.islice(synth.Hyperplane(seed=42, n_features=10), 10_000)),
        rs.hyperplane_schema(),
    ),
    "Agrawal f0": lambda: (
        list(itertools.islice(synth.Agrawal(classification_function=0, seed=42), 10_000)),
        rs.agrawal_schema(),
    ),
    # categorical streams nobody tuned on (added after the five above were measured)
    "STAGGER": lambda: (list(itertools.islice(synth.STAGGER(seed=42), 10_000)), rs.stagger_schema()),
    "LED": lambda: (list(itertools.islice(synth.LED(seed=42), 10_000)), rs.led_schema()),
    **{
        f"UCI {n}": (lambda n=n: tuple(reversed(uci.uci_stream(n))))
        for n in ("nursery", "mushroom", "congressional-voting", "tic-tac-toe")
    },
    # known answers: river's RandomTree concept over categorical attributes only (added last)
    **{
        f"RandomTree cat{c} d{d}": (
            lambda c=c, d=d: (
                list(
                    itertools.islice(
                        synth.RandomTree(
                            seed_tree=7,
                            seed_sample=8,
                            n_classes=2,
                            n_num_features=0,
                            n_cat_features=c,
                            n_categories_per_feature=3,
                            max_tree_depth=d,
                            first_leaf_level=2,
                        ),
                        10_000,
                    )
                ),
                rs.random_tree_schema(2, 0, c, 3),
            )
        )
        for c, d in ((6, 4), (8, 5))
    },
}


def progressive(schema, X: np.ndarray, y: np.ndarray, height: int, mode: str) -> tuple[float, int]:
    """Accuracy over the stream (each batch scored before it is released) and the final height."""
    sizes = [100]
    while sum(sizes) < len(y):
        sizes.append(min(2 * sizes[-1], 1000))
    bounds = np.minimum(np.cumsum([0] + sizes), len(y))
    f = PrivateForest.create(schema, n_trees=10, height=height, epsilon=1.0)
    right = 0
    for a, b in zip(bounds[:-1], bounds[1:]):
        if a == 0:
            right += int((y[a:b] == 0).sum())
        else:
            leaves = f.structure.apply(X[a:b], schema.is_categorical)
            right += int((f.proba_from_leaves(leaves).argmax(axis=1) == y[a:b]).sum())
        if mode == "grow":
            f.grow_encoded(X[a:b], y[a:b])
        else:
            f.merge(f.noisy_delta_encoded(X[a:b], y[a:b]))
    return right / len(y), f.height


#: The streams of the classifier section (the river classifier itself, beside HoeffdingTree).
CLASSIFIER_STREAMS = ("Phishing", "LED", "UCI congressional-voting", "RandomTree cat6 d4", "RandomTree cat8 d5")


def classifier_rows(draws: int, only: set | None) -> list[str]:
    """The classifier itself (prior phase included) in river's own loop, growing (the default on these
    all-categorical schemas) and on the drawn trees, beside river's HoeffdingTree (its categorical attributes
    declared nominal): accuracy mean (min, max) and samples/s (medians)."""
    import time

    from river import evaluate, metrics, tree

    from streamdp.river import PrivateForestClassifier

    def run(data, make) -> tuple[float, float]:
        t = time.perf_counter()
        acc = evaluate.progressive_val_score(data, make(), metrics.Accuracy()).get()
        return acc, len(data) / (time.perf_counter() - t)

    out = [
        "",
        f"# PrivateForestClassifier, defaults, progressive_val_score, {draws} draws each",
        "| stream | records | grow=None (grows): mean (min, max), samples/s | grow=False: mean (min, max), "
        "samples/s | HoeffdingTree, samples/s |",
        "|---|---|---|---|---|",
    ]
    for name in CLASSIFIER_STREAMS:
        if only and name not in only:
            continue
        data, schema = STREAMS[name]()
        cells = []
        for grow in (None, False):
            got = [run(data, lambda: PrivateForestClassifier(schema, grow=grow)) for _ in range(draws)]
            accs, rate = [g[0] for g in got], [g[1] for g in got]
            cells.append(f"{np.mean(accs):.3f} ({min(accs):.3f}, {max(accs):.3f}), {np.median(rate) / 1e3:.0f} k/s")
        nominal = [
            a.name
            for a in schema.attributes
            if a.name in schema.names and schema.is_categorical[schema.names.index(a.name)]
        ]
        ht, ht_rate = run(data, lambda: tree.HoeffdingTreeClassifier(nominal_attributes=nominal))
        out.append(f"| {name} | {len(data):,} | {cells[0]} | {cells[1]} | {ht:.3f}, {ht_rate / 1e3:.0f} k/s |")
    return out


def class_scaling_rows(draws: int) -> list[str]:
    """``--class-scaling``: the scaled bar against the unscaled one on the multi-class streams."""
    from river import evaluate, metrics

    from streamdp.forest import pruning
    from streamdp.river import PrivateForestClassifier

    def paired(label: str, run) -> str:
        got = {}
        for rule in ("none", "categorical"):
            pruning.CLASS_SCALED = rule
            got[rule] = np.array([run() for _ in range(draws)])
        pruning.CLASS_SCALED = "categorical"
        d = got["categorical"].mean() - got["none"].mean()
        se = np.sqrt((got["categorical"].var(ddof=1) + got["none"].var(ddof=1)) / draws)
        return f"| {label} | {got['none'].mean():.3f} | {got['categorical'].mean():.3f} | {d:+.3f} +- {se:.3f} |"

    out = [
        f"# class scaling of the pruning bar, {draws} draws per rule",
        "| stream | unscaled | scaled at categorical splits | difference +- se |",
        "|---|---|---|---|",
    ]
    for name in ("LED", "UCI nursery"):
        data, schema = STREAMS[name]()
        X = pd.DataFrame([x for x, _ in data])
        X.columns = [str(c) for c in X.columns]
        enc = schema.encode(X[[at.name for at in schema.attributes]], pd.Series([t for _, t in data]))
        for h in sorted({default_height(schema), 4}, reverse=True):
            out.append(paired(f"{name}, grow, height {h}", lambda: progressive(schema, enc.X, enc.y, h, "grow")[0]))
            print(out[-1], flush=True)
    data, schema = STREAMS["LED"]()
    out.append(
        paired(
            "LED, PrivateForestClassifier, progressive_val_score",
            lambda: evaluate.progressive_val_score(data, PrivateForestClassifier(schema), metrics.Accuracy()).get(),
        )
    )
    print(out[-1], flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=6)
    ap.add_argument("--only", default=None, help="comma-separated stream names (default: all)")
    ap.add_argument("--class-scaling", action="store_true", help="pair the pruning bar's class scaling instead")
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    if a.class_scaling:
        print(
            f"# benchmarks/studies/river_grow.py --class-scaling --draws {a.draws}; git "
            f"{subprocess.getoutput('git rev-parse --short HEAD')}; load {subprocess.getoutput('uptime')}"
        )
        class_scaling_rows(a.draws)
        print(f"# load at end {subprocess.getoutput('uptime')}")
        return 0
    print(f"# benchmarks/studies/river_grow.py --draws {a.draws}; load {subprocess.getoutput('uptime')}")
    print("| stream | records | majority | height | update: mean (min) | grow: mean (min), final height |")
    print("|---|---|---|---|---|---|")
    for name, make in STREAMS.items():
        if a.only and name not in a.only.split(","):
            continue
        data, schema = make()
        X = pd.DataFrame([x for x, _ in data])
        X.columns = [str(c) for c in X.columns]
        enc = schema.encode(X[[at.name for at in schema.attributes]], pd.Series([t for _, t in data]))
        maj = np.bincount(enc.y).max() / len(enc.y)
        for h in sorted({default_height(schema), 4}, reverse=True):
            got = {m: [progressive(schema, enc.X, enc.y, h, m) for _ in range(a.draws)] for m in ("update", "grow")}
            u = [r[0] for r in got["update"]]
            g = [r[0] for r in got["grow"]]
            print(
                f"| {name} | {len(enc.y):,} | {maj:.3f} | {h} | {np.mean(u):.3f} ({min(u):.3f}) | "
                f"{np.mean(g):.3f} ({min(g):.3f}), {max(r[1] for r in got['grow'])} |",
                flush=True,
            )
    print("\n".join(classifier_rows(a.draws, set(a.only.split(",")) if a.only else None)), flush=True)
    print(f"# load at end {subprocess.getoutput('uptime')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
