"""The model format: round trips, and malformed blobs always raise ValueError and never run code."""

from __future__ import annotations

import builtins
import json
import math
import pickle
from pathlib import Path

import msgpack
import numpy as np
import pytest

from streamdp import PrivateForest, Schema
from streamdp import blob as blobmod
from streamdp.blob import BlobError, pack_array, unpack_array
from streamdp.forest.persistence import FORMAT_VERSION, compact_structure

SCHEMA = Schema.from_dict(
    {
        "attributes": [
            {"name": "a", "type": "categorical", "values": ["p", "q", "r"]},
            {"name": "b", "type": "numeric", "min": 0, "max": 100},
            {"name": "c", "type": "categorical", "values": [True, False, 0]},
        ],
        "label": {"name": "y", "values": ["no", "yes"]},
    }
)


def data(n, seed=0):
    rng = np.random.default_rng(seed)
    X = np.empty((n, 3), dtype=object)
    X[:, 0] = np.array(["p", "q", "r"], dtype=object)[rng.integers(3, size=n)]
    X[:, 1] = rng.uniform(0, 100, n)
    X[:, 2] = np.array([True, False, 0], dtype=object)[rng.integers(3, size=n)]
    y = np.where(X[:, 1].astype(float) > 40, "yes", "no").astype(object)
    return X, y


def forest(**kw) -> PrivateForest:
    X, y = data(400)
    opts = dict(n_trees=3, height=3, epsilon=1.0, seed=1)
    opts.update(kw)
    return PrivateForest.create(SCHEMA, **opts).fit(X, y)


@pytest.fixture(scope="module")
def good() -> bytes:
    return forest().to_bytes()


def doc_of(b: bytes) -> dict:
    return msgpack.unpackb(b, raw=False)


def pack(doc: dict) -> bytes:
    return msgpack.packb(doc, use_bin_type=True)


def v1_doc(f: PrivateForest) -> dict:
    """``f``'s blob as format version 1 wrote it: the structure as padded arrays."""
    d = doc_of(f.to_bytes())
    d["format_version"] = 1
    d["structure"] = {name: pack_array(a, fill_ok=name == "threshold") for name, a in f.structure.arrays().items()}
    return d


# -- round trip ---------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["geometric", "laplace", "kanon"])
@pytest.mark.parametrize("vote", ["proba", "majority"])
@pytest.mark.parametrize("budget", ["split", "disjoint"])
def test_round_trip(mechanism, vote, budget):
    kw = dict(mechanism=mechanism, vote=vote, budget=budget)
    if mechanism == "kanon":
        kw.update(k=3, beta=0.3, epsilon=3.0)
    f = forest(**kw)
    X, y = data(50, seed=2)
    f.update(X, y)
    g = PrivateForest.from_bytes(f.to_bytes())
    assert g.schema == f.schema
    for name, arr in f.structure.arrays().items():
        assert np.array_equal(arr, g.structure.arrays()[name])
        assert arr.dtype == g.structure.arrays()[name].dtype
    assert g.structure.height == f.structure.height
    assert np.array_equal(g.counts, f.counts) and g.counts.dtype == f.counts.dtype
    assert (g.epsilon, g.delta, g.version, g.n_releases) == (f.epsilon, f.delta, f.version, f.n_releases)
    assert (g.mechanism, g.vote, g.budget, g.k, g.beta, g.private) == (
        f.mechanism,
        f.vote,
        f.budget,
        f.k,
        f.beta,
        f.private,
    )
    assert np.array_equal(g.predict_proba(X), f.predict_proba(X))
    assert np.array_equal(g.apply(X), f.apply(X))
    # a loaded forest keeps learning
    g.update(X, y)
    assert g.n_releases == f.n_releases + 1


@pytest.mark.filterwarnings(
    "ignore:PrivateForest.create\\(epsilon=inf\\):streamdp.privacy.NotPrivateWarning"
)  # (exact counts on purpose)
def test_round_trip_infinite_epsilon():
    f = forest(epsilon=math.inf)
    g = PrivateForest.from_bytes(f.to_bytes())
    assert math.isinf(g.epsilon) and not g.private
    assert np.array_equal(g.counts, f.counts)


