"""PrivateForest.grow: a stream's trees deepen release by release, never past the drawn height."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import streamdp.forest.growth as growth_module
from streamdp import NotPrivateWarning, PrivateForest
from streamdp.forest.growth import drawn_nodes, leaves_below
from streamdp.records.datasets import load
from tests.forest.test_pruning import audit_split_decision


def _forest(schema, **kw) -> PrivateForest:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        return PrivateForest.create(schema, **kw)


def _windows(n: int, k: int, seed: int = 0):
    return np.array_split(np.random.default_rng(seed).permutation(n), k)


def _exact(monkeypatch, calls=None):
    """Releases without noise (the growth rule and the bookkeeping, checked on known numbers)."""

    def release(exact, epsilon, mechanism, rng, real=None, k=None):
        if calls is not None:
            calls.append(epsilon)
        return np.asarray(exact, dtype=np.int64).copy()

    monkeypatch.setattr(growth_module, "noisy_node", release)


def _inner_drawn(f: PrivateForest) -> set[tuple[int, int]]:
    d = drawn_nodes(f.structure, f.drawn, f.schema.arities, f.schema.is_categorical)
    t, i = np.nonzero((f.structure.leaf < 0) & (d >= 0))
    return set(zip(t.tolist(), d[t, i].tolist()))


def test_trees_only_grow_and_counts_add_up(monkeypatch):
    """Without noise: every split kept before is kept, the height never passes the drawn one, and every
    tree's counts hold each window's records once (spreading an old leaf keeps its total, up to rounding)."""
    _exact(monkeypatch)
    ds = load("congressional-voting")
    enc = ds.schema.encode(ds.X, ds.y)
    f = _forest(ds.schema, n_trees=4, height=9, epsilon=1.0, seed=3)
    before, seen = set(), np.zeros(2)
    heights = []
    for w in _windows(len(ds.y), 4):
        f.grow_encoded(enc.X[w], enc.y[w])
        inner = _inner_drawn(f)
        assert before <= inner
        before = inner
        seen += np.bincount(enc.y[w], minlength=2)
        heights.append(f.height)
        assert np.array_equal(f.counts[4, 0], seen)  # the stump holds every record once
        rounding = 0.5 * f.structure.n_leaves[:4].max() * len(heights)
        assert np.all(np.abs(f.counts[:4].sum(axis=1) - seen) <= rounding)
    assert heights == sorted(heights) and heights[-1] <= 9 and heights[-1] > heights[0]


def test_node_variance_counts_the_noise_each_node_carries(monkeypatch):
    """Two releases: a node that was a leaf in the first and is split in the second carries one cell's noise
    from the first and its new leaves' from the second; a new leaf below it, its share squared of the first."""
    _exact(monkeypatch)
    ds = load("congressional-voting")
    enc = ds.schema.encode(ds.X, ds.y)
    f = _forest(ds.schema, n_trees=3, height=6, epsilon=1.0, seed=1)
    s2 = f.cell_variance
    first, second = _windows(len(ds.y), 2)
    f.grow_encoded(enc.X[first], enc.y[first])
    old_struct = f.structure
    old_leaves = leaves_below(old_struct)
    assert np.allclose(f.node_variance, old_leaves * s2)
    f.grow_encoded(enc.X[second], enc.y[second])
    new = f.structure
    assert new.height > old_struct.height  # the second release grew the trees (all 435 records seen)
    assert np.allclose(f.node_variance[:, 0], (old_leaves[:, 0] + leaves_below(new)[:, 0]) * s2)
    # a new leaf directly below an old (categorical, arity 3: Votes' attributes) leaf
    old_d = drawn_nodes(old_struct, f.drawn, ds.schema.arities, ds.schema.is_categorical)
    new_d = drawn_nodes(new, f.drawn, ds.schema.arities, ds.schema.is_categorical)
    checked = 0
    for t in range(3):
        old_leaf_ids = {int(old_d[t, i]) for i in np.flatnonzero(old_struct.leaf[t] >= 0)}
        parent = {int(new.child[t, i]) + j: i for i in np.flatnonzero(new.leaf[t] < 0) for j in range(3)}
        for i in np.flatnonzero(new.leaf[t] >= 0):
            p = parent.get(int(i))
            if p is not None and int(new_d[t, p]) in old_leaf_ids:
                assert f.node_variance[t, i] == pytest.approx(s2 / 9 + s2)
                checked += 1
    assert checked > 0


def test_grown_forest_round_trips_and_merges():
    ds = load("congressional-voting")
    f = _forest(ds.schema, n_trees=4, height=10, epsilon=1.0, seed=2)
    f.grow(ds.X[:200], ds.y[:200]).grow(ds.X[200:], ds.y[200:])
    g = PrivateForest.from_bytes(f.to_bytes())
    assert np.array_equal(g.node_variance, f.node_variance)
    assert np.array_equal(g.predict_proba(ds.X), f.predict_proba(ds.X))
    before = f.node_variance.copy()
    f.merge(f.noisy_delta(ds.X[:50], ds.y[:50]))  # a delta on the grown trees: every node adds its leaves' noise
    assert np.allclose(f.node_variance, before + leaves_below(f.structure) * f.cell_variance)


