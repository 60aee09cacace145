"""A river classifier whose first record names none of its schema's attributes says so, once."""

import warnings

import pandas as pd
import pytest

from streamdp.river import PrivateForestClassifier
from streamdp.river.encoding import RecordEncoder, UnknownAttributesWarning
from streamdp.river.schemas import stagger_schema


def _caught(fn) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        fn()
    return [x for x in w if issubclass(x.category, UnknownAttributesWarning)]


def test_misspelt_keys_warn_once_naming_the_keys_not_values():
    model = PrivateForestClassifier(stagger_schema(), epsilon=1.0, seed=0)
    w = _caught(lambda: [model.learn_one({"Size": 987654, "Colour": "secret-value"}, 0) for _ in range(5)])
    assert len(w) == 1
    text = str(w[0].message)
    assert "'Size'" in text and "'size'" in text and "987654" not in text and "secret" not in text


@pytest.mark.parametrize("first", [{"size": 1}, {"shape": 0, "extra": 3}])
def test_any_schema_attribute_is_enough(first):
    enc = RecordEncoder(stagger_schema())
    assert _caught(lambda: enc.encode_one(first)) == []
    assert _caught(lambda: enc.encode_one({"nothing": 1})) == []  # only the first record is checked


def test_frames_and_lists_are_checked_too():
    enc = RecordEncoder(stagger_schema())
    assert len(_caught(lambda: enc.encode_frame(pd.DataFrame({"a": [1], "b": [2]})))) == 1
    enc = RecordEncoder(stagger_schema())
    assert len(_caught(lambda: enc.encode_many([{"a": 1}]))) == 1
    enc = RecordEncoder(stagger_schema())
    assert _caught(lambda: enc.encode_many([{"color": 1}])) == []


def test_keys_that_are_data_are_not_shown():
    """River's keys can be data (a bag of words' tokens from a person's text): the warning shows schema names,
    and a key only where it is one of them but for case or separators."""
    enc = RecordEncoder(stagger_schema())
    w = _caught(lambda: enc.encode_one({"alice@example.com": 1, "hiv": 1, "Shape": 2}))
    text = str(w[0].message)
    assert "alice" not in text and "hiv" not in text and "'Shape' is 'shape'" in text
    enc = RecordEncoder(stagger_schema())
    text = str(_caught(lambda: enc.encode_frame(pd.DataFrame({"bob-smith": [1]})))[0].message)
    assert "bob" not in text and "'size'" in text