def test_blob_is_self_describing(good):
    d = doc_of(good)
    assert d["format"] == "streamdp.forest" and d["format_version"] == FORMAT_VERSION == 3
    assert d["counts"]["dtype"] == "<i8" and isinstance(d["counts"]["data"], bytes)
    assert d["schema"] == SCHEMA.to_dict()


def test_pack_unpack_array():
    for a in (
        np.arange(6, dtype=np.int32).reshape(2, 3),
        np.array([1.5, np.inf]),
        np.zeros((0, 4)),
        np.array([True, False]),
        np.arange(3, dtype=">i8"),
    ):
        r = unpack_array(pack_array(a), "threshold")
        assert np.array_equal(r, a) and r.shape == a.shape
    with pytest.raises(TypeError):
        pack_array(np.array(["a"], dtype=object))


def test_a_fresh_models_zero_counts_travel_as_their_shape_alone():
    """A spec (version 0) is a third counts at height 10, all zeros: they are sent, stored twice in Redis and held
    by every worker for nothing. Now {"dtype", "shape", "fill": 0}, decoded as np.zeros (pages mapped when
    written); counts with anything in them keep their bytes."""
    fresh = PrivateForest.create(SCHEMA, n_trees=40, height=7, epsilon=1.0, seed=1)
    assert fresh.counts.nbytes >= blobmod.FILL_MIN_BYTES
    b = fresh.to_bytes()
    assert doc_of(b)["counts"] == {"dtype": "<i8", "shape": list(fresh.counts.shape), "fill": 0}
    back = PrivateForest.from_bytes(b)
    assert back.counts.shape == fresh.counts.shape and back.counts.dtype == np.int64 and not back.counts.any()
    X, y = data(300)
    fitted = back.fit(X, y)
    assert "data" in doc_of(fitted.to_bytes())["counts"]  # noisy counts: never all zero at this size
    np.testing.assert_array_equal(PrivateForest.from_bytes(fitted.to_bytes()).counts, fitted.counts)
    full = blobmod.packb({**doc_of(b), "counts": pack_array(fresh.counts)})  # the blob as it was
    assert len(b) + fresh.counts.nbytes - 100 < len(full) < len(b) + fresh.counts.nbytes + 100
    small = PrivateForest.create(SCHEMA, n_trees=2, height=1, epsilon=1.0, seed=1)  # under 64 KiB: its bytes
    assert "data" in doc_of(small.to_bytes())["counts"]


def test_an_all_categorical_forests_thresholds_are_one_value_in_memory_and_in_its_blob():
    """All +inf in an all-categorical forest (40% of a height-10 structure's bytes): a read-only broadcast of one
    value on the structure, a fill record in the blob; routing, pruning, growth and the round trip unchanged."""
    from streamdp.records.datasets import load

    ds = load("nursery")
    f = PrivateForest.create(ds.schema, n_trees=10, height=6, epsilon=1.0, seed=2)
    thr = f.structure.threshold
    assert thr.shape == f.structure.feature.shape and thr.strides == (0, 0) and np.all(np.isposinf(thr))
    doc = doc_of(f.to_bytes())
    assert doc["structure"]["layout"] == "bfs" and doc["structure"]["threshold"]["shape"] == [0]
    assert PrivateForest.from_bytes(f.to_bytes()).structure.threshold.strides == (0, 0)
    fitted = f.fit(ds.X[:8000], ds.y[:8000])  # a pruned fit: a new structure, compacted again
    back = PrivateForest.from_bytes(fitted.to_bytes())
    np.testing.assert_array_equal(back.predict_proba(ds.X[8000:]), fitted.predict_proba(ds.X[8000:]))
    np.testing.assert_array_equal(back.apply(ds.X[8000:]), fitted.apply(ds.X[8000:]))
    mixed = PrivateForest.create(SCHEMA, n_trees=40, height=7, epsilon=1.0, seed=1)  # numeric splits: its bytes
    assert "data" in doc_of(mixed.to_bytes())["structure"]["threshold"] and mixed.structure.threshold.strides != (0, 0)


