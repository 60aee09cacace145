"""Schemas for river's streams, from domains known in advance (never from the data).

Differential privacy needs public attribute domains. For river's synthetic
generators the domains are fixed by the generator's code (read from river
0.26.1's source, ``river/datasets/synth/*.py``); for the datasets bundled with
river (no download) they come from each dataset's documentation or definition;
for the UCI datasets from the declared schemas in ``streamdp/data/schemas`` (as river
streams: :mod:`streamdp.river.uci`).
Where neither bounds a value (a Gaussian term, an undocumented sensor) a range
had to be *chosen*: each such docstring says so and why; values outside are
clamped. :func:`streamdp.river.inference.infer_schema` learns domains from a stream and
says loudly that doing so leaks.

:func:`schema_for` maps a river dataset object to its schema (``RIVER_SCHEMAS``
lists them). Features river keys by integers (SEA, Hyperplane, LED, ...) are
named ``"0"``, ``"1"``, ...; the river classifiers read the integer keys.

>>> agrawal_schema().names
['salary', 'commission', 'age', 'elevel', 'car', 'zipcode', 'hvalue', 'hyears', 'loan']
>>> led_schema().n_classes
10
>>> from river import datasets
>>> schema_for(datasets.synth.SEA(seed=1)).label.values
(False, True)
>>> schema_for(datasets.Phishing()).attributes[0].values
(0, 0.5, 1)
"""

from __future__ import annotations

import importlib
import math
import warnings
from typing import Any

from streamdp.records.domains import Categorical, Label, Numeric
from streamdp.records.schema import Schema

__all__ = [
    "declared_schema",
    "schema_for",
    "RIVER_SCHEMAS",
    "phishing_schema",
    "bananas_schema",
    "image_segments_schema",
    "shuttle_schema",
    "elec2_schema",
    "sea_schema",
    "hyperplane_schema",
    "sine_schema",
    "mixed_schema",
    "random_rbf_schema",
    "waveform_schema",
    "agrawal_schema",
    "stagger_schema",
    "led_schema",
    "random_tree_schema",
    "river_check_schema",
]


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


def _digits(n: int, lo: float, hi: float) -> list:
    return [Numeric(str(i), lo, hi) for i in range(n)]


def sea_schema() -> Schema:
    """``river.datasets.synth.SEA`` (any variant): features 0, 1, 2 = uniform(0, 10); labels False/True."""
    return Schema(_digits(3, 0.0, 10.0), Label("class", (False, True)))


def hyperplane_schema(n_features: int = 10) -> Schema:
    """``river.datasets.synth.Hyperplane``: features 0..n-1 = random() in [0, 1]; labels 0/1."""
    return Schema(_digits(n_features, 0.0, 1.0), Label("class", (0, 1)))


def sine_schema(has_noise: bool = False) -> Schema:
    """``river.datasets.synth.Sine``: features 0, 1 (and noise 2, 3) = random() in [0, 1]; labels 0/1."""
    return Schema(_digits(4 if has_noise else 2, 0.0, 1.0), Label("class", (0, 1)))


def mixed_schema() -> Schema:
    """``river.datasets.synth.Mixed``: features 0, 1 booleans (random() >= 0.5), 2, 3 = random() in [0, 1]; labels 0/1."""
    return Schema(
        [Categorical("0", (False, True)), Categorical("1", (False, True)), *_digits(4, 0.0, 1.0)[2:]],
        Label("class", (0, 1)),
    )


def random_rbf_schema(n_classes: int = 2, n_features: int = 10) -> Schema:
    """``river.datasets.synth.RandomRBF`` / ``RandomRBFDrift``: labels 0..n_classes-1.

    A feature is a centroid coordinate (random() in [0, 1]) plus a Gaussian
    offset scaled by the centroid's spread (random() in [0, 1]): unbounded.
    CHOSEN range [-1, 2]: the centroid range widened by the largest spread.
    """
    return Schema(_digits(n_features, -1.0, 2.0), Label("class", tuple(range(n_classes))))


def waveform_schema(has_noise: bool = False) -> Schema:
    """``river.datasets.synth.Waveform``: 21 features (40 with noise); labels 0, 1, 2.

    A feature mixes two of Breiman's triangular waves (values 0..6) and adds
    gauss(0, 1); the noise features are gauss(0, 1): unbounded. CHOSEN range
    [-4, 10]: the waves' range widened by 4 standard deviations of the noise.
    """
    return Schema(_digits(40 if has_noise else 21, -4.0, 10.0), Label("class", (0, 1, 2)))


