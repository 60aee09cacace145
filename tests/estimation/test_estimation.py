"""Noise-aware estimation (streamdp.estimation): the rule, its wiring, and the floor at the prior."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from streamdp import NotPrivateWarning, estimation
from streamdp.estimation import ForestNodes, forest_topology, node_distributions, rule
from streamdp.forest.model import PrivateForest
from streamdp.forest.structure import ForestStructure, max_possible_leaves
from streamdp.learners import DPEA, HanischForest
from streamdp.records.datasets import load, skewed
from streamdp.records.schema import Schema

# -- the rule -----------------------------------------------------------------------------------


def test_topology_matches_the_structure_arrays():
    ds = skewed(10)
    fs = ForestStructure.draw(ds.schema, n_trees=3, height=3, seed=4)
    parent, depth, leaf_node = forest_topology(fs.feature, fs.child, fs.leaf)
    for t in range(3):
        inner = np.flatnonzero((fs.leaf[t] < 0) & (depth[t] >= 0))
        for v in inner:
            arity = ds.schema.attributes[fs.feature[t, v]].arity
            kids = fs.child[t, v] + np.arange(arity)
            assert np.all(parent[t, kids] == v) and np.all(depth[t, kids] == depth[t, v] + 1)
        assert np.all(fs.leaf[t, leaf_node[t, : fs.n_leaves[t]]] == np.arange(fs.n_leaves[t]))
        assert depth[t].max() <= 3


def test_one_record_chain_equals_the_posterior_step_by_step():
    """Path_proba_one gives the floats of posterior_step, step by step, on hard cases: negative and zero counts,
    swamped nodes, zero variance, a clipped class, no records at the roots."""
    rng = np.random.default_rng(0)
    for C in (2, 3, 5):
        for _ in range(1000):
            h = int(rng.integers(1, 6))
            y = rng.integers(-30, 200, size=(h, C)).astype(np.float64) * rng.choice([1.0, 0.37], size=(h, 1))
            var = rng.choice([0.0, 3.7, 90.0, 1e4], size=h)
            prior = rng.dirichlet(np.ones(C))
            records, root_var = float(rng.choice([0.0, 50.0, 900.0])), float(rng.choice([0.0, 4e4]))
            want, m, above = prior[None, :], np.array([records]), root_var
            for d in range(h):
                share = np.array([var[d] / above if above > 0 else 0.0])
                want, m = estimation.posterior_step(y[d : d + 1], var[d : d + 1], want, m, share)
                above = var[d]
            pooled = np.column_stack([y, var]).ravel().tolist()
            if any(pooled[d : d + C + 1] == pooled[d - C - 1 : d] for d in range(C + 1, len(pooled), C + 1)):
                continue  # a repeated pool is skipped by the chain (tested with the forest's paths)
            assert estimation.path_proba_one(pooled, prior.tolist(), records, root_var) == want[0].tolist()


def test_posterior_step_weighs_a_level_below_the_old_bar_and_keeps_noise_at_the_parent():
    """A pooled level whose total stands 2 noise sds above zero (under the gate's 3) still moves the estimate
    toward its counts; a level of pure noise (total near 0, records expected from the parent) barely moves it;
    with no noise the step is the Dirichlet posterior mean (y + (KAPPA) p) / (n + KAPPA) up to the records."""
    parent = np.array([[0.7, 0.3]])
    clear, n = estimation.posterior_step(
        np.array([[20.0, 60.0]]), np.array([40.0**2]), parent, np.array([160.0]), np.array([0.5])
    )
    assert 0.35 < clear[0, 1] < 0.75 and 60 < n[0] < 100  # toward the counts' 0.75; records near the expected 80
    gated = estimation.shrink(np.array([[20.0, 60.0]]), np.array([40.0**2]), parent)
    assert gated.tolist() == parent.tolist()  # the gate discarded it
    noise, _ = estimation.posterior_step(
        np.array([[-30.0, 35.0]]), np.array([40.0**2]), parent, np.array([160.0]), np.array([0.5])
    )
    assert abs(noise[0, 0] - 0.7) < 0.05
    exact, n = estimation.posterior_step(
        np.array([[2.0, 18.0]]), np.zeros(1), parent, np.array([40.0]), np.array([0.5])
    )
    k = estimation.KAPPA
    assert n[0] == 20.0 and exact[0, 1] == pytest.approx((18.0 + k * 0.3) / (20.0 + k))


def test_tree_records_ignores_trees_that_released_nothing():
    """The river classifier's prior phase releases the stumps alone: the silent random trees measure nothing."""
    assert estimation.tree_records(np.array([0.0, 0.0, 250.0]), np.array([0.0, 0.0, 9.0])) == 250.0
    assert estimation.tree_records(np.array([0.0, 0.0]), np.array([0.0, 0.0])) == 0.0


def test_cell_variance_is_finite_for_any_positive_epsilon():
    """Exp(-1e-17) rounds to 1: the variance used to divide by zero (DPEA(epsilon=1e-17).fit raised
    ZeroDivisionError before the data layer's clear refusal)."""
    assert estimation.cell_variance("geometric", 1e-17) == pytest.approx(2e34, rel=1e-9)
    assert estimation.cell_variance("geometric", 1.0) == pytest.approx(2 * math.exp(-1) / (1 - math.exp(-1)) ** 2)


def test_dpea_with_a_vanishing_epsilon_is_refused_with_the_noise_limit():
    ds = load("congressional-voting")
    with pytest.raises(ValueError, match="noise scale"):
        DPEA(ds.schema, epsilon=1e-17).fit(ds.X, ds.y)


def test_seq_sum_adds_left_to_right_as_numpy_does_on_every_python():
    """The one-record paths' sums (estimation.seq_sum) are numpy's: Python 3.12's sum() compensates, and would
    give 1.0 here where numpy, adding rows one by one, gives 0.0."""
    xs = [1e16, 1.0, -1e16]
    want = np.zeros(1)
    for x in xs:
        want += x
    for f in (estimation.seq_sum, rule._left_to_right):  # the running interpreter's, and the 3.12+ branch
        assert f(xs) == want[0] == 0.0
        assert f([0.1, 0.2, 0.3]) == np.array([0.1, 0.2, 0.3]).sum() == (0.1 + 0.2) + 0.3


def test_inner_nodes_sum_their_leaves_and_variance_grows_with_leaves_below():
    ds = skewed(500, seed=3)
    f = PrivateForest.create(ds.schema, n_trees=2, height=2, epsilon=1.0, seed=1).fit(ds.X, ds.y)
    nodes = f.estimation_nodes()
    roots = nodes.depth == 0
    assert roots.sum() == 2  # the prior stump is no node of the walk
    assert np.allclose(nodes.y[roots], f.counts[:2].sum(axis=1))  # root = sum of the tree's leaves
    C = ds.schema.n_classes
    # the pruned fit's trees had the budget the probe left: their cells' variance is noise_variance, not one cell's
    var = f.noise_variance
    assert var[0] > f.cell_variance and var[-1] == pytest.approx(f.cell_variance)  # trees vs the stump
    assert np.allclose(nodes.var[roots], f.structure.n_leaves[:2] * C * var[:2])
    leaves = nodes.leaf_node[nodes.leaf_node >= 0]
    assert np.allclose(nodes.var[leaves], C * var[0])


def test_a_shallower_leaf_is_pooled_at_every_deeper_depth():
    """Tree 0 splits twice on the record's path, tree 1 once: at depth 2 the pool holds tree 0's depth-2 leaf
    and tree 1's depth-1 leaf again (its most specific estimate), not tree 0's leaf alone."""
    feature = np.array([[0, 1, -1, -1, -1], [0, -1, -1, -1, -1]])
    child = np.array([[1, 3, 0, 0, 0], [1, 0, 0, 0, 0]])
    leaf = np.array([[-1, -1, 0, 1, 2], [-1, 0, 1, -1, -1]])
    counts = np.array([[[9.0, 1.0], [2.0, 8.0], [5.0, 5.0]], [[40.0, 60.0], [30.0, 10.0], [0.0, 0.0]]])
    nodes = ForestNodes.build(feature, child, leaf, counts, cell_var=1.0)
    var = 2.0  # one leaf's total: C cells of variance 1
    path = nodes.path_nodes(np.array([1, 3]))  # tree 0's leaf 1 (depth 2), tree 1's leaf 0 (depth 1)
    assert path[1, 2] == path[1, 1] == nodes.leaf_node[1, 0]  # the shallow leaf repeated below itself
    assert nodes.root_var == 3 * var + 2 * var  # the pooled roots: 3 leaves below tree 0's, 2 below tree 1's
    want, m = nodes.prior[None, :], np.array([nodes.records])
    step = estimation.posterior_step
    want, m = step(np.array([[47.0, 73.0]]), np.array([3 * var]), want, m, np.array([3 / 5]))
    want, m = step(np.array([[42.0, 68.0]]), np.array([2 * var]), want, m, np.array([2 / 3]))
    np.testing.assert_array_equal(nodes.path_proba(np.array([[1, 0]])), want)
    rows = nodes.path_rows(np.array([1, 3])).sum(axis=0)  # the river path's pooled rows give the same floats
    assert estimation.path_proba_one(rows[3:].tolist(), nodes.prior.tolist(), nodes.records, nodes.root_var) == (
        want[0].tolist()
    )


def test_a_pool_no_tree_deepens_is_not_weighed_twice():
    """A record whose every path ended above depth d gets no second step there: one posterior step at depth 1,
    whether the unrelated branch B is a leaf or splits again (B's depth changes only the leaves' share of the
    root's records that leaf A expects: one of two leaves, or of three)."""
    counts = np.array([[[70.0, 30.0], [20.0, 20.0], [5.0, 15.0]]])
    prior = np.array([0.5, 0.5])
    # root splits: leaf A (leaf 0) and B; B is a leaf, or splits into two leaves at depth 2
    flat = ForestNodes.build(
        np.array([[0, -1, -1]]),
        np.array([[1, 0, 0]]),
        np.array([[-1, 0, 1]]),
        counts[:, :2] + np.array([[[0, 0], [5, 15]]]),
        1.0,
        prior=prior,
    )
    deep = ForestNodes.build(
        np.array([[0, -1, 1, -1, -1]]),
        np.array([[1, 0, 3, 0, 0]]),
        np.array([[-1, 0, -1, 1, 2]]),
        counts,
        1.0,
        prior=prior,
    )
    for nodes, share in ((flat, 1 / 2), (deep, 1 / 3)):
        want, _ = estimation.posterior_step(
            counts[0, :1], np.array([2.0]), prior[None, :], np.array([nodes.records]), np.array([share])
        )
        np.testing.assert_array_equal(nodes.path_proba(np.array([[0]])), want)
    rows = deep.path_rows(np.array([0]))[0, 3:].tolist()  # depths 1 and 2: leaf A twice
    one = estimation.path_proba_one(rows, prior.tolist(), deep.records, deep.root_var)
    assert rows[:3] == rows[3:] and one == deep.path_proba(np.array([[0]]))[0].tolist()


def test_a_root_that_is_a_leaf_adds_nothing_below_the_roots():
    """A random tree of one leaf is the prior's business (the roots take the prior): changing its counts changes no
    record's estimate once the prior is given."""
    feature = np.array([[0, -1, -1], [-1, -1, -1]])
    child = np.array([[1, 0, 0], [0, 0, 0]])
    leaf = np.array([[-1, 0, 1], [0, -1, -1]])
    prior = np.array([0.5, 0.5])
    counts = np.array([[[60.0, 10.0], [5.0, 40.0]], [[50.0, 50.0], [0.0, 0.0]]])
    a = ForestNodes.build(feature, child, leaf, counts, 1.0, prior=prior)
    counts[1, 0] = [0.0, 100.0]  # other classes, the same total (the records every tree counts)
    b = ForestNodes.build(feature, child, leaf, counts, 1.0, prior=prior)
    leaves = np.array([[0, 0], [1, 0]])
    np.testing.assert_array_equal(a.path_proba(leaves), b.path_proba(leaves))
    assert a.path_nodes(np.array([2])).tolist() == [[a.leaf_node[1, 0], len(a.y)]]  # its row below the root: zeros


def test_swamped_nodes_fall_back_to_the_parent_and_clear_ones_shrink_toward_it():
    parent, depth = np.array([-1, 0, 0]), np.array([0, 1, 1])
    y = np.array([[700.0, 300.0], [690.0, 10.0], [10.0, 290.0]])
    prior = np.array([0.5, 0.5])
    exact = node_distributions(y, np.zeros(3), parent, depth, prior)
    assert exact[1, 0] > 0.97 and exact[2, 1] > 0.95  # no noise: almost the counts themselves
    noisy = node_distributions(y, np.array([0.0, 1e6, 1e6]), parent, depth, prior)  # sd 1000 > totals
    assert np.allclose(noisy[1:], exact[0])
    mid = node_distributions(y, np.array([0.0, 2e4, 2e4]), parent, depth, prior)  # sd 141: shrunk
    assert exact[0, 0] < mid[1, 0] < exact[1, 0]


# -- post-processing only -------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["geometric", "laplace", pytest.param("kanon", marks=pytest.mark.slow)])
@pytest.mark.parametrize("vote", ["proba", "majority"])
def test_estimation_changes_no_released_number(mechanism, vote, monkeypatch):
    import streamdp.forest.persistence as forest_module

    monkeypatch.setattr(forest_module.time, "time", lambda: 1.0)  # the blob's "created" stamp
    ds = skewed(3000, seed=2)
    kw = dict(k=10, beta=0.5, epsilon=8.0) if mechanism == "kanon" else dict(epsilon=1.0)
    f = PrivateForest.create(ds.schema, n_trees=4, height=3, mechanism=mechanism, vote=vote, seed=3, **kw)
    f.fit(ds.X, ds.y)
    counts, blob = f.counts.copy(), f.to_bytes()
    for est in ("shrink", "leaf", "shrink"):
        f.estimator = est
        f.predict_proba(ds.X[:100])
        f.leaf_proba()
    assert np.array_equal(f.counts, counts) and f.counts.dtype == counts.dtype
    assert f.to_bytes() == blob


def test_leaf_proba_is_what_each_tree_votes_with():
    ds = skewed(4000, seed=5)
    f = PrivateForest.create(ds.schema, n_trees=3, height=3, epsilon=1.0, seed=2, vote="majority").fit(ds.X, ds.y)
    table = f.leaf_proba()
    assert table.shape == (3,) + f.shape[1:]  # the random trees: the stump does not vote
    assert np.allclose(table.sum(axis=2)[f.real_cells[:3, :, 0]], 1.0)
    leaves = f.apply(ds.X[:50])
    votes = table[np.arange(3)[None, :], leaves[:, :3]].argmax(axis=2)
    expected = np.stack([np.bincount(v, minlength=4) for v in votes]) / 3
    assert np.allclose(f.predict_proba(ds.X[:50]), expected)


def test_kanon_tree_with_every_cell_pruned_predicts_what_survives_never_the_first_class():
    s = Schema.from_dict(
        {
            "attributes": [{"name": "a", "type": "categorical", "values": ["x", "y"]}],
            "label": {"name": "c", "values": ["c0", "c1", "c2"]},
        }
    )
    fs = ForestStructure.draw(s, n_trees=2, height=1, seed=0)
    counts = np.array([[[0, 0, 0], [0, 0, 0]], [[0, 0, 40], [0, 12, 30]]], dtype=np.int64)
    for vote in ("proba", "majority"):
        f = PrivateForest(s, fs, epsilon=8.0, mechanism="kanon", k=10, beta=0.5, vote=vote, counts=counts.copy())
        assert list(f.predict([["x"], ["y"]])) == ["c2", "c2"]
        g = PrivateForest(
            s, fs, epsilon=8.0, mechanism="kanon", k=10, beta=0.5, vote=vote, counts=np.zeros_like(counts), n_releases=1
        )
        assert g.predict_proba([["x"]]).shape == (1, 3)  # a release pruned whole: uniform, still a distribution


# -- the floor at the prior ----------------------------------------------------------------------------


def _merged_nursery():
    ds = load("nursery")
    y = np.array(["priority" if v in ("recommend", "very_recom") else v for v in ds.y], dtype=object)
    d = ds.schema.to_dict()
    d["label"]["values"] = ["not_recom", "priority", "spec_prior"]
    schema = Schema.from_dict(d)
    enc = schema.encode(ds.X, y)
    return schema, enc.X, enc.y


def _data(name):
    if name == "skewed":
        ds = skewed(6000, seed=11)
        enc = ds.schema.encode(ds.X, ds.y)
        return ds.schema, enc.X, enc.y
    if name == "nursery":
        return _merged_nursery()
    ds = load(name)
    enc = ds.schema.encode(ds.X, ds.y)
    return ds.schema, enc.X, enc.y


def _prior_identifiable(f: PrivateForest, y_train: np.ndarray) -> bool:
    """Whether the released prior (:func:`streamdp.estimation.forest_prior`) separates the top two
    classes (z >= 3): below that no post-processing of the counts can find the majority class.

    Each tree (random or stump) sees a share ``q`` of the records (1 split, ``1 / n_trees`` disjoint) and
    estimates ``q (n0 - n1)`` with variance ``2 L_t s^2`` (noise) ``+ q (1 - q) (n0 + n1)`` (its own sample);
    the inverse-variance mean of the trees has variance ``1 / sum_t 1 / v_t``."""
    n = np.sort(np.bincount(y_train, minlength=f.schema.n_classes))[::-1].astype(float)
    q = f.record_share
    v = 2 * f.structure.n_leaves * f.cell_variance + q * (1 - q) * (n[0] + n[1])
    return q * (n[0] - n[1]) >= 3 * math.sqrt(1.0 / np.sum(1.0 / v))


def _floor_check(
    name, heights, eps_list, budgets=("split", "disjoint"), votes=("proba", "majority"), n_trees=10, min_checked=1
):
    schema, X, y = _data(name)
    # keep the run time modest: heights whose trees could exceed 20,000 leaves are left out (Votes above 9)
    heights = [h for h in heights if max_possible_leaves(schema, h) <= 20_000]
    rng = np.random.default_rng(0)
    perm = rng.permutation(len(y))
    te, tr = perm[: len(y) // 3], perm[len(y) // 3 :]
    majority = np.bincount(y[te]).max() / len(te)
    failures, checked, skipped = [], 0, 0
    for h in heights:
        for eps in eps_list:
            for budget in budgets:
                # one fixed noise draw per setting (noise_seed, a formula fixed before any run): the check is
                # deterministic; how often other draws fall below is measured in accuracy_height.md
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", NotPrivateWarning)
                    f = PrivateForest.create(
                        schema,
                        n_trees=n_trees,
                        height=h,
                        epsilon=eps,
                        budget=budget,
                        seed=h,
                        noise_seed=1000 * h + round(10 * eps) + (budget == "disjoint"),
                    )
                f.merge(f.noisy_delta_encoded(X[tr], y[tr]))
                if not _prior_identifiable(f, y[tr]):
                    skipped += 1
                    continue
                leaves = f.structure.apply(X[te], schema.is_categorical)
                for vote in votes:
                    f.vote = vote
                    acc = (f.proba_from_leaves(leaves).argmax(axis=1) == y[te]).mean()
                    checked += 1
                    if acc < majority - 0.01:
                        failures.append((h, eps, budget, vote, round(float(acc), 3)))
    assert checked >= min_checked, f"{name}: only {checked} identifiable settings checked ({skipped} skipped)"
    assert not failures, f"{name}: below the majority share {majority:.3f} - 0.01 at {failures} ({checked} checked)"
    return checked, skipped


def test_floor_at_the_prior_skewed_fast():
    checked, _ = _floor_check("skewed", heights=(2, 4, 6), eps_list=(0.5, 2.0), budgets=("split",))
    assert checked >= 8


def test_prior_stump_makes_the_prior_identifiable_where_leaf_sums_are_not():
    """Votes at height 9, epsilon 1: the leaf-sum prior cannot tell the majority class, the stump's can."""
    schema, X, y = _data("congressional-voting")
    with_stump = PrivateForest.create(schema, n_trees=10, height=9, epsilon=1.0, seed=9)
    without = PrivateForest.create(schema, n_trees=10, height=9, epsilon=1.0, seed=9, prior_trees=0)
    assert _prior_identifiable(with_stump, y) and not _prior_identifiable(without, y)
    majority = np.bincount(y).argmax()
    fits = (with_stump.with_counts(with_stump.noisy_delta_encoded(X, y), version=1, n_releases=1) for _ in range(20))
    hits = sum(int(f.estimation_nodes().prior.argmax() == majority) for f in fits)
    # measured miss rate 0.33% per fit (300 fits): P(3 or more misses in 20) < C(20, 3) * 0.0033**3 < 1e-4
    assert hits >= 18


# Settings where the released prior can tell the majority class (the others are skipped and counted):
# skewed 96 of 96 (both votes), Nursery (3 classes, top two 0.355 / 0.333) 48, Votes 48 (disjoint never:
# ~26 records per tree), Tic-Tac-Toe 80; the minimums below keep the property from passing vacuously.
FLOOR_MIN_CHECKED = {"skewed": 90, "nursery": 40, "congressional-voting": 40, "tic-tac-toe": 60}


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [
        "skewed",
        "nursery",
        "congressional-voting",
        pytest.param(
            "tic-tac-toe",
            marks=pytest.mark.xfail(
                reason="639 training records: the prior is identifiable (prior stump) and right, but 4 of 80 checked settings "
                "(split budget, probability vote: height 3 and 4 at epsilon 0.5, 5 at 1, 6 at 2) score 0.639, 0.636, "
                "0.633 and 0.627 against 0.665 - 0.01 in this one draw each: Tic-Tac-Toe's leaves sit near one half, "
                "where the posterior's share errors on a few records per pooled node flip the vote. The default "
                "pruned fit holds the floor (estimation_posterior.md); the gated rule failed 3 of these settings "
                "(0.614, 0.643, 0.652), the posterior mean is above it on average over drawn heights 2-6 "
                "(docs/decisions/016-estimation-posterior-mean.md)",
                strict=True,
            ),
        ),
    ],
)
def test_floor_at_the_prior_every_height(name):
    schema = _data(name)[0]
    _floor_check(
        name,
        heights=range(1, schema.n_attributes + 1),
        eps_list=(0.1, 0.5, 1.0, 2.0),
        min_checked=FLOOR_MIN_CHECKED[name],
    )


# -- the learners -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_hanisch_and_dpea_stay_above_the_prior_on_skewed_data():
    ds = skewed(6000, seed=7)
    perm = np.random.default_rng(1).permutation(6000)
    te, tr = perm[:2000], perm[2000:]
    majority = float(np.mean(ds.y[te] == "c0"))
    # Seeded noise (a fixed draw per setting): with fresh noise one DPEA draw in 60 scored below majority - 0.01
    # (measured: mean 0.765, worst 0.698 against 0.7105; Hanisch 0 of 60, worst 0.7095), so an unseeded check of
    # 3 draws failed about once in 20 runs (it did in a CI run).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        for make in (
            lambda s: HanischForest(ds.schema, epsilon=1.0, max_depth=5, n_trees=10, noise_seed=s),
            lambda s: DPEA(ds.schema, max_depth=5, embed_depth=2, epsilon=1.0, noise_seed=s),
        ):
            scores = [make(s).fit(ds.X[tr], ds.y[tr]).score(ds.X[te], ds.y[te]) for s in range(3)]
            assert min(scores) >= majority - 0.01, scores


