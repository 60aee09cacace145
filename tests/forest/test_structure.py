"""The random structure: drawn from the schema alone, shaped as Fan et al.'s random decision trees, routed correctly."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamdp import PrivateForest, Schema, TooLargeError
from streamdp.forest.structure import (
    DEFAULT_CELL_BUDGET,
    DEFAULT_LEAF_BUDGET,
    ForestStructure,
    default_height,
    leaf_budget,
    max_possible_leaves,
)
from streamdp.records.schema import Categorical, Label, Numeric


def make_schema(spec, n_classes=2) -> Schema:
    """spec: list of ints (categorical arity) or (lo, hi) tuples (numeric)."""
    attrs = []
    for j, s in enumerate(spec):
        if isinstance(s, tuple):
            attrs.append({"name": f"a{j}", "type": "numeric", "min": s[0], "max": s[1]})
        else:
            attrs.append({"name": f"a{j}", "type": "categorical", "values": [f"v{i}" for i in range(s)]})
    return Schema.from_dict({"attributes": attrs, "label": {"name": "y", "values": list(range(n_classes))}})


def random_records(schema: Schema, n: int, rng: np.random.Generator, overshoot: float = 0.2):
    """Raw records in schema order (numeric values partly outside the declared range, to test clamping)."""
    X = np.empty((n, schema.n_attributes), dtype=object)
    for j, a in enumerate(schema.attributes):
        if isinstance(a, Categorical):
            X[:, j] = [a.values[i] for i in rng.integers(a.arity, size=n)]
        else:
            w = a.max - a.min
            X[:, j] = rng.uniform(a.min - overshoot * w, a.max + overshoot * w, size=n)
    y = rng.integers(schema.n_classes, size=n)
    return X, np.array(schema.classes, dtype=object)[y]


def walk(fs: ForestStructure, schema: Schema, t: int):
    """Yield (leaf node, path) for every leaf of tree t; path is a list of (node, branch)."""
    stack = [(0, [])]
    while stack:
        node, path = stack.pop()
        if fs.leaf[t, node] >= 0:
            yield node, path
            continue
        j = fs.feature[t, node]
        a = schema.attributes[j]
        width = a.arity if isinstance(a, Categorical) else 2
        for b in range(width):
            stack.append((int(fs.child[t, node]) + b, path + [(node, b)]))


def reference_apply(fs: ForestStructure, schema: Schema, X: np.ndarray) -> np.ndarray:
    """Slow pure-Python router: start at the root, take branch = code (categorical) or x > t (numeric)."""
    out = np.empty((len(X), fs.n_trees), dtype=np.int64)
    for i, row in enumerate(X.tolist()):
        for t in range(fs.n_trees):
            node = 0
            while fs.leaf[t, node] < 0:
                j = int(fs.feature[t, node])
                if isinstance(schema.attributes[j], Categorical):
                    branch = int(row[j])
                else:
                    branch = 1 if row[j] > float(fs.threshold[t, node]) else 0
                node = int(fs.child[t, node]) + branch
            out[i, t] = fs.leaf[t, node]
    return out


MIXED = [3, (0.0, 10.0), 2, (-5.0, 5.0), 4, (100.0, 200.0)]


# -- data independence ---------------------------------------------------------------


def test_structure_does_not_depend_on_data():
    schema = make_schema(MIXED)
    rng = np.random.default_rng(0)
    X1, y1 = random_records(schema, 500, rng)
    X2, y2 = random_records(schema, 50, rng)
    # prune=False: the drawn structure itself (pruning by a release is tested in test_forest_pruning.py)
    # threshold_share=0: thresholds from the declared ranges alone (a share draws them from a noisy release)
    f1 = PrivateForest.create(schema, n_trees=4, height=4, epsilon=1.0, seed=42, threshold_share=0).fit(
        X1, y1, prune=False
    )
    f2 = PrivateForest.create(schema, n_trees=4, height=4, epsilon=1.0, seed=42, threshold_share=0).fit(
        X2, y2, prune=False
    )
    f2.update(X1, y1)
    ref = ForestStructure.draw(schema, 4, 4, seed=42).with_stumps(1, schema.n_attributes)
    for name, arr in ref.arrays().items():
        assert np.array_equal(arr, f1.structure.arrays()[name]), name
        assert np.array_equal(arr, f2.structure.arrays()[name]), name
    # and the seed does matter (so the comparison above is not vacuous)
    other = ForestStructure.draw(schema, 4, 4, seed=43)
    assert not all(np.array_equal(a, other.arrays()[n]) for n, a in ref.arrays().items())


def test_unseeded_structures_differ():
    schema = make_schema(MIXED)
    a = ForestStructure.draw(schema, 3, 4)
    b = ForestStructure.draw(schema, 3, 4)
    assert not np.array_equal(a.threshold, b.threshold)


# -- shape of the trees ---------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_categorical_never_reused_and_thresholds_inside_narrowed_range(seed):
    schema = make_schema(MIXED)
    fs = ForestStructure.draw(schema, 5, 6, seed=seed)
    n_numeric_splits = 0
    for t in range(fs.n_trees):
        n_leaves = 0
        for leaf_node, path in walk(fs, schema, t):
            n_leaves += 1
            used_cats = set()
            lo = {j: a.min for j, a in enumerate(schema.attributes) if isinstance(a, Numeric)}
            hi = {j: a.max for j, a in enumerate(schema.attributes) if isinstance(a, Numeric)}
            for node, branch in path:
                j = int(fs.feature[t, node])
                if isinstance(schema.attributes[j], Categorical):
                    assert j not in used_cats, f"categorical attribute {j} reused on a path"
                    used_cats.add(j)
                    assert math.isinf(fs.threshold[t, node])
                else:
                    thr = float(fs.threshold[t, node])
                    assert lo[j] <= thr <= hi[j], (thr, lo[j], hi[j])
                    n_numeric_splits += 1
                    if branch == 0:
                        hi[j] = thr
                    else:
                        lo[j] = thr
            # a path stops at the height, or earlier only when no attribute is left (never here: numerics remain)
            assert len(path) == fs.height
        assert n_leaves == fs.n_leaves[t]
    assert n_numeric_splits > 0


def test_path_stops_when_no_attribute_left():
    schema = make_schema([2, 3])  # categorical only, 2 attributes
    fs = ForestStructure.draw(schema, 3, height=5, seed=1)
    assert fs.n_leaves.tolist() == [6, 6, 6]  # both attributes used on every path, then stop
    for t in range(3):
        assert all(len(p) == 2 for _, p in walk(fs, schema, t))


def test_full_trees_have_all_leaves_never_pruned():
    # categorical-only with height >= m: every tree is the full product of arities, whatever the order
    schema = make_schema([2, 3, 4])
    fs = ForestStructure.draw(schema, 4, height=3, seed=3)
    assert fs.n_leaves.tolist() == [24] * 4
    # numeric-only: 2**height leaves
    fs = ForestStructure.draw(make_schema([(0, 1), (0, 1)]), 3, height=6, seed=3)
    assert fs.n_leaves.tolist() == [64] * 3


def test_pruned_shares_are_the_uniform_shares_of_the_declared_ranges():
    """What a node would hold if every attribute were uniform: 1/arity per categorical branch, and below a numeric
    threshold t its part of the range still open on the path (the declared one, narrowed by the splits above)."""
    s = Schema([Numeric("x", 0.0, 10.0), Categorical("c", ("a", "b", "c", "d"))], Label("y", ("n", "y")))
    fs = ForestStructure.draw(s, n_trees=3, height=4, seed=5)
    seen: dict[int, float] = {}

    def split(nodes, share, rate):
        seen.update(zip(nodes.tolist(), share.tolist()))
        return np.ones(nodes.size, bool), rate

    fs.pruned(s, split)
    M = fs.feature.shape[1]
    checked = 0
    for t in range(fs.n_trees):
        stack = [(0, 1.0, 0.0, 10.0)]  # (node, expected share, open range of x)
        while stack:
            node, want, lo, hi = stack.pop()
            assert seen[t * M + node] == pytest.approx(want, rel=1e-12), (t, node)
            checked += 1
            f = int(fs.feature[t, node])
            if fs.leaf[t, node] >= 0:
                continue
            first = int(fs.child[t, node])
            if f == 1:
                stack += [(first + k, want / 4, lo, hi) for k in range(4)]
            else:
                thr = float(fs.threshold[t, node])
                assert lo <= thr <= hi
                stack += [
                    (first, want * (thr - lo) / (hi - lo), lo, thr),
                    (first + 1, want * (hi - thr) / (hi - lo), thr, hi),
                ]
    assert checked > 3 * 4


def test_leaves_never_pruned_after_fitting_tiny_data():
    schema = make_schema(MIXED)
    f = PrivateForest.create(schema, n_trees=3, height=4, epsilon=1.0, seed=5)
    X, y = random_records(schema, 1, np.random.default_rng(1))
    f.fit(X, y)
    # every leaf of the drawn tree keeps a cell in counts, and the noise reaches every real cell
    for t in range(f.n_trees):
        leaves = sorted(int(f.structure.leaf[t, n]) for n, _ in walk(f.structure, schema, t))
        assert leaves == list(range(f.structure.n_leaves[t]))
    assert f.counts.shape == (3 + 1, f.structure.max_leaves, 2)  # and the prior stump
    real = np.arange(f.structure.max_leaves)[None, :] < f.structure.n_leaves[:, None]
    # eps per tree 1/3: P(noise == 0) = (1-a)/(1+a) ~ 0.17 per cell; hundreds of cells are nonzero
    assert np.count_nonzero(f.counts[real]) > 0.5 * real.sum() * 2
    assert not f.counts[~real].any()  # padding past each tree's last leaf stays zero


def test_default_height():
    assert [default_height(m) for m in (1, 2, 3, 4, 5, 6, 8, 17)] == [1, 2, 3, 3, 3, 3, 4, 8]
    schema = make_schema([2] * 7)
    assert ForestStructure.draw(schema, 2, seed=0).height == 3
    assert PrivateForest.create(schema, n_trees=2, seed=0).height == 3
    assert ForestStructure.draw(make_schema([2]), 1, seed=0).height == 1


def test_the_default_height_never_asks_for_more_leaves_than_the_guard_allows():
    """Half of Mushroom's 22 attributes (up to 12 values each) is 11: every draw was refused (TooLargeError),
    so `PrivateForest.create` and `streamdp model create` failed on Mushroom with their defaults."""
    from streamdp.records.datasets import load_schema

    mushroom = load_schema("mushroom")
    f = PrivateForest.create(mushroom, n_trees=10, epsilon=1.0)
    # each branch as deep as the leaf budget holds (the narrow attributes' branches deeper than the wide ones')
    assert 5 <= f.height <= default_height(22) and f.structure.max_leaves <= leaf_budget(mushroom, 10)
    small = ForestStructure.draw(mushroom, 10, max_cells=10 * 2 * 1080)  # the guard is the draw's budget too
    assert small.max_leaves <= 1080 and small.height < f.height
    assert PrivateForest.create(load_schema("nursery"), n_trees=10).height == 4  # half, where it fits
    assert PrivateForest.create(load_schema("congressional-voting"), n_trees=10).height == 8
    with pytest.raises(TooLargeError):  # an explicit height is the user's: refused, not lowered
        ForestStructure.draw(mushroom, 10, height=11)


def test_a_default_draw_spends_each_trees_budget_branch_by_branch():
    """A numeric split halves a branch's budget, a categorical one divides it by its arity: no path's fan-outs
    multiply past the budget, narrow branches go deep, and a branch stops only where no allowed attribute fits."""
    schema = _schema_of(["num", 50, 7, "num", 2], 2)
    budget = leaf_budget(schema, 10)
    fs = ForestStructure.draw(schema, 10, seed=3)
    width = [2 if isinstance(a, Numeric) else a.arity for a in schema.attributes]
    depths = []
    for t in range(10):
        for _, path in walk(fs, schema, t):
            fan = [width[int(fs.feature[t, node])] for node, _ in path]
            assert math.prod(fan) <= budget
            assert budget // math.prod(fan) < 2  # a leaf: not even a numeric split fits what is left
            depths.append(len(path))
    assert max(depths) == fs.height >= 13 and min(depths) < 9  # all-numeric paths: 2**14 <= budget < 2**15


def _schema_of(kinds: list, n_classes: int) -> Schema:
    attributes = [
        {"name": f"a{i}", "type": "numeric", "min": -i, "max": 1.0 + i}
        if k == "num"
        else {"name": f"a{i}", "type": "categorical", "values": list(range(k))}
        for i, k in enumerate(kinds)
    ]
    return Schema.from_dict({"attributes": attributes, "label": {"name": "y", "values": list(range(n_classes))}})


SWEEP_KINDS = {
    "numeric": lambda m: ["num"] * m,
    "binary": lambda m: [2] * m,
    "five values": lambda m: [5] * m,
    "fifty values": lambda m: [50] * m,
    "mixed": lambda m: [["num", 2, 7, 50, 3][i % 5] for i in range(m)],
}


@pytest.mark.parametrize("kind", sorted(SWEEP_KINDS))
def test_a_default_forest_stays_small_for_every_schema_up_to_100_attributes(kind):
    """Half the attributes gave 30 numeric attributes trees of 2**15 leaves and 64 of them 2**19 (a 220 MB blob,
    12-19 s to draw): a default is now drawn within the leaf budget, so its cells (and blob) are bounded for any
    schema, however wide; the draw's time is checked in the slow test below."""
    for m in (1, 3, 10, 30, 64, 100):
        for n_classes in (2, 10, 50):
            schema = _schema_of(SWEEP_KINDS[kind](m), n_classes)
            f = PrivateForest.create(schema, n_trees=10, epsilon=1.0)
            s = f.structure
            assert s.max_leaves <= leaf_budget(schema, 10) and 10 * s.max_leaves <= DEFAULT_LEAF_BUDGET
            assert f.counts.size <= DEFAULT_CELL_BUDGET, (kind, m, n_classes)
            # the blob of a fit that keeps every leaf (every cell nonzero): counts and structure within 10 MB
            f._counts[f.real_cells] = 1
            assert len(f.to_bytes()) <= 10_000_000, (kind, m, n_classes, s.height)
            if kind == "numeric" and n_classes == 2:  # as tall as the budget allows: 2**14 <= 23,831 < 2**15
                assert s.height == 14, (m, s.height)
            elif kind != "numeric" and s.height < default_height(m):  # lowered: the next level is over the budget
                assert max_possible_leaves(schema, s.height + 1) > leaf_budget(schema, 10)


