"""The optimised ForestStructure.apply / tally agree with the straightforward reference router."""

import numpy as np
import pytest

from streamdp.forest.routing import ForestRouter
from streamdp.forest.structure import ForestStructure
from streamdp.forest.tally import sparse_tally, tally
from streamdp.records.datasets import load_schema
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


@pytest.fixture(params=["compiled", "numpy"])
def router_path(request, monkeypatch):
    """Both routers: the compiled one (``streamdp/forest/_route.c``, skipped where it is not built) and numpy's."""
    if request.param == "compiled":
        pytest.importorskip("streamdp.forest._route")
        monkeypatch.delenv("STREAMDP_NO_KERNEL", raising=False)
        monkeypatch.setattr(ForestRouter, "BLOCK", 300)  # several blocks, each tree by tree
    else:
        monkeypatch.setattr(ForestRouter, "COMPILED", False)
    return request.param


@pytest.mark.parametrize("words", ["int32", "int64", "small chunks"])
@pytest.mark.parametrize("kind", ["categorical", "numeric", "mixed"])
@pytest.mark.parametrize("seed", range(6))
def test_apply_matches_reference(kind, seed, words, router_path, monkeypatch):
    if words == "int64":  # a forest too large for int32 words, routed by the general router (not the key tables)
        monkeypatch.setattr(ForestRouter, "INT32_WORDS", 0)
        monkeypatch.setattr(ForestRouter, "KEY_CELLS_MAX", 0)
    if words == "small chunks":  # many chunks of records, each routed in several groups of trees
        monkeypatch.setattr(ForestRouter, "RECORDS", 64)
        monkeypatch.setattr(ForestRouter, "PAIRS", 130)
    rng = np.random.default_rng(seed)
    schema = random_schema(rng, kind, int(rng.integers(1, 9)))
    height = int(rng.integers(1, 6))
    fs = ForestStructure.draw(schema, n_trees=int(rng.integers(1, 5)), height=height, seed=seed)
    assert fs.router().packed.dtype == (np.int64 if words == "int64" else np.int32)
    # sizes around the chunk boundaries and the key-table threshold
    for n in (1, 7, 1000, ForestRouter.RECORDS // 2 + 3, 3 * ForestRouter.RECORDS + 5, 20_000):
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
            # values no encoder gives but apply accepts: +-inf pass or stop at every threshold, NaN passes none
            Xn = X.copy()
            for i, v in enumerate((np.nan, np.inf, -np.inf)):
                Xn[i::3, num] = v
            with np.errstate(invalid="ignore"):
                ref = reference_apply(fs, Xn, schema.is_categorical)
            np.testing.assert_array_equal(fs.apply(Xn, schema.is_categorical), ref)


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


def test_structures_are_frozen_and_a_replaced_array_resets_the_routing_caches(router_path):
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


def test_the_router_is_built_once_and_holds_one_word_per_node(router_path):
    """Routing reads what it needs of the nodes from one packed word per node, built at the first call and
    kept: later batches rebuild nothing, and nothing the router keeps grows with the records routed."""
    rng = np.random.default_rng(5)
    schema = random_schema(rng, "mixed", 5)
    fs = ForestStructure.draw(schema, n_trees=3, height=4, seed=1)
    router = fs.router()
    assert router.packed.dtype == np.int32 and router.nbytes == 4 * fs.feature.size
    for n in (5, 3 * ForestRouter.RECORDS + 11):
        X = random_X(rng, schema, n)
        np.testing.assert_array_equal(fs.apply(X, schema.is_categorical), reference_apply(fs, X, schema.is_categorical))
        assert fs.router() is router and router.nbytes == 4 * fs.feature.size
    with pytest.raises(ValueError, match="attributes"):
        fs.apply(X[:, :-1], schema.is_categorical[:-1])  # too narrow: the leaves' zero column would be a real one


@pytest.mark.slow
def test_adults_default_forest_routes_as_the_reference_does(router_path):
    """Adult's default forest (height 7, 10 trees and a prior stump, a node array too large to rebuild per batch):
    the kept router gives the reference router's leaves on the first batch and on later ones, and the worker's
    sparse tally is the dense tally's nonzero cells."""
    from streamdp.forest.model import PrivateForest
    from streamdp.records.datasets import load

    schema = load_schema("adult")
    f = PrivateForest.create(schema, n_trees=10, seed=3)
    fs = f.structure
    assert fs.height == 7 and fs.n_trees == 11 and fs.n_leaves.max() > 100_000
    ds = load("adult")
    X = schema.encode(ds.X[:6000], ds.y[:6000])
    for lo, hi in ((0, 1000), (1000, 1100), (1100, 6000)):
        leaves = fs.apply(X.X[lo:hi], schema.is_categorical)
        np.testing.assert_array_equal(leaves, reference_apply(fs, X.X[lo:hi], schema.is_categorical))
    router = fs.router()
    y = X.y.astype(np.int64)
    idx, counts = sparse_tally(fs.apply(X.X, schema.is_categorical), y, f.shape)
    dense = tally(reference_apply(fs, X.X, schema.is_categorical), y, f.shape).ravel()
    np.testing.assert_array_equal(idx, np.flatnonzero(dense))
    np.testing.assert_array_equal(counts, dense[idx])
    assert fs.router() is router


def test_sparse_tally_of_a_forest_too_large_for_int32_cell_numbers():
    """Past 2**31 cells the cell numbers are int64 (no wrap-around into another tree's cells)."""
    shape = (3, 2**30, 2)
    leaves = np.array([[0, 2**30 - 1, 5], [0, 7, 5]])
    idx, counts = sparse_tally(leaves, np.array([1, 0]), shape)
    cells = [(0, 0, 1), (0, 0, 0), (1, 2**30 - 1, 1), (1, 7, 0), (2, 5, 1), (2, 5, 0)]
    want = sorted(np.ravel_multi_index(c, shape) for c in cells)
    assert idx.tolist() == want and counts.tolist() == [1] * 6
    small_idx, small_counts = sparse_tally(leaves % 8, np.array([1, 0]), (3, 8, 2))  # int32 cell numbers
    assert small_idx.dtype == np.int64 and small_counts.tolist() == [1] * 6


def test_the_compiled_router_refuses_arrays_that_do_not_match_and_stays_inside_the_forest():
    """Sizes are checked before any read; codes outside their attribute's range cannot route outside the arrays."""
    _route = pytest.importorskip("streamdp.forest._route")
    rng = np.random.default_rng(2)
    schema = random_schema(rng, "mixed", 4)
    fs = ForestStructure.draw(schema, n_trees=3, height=4, seed=2)
    r = fs.router()
    X = random_X(rng, schema, 50)
    flags = np.append(schema.is_categorical, False)
    T, M = fs.feature.shape
    out = np.empty((50, T), dtype=np.int64)
    with pytest.raises(ValueError, match="sizes"):
        _route.route(X, flags, r.packed, r.thresholds, r.leaves, out[:49], T, M, r.bits, r.height, 64)
    with pytest.raises(ValueError, match="sizes"):
        _route.route(X, flags, r.packed[:-1], r.thresholds, r.leaves, out, T, M, r.bits, r.height, 64)
    with pytest.raises(TypeError):
        _route.route(X.astype(np.float32), flags, r.packed, r.thresholds, r.leaves, out, T, M, r.bits, r.height, 64)
    bad = X.copy()
    bad[:, schema.is_categorical] = rng.choice([-1e30, -7.0, 1e6, np.nan], size=(50, int(schema.is_categorical.sum())))
    _route.route(bad, flags, r.packed, r.thresholds, r.leaves, out, T, M, r.bits, r.height, 64)
    assert out.min() >= -1 and np.all(out < fs.max_leaves)
