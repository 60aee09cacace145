"""PrivateForest.fit with height as a ceiling: trees pruned by a rule on the prior stumps' release."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from streamdp import NotPrivateWarning, PrivateForest, Schema
from streamdp.datasets import load

from test_privacy_audit import epsilon_lower_bound


def _forest(schema, **kw) -> PrivateForest:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        return PrivateForest.create(schema, **kw)


def _split(n: int, seed: int = 0):
    perm = np.random.default_rng(seed).permutation(n)
    return perm[n // 3:], perm[: n // 3]


def test_a_forest_too_tall_for_its_data_is_pruned_and_keeps_its_accuracy(shared_datasets):
    """Votes (290 training records, 16 attributes of 3 values) at height 11: unpruned, every node's summed
    noise swamps it and the forest predicts the prior; pruned, it scores like the best height (2-3)."""
    ds = load("congressional-voting")
    tr, te = _split(len(ds.y))
    pruned, tall = [], []
    for seed in range(4):  # fixed noise (noise_seed): a deterministic check; the sweep is in accuracy_height.md
        f = _forest(ds.schema, n_trees=10, height=11, epsilon=1.0, seed=seed, noise_seed=seed)
        g = _forest(ds.schema, n_trees=10, height=11, epsilon=1.0, seed=seed, noise_seed=seed)
        f.fit(ds.X[tr], ds.y[tr])
        g.fit(ds.X[tr], ds.y[tr], prune=False)
        assert f.height < 11 and g.height == 11
        assert f.counts.shape == (11, f.structure.max_leaves, 2) and f.structure.max_leaves < g.structure.max_leaves
        pruned.append(np.mean(f.predict(ds.X[te]) == ds.y[te]))
        tall.append(np.mean(g.predict(ds.X[te]) == ds.y[te]))
    assert np.mean(pruned) >= 0.8 and np.mean(pruned) >= np.mean(tall) + 0.1, (pruned, tall)


def test_without_pruning_or_without_a_stump_the_drawn_structure_is_kept(shared_datasets):
    ds = load("congressional-voting")
    for kw, fit_kw in (({}, {"prune": False}), ({"prior_trees": 0}, {})):
        f = _forest(ds.schema, n_trees=3, height=9, epsilon=1.0, seed=1, **kw)
        drawn = f.structure
        f.fit(ds.X, ds.y, **fit_kw)
        assert f.structure is drawn and f.height == 9


def test_a_pruned_forest_round_trips_and_updates(shared_datasets):
    ds = load("congressional-voting")
    f = _forest(ds.schema, n_trees=4, height=10, epsilon=1.0, seed=3).fit(ds.X[:300], ds.y[:300])
    g = PrivateForest.from_bytes(f.to_bytes())
    assert g.height == f.height and np.array_equal(g.counts, f.counts)
    assert np.array_equal(g.predict_proba(ds.X[300:]), f.predict_proba(ds.X[300:]))
    before = f.counts.sum()
    f.update(ds.X[300:], ds.y[300:])  # Jagannathan's update adds to the pruned trees
    assert f.n_releases == 2 and f.counts.shape == g.counts.shape and f.counts.sum() != before
    # padding past a pruned tree's last leaf holds nothing (it is not drawn either)
    real = np.arange(f.structure.max_leaves)[None, :] < f.structure.n_leaves[:, None]
    assert not f.counts[~real].any()


@pytest.mark.parametrize("budget", ["split", "disjoint"])
def test_the_pruned_structure_depends_on_the_stumps_release_alone(budget, shared_datasets):
    """Two datasets with the same class totals but unrelated attributes and the same noise stream: the stumps
    release the same numbers, so the pruned structure is the same (the rule reads nothing else of the data)."""
    ds = load("congressional-voting")
    rng = np.random.default_rng(5)
    X2 = ds.X[rng.permutation(len(ds.y))]  # the same labels, attributes shuffled across records
    X2 = X2[:, rng.permutation(X2.shape[1])]
    schema2 = ds.schema
    structures = []
    for X in (ds.X, X2):
        f = _forest(schema2, n_trees=5, height=8, epsilon=1.0, seed=7, budget=budget, noise_seed=11)
        structures.append(f.fit(X, ds.y).structure)
    for name, a in structures[0].arrays().items():
        assert np.array_equal(a, structures[1].arrays()[name]), name
    assert structures[0].height < 8


@pytest.mark.slow
def test_empirical_epsilon_audit_of_the_pruned_fit():
    """Neighbouring datasets (17 and 18 records): the pruning decision and the released counts together.

    One binary attribute, one tree of height 1 and one stump, epsilon 1 (0.5 each): the split is kept
    when the stump's noisy total clears ``PRUNE_SNR`` noise sd per child, about 17 records, so the
    decision is as sensitive as it gets. Events: pruned or not, jointly with the tree's counts. The
    Clopper-Pearson lower bound (failure probability 1e-6) must not exceed the declared epsilon 1.
    """
    schema = Schema.from_dict({"attributes": [{"name": "a", "type": "categorical", "values": [0, 1]}],
                               "label": {"name": "y", "values": [0, 1]}})
    structure = PrivateForest.create(schema, n_trees=1, height=1, epsilon=1.0, seed=0).structure
    N = 4000
    events = []
    for n in (17, 18):
        X, y = np.zeros((n, 1)), np.zeros(n, dtype=np.int64)
        split, low, high = 0, 0, 0
        for _ in range(N):
            f = PrivateForest(schema, structure, epsilon=1.0, prior_trees=1).fit_encoded(X, y)
            kept = f.structure.n_leaves[0] == 2
            c = int(f.counts[0, 0, 0])
            split += kept
            low += kept and c <= 15
            high += (not kept) and c >= 19
        events.append([split, N - split, low, high])
    lb = epsilon_lower_bound(events[0], events[1], N)
    assert lb <= 1.0, (lb, events)
    assert min(events[0][0], events[0][1]) > N // 20  # the decision really is in play at these sizes