def test_the_ceiling_height_keeps_the_cell_budget():
    """The river classifier's and growing models' default: at most 2,048 leaves, and fewer where many classes and
    trees would take the counts past the cell budget (100 trees of 256 leaves and 50 classes: 10 MiB of counts)."""
    from streamdp.forest.structure import ceiling_height

    for n_classes in (2, 50):
        for kinds in (["num"] * 30, [2] * 30, [50] * 30):
            for n_trees in (10, 100):
                schema = _schema_of(kinds, n_classes)
                h = ceiling_height(schema, n_trees)
                assert max_possible_leaves(schema, h) <= leaf_budget(schema, n_trees)
                assert (n_trees + 1) * max_possible_leaves(schema, h) * n_classes <= DEFAULT_CELL_BUDGET
    numeric = _schema_of(["num"] * 30, 50)
    assert ceiling_height(numeric) == 8 and ceiling_height(numeric, 100) == 6  # 2**6 x 101 x 50 cells fit, 2**7 not


@pytest.mark.slow
def test_a_default_forest_draws_within_a_second_for_every_schema_up_to_100_attributes():
    import time

    for kind, kinds in SWEEP_KINDS.items():
        for m in (10, 30, 64, 100):
            schema = _schema_of(kinds(m), 2)
            start = time.perf_counter()
            PrivateForest.create(schema, n_trees=10)
            assert time.perf_counter() - start < 1.0, (kind, m)


