"""SuLQID3 and DiffPID3: budget, ledger, stopping rule, sklearn protocol, blobs, accuracy."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from streamdp import Schema
from streamdp.blob import BlobError
from streamdp.learners import DiffPID3, SuLQID3, load_model
from streamdp.learners.id3 import sulq_score
from streamdp.learners.private_data import PrivateDataset
from streamdp.privacy.ledger import BudgetExceeded, InMemoryLedger
from streamdp.privacy.mechanisms import NotPrivateWarning
from streamdp.records.datasets import load
from streamdp.validation import NotFittedError

VOTES = load("congressional-voting")
LEARNERS = [
    lambda **kw: SuLQID3(VOTES.schema, **kw),
    *[
        lambda s=s, **kw: DiffPID3(VOTES.schema, scorer=s, n_bound=1000, **kw)
        for s in ("infogain", "gini", "max", "gainratio")
    ],
]
IDS = ["sulq", "infogain", "gini", "max", "gainratio"]


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        yield


@pytest.mark.parametrize("make", LEARNERS, ids=IDS)
def test_budget_is_exact_on_a_full_depth_tree_and_never_exceeded(make):
    for eps, depth in ((50.0, 2), (1.0, 4), (0.05, 3)):
        pds = PrivateDataset.from_records(VOTES.schema, VOTES.X, VOTES.y, epsilon=eps)
        m = make(epsilon=eps, max_depth=depth).fit(pds)
        assert pds.spent <= eps * (1 + 1e-9)
        if m.trees_[0].max_depth == depth:  # some branch reached max depth: it spent B exactly
            assert pds.spent == pytest.approx(eps)
    # at a large epsilon and depth 2 the tree does reach full depth
    assert m is not None
    pds = PrivateDataset.from_records(VOTES.schema, VOTES.X, VOTES.y, epsilon=50.0)
    assert make(epsilon=50.0, max_depth=2).fit(pds).trees_[0].max_depth == 2 and pds.spent == pytest.approx(50.0)


@pytest.mark.parametrize("make", LEARNERS, ids=IDS)
def test_ledger_charged_once_and_refusal_before_reading(make):
    led = InMemoryLedger()
    led.set_budget("votes", 1.5)
    make(epsilon=1.0, max_depth=3).fit(VOTES.X, VOTES.y, ledger=led, source="votes")
    assert [s.epsilon for s in led.spends("votes")] == [1.0]

    class Untouchable(list):
        def __iter__(self):
            raise AssertionError("records read before the ledger refused")

        __len__ = __getitem__ = __iter__

    with pytest.raises(BudgetExceeded):
        make(epsilon=1.0, max_depth=3).fit(Untouchable(), list(VOTES.y), ledger=led, source="votes")
    assert len(led.spends("votes")) == 1


@pytest.mark.parametrize("make", LEARNERS, ids=IDS)
def test_every_branch_spends_its_budget_a_stopped_one_on_its_leaf(make):
    """top_up (the default): a branch that stops at depth k < d releases its leaf's class counts with the
    2 (d - k) levels it did not use as well, so every root-to-leaf path spends exactly B (sequential composition
    along it; paths are disjoint); top_up=False keeps Friedman & Schuster's budget (leaves at one query's eps)."""
    from streamdp.estimation import cell_variance

    for eps, depth in ((1.0, 6), (0.3, 10), (20.0, 3)):
        pds = PrivateDataset.from_records(VOTES.schema, VOTES.X, VOTES.y, epsilon=eps)
        m = make(epsilon=eps, max_depth=depth).fit(pds)
        assert pds.spent == pytest.approx(eps, rel=1e-9)  # (the data layer's composition: at most eps)
        if not isinstance(m, SuLQID3):  # (SuLQ also charges every candidate attribute's partitions: other paths)
            paths = {path for path, _, _ in pds.log}
            leaves = [p for p in paths if not any(len(q) > len(p) and q[: len(p)] == p for q in paths)]
            for leaf in leaves:
                assert sum(e for path, _, e in pds.log if leaf[: len(path)] == path) == pytest.approx(eps, rel=1e-9)
        t = m.trees_[0]
        at = t.reachable_leaves()
        e = m.epsilon_per_query()
        expected = [cell_variance("geometric", e * (1 + 2 * (depth - d))) for d in t.depth[at]]
        assert np.allclose(t.own_var[at], expected) and np.all(t.own_var[~at & (t.feature >= 0)] == 0)
        plain = make(epsilon=eps, max_depth=depth, top_up=False).fit(VOTES.X, VOTES.y).trees_[0]
        assert np.allclose(plain.own_var[plain.reachable_leaves()], cell_variance("geometric", e))


def test_stopping_rule_makes_a_leaf_when_counts_would_be_noise():
    # eps per query = B / (2 (d + 1)); at B = 0.01, d = 5: sqrt(2)/eps = 1697 > 435 / (3 * 2)
    m = DiffPID3(VOTES.schema, epsilon=0.01, max_depth=5, scorer="max").fit(VOTES.X, VOTES.y)
    assert m.trees_[0].n_nodes == 1
    assert m.epsilon_per_query() == pytest.approx(0.01 / 12)
    # at depth 0 the root is a leaf too, whatever the budget
    assert DiffPID3(VOTES.schema, epsilon=100.0, max_depth=0, scorer="max").fit(VOTES.X, VOTES.y).trees_[0].n_nodes == 1


def test_sulq_score_guards_non_positive_noisy_counts():
    n_j = np.array([10.0, -2.0])
    n_jc = np.array([[8.0, 3.0], [1.0, 1.0]])  # 8 + 3 > 10 (capped), second value has N_j <= 0 (ignored)
    assert sulq_score(n_j, n_jc) == pytest.approx(8 * math.log(0.8) + 3 * math.log(0.3))
    assert sulq_score(np.array([5.0]), np.array([[-1.0, 5.0]])) == pytest.approx(0.0)


@pytest.mark.slow
def test_accuracy_well_above_majority_at_large_epsilon():
    for name, floor in (("mushroom", 0.95), ("nursery", 0.8)):
        ds = load(name)
        for m in (
            SuLQID3(ds.schema, epsilon=20.0, max_depth=4),
            DiffPID3(ds.schema, epsilon=5.0, max_depth=4, scorer="max"),
        ):
            m.fit(ds.X, ds.y)
            majority = max(np.mean(ds.y == c) for c in ds.schema.classes)
            assert m.score(ds.X, ds.y) > max(floor, majority + 0.1), (name, m)


def test_a_large_budget_picks_the_best_attribute():
    """Label = attribute 3; at a large epsilon every scorer splits the root on it."""
    rng = np.random.default_rng(1)
    s = Schema.from_dict(
        {
            "attributes": [{"name": f"a{i}", "type": "categorical", "values": [0, 1]} for i in range(6)],
            "label": {"name": "y", "values": [0, 1]},
        }
    )
    X = rng.integers(0, 2, size=(2000, 6))
    y = X[:, 3]
    for m in (
        SuLQID3(s, epsilon=200.0, max_depth=1),
        *[
            DiffPID3(s, epsilon=200.0, max_depth=1, scorer=sc, n_bound=2000)
            for sc in ("infogain", "gini", "max", "gainratio")
        ],
    ):
        assert m.fit(X, y).trees_[0].feature[0] == 3, m


def test_sulq_breaks_ties_uniformly_not_by_attribute_order():
    """Four identical attributes score the same: each must win about a quarter of the time.

    Noise is negligible at this epsilon (P(any nonzero draw) < 1e-100). Binomial(400, 1/4):
    mean 100, sd 8.7; the band 55..145 fails with probability < 1e-6 per attribute. Taking the
    first maximum (the old behaviour) puts all 400 on attribute 0.
    """
    s = Schema.from_dict(
        {
            "attributes": [{"name": f"a{i}", "type": "categorical", "values": [0, 1]} for i in range(4)],
            "label": {"name": "y", "values": [0, 1]},
        }
    )
    a = np.random.default_rng(3).integers(0, 2, 300)
    X, y = np.column_stack([a] * 4), np.where(np.arange(300) % 3 == 0, 1 - a, a)
    wins = np.bincount(
        [SuLQID3(s, epsilon=1e4, max_depth=1).fit(X, y).trees_[0].feature[0] for _ in range(400)], minlength=4
    )
    assert wins.min() >= 55 and wins.max() <= 145, wins


def test_numeric_attributes_are_ignored():
    s = Schema.from_dict(
        {
            "attributes": [
                {"name": "a", "type": "categorical", "values": [0, 1]},
                {"name": "x", "type": "numeric", "min": 0, "max": 1},
            ],
            "label": {"name": "y", "values": [0, 1]},
        }
    )
    rng = np.random.default_rng(0)
    a = rng.integers(0, 2, 500)
    m = DiffPID3(s, epsilon=50.0, max_depth=3, scorer="gini").fit(np.column_stack([a, rng.random(500)]), a)
    assert set(m.trees_[0].feature.tolist()) <= {-1, 0}


def test_noise_seed_reproduces_and_is_marked_not_private():
    a = DiffPID3(VOTES.schema, epsilon=1.0, max_depth=3, scorer="gini", noise_seed=5).fit(VOTES.X, VOTES.y)
    b = DiffPID3(VOTES.schema, epsilon=1.0, max_depth=3, scorer="gini", noise_seed=5).fit(VOTES.X, VOTES.y)
    assert np.array_equal(a.trees_[0].counts, b.trees_[0].counts) and not a.private_
    c = DiffPID3(VOTES.schema, epsilon=1.0, max_depth=3, scorer="gini").fit(VOTES.X, VOTES.y)
    assert c.private_


def test_sklearn_protocol():
    from sklearn.base import clone
    from sklearn.model_selection import cross_val_score

    m = DiffPID3(VOTES.schema, epsilon=5.0, max_depth=3, scorer="max")
    assert m.get_params()["scorer"] == "max"
    assert m.set_params(max_depth=4) is m and m.max_depth == 4
    with pytest.raises(ValueError, match="no parameter"):
        m.set_params(depth=3)
    c = clone(m)
    assert c.get_params() == m.get_params() and c is not m
    scores = cross_val_score(m, VOTES.X, VOTES.y, cv=3)
    assert scores.shape == (3,) and scores.mean() > 0.7
    assert cross_val_score(SuLQID3(VOTES.schema, epsilon=5.0, max_depth=3), VOTES.X, VOTES.y, cv=3).shape == (3,)


@pytest.mark.parametrize("make", LEARNERS, ids=IDS)
def test_blob_round_trip(make):
    m = make(epsilon=2.0, max_depth=3).fit(VOTES.X, VOTES.y)
    b = m.to_bytes()
    for back in (type(m).from_bytes(b), load_model(b)):
        assert type(back) is type(m)
        assert np.array_equal(back.predict_proba(VOTES.X), m.predict_proba(VOTES.X))
        assert back.get_params() == {**m.get_params(), "noise_seed": None}
    with pytest.raises(BlobError):
        type(m).from_bytes(b[:-7])
    with pytest.raises(BlobError):
        load_model(b"\x93garbage")


def test_bad_parameters_are_named():
    with pytest.raises(ValueError, match="epsilon"):
        DiffPID3(VOTES.schema, epsilon=0).fit(VOTES.X, VOTES.y)
    with pytest.raises(ValueError, match="max_depth"):
        SuLQID3(VOTES.schema, max_depth=-1).fit(VOTES.X, VOTES.y)
    with pytest.raises(ValueError, match="unknown scorer"):
        DiffPID3(VOTES.schema, scorer="entropy").fit(VOTES.X, VOTES.y)
    with pytest.raises(ValueError, match="n_bound"):
        DiffPID3(VOTES.schema, scorer="max", n_bound=0).fit(VOTES.X, VOTES.y)
    with pytest.raises(NotFittedError, match="not fitted"):
        SuLQID3(VOTES.schema).predict(VOTES.X)


def test_inner_counts_are_sums_of_clipped_leaves_and_empty_leaves_fall_back():
    from streamdp.learners.tree import TreeBuilder

    s = Schema.from_dict(
        {
            "attributes": [
                {"name": "a", "type": "categorical", "values": [0, 1, 2]},
                {"name": "b", "type": "categorical", "values": [0, 1]},
            ],
            "label": {"name": "y", "values": [0, 1]},
        }
    )
    b = TreeBuilder(s)
    kids = b.split(b.add(depth=0), 0)
    grand = b.split(kids[2], 1)
    for node, c in zip([kids[0], kids[1], *grand], [[-3, -1], [5, 2], [0, 4], [1, -2]]):
        b.set_counts(node, c)
    t = b.build()
    t.fill_inner_counts()
    assert t.counts[kids[2]].tolist() == [1, 4] and t.counts[0].tolist() == [6, 6]
    assert t.counts[kids[0]].tolist() == [-3, -1]  # leaves keep what was released
    p = t.predict_proba(np.array([[0.0, 0.0], [2.0, 1.0]]))
    assert p.tolist() == [[0.5, 0.5], [1.0, 0.0]]  # no positive mass: the root's 6/6


# -- issue 12 item 2: n_bound is enforced, never trusted -----------------------------------------------
def _split_audit_data():
    """Two binary attributes, binary class, 1,559 records, and a neighbour with one more record
    (A=0, B=1, class 1). A's value 0 is 1,500 records of class 0, so the new record costs A's
    information gain about log2(1500) + 1.44 bits and B's nothing: trusting n_bound=1 (sensitivity
    2.44) moves the split choice's probabilities from 0.96/0.04 to 0.66/0.34 (a loss of 2.09 at a
    declared epsilon of 1)."""
    from streamdp import Schema

    schema = Schema.from_dict(
        {
            "attributes": [
                {"name": "a", "type": "categorical", "values": [0, 1]},
                {"name": "b", "type": "categorical", "values": [0, 1]},
            ],
            "label": {"name": "y", "values": [0, 1]},
        }
    )
    counts = {(0, 0, 0): 1500, (1, 1, 1): 50, (1, 0, 1): 4, (1, 0, 0): 5}  # (a, b, y): records
    rows = [r for r, n in counts.items() for _ in range(n)]
    X = np.array([r[:2] for r in rows], dtype=np.float64)
    y = np.array([r[2] for r in rows], dtype=np.int64)
    return schema, (X, y), (np.vstack([X, [[0, 1]]]), np.append(y, 1))


def _release_rate(schema, data, n_bound, trials):
    """How often one DiffPID3 split release (max_depth 1: its split query gets epsilon 1) picks attribute A."""
    X, y = data
    hits = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # noise_seed: reproducible noise for the audit
        for i in range(trials):
            m = DiffPID3(schema, epsilon=4.0, max_depth=1, scorer="infogain", n_bound=n_bound, noise_seed=i)
            hits += int(m.fit(X, y).trees_[0].feature[0] == 0)
    return hits


@pytest.mark.slow
def test_user_given_n_bound_below_the_record_count_keeps_the_declared_epsilon():
    """Audit: n_bound=1 over 1,559 records. Trusting the bound (the old rule) loses 2.09 per split query
    at a declared epsilon of 1; the data layer now enforces the bound, and no lower bound on the privacy
    loss exceeds 1 (Clopper-Pearson, 1e-6 failure probability per side)."""
    from scipy.stats import beta as beta_dist

    schema, d0, d1 = _split_audit_data()
    n = 3000
    k0, k1 = _release_rate(schema, d0, 1, n), _release_rate(schema, d1, 1, n)
    alpha = 1e-6

    def lower(k):
        return beta_dist.ppf(alpha, k, n - k + 1) if k > 0 else 0.0

    def upper(k):
        return beta_dist.ppf(1 - alpha, k + 1, n - k) if k < n else 1.0

    bounds = []
    for a, b in ((k0, k1), (k1, k0), (n - k0, n - k1), (n - k1, n - k0)):
        lo, hi = lower(a), upper(b)
        bounds.append(math.log(lo / hi) if lo > 0 else 0.0)
    assert max(bounds) <= 1.0, f"empirical epsilon lower bound {max(bounds):.3f} above the declared 1"

    # the same test has power: trusting n_bound=1 (the sensitivity at 1, full data) is caught
    from streamdp.learners.private_data import PrivateDataset
    from streamdp.learners.scorers import get_scorer
    from streamdp.privacy.mechanisms import exponential_mechanism_probabilities

    q = get_scorer("infogain", schema)
    p = [
        exponential_mechanism_probabilities(
            [q(PrivateDataset(schema, X, y, epsilon=1.0)._table(j).astype(float)) for j in (0, 1)],
            1.0,
            q.sensitivity(1),
        )
        for X, y in (d0, d1)
    ]
    assert max(abs(math.log(p[0][i] / p[1][i])) for i in (0, 1)) > 2.0  # what the old rule released
