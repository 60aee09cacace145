"""The default one-shot fit keeps as many of its drawn trees as the released signal carries (forest/sizing.py)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from streamdp import NotPrivateWarning, PrivateForest, Schema
from streamdp.estimation.rule import cell_variance
from streamdp.forest import sizing
from streamdp.forest.sizing import TREES_PER_SIGNAL, trees_for_signal
from streamdp.records.datasets import load


def _forest(schema, **kw) -> PrivateForest:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        return PrivateForest.create(schema, **kw)


def test_the_tree_count_rule_is_bounded_and_grows_with_the_signal():
    assert trees_for_signal(-100.0, 0.1, 10) == 1 and trees_for_signal(0.0, 1.0, 10) == 1
    assert trees_for_signal(1e9, 1.0, 10) == 10 and trees_for_signal(math.inf, 1.0, 7) == 7
    counts = [trees_for_signal(n, eps, 10) for eps in (0.1, 1.0) for n in np.geomspace(10, 1e5, 40)]
    assert counts == sorted(counts[:40]) + sorted(counts[40:])  # non-decreasing in n at each epsilon
    assert trees_for_signal(9 * TREES_PER_SIGNAL**2, 1.0, 10) == 3
    with pytest.raises(ValueError):
        trees_for_signal(100.0, 1.0, 0)


def test_the_kept_trees_depend_on_the_released_numbers_alone_and_the_budget_adds_up(monkeypatch):
    """Every release replaced by numbers that ignore the data: two unrelated datasets get the same tree
    count and structure. The stumps are released once at ``epsilon / (T + P)``, the kept trees spend what they
    left, ``(epsilon - P epsilon / (T + P)) / k`` each (probe and leaves), and the whole fit ``epsilon``."""
    import streamdp.forest.growth as growth_module

    calls: list[tuple[str, float]] = []

    def fake(where):
        def release(exact, epsilon, mechanism, rng, real=None, k=None):
            calls.append((where, epsilon))
            out = np.full(np.shape(exact), 30, dtype=np.int64)
            return out * np.asarray(real) if real is not None else out

        return release

    monkeypatch.setattr(sizing, "noisy_node", fake("sizing"))
    monkeypatch.setattr(growth_module, "noisy_node", fake("growth"))
    ds = load("congressional-voting")
    rng = np.random.default_rng(2)
    other = rng.permutation(len(ds.y))[:120]
    eps = 0.5
    shapes, ks = [], []
    for X, y in ((ds.X, ds.y), (ds.X[other], np.where(rng.uniform(size=120) < 0.8, ds.y[0], ds.y[-1]))):
        calls.clear()
        f = _forest(ds.schema, epsilon=eps, seed=3).fit(X, y)
        shapes.append(f.structure.arrays())
        ks.append(f.n_trees)
        # the fake stumps say 2 x 30 = 60 records: round(sqrt(60 * 0.5) / 3) = 2 trees
        assert f.n_trees == trees_for_signal(60, eps, 10) == 2 and f.structure.n_trees == 3
        assert math.isclose(f.epsilon_per_tree, eps / (f.n_trees + f.prior_trees))  # a later release's share
        stumps = [x for w, x in calls if w == "sizing"]
        assert stumps == [eps / 11]  # one release, what every tree would get with all ten kept
        trees = [x for w, x in calls if w == "growth"]  # (the probe, if it split anything, then the leaves)
        kept = (eps - eps / 11) / f.n_trees
        assert math.isclose(sum(trees), kept)
        assert math.isclose(f.prior_trees * stumps[0] + f.n_trees * kept, eps)  # the fit costs epsilon
        assert np.isclose(f.node_variance[-1, 0], cell_variance("geometric", stumps[0]))
    assert ks[0] == ks[1]
    for name, a in shapes[0].items():
        assert np.array_equal(a, shapes[1][name]), name


def test_an_explicit_tree_count_or_a_strong_signal_keeps_every_tree():
    ds = load("nursery")
    assert _forest(ds.schema, epsilon=2.0, seed=1).fit(ds.X, ds.y).n_trees == 10  # sqrt(12960 * 2) / 3 > 10
    votes = load("congressional-voting")
    for kw in ({"n_trees": 10}, {"n_trees": 10, "budget": "disjoint"}, {"budget": "disjoint"}):
        assert _forest(votes.schema, epsilon=0.1, seed=1, **kw).fit(votes.X, votes.y).n_trees == 10, kw


def test_a_sized_forest_refits_from_every_drawn_tree_and_round_trips():
    ds = load("congressional-voting")
    f = _forest(ds.schema, epsilon=1.0, seed=4, noise_seed=4)
    f.fit(ds.X[:30], ds.y[:30])  # about 30 records x 1.0: 2 trees
    assert f.n_trees < 10 and f.counts.shape[0] == f.n_trees + 1
    g = PrivateForest.from_bytes(f.to_bytes())
    assert g.n_trees == f.n_trees and np.array_equal(g.predict_proba(ds.X), f.predict_proba(ds.X))
    f.update(ds.X[30:], ds.y[30:])  # a grown release on the kept trees
    assert f.n_releases == 2 and f.counts.shape[0] == f.n_trees + 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # (a refit's notice: these records are released again)
        f.fit(np.repeat(ds.X, 20, axis=0), np.repeat(ds.y, 20))  # 8,700 records x 1.0: every drawn tree again
    assert f.n_trees == 10


def test_laplace_noise_sizes_too():
    ds = load("congressional-voting")
    f = _forest(ds.schema, epsilon=0.1, mechanism="laplace", seed=2).fit(ds.X, ds.y)
    assert f.n_trees < 10 and f.counts.dtype == np.float64 and np.isfinite(f.predict_proba(ds.X)).all()


def test_a_tiny_easy_dataset_at_epsilon_one_tenth_is_not_below_the_majority_share():
    """400 records, one binary attribute that gives the label but for 5% flips, classes 60/40, epsilon 0.1.
    Each fit's accuracy is exact over the population (the two attribute values weighted). Hoeffding over 100
    independent fits: if the expected accuracy is at least 0.9, the mean falls below 0.6 with probability at
    most exp(-2 * 100 * 0.3**2) < 1e-7 (the measured means: docs/decisions/019-low-epsilon-defaults.md)."""
    schema = Schema.from_dict(
        {
            "attributes": [{"name": "a", "type": "categorical", "values": [0, 1]}],
            "label": {"name": "y", "values": [0, 1]},
        }
    )
    rng = np.random.default_rng()
    cells, weight = np.array([[0], [1]]), np.array([0.6, 0.4])
    acc = []
    for _ in range(100):
        a = (rng.uniform(size=400) < 0.4).astype(int)
        y = np.where(rng.uniform(size=400) < 0.05, 1 - a, a)
        pred = PrivateForest.create(schema, epsilon=0.1).fit(a[:, None], y).predict(cells).astype(int)
        acc.append(float(np.dot(weight, np.where(pred == cells[:, 0], 0.95, 0.05))))
    assert np.mean(acc) >= 0.6, np.mean(acc)