def test_bad_arguments_refused():
    schema = make_schema([2, 3])
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError):
            ForestStructure.draw(schema, bad, 2)
        with pytest.raises(ValueError):
            ForestStructure.draw(schema, 2, bad)


def test_too_large_guard_says_how_many_leaves():
    schema = make_schema([(0.0, 1.0)] * 4)
    with pytest.raises(TooLargeError) as ei:
        ForestStructure.draw(schema, n_trees=10, height=20, seed=0, max_cells=10_000)
    msg = str(ei.value)
    assert isinstance(ei.value, ValueError)
    # limit per tree: 10_000 // (2 classes * 10 trees) = 500; a tree of height 20 may have 2**20
    assert "500" in msg and f"{2**20:,}" in msg and "leaves" in msg
    # just under the guard works
    ForestStructure.draw(schema, n_trees=10, height=8, seed=0, max_cells=2 * 10 * 256)
    with pytest.raises(TooLargeError):
        ForestStructure.draw(schema, n_trees=10, height=9, seed=0, max_cells=2 * 10 * 256)


def test_max_possible_leaves():
    assert max_possible_leaves(make_schema([3, 5, 1]), 2) == 15
    assert max_possible_leaves(make_schema([3, 5, 1]), 9) == 15
    assert max_possible_leaves(make_schema([3, (0, 1), 1]), 3) == 12
    assert max_possible_leaves(make_schema([(0, 1)]), 10) == 1024


