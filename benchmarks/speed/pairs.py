"""Our operations beside the plain way of doing the same work without privacy, one :class:`Pair` each.

Every function builds its data once (fixed seeds, synthetic records) and returns the two callables the runner
times in the same rounds; the runner reports their ratio. Baselines are scikit-learn's forests, numpy's own
random generator, msgpack of the raw arrays and river's Hoeffding tree.
"""

from __future__ import annotations

import itertools

import msgpack
import numpy as np

from benchmarks.registry import Pair
from streamdp.forest.model import PrivateForest
from streamdp.forest.tally import tally
from streamdp.privacy.noise import geometric_noise
from streamdp.privacy.secure_random import SecureRandom
from streamdp.records.schema import Schema


def synthetic_schema(kind: str, n_attributes: int = 16) -> Schema:
    """``numeric`` (bounds [0, 1]), ``binary`` (two values each) or ``mixed`` (alternating) attributes, two classes."""
    attrs: list[dict] = []
    for j in range(n_attributes):
        if kind == "binary" or (kind == "mixed" and j % 2 == 0):
            attrs.append({"name": f"a{j}", "type": "categorical", "values": [0, 1, 2] if kind == "mixed" else [0, 1]})
        else:
            attrs.append({"name": f"a{j}", "type": "numeric", "min": 0.0, "max": 1.0})
    return Schema.from_dict({"attributes": attrs, "label": {"name": "y", "values": [0, 1]}})


