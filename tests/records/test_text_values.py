"""Declared numbers and booleans given as text (csv.DictReader, read_csv(dtype=str)): one rule on every path."""

import warnings

import pandas as pd
import pytest

from streamdp.records.coding import lookup_table, value_code
from streamdp.records.frames import encode_frame
from streamdp.records.schema import Schema
from streamdp.river import PrivateForestClassifier

SCHEMA = Schema.from_dict(
    {
        "attributes": [
            {"name": "rooms", "type": "categorical", "values": [1, 2, 3]},
            {"name": "owner", "type": "categorical", "values": [False, True]},
            {"name": "zone", "type": "categorical", "values": ["1", 1]},
        ],
        "label": {"name": "y", "values": [0, 1]},
    }
)
TEXT = [{"rooms": "2", "owner": "true", "zone": "1"}, {"rooms": " 03 ", "owner": "FALSE", "zone": "1.0"}]
CODES = [[1.0, 1.0, 0.0], [2.0, 0.0, 1.0]]  # a declared text means itself ("1"); "1.0" spells the number 1


@pytest.mark.parametrize("v,code", [("2", 1), ("2.0", 1), ("2e0", 1), (" 2 ", 1), ("02", 1), ("2.5", -1), ("two", -1)])
def test_text_spelling_a_declared_number_is_that_number(v, code):
    assert value_code(lookup_table((1, 2, 3)), v) == code


def test_the_library_the_frame_coder_and_river_agree():
    assert SCHEMA.encode(TEXT, ["1", "0"]).X.tolist() == CODES
    frame = pd.DataFrame(TEXT, dtype=str)
    assert encode_frame(SCHEMA, frame, ["1", "0"]).X.tolist() == CODES  # (a frame read with dtype=str)
    assert encode_frame(SCHEMA, frame, ["1", "0"], text=True).X.tolist() == CODES  # (CSV text)
    model = PrivateForestClassifier(SCHEMA, epsilon=1.0, seed=0)
    assert [model.encoder.encode_one(x) for x in TEXT] == [[1, 1, 0], [2, 0, 1]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # learned from, not dropped as undeclared
        model.learn_one(TEXT[0], "1")
    assert model.n_buffered == 1


def test_a_blank_text_is_missing_as_a_csv_cell_is():
    """A blank cell of a CSV is a missing value; the same blank text in memory was "not declared"."""
    from streamdp.records.read_errors import MISSING_WORDS

    with pytest.raises(ValueError, match=f"attribute 'rooms' {MISSING_WORDS}"):
        SCHEMA.encode([{"rooms": " ", "owner": True, "zone": "1"}], [0])
    with pytest.raises(ValueError, match=f"label 'y' {MISSING_WORDS}"):
        SCHEMA.encode([{"rooms": 2, "owner": True, "zone": "1"}], [""])
    enc = PrivateForestClassifier(SCHEMA, epsilon=1.0, seed=0).encoder
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # missing, not undeclared: dropped without a warning, as river's missing values
        assert enc.warn_unlearned({"rooms": "", "owner": True, "zone": "1"}, [None, 1, 0]) is False