# -- routing -----------------------------------------------------------------------------

attr_spec = st.one_of(
    st.integers(1, 5),
    st.tuples(st.integers(-100, 100), st.integers(1, 50)).map(lambda t: (float(t[0]), float(t[0] + t[1]))),
)


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["categorical", "numeric", "mixed"]),
    spec=st.lists(attr_spec, min_size=1, max_size=6),
    n_trees=st.integers(1, 4),
    height=st.integers(1, 5),
    seed=st.integers(0, 2**32 - 1),
)
def test_apply_agrees_with_reference_router(kind, spec, n_trees, height, seed):
    if kind == "categorical":
        spec = [s if isinstance(s, int) else 3 for s in spec]
    elif kind == "numeric":
        spec = [s if isinstance(s, tuple) else (0.0, float(s)) for s in spec]
    schema = make_schema(spec, n_classes=3)
    fs = ForestStructure.draw(schema, n_trees, height, seed=seed)
    rng = np.random.default_rng(seed)
    X, _ = random_records(schema, 60, rng)
    enc = schema.encode(X)
    # put some numeric values exactly on thresholds: x == t must go left (x > t is false)
    for t in range(n_trees):
        num_nodes = [
            n
            for n in range(fs.feature.shape[1])
            if fs.feature[t, n] < schema.n_attributes and isinstance(schema.attributes[fs.feature[t, n]], Numeric)
        ]
        for i, n in enumerate(num_nodes[:5]):
            enc.X[i, fs.feature[t, n]] = fs.threshold[t, n]
    got = fs.apply(enc.X, schema.is_categorical)
    assert got.shape == (60, n_trees)
    assert np.array_equal(got, reference_apply(fs, schema, enc.X))
    # PrivateForest.apply encodes raw records the same way
    f = PrivateForest(schema, fs, epsilon=1.0)
    assert np.array_equal(f.apply(X), reference_apply(fs, schema, schema.encode(X).X))


