"""Declared schemas for river's bundled and synthetic classification datasets."""

from __future__ import annotations

import pytest

pytest.importorskip("river")
pd = pytest.importorskip("pandas")

from river import datasets  # noqa: E402
from river.datasets import synth  # noqa: E402

from streamdp.river import PrivateForestClassifier  # noqa: E402
from streamdp.river.encoding import RecordEncoder  # noqa: E402
from streamdp.river.schemas import RIVER_SCHEMAS, schema_for  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::streamdp.privacy.NotPrivateWarning")

DATASETS = [
    datasets.Phishing(),
    datasets.Bananas(),
    datasets.ImageSegments(),
    datasets.Shuttle(),
    synth.Agrawal(seed=1),
    synth.STAGGER(seed=1),
    synth.LED(seed=1),
    synth.LED(seed=1, irrelevant_features=True),
    synth.LEDDrift(seed=1, n_drift_features=3),
    synth.SEA(seed=1),
    synth.Hyperplane(seed=1, n_features=5),
    synth.Sine(seed=1),
    synth.Sine(seed=1, has_noise=True),
    synth.Mixed(seed=1),
    synth.RandomRBF(seed_model=1, seed_sample=1, n_classes=3, n_features=4),
    synth.RandomRBFDrift(seed_model=1, seed_sample=1),
    synth.RandomTree(seed_tree=1, seed_sample=1),
    synth.Waveform(seed=1),
    synth.Waveform(seed=1, has_noise=True),
    synth.ConceptDriftStream(seed=1, position=100, width=20),
]


@pytest.mark.parametrize("dataset", DATASETS, ids=lambda d: type(d).__name__)
def test_every_record_and_label_is_declared(dataset):
    """The schema comes from the documentation or the generator; this reads records only to check it."""
    schema = schema_for(dataset)
    enc = RecordEncoder(schema)
    n_num = sum(1 for c in enc.is_cat if not c)
    for x, y in dataset.take(600) if hasattr(dataset, "take") else zip(range(600), dataset):
        if not isinstance(x, dict):  # zip(range, dataset) yields (i, (x, y))
            x, y = y
        assert len(x) == schema.n_attributes
        row = enc.encode_one(x)
        assert None not in row, (x, row)  # every categorical value declared, every number a number
        enc.encode_label(y)  # raises on an undeclared class
    assert n_num + sum(enc.is_cat) == schema.n_attributes


def test_every_classification_dataset_of_river_is_covered():
    names = {type(d).__name__ for d in DATASETS}
    assert names | {"Elec2"} == set(RIVER_SCHEMAS)  # (Elec2 is downloaded: checked against its reader below)
    with pytest.raises(ValueError, match="no declared schema for river dataset 'Friedman'"):
        schema_for(synth.Friedman(seed=1))


def test_phishing_trains_with_its_float_categorical_values():
    model = PrivateForestClassifier(schema_for(datasets.Phishing()), seed=1)
    for x, y in datasets.Phishing():
        model.learn_one(x, y)
    # prior phase 4, 8, 16, 32, 40 (stumps only), then batches of 100, 200, 400, then 800 open
    assert model.n_releases == 8 and model.n_buffered == 450
    assert set(model.predict_proba_one(x)) == {False, True}


@pytest.mark.parametrize("cls", ["forest", "window"])
def test_an_undeclared_value_is_warned_about_by_attribute_and_type_never_by_value(cls):
    """A present but undeclared categorical value (1 where True is declared, a misspelt category) or a string in a
    numeric attribute drops the record, as before, now with a warning naming the attribute and the value's type;
    a missing value (river's normal case) drops silently. The value itself is never in the message."""
    import warnings as w

    from streamdp.records.schema import Categorical, Label, Numeric, Schema
    from streamdp.river import PrivateForestClassifier, PrivateWindowClassifier, UndeclaredValueWarning

    s = Schema(
        [Categorical("windy", (True, False)), Categorical("outlook", ("sunny", "rain")), Numeric("t", 0, 40)],
        Label("play", ("no", "yes")),
    )
    m = PrivateForestClassifier(s) if cls == "forest" else PrivateWindowClassifier(s)
    with w.catch_warnings(record=True) as got:
        w.simplefilter("always")
        m.learn_one({"windy": 1, "outlook": "Sunny-7431", "t": "hot-9182"}, "yes")
        m.learn_one({"outlook": "sunny"}, "yes")  # windy missing: dropped, no warning
        m.learn_many(pd.DataFrame([{"windy": True, "outlook": "fog-5521", "t": 3.0}]), pd.Series(["no"]))
    msgs = [str(x.message) for x in got if x.category is UndeclaredValueWarning]
    assert len(msgs) == 4, msgs
    assert "'windy'" in msgs[0] and "type int" in msgs[0] and "bool" in msgs[0]
    assert "'outlook'" in msgs[1] and "type str" in msgs[1] and "'t'" in msgs[2] and "not a number" in msgs[2]
    assert "'outlook'" in msgs[3]
    assert not any(v in " ".join(msgs) for v in ("7431", "9182", "5521", "Sunny", "hot", "fog"))


def test_learn_many_warns_even_when_its_first_dropped_row_only_misses_a_value():
    import warnings as w

    from streamdp.records.schema import Categorical, Label, Schema
    from streamdp.river import PrivateForestClassifier, UndeclaredValueWarning

    s = Schema([Categorical("windy", (True, False))], Label("play", ("no", "yes")))
    m = PrivateForestClassifier(s)
    frame = pd.DataFrame({"windy": [None, 1, True]}, dtype=object)
    with w.catch_warnings(record=True) as got:
        w.simplefilter("always")
        m.learn_many(frame, pd.Series(["no", "yes", "no"]))
    assert [str(x.message)[:38] for x in got if x.category is UndeclaredValueWarning] == [
        "attribute 'windy': a value of type int"
    ]


def test_names_moved_out_of_the_module_are_found_with_a_warning_naming_their_module():
    from streamdp.river import inference, uci

    with pytest.warns(DeprecationWarning, match="moved to streamdp.river.uci.uci_stream"):
        from streamdp.river.schemas import uci_stream
    assert uci_stream is uci.uci_stream
    with pytest.warns(DeprecationWarning, match="moved to streamdp.river.inference.PrivacyLeakWarning"):
        from streamdp.river.schemas import PrivacyLeakWarning
    assert PrivacyLeakWarning is inference.PrivacyLeakWarning
    with pytest.raises(ImportError):
        from streamdp.river.schemas import no_such_name  # noqa: F401


def test_elec2_is_declared_with_the_keys_river_yields(monkeypatch):
    """Elec2 had no declared schema (river users had to write one): the schema's attributes are the keys river's
    reader converts, its label the reader's boolean class; read from the reader's own converters, no download."""
    from river.datasets import elec2

    seen = {}

    def iter_csv(path, target, converters):
        seen.update(target=target, converters=converters)
        return iter(())

    monkeypatch.setattr(elec2.stream, "iter_csv", iter_csv)
    monkeypatch.setattr(datasets.Elec2, "path", property(lambda self: "elec2.csv"))
    list(datasets.Elec2()._iter())
    s = schema_for(datasets.Elec2())
    assert set(s.names) == set(seen["converters"]) - {seen["target"]} and s.label.name == seen["target"]
    assert seen["converters"]["class"]("UP") is True and s.label.values == (False, True)
    assert s.attributes[s.index("day")].min == 1.0 and all(
        (a.min, a.max) == (0.0, 1.0) for a in s.attributes if a.name != "day"
    )
