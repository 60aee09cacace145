"""The optimised ForestStructure.apply / tally agree with the straightforward reference router."""

import numpy as np
import pytest

from streamdp.forest.structure import ForestStructure
from streamdp.forest.tally import tally
from streamdp.records.schema import Schema


def reference_apply(fs, X, is_categorical):
    n, m = X.shape
    out = np.empty((n, fs.n_trees), dtype=np.int64)
    Xz = np.zeros((n, m + 1))
    Xz[:, :m] = X
    is_cat = np.append(np.asarray(is_categorical, dtype=bool), False)
    for t in range(fs.n_trees):
        node = np.zeros(n, dtype=np.int64)
        for _ in range(fs.height):
            f = fs.feature[t][node]
            v = Xz[np.arange(n), f]
            branch = np.where(is_cat[f], v, v > fs.threshold[t][node]).astype(np.int64)
            node = fs.child[t][node] + branch
        out[:, t] = fs.leaf[t][node]
    return out


def reference_tally(leaves, y, shape, mask=None):
    counts = np.zeros(shape, dtype=np.int64)
    n, T = leaves.shape
    for i in range(n):
        for t in range(T):
            if mask is None or mask[i, t]:
                counts[t, leaves[i, t], y[i]] += 1
    return counts


def random_schema(rng, kind, n_attr):
    attrs = []
    for j in range(n_attr):
        cat = kind == "categorical" or (kind == "mixed" and rng.random() < 0.5)
        if cat:
            attrs.append({"name": f"a{j}", "type": "categorical", "values": list(range(int(rng.integers(2, 6))))})
        else:
            lo = float(rng.uniform(-5, 5))
            attrs.append({"name": f"a{j}", "type": "numeric", "min": lo, "max": lo + float(rng.uniform(0.5, 10))})
    return Schema.from_dict(
        {"attributes": attrs, "label": {"name": "y", "values": list(range(int(rng.integers(2, 5))))}}
    )