def test_apply_empty_batch():
    schema = make_schema(MIXED)
    fs = ForestStructure.draw(schema, 3, 3, seed=0)
    assert fs.apply(np.empty((0, schema.n_attributes)), schema.is_categorical).shape == (0, 3)


def test_validate_rejects_a_dag_with_shared_children():
    """A forged structure whose splits share children would make validation exponential (2**60 paths)."""
    schema = make_schema([(0.0, 1.0)])
    h = 60
    nodes = 2 * h + 1
    feature = np.zeros((1, nodes), dtype=np.int32)
    child = np.zeros((1, nodes), dtype=np.int32)
    leaf = np.full((1, nodes), -1, dtype=np.int32)
    threshold = np.full((1, nodes), 0.5)
    # node 0 -> (1, 2); nodes 2i+1 and 2i+2 both -> (2i+3, 2i+4); the last two are leaves
    child[0, 0] = 1
    for i in range(h - 1):
        child[0, 2 * i + 1] = child[0, 2 * i + 2] = 2 * i + 3
    for n in (nodes - 2, nodes - 1):
        feature[0, n], child[0, n], threshold[0, n] = 1, n, np.inf
    leaf[0, nodes - 2], leaf[0, nodes - 1] = 0, 1
    arrays = {"feature": feature, "threshold": threshold, "child": child, "leaf": leaf, "n_leaves": np.array([2])}
    with pytest.raises(ValueError, match="twice"):
        ForestStructure.from_arrays(arrays, h, schema)


