"""Schema: declaration round trips, encoding, and the error messages of bad records."""

from __future__ import annotations

import json

import numpy as np
import pytest

from streamdp import Schema, SchemaError
from streamdp.records.schema import Categorical, Label, Numeric

SPEC = {
    "attributes": [
        {"name": "colour", "type": "categorical", "values": ["red", "green", "blue"]},
        {"name": "size", "type": "numeric", "min": 0, "max": 10},
        {"name": "flag", "type": "categorical", "values": [True, False, 0, 1, "x"]},
    ],
    "label": {"name": "ok", "values": ["no", "yes", "maybe"]},
}


@pytest.fixture
def schema() -> Schema:
    return Schema.from_dict(SPEC)


def rec(colour="red", size=1.0, flag="x"):
    return {"colour": colour, "size": size, "flag": flag}


# -- declaration ---------------------------------------------------------------------------


def test_from_dict_to_dict_round_trip(schema, tmp_path):
    d = schema.to_dict()
    assert d["attributes"][0] == SPEC["attributes"][0]
    assert d["attributes"][1] == {"name": "size", "type": "numeric", "min": 0.0, "max": 10.0}
    assert Schema.from_dict(d) == schema
    assert Schema.from_dict(d).to_dict() == d
    p = tmp_path / "s.json"
    p.write_text(json.dumps(SPEC))
    assert Schema.from_json(p) == schema
    assert Schema.from_dict(json.loads(schema.to_json())) == schema
    assert schema.names == ["colour", "size", "flag"]
    assert schema.n_classes == 3 and schema.classes == ("no", "yes", "maybe")
    assert schema.is_categorical.tolist() == [True, False, True]
    assert schema.arities.tolist() == [3, 0, 5]
    # bool and int values survive the round trip as themselves
    assert [type(v) for v in Schema.from_dict(d).attributes[2].values] == [bool, bool, int, int, str]


