"""The breadth-first structure layout (format 3): exact round trips, fallbacks, and refusals of malformed fields."""

from __future__ import annotations

import numpy as np
import pytest

from streamdp import PrivateForest
from streamdp.blob import BlobError, dumps, loads, pack_array, unpack_array
from streamdp.forest import layout
from streamdp.forest.layout import bfs_fields, node_children, structure_arrays
from streamdp.forest.persistence import FORMAT, FORMAT_VERSION
from streamdp.forest.structure import ForestStructure
from streamdp.records.datasets import load, load_schema
from streamdp.records.schema import Categorical, Label, Numeric, Schema
from tests.test_blob import poke, setarr

SCHEMAS = {
    "adult": load_schema("adult"),
    "nursery": load_schema("nursery"),
    "votes": load_schema("congressional-voting"),
    "unary": Schema([Categorical("one", (0,)), Categorical("b", (0, 1)), Numeric("x", 0.0, 1.0)], Label("y", (0, 1))),
}


@pytest.fixture(params=["kernel", "numpy"])
def reader(request, monkeypatch):
    """Each test that takes it runs with the compiled reader (where built) and with the numpy one."""
    if request.param == "numpy":
        monkeypatch.setattr(layout, "_KERNEL", None)
    elif layout._KERNEL is None:
        pytest.skip("the compiled reader is not built (streamdp/forest/_route.c)")
    return request.param


def doc_of(f: PrivateForest) -> dict:
    return loads(f.to_bytes(), FORMAT, FORMAT_VERSION)


def pack(d: dict) -> bytes:
    return dumps(FORMAT, d["format_version"], {k: v for k, v in d.items() if k not in ("format", "format_version")})


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@pytest.mark.parametrize("height", [1, 3, 6])
def test_drawn_structures_round_trip_exactly_and_pass_the_full_check(name, height, reader):
    schema = SCHEMAS[name]
    for seed in range(3):
        fs = ForestStructure.draw(schema, n_trees=4, height=height, seed=seed)
        fields = bfs_fields(fs, schema)
        assert fields is not None and fields["layout"] == "bfs"
        back = structure_arrays(fields, schema, height)
        for key, a in fs.arrays().items():
            np.testing.assert_array_equal(back[key], a)
        ForestStructure(**back, height=height).validate(schema)  # the per-tree walk agrees


def test_a_forest_in_the_bfs_layout_routes_and_predicts_as_before():
    ds = load("adult")
    f = PrivateForest.create(ds.schema, n_trees=5, height=9, epsilon=1.0, seed=4).fit(ds.X[:4000], ds.y[:4000])
    assert doc_of(f)["structure"]["layout"] == "bfs"
    g = PrivateForest.from_bytes(f.to_bytes())
    np.testing.assert_array_equal(g.apply(ds.X[4000:6000]), f.apply(ds.X[4000:6000]))
    np.testing.assert_array_equal(g.predict_proba(ds.X[4000:6000]), f.predict_proba(ds.X[4000:6000]))


def test_grown_releases_keep_the_bfs_layout(reader):
    binary = Schema([Categorical(f"a{i}", (0, 1)) for i in range(8)], Label("y", (0, 1)))
    g = PrivateForest.create(binary, n_trees=3, height=6, epsilon=1.0, seed=3)
    for i in range(7):
        g = g.grow_exact(np.full((4, 64, 2), 10**6 if i % 2 else 2, np.int64))
        assert doc_of(g)["structure"]["layout"] == "bfs"
        back = PrivateForest.from_bytes(g.to_bytes())
        for key, a in g.structure.arrays().items():
            np.testing.assert_array_equal(getattr(back.structure, key), a)


def test_a_structure_out_of_the_canonical_order_keeps_the_compact_layout():
    schema = SCHEMAS["votes"]
    fs = ForestStructure.draw(schema, n_trees=2, height=3, seed=1)
    leaf = fs.leaf.copy()
    row = leaf[0]
    idx = np.flatnonzero(row >= 0)
    row[idx] = row[idx][::-1]  # leaves numbered backwards: a valid tree, not the canonical numbering
    odd = ForestStructure(fs.feature, fs.threshold, fs.child, leaf, fs.n_leaves, fs.height)
    odd.validate(schema)
    assert bfs_fields(odd, schema) is None
    f = PrivateForest(schema, odd, epsilon=1.0)
    assert doc_of(f)["structure"]["layout"] == "compact"
    np.testing.assert_array_equal(PrivateForest.from_bytes(f.to_bytes()).structure.leaf, leaf)


def _bfs_cases():
    def swap_first_leaf_and_inner(a):  # the same counts of nodes and children, a leaf before the root's children
        a = a.astype(np.int64)
        m = int(a.max())
        first_leaf = int(np.flatnonzero(a == m)[0])
        a[0], a[first_leaf] = a[first_leaf], a[0]
        return a

    yield "n_nodes zero", setarr("n_nodes", poke(0, 0))
    yield "n_nodes more than the features", setarr("n_nodes", poke(0, 10**4))
    yield "n_nodes one less", setarr("n_nodes", lambda a: np.concatenate([[a[0] - 1], a[1:]]))
    yield "n_nodes huge", setarr("n_nodes", lambda a: a.astype(np.int64) * 0 + 2**40)
    yield "n_nodes float", setarr("n_nodes", lambda a: a.astype(np.float64))
    yield "feature outside the schema", setarr("feature", poke(0, 99))
    yield "feature negative", setarr("feature", poke(0, -1))
    yield "feature float", setarr("feature", lambda a: a.astype(np.float64))
    yield "a leaf made a split", setarr("feature", lambda a: np.where(np.arange(a.size) == a.size - 1, 0, a))
    yield "root a leaf", setarr("feature", swap_first_leaf_and_inner)
    yield "threshold missing one", setarr("threshold", lambda a: a[:-1].copy())
    yield "threshold one more", setarr("threshold", lambda a: np.append(a, 0.5))
    yield "threshold nan", setarr("threshold", poke(0, np.nan))
    yield "threshold inf", setarr("threshold", poke(0, np.inf))
    yield "threshold int", setarr("threshold", lambda a: a.astype(np.int64))
    yield "deeper than its height", lambda d: d["params"].update(height=2)
    yield "n_nodes missing", lambda d: d["structure"].pop("n_nodes")
    yield "feature missing", lambda d: d["structure"].pop("feature")