def test_learners_leaf_estimator_is_the_rule_before():
    ds = skewed(1500, seed=8)
    m = HanischForest(ds.schema, epsilon=1.0, max_depth=2, n_trees=3, seed=1, vote="majority").fit(ds.X, ds.y)
    m.estimator = "leaf"
    before = m.predict_proba(ds.X[:20])
    Xe = ds.schema.encode(ds.X[:20]).X
    votes = sum(np.eye(4)[t.leaf_distributions()[t.apply(Xe)].argmax(axis=1)] for t in m.trees_)
    assert np.allclose(before, votes / 3)
    m.estimator = "shrink"
    assert m.predict_proba(ds.X[:20]).shape == (20, 4)
    assert m.cell_variance() == pytest.approx(estimation.cell_variance("geometric", 1.0 / 4))  # 3 trees, 1 stump


# -- release_prior and silent trees (the river classifier's prior phase) ------------------------------------------


def test_release_prior_weighs_each_release_by_its_size_and_noise():
    # no noise: every record alike, the shares of the plain sum
    totals = np.array([[30.0, 10.0], [100.0, 300.0]])
    np.testing.assert_allclose(
        estimation.release_prior(totals, np.array([40, 400]), np.zeros(2)), estimation.prior_from(totals.sum(axis=0))
    )
    # equal releases: the plain sum whatever the noise
    totals = np.array([[60.0, 40.0], [70.0, 30.0], [50.0, 50.0]])
    np.testing.assert_allclose(
        estimation.release_prior(totals, np.full(3, 100), np.full(3, 900.0)), estimation.prior_from(totals.sum(axis=0))
    )
    # a precise release of 100 records against a noisy one of 100: the precise one decides
    totals = np.array([[60.0, 40.0], [5.0, 65.0]])
    p = estimation.release_prior(totals, np.array([100, 100]), np.array([1.84, 222.8]))
    assert estimation.prior_from(totals.sum(axis=0))[0] < 0.5 < 0.55 < p[0] < 0.6  # 0.6 shrunk by the 2nd's weight