def test_from_json_bad_file(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        Schema.from_json(p)


@pytest.mark.parametrize(
    "mutate,match",
    [
        (lambda d: d.pop("label"), "label"),
        (lambda d: d.update(extra=1), "unknown schema keys"),
        (lambda d: d["attributes"].append({"name": "colour", "type": "numeric", "min": 0, "max": 1}), "unique"),
        (lambda d: d["attributes"][0].update(type="text"), "type must be"),
        (lambda d: d["attributes"][0].update(values=[]), "non-empty"),
        (lambda d: d["attributes"][0].update(values=["a", "a"]), "declared twice"),
        (lambda d: d["attributes"][0].update(values=[float("nan")]), "string, integer, finite number or boolean"),
        (lambda d: d["attributes"][0].update(values=[[1]]), "string, integer, finite number or boolean"),
        (lambda d: d["attributes"][0].update(values=[1, 1.0]), "declared twice"),
        (lambda d: d["attributes"][1].update(min=5, max=5), "below max"),
        (lambda d: d["attributes"][1].update(max=float("nan")), "finite"),
        (lambda d: d["attributes"][1].update(min=True), "finite number"),
        (
            lambda d: d["attributes"][1].pop("max"),
            r"'min' and 'max', and may declare 'quantiles' \(missing: \['max'\]\)$",
        ),
        (lambda d: d["attributes"][1].update(mean=3), r"may declare 'quantiles' \(extra: \['mean'\]\)$"),
        (lambda d: d["attributes"][0].pop("values"), r"categorical needs exactly 'values' \(missing: \['values'\]\)$"),
        (lambda d: d["label"].update(values=["only"]), "two classes"),
        (lambda d: d["label"].update(name="size"), "also listed"),
        (lambda d: d.update(attributes=[]), "at least one attribute"),
    ],
)
def test_bad_schema_refused(mutate, match):
    d = json.loads(json.dumps(SPEC))
    d["attributes"][2]["values"] = ["t", "f"]  # JSON-safe copy
    mutate(d)
    with pytest.raises(SchemaError, match=match):
        Schema.from_dict(d)


def test_true_and_one_are_distinct_declared_values():
    s = Schema.from_dict(
        {
            "attributes": [{"name": "a", "type": "categorical", "values": [True, 1, False, 0]}],
            "label": {"name": "y", "values": [0, False]},
        }
    )
    assert s.attributes[0].arity == 4
    with pytest.raises(SchemaError, match="declared twice"):
        Schema.from_dict(
            {
                "attributes": [{"name": "a", "type": "categorical", "values": [True, True]}],
                "label": {"name": "y", "values": [0, 1]},
            }
        )


# -- encoding ----------------------------------------------------------------------------------


def test_encode_dicts_and_arrays_agree(schema):
    rows = [rec("red", 1.5, True), rec("blue", 3, 0), rec("green", 10, "x")]
    y = ["no", "maybe", "yes"]
    e1 = schema.encode(rows, y)
    e2 = schema.encode([["red", 1.5, True], ["blue", 3, 0], ["green", 10, "x"]], y)
    e3 = schema.encode(np.array([["red", 1.5, True], ["blue", 3, 0], ["green", 10, "x"]], dtype=object), np.array(y))
    for e in (e1, e2, e3):
        assert e.X.dtype == np.float64
        assert e.X.tolist() == [[0, 1.5, 0], [2, 3, 2], [1, 10, 4]]
        assert e.y.tolist() == [0, 2, 1]
        assert e.n_dropped == 0 and e.kept.tolist() == [0, 1, 2]
    assert schema.encode(rows).y is None


def test_numeric_values_are_clamped(schema):
    e = schema.encode([rec(size=-3), rec(size=11.5), rec(size=float("inf")), rec(size=np.int64(7))])
    assert e.X[:, 1].tolist() == [0.0, 10.0, 10.0, 7.0]


def test_bool_and_int_values_not_confused(schema):
    # flag declares True, False, 0, 1 as four different values
    e = schema.encode(
        [
            rec(flag=True),
            rec(flag=1),
            rec(flag=False),
            rec(flag=0),
            rec(flag=np.bool_(True)),
            rec(flag=np.int64(1)),
            rec(flag=1.0),
        ]
    )
    assert e.X[:, 2].tolist() == [0, 3, 1, 2, 0, 3, 3]
    # a bool is not a number for a numeric attribute
    with pytest.raises(
        ValueError, match=r"record 1 \(0-based\): attribute 'size' is not a number \(declared: a number in \[0, 10\]\)$"
    ):
        schema.encode([rec(), rec(size=True)])
    s = Schema.from_dict(
        {
            "attributes": [{"name": "a", "type": "categorical", "values": [0, 1]}],
            "label": {"name": "y", "values": [0, 1]},
        }
    )
    with pytest.raises(
        ValueError,
        match=r"record 1 \(0-based\): attribute 'a' has a value not declared in the schema \(declared: \[0, 1\]\)$",
    ):
        s.encode([[1], [True]])
    with pytest.raises(
        ValueError,
        match=r"record 0 \(0-based\): label 'y' has a class not declared in the schema \(declared: \[0, 1\]\)$",
    ):
        s.encode([[1], [0]], [False, 0])
    s2 = Schema.from_dict(
        {
            "attributes": [{"name": "a", "type": "categorical", "values": [0, 1]}],
            "label": {"name": "y", "values": [True, 1]},
        }
    )
    assert s2.encode([[0], [1], [0]], [1, True, 1]).y.tolist() == [1, 0, 1]


@pytest.mark.parametrize(
    "row,match",
    [
        (
            rec(colour="purple"),
            r"record 2 \(0-based\): attribute 'colour' has a value not declared in the schema \(declared: \['red'",
        ),
        ({"size": 1.0, "flag": "x"}, r"record 2 \(0-based\): attribute 'colour' is missing"),
        (rec(colour=None), r"record 2 \(0-based\): attribute 'colour' is missing"),
        (rec(size=None), r"record 2 \(0-based\): attribute 'size' is missing"),
        ({"colour": "red", "flag": "x"}, r"record 2 \(0-based\): attribute 'size' is missing"),
        (rec(size="three"), r"record 2 \(0-based\): attribute 'size' is not a number \(declared: a number in \["),
        (rec(size=float("nan")), r"record 2 \(0-based\): attribute 'size' is NaN"),
        (rec(colour=float("nan")), r"record 2 \(0-based\): attribute 'colour' is missing"),
        (rec(flag=[1]), r"record 2 \(0-based\): attribute 'flag' has a value not declared in the schema"),
        (rec(flag=2), r"record 2 \(0-based\): attribute 'flag' has a value not declared in the schema"),
    ],
)
def test_bad_values_name_attribute_and_row(schema, row, match):
    """The attribute, the row and what is wrong (with the schema's declaration), never the value: applications log
    these errors."""
    rows = [rec(), rec(), row, rec()]
    with pytest.raises(ValueError, match=match) as e:
        schema.encode(rows, ["no"] * 4)
    assert "purple" not in str(e.value) and "'3'" not in str(e.value)
    rest = str(e.value).removeprefix("record 2 (0-based): ")  # (the row's number is named, not a value)
    if row["flag"] == [1]:
        assert "[1]" not in rest
    if row["flag"] == 2:
        assert "2" not in rest


def test_unknown_label_names_label_and_row(schema):
    with pytest.raises(
        ValueError,
        match=r"record 1 \(0-based\): label 'ok' has a class not declared in the schema \(declared: \['no', 'yes', 'maybe'\]\)$",
    ):
        schema.encode([rec(), rec()], ["no", "perhaps"])
    with pytest.raises(ValueError, match="y has 1 labels but X has 2 records"):
        schema.encode([rec(), rec()], ["no"])


def test_wrong_number_of_columns(schema):
    with pytest.raises(ValueError, match=r"record 1 \(0-based\): has 2 values but the schema has 3 attributes"):
        schema.encode([["red", 1, "x"], ["red", 1]])
    with pytest.raises(ValueError, match="X has 4 columns but the schema has 3 attributes"):
        schema.encode(np.zeros((2, 4)))
    with pytest.raises(ValueError, match="2-D"):
        schema.encode(np.zeros(3))
    with pytest.raises(ValueError):
        schema.encode(rec())  # a single dict is not a batch


def test_on_invalid_drop_drops_and_counts(schema):
    rows = [rec(), rec(colour="purple"), rec(size=float("nan")), rec(size=5), rec(flag=None), rec()]
    y = ["no", "yes", "yes", "maybe", "no", "unknown"]
    e = schema.encode(rows, y, on_invalid="drop")
    assert e.n_dropped == 4
    assert [r for r, _ in e.dropped] == [1, 2, 4, 5]
    assert "colour" in dict(e.dropped)[1] and "size" in dict(e.dropped)[2] and "label" in dict(e.dropped)[5]
    assert e.kept.tolist() == [0, 3]
    assert e.X.tolist() == [[0, 1, 4], [0, 5, 4]]
    assert e.y.tolist() == [0, 2]
    assert len(e) == 2
    with pytest.raises(ValueError, match="on_invalid"):
        schema.encode(rows, on_invalid="ignore")


def test_empty_batch(schema):
    for X in ([], np.empty((0, 3))):
        e = schema.encode(X, [])
        assert e.X.shape == (0, 3) and e.y.shape == (0,)


def test_encode_labels_and_decode(schema):
    codes = schema.encode_labels(["maybe", "no"])
    assert codes.tolist() == [2, 0]
    assert list(schema.decode_labels(codes)) == ["maybe", "no"]
    with pytest.raises(ValueError, match="has a class not declared in the schema") as e:
        schema.encode_labels(["nope"])
    assert "nope" not in str(e.value)


def test_data_frames_are_read_by_column_name(schema):
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"flag": [True, "x"], "size": [2.0, 20.0], "colour": ["blue", "red"], "extra": [1, 2]})
    e = schema.encode(df, pd.Series(["yes", "no"]))
    assert e.X.tolist() == [[2, 2.0, 0], [0, 10.0, 4]]
    assert e.y.tolist() == [1, 0]
    with pytest.raises(ValueError, match=r"missing the schema attributes \['colour'\]"):
        schema.encode(df.drop(columns="colour"))
    # a frame without column names is read in schema order
    assert schema.encode(pd.DataFrame([["blue", 2.0, True]])).X.tolist() == [[2, 2.0, 0]]