def synthetic_records(schema: Schema, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` raw records of ``schema`` (uniform values) and their labels."""
    rng = np.random.default_rng(seed)
    cols = []
    for a in schema.attributes:
        d = a.to_dict()
        if d["type"] == "categorical":
            cols.append(rng.integers(0, len(d["values"]), n).astype(np.float64))
        else:
            cols.append(rng.uniform(d["min"], d["max"], n))
    return np.column_stack(cols), rng.integers(0, 2, n)


def _sklearn_forest(X: np.ndarray, y: np.ndarray, n_trees: int, height: int):
    from sklearn.ensemble import ExtraTreesClassifier

    return ExtraTreesClassifier(n_estimators=n_trees, max_depth=height, max_features=1, random_state=0).fit(X, y)


def _bincount_tally(leaves: np.ndarray, y: np.ndarray, n_leaves: int, n_classes: int) -> np.ndarray:
    n_trees = leaves.shape[1]
    flat = (leaves + np.arange(n_trees) * n_leaves) * n_classes + y[:, None]
    return np.bincount(flat.ravel(), minlength=n_trees * n_leaves * n_classes)


def tally_pair(n: int, n_trees: int = 10, height: int = 8, schema: str = "numeric") -> Pair:
    """Route encoded records to their leaves and count them (``ForestStructure.apply`` + ``tally``) vs
    scikit-learn's ``apply`` of a forest of the same size + ``np.bincount``."""
    sch = synthetic_schema(schema)
    X, y = synthetic_records(sch, n)
    forest = PrivateForest.create(sch, n_trees=n_trees, height=height, epsilon=1.0, seed=1)
    enc = sch.encode(X, y)
    fs, is_cat, shape = forest.structure, sch.is_categorical, forest.shape
    clf = _sklearn_forest(X, y, n_trees, height)
    n_nodes = max(e.tree_.node_count for e in clf.estimators_)
    return Pair(
        ours=lambda: tally(fs.apply(enc.X, is_cat), enc.y, shape),
        baseline=lambda: _bincount_tally(clf.apply(X), y, n_nodes, 2),
        baseline_name="sklearn ExtraTrees apply + np.bincount",
    )


def update_pair(n: int, n_trees: int = 10, height: int = 8, schema: str = "mixed") -> Pair:
    """``PrivateForest.update`` from raw values (encode, route, tally, geometric noise) vs scikit-learn's
    ``apply`` on the raw values + ``np.bincount`` (no coding, no noise)."""
    sch = synthetic_schema(schema)
    X, y = synthetic_records(sch, n)
    forest = PrivateForest.create(sch, n_trees=n_trees, height=height, epsilon=1.0, seed=1)
    clf = _sklearn_forest(X, y, n_trees, height)
    n_nodes = max(e.tree_.node_count for e in clf.estimators_)
    return Pair(
        ours=lambda: forest.update(X, y),
        baseline=lambda: _bincount_tally(clf.apply(X), y, n_nodes, 2),
        baseline_name="sklearn ExtraTrees apply + np.bincount",
    )


def fit_pair(n: int, n_trees: int = 10, height: int = 8, schema: str = "numeric") -> Pair:
    """``PrivateForest.create(...).fit`` (draw a structure, count, noise, prune) vs scikit-learn's
    ``ExtraTreesClassifier(max_features=1)`` fit, the closest plain random-split forest."""
    sch = synthetic_schema(schema)
    X, y = synthetic_records(sch, n)
    seeds = itertools.count()
    return Pair(
        ours=lambda: PrivateForest.create(sch, n_trees=n_trees, height=height, epsilon=1.0, seed=next(seeds)).fit(X, y),
        baseline=lambda: _sklearn_forest(X, y, n_trees, height),
        baseline_name="sklearn ExtraTreesClassifier(max_features=1).fit",
    )


def predict_pair(n: int, n_trees: int = 10, height: int = 8, schema: str = "numeric") -> Pair:
    """``PrivateForest.predict_proba`` from raw values vs scikit-learn's forest ``predict_proba``."""
    sch = synthetic_schema(schema)
    X, y = synthetic_records(sch, n)
    forest = PrivateForest.create(sch, n_trees=n_trees, height=height, epsilon=1.0, seed=1).fit(X, y)
    clf = _sklearn_forest(X, y, n_trees, height)
    return Pair(
        ours=lambda: forest.predict_proba(X),
        baseline=lambda: clf.predict_proba(X),
        baseline_name="sklearn ExtraTrees predict_proba",
    )


def noise_pair(n: int, epsilon: float = 1.0) -> Pair:
    """Two-sided geometric noise from the secure source (``geometric_noise``) vs numpy's PCG64 drawing the
    difference of two geometrics of the same parameter (fast, not secure)."""
    srng, rng = SecureRandom(), np.random.default_rng(0)
    p = 1.0 - np.exp(-epsilon)
    return Pair(
        ours=lambda: geometric_noise(n, epsilon, srng),
        baseline=lambda: rng.geometric(p, n) - rng.geometric(p, n),
        baseline_name="numpy default_rng geometric - geometric",
    )


def blob_pair(n_trees: int = 10, height: int = 10, schema: str = "binary") -> Pair:
    """A fitted model's ``to_bytes`` + ``from_bytes`` vs ``msgpack`` of its raw arrays (bytes, dtype, shape)
    packed and unpacked back into numpy arrays."""
    sch = synthetic_schema(schema)
    X, y = synthetic_records(sch, 2000)
    forest = PrivateForest.create(sch, n_trees=n_trees, height=height, epsilon=1.0, seed=1).fit(X, y)
    arrays = {**forest.structure.arrays(), "counts": forest.counts}

    def plain() -> dict:
        raw = msgpack.packb({k: [a.tobytes(), a.dtype.str, list(a.shape)] for k, a in arrays.items()})
        doc = msgpack.unpackb(raw)
        return {k: np.frombuffer(b, dtype=dt).reshape(s) for k, (b, dt, s) in doc.items()}

    return Pair(
        ours=lambda: PrivateForest.from_bytes(forest.to_bytes()),
        baseline=plain,
        baseline_name="msgpack of the raw arrays, packed and unpacked",
    )


def river_loop_pair(n: int) -> Pair:
    """``PrivateForestClassifier`` (defaults, epsilon 1) predict_one + learn_one over an Agrawal stream vs
    river's ``HoeffdingTreeClassifier()`` over the same records, each from a fresh model."""
    from river import datasets, tree

    from streamdp.river import PrivateForestClassifier
    from streamdp.river.schemas import agrawal_schema

    stream = list(itertools.islice(datasets.synth.Agrawal(seed=42), n))
    schema = agrawal_schema()

    def loop(model) -> None:
        for x, label in stream:
            model.predict_one(x)
            model.learn_one(x, label)

    return Pair(
        ours=lambda: loop(PrivateForestClassifier(schema)),
        baseline=lambda: loop(tree.HoeffdingTreeClassifier()),
        baseline_name="river HoeffdingTreeClassifier()",
    )


def encode_pair(n: int, n_attributes: int = 16) -> Pair:
    """``Schema.encode`` of a pandas DataFrame (string categories, numbers; labels) vs plain pandas coding:
    ``pd.Categorical`` codes against the declared values and numbers clipped to their bounds."""
    import pandas as pd

    values = [f"v{i}" for i in range(5)]
    attrs = [
        {"name": f"a{j}", "type": "categorical", "values": values}
        if j % 2 == 0
        else {"name": f"a{j}", "type": "numeric", "min": 0.0, "max": 100.0}
        for j in range(n_attributes)
    ]
    sch = Schema.from_dict({"attributes": attrs, "label": {"name": "y", "values": ["no", "yes"]}})
    rng = np.random.default_rng(0)
    df = pd.DataFrame(
        {a["name"]: rng.choice(values, n) if a["type"] == "categorical" else rng.uniform(-5.0, 105.0, n) for a in attrs}
    )
    y = pd.Series(rng.choice(["no", "yes"], n))

    def plain() -> np.ndarray:
        cols = [
            pd.Categorical(df[a["name"]], categories=values).codes.astype(np.float64)
            if a["type"] == "categorical"
            else np.clip(df[a["name"]].to_numpy(np.float64), 0.0, 100.0)
            for a in attrs
        ]
        return np.column_stack(cols), pd.Categorical(y, categories=["no", "yes"]).codes

    return Pair(
        ours=lambda: sch.encode(df, y, on_invalid="drop"),
        baseline=plain,
        baseline_name="pandas Categorical codes + np.clip",
    )
