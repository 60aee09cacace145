"""Numbers given as text (csv.DictReader rows, read_csv(dtype=str)): one rule for every coder.

A numeric attribute takes a text that spells a finite number (``"5.1"``, ``" 12 "``, ``"-1e0"``); a blank text is
missing; any other text (``"inf"``, ``"nan"``, ``"1_0"``, words) is not a number, and the error names the attribute
and the row, never the value. :meth:`Schema.encode` (the library's fit, the service's records envelopes and pushes
with privacy ids), the frame coder (``Producer.push``) and the CSV reader apply the same rule.
"""

from __future__ import annotations

import csv
import io

import numpy as np
import pandas as pd
import pytest

from streamdp import PrivateForest, Schema
from streamdp.records.frames import frame_chunks
from streamdp.records.sources import read_csv_chunks

SCHEMA = Schema.from_dict(
    {
        "attributes": [
            {"name": "a", "type": "numeric", "min": 0, "max": 10},
            {"name": "c", "type": "categorical", "values": ["x", "y"]},
        ],
        "label": {"name": "y", "values": ["n", "p"]},
    }
)
ROWS = [{"a": "5.1", "c": "x"}, {"a": " 12 ", "c": "y"}, {"a": "-1e0", "c": "x"}, {"a": "+.5", "c": "y"}]
LABELS = ["n", "p", "n", "p"]
CODES = [[5.1, 0.0], [10.0, 1.0], [0.0, 0.0], [0.5, 1.0]]  # clamped to the declared range, as numbers are


def _coders():
    return {
        "Schema.encode": lambda X, y: SCHEMA.encode(X, y).X,
        "frame_chunks": lambda X, y: next(frame_chunks(X, y, SCHEMA)).X,
    }


@pytest.mark.parametrize("coder", sorted(_coders()))
def test_numeric_text_is_coded_as_the_number_it_spells_by_every_coder(coder):
    code = _coders()[coder]
    assert code(ROWS, LABELS).tolist() == CODES
    frame = pd.DataFrame(ROWS, dtype=str)  # read_csv(dtype=str): a frame of text
    assert code(frame, LABELS).tolist() == CODES
    rows = [[r["a"], r["c"]] for r in ROWS]  # rows in schema order
    assert code(np.array(rows), LABELS).tolist() == CODES


@pytest.mark.parametrize("coder", sorted(_coders()))
@pytest.mark.parametrize("text", ["a-secret-word", "inf", "-Infinity", "nan", "1e999", "1_0", "0x10", "1,5", "١٢"])
def test_text_that_is_not_a_finite_number_names_attribute_and_row_never_the_value(coder, text):
    rows = ROWS[:2] + [{"a": text, "c": "x"}] + ROWS[3:]
    with pytest.raises(ValueError) as err:
        _coders()[coder](rows, LABELS)
    msg = str(err.value)
    assert msg.startswith("record 2 (0-based): attribute 'a' is not a number")
    assert text not in msg.replace("attribute 'a'", "")


@pytest.mark.parametrize("coder", sorted(_coders()))
def test_a_blank_text_is_a_missing_value(coder):
    rows = ROWS[:1] + [{"a": "  ", "c": "y"}]
    with pytest.raises(ValueError, match=r"^record 1 \(0-based\): attribute 'a' is missing"):
        _coders()[coder](rows, LABELS[:2])


def test_fill_missing_fills_a_blank_text_but_not_a_word():
    """The river encoder's mode: a blank cell is a missing feature (the midpoint), a word is still invalid."""
    enc = SCHEMA.encode([{"a": "", "c": "x"}, {"a": "word", "c": "x"}], on_invalid="drop", fill_missing=True)
    assert enc.X.tolist() == [[5.0, 0.0]] and [r for r, _ in enc.dropped] == [1]


def test_csv_reader_refuses_text_that_is_not_a_finite_number_as_the_in_memory_coders_do():
    """The CSV file reader parses with pandas: it used to take ``inf`` and ``1e999`` as infinities (clamped)."""
    for body in ("a,c,y\n1,x,n\ninf,x,p\n", "a,c,y\n1,x,n\n1e999,x,p\n", "a,c,y\n1,x,n\nword,x,p\n"):
        with pytest.raises(ValueError, match=r"line 3: attribute 'a' is not a number"):
            list(read_csv_chunks(io.StringIO(body), SCHEMA))
    (chunk,) = read_csv_chunks(io.StringIO("a,c,y\n 5.1,x,n\n12,y,p\n"), SCHEMA)
    assert chunk.X.tolist() == CODES[:2]