def test_object_column_codes_match_value_by_value_lookup():
    """The hashing fast path of the encoder gives, for every kind of value, the code the
    value-by-value rules give (True apart from 1, 1.0 as 1, numpy scalars, misses, NaN, None)."""
    from streamdp.records.coding import lookup_codes as _lookup_codes
    from streamdp.records.coding import value_code as _lookup_value

    s = Schema.from_dict(
        {
            "attributes": [{"name": "a", "type": "categorical", "values": [True, 1, "1", 0, "z"]}],
            "label": {"name": "y", "values": [0, 1]},
        }
    )
    lookup = s._lookup[0]
    pool = [
        True,
        False,
        1,
        0,
        1.0,
        0.0,
        2.5,
        float("nan"),
        None,
        "1",
        "z",
        np.str_("z"),
        np.int64(1),
        np.float64(1.0),
        np.bool_(True),
        b"z",
        "missing",
        -1,
    ]
    rng = np.random.default_rng(0)
    col = np.empty(500, dtype=object)
    col[:] = [pool[i] for i in rng.integers(0, len(pool), 500)]
    assert _lookup_codes(lookup, col).tolist() == [_lookup_value(lookup, v) for v in col]
    assert _lookup_codes(lookup, np.array([True, 1], dtype=object)).tolist() == [0, 1]
    unhashable = np.empty(2, dtype=object)
    unhashable[:] = [["z"], "z"]
    assert _lookup_codes(lookup, unhashable).tolist() == [-1, 4]