@pytest.mark.parametrize("spec", [MIXED, [1], [1, 1, 2], [1, (0.0, 1.0)]])
def test_validate_accepts_drawn_structures(spec):
    schema = make_schema(spec)  # arity-1 categoricals: a split with a single child
    fs = ForestStructure.draw(schema, 4, 5, seed=9)
    fs2 = ForestStructure.from_arrays(fs.arrays(), fs.height, schema)
    assert all(np.array_equal(a, fs2.arrays()[n]) for n, a in fs.arrays().items())


@pytest.mark.parametrize("spec", [[3, 2, 4, 2, 5], MIXED, [(0.0, 1.0), (5.0, 6.0), (-1.0, 1.0)], [2, 3, 2]])
def test_apply_large_batches_chunks_and_cached_tables(spec):
    """Batches larger than any internal chunk, small batches after a large one (cached tables), same answers."""
    schema = make_schema(spec, n_classes=2)
    fs = ForestStructure.draw(schema, 4, 4, seed=11)
    rng = np.random.default_rng(11)
    X, _ = random_records(schema, 40_000, rng)
    enc = schema.encode(X).X
    big = fs.apply(enc, schema.is_categorical)
    sub = rng.choice(len(enc), 400, replace=False)
    assert np.array_equal(big[sub], reference_apply(fs, schema, enc[sub]))
    for lo, hi in ((0, 1), (1, 7), (7, 1000), (16380, 16390), (39_990, 40_000)):
        assert np.array_equal(fs.apply(enc[lo:hi], schema.is_categorical), big[lo:hi]), (lo, hi)
    assert np.array_equal(fs.apply(enc, schema.is_categorical), big)
    # a fresh structure (no cache) on a tiny batch agrees too
    fs2 = ForestStructure.from_arrays(fs.arrays(), fs.height, schema)
    assert np.array_equal(fs2.apply(enc[sub], schema.is_categorical), big[sub])
    assert big.min() >= 0 and np.all(big < fs.n_leaves[None, :])


