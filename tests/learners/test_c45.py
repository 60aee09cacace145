"""DiffPC4.5: budget accounting, the range mechanism, numeric splits, pruning with noisy counts, U_CF, sklearn, blobs.

Statistical tests state their failure probability (for a correct implementation).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from streamdp import Schema
from streamdp.learners.c45 import DiffPC45, add_errors, calibrate, upper_error_rate
from streamdp.learners.private_data import PrivateDataset
from streamdp.learners.scorers import MaxScorer
from streamdp.privacy.mechanisms import exponential_mechanism_probabilities

pytestmark = pytest.mark.filterwarnings("ignore::streamdp.privacy.NotPrivateWarning")


def mixed_schema(n_cat: int = 3, n_num: int = 2, C: int = 2) -> Schema:
    attrs = [{"name": f"c{i}", "type": "categorical", "values": [0, 1]} for i in range(n_cat)]
    attrs += [{"name": f"x{i}", "type": "numeric", "min": 0, "max": 100} for i in range(n_num)]
    return Schema.from_dict({"attributes": attrs, "label": {"name": "y", "values": list(range(C))}})


def split35(n: int, rng: np.random.Generator, n_cat: int = 3, n_num: int = 2):
    """Records whose class is x0 > 35 (x0 the first numeric attribute), other attributes noise."""
    cats = rng.integers(0, 2, size=(n, n_cat)).astype(float)
    nums = rng.uniform(0, 100, size=(n, n_num))
    X = np.hstack([cats, nums])
    y = (nums[:, 0] > 35).astype(int)
    return X, y


def reachable(tree) -> int:
    stack, seen = [0], 0
    while stack:
        i = stack.pop()
        seen += 1
        f = tree.feature[i]
        if f >= 0:
            k = 2 if np.isfinite(tree.threshold[i]) else int(np.sum(tree.parent == i))
            stack.extend(range(tree.child_start[i], tree.child_start[i] + k))
    return seen


# -- budget ----------------------------------------------------------------------------------------


def test_every_query_gets_B_over_2_plus_n_d_plus_2_and_a_full_branch_spends_B():
    schema = mixed_schema(n_cat=3, n_num=2)
    X, y = split35(3000, np.random.default_rng(1))
    B, d = 4.0, 3
    pds = PrivateDataset.from_records(schema, X, y, epsilon=B, noise_seed=3)
    clf = DiffPC45(schema, epsilon=B, max_depth=d, noise_seed=3).fit(pds)
    per = B / ((2 + 2) * d + 2)
    assert clf.epsilon_per_query() == pytest.approx(per)
    log = pds.log
    assert log and all(eps == pytest.approx(per) for _, _, eps in log)
    whats = {w.split("(")[0] for _, w, _ in log}
    assert whats == {"noisy_count", "exponential_threshold", "exponential", "noisy_class_counts"}
    # 3000 records at eps ~0.29 per query: some branch reaches depth 3 and spends everything.
    assert max(len(p) for p, _, _ in log) == d
    assert pds.spent == pytest.approx(B)
    assert clf.epsilon_spent_ == pytest.approx(B)


@pytest.mark.parametrize("B, d", [(0.3, 6), (1.0, 8), (4.0, 3)])
def test_every_branch_spends_its_budget_a_stopped_one_on_its_leaf(B, d):
    """Top_up: a branch that stops early (or skips a collapsed numeric attribute's query) gives its leaf's class
    counts what it has left, so every root-to-leaf path spends exactly B (paths are disjoint); top_up=False
    keeps the paper's split (leaves at one query's epsilon, a stopped path below B)."""
    schema = mixed_schema(n_cat=3, n_num=2)
    X, y = split35(2000, np.random.default_rng(4))
    for top_up in (True, False):
        pds = PrivateDataset.from_records(schema, X, y, epsilon=B, noise_seed=5)
        clf = DiffPC45(schema, epsilon=B, max_depth=d, noise_seed=5, top_up=top_up).fit(pds)
        paths = {path for path, _, _ in pds.log}
        leaves = [p for p in paths if not any(len(q) > len(p) and q[: len(p)] == p for q in paths)]
        sums = [sum(e for path, _, e in pds.log if leaf[: len(path)] == path) for leaf in leaves]
        assert max(sums) <= B * (1 + 1e-9)
        if top_up:
            assert sums == pytest.approx([B] * len(sums), rel=1e-9)
            t = clf.trees_[0]
            assert np.all(t.own_var[t.feature >= 0] == 0) and np.any(t.own_var > 0)
        else:
            assert min(sums) < B * 0.999 or all(len(p) == d for p in leaves)


@pytest.mark.parametrize("B", [0.01, 0.3, 2.0])
def test_never_overspends(B):
    schema = mixed_schema()
    X, y = split35(500, np.random.default_rng(2))
    pds = PrivateDataset.from_records(schema, X, y, epsilon=B)
    DiffPC45(schema, epsilon=B, max_depth=4).fit(pds)
    assert pds.spent <= B + 1e-9


def test_categorical_only_schema_is_diffpid3_budget():
    schema = mixed_schema(n_cat=4, n_num=0)
    assert DiffPC45(schema, epsilon=1.0, max_depth=4).epsilon_per_query() == pytest.approx(1.0 / 10)


# -- the range mechanism ---------------------------------------------------------------------------


@pytest.mark.slow
def test_threshold_distribution_is_exp_score_times_length():
    """Empirical range frequencies vs exp(eps q / 2S) * |R|: chi-square, failure probability 1e-6.

    Toy: x on [0, 100], records at 10 (class 0), 30 (class 0), 40 (class 1), 80 (class 1) -> ranges
    [0,10) [10,30) [30,40) [40,80) [80,100] with Max scores 2, 3, 4, 3, 2 (known by hand).
    """
    from scipy.stats import chisquare, kstest

    schema = mixed_schema(n_cat=0, n_num=1)
    X = np.array([[10.0], [30.0], [40.0], [80.0]])
    y = np.array([0, 0, 1, 1])
    n_draws, eps = 20000, 1.0
    pds = PrivateDataset.from_records(schema, X, y, epsilon=n_draws * eps, noise_seed=11)
    q = MaxScorer()
    draws = np.array([pds.exponential_threshold(0, q, sensitivity=1.0, epsilon=eps) for _ in range(n_draws)])
    edges = np.array([0, 10, 30, 40, 80, 100.0])
    scores = np.array([2, 3, 4, 3, 2.0])
    expected = exponential_mechanism_probabilities(scores, eps, 1.0, measure=np.diff(edges))
    # by hand: ∝ exp(q/2) * length
    hand = np.exp(scores / 2) * np.diff(edges)
    assert np.allclose(expected, hand / hand.sum())
    which = np.clip(np.searchsorted(edges, draws, side="right") - 1, 0, 4)
    observed = np.bincount(which, minlength=5)
    assert chisquare(observed, expected * n_draws).pvalue > 1e-6
    # uniform inside the chosen range (KS, failure probability 1e-6)
    inside = draws[which == 3]
    assert kstest((inside - 40) / 40, "uniform").pvalue > 1e-6


def test_numeric_split_at_35_found_at_high_epsilon():
    schema = mixed_schema(n_cat=3, n_num=2)
    for seed in range(3):
        X, y = split35(2000, np.random.default_rng(seed))
        clf = DiffPC45(schema, epsilon=50.0, max_depth=1, scorer="max").fit(X, y)
        t = clf.trees_[0]
        assert t.feature[0] == 3  # x0
        assert abs(t.threshold[0] - 35) < 2
        assert clf.score(X, y) > 0.97


def test_numeric_attribute_splits_again_inside_narrowed_bounds():
    schema = mixed_schema(n_cat=0, n_num=1)
    rng = np.random.default_rng(5)
    x = rng.uniform(0, 100, 4000)
    y = ((x > 30) & (x <= 70)).astype(int)
    clf = DiffPC45(schema, epsilon=100.0, max_depth=2, scorer="max", prune=False).fit(x[:, None], y)
    t = clf.trees_[0]
    assert t.feature[0] == 0 and np.all(t.feature[t.child_start[0] : t.child_start[0] + 2] == 0)
    assert clf.score(x[:, None], y) > 0.97


# -- pruning ------------------------------------------------------------------------------------------


def test_pruning_never_queries_and_shrinks_noise_trees():
    """Same noise seed -> identical growth; pruning adds no query. Labels are pure noise."""
    schema = mixed_schema(n_cat=5, n_num=1)
    rng = np.random.default_rng(7)
    X = np.hstack([rng.integers(0, 2, (4000, 5)).astype(float), rng.uniform(0, 100, (4000, 1))])
    y = rng.integers(0, 2, 4000)
    sizes, logs = {}, {}
    for prune in (False, True):
        pds = PrivateDataset.from_records(schema, X, y, epsilon=20.0, noise_seed=5)
        clf = DiffPC45(schema, epsilon=20.0, max_depth=4, prune=prune, noise_seed=5).fit(pds)
        logs[prune] = pds.log
        sizes[prune] = reachable(clf.trees_[0])
        assert clf.n_queries_ == len(pds.log)
    assert logs[True] == logs[False]
    assert sizes[False] > 1
    assert sizes[True] < sizes[False]


def test_calibration_is_consistent():
    schema = mixed_schema(n_cat=3, n_num=1)
    X, y = split35(3000, np.random.default_rng(8), n_cat=3, n_num=1)
    clf = DiffPC45(schema, epsilon=2.0, max_depth=3, prune=False).fit(X, y)
    t = clf.trees_[0]
    for i in range(t.n_nodes):
        if t.feature[i] >= 0:
            kids = np.flatnonzero(t.parent == i)
            assert t.counts[kids].sum() == pytest.approx(t.counts[i].sum(), rel=1e-9, abs=1e-6) or np.any(
                t.counts[kids].sum(axis=1) == 0
            )  # an uninformative leaf is stored empty
    assert np.all(t.counts >= 0)


def test_calibrate_by_hand():
    from streamdp.learners.c45 import _Grown

    g = _Grown()
    g.add(0, 100)
    g.children[0] = [1, 2]
    g.add(1, 30)
    g.add(2, -5)  # clipped to 0
    g.children[1] = [3, 4]
    g.add(3, 10)
    g.add(4, 10)
    g.leaf_counts = {2: np.array([1.0, 1.0]), 3: np.array([8.0, -2.0]), 4: np.array([0.0, 0.0])}
    total, counts, informative = calibrate(g, 2)
    assert total.tolist() == [100, 100, 0, 50, 50]
    assert counts[3].tolist() == [50, 0] and counts[4].tolist() == [25, 25]
    assert counts[0].tolist() == [75, 25] and informative.tolist() == [True, True, True, True, False]


# -- U_CF ----------------------------------------------------------------------------------------------


def test_upper_confidence_bound_matches_c45_and_the_exact_binomial():
    from scipy.stats import beta

    assert upper_error_rate(0, 6) == pytest.approx(0.206, abs=5e-4)  # Quinlan's book
    assert upper_error_rate(0, 9) == pytest.approx(0.143, abs=5e-4)
    assert upper_error_rate(1, 16) == pytest.approx(0.157, abs=1e-3)
    assert upper_error_rate(0, 1) == pytest.approx(0.75)
    for n in (5, 16, 50, 200, 1000):
        for e in range(0, n // 2 + 1, max(1, n // 10)):
            exact = beta.ppf(0.75, e + 1, n - e)
            assert upper_error_rate(e, n) == pytest.approx(exact, rel=0.05, abs=2e-3), (e, n)
    assert add_errors(0, 0) == 0.0 and upper_error_rate(3, 0) == 0.0
    assert upper_error_rate(2, 20, cf=0.1) > upper_error_rate(2, 20, cf=0.25)


# -- sklearn, blobs, parameters -------------------------------------------------------------------------


def test_sklearn_clone_and_cross_val_score():
    from sklearn.base import clone
    from sklearn.model_selection import cross_val_score

    schema = mixed_schema()
    X, y = split35(1500, np.random.default_rng(9))
    clf = DiffPC45(schema, epsilon=20.0, max_depth=3, scorer="max")
    c2 = clone(clf)
    assert c2.get_params() == clf.get_params()
    scores = cross_val_score(clf, X, y, cv=3)
    assert scores.shape == (3,) and scores.mean() > 0.85


def test_blob_round_trip():
    from streamdp.learners import load_model

    schema = mixed_schema()
    X, y = split35(1500, np.random.default_rng(10))
    clf = DiffPC45(schema, epsilon=5.0, max_depth=3).fit(X, y)
    assert clf.private_
    data = clf.to_bytes()
    for m in (DiffPC45.from_bytes(data), load_model(data)):
        assert isinstance(m, DiffPC45) and m.get_params()["cf"] == 0.25
        assert np.array_equal(m.predict_proba(X), clf.predict_proba(X))


@pytest.mark.parametrize(
    "kw,msg",
    [
        ({"scorer": "entropy"}, "unknown scorer"),
        ({"scorer": MaxScorer()}, "scorer must be a scorer name"),
        ({"n_bound": 0}, "n_bound"),
        ({"cf": 0.0}, "cf"),
        ({"cf": 1.5}, "cf"),
        ({"prune": "yes"}, "prune"),
        ({"epsilon": -1}, "epsilon"),
        ({"max_depth": -1}, "max_depth"),
    ],
)
def test_bad_parameters_are_refused_before_any_charge(kw, msg):
    schema = mixed_schema()
    X, y = split35(50, np.random.default_rng(0))
    pds = PrivateDataset.from_records(schema, X, y, epsilon=1.0)
    with pytest.raises(ValueError, match=msg):
        DiffPC45(schema, **kw).fit(pds)
    assert pds.spent == 0


def test_infogain_with_n_bound_works():
    schema = mixed_schema()
    X, y = split35(2000, np.random.default_rng(12))
    clf = DiffPC45(schema, epsilon=50.0, max_depth=2, scorer="infogain", n_bound=5000).fit(X, y)
    # the bound is enforced by the data layer: twice the sensitivity at the bound
    assert clf.record_bound_ == 5000 and clf.sensitivity_ == pytest.approx(2 * (math.log2(5001) + 1 / math.log(2)))
    assert clf.score(X, y) > 0.9


def test_infogain_without_n_bound_sizes_the_bound_from_the_noisy_root_count():
    schema = mixed_schema()
    X, y = split35(2000, np.random.default_rng(12))
    clf = DiffPC45(schema, epsilon=50.0, max_depth=2, scorer="infogain").fit(X, y)
    eps = clf.epsilon_per_query_
    assert 2000 <= clf.record_bound_ <= 2000 + 2 * math.log(1e6) / eps  # noisy count + margin, with high probability
    assert clf.score(X, y) > 0.9


def test_gainratio_uses_the_schema_sensitivity_and_finds_the_split():
    from streamdp.learners.scorers import get_scorer

    schema = mixed_schema()
    X, y = split35(2000, np.random.default_rng(13))
    clf = DiffPC45(schema, epsilon=100.0, max_depth=1, scorer="gainratio", n_bound=5000).fit(X, y)
    assert clf.sensitivity_ == pytest.approx(2 * get_scorer("gainratio", schema).sensitivity(5000))
    assert clf.score(X, y) > 0.9


# -- Adult ----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_adult_accuracy_at_large_epsilon():
    from streamdp.records.datasets import load

    ds = load("adult", drop_missing=True)
    idx = np.random.default_rng(0).permutation(len(ds.y))
    tr, te = idx[:30000], idx[30000:]
    clf = DiffPC45(ds.schema, epsilon=50.0, max_depth=5, scorer="max", noise_seed=1).fit(ds.X[tr], ds.y[tr])
    majority = max(np.mean(ds.y[te] == c) for c in ds.schema.classes)
    acc = clf.score(ds.X[te], ds.y[te])
    assert majority < 0.76 and acc > 0.80