@pytest.mark.parametrize(
    "record",
    [
        {"dtype": "<i8", "shape": [2, 3], "fill": "yes"},
        {"dtype": "<i8", "shape": [2, 3], "fill": False},
        {"dtype": "<i8", "shape": [2, 3], "fill": None},
        {"dtype": "<i8", "shape": [2, 3], "fill": 0.5},
        {"dtype": "<i8", "shape": [2, 3], "fill": 2**70},
        {"dtype": "<f8", "shape": [2, 3], "fill": float("nan")},
        {"dtype": "<f8", "shape": [2, 3], "fill": float("inf")},  # (only thresholds may be infinite)
        {"dtype": "<i8", "shape": [2, 3], "fill": 0, "data": b""},
        {"dtype": "|O", "shape": [2], "fill": 0},
        {"dtype": "<i8", "shape": [1 << 20, 1 << 20], "fill": 0},
        {"dtype": "<i8", "shape": [-1], "fill": 0},
    ],
)
def test_a_malformed_zeros_record_is_refused(record):
    with pytest.raises(BlobError):
        unpack_array(record, "counts", fill_shape=(2, 3))


def test_a_zeros_record_is_accepted_only_where_expected_and_of_the_expected_shape(wall_clock):
    """A review's bomb: a 2 KB blob of zeros records for the structure arrays made the reader allocate 4 GiB
    before refusing it; a 138-byte stream entry of zeros X/y decoded to a million records."""
    import time

    from streamdp.service import codec

    z = {"dtype": "<i8", "shape": [2, 3], "fill": 0}
    assert unpack_array(z, "counts", fill_shape=(2, 3)).shape == (2, 3)
    with pytest.raises(BlobError, match="not accepted here"):
        unpack_array(z, "feature")
    assert (
        unpack_array({"dtype": "<f8", "shape": [2, 3], "fill": float("inf")}, "threshold", fill_shape=(2, 3)).tolist()
        == [[math.inf] * 3] * 2
    )
    with pytest.raises(BlobError, match="where \\[3, 2\\] was expected"):
        unpack_array(z, "counts", fill_shape=(3, 2))
    f = PrivateForest.create(SCHEMA, n_trees=40, height=7, epsilon=1.0, seed=1)
    doc = doc_of(f.to_bytes())
    compact = {**doc, "format_version": 2, "structure": compact_structure(f.structure, f.schema, bfs=False)}
    big = {"dtype": "<i4", "shape": [1 << 14, 1 << 14], "fill": 0}  # 1 GiB each if allocated
    with wall_clock.within(1.0, clock=time.process_time):
        for d, names in (
            (compact, ("feature", "threshold", "child", "leaf")),
            (doc, ("n_nodes", "feature", "threshold")),
        ):
            for name in names:
                with pytest.raises(BlobError):
                    PrivateForest.from_bytes(pack({**d, "structure": {**d["structure"], name: big}}))
        counts = doc["counts"]
        with pytest.raises(BlobError, match="was expected"):  # counts of another shape than the structure's
            PrivateForest.from_bytes(pack({**doc, "counts": {**counts, "shape": [1 << 10, 1 << 10, 2]}}))
    X, y = data(5)
    edoc = msgpack.unpackb(codec.encode_batch(SCHEMA, X, y), raw=False)
    for key in ("X", "y"):
        forged = {**edoc, key: {"dtype": edoc[key]["dtype"], "shape": [10**6] + edoc[key]["shape"][1:], "fill": 0}}
        with pytest.raises(codec.EnvelopeError):
            codec.decode(SCHEMA, msgpack.packb(forged, use_bin_type=True))
    assert codec.decode(SCHEMA, msgpack.packb(edoc, use_bin_type=True)).y.shape == (5,)  # the entry as sent


# -- malformed blobs -----------------------------------------------------------------------


def loads_or_value_error(b) -> PrivateForest | None:
    """from_bytes either succeeds or raises ValueError: any other exception fails the test."""
    try:
        return PrivateForest.from_bytes(b)
    except ValueError:
        return None


def test_truncated_at_every_97th_byte(good):
    for cut in range(0, len(good), 97):
        with pytest.raises(ValueError):
            PrivateForest.from_bytes(good[:cut])
    with pytest.raises(ValueError):
        PrivateForest.from_bytes(good[:-1])


def test_random_byte_flips_never_raise_anything_but_value_error(good):
    rng = np.random.default_rng(12)
    loaded = 0
    for _ in range(400):
        b = bytearray(good)
        for pos in rng.integers(len(b), size=rng.integers(1, 4)):
            b[pos] ^= int(rng.integers(1, 256))
        f = loads_or_value_error(bytes(b))
        if f is not None:  # a flip inside a payload may still be a valid model: it must then be usable
            loaded += 1
            try:  # a flipped schema value may make these records invalid: a ValueError, nothing else
                f.predict_proba(data(5)[0])
            except ValueError:
                pass
    assert loaded < 400