@pytest.mark.parametrize("name,mutate", list(_bfs_cases()), ids=[c[0] for c in _bfs_cases()])
def test_a_malformed_bfs_structure_is_refused(name, mutate, reader):
    f = PrivateForest.create(SCHEMAS["adult"], n_trees=3, height=5, epsilon=1.0, seed=2, prior_trees=0)
    d = doc_of(f)
    assert d["structure"]["layout"] == "bfs"
    mutate(d)
    with pytest.raises(ValueError):
        PrivateForest.from_bytes(pack(d))


def test_a_split_whose_children_come_before_it_is_refused(reader):
    """Two nodes and a split naming the root as its child: the children counts add up, the order does not."""
    schema = Schema([Categorical("a", (0,))], Label("y", (0, 1)))  # arity 1: one child
    fields = {"layout": "bfs", "n_nodes": pack_array(np.array([2])), "threshold": pack_array(np.zeros(0))}
    with pytest.raises(BlobError, match="children come before it"):  # (both readers word it so)
        structure_arrays({**fields, "feature": pack_array(np.array([1, 0], dtype=np.int8))}, schema, 3)
    ok = structure_arrays({**fields, "feature": pack_array(np.array([0, 1], dtype=np.int8))}, schema, 3)
    assert ok["child"][0].tolist() == [1, 1] and ok["leaf"][0].tolist() == [-1, 0]


def test_random_feature_edits_are_refused_or_give_a_valid_forest(reader):
    """Whatever the reader accepts passes the per-tree walk (ForestStructure.validate) too; it never raises
    anything but ValueError."""
    schema = SCHEMAS["adult"]
    f = PrivateForest.create(schema, n_trees=3, height=5, epsilon=1.0, seed=5, prior_trees=0)
    d = doc_of(f)
    feat = unpack_array(d["structure"]["feature"], "feature").astype(np.int64)
    thr = unpack_array(d["structure"]["threshold"], "threshold")
    kids = node_children(schema)
    rng = np.random.default_rng(0)
    accepted = 0
    for k in range(300):
        a = feat.copy()
        for i in rng.integers(0, a.size, size=rng.integers(1, 4)):
            same = np.flatnonzero(kids == kids[a[i]])  # half the edits keep the node's children count
            a[i] = rng.choice(same) if k % 2 else rng.integers(0, schema.n_attributes + 1)
        t = thr if k % 4 == 1 else np.resize(thr, int(rng.integers(max(0, thr.size - 2), thr.size + 3)))
        sdoc = {**d["structure"], "feature": pack_array(a), "threshold": pack_array(t)}
        try:
            arrays = structure_arrays(sdoc, schema, 5)
        except ValueError:
            continue
        accepted += 1
        ForestStructure(**arrays, height=5).validate(schema)
    assert accepted >= 20


def test_the_compiled_and_the_numpy_readers_agree_on_random_edits(monkeypatch):
    """Where the kernel is built: for the same fields, both refuse or both give the same arrays."""
    if layout._KERNEL is None:
        pytest.skip("the compiled reader is not built (streamdp/forest/_route.c)")
    kernel = layout._KERNEL
    schema = SCHEMAS["adult"]
    d = doc_of(PrivateForest.create(schema, n_trees=4, height=6, epsilon=1.0, seed=7))
    feat = unpack_array(d["structure"]["feature"], "feature").astype(np.int64)
    nn = unpack_array(d["structure"]["n_nodes"], "n_nodes").astype(np.int64)
    thr = unpack_array(d["structure"]["threshold"], "threshold")
    rng = np.random.default_rng(1)
    for k in range(200):
        a, n = feat.copy(), nn.copy()
        for i in rng.integers(0, a.size, size=rng.integers(0, 3)):
            a[i] = rng.integers(0, schema.n_attributes + 1)
        if k % 5 == 0:
            n[rng.integers(0, n.size)] += int(rng.integers(-2, 3))
            a = np.resize(a, int(n.sum())) if n.min() > 0 else a
        t = thr if k % 3 else np.resize(thr, thr.size + int(rng.integers(-1, 2)))
        sdoc = {"layout": "bfs", "n_nodes": pack_array(n), "feature": pack_array(a), "threshold": pack_array(t)}
        got, height = [], int(rng.integers(3, 8))
        for impl in (kernel, None):
            monkeypatch.setattr(layout, "_KERNEL", impl)
            try:
                got.append(structure_arrays(sdoc, schema, height))
            except ValueError:
                got.append(None)
        if got[0] is None or got[1] is None:
            assert got[0] is None and got[1] is None, k
        else:
            for key in got[1]:
                np.testing.assert_array_equal(got[0][key], got[1][key])