_PHISHING_TERNARY = [
    "empty_server_form_handler",
    "popup_window",
    "https",
    "request_from_other_domain",
    "anchor_from_other_domain",
    "is_popular",
    "long_url",
]


def phishing_schema() -> Schema:
    """``river.datasets.Phishing`` (UCI Website Phishing, Abdelhamid et al.).

    The documented features are legitimate / suspicious / phishy, coded 0, 0.5, 1
    in river's file; age_of_domain and ip_in_url are binary (0, 1). Labels False/True.
    """
    attrs: list = [Categorical(n, (0, 0.5, 1)) for n in _PHISHING_TERNARY]
    attrs += [Categorical("age_of_domain", (0, 1)), Categorical("ip_in_url", (0, 1))]
    return Schema(attrs, Label("is_phishing", (False, True)))


def bananas_schema() -> Schema:
    """``river.datasets.Bananas`` (OpenML 1460): features "1", "2"; labels False/True.

    The attributes are documented as normalised coordinates (no bounds given).
    CHOSEN range [-4, 4]: four standard deviations either side of the mean.
    """
    return Schema([Numeric("1", -4.0, 4.0), Numeric("2", -4.0, 4.0)], Label("class", (False, True)))


_SEGMENT_CLASSES = ("brickface", "cement", "foliage", "grass", "path", "sky", "window")


def image_segments_schema() -> Schema:
    """``river.datasets.ImageSegments`` (UCI Statlog Image Segmentation): 3x3 regions of 256x256 images.

    From the definitions: centroid coordinates lie in the image, [0, 256];
    line densities are fractions, [0, 1]; colour means (raw red, green, blue,
    intensity = (R+G+B)/3, value = max) are 0..255 intensities; excess colours
    (2R - (G + B), ...) lie in [-510, 510]; saturation [0, 1]; hue an angle in
    [-pi, pi]. The edge statistics (vedge/hedge mean and "sd" of the contrast of
    adjacent pixels) have no documented bound: CHOSEN range [0, 255], the
    range of a contrast of intensities (larger values are clamped). Seven labels.
    """
    ranges = {
        "region-centroid-col": (0, 256),
        "region-centroid-row": (0, 256),
        "short-line-density-5": (0, 1),
        "short-line-density-2": (0, 1),
        "vedge-mean": (0, 255),
        "vegde-sd": (0, 255),
        "hedge-mean": (0, 255),
        "hedge-sd": (0, 255),
        "intensity-mean": (0, 255),
        "rawred-mean": (0, 255),
        "rawblue-mean": (0, 255),
        "rawgreen-mean": (0, 255),
        "exred-mean": (-510, 510),
        "exblue-mean": (-510, 510),
        "exgreen-mean": (-510, 510),
        "value-mean": (0, 255),
        "saturation-mean": (0, 1),
        "hue-mean": (-math.pi, math.pi),
    }
    return Schema([Numeric(n, lo, hi) for n, (lo, hi) in ranges.items()], Label("class", _SEGMENT_CLASSES))


def shuttle_schema() -> Schema:
    """``river.datasets.Shuttle`` (UCI Statlog Shuttle as ODDS anomaly detection): f1..f9; labels 0/1.

    The nine integer sensor readings have no documented range. CHOSEN range
    [-32768, 32767], a 16-bit word: safe, but most random split points fall
    where no record lies, so expect little more than the majority class.
    """
    return Schema([Numeric(f"f{i}", -32768, 32767) for i in range(1, 10)], Label("anomaly", (0, 1)))


def elec2_schema() -> Schema:
    """``river.datasets.Elec2`` (Harries' NSW electricity data, OpenML "electricity"): labels False/True (the price
    went up).

    From its documentation: every attribute is normalised to [0, 1] (the date, the half-hour period, the NSW
    and Victoria prices and demands, the transfer), but the day of the week, 1..7 (declared numeric [1, 7]: a
    split on it is an ordinal cut, as river's trees make it).
    """
    unit = ("date", "period", "nswprice", "nswdemand", "vicprice", "vicdemand", "transfer")
    attrs = [Numeric(n, 0.0, 1.0) for n in unit[:1]] + [Numeric("day", 1.0, 7.0)]
    return Schema(attrs + [Numeric(n, 0.0, 1.0) for n in unit[1:]], Label("class", (False, True)))


def river_check_schema() -> Schema:
    """One schema covering river's check datasets (``Phishing`` and ``ImageSegments``), for ``check_estimator``.

    The attributes of :func:`phishing_schema` and :func:`image_segments_schema`;
    the labels of both (Phishing's False/True and the seven segment classes).
    """
    attrs = list(phishing_schema().attributes) + list(image_segments_schema().attributes)
    return Schema(attrs, Label("class", (False, True) + _SEGMENT_CLASSES))