def test_guard_refuses_before_drawing_anything_big():
    """Leaf counts are known level by level: a request for 2**40 leaves is refused with kilobytes of work."""
    import tracemalloc

    schema = make_schema([(0.0, 1.0)] * 3)
    tracemalloc.start()
    try:
        with pytest.raises(TooLargeError, match="tree 0"):
            ForestStructure.draw(schema, n_trees=4, height=40, seed=0, max_cells=2 * 4 * 5000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16_000_000, peak  # levels of at most ~8k nodes per tree (2**13 > 5000 leaves) were built


def test_many_trees_drawn_side_by_side_match_one_by_one_shape():
    """Trees drawn in groups (small trees side by side) and alone (big ones) have the same arrays' layout."""
    schema = make_schema(MIXED)
    fs = ForestStructure.draw(schema, 300, 3, seed=4)
    fs.validate(schema)
    assert fs.n_trees == 300 and fs.max_leaves == int(fs.n_leaves.max())
    assert all((fs.leaf[t] >= 0).sum() == fs.n_leaves[t] for t in range(300))


# -- pruning (PrivateForest.fit's height ceiling) ----------------------------------------------------


def _keep_some(fraction: float):
    """A split rule keeping a pseudo-random ``fraction`` of the nodes it is asked about (a hash of the node)."""
    return lambda nodes, share, rate: ((nodes * 2654435761) % 997 < fraction * 997, rate)


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=st.lists(attr_spec, min_size=1, max_size=5),
    n_trees=st.integers(1, 3),
    height=st.integers(1, 4),
    seed=st.integers(0, 2**32 - 1),
    keep=st.floats(0.0, 1.0),
)
def test_pruned_structure_sends_each_old_leaf_to_one_new_leaf(spec, n_trees, height, seed, keep):
    schema = make_schema(spec, n_classes=2)
    fs = ForestStructure.draw(schema, n_trees, height, seed=seed)
    small, old_node = fs.pruned(schema, _keep_some(keep))
    small.validate(schema)  # a well-formed forest (BFS arrays, leaf numbers 0..n-1, within its height)
    assert np.all(small.n_leaves <= fs.n_leaves) and small.height <= fs.height
    inner = small.leaf < 0
    rows = np.nonzero(inner & (old_node >= 0))
    assert np.array_equal(small.feature[rows], fs.feature[rows[0], old_node[rows]])  # a kept split tests the same
    X = schema.encode(random_records(schema, 200, np.random.default_rng(seed))[0]).X
    old, new = fs.apply(X, schema.is_categorical), small.apply(X, schema.is_categorical)
    for t in range(n_trees):  # every old leaf's records land in one new leaf
        pairs = set(zip(old[:, t].tolist(), new[:, t].tolist()))
        assert len(pairs) == len({o for o, _ in pairs})


def test_pruning_nothing_gives_the_same_forest_and_pruning_everything_stumps():
    schema = make_schema(MIXED)
    fs = ForestStructure.draw(schema, 3, 3, seed=11)
    same, _ = fs.pruned(schema, _keep_some(1.01))
    for name, a in fs.arrays().items():
        assert np.array_equal(a, same.arrays()[name]), name
    stumps, old_node = fs.pruned(schema, _keep_some(0.0))
    assert stumps.n_leaves.tolist() == [1, 1, 1] and stumps.height == 1 and old_node[:, 0].tolist() == [0, 0, 0]


def test_shares_halve_or_split_by_arity_and_rates_are_inherited():
    schema = make_schema(MIXED)
    fs = ForestStructure.draw(schema, 4, 4, seed=2)
    seen = []

    def record(nodes, share, rate):
        seen.append((nodes.copy(), share.copy(), np.broadcast_to(rate, nodes.shape).copy()))
        return np.ones(nodes.size, dtype=bool), rate * 2  # every level doubles the rate its children get

    fs.pruned(schema, record, rate=np.arange(1.0, 5.0))
    M = fs.feature.shape[1]
    for level, (nodes, share, rate) in enumerate(seen):
        assert np.allclose(rate, (nodes // M + 1) * 2.0**level)
    nodes = np.concatenate([n for n, _, _ in seen])
    share = np.concatenate([s for _, s, _ in seen])
    leaves = fs.leaf.ravel()[nodes] >= 0
    assert np.allclose(np.bincount(nodes[leaves] // M, weights=share[leaves]), 1.0)  # the leaves partition the records