def test_flips_in_header_region(good):
    # every single byte of the first 300 bytes (format, schema, params) replaced by 0xc1 (never valid msgpack)
    for pos in range(min(300, len(good))):
        b = bytearray(good)
        b[pos] = 0xC1
        loads_or_value_error(bytes(b))


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"\x00",
        b"\xc1",
        pack({"hello": "world"}),
        pack([1, 2, 3]),
        pack("streamdp.forest"),
        pack({"format": "other", "format_version": 1}),
        pack({"format": "streamdp.forest", "format_version": 2}),
        pack({"format": "streamdp.forest", "format_version": 1}),
        pack({"format": "streamdp.forest"}),
        msgpack.packb({1: 2}),
        b"\x80" * 10,
        b"\xdf\xff\xff\xff\xff",  # map announcing 2**32-1 entries
        b"\xdd\xff\xff\xff\xff",  # array announcing 2**32-1 entries
        b"\x91" * 100_000,  # deeply nested arrays
        msgpack.packb(msgpack.ExtType(5, b"xyz")),
        b'{"format": "streamdp.forest"}',
    ],
)
def test_foreign_or_garbage_blobs(payload):
    with pytest.raises(ValueError):
        PrivateForest.from_bytes(payload)


def test_wrong_input_types():
    for bad in (None, "text", 123, [1, 2]):
        with pytest.raises(ValueError):
            PrivateForest.from_bytes(bad)


class _Evil:
    def __reduce__(self):
        return (exec, ("import builtins; builtins._streamdp_pwned = True",))


def test_pickle_bytes_refused_and_never_executed(good):
    evil = pickle.dumps(_Evil())
    assert not hasattr(builtins, "_streamdp_pwned")
    with pytest.raises(ValueError):
        PrivateForest.from_bytes(evil)
    with pytest.raises(ValueError):
        PrivateForest.from_bytes(pickle.dumps(forest()))
    # pickle bytes inside the blob: as array data they are just bytes of the wrong length
    d = doc_of(good)
    d["counts"]["data"] = evil
    with pytest.raises(ValueError):
        PrivateForest.from_bytes(pack(d))
    # an ext-typed field is not decoded into anything callable
    d = doc_of(good)
    d["schema"] = msgpack.ExtType(1, evil)
    with pytest.raises(ValueError):
        PrivateForest.from_bytes(pack(d))
    assert not hasattr(builtins, "_streamdp_pwned")