def test_without_a_stump_or_noise_grow_is_update():
    ds = load("congressional-voting")
    for kw in ({"prior_trees": 0}, {"epsilon": float("inf")}):
        f = _forest(ds.schema, n_trees=3, height=8, seed=4, **kw)
        f.grow(ds.X, ds.y)
        assert f.height == 8 and f.structure is f.drawn and f.n_releases == 1


@pytest.mark.parametrize("budget", ["split", "disjoint"])
def test_the_grown_structure_depends_on_the_released_numbers_alone(budget, monkeypatch):
    """Every release replaced by numbers that ignore the data: two unrelated streams then grow the same trees
    window after window, so the rule reads nothing of the data but what is released."""

    def release(exact, epsilon, mechanism, rng, real=None, k=None):
        fake = np.full(np.shape(exact), 60, dtype=np.int64)
        return fake * np.asarray(real) if real is not None else fake

    monkeypatch.setattr(growth_module, "noisy_node", release)
    ds = load("congressional-voting")
    enc = ds.schema.encode(ds.X, ds.y)
    rng = np.random.default_rng(5)
    other_X = enc.X[rng.permutation(len(ds.y))[:90]]
    other_y = np.where(rng.uniform(size=90) < 0.9, 1, 0)
    runs = []
    for X, y in ((enc.X, enc.y), (other_X, other_y)):
        f = _forest(ds.schema, n_trees=5, height=9, epsilon=1.0, seed=7, budget=budget)
        shapes = []
        for w in np.array_split(np.arange(len(y)), 3):
            f.grow_encoded(X[w], y[w])
            shapes.append({k: a.copy() for k, a in f.structure.arrays().items()})
        runs.append(shapes)
    for a, b in zip(*runs):
        for name in a:
            assert np.array_equal(a[name], b[name]), name
    assert 1 <= runs[0][0]["n_leaves"].max() < runs[0][-1]["n_leaves"].max()  # it did grow, from the roots


# 8,000 releases, tens of seconds: run after the suite; that the decisions read only released numbers is checked
# exactly in the default run (test_the_*_structure_depends_on_the_released_numbers_alone)
@pytest.mark.long
def test_empirical_epsilon_audit_of_a_grown_release():
    """The second window of a stream on neighbouring datasets of 11 and 12 records, after a first window
    already published (4 records; one fixed release, the same in both worlds: it is public by then): the
    root splits when the published stump total plus this window's clears ``PRUNE_SNR`` sd of two releases'
    noise (about 15.8 records), so the decision, read off the published counts and this window's stumps,
    is in play (a fixed first release whose root did not split and whose stump total is 2-6); audited jointly with the tree's first cell (:func:`test_forest_pruning.audit_split_decision`:
    Clopper-Pearson, failure probability 1e-6)."""
    published = {}

    def second_window(f, X, y):
        if "first" not in published:  # one first release for every sample and both worlds, whose root did not
            # split and whose stump total is near its 4 records (so the second window's decision is in play;
            # about 4 draws in 10 qualify: 100 tries fail with probability < 1e-20)
            for _ in range(100):
                first = PrivateForest(f.schema, f.structure, epsilon=1.0, prior_trees=1)
                published["first"] = first.grow_encoded(np.zeros((4, 1)), np.zeros(4, dtype=np.int64))
                if published["first"].structure.n_leaves[0] == 1 and abs(published["first"].counts[1].sum() - 4) <= 2:
                    break
            assert published["first"].structure.n_leaves[0] == 1
        return f.holding(published["first"]).grow_encoded(X, y)

    audit_split_decision(second_window)