def test_a_forest_fits_and_predicts_csv_dictreader_rows():
    """The way to read a CSV without pandas: every value a string."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, ["a", "c", "y"])
    w.writeheader()
    rng = np.random.default_rng(0)
    for _ in range(200):
        a = rng.uniform(0, 10)
        w.writerow({"a": f"{a:.2f}", "c": "x" if a < 5 else "y", "y": "n" if a < 5 else "p"})
    rows = list(csv.DictReader(io.StringIO(buf.getvalue())))
    labels = [r.pop("y") for r in rows]
    forest = PrivateForest.create(SCHEMA, n_trees=5, height=3, epsilon=1.0, seed=1).fit(rows, labels)
    assert len(forest.predict(rows)) == len(rows)


def test_a_producer_pushes_numeric_text_and_refuses_a_word_without_it():
    fakeredis = pytest.importorskip("fakeredis")
    pytest.importorskip("lupa")
    from streamdp.service.producer import Producer
    from streamdp.service.registry import create_model

    r = fakeredis.FakeRedis(server=fakeredis.FakeServer(), version=(7, 0))
    create_model(r, "m", SCHEMA, n_trees=3, height=3, epsilon=1.0, seed=1, release="batch")
    p = Producer(r, "m")
    p.push(ROWS, LABELS)
    p.push(ROWS, LABELS, ids=["u1", "u2", "u3", "u4"])  # (people: the records envelope, Schema.encode)
    with pytest.raises(ValueError, match=r"record 1 \(0-based\): attribute 'a' is not a number") as err:
        p.push(ROWS[:1] + [{"a": "a-secret-word", "c": "x"}], LABELS[:2])
    assert "secret" not in str(err.value)


def test_the_river_encoder_follows_the_same_rule_one_record_or_a_frame():
    """river's learn_one (the compiled kernel hands text back to the Python rule) and learn_many alike: a number's
    text is its value, a blank text a missing number (the midpoint), a word an unknown value (not learned)."""
    from streamdp.river.encoding import RecordEncoder

    enc = RecordEncoder(SCHEMA)
    rows = [*ROWS, {"a": " ", "c": "x"}, {"a": "inf", "c": "x"}, {"a": "word", "c": "y"}]
    one = [enc.encode_one(x) for x in rows]
    assert one[:4] == CODES and one[4] == [5.0, 0] and one[5][0] is None and one[6][0] is None
    X, unknown = enc.encode_frame(pd.DataFrame(rows, dtype=str))
    assert X[:5].tolist() == [*CODES, [5.0, 0.0]] and unknown.tolist() == [False] * 5 + [True] * 2


@pytest.mark.parametrize("coder", sorted(_coders()))
def test_decimal_and_fraction_numbers_are_numbers(coder):
    """A database driver gives ``Decimal`` for SQL NUMERIC: it was "not a number"."""
    from decimal import Decimal
    from fractions import Fraction

    rows = [{"a": Decimal("5.1"), "c": "x"}, {"a": Decimal("12"), "c": "y"}, {"a": Fraction(-1), "c": "x"}]
    assert _coders()[coder](rows, LABELS[:3]).tolist() == CODES[:3]
    with pytest.raises(ValueError, match=r"^record 0 \(0-based\): attribute 'a' is (NaN or )?missing"):
        _coders()[coder]([{"a": Decimal("NaN"), "c": "x"}], LABELS[:1])


def test_the_river_encoder_takes_decimals_too():
    from decimal import Decimal

    from streamdp.river.encoding import RecordEncoder

    enc = RecordEncoder(SCHEMA)
    assert enc.encode_one({"a": Decimal("5.1"), "c": "x"}) == CODES[0]
    assert enc.encode_one({"a": Decimal("NaN"), "c": "x"}) == [5.0, 0]  # river: NaN is a missing number
    assert enc.encode_one({"a": True, "c": "x"})[0] is None


@pytest.mark.parametrize("blank", ["\t", "\u00a0", " \t "])
def test_a_csv_cell_of_whitespace_alone_is_missing_as_in_memory(blank):
    """A cell of whitespace only (a tab, a no-break space) is blank text: missing in Schema.encode and river, so
    in the CSV reader too (it said 'not a number'; pandas' skipinitialspace strips spaces only)."""
    body = f"a,c,y\n1,x,n\n{blank},x,p\n"
    with pytest.raises(ValueError, match=r"line 3: attribute 'a' is missing"):
        list(read_csv_chunks(io.StringIO(body), SCHEMA))
    with pytest.raises(ValueError, match=r"^record 1 \(0-based\): attribute 'a' is missing"):
        SCHEMA.encode([{"a": "1", "c": "x"}, {"a": blank, "c": "x"}], ["n", "p"])