def _mutations():
    """(name, function mutating a decoded blob) pairs: each must make from_bytes raise ValueError."""

    def setp(*path, value):
        def f(d):
            for p in path[:-1]:
                d = d[p]
            d[path[-1]] = value

        return f

    def delp(*path):
        def f(d):
            for p in path[:-1]:
                d = d[p]
            del d[path[-1]]

        return f

    def arr(name, fn, where="structure"):
        def f(d):
            rec = d[where][name] if where else d[name]
            a = unpack_array(rec, "threshold").copy()
            rec.update(pack_array(fn(a)))

        return f

    def idx(name, value, where="structure", pos=(0, 0)):
        def fn(a):
            a[pos] = value
            return a

        return arr(name, fn, where)

    yield "format tag", setp("format", value="streamdp.other")
    yield "format tag type", setp("format", value=7)
    yield "format version", setp("format_version", value=99)
    for key in ("schema", "params", "privacy", "structure", "counts", "version", "n_releases"):
        yield f"missing {key}", delp(key)
    yield "schema garbage", setp("schema", value={"attributes": 5})
    yield "schema not a map", setp("schema", value=[1])
    yield "schema bad numeric", setp("schema", "attributes", 1, "min", value=1000)
    yield "schema one class", setp("schema", "label", "values", value=["no"])
    yield "schema fewer values", setp("schema", "attributes", 0, "values", value=["p", "q"])
    yield "schema dropped attribute", lambda d: d["schema"]["attributes"].pop()
    yield "mechanism", setp("params", "mechanism", value="pickle")
    yield "vote", setp("params", "vote", value="x")
    yield "budget", setp("params", "budget", value=None)
    yield "height type", setp("params", "height", value="3")
    yield "height huge", setp("params", "height", value=10**6)
    yield "height zero", setp("params", "height", value=0)
    yield "n_trees mismatch", setp("params", "n_trees", value=4)
    yield "prior_trees type", setp("params", "prior_trees", value="1")
    yield "prior_trees negative", setp("params", "prior_trees", value=-1)
    yield "prior_trees mismatch", setp("params", "prior_trees", value=3)
    # one stump more, one random tree fewer: the row claimed as a stump is a random tree
    yield (
        "prior_trees on a random tree",
        lambda d: d["params"].update(prior_trees=d["params"]["prior_trees"] + 1, n_trees=d["params"]["n_trees"] - 1),
    )
    yield "k without kanon", setp("params", "k", value=5)
    yield "epsilon negative", setp("privacy", "epsilon", value=-1.0)
    yield "epsilon string", setp("privacy", "epsilon", value="1")
    yield "epsilon bool", setp("privacy", "epsilon", value=True)
    yield "epsilon nan", setp("privacy", "epsilon", value=float("nan"))
    yield "private type", setp("privacy", "private", value="yes")
    yield "version type", setp("version", value=1.5)
    yield "n_releases type", setp("n_releases", value=None)
    yield "version negative", setp("version", value=-1)
    yield "n_releases negative", setp("n_releases", value=-3)
    yield "counts object dtype", setp("counts", "dtype", value="|O")
    yield "counts pickle dtype", setp("counts", "dtype", value="O")
    yield "counts float dtype", setp("counts", "dtype", value="<f8")
    yield "counts unknown dtype", setp("counts", "dtype", value="<U4")
    yield "counts dtype not str", setp("counts", "dtype", value=[1])
    yield "counts big endian", setp("counts", "dtype", value=">i8")
    yield "counts shape mismatch", setp("counts", "shape", value=[3, 2, 2])
    yield "counts shape negative", setp("counts", "shape", value=[-3, 2, 2])
    yield "counts shape 2-D", lambda d: d["counts"].update(shape=[d["counts"]["shape"][0], -1])
    yield "counts shape huge", setp("counts", "shape", value=[2**40, 2**40, 2])
    yield "counts shape bool", setp("counts", "shape", value=[True, 1, 1])
    yield "counts data short", lambda d: d["counts"].update(data=d["counts"]["data"][:-8])
    yield "counts data str", setp("counts", "data", value="abc")
    yield "counts extra key", lambda d: d["counts"].update(extra=1)
    yield "counts wrong shape consistent", arr("counts", lambda a: a[:, :-1].copy(), where=None)
    yield "counts padding nonzero", "padding"
    for name in ("feature", "threshold", "child", "leaf", "n_leaves"):
        yield f"missing structure {name}", delp("structure", name)
    yield "feature out of range", idx("feature", 99)
    yield "feature negative", idx("feature", -1)
    yield "child out of range", idx("child", 10**6)
    yield "child negative", idx("child", -5)
    yield "child points back", idx("child", 0)
    yield "leaf duplicated", "leafdup"
    yield "n_leaves wrong", idx("n_leaves", 999, pos=(0,))
    yield "n_leaves shape", arr("n_leaves", lambda a: a[:1].copy())
    yield "threshold nan", "thrnan"
    yield "feature shape", arr("feature", lambda a: a[:, :-1].copy())
    yield "structure 1-D", arr("feature", lambda a: a.ravel().copy())
    yield "structure empty", arr("feature", lambda a: a[:, :0].copy())
    yield "feature float", arr("feature", lambda a: a.astype(np.float64) + 0.5)
    yield "feature wraps int32", arr("feature", lambda a: a.astype(np.int64) + 2**32)
    yield "child wraps int32", arr("child", lambda a: a.astype(np.int64) - 2**32)
    yield "threshold int", arr("threshold", lambda a: np.zeros(a.shape, dtype=np.int64))