def test_typed_columns_code_like_object_columns():
    """Integer (table over the range, or np.unique past 4096), string and label arrays give the
    codes their object-array forms give, including undeclared values."""
    from streamdp.records.coding import lookup_codes as _lookup_codes

    s = Schema.from_dict(
        {
            "attributes": [
                {"name": "a", "type": "categorical", "values": [3, -2, 9000, 7]},
                {"name": "b", "type": "categorical", "values": ["x", "yy"]},
            ],
            "label": {"name": "y", "values": ["no", "yes"]},
        }
    )
    rng = np.random.default_rng(1)
    for ints in (rng.choice([3, -2, 7, 5], 300), rng.choice([3, -2, 9000, 7, 100_000], 300)):  # small / wide range
        for dtype in (np.int64, np.int32):
            col = ints.astype(dtype)
            assert _lookup_codes(s._lookup[0], col).tolist() == _lookup_codes(s._lookup[0], col.astype(object)).tolist()
    assert _lookup_codes(s._lookup[0], np.array([3, 7], dtype=np.uint8)).tolist() == [0, 3]
    strs = rng.choice(["x", "yy", "zz"], 300)
    assert _lookup_codes(s._lookup[1], strs).tolist() == _lookup_codes(s._lookup[1], strs.astype(object)).tolist()
    X = np.column_stack([rng.choice([3, 7], 50), np.zeros(50, dtype=int)]).astype(object)
    X[:, 1] = "x"
    y = rng.choice(["no", "yes"], 50)
    assert s.encode(X, y).y.tolist() == s.encode(X, list(y)).y.tolist()
    with pytest.raises(ValueError, match="label 'y' has a class not declared in the schema"):
        s.encode(X[:1], np.array(["maybe"]))