def random_X(rng, schema, n):
    cols = []
    for a in schema.attributes:
        d = a.to_dict()
        if d["type"] == "categorical":
            cols.append(rng.integers(0, len(d["values"]), n).astype(float))
        else:
            v = rng.uniform(d["min"], d["max"], n)
            v[: n // 10] = d["min"]  # boundary values
            v[n // 10 : n // 5] = d["max"]
            cols.append(v)
    return np.column_stack(cols)


@pytest.mark.parametrize("tables", ["cached", "int32"])
@pytest.mark.parametrize("kind", ["categorical", "numeric", "mixed"])
@pytest.mark.parametrize("seed", range(6))
def test_apply_matches_reference(kind, seed, tables, monkeypatch):
    if tables == "int32":  # a forest too large to cache its routing tables: its own int32 arrays, in blocks
        monkeypatch.setattr(ForestStructure, "ROUTE_CACHE_BYTES", 0)
        monkeypatch.setattr(ForestStructure, "ROUTE_BLOCK", ForestStructure.CHUNK)
        monkeypatch.setattr(ForestStructure, "KEY_CELLS_MAX", 0)  # the general router, not the key tables
    rng = np.random.default_rng(seed)
    schema = random_schema(rng, kind, int(rng.integers(1, 9)))
    height = int(rng.integers(1, 6))
    fs = ForestStructure.draw(schema, n_trees=int(rng.integers(1, 5)), height=height, seed=seed)
    # sizes around the chunk boundary and the key-table threshold
    for n in (1, 7, 1000, fs.CHUNK // 2 + 3, fs.CHUNK + 5):
        X = random_X(rng, schema, n)
        ref = reference_apply(fs, X, schema.is_categorical)
        got = fs.apply(X, schema.is_categorical)
        assert got.shape == (n, fs.n_trees) and got.dtype == np.int64
        np.testing.assert_array_equal(got, ref)
        # threshold ties: a numeric value exactly at a node threshold goes left (x > t is False)
        if kind != "categorical":
            Xt = X.copy()
            num = np.flatnonzero(~schema.is_categorical)
            thr = fs.threshold[np.isfinite(fs.threshold)]
            if thr.size:
                Xt[:, num] = thr[rng.integers(0, thr.size, (n, num.size))]
                lo = np.array([schema.attributes[j].min for j in num])
                hi = np.array([schema.attributes[j].max for j in num])
                Xt[:, num] = np.clip(Xt[:, num], lo, hi)
                np.testing.assert_array_equal(
                    fs.apply(Xt, schema.is_categorical), reference_apply(fs, Xt, schema.is_categorical)
                )


def test_key_table_cached_and_equal():
    rng = np.random.default_rng(11)
    schema = random_schema(rng, "categorical", 6)
    fs = ForestStructure.draw(schema, n_trees=3, height=4, seed=3)
    X = random_X(rng, schema, 50_000)
    first = fs.apply(X, schema.is_categorical)
    np.testing.assert_array_equal(first, reference_apply(fs, X, schema.is_categorical))
    small = random_X(rng, schema, 5)  # uses the cached table now
    np.testing.assert_array_equal(
        fs.apply(small, schema.is_categorical), reference_apply(fs, small, schema.is_categorical)
    )


@pytest.mark.parametrize("seed", range(4))
def test_tally_matches_reference(seed):
    rng = np.random.default_rng(seed)
    T, L, C, n = int(rng.integers(1, 5)), int(rng.integers(1, 9)), int(rng.integers(2, 4)), int(rng.integers(0, 300))
    leaves = rng.integers(0, L, (n, T))
    y = rng.integers(0, C, n)
    mask = rng.random((n, T)) < 0.5
    for m in (None, mask):
        got = tally(leaves, y, (T, L, C), m)
        assert got.dtype == np.int64 and got.shape == (T, L, C)
        np.testing.assert_array_equal(got, reference_tally(leaves, y, (T, L, C), m))
    # non-contiguous input (a transposed view) gives the same counts
    lt = np.ascontiguousarray(leaves.T).T
    np.testing.assert_array_equal(tally(lt, y, (T, L, C)), reference_tally(leaves, y, (T, L, C)))


def test_structures_are_frozen_and_a_replaced_array_resets_the_routing_caches():
    rng = np.random.default_rng(5)
    schema = random_schema(rng, "categorical", 5)
    fs = ForestStructure.draw(schema, n_trees=2, height=3, seed=4)
    X = random_X(rng, schema, 40_000)
    fs.apply(X, schema.is_categorical)  # builds and caches the key table
    leaves = np.flatnonzero(fs.leaf[0] >= 0)
    with pytest.raises(ValueError):
        fs.leaf[0, leaves] = fs.leaf[0, leaves][::-1]  # in place: refused (the caches would go stale)
    renumbered = fs.leaf.copy()
    renumbered[0, leaves] = fs.leaf[0, leaves][::-1]
    fs.leaf = renumbered  # a new array: the caches are rebuilt
    np.testing.assert_array_equal(fs.apply(X, schema.is_categorical), reference_apply(fs, X, schema.is_categorical))
    mixed = random_schema(rng, "mixed", 5)
    gs = ForestStructure.draw(mixed, n_trees=2, height=3, seed=4)
    Xm = random_X(rng, mixed, 1000)
    first = gs.apply(Xm, mixed.is_categorical)  # the general router caches its tables too
    np.testing.assert_array_equal(gs.apply(Xm[:7], mixed.is_categorical), first[:7])
    np.testing.assert_array_equal(first, reference_apply(gs, Xm, mixed.is_categorical))


def test_a_large_forest_keeps_no_routing_tables(monkeypatch):
    """Past ROUTE_CACHE_BYTES the router uses the structure's own int32 arrays and caches no tables
    (at height 10 the cached tables were about 3x the forest's counts)."""
    monkeypatch.setattr(ForestStructure, "ROUTE_CACHE_BYTES", 0)
    rng = np.random.default_rng(5)
    schema = random_schema(rng, "mixed", 5)
    fs = ForestStructure.draw(schema, n_trees=3, height=4, seed=1)
    X = random_X(rng, schema, 3 * fs.CHUNK + 11)
    np.testing.assert_array_equal(fs.apply(X, schema.is_categorical), reference_apply(fs, X, schema.is_categorical))
    assert not any(isinstance(k, tuple) and k[0] == "route" for k in fs._cache())