def test_release_prior_is_more_accurate_than_the_sum_on_the_river_schedule():
    """The river schedule's noise: a prior phase of 100 records at noise variance 1.84 (epsilon 1, one stump),
    then 100 and 200 records at 11^2 times that. Over 4,000 simulated draws of a 55/45 stream the weighted
    prior names the majority more often than the plain sum (about 0.905 against 0.873: paired, the mean
    difference 0.03 has sd about 0.005, so the comparison fails with probability below 1e-9; the draws are seeded)."""
    rng = np.random.default_rng(7)
    sizes = np.array([100, 100, 200])
    var = np.array([1.84, 1.84 * 121, 1.84 * 121])
    hits_sum = hits_rel = 0
    for _ in range(4000):
        true = np.stack([rng.multinomial(n, [0.55, 0.45]) for n in sizes]).astype(float)
        noisy = true + rng.normal(0.0, np.sqrt(var)[:, None], true.shape)
        hits_sum += estimation.prior_from(noisy.sum(axis=0))[0] > 0.5
        hits_rel += estimation.release_prior(noisy, sizes, var)[0] > 0.5
    assert hits_rel > hits_sum


def test_forest_prior_ignores_trees_that_released_nothing():
    counts = np.zeros((3, 4, 2))
    counts[2, 0] = [70.0, 30.0]  # the stump released; the random trees did not (no count, no noise)
    n_leaves = np.array([4, 4, 1])
    np.testing.assert_allclose(estimation.forest_prior(counts, n_leaves, np.array([0.0, 0.0, 1.84])), [0.7, 0.3])
    # nothing released anywhere: uniform, as before
    np.testing.assert_allclose(estimation.forest_prior(np.zeros((3, 4, 2)), n_leaves, 0.0), [0.5, 0.5])