def test_numeric_arrays_coded_through_a_table_like_their_values():
    """Float and integer arrays of categorical codes: whole numbers hit, anything else is named unknown."""
    s = Schema.from_dict(
        {
            "attributes": [
                {"name": "a", "type": "categorical", "values": [0, 1, 2]},
                {"name": "b", "type": "categorical", "values": [-1, 7]},
            ],
            "label": {"name": "y", "values": [0, 1]},
        }
    )
    X = np.array([[0.0, 7.0], [2.0, -1.0], [1.0, 7.0]])
    enc = s.encode(X, np.array([1.0, 0.0, 1.0]))
    assert enc.X.tolist() == [[0, 1], [2, 0], [1, 1]] and enc.y.tolist() == [1, 0, 1]
    assert s.encode(X.astype(np.int16)).X.tolist() == enc.X.tolist()
    for bad, row in (
        ([[0.0, 7.0], [2.5, 7.0]], 1),
        ([[0.0, 7.0], [np.nan, 7.0]], 1),
        ([[3.0, 7.0]], 0),
        ([[0.0, 7.0], [1.0, 1e300]], 1),
        ([[0.0, np.inf]], 0),
    ):
        with pytest.raises(ValueError, match=rf"record {row} \(0-based\): attribute"):
            s.encode(np.array(bad))
    with pytest.raises(ValueError, match=r"record 1 \(0-based\): label 'y'"):
        s.encode(X, np.array([1.0, 0.5, 1.0]))
    dropped = s.encode(np.array([[0.0, 7.0], [2.5, 7.0], [1.0, -1.0]]), on_invalid="drop")
    assert dropped.kept.tolist() == [0, 2] and dropped.dropped[0][0] == 1


# -- numeric-looking and boolean declared values --------------------------------------


def _num_schema():
    return Schema(
        [Categorical("f", (0, 0.5, 1)), Categorical("b", (False, True)), Numeric("n", 0, 10)], Label("y", (False, True))
    )


@pytest.mark.parametrize("container", ["dicts", "object array", "float array", "frame"])
def test_float_and_bool_declared_values_encode_exactly(container):
    s = _num_schema()
    rows = [[0.5, True, 1.0], [1.0, False, 2.0], [0, np.bool_(True), 3.0], [np.float64(0.5), False, 4.0]]
    y = [True, False, np.bool_(True), False]
    if container == "dicts":
        X = [dict(zip(s.names, r)) for r in rows]
    elif container == "object array":
        X = np.array(rows, dtype=object)
    elif container == "float array":
        X = np.array([[r[0], float(r[1]), r[2]] for r in rows])
    else:
        pd = pytest.importorskip("pandas")
        X = pd.DataFrame(rows, columns=s.names)
    if container == "float array":  # a float column cannot hold booleans: 1.0 is not True
        with pytest.raises(
            ValueError, match=r"record 0 \(0-based\): attribute 'b' has a value not declared in the schema"
        ):
            s.encode(X, y)
        return
    e = s.encode(X, y)
    assert e.X[:, 0].tolist() == [1, 2, 0, 1]
    assert e.X[:, 1].tolist() == [1, 0, 1, 0]
    assert e.y.tolist() == [1, 0, 1, 0]


@pytest.mark.parametrize(
    "bad,why",
    [
        (0.25, "has a value not declared in the schema"),
        ("0.5x", "has a value not declared in the schema"),
        ("0.25", "has a value not declared in the schema"),
        (True, "has a value not declared in the schema"),
        (0.5000001, "has a value not declared in the schema"),
    ],
)
def test_float_declared_values_never_coerce_unknown_values(bad, why):
    s = _num_schema()
    rec = {"f": bad, "b": True, "n": 1.0}
    with pytest.raises(ValueError, match=rf"record 0 \(0-based\): attribute 'f' {why}"):
        s.encode([rec])
    assert s.encode([rec, {"f": 0.5, "b": True, "n": 1.0}], on_invalid="drop").kept.tolist() == [1]
    col = np.array([bad, 0.5], dtype=object)
    assert s.encode(np.column_stack([col, [True, True], [1.0, 1.0]]), on_invalid="drop").kept.tolist() == [1]


def test_bool_declared_values_refuse_integers_and_labels_stay_exact():
    s = _num_schema()
    with pytest.raises(ValueError, match=r"record 0 \(0-based\): attribute 'b' has a value not declared in the schema"):
        s.encode([{"f": 0, "b": 1, "n": 1.0}])
    with pytest.raises(ValueError, match=r"label 'y' has a class not declared in the schema"):
        s.encode([{"f": 0, "b": True, "n": 1.0}], [1])
    assert Schema.from_dict(s.to_dict()) == s  # JSON-able: 0.5 and booleans survive the round trip
    assert Schema.from_dict(json.loads(s.to_json())) == s


