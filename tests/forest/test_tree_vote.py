"""The tree-mean vote (``vote="trees"``): the default of a forest created without a tree count, post-processing
of the released counts, kept by the blob, refused where the river paths would read it as another vote
(docs/decisions/026-tree-mean-vote.md)."""

import warnings

import numpy as np
import pytest

from streamdp import PrivateForest
from streamdp.estimation import ForestNodes, leaf_rule_proba
from streamdp.estimation.rule import MIN_WEIGHT, TREE_WEIGHT
from streamdp.records.datasets import load

DS = load("congressional-voting")


def fitted(**kw) -> PrivateForest:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return PrivateForest.create(DS.schema, epsilon=1.0, seed=3, noise_seed=5, **kw).fit(DS.X[:300], DS.y[:300])


def test_the_default_forest_votes_with_the_tree_mean_and_a_given_count_keeps_the_pooled_vote():
    assert PrivateForest.create(DS.schema).vote == "trees"
    assert PrivateForest.create(DS.schema, n_trees=10).vote == "proba"
    assert PrivateForest.create(DS.schema, vote="proba").vote == "proba"
    assert PrivateForest.create(DS.schema, n_trees=4, vote="trees").vote == "trees"
    with pytest.raises(ValueError, match="vote"):
        PrivateForest.create(DS.schema, vote="mean")


def test_the_tree_mean_is_each_trees_leaf_shrunk_toward_the_pooled_estimate_averaged():
    f = fitted()
    X = DS.schema.encode(DS.X[300:]).X
    leaves = f.structure.apply(X, f.schema.is_categorical)
    nodes = f.estimation_nodes()
    pooled = nodes.path_proba(leaves)
    want = np.zeros_like(pooled)
    T = f.n_trees
    for t in range(T):  # the rule written out: (y + a p) / (t + a), a = TREE_WEIGHT v / t + MIN_WEIGHT
        node = nodes.leaf_node[t, leaves[:, t]]
        y, v = nodes.y[node], nodes.var[node]
        tot = y.sum(axis=1)
        a = (TREE_WEIGHT * v / np.maximum(tot, 1.0) + MIN_WEIGHT)[:, None]
        q = np.clip((y + a * pooled) / (tot[:, None] + a), 0, None)
        s = q.sum(axis=1, keepdims=True)
        want += np.where((tot[:, None] > 0) & (s > 0), q / np.where(s > 0, s, 1), pooled)
    got = f.proba_from_leaves(leaves)
    np.testing.assert_allclose(got, want / T, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got.sum(axis=1), 1.0)
    assert (got >= 0).all()
    f.vote = "proba"
    np.testing.assert_array_equal(f.proba_from_leaves(leaves), pooled)


def test_the_vote_reads_the_released_counts_only():
    f = fitted()
    g = f.with_counts(f.counts.copy(), version=f.version, n_releases=f.n_releases, node_variance=f.node_variance)
    g.noise_variance = f.noise_variance
    assert g.vote == "trees"
    np.testing.assert_array_equal(g.predict_proba(DS.X[300:]), f.predict_proba(DS.X[300:]))


def test_a_noise_free_tree_mean_is_the_mean_of_the_trees_leaf_shares_shrunk_by_one_record():
    # no noise: a = MIN_WEIGHT, so each tree's share is (y + p) / (t + 1)
    parent, depth, var = np.array([-1, 0, 0]), np.array([0, 1, 1]), np.zeros(3)
    y = np.array([[30.0, 10.0], [29.0, 1.0], [1.0, 9.0]])
    nodes = ForestNodes.of_trees(
        [(y, var)] * 2, [parent] * 2, [depth] * 2, [np.array([1, 2])] * 2, np.array([0.75, 0.25])
    )
    p = np.array([[0.5, 0.5]])
    got = nodes.tree_mean(np.array([[1, 2]]), p)
    want = ((y[1] + p[0]) / 31.0 + (y[2] + p[0]) / 11.0) / 2
    np.testing.assert_allclose(got[0], want)


def test_the_leaf_estimator_averages_the_trees_clipped_leaf_distributions():
    f = fitted()
    f.estimator = "leaf"
    leaves = f.apply(DS.X[300:])[:, : f.n_trees]
    T, L, C = f.n_trees, f.structure.max_leaves, f.schema.n_classes
    cells = leaf_rule_proba(f.counts[:T]).reshape(T * L, C)[leaves + np.arange(T) * L]
    np.testing.assert_allclose(f.proba_from_leaves(leaves), cells.mean(axis=1))


def test_the_blob_keeps_the_vote_and_the_predictions():
    f = fitted()
    g = PrivateForest.from_bytes(f.to_bytes())
    assert g.vote == "trees"
    np.testing.assert_array_equal(g.predict_proba(DS.X[300:]), f.predict_proba(DS.X[300:]))


def test_the_river_paths_refuse_the_tree_mean_vote():
    from streamdp.river import PrivateForestClassifier
    from streamdp.river.forest_view import ForestView

    with pytest.raises(ValueError, match="vote"):
        PrivateForestClassifier(DS.schema, vote="trees")
    with pytest.raises(ValueError, match="vote"):
        ForestView(fitted())


def test_a_vote_set_after_create_is_checked_so_no_blob_fails_to_load():
    """The vote is read-and-set (post-processing), but only to a vote the forest and its blob know: an unknown
    one raised only when the blob was read back, and the forest silently voted by majority meanwhile."""
    f = PrivateForest.create(load("congressional-voting").schema, n_trees=2, height=2, seed=1)
    for v in ("majority", "trees", "proba"):
        f.vote = v
        assert PrivateForest.from_bytes(f.to_bytes()).vote == v
    with pytest.raises(ValueError, match="vote must be one of"):
        f.vote = "bogus"
    assert f.vote == "proba"


def test_the_river_classifier_refuses_the_tree_mean_vote_when_set_too():
    from streamdp.river import PrivateForestClassifier
    from streamdp.river.schemas import agrawal_schema

    m = PrivateForestClassifier(agrawal_schema(), epsilon=1.0)
    with pytest.raises(ValueError, match="library forest's"):
        m.vote = "trees"
    with pytest.raises(ValueError, match="vote must be one of"):
        m.vote = "bogus"
    m.vote = "majority"
    assert m.clone().vote == "majority"