#: River dataset class name -> function of the dataset object returning its declared schema.
RIVER_SCHEMAS = {
    "Phishing": lambda d: phishing_schema(),
    "Bananas": lambda d: bananas_schema(),
    "ImageSegments": lambda d: image_segments_schema(),
    "Shuttle": lambda d: shuttle_schema(),
    "Elec2": lambda d: elec2_schema(),
    "Agrawal": lambda d: agrawal_schema(),
    "STAGGER": lambda d: stagger_schema(),
    "LED": lambda d: led_schema(d.irrelevant_features),
    "LEDDrift": lambda d: led_schema(d.irrelevant_features),
    "SEA": lambda d: sea_schema(),
    "Hyperplane": lambda d: hyperplane_schema(d.n_features),
    "Sine": lambda d: sine_schema(d.has_noise),
    "Mixed": lambda d: mixed_schema(),
    "RandomRBF": lambda d: random_rbf_schema(d.n_classes, d.n_features),
    "RandomRBFDrift": lambda d: random_rbf_schema(d.n_classes, d.n_features),
    "RandomTree": lambda d: random_tree_schema(
        d.n_classes, d.n_num_features, d.n_cat_features, d.n_categories_per_feature
    ),
    "Waveform": lambda d: waveform_schema(d.has_noise),
    "ConceptDriftStream": lambda d: schema_for(d.stream),
}


def schema_for(dataset: Any) -> Schema:
    """The declared schema of a river classification dataset object (``RIVER_SCHEMAS``).

    ``ConceptDriftStream`` takes its first stream's (both streams must share
    it). River's regression and multi-output datasets (Friedman, SolarFlare,
    Yeast, ...) have none: the private forest classifies.
    """
    name = type(dataset).__name__
    if name not in RIVER_SCHEMAS:
        raise ValueError(f"no declared schema for river dataset {name!r}; known: {sorted(RIVER_SCHEMAS)}")
    return RIVER_SCHEMAS[name](dataset)


#: Names that moved out of this module and where they are now.
_MOVED = {
    "uci_schema": "streamdp.river.uci",
    "uci_stream": "streamdp.river.uci",
    "infer_schema": "streamdp.river.inference",
    "PrivacyLeakWarning": "streamdp.river.inference",
}


def __getattr__(name: str) -> Any:
    """A moved name is still found here, with a DeprecationWarning naming its module (an old import keeps
    working instead of failing with a bare ImportError)."""
    if name in _MOVED:
        warnings.warn(f"streamdp.river.schemas.{name} moved to {_MOVED[name]}.{name}", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def declared_schema(schema: Any) -> Schema:
    """The classifier's schema from what was passed (a Schema, its dict, or a river dataset with a declared one)."""
    if isinstance(schema, Schema):
        return schema
    if isinstance(schema, dict):
        return Schema.from_dict(schema)
    if schema is None:
        raise TypeError(
            "PrivateForestClassifier needs schema=...: every attribute's domain and the label's values, declared "
            "in advance (a private model cannot read them from the stream). Pass one of: "
            "a river dataset, e.g. PrivateForestClassifier(river.datasets.Phishing()) or "
            "schema=streamdp.river.schemas.schema_for(dataset) (the datasets with a declared schema: "
            "streamdp.river.schemas.RIVER_SCHEMAS); a generator's schema, e.g. "
            "streamdp.river.schemas.agrawal_schema(); your own, "
            "streamdp.Schema.from_dict({'attributes': [{'name': 'x', 'type': 'numeric', 'min': 0, 'max': 1}, "
            "{'name': 'c', 'type': 'categorical', 'values': ['a', 'b']}], 'label': {'name': 'y', 'values': [0, 1]}}) "
            "; streamdp.river.inference.infer_schema(stream) learns them from "
            "the data and says what that leaks"
        )
    if type(schema).__name__ in RIVER_SCHEMAS:
        return schema_for(schema)
    if isinstance(schema, type):
        why = f"the class {schema.__name__}: pass an instance, e.g. {schema.__name__}()"
    elif hasattr(schema, "__next__"):
        why = (
            f"an iterator ({type(schema).__name__}): records declare no domains, pass the dataset itself "
            "(e.g. datasets.Phishing(), not datasets.Phishing().take(10)) or a Schema"
        )
    else:
        why = type(schema).__name__
    raise TypeError(
        f"schema must be a streamdp Schema, its dict form or a river dataset with a declared schema "
        f"({sorted(RIVER_SCHEMAS)}), got {why}"
    )
