"""The stream codec: envelopes round trip compactly; anything undecodable becomes a dead letter."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
from hypothesis import strategies as st

fakeredis = pytest.importorskip("fakeredis")
pytest.importorskip("lupa")

from streamdp.service import codec  # noqa: E402
from tests.service.conftest import DS, _model, _worker  # noqa: E402


def test_codec_roundtrip_is_compact():
    env = codec.encode_batch(DS.schema, DS.X[:100], DS.y[:100], batch_id="b-1")
    assert len(env) < 100 * 16 + 400  # one byte per categorical code
    b = codec.decode(DS.schema, env)
    enc = DS.schema.encode(DS.X[:100], DS.y[:100])
    assert b.batch_id == "b-1" and np.array_equal(b.X, enc.X) and np.array_equal(b.y, enc.y) and not b.dropped


@pytest.mark.parametrize(
    "payload, reason",
    [
        (b"\xc1garbage", "not msgpack"),
        (msgpack.packb([1, 2]), "must be a map"),
        (msgpack.packb({"format": "other"}), "not a streamdp.batch"),
        (
            msgpack.packb({"format": "streamdp.batch", "format_version": 1, "batch_id": "a b", "kind": "codes"}),
            "batch_id",
        ),
        (msgpack.packb({"format": "streamdp.batch", "format_version": 1, "batch_id": "a", "kind": "zzz"}), "kind"),
        (
            msgpack.packb(
                {
                    "format": "streamdp.batch",
                    "format_version": 1,
                    "batch_id": "a",
                    "kind": "codes",
                    "X": {"dtype": "|O", "shape": [1], "data": b"x"},
                    "y": None,
                }
            ),
            "dtype",
        ),
        (
            msgpack.packb(
                {
                    "format": "streamdp.batch",
                    "format_version": 1,
                    "batch_id": "a",
                    "kind": "records",
                    "records": [{}],
                    "labels": [],
                }
            ),
            "labels",
        ),
    ],
)
def test_codec_rejects_undecodable_entries(payload, reason):
    with pytest.raises(codec.EnvelopeError, match=reason):
        codec.decode(DS.schema, payload)


def test_codec_drops_bad_rows_with_reasons():
    from streamdp import blob

    enc = DS.schema.encode(DS.X[:5], DS.y[:5])
    X = enc.X.copy()
    X[1, 0] = 7  # code outside the arity
    X[3, 2] = 1.5  # not an integer code
    y = enc.y.copy()
    y[4] = 9
    env = msgpack.packb(
        {
            "format": "streamdp.batch",
            "format_version": 1,
            "batch_id": "x",
            "kind": "codes",
            "X": blob.pack_array(X),
            "y": blob.pack_array(y),
        }
    )
    b = codec.decode(DS.schema, env)
    assert [r for r, _ in b.dropped] == [1, 3, 4] and len(b.y) == 2
    assert "outside" in b.dropped[0][1] and "outside" in b.dropped[1][1] and "label" in b.dropped[2][1]
    X[3, 2] = np.nan  # a NaN in a codes array: the producer is broken, the whole entry is dead-lettered
    env = msgpack.packb(
        {
            "format": "streamdp.batch",
            "format_version": 1,
            "batch_id": "x",
            "kind": "codes",
            "X": blob.pack_array(X),
            "y": blob.pack_array(y),
        }
    )
    with pytest.raises(codec.EnvelopeError, match="NaN"):
        codec.decode(DS.schema, env)
    recs = [dict(zip(DS.schema.names, row)) for row in DS.X[:3]]
    recs[1]["crime"] = "maybe"
    b = codec.decode(DS.schema, codec.encode_records(recs + ["nope"], list(DS.y[:3]) + ["democrat"]))
    assert b.dropped[0] == (1, "attribute 'crime' has a value not declared in the schema")  # never the value
    assert [r for r, _ in b.dropped] == [1, 3]


def test_codec_wants_an_integer_format_version():
    env = msgpack.unpackb(codec.encode_batch(DS.schema, DS.X[:2], DS.y[:2]))
    env["format_version"] = 1.0
    with pytest.raises(codec.EnvelopeError):
        codec.decode(DS.schema, msgpack.packb(env))


# -- the decode boundary is total -------------------------------------
_FIELD_MAPS = st.dictionaries(
    st.one_of(st.binary(max_size=12), st.just(b"d"), st.sampled_from([b"\xff", b"\xfe\x00", b"\xc3("])),
    st.one_of(
        st.binary(max_size=64),
        st.builds(lambda d: codec.encode_batch(DS.schema, DS.X[:2], DS.y[:2]) + d, st.binary(max_size=4)),
    ),
    max_size=6,
)


def test_decode_boundary_turns_any_field_map_into_a_batch_or_a_dead_letter():
    """Any map of arbitrary bytes (non-UTF-8 field names included), and a deleted entry, becomes either a
    decoded batch or a dead letter with a reason; the decode step never raises."""
    from hypothesis import HealthCheck, given, settings

    from streamdp.service.merging import WorkerEntry

    client = fakeredis.FakeRedis(server=fakeredis.FakeServer(), version=(7, 0))
    _model(client)
    w = _worker(client, "m", max_deliveries=3)

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(fields=st.one_of(st.none(), _FIELD_MAPS), deliveries=st.integers(1, 5))
    def check(fields, deliveries):
        e = WorkerEntry("1-0", fields, deliveries)
        w._decode(e)
        assert (e.batch is None) != (e.dead is None)
        if e.dead is not None:
            reason, detail = e.dead
            assert isinstance(reason, str) and reason.strip() and isinstance(detail, bytes)
        if deliveries > 3 and fields is not None:
            assert e.dead is not None and e.dead[0].startswith("poison")

    check()


def test_codes_decode_alike_with_and_without_a_bad_row():
    """The all-valid whole-array path and the per-attribute loop (taken once a row is bad) decode the valid rows
    alike, numeric values outside their range clipped in both."""
    from streamdp.records.datasets import load

    ds = load("adult")
    schema = ds.schema
    enc = schema.encode(ds.X[:200], ds.y[:200])
    X = enc.X.astype(np.float64)
    num = int(np.flatnonzero(~schema.is_categorical)[0])
    X[3, num] = schema.attributes[num].max + 1e6  # clipped, not dropped
    X[4, num] = schema.attributes[num].min - 1e6
    y = enc.y.astype(np.int64)
    good = codec.decode(schema, codec.encode_codes(schema, X, y, batch_id="g"))
    cat = int(np.flatnonzero(schema.is_categorical)[0])
    Xb = X.copy()
    Xb[7, cat] = schema.arities[cat]  # out of range: this row is dropped
    bad = codec.decode(schema, codec.encode_codes(schema, Xb, y, batch_id="b"))
    assert not good.dropped and [r for r, _ in bad.dropped] == [7]
    assert good.X[3, num] == schema.attributes[num].max and good.X[4, num] == schema.attributes[num].min
    assert np.array_equal(np.delete(good.X, 7, axis=0), bad.X) and np.array_equal(np.delete(good.y, 7), bad.y)


def test_records_envelope_sends_decimal_fraction_and_numpy_numbers_as_plain_ones():
    """A database driver's ``Decimal`` (a signalling NaN too) is sent, and a NaN is then a missing value the
    worker drops by row; a type msgpack cannot carry is refused naming the type, not the value."""
    from decimal import Decimal
    from fractions import Fraction

    from streamdp.records.schema import Schema

    s = Schema.from_dict(
        {
            "attributes": [{"name": "a", "type": "numeric", "min": 0, "max": 1}],
            "label": {"name": "y", "values": [0, 1]},
        }
    )
    recs = [[Decimal("0.25")], [Decimal("sNaN")], [Fraction(1, 2)], [np.float32(0.75)]]
    b = codec.decode(s, codec.encode_records(recs, [Decimal("1"), np.int64(0), 1, 0]))
    assert b.X[:, 0].tolist() == [0.25, 0.5, 0.75]
    assert b.y.tolist() == [1, 1, 0]
    assert [r for r, _ in b.dropped] == [1]
    with pytest.raises(TypeError, match="type secret_type cannot be sent") as e:
        codec.encode_records([[type("secret_type", (), {})()]], [0])
    assert "0x" not in str(e.value)
    with pytest.raises(TypeError, match="^a value of type datetime64 cannot be sent"):  # not msgpack's own words
        codec.encode_records([[np.datetime64("2020-01-01")]], [0])
    b = codec.decode(s, codec.encode_records([[Decimal("Infinity")], [np.longdouble(0.5)]], [0, 1]))
    assert b.X[:, 0].tolist() == [1.0, 0.5]  # an infinity is a number, clamped to the range, as everywhere