def _apply_special(d, kind, good_forest):
    if kind == "padding":
        c = unpack_array(d["counts"]).copy()
        n_leaves = good_forest.structure.n_leaves
        t = int(np.argmin(n_leaves))
        assert n_leaves[t] < c.shape[1], "test forest needs trees of different sizes"
        c[t, -1, 0] = 7
        d["counts"].update(pack_array(c))
    elif kind == "leafdup":
        leaf = unpack_array(d["structure"]["leaf"]).copy()
        nodes = np.flatnonzero(leaf[0] >= 0)
        leaf[0, nodes[1]] = leaf[0, nodes[0]]
        d["structure"]["leaf"].update(pack_array(leaf))
    elif kind == "thrnan":
        thr = unpack_array(d["structure"]["threshold"], "threshold").copy()
        feat = unpack_array(d["structure"]["feature"])
        num = np.argwhere(feat == 1)  # attribute b is numeric
        assert len(num), "test forest needs a numeric split"
        thr[tuple(num[0])] = np.nan
        d["structure"]["threshold"].update(pack_array(thr))


@pytest.fixture(scope="module")
def varied():
    """A forest whose trees differ in size and use a numeric split (for the padding / threshold mutations)."""
    for seed in range(100):
        f = forest(seed=seed)
        fe = f.structure.feature
        if len(set(f.structure.n_leaves.tolist())) > 1 and np.any(fe == 1):
            return f
    raise AssertionError("no suitable structure")


@pytest.mark.parametrize("name,mutate", list(_mutations()), ids=[m[0] for m in _mutations()])
def test_malformed_field_raises_value_error(varied, name, mutate):
    d = v1_doc(varied)  # the padded arrays of format version 1, which from_arrays validates for both layouts
    if isinstance(mutate, str):
        _apply_special(d, mutate, varied)
    else:
        mutate(d)
    with pytest.raises(ValueError):
        PrivateForest.from_bytes(pack(d))


def test_blob_errors_are_clear(good):
    with pytest.raises(BlobError, match="not a valid streamdp.forest blob"):
        PrivateForest.from_bytes(good[:50])
    with pytest.raises(BlobError, match="not a streamdp.forest blob"):
        PrivateForest.from_bytes(pack({"format": "x"}))
    d = doc_of(good)
    d["counts"]["dtype"] = "|O"
    with pytest.raises(BlobError, match="dtype '\\|O' is not allowed"):
        PrivateForest.from_bytes(pack(d))
    assert issubclass(BlobError, ValueError)
    assert blobmod.loads(pack({"format": "f", "format_version": 1, "x": 1}), "f", 1)["x"] == 1


def test_forged_dag_structure_refused_quickly(wall_clock):
    """Splits sharing children (a DAG of 2**60 paths) must be refused, not walked."""

    schema = Schema.from_dict(
        {"attributes": [{"name": "x", "type": "numeric", "min": 0, "max": 1}], "label": {"name": "y", "values": [0, 1]}}
    )
    h = 60
    nodes = 2 * h + 1
    feature = np.zeros((1, nodes), dtype=np.int32)
    child = np.zeros((1, nodes), dtype=np.int32)
    leaf = np.full((1, nodes), -1, dtype=np.int32)
    threshold = np.full((1, nodes), 0.5)
    child[0, 0] = 1
    for i in range(h - 1):
        child[0, 2 * i + 1] = child[0, 2 * i + 2] = 2 * i + 3
    for n in (nodes - 2, nodes - 1):
        feature[0, n], child[0, n], threshold[0, n] = 1, n, np.inf
    leaf[0, nodes - 2], leaf[0, nodes - 1] = 0, 1
    d = doc_of(PrivateForest.create(schema, n_trees=1, height=1, epsilon=1.0, seed=0).to_bytes())
    d["params"]["height"] = h
    d["structure"] = {
        "feature": pack_array(feature),
        "threshold": pack_array(threshold),
        "child": pack_array(child),
        "leaf": pack_array(leaf),
        "n_leaves": pack_array(np.array([2])),
    }
    d["counts"] = pack_array(np.zeros((1, 2, 2), dtype=np.int64))
    with wall_clock.within(5), pytest.raises(ValueError):
        PrivateForest.from_bytes(pack(d))


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_value = st.one_of(st.text(min_size=0, max_size=5), st.integers(-(2**40), 2**40), st.booleans())


