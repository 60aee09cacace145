"""HanischForest: budget, data-independent structure, both votes, prior fallback, sklearn, blobs."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from streamdp import Schema, estimation
from streamdp.blob import BlobError
from streamdp.estimation import cell_variance
from streamdp.learners import HanischForest, load_model
from streamdp.learners.private_data import PrivateDataset
from streamdp.privacy.ledger import BudgetExceeded, InMemoryLedger
from streamdp.privacy.mechanisms import NotPrivateWarning
from streamdp.records.datasets import load

VOTES = load("congressional-voting")


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        yield


def test_spends_exactly_epsilon_split_over_trees():
    pds = PrivateDataset.from_records(VOTES.schema, VOTES.X, VOTES.y, epsilon=0.7)
    m = HanischForest(VOTES.schema, epsilon=0.7, max_depth=3, n_trees=6).fit(pds)
    assert pds.spent == pytest.approx(0.7)
    tree_charges = [(what, e) for path, what, e in pds.log]
    assert [round(e, 12) for _, e in tree_charges] == [0.1] * 7  # one leaf histogram per tree, and the stump's
    assert [w for w, _ in tree_charges] == [f"noisy_leaf_class_counts({t.n_leaves} leaves)" for t in m.trees_] + [
        "noisy_class_counts"
    ]
    assert m.stumps_.shape == (1, 2) and m.cell_variance() == pytest.approx(cell_variance("geometric", 0.1))
    plain = HanischForest(VOTES.schema, epsilon=0.7, max_depth=3, n_trees=7, prior_trees=0).fit(VOTES.X, VOTES.y)
    assert plain.stumps_.shape == (0, 2) and plain.cell_variance() == pytest.approx(cell_variance("geometric", 0.1))


def test_ledger_charged_once_and_refusal_before_reading():
    led = InMemoryLedger()
    led.set_budget("votes", 1.0)
    HanischForest(VOTES.schema, epsilon=0.6, max_depth=2).fit(VOTES.X, VOTES.y, ledger=led, source="votes")
    assert [s.epsilon for s in led.spends("votes")] == [0.6]

    class Untouchable(list):
        def __iter__(self):
            raise AssertionError("records read before the ledger refused")

        __len__ = __getitem__ = __iter__

    with pytest.raises(BudgetExceeded):
        HanischForest(VOTES.schema, epsilon=0.6).fit(Untouchable(), list(VOTES.y), ledger=led, source="votes")


def test_structure_depends_on_the_seed_only_never_on_data():
    rng = np.random.default_rng(0)
    other_y = rng.permutation(VOTES.y)
    a = HanischForest(VOTES.schema, epsilon=1.0, max_depth=3, n_trees=4, seed=11).fit(VOTES.X, VOTES.y)
    b = HanischForest(VOTES.schema, epsilon=1.0, max_depth=3, n_trees=4, seed=11).fit(VOTES.X[:50], other_y[:50])
    for ta, tb in zip(a.trees_, b.trees_):
        assert np.array_equal(ta.feature, tb.feature)
    c = HanischForest(VOTES.schema, epsilon=1.0, max_depth=3, n_trees=4).fit(VOTES.X, VOTES.y)
    assert any(not np.array_equal(ta.feature, tc.feature) for ta, tc in zip(a.trees_, c.trees_))
    # every path splits max_depth distinct attributes (16 attributes are available)
    t = a.trees_[0]
    assert t.max_depth == 3 and t.n_leaves == 27


def test_majority_vote_shares_and_prior_fallback():
    s = Schema.from_dict(
        {
            "attributes": [{"name": "a", "type": "categorical", "values": [0, 1, 2]}],
            "label": {"name": "y", "values": ["n", "p"]},
        }
    )
    # value 2 never occurs: its leaf has no records; the prior (mostly "p") decides there
    X = [[0]] * 300 + [[1]] * 1200
    y = ["n"] * 300 + ["p"] * 1200
    m = HanischForest(s, epsilon=30.0, max_depth=1, n_trees=5, noise_seed=3, vote="majority").fit(X, y)
    proba = m.predict_proba([[0], [1], [2]])
    assert np.allclose(proba.sum(axis=1), 1) and set(np.round(proba.ravel() * 5, 9)) <= set(range(6))
    assert list(m.predict([[0], [1], [2]])) == ["n", "p", "p"]


def test_multiclass_and_accuracy_at_large_epsilon():
    # random structures vary: over 40 fits the minimum was 0.577 (nursery, majority 0.333) and 0.893 (mushroom)
    for name, depth, floor in (("nursery", 3, 0.45), ("mushroom", 3, 0.8)):
        ds = load(name)
        m = HanischForest(ds.schema, epsilon=20.0, max_depth=depth, n_trees=10).fit(ds.X, ds.y)
        majority = max(np.mean(ds.y == c) for c in ds.schema.classes)
        assert m.score(ds.X, ds.y) > max(floor, majority + 0.1), name
    m = HanischForest(VOTES.schema, epsilon=10.0, max_depth=3, n_trees=10).fit(VOTES.X, VOTES.y)
    assert m.score(VOTES.X, VOTES.y) > 0.8


def test_noise_seed_reproduces():
    a = HanischForest(VOTES.schema, max_depth=2, n_trees=3, seed=1, noise_seed=2).fit(VOTES.X, VOTES.y)
    b = HanischForest(VOTES.schema, max_depth=2, n_trees=3, seed=1, noise_seed=2).fit(VOTES.X, VOTES.y)
    assert all(np.array_equal(x.counts, y.counts) for x, y in zip(a.trees_, b.trees_)) and not a.private_


def test_sklearn_protocol():
    from sklearn.base import clone
    from sklearn.model_selection import cross_val_score

    m = HanischForest(VOTES.schema, epsilon=5.0, max_depth=3, n_trees=5)
    assert clone(m).get_params() == m.get_params()
    assert cross_val_score(m, VOTES.X, VOTES.y, cv=3).mean() > 0.7


def test_blob_round_trip():
    m = HanischForest(VOTES.schema, epsilon=2.0, max_depth=3, n_trees=4).fit(VOTES.X, VOTES.y)
    b = m.to_bytes()
    back = load_model(b)
    assert type(back) is HanischForest
    assert np.array_equal(back.predict_proba(VOTES.X), m.predict_proba(VOTES.X))
    with pytest.raises(BlobError):
        HanischForest.from_bytes(b[: len(b) // 2])
    assert np.array_equal(back.stumps_, m.stumps_) and back.stumps_.shape == (1, 2)
    import msgpack

    doc = msgpack.unpackb(b, raw=False)
    old = {**doc, "params": {k: v for k, v in doc["params"].items() if k != "prior_trees"}}
    del old["stumps"]  # a blob of a fit before prior stumps existed: loads with none
    before = HanischForest.from_bytes(msgpack.packb(old, use_bin_type=True))
    assert before.prior_trees == 0 and before.stumps_.shape == (0, 2)
    for bad in ([], [1.0, 2.0], [[[1.0, 2.0]]], [[1.0, "x"]], [[True, 2.0]], [[1.0, float("inf")]], [[1.0]]):
        with pytest.raises(BlobError, match="prior stumps"):  # (a hostile blob's shapes were reshaped to fit)
            HanischForest.from_bytes(msgpack.packb({**doc, "stumps": bad}, use_bin_type=True))
    for bad in ("x", None, 1.7, -1):
        with pytest.raises(BlobError, match="prior_trees"):
            HanischForest.from_bytes(
                msgpack.packb({**doc, "params": {**doc["params"], "prior_trees": bad}}, use_bin_type=True)
            )
    # a blob of a fit before the vote was a parameter: Hanisch's majority vote, as it was fitted and evaluated
    assert back.vote == "proba"
    unvoted = {**doc, "params": {k: v for k, v in doc["params"].items() if k != "vote"}}
    assert HanischForest.from_bytes(msgpack.packb(unvoted, use_bin_type=True)).vote == "majority"
    with pytest.raises(ValueError, match="vote must be one of"):  # what could not be loaded is not written
        m.set_params(vote="x").to_bytes()
    with pytest.raises(ValueError, match="prior_trees is 2 but the fit released 1 prior stumps"):
        m.set_params(vote="proba", prior_trees=2).to_bytes()
    m.set_params(prior_trees=1)
    for bad in ("pooled", None, 1):
        with pytest.raises(BlobError, match="vote must be one of"):
            HanischForest.from_bytes(
                msgpack.packb({**doc, "params": {**doc["params"], "vote": bad}}, use_bin_type=True)
            )
    # a model pickled before prior stumps and the vote parameter existed still predicts, with none, by majority
    import pickle

    old_model = pickle.loads(pickle.dumps(m))
    del old_model.__dict__["prior_trees"], old_model.__dict__["stumps_"], old_model.__dict__["vote"]
    assert old_model.vote == "majority" and old_model.pooled_nodes() is None
    assert old_model.cell_variance() == pytest.approx(cell_variance("geometric", 0.5))  # 2 / 4 trees
    assert old_model.predict_proba(VOTES.X[:5]).shape == (5, 2)


def test_the_probability_vote_pools_the_trees_evidence():
    """vote="proba" (the default) sums the record's nodes over the trees depth by depth before the noise-aware
    rule (PrivateForest's probability vote); Hanisch's majority vote lets each tree's estimate alone decide, and a
    leaf of ten records under noise sd ~25 falls back to the prior in every tree. On Nursery at depth 3 and epsilon
    1 (benchmarks/results/hanisch_pooled.log: 0.896 +- 0.005 pooled, 0.749 +- 0.020 by majority, 10 hold-outs)
    the pooled vote wins on each of these fixed fits (seeded structures and noise: deterministic)."""
    ds = load("nursery")
    idx = np.random.default_rng(0).permutation(len(ds.y))
    tr, te = idx[:8640], idx[8640:]
    gains = []
    for seed in range(4):
        m = HanischForest(ds.schema, epsilon=1.0, max_depth=3, seed=seed, noise_seed=seed).fit(ds.X[tr], ds.y[tr])
        pooled = m.score(ds.X[te], ds.y[te])
        nodes = m.pooled_nodes()  # the same release read the other way: post-processing only
        m.set_params(vote="majority")
        assert m.pooled_nodes() is None
        gains.append(pooled - m.score(ds.X[te], ds.y[te]))
        leaves = np.stack([t.apply(m._encode(ds.X[te][:50])) for t in m.trees_], axis=1)
        m.set_params(vote="proba")
        assert np.array_equal(nodes.path_proba(leaves), m.predict_proba(ds.X[te][:50]))
    assert min(gains) > 0.03 and np.mean(gains) > 0.08, gains
    with pytest.raises(ValueError, match="vote must be one of"):
        HanischForest(ds.schema, vote="pooled").fit(ds.X[:10], ds.y[:10])


def test_the_prior_stump_measures_the_class_prior():
    """The class prior a swamped leaf falls back to: the roots and the stump by inverse variance, the stump's one
    cell of noise outweighing a depth-3 root's 27 (Votes); without a stump, the roots' sum as before."""
    m = HanischForest(VOTES.schema, epsilon=1.0, max_depth=3, n_trees=4).fit(VOTES.X, VOTES.y)
    m.stumps_ = np.array([[10_000.0, 0.0]])
    assert m.class_prior()[0] > 0.9
    m.stumps_ = np.array([[0.0, 10_000.0]])
    assert m.class_prior()[1] > 0.9
    released = [t.released_counts(m.cell_variance()) for t in m.trees_]
    m.stumps_ = np.empty((0, 2))
    assert np.allclose(m.class_prior(), estimation.prior_from(np.stack([y[0] for y, _ in released])))


def test_bad_parameters_are_named():
    with pytest.raises(ValueError, match="n_trees"):
        HanischForest(VOTES.schema, n_trees=0).fit(VOTES.X, VOTES.y)
    with pytest.raises(ValueError, match="max_leaves"):
        HanischForest(VOTES.schema, max_depth=16, max_leaves=1000).fit(VOTES.X, VOTES.y)
    with pytest.raises(ValueError, match="epsilon"):
        HanischForest(VOTES.schema, epsilon=-1).fit(VOTES.X, VOTES.y)
    numeric = Schema.from_dict(
        {"attributes": [{"name": "x", "type": "numeric", "min": 0, "max": 1}], "label": {"name": "y", "values": [0, 1]}}
    )
    with pytest.raises(ValueError, match="categorical"):
        HanischForest(numeric).fit([[0.5]], [1])


def test_fit_on_a_spent_private_dataset_is_refused_before_reading():
    pds = PrivateDataset.from_records(VOTES.schema, VOTES.X, VOTES.y, epsilon=1.0)
    pds.noisy_count(0.5)
    with pytest.raises(BudgetExceeded, match="0.5 left"):
        HanischForest(VOTES.schema, epsilon=0.6, max_depth=2).fit(pds)
    assert pds.spent == pytest.approx(0.5)  # nothing charged by the refused fit
    m = HanischForest(VOTES.schema, epsilon=0.5, max_depth=2).fit(pds)
    assert m.epsilon_spent_ == pytest.approx(0.5)  # the learner's own spend, not the dataset's total
