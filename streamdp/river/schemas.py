"""Schemas for river's streams, from domains known in advance (never from the data).

Differential privacy needs public attribute domains. For river's synthetic
generators the domains are fixed by the generator's code (read from river
0.26.1's source, ``river/datasets/synth/*.py``); for the UCI datasets they
come from the declared schemas in ``streamdp/data/schemas``.
:func:`infer_schema` learns domains from a stream and says loudly that doing
so leaks (a :class:`PrivacyLeakWarning`).

>>> agrawal_schema().names
['salary', 'commission', 'age', 'elevel', 'car', 'zipcode', 'hvalue', 'hyears', 'loan']
>>> led_schema().n_classes
10
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Iterable

import numpy as np

from streamdp.schema import Categorical, Label, Numeric, Schema

__all__ = [
    "agrawal_schema",
    "stagger_schema",
    "led_schema",
    "random_tree_schema",
    "uci_schema",
    "uci_stream",
    "river_check_schema",
    "infer_schema",
    "PrivacyLeakWarning",
]


class PrivacyLeakWarning(UserWarning):
    """Something was learned from the private data outside the privacy mechanism (e.g. attribute domains)."""


def agrawal_schema() -> Schema:
    """``river.datasets.synth.Agrawal`` (any classification function).

    From the generator: salary = 20000 + 130000 U; commission = 0 if salary >= 75000
    else 10000 + 75000 U; age = randint(20, 80); elevel = randint(0, 4); car = randint(1, 20);
    zipcode = randint(0, 8); hvalue = (8 - zipcode) * 100000 * (0.5 + U), so within
    [0, 1.2e6]; hyears = randint(1, 30); loan = 500000 U. Labels 0/1.
    """
    return Schema(
        [
            Numeric("salary", 20000, 150000),
            Numeric("commission", 0, 85000),
            Numeric("age", 20, 80),
            Categorical("elevel", tuple(range(5))),
            Categorical("car", tuple(range(1, 21))),
            Categorical("zipcode", tuple(range(9))),
            Numeric("hvalue", 0, 1_200_000),
            Numeric("hyears", 1, 30),
            Numeric("loan", 0, 500000),
        ],
        Label("class", (0, 1)),
    )


def stagger_schema() -> Schema:
    """``river.datasets.synth.STAGGER``: size, color, shape each randint(0, 2); labels 0/1."""
    return Schema(
        [Categorical(n, (0, 1, 2)) for n in ("size", "color", "shape")],
        Label("class", (0, 1)),
    )


def led_schema(irrelevant_features: bool = False) -> Schema:
    """``river.datasets.synth.LED`` / ``LEDDrift``: 7 (or 24) binary segments, digits 0..9.

    River keys LED features by the integers 0..23; the schema names them
    ``"0"``, ``"1"``, ... and :class:`~streamdp.river.forest.PrivateForestClassifier`
    reads integer keys for digit names.
    """
    n = 24 if irrelevant_features else 7
    return Schema([Categorical(str(i), (0, 1)) for i in range(n)], Label("digit", tuple(range(10))))


def random_tree_schema(
    n_classes: int = 2, n_num_features: int = 5, n_cat_features: int = 5, n_categories_per_feature: int = 5
) -> Schema:
    """``river.datasets.synth.RandomTree`` with the same parameters.

    ``x_num_i`` = U in [0, 1]; ``x_cat_i`` = randint(0, n_categories_per_feature - 1); labels 0..n_classes-1.
    """
    attrs: list = [Numeric(f"x_num_{i}", 0.0, 1.0) for i in range(n_num_features)]
    attrs += [Categorical(f"x_cat_{i}", tuple(range(n_categories_per_feature))) for i in range(n_cat_features)]
    return Schema(attrs, Label("class", tuple(range(n_classes))))


def uci_schema(name: str) -> Schema:
    """Declared schema of a UCI dataset (``nursery``, ``mushroom``, ``congressional-voting``, ``tic-tac-toe``, ``adult``)."""
    from streamdp.datasets import load_schema

    return load_schema(name)


def uci_stream(name: str, *, shuffle_seed: int | None = 0, drop_missing: bool = False):
    """A UCI dataset as a river stream of ``(x, y)`` in random order (``shuffle_seed`` picks the order).

    The order is not a privacy matter (it only reorders the records), so a fixed
    seed is fine here. Returns ``(schema, list_of_pairs)``.
    """
    from streamdp.datasets import load

    ds = load(name, drop_missing=drop_missing)
    idx = np.arange(len(ds.y))
    if shuffle_seed is not None:
        idx = np.random.default_rng(shuffle_seed).permutation(len(ds.y))
    names = ds.schema.names
    pairs = []
    for i in idx:
        row = ds.X[i]
        pairs.append(({n: (v.item() if isinstance(v, np.generic) else v) for n, v in zip(names, row)}, ds.y[i]))
    return ds.schema, pairs


def river_check_schema() -> Schema:
    """One schema covering river's check datasets (``Phishing`` and ``ImageSegments``), for ``check_estimator``.

    Test fixture only. Phishing's nine features are documented as normalised
    to [0, 1] (values in {0, 0.5, 1}). ImageSegments (UCI Image Segmentation,
    3x3 regions of outdoor images): centroid coordinates lie in the image,
    [0, 256]; line densities are fractions, [0, 1]; colour means are 0..255
    intensities; saturation [0, 1]; hue is an angle in [-pi, pi]. The excess
    colour means and the edge statistics have no documented bound: for these
    unit-test parameters their ranges were TAKEN FROM THE DATA (rounded
    outwards), which is acceptable for a test fixture and nowhere else.
    Labels: Phishing's False/True and the seven ImageSegments classes.
    """
    phishing = [
        "empty_server_form_handler", "popup_window", "https", "request_from_other_domain",
        "anchor_from_other_domain", "is_popular", "long_url", "age_of_domain", "ip_in_url",
    ]
    attrs: list = [Numeric(n, 0.0, 1.0) for n in phishing]
    ranges = {
        "region-centroid-col": (0, 256), "region-centroid-row": (0, 256),
        "short-line-density-5": (0, 1), "short-line-density-2": (0, 1),
        # from the data (no documented bound):
        "vedge-mean": (0, 30), "vegde-sd": (0, 1000), "hedge-mean": (0, 45), "hedge-sd": (0, 1400),
        "intensity-mean": (0, 255), "rawred-mean": (0, 255), "rawblue-mean": (0, 255), "rawgreen-mean": (0, 255),
        # from the data (no documented bound):
        "exred-mean": (-50, 10), "exblue-mean": (-13, 82), "exgreen-mean": (-34, 25),
        "value-mean": (0, 255), "saturation-mean": (0, 1), "hue-mean": (-math.pi, math.pi),
    }
    attrs += [Numeric(n, lo, hi) for n, (lo, hi) in ranges.items()]
    labels = (False, True, "brickface", "cement", "foliage", "grass", "path", "sky", "window")
    return Schema(attrs, Label("class", labels))


def infer_schema(
    stream: Iterable[tuple[dict, Any]],
    *,
    max_categories: int = 32,
    label_name: str = "class",
) -> Schema:
    """Learn a schema from data: numeric ranges from min/max, categorical values and labels as seen.

    THIS LEAKS: the min and max of a numeric attribute are individual records'
    values, and a rare category reveals that some record has it. The resulting
    model is not differentially private with respect to the records used here.
    A :class:`PrivacyLeakWarning` is always issued. Use it only on public data
    or data you may disclose; otherwise declare the domains.

    Numbers (not bool) become :class:`Numeric` unless they take at most
    ``max_categories`` integer values; everything else becomes :class:`Categorical`.
    """
    warnings.warn(
        "infer_schema() reads attribute domains from the data: numeric min/max and the set of "
        "categories are disclosed by the schema and by every model built on it, so the model is NOT "
        "differentially private with respect to these records. Declare the domains instead.",
        PrivacyLeakWarning,
        stacklevel=2,
    )
    seen: dict[Any, set] = {}
    lo: dict[Any, float] = {}
    hi: dict[Any, float] = {}
    numeric: dict[Any, bool] = {}
    labels: list = []
    label_set: set = set()
    order: list = []
    for x, y in stream:
        if isinstance(y, np.generic):
            y = y.item()
        if y not in label_set:
            label_set.add(y)
            labels.append(y)
        for k, v in x.items():
            if isinstance(v, np.generic):
                v = v.item()
            if k not in numeric:
                numeric[k] = True
                seen[k] = set()
                order.append(k)
            if numeric[k] and isinstance(v, (int, float)) and not isinstance(v, bool):
                if isinstance(v, float) and math.isnan(v):
                    continue
                lo[k] = min(lo.get(k, v), v)
                hi[k] = max(hi.get(k, v), v)
            else:
                numeric[k] = False
            if len(seen[k]) <= max_categories:
                seen[k].add(v)
    attrs: list = []
    for k in order:
        name = str(k)
        vals = seen[k]
        ints = all(isinstance(v, int) or (isinstance(v, float) and v.is_integer()) for v in vals)
        if numeric[k] and not (ints and len(vals) <= max_categories):
            a, b = float(lo[k]), float(hi[k])
            attrs.append(Numeric(name, a, b if b > a else a + 1.0))
        else:
            if len(vals) > max_categories:
                raise ValueError(f"attribute {k!r} has more than {max_categories} categories")
            vs = sorted({int(v) if isinstance(v, float) else v for v in vals}, key=lambda v: (type(v).__name__, v))
            attrs.append(Categorical(name, tuple(vs)))
    try:
        labels = sorted(labels)
    except TypeError:
        pass
    return Schema(attrs, Label(label_name, tuple(labels)))