@st.composite
def _schemas(draw):
    n = draw(st.integers(1, 5))
    attrs = []
    for j in range(n):
        if draw(st.booleans()):
            vals = draw(st.lists(_value, min_size=1, max_size=4, unique_by=lambda v: (type(v) is bool, v)))
            attrs.append({"name": f"a{j}", "type": "categorical", "values": vals})
        else:
            lo = draw(st.floats(-1e6, 1e6))
            attrs.append({"name": f"a{j}", "type": "numeric", "min": lo, "max": lo + draw(st.floats(1e-3, 1e6))})
    labels = draw(st.lists(_value, min_size=2, max_size=4, unique_by=lambda v: (type(v) is bool, v)))
    return Schema.from_dict({"attributes": attrs, "label": {"name": "label", "values": labels}})


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    schema=_schemas(),
    n_trees=st.integers(1, 4),
    height=st.integers(1, 4),
    mechanism=st.sampled_from(["geometric", "laplace"]),
    vote=st.sampled_from(["proba", "majority"]),
    budget=st.sampled_from(["split", "disjoint"]),
    seed=st.integers(0, 2**31),
)
def test_round_trip_random_schemas(schema, n_trees, height, mechanism, vote, budget, seed):
    f = PrivateForest.create(
        schema, n_trees=n_trees, height=height, epsilon=1.0, mechanism=mechanism, seed=seed, vote=vote, budget=budget
    )
    g = PrivateForest.from_bytes(f.to_bytes())
    assert g.schema == schema
    assert [type(v) for v in g.schema.label.values] == [type(v) for v in schema.label.values]
    for name, arr in f.structure.arrays().items():
        assert np.array_equal(arr, g.structure.arrays()[name])
    assert np.array_equal(g.counts, f.counts)
    assert g.to_bytes()[:-9] != b""  # and it re-serializes


def test_packb_is_msgpack_with_one_copy_of_each_large_value():
    """Same bytes as msgpack.packb for nested maps, lists and tuples with small and large binaries, and the
    traced peak of a blob of large arrays is about the blob (msgpack's growing buffer peaked near 3x)."""
    import tracemalloc

    import msgpack

    from streamdp import blob as B

    rng = np.random.default_rng(0)
    big = rng.integers(0, 9, 300_000)
    doc = {
        "format": "t",
        "format_version": 1,
        "x": [1, (2, b"ab"), {"a": B.pack_array(big)}],
        "y": B.pack_array(np.arange(3.0)),
        "z": bytes(70_000),
        "w": bytearray(b"q" * 66_000),
        "n": None,
    }
    assert B.packb(doc) == msgpack.packb(doc, use_bin_type=True)
    assert B.unpack_array(B.loads(B.dumps("t", 1, {"a": B.pack_array(big)}), "t", 1)["a"]).tolist() == big.tolist()
    arrays = {f"a{i}": B.pack_array(rng.integers(0, 9, 2_000_000)) for i in range(4)}  # 4 x 16 MB
    tracemalloc.start()
    try:
        out = B.dumps("t", 1, arrays)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1.2 * len(out)


def test_a_version_1_blob_still_loads_and_routes_the_same(good):
    f = PrivateForest.from_bytes(good)
    old = PrivateForest.from_bytes(pack(v1_doc(f)))
    for name, a in f.structure.arrays().items():
        np.testing.assert_array_equal(getattr(old.structure, name), a)
    np.testing.assert_array_equal(old.counts, f.counts)


def test_the_structure_travels_without_padding_in_narrow_dtypes():
    """Format 3: each tree's nodes alone, what they test in the narrowest dtype (no first children or leaf
    numbers: they follow from the breadth-first order), thresholds at numeric splits only; read back it is the
    same padded structure (every array equal), so it routes the same."""
    from streamdp.records.datasets import load

    ds = load("adult")
    f = PrivateForest.create(ds.schema, n_trees=4, height=5, epsilon=1.0, seed=3)
    st = f.structure
    d = doc_of(f.to_bytes())
    s = d["structure"]
    assert s["layout"] == "bfs" and s["feature"]["dtype"] == "|i1" and "child" not in s and "leaf" not in s
    real = (st.leaf >= 0) | (st.feature != ds.schema.n_attributes)
    assert s["feature"]["shape"] == [int(real.sum())] < [st.feature.size]  # padding dropped
    assert s["threshold"]["shape"] == [int(np.isfinite(st.threshold).sum())]
    assert len(f.to_bytes()) < sum(a.nbytes for a in st.arrays().values()) / 2
    back = PrivateForest.from_bytes(f.to_bytes())
    for name, a in st.arrays().items():
        got = getattr(back.structure, name)
        assert got.dtype == a.dtype
        np.testing.assert_array_equal(got, a)
    np.testing.assert_array_equal(back.apply(ds.X[:500]), f.apply(ds.X[:500]))


