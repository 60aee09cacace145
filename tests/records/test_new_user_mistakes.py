"""Mistakes a new user makes with their own data, each named in the error (never a data value).

Found by following the README on data the project does not ship (scikit-learn's iris, pandas frames).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from streamdp import PrivateForest, Schema
from streamdp.records.frames import frame_chunks

SCHEMA = Schema.from_dict(
    {
        "attributes": [
            {"name": "age", "type": "numeric", "min": 0, "max": 100},
            {"name": "plan", "type": "categorical", "values": ["free", "pro"]},
        ],
        "label": {"name": "churned", "values": ["no", "yes"]},
    }
)
DF = pd.DataFrame({"age": [20, 30, 40, 50] * 10, "plan": ["free", "pro"] * 20})
Y = np.array(["yes", "no", "no", "no"] * 10)


def test_numpy_scalars_declare_values_as_the_python_values_they_hold():
    """``list(load_iris().target_names)`` holds numpy strings: they were kept as such (errors showed
    ``np.str_('setosa')``); numpy integers and booleans were refused as not integers or booleans."""
    s = Schema.from_dict(
        {
            "attributes": [
                {"name": "n", "type": "categorical", "values": list(np.array([1, 2]))},
                {"name": "b", "type": "categorical", "values": [np.bool_(True), np.bool_(False)]},
                {
                    "name": "x",
                    "type": "numeric",
                    "min": np.int64(0),
                    "max": np.float32(2),
                    "quantiles": [np.float64(1)],
                },
            ],
            "label": {"name": "y", "values": list(np.array(["setosa", "virginica"]))},
        }
    )
    assert [type(v) for a in s.attributes[:2] for v in a.values] == [int, int, bool, bool]
    assert [type(v) for v in s.label.values] == [str, str] and s.attributes[2].quantiles == (1.0,)
    with pytest.raises(ValueError, match=r"declared: \['setosa', 'virginica'\]\)$"):
        s.encode_labels(["Setosa"])


@pytest.mark.parametrize("coder", ["encode", "frame_chunks"])
def test_a_missing_category_or_label_is_missing_not_undeclared(coder):
    """pandas' NA in a string column, None or NaN as a label: a missing value, as the CSV reader says it."""
    code = {
        "encode": lambda X, y: SCHEMA.encode(X, y),
        "frame_chunks": lambda X, y: next(frame_chunks(X, y, SCHEMA)),
    }[coder]
    X = DF.astype({"plan": "string"})
    X.loc[3, "plan"] = pd.NA
    with pytest.raises(ValueError, match=r"^record 3 \(0-based\): attribute 'plan' is missing$"):
        code(X, Y)
    for absent in (None, float("nan")):
        y = list(Y)
        y[5] = absent
        with pytest.raises(ValueError, match=r"^record 5 \(0-based\): label 'churned' is missing$"):
            code(DF, y)


@pytest.mark.parametrize("coder", ["encode", "frame_chunks"])
def test_a_frame_with_an_attribute_column_twice_says_so(coder):
    """It was "X has 3 columns but the schema has 2 attributes" (Schema.encode) or an AttributeError (a push)."""
    X = pd.concat([DF, DF[["age"]]], axis=1)
    code = {"encode": lambda: SCHEMA.encode(X, Y), "frame_chunks": lambda: next(frame_chunks(X, Y, SCHEMA))}[coder]
    with pytest.raises(ValueError, match=r"attribute columns \['age'\] more than once"):
        code()


def test_fit_without_labels_says_y_is_required():
    """It was "encoded batch must be X of shape (n, 2) and y of shape (n,), got (40, 2) and ()"."""
    forest = PrivateForest.create(SCHEMA, n_trees=3, height=2, seed=1)
    for call in (forest.fit, forest.update, forest.grow):
        with pytest.raises(ValueError, match=r"^y \(the labels\) is required"):
            call(DF, None)