def test_fill_missing_puts_the_midpoint_for_numbers_only():
    s = _num_schema()
    e = s.encode(
        [
            {"f": 0, "b": True},
            {"f": 0, "b": True, "n": float("nan")},
            {"f": 0, "b": True, "n": None},
            {"b": True, "n": 2.0},
            {"f": 0, "b": True, "n": "x"},
        ],
        on_invalid="drop",
        fill_missing=True,
    )
    assert e.kept.tolist() == [0, 1, 2]
    assert e.X[:, 2].tolist() == [5.0, 5.0, 5.0]
    assert [r for r, _ in e.dropped] == [3, 4]


def test_numeric_matrix_fast_path_matches_the_column_coder():
    """Schema.encode's whole-matrix path for numeric arrays gives what the value-by-value coder gives."""
    s = Schema.from_dict(
        {
            "attributes": [
                {"name": "a", "type": "categorical", "values": [0, 1, 2]},
                {"name": "x", "type": "numeric", "min": -1, "max": 1},
                {"name": "b", "type": "categorical", "values": [5, 7, "z"]},
            ],
            "label": {"name": "y", "values": [0, 1]},
        }
    )
    rng = np.random.default_rng(3)
    for trial in range(60):
        n = int(rng.integers(1, 50))
        X = np.column_stack([rng.integers(0, 3, n), rng.normal(0, 2, n), rng.choice([5, 7], n)]).astype(np.float64)
        if trial % 3 == 1:  # a bad value somewhere: not a whole number, undeclared, NaN
            X[rng.integers(n), rng.integers(3)] = rng.choice([2.5, 6.0, np.nan, 3.0])
        y = rng.integers(0, 2, n)
        for arr in (X, X.astype(np.int64) if not np.isnan(X).any() else X):
            fast = s.encode(arr, y, on_invalid="drop")
            slow = s.encode(arr.astype(object), y, on_invalid="drop")
            assert np.array_equal(fast.X, slow.X) and np.array_equal(fast.y, slow.y)
            assert [r for r, _ in fast.dropped] == [r for r, _ in slow.dropped]


@pytest.mark.parametrize("values", [[0, 1, 2], [3, 4, 5], [-2, -1, 0, 1], [2, 0, 1], [0, 2, 4], [1.0, 2, 3.5]])
def test_matrix_path_over_declared_tables_matches_the_column_coder(values):
    """Consecutive codes from 0 (code = value), an offset start, a permutation, gaps, a declared
    fraction; bad values at the edges of int64 and float64: the matrix path agrees with the
    value-by-value coder, and takes every valid matrix itself."""
    s = Schema.from_dict(
        {
            "attributes": [
                {"name": "a", "type": "categorical", "values": values},
                {"name": "b", "type": "categorical", "values": [0, 1]},
            ],
            "label": {"name": "y", "values": [0, 1]},
        }
    )
    whole = [v for v in values if float(v).is_integer()]
    rng = np.random.default_rng(7)
    bad_f = [np.nan, np.inf, -np.inf, 1e300, -1e300, 2.0**63, -(2.0**63), 0.5, -0.5, min(whole) - 1.0, max(whole) + 1.0]
    bad_i = [np.iinfo(np.int64).min, np.iinfo(np.int64).max, min(whole) - 1, max(whole) + 1, -(2**62)]
    for trial in range(40):
        n = int(rng.integers(1, 30))
        X = np.column_stack([rng.choice(whole, n), rng.integers(0, 2, n)]).astype(np.int64)
        Xf = X.astype(np.float64)
        if trial % 2:
            i, j = int(rng.integers(n)), int(rng.integers(2))
            X[i, j] = bad_i[trial % len(bad_i)]
            Xf[i, j] = bad_f[trial % len(bad_f)]
        else:
            assert s._encode_matrix(X) is not None and s._encode_matrix(Xf) is not None
        y = rng.integers(0, 2, n)
        for arr in (X, Xf, X.astype(np.int32) if trial % 2 == 0 else X, X.view(np.uint64)):
            fast = s.encode(arr, y, on_invalid="drop")
            slow = s.encode(arr.astype(object), y, on_invalid="drop")
            assert np.array_equal(fast.X, slow.X) and np.array_equal(fast.y, slow.y), (arr, values)
            assert [r for r, _ in fast.dropped] == [r for r, _ in slow.dropped]