@pytest.mark.slow
def test_a_stream_too_tall_for_its_data_grows_to_what_it_can_fill():
    """Votes (290 training records, 16 attributes of 3 values) at height 11 in 4 windows: the drawn trees'
    summed noise swamps every node and the forest predicts its prior; grown, it scores like the best height
    (benchmarks/results/stream_height_ceiling.md)."""
    ds = load("congressional-voting")
    perm = np.random.default_rng(0).permutation(len(ds.y))
    tr, te = perm[len(ds.y) // 3 :], perm[: len(ds.y) // 3]
    grown, tall = [], []
    for seed in range(4):  # fixed noise (noise_seed): a deterministic check
        f = _forest(ds.schema, n_trees=10, height=11, epsilon=1.0, seed=seed, noise_seed=seed)
        g = _forest(ds.schema, n_trees=10, height=11, epsilon=1.0, seed=seed, noise_seed=seed)
        for w in np.array_split(tr, 4):
            f.grow(ds.X[w], ds.y[w])
            g.update(ds.X[w], ds.y[w])
        assert f.height < 11 and g.height == 11
        grown.append(np.mean(f.predict(ds.X[te]) == ds.y[te]))
        tall.append(np.mean(g.predict(ds.X[te]) == ds.y[te]))
    assert np.mean(grown) >= 0.75 and np.mean(grown) >= np.mean(tall) + 0.1, (grown, tall)


def test_growing_from_a_tally_on_the_drawn_trees_is_growing_from_the_records():
    """What the stream service's closer holds (a window's exact tally on the drawn trees) grows the same trees
    and releases the same counts as the records themselves (same noise seed: the same draws in the same order)."""
    ds = load("congressional-voting")
    enc = ds.schema.encode(ds.X, ds.y)
    a = _forest(ds.schema, n_trees=4, height=7, epsilon=2.0, seed=3, noise_seed=11)
    b = _forest(ds.schema, n_trees=4, height=7, epsilon=2.0, seed=3, noise_seed=11)
    exact_on = _forest(ds.schema, n_trees=4, height=7, epsilon=float("inf"), seed=3)
    heights = []
    for w in _windows(len(ds.y), 3):
        a.grow_encoded(enc.X[w], enc.y[w])
        b.grow_exact(exact_on.tally_encoded(enc.X[w], enc.y[w]))
        heights.append(a.height)
        assert np.array_equal(a.counts, b.counts) and np.array_equal(a.node_variance, b.node_variance)
        for name, arr in a.structure.arrays().items():
            assert np.array_equal(arr, b.structure.arrays()[name]), name
    assert heights[0] < 7 and heights == sorted(heights) and a.n_releases == 3, heights  # grown, not drawn tall
    with pytest.raises(ValueError, match="exact tally on the drawn trees"):
        b.grow_exact(np.zeros((2, 2, 2), dtype=np.int64))


def test_holding_refuses_a_forest_released_with_other_settings():
    """A grown forest carries its release's noise: taking one released at another epsilon or budget (or from
    other drawn trees) would mislabel its privacy and mis-weigh its counts."""
    ds = load("congressional-voting")
    spec = _forest(ds.schema, n_trees=3, height=8, epsilon=1.0, seed=1)
    assert spec.holding(spec.holding(spec).grow(ds.X, ds.y)).n_releases == 1
    for kw, match in (
        ({"epsilon": 8.0}, "other settings"),
        ({"budget": "disjoint"}, "other settings"),
        ({"seed": 2}, "not cut from"),
    ):
        other = _forest(ds.schema, n_trees=3, height=8, **{"epsilon": 1.0, "seed": 1, **kw})
        with pytest.raises(ValueError, match=match):
            spec.holding(other.grow(ds.X, ds.y))


def test_aggregate_with_the_held_leaves_given_is_aggregate():
    """The held leaves computed once and passed (as grow_exact does for every pruning) change nothing."""
    from streamdp.forest.growth import aggregate, held_leaves
    from streamdp.forest.structure import ForestStructure
    from streamdp.records.datasets import load

    s = load("congressional-voting").schema
    d = ForestStructure.draw(s, n_trees=3, height=4, seed=1)
    small, _ = d.pruned(s, lambda nodes, share, rate: (share > 0.1, rate))
    exact = np.zeros((3, d.max_leaves, 2), dtype=np.int64)
    rng = np.random.default_rng(2)
    exact[rng.integers(0, 3, 40), rng.integers(0, d.max_leaves, 40), rng.integers(0, 2, 40)] += 1
    got = aggregate(exact, d, small, s.arities, s.is_categorical, held_leaves(exact))
    assert np.array_equal(got, aggregate(exact, d, small, s.arities, s.is_categorical))
    assert int(got.sum()) == int(exact.sum())


@pytest.mark.parametrize("classes", [1, 2, 5])
def test_held_leaves_are_the_leaves_with_a_nonzero_count(classes):
    from streamdp.forest.growth import held_leaves

    rng = np.random.default_rng(classes)
    for n in (0, 1, 30):
        x = np.zeros((3, 11, classes), dtype=np.int64)
        x[rng.integers(0, 3, n), rng.integers(0, 11, n), rng.integers(0, classes, n)] = rng.integers(1, 5, n)
        want = np.nonzero(x.any(axis=2))
        got = held_leaves(x)
        assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()


def test_drawn_nodes_are_kept_on_the_pruned_structure_for_its_drawn_one():
    from streamdp.forest.structure import ForestStructure

    s = load("congressional-voting").schema
    d = ForestStructure.draw(s, n_trees=2, height=3, seed=0)
    small, old = d.pruned(s, lambda nodes, share, rate: (share > 0.2, rate))
    first = drawn_nodes(small, d, s.arities, s.is_categorical)
    assert drawn_nodes(small, d, s.arities, s.is_categorical) is first and not first.flags.writeable
    other = ForestStructure.draw(s, n_trees=2, height=3, seed=0)  # another drawn structure: mapped again
    assert drawn_nodes(small, other, s.arities, s.is_categorical) is not first
    assert np.array_equal(first, old)