def test_score_names_a_class_not_declared_instead_of_counting_it_a_miss():
    forest = PrivateForest.create(SCHEMA, n_trees=3, height=2, seed=1).fit(DF, Y)
    assert 0.0 <= forest.score(DF, Y) <= 1.0 and forest.score(DF, pd.Series(Y)) == forest.score(DF, list(Y))
    with pytest.raises(ValueError, match=r"^record 0 \(0-based\): label 'churned' has a class not declared"):
        forest.score(DF, np.char.capitalize(Y))  # "Yes"/"No": scored 0 before, silently


def test_the_river_classifier_says_a_missing_label_is_missing():
    from streamdp.river import PrivateForestClassifier

    m = PrivateForestClassifier(SCHEMA, n_trees=3, height=2)
    with pytest.raises(ValueError, match=r"^label 'churned' is missing"):
        m.learn_one({"age": 3, "plan": "free"}, None)
    with pytest.raises(ValueError, match=r"^label 'churned' has a class not declared"):
        m.learn_one({"age": 3, "plan": "free"}, "Yes")


@pytest.mark.parametrize("cls", ["PrivateForestClassifier", "PrivateWindowClassifier"])
def test_river_mini_batches_of_dicts_say_a_dataframe_is_needed(cls):
    """river's learn_many takes a DataFrame: a list of dicts raised "'list' object has no attribute 'columns'"."""
    import streamdp.river

    m = getattr(streamdp.river, cls)(SCHEMA)
    for call in (lambda: m.learn_many(DF.to_dict("records"), pd.Series(Y)), lambda: m.predict_many(DF.to_numpy())):
        with pytest.raises(TypeError, match=r"^X must be a pandas DataFrame .* got (list|ndarray)"):
            call()


def test_text_meeting_declared_numbers_is_named_as_text():
    """csv.DictReader gives "2" for a category declared as 2 (and "1" for a class 1): such text is the declared
    value it spells, as in a CSV file; text that spells none is named as text (its type, never the value)."""
    s = Schema.from_dict(
        {
            "attributes": [{"name": "rooms", "type": "categorical", "values": [1, 2, 3]}],
            "label": {"name": "y", "values": [0, 1]},
        }
    )
    assert s.encode([{"rooms": "2"}, {"rooms": "3.0"}], ["1", "0"]).X.tolist() == [[1.0], [2.0]]
    hint = "; it is text, none of the declared values is)"
    with pytest.raises(ValueError, match=r"attribute 'rooms' has a value not declared .*\[1, 2, 3\]" + re.escape(hint)):
        s.encode([{"rooms": "two"}], [0])
    with pytest.raises(ValueError, match=r"label 'y' has a class not declared .*\[0, 1\]" + re.escape(hint)):
        s.encode([{"rooms": 2}], ["yes"])
    with pytest.raises(ValueError, match=r"declared: \['free', 'pro'\]\)$"):  # text among text: no hint
        SCHEMA.encode([{"age": 3, "plan": "Free"}], ["no"])


def test_a_label_frame_one_record_and_a_float_seed_are_refused_by_name():
    """A one-column frame as y was read as its column names ("y has 1 labels but X has 600 records"); one record
    (a frame's row, a flat list) was refused with no word of what to pass; seed=3.0 failed inside numpy."""
    forest = PrivateForest.create(SCHEMA, n_trees=3, height=2, seed=1)
    with pytest.raises(ValueError, match=r"^y must hold one label per record \(1-D\), got 2-D: pass its label column"):
        forest.fit(DF, pd.DataFrame({"churned": Y}))
    forest.fit(DF, Y)
    for one in (DF.iloc[0], list(DF.iloc[0])):
        with pytest.raises(ValueError, match=r"one record\? pass \[record\] or df\.iloc\[\[i\]\]"):
            forest.predict(one)
    assert len(forest.predict(DF.iloc[[0]])) == 1
    with pytest.raises(ValueError, match=r"^seed must be an integer >= 0, got 3\.0"):
        PrivateForest.create(SCHEMA, n_trees=3, height=2, seed=3.0)
