"""The data layer's selection operations: random shares, a forest's fit on a share, the most accurate predictor."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from streamdp import PrivateForest, Schema
from streamdp.learners.private_data import PrivateDataset
from streamdp.privacy.ledger import BudgetExceeded
from streamdp.privacy.mechanisms import exponential_mechanism_probabilities
from streamdp.records.datasets import load
from tests.privacy.test_audit import clopper_pearson

VOTES = load("congressional-voting")
SCHEMA = Schema.from_dict(
    {"attributes": [{"name": "a", "type": "categorical", "values": [0, 1]}], "label": {"name": "y", "values": [0, 1]}}
)


def votes(epsilon: float = 1.0) -> PrivateDataset:
    return PrivateDataset.from_records(VOTES.schema, VOTES.X, VOTES.y, epsilon=epsilon)


def test_shares_are_disjoint_random_and_compose_in_parallel():
    n = 20_000
    pds = PrivateDataset(SCHEMA, np.zeros((n, 1)), np.zeros(n, dtype=np.int64), epsilon=1.0)
    parts = pds.split([0.2, 0.3, 0.5])
    counts = [p.noisy_count(1.0) for p in parts]  # each share may spend the whole allotment
    assert pds.spent == 1.0
    assert sum(counts) == pytest.approx(n, abs=200)  # geometric noise at epsilon 1: a few records each
    for share, c in zip((0.2, 0.3, 0.5), counts):  # binomial sizes: 6 standard deviations
        assert abs(c - share * n) < 6 * math.sqrt(n * share * (1 - share)) + 50
    with pytest.raises(BudgetExceeded):
        parts[0].noisy_count(0.1)
    assert parts[1].can_charge(0.0) and not parts[1].can_charge(0.1)


@pytest.mark.parametrize("shares", [[0.5, 0.6], [1.0, 0.0], [], [math.nan, 1.0], [[0.5, 0.5]]])
def test_bad_shares_are_refused(shares):
    with pytest.raises(ValueError, match="shares must"):
        votes().split(shares)


def test_a_forest_fits_on_a_share_at_its_charge():
    pds = votes(1.0)
    a, _ = pds.split([0.5, 0.5])
    with pytest.raises(ValueError, match="needs 0.5"):
        a.forest_release(PrivateForest.create(VOTES.schema, epsilon=1.0), 0.5)
    assert pds.spent == 0.0  # refused before any charge
    f = a.forest_release(PrivateForest.create(VOTES.schema, n_trees=3, epsilon=0.5), 0.5)
    assert f.n_releases == 1 and pds.spent == 0.5
    with pytest.raises(ValueError, match="unfitted"):
        a.forest_release(f, 0.5)


def _selection_probabilities(pds: PrivateDataset, predictors, epsilon: float, n: int) -> np.ndarray:
    picks = np.array([pds.most_accurate(predictors, epsilon) for _ in range(n)])
    return np.bincount(picks, minlength=len(predictors)) / n


def test_the_winner_is_drawn_from_the_correct_counts_with_the_monotone_exponential_mechanism():
    # 10 records of class 1, 4 of class 0: "always 1" is right 10 times, "always 0" 4 times, "a" 7 + 4 times
    X = np.array([[1]] * 7 + [[0]] * 3 + [[0]] * 4, dtype=np.float64)
    y = np.array([1] * 10 + [0] * 4)
    pds = PrivateDataset(SCHEMA, X, y, epsilon=1e9)
    predictors = [lambda Z: np.ones(len(Z), int), lambda Z: np.zeros(len(Z), int), lambda Z: Z[:, 0].astype(int)]
    n, eps = 4000, 0.3
    got = _selection_probabilities(pds, predictors, eps, n)
    want = exponential_mechanism_probabilities(np.array([10.0, 4.0, 11.0]), eps, 0.5)  # exp(eps * q)
    # every frequency within its 1 - 1e-6 binomial interval (Bonferroni over 3)
    for g, w in zip(got, want):
        lo, hi = stats.binom.interval(1 - 1e-6 / 3, n, w)
        assert lo / n <= g <= hi / n


def test_a_predictor_of_the_wrong_shape_is_refused_after_the_charge_without_a_result():
    pds = votes(1.0)
    with pytest.raises(ValueError, match="predictor 0 returned shape"):
        pds.most_accurate([lambda Z: np.zeros(3)], 0.5)
    with pytest.raises(ValueError, match="at least one predictor"):
        pds.most_accurate([], 0.5)


@pytest.mark.slow
def test_an_empirical_audit_of_the_selection_stays_within_its_epsilon():
    """Neighbours D and D + x, where x is right for candidate 0 only; P(pick 0) may grow by at most e^eps.

    The scores (0, 3) put the ratio near its bound (e^eps Z / Z'), so the audit would see a mechanism that
    spent twice its epsilon. Clopper-Pearson bounds, failure probability 1e-6 over both intervals."""
    eps, n = 1.0, 30_000
    X0 = np.array([[0]] * 3, dtype=np.float64)
    y0 = np.array([0, 0, 0])  # candidate 1 ("always 0") is right 3 times, candidate 0 ("always 1") never
    predictors = [lambda Z: np.ones(len(Z), int), lambda Z: np.zeros(len(Z), int)]
    worlds = []
    for X, y in ((X0, y0), (np.vstack([X0, [[1]]]), np.append(y0, 1))):
        pds = PrivateDataset(SCHEMA, X, y, epsilon=eps * n)
        worlds.append(int(round(_selection_probabilities(pds, predictors, eps, n)[0] * n)))
    lo1, _ = clopper_pearson(worlds[1], n, 1e-6 / 2)
    _, hi0 = clopper_pearson(worlds[0], n, 1e-6 / 2)
    lo0, _ = clopper_pearson(worlds[0], n, 1e-6 / 2)
    _, hi1 = clopper_pearson(worlds[1], n, 1e-6 / 2)
    bound = max(math.log(lo1 / hi0), math.log(lo0 / hi1))
    assert bound <= eps
    assert bound > 0.6 * eps  # the audit has power: the true ratio is e^eps (1 + e^3) / (e + e^3) ~ 2.5