def test_values_and_ranges_a_model_cannot_store_are_refused_clearly():
    """A range whose width overflows a float, or an integer beyond 64 bits, ended model
    create in a raw OverflowError (the split point draw, msgpack)."""
    with pytest.raises(SchemaError, match="wider than a float"):
        Schema.from_dict(
            {
                "attributes": [{"name": "a", "type": "numeric", "min": -1e308, "max": 1e308}],
                "label": {"name": "y", "values": [0, 1]},
            }
        )
    with pytest.raises(SchemaError, match="64-bit range"):
        Schema.from_dict(
            {
                "attributes": [{"name": "a", "type": "categorical", "values": [0, 2**64]}],
                "label": {"name": "y", "values": [0, 1]},
            }
        )
    with pytest.raises(SchemaError, match="64-bit range"):
        Schema.from_dict(
            {
                "attributes": [{"name": "a", "type": "categorical", "values": [0, 1]}],
                "label": {"name": "y", "values": [-(2**63) - 1, 1]},
            }
        )


def test_integers_beyond_a_float_or_int64_are_clamped_or_unknown_never_an_overflow():
    """Learn_many / predict_proba_many raised OverflowError on 10**400 in a numeric column or
    2**63 in a categorical one, where the one-record path clamps the first and finds the second undeclared."""
    s = Schema.from_dict(
        {
            "attributes": [
                {"name": "n", "type": "numeric", "min": 0, "max": 10},
                {"name": "c", "type": "categorical", "values": [0, 1, 2]},
            ],
            "label": {"name": "y", "values": [0, 1]},
        }
    )
    X = np.array([[10**400, 1], [-(10**400), 2], [5, 2**63], [5, 1.0 * 2**63]], dtype=object)
    enc = s.encode(X, np.array([0, 1, 0, 1]), on_invalid="drop")
    assert enc.X.tolist() == [[10.0, 1.0], [0.0, 2.0]] and len(enc.dropped) == 2  # clamped; undeclared dropped
    assert all("'c'" in str(reason) for _, reason in enc.dropped)


def test_raise_names_the_first_bad_record_not_the_first_bad_column():
    """A missing value in record 1 was named before an undeclared value in record 0 (the
    columns were checked one after another). The error names the first bad record, and its first bad value."""
    from streamdp.records.datasets import load

    ds = load("congressional-voting")
    s = ds.schema
    rows = [dict(zip(s.names, r)) for r in ds.X[:3].tolist()]
    rows[0][s.names[3]] = "maybe"  # record 0: an undeclared value in the fourth attribute
    rows[0][s.names[5]] = "perhaps"  # ... and another after it
    del rows[1][s.names[0]]  # record 1: the first attribute missing
    with pytest.raises(
        ValueError, match=rf"record 0 \(0-based\): attribute '{s.names[3]}' has a value not declared in the schema"
    ):
        s.encode(rows)
    with pytest.raises(ValueError, match=r"record 1 \(0-based\): label"):
        s.encode(ds.X[:3], ["democrat", "nobody", "x"])
    enc = s.encode(rows, on_invalid="drop")
    assert [r for r, _ in enc.dropped] == [0, 1] and len(enc.X) == 1


@pytest.mark.parametrize("text", ["[1]", '"a schema"', "[]", "  \n[1, 2]", ""])
def test_json_text_that_is_no_schema_is_a_schema_error_not_a_missing_file(text):
    """Any JSON text is read as text (a file name never starts with a bracket or a quote): a schema error."""
    with pytest.raises(SchemaError):
        Schema.from_json(text)


def test_a_deeply_nested_schema_file_is_a_schema_error(tmp_path):
    """100,000 nested brackets end in a SchemaError naming the file, not a RecursionError traceback."""
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(SchemaError, match="deep.json: nested too deeply"):
        Schema.from_json(path)
    with pytest.raises(SchemaError, match="nested too deeply"):
        Schema.from_json('{"attributes": ' + "[" * 100_000)
