"""Every scorer's declared sensitivity, brute-forced over neighbouring contingency tables.

Neighbours under add/remove-one-record: one cell of the table moves by one.
Exhaustive over every table of k x C cells with at most N_MAX records, then
random larger tables; n_bound is the larger table's record count, the
tightest bound a learner may declare.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from streamdp import Schema
from streamdp.learners.scorers import GainRatioScorer, GiniScorer, InfoGainScorer, MaxScorer, get_scorer


def _tables(k: int, C: int, n_max: int):
    cells = k * C
    for total in range(n_max + 1):
        for combo in itertools.combinations_with_replacement(range(cells), total):
            t = np.zeros(cells)
            for c in combo:
                t[c] += 1
            yield t.reshape(k, C)


def _worst(scorer, tables):
    """Largest |q(T) - q(T + e_cell)| / S(|T| + 1) over the tables and cells."""
    tables = np.asarray(list(tables), dtype=np.float64)
    m, k, C = tables.shape
    base = scorer(tables)
    worst = 0.0
    for cell in range(k * C):
        up = tables.copy().reshape(m, k * C)
        up[:, cell] += 1
        up = up.reshape(m, k, C)
        n_big = up.sum(axis=(1, 2))
        diff = np.abs(scorer(up) - base)
        sens = np.array([scorer.sensitivity(n) for n in n_big])
        worst = max(worst, float(np.max(diff / sens)))
    return worst


SCORERS = [
    InfoGainScorer(),
    GiniScorer(),
    MaxScorer(),
    GainRatioScorer(2, 2),
    GainRatioScorer(3, 3),
    GainRatioScorer(2, 4),
]


@pytest.mark.parametrize("scorer", SCORERS, ids=repr)
def test_sensitivity_exhaustive_small_tables(scorer):
    k = getattr(scorer, "max_arity", 2)
    C = getattr(scorer, "n_classes", 2)
    n_max = 6 if k * C <= 6 else 4
    assert _worst(scorer, _tables(k, C, n_max)) <= 1 + 1e-9


@pytest.mark.parametrize("scorer", SCORERS, ids=repr)
def test_sensitivity_random_tables(scorer):
    rng = np.random.default_rng(7)
    k = getattr(scorer, "max_arity", 3)
    C = getattr(scorer, "n_classes", 3)
    tables = []
    for scale in (3, 30, 300, 3000):
        for _ in range(300):
            t = rng.integers(0, scale, size=(k, C)).astype(float)
            t[rng.random((k, C)) < 0.3] = 0  # sparse cells are where log terms jump
            tables.append(t)
    assert _worst(scorer, tables) <= 1 + 1e-9


def test_the_brute_force_catches_an_understated_sensitivity():
    class Liar(GiniScorer):
        def sensitivity(self, n_bound):
            return 1.0  # Gini's true bound is 2

    assert _worst(Liar(), _tables(2, 2, 5)) > 1


def test_scores_prefer_the_informative_split():
    good = np.array([[50.0, 0], [0, 50]])
    bad = np.array([[25.0, 25], [25, 25]])
    for s in SCORERS[:4]:
        assert s(good) > s(bad), s


def test_vectorised_over_leading_axes():
    rng = np.random.default_rng(0)
    t = rng.integers(0, 9, size=(4, 5, 3, 2)).astype(float)
    for s in SCORERS:
        got = s(t)
        assert got.shape == (4, 5)
        assert np.allclose(got[2, 3], s(t[2, 3]))


def test_get_scorer_names_and_gainratio_needs_the_schema():
    assert isinstance(get_scorer("max"), MaxScorer)
    with pytest.raises(ValueError, match="unknown scorer"):
        get_scorer("entropy")
    with pytest.raises(ValueError, match="needs the schema"):
        get_scorer("gainratio")
    s = Schema.from_dict(
        {
            "attributes": [
                {"name": "a", "type": "categorical", "values": list(range(5))},
                {"name": "x", "type": "numeric", "min": 0, "max": 1},
            ],
            "label": {"name": "y", "values": [0, 1, 2]},
        }
    )
    g = get_scorer("gainratio", s)
    assert (g.n_classes, g.max_arity) == (3, 5)
    assert g.sensitivity(100) == pytest.approx(
        2 * (math.log2(101) + 1 / math.log(2)) + math.log2(3) * (math.log2(101) + 1 / math.log(2) + math.log2(5))
    )