def setarr(name, fn):
    """A blob-doc edit: the structure's array ``name`` replaced by ``fn`` of it."""

    def f(d):
        a = unpack_array(d["structure"][name], name).copy()
        d["structure"][name] = pack_array(fn(a))

    return f


def poke(i, v):
    """An array edit: element ``i`` set to ``v`` (integers widened first, so any value fits)."""

    def fn(a):
        a = a.astype(np.int64) if a.dtype.kind in "iu" else a
        a[i] = v
        return a

    return fn


def _compact_cases():
    yield "n_nodes zero", setarr("n_nodes", poke(0, 0))
    yield "n_nodes more than the arrays", setarr("n_nodes", poke(0, 10**4))
    yield "n_nodes huge", setarr("n_nodes", lambda a: a.astype(np.int64) * 0 + 2**40)
    yield "feature outside the schema", setarr("feature", poke(0, 99))
    yield "feature negative", setarr("feature", poke(0, -1))
    yield "child outside the tree", setarr("child", poke(0, 10**6))
    yield "child wraps int32", setarr("child", lambda a: a.astype(np.int64) + 2**32)
    yield "leaf duplicated", setarr("leaf", lambda a: np.where(a >= 0, 0, a))
    yield "threshold missing one", setarr("threshold", lambda a: a[:-1].copy())
    yield "threshold nan", setarr("threshold", poke(0, np.nan))
    yield "threshold int", setarr("threshold", lambda a: a.astype(np.int64))
    yield "feature float", setarr("feature", lambda a: a.astype(np.float64))
    yield "layout unknown", lambda d: d["structure"].update(layout="zipped")
    yield "n_nodes missing", lambda d: d["structure"].pop("n_nodes")


@pytest.mark.parametrize("name,mutate", list(_compact_cases()), ids=[c[0] for c in _compact_cases()])
def test_a_malformed_compact_structure_is_refused(name, mutate):
    f = forest(n_trees=3, height=4)
    d = doc_of(f.to_bytes())
    d["structure"] = compact_structure(f.structure, f.schema, bfs=False)
    d["format_version"] = 2
    assert d["structure"]["layout"] == "compact"
    assert PrivateForest.from_bytes(pack(d)).structure.n_leaves.tolist() == f.structure.n_leaves.tolist()
    mutate(d)
    with pytest.raises(ValueError):
        PrivateForest.from_bytes(pack(d))


BLOBS = Path(__file__).parent / "data" / "blobs"


@pytest.mark.parametrize("name", ["forest_format1", "forest_format2", "forest_format3"])
def test_stored_blobs_of_every_format_still_load_and_predict_as_when_written(name):
    """Blobs written by the code of each format (format 1 by the code before format 2) load, and the forest
    predicts and routes exactly as it did when it was written: a reader change that breaks them fails here."""
    from streamdp.records.datasets import load

    want = json.loads((BLOBS / f"{name}.json").read_text())
    data = (BLOBS / f"{name}.sdp").read_bytes()
    assert doc_of(data)["format_version"] == int(name[-1])
    f = PrivateForest.from_bytes(data)
    X = load("adult").X[2000:2020]
    np.testing.assert_array_equal(f.apply(X), np.array(want["apply"]))
    np.testing.assert_allclose(f.predict_proba(X), np.array(want["proba"]), rtol=0, atol=1e-12)
    again = PrivateForest.from_bytes(f.to_bytes())  # rewritten in the current format: the same forest
    for key, a in f.structure.arrays().items():
        np.testing.assert_array_equal(getattr(again.structure, key), a)
    np.testing.assert_array_equal(again.counts, f.counts)


def test_a_stored_release_record_still_loads_on_its_spec():
    from streamdp.service.published import forest_from_record

    spec = PrivateForest.from_bytes((BLOBS / "forest_format2.sdp").read_bytes())
    g = forest_from_record(spec, (BLOBS / "release_format1.rec").read_bytes())
    assert (g.version, g.n_releases) == (5, 4)
    np.testing.assert_array_equal(g.counts, spec.counts * 2)
