"""Stream thresholds (streamdp.forest.first_release): the trees' first release spends the share on its records'
histograms and redraws the thresholds, later releases keep the whole epsilon on the fixed trees; the budget of
every release, the river classifier's first release, old blobs, and the audits."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from streamdp import NotPrivateWarning, PrivateForest, Schema
from streamdp.estimation.rule import cell_variance
from streamdp.forest import first_release as first_module
from streamdp.forest import persistence
from streamdp.forest import releasing as releasing_module
from streamdp.forest.first_release import stream_share
from streamdp.forest.thresholds import default_threshold_share
from streamdp.options import DEFAULT_THRESHOLD_SHARE
from streamdp.privacy.mechanisms import SecureRandom
from streamdp.river import PrivateForestClassifier
from tests.privacy.test_audit import epsilon_lower_bound


def _schema(d: int = 2) -> Schema:
    attrs = [{"name": f"x{i}", "type": "numeric", "min": 0, "max": 100} for i in range(d)]
    return Schema.from_dict({"attributes": attrs, "label": {"name": "y", "values": [0, 1]}})


def _concentrated(n: int, d: int = 2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Every attribute in [38, 43] of [0, 100] (the seventh of 16 bins, [37.5, 43.75])."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(38, 43, (n, d))
    return X, (X[:, 0] > 40.5).astype(np.int64)


def _numeric_thresholds(f: PrivateForest) -> np.ndarray:
    return f.drawn.threshold[np.isfinite(f.drawn.threshold)]


def _roots_in_the_bin(f: PrivateForest) -> float:
    """Share of the random trees' roots split in [37.5, 43.75] (uniform: 1 in 16; deeper splits on the same
    attribute see a range the density puts no mass in, drawn uniformly)."""
    t = f.drawn.threshold[: f.n_trees, 0]
    return float(np.mean((t >= 37.5) & (t <= 43.75)))


class _Spend:
    """Records every epsilon spent, in order: ("histograms", e) and ("counts", e per tree) per release."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.log: list[tuple[str, float]] = []
        self.read: list[int] = []  # records the histograms read
        real_m, real_n = first_module.noisy_marginals, releasing_module.noisy_node

        def marginals(X, schema, epsilon, rng, *a, **kw):
            self.log.append(("histograms", epsilon))
            self.read.append(len(X))
            return real_m(X, schema, epsilon, rng, *a, **kw)

        def node(counts, epsilon, *a, **kw):
            self.log.append(("counts", epsilon))
            return real_n(counts, epsilon, *a, **kw)

        monkeypatch.setattr(first_module, "noisy_marginals", marginals)
        monkeypatch.setattr(releasing_module, "noisy_node", node)


def test_update_stream_spends_the_share_once_then_the_whole_epsilon(monkeypatch):
    """A fresh forest's first update: s * eps on histograms of its records and (1 - s) * eps on counts, eps per
    record in all; every later update: eps on counts, the thresholds as the first release left them. The split is
    a function of the parameters alone, fixed before any record is read."""
    spend = _Spend(monkeypatch)
    s, eps, T = _schema(), 2.0, 10 + 1
    f = PrivateForest.create(s, n_trees=10, height=3, epsilon=eps, threshold_share=0.25, prior_trees=1)
    assert f.thresholds_due and f.epsilon_per_tree == pytest.approx(eps / T)  # nothing spent before a record
    X, y = _concentrated(1800)
    f.update_encoded(X[:600], y[:600])
    assert spend.read == [600]  # the first release's records alone
    assert spend.log == [("histograms", pytest.approx(0.5)), ("counts", pytest.approx(1.5 / T))]
    first_total = spend.log[0][1] + spend.log[1][1] * T
    assert first_total == pytest.approx(eps)  # each record of the first release: eps in all
    assert f.threshold_spent == 0.25 and not f.thresholds_due
    t = _numeric_thresholds(f).copy()
    assert _roots_in_the_bin(f) > 0.3  # where the records are
    assert np.allclose(f.noise_variance, cell_variance("geometric", 1.5 / T))
    spend.log.clear()
    f.update_encoded(X[600:1200], y[600:1200])
    f.update_encoded(X[1200:], y[1200:])
    assert spend.log == [("counts", pytest.approx(eps / T))] * 2 and spend.read == [600]
    assert np.array_equal(_numeric_thresholds(f), t)  # fixed
    assert np.allclose(f.noise_variance, cell_variance("geometric", 1.5 / T) + 2 * cell_variance("geometric", eps / T))
    g = PrivateForest.from_bytes(f.to_bytes())
    assert (g.threshold_spent, g.epsilon_per_tree) == (0.25, pytest.approx(eps / T))
    assert np.allclose(g.noise_variance, f.noise_variance) and not g.thresholds_due


def test_grow_stream_draws_at_its_first_release_and_prunes_by_the_density():
    s = _schema()
    X, y = _concentrated(3000)
    f = PrivateForest.create(s, n_trees=5, height=6, epsilon=4.0, threshold_share=0.2)
    f.grow_encoded(X[:1000], y[:1000])
    assert f.threshold_spent == 0.2 and f.marginals is not None
    drawn = f.drawn.threshold.copy()
    assert _roots_in_the_bin(f) > 0.3
    assert f.epsilon_per_tree == pytest.approx(4.0 / 6)  # the next releases: the whole epsilon
    f.grow_encoded(X[1000:], y[1000:])
    assert np.array_equal(f.drawn.threshold, drawn) and f.n_releases == 2
    # the first grown release's stumps got what the share left, the second's the whole budget
    stump = f.node_variance[5:, 0]
    assert np.allclose(stump, cell_variance("geometric", 3.2 / 6) + cell_variance("geometric", 4.0 / 6))


def test_the_fit_then_updates_keep_the_whole_epsilon(monkeypatch):
    spend = _Spend(monkeypatch)
    s = _schema()
    X, y = _concentrated(400)
    f = PrivateForest.create(s, n_trees=3, height=3, epsilon=1.0, threshold_share=0.2).fit_encoded(
        X[:200], y[:200], prune=False
    )
    assert spend.log == [("histograms", pytest.approx(0.2)), ("counts", pytest.approx(0.8 / 4))]
    spend.log.clear()
    f.update_encoded(X[200:], y[200:])
    assert spend.log == [("counts", pytest.approx(1.0 / 4))]
    assert np.allclose(f.noise_variance, cell_variance("geometric", 0.2) + cell_variance("geometric", 0.25))


def test_no_share_no_draw_and_the_defaults():
    s = _schema()
    X, y = _concentrated(100)
    f = PrivateForest.create(s, n_trees=2, height=2, epsilon=1.0, threshold_share=0.0, seed=3)
    before = f.structure.threshold.copy()
    f.update_encoded(X, y)
    assert np.array_equal(f.structure.threshold, before) and f.threshold_spent == 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        inf = PrivateForest.create(s, n_trees=2, height=2, epsilon=math.inf, threshold_share=0.2)
    assert not inf.thresholds_due  # no noise: nothing to spend
    assert default_threshold_share(s) == DEFAULT_THRESHOLD_SHARE
    assert PrivateForestClassifier(s, threshold_share=0).forest.threshold_share == 0.0


def test_a_stream_spends_the_default_share_where_its_first_release_can_fill_the_histograms():
    """By default the river classifier spends the share when its trees' first release, by the public schedule,
    holds enough records to lift a uniform histogram's bin to the noise scale (d / (s * eps)); never by the
    records themselves. An explicit share is spent as given."""
    s = _schema(d=2)  # 100 records / 16 bins >= 2 / (0.2 * eps) from eps = 1.6
    assert PrivateForestClassifier(s, epsilon=2.0).forest.threshold_share == DEFAULT_THRESHOLD_SHARE
    assert PrivateForestClassifier(s, epsilon=1.0).forest.threshold_share == 0.0
    assert PrivateForestClassifier(s, epsilon=1.0, first_batch=1000).forest.threshold_share == DEFAULT_THRESHOLD_SHARE
    assert PrivateForestClassifier(s, epsilon=1.0, first_batch=1000, batch_size=100).forest.threshold_share == 0.0
    assert PrivateForestClassifier(s, epsilon=2.0, guard=0.5).forest.threshold_share == 0.0  # the trees' epsilon
    assert PrivateForestClassifier(s, epsilon=0.1, threshold_share=0.3).forest.threshold_share == 0.3
    assert stream_share(_schema(d=20), 2.0, "geometric", None, 100) == 0.0


@pytest.mark.parametrize("grow", [False, True])
def test_river_classifier_spends_the_share_at_its_trees_first_release(monkeypatch, grow):
    """After the prior phase (stumps only, the whole epsilon), the trees' first release draws the thresholds from
    its own records; the structure is fixed after it; the stumps' noise is logged as released."""
    spend = _Spend(monkeypatch)
    s = _schema()
    X, y = _concentrated(1500)
    m = PrivateForestClassifier(s, n_trees=4, height=4, epsilon=2.0, first_batch=100, prior_records=50, grow=grow)
    m.learn_encoded(X[:50], y[:50])  # the prior phase
    assert all(kind == "counts" for kind, _ in spend.log) and m.forest.threshold_spent == 0.0
    spend.log.clear()
    m.learn_encoded(X[50:150], y[50:150])  # the trees' first release: 100 records
    assert spend.read == [100] and spend.log[0] == ("histograms", pytest.approx(0.4))
    assert m.forest.threshold_spent == 0.2 and m.forest.epsilon_per_tree == pytest.approx(2.0 / 5)
    drawn = m.forest.drawn.threshold.copy()
    m.learn_encoded(X[150:], y[150:])
    m.flush()
    assert spend.read == [100] and np.array_equal(m.forest.drawn.threshold, drawn)
    assert m.predict_proba_encoded(X[:5]).shape == (5, 2)
    first_var = [v for _, _, v in m._prior_log][m._n_prior_releases]  # the trees' first release, per stump cell
    assert first_var == pytest.approx(cell_variance("geometric", 1.6 / 5))


def test_a_blob_from_before_keeps_its_released_variance():
    """A blob written when the fit's later releases kept (1 - s) * eps stored no noise variance: it is read as
    what its releases carried, not as releases at the whole epsilon."""
    s = _schema()
    X, y = _concentrated(200)
    f = PrivateForest.create(s, n_trees=3, height=3, epsilon=1.0, threshold_share=0.2).fit_encoded(X, y, prune=False)
    doc = persistence.loads(f.to_bytes())
    doc["noise_variance"], doc["n_releases"] = None, 3
    g = PrivateForest.from_doc(doc)
    assert np.allclose(g.noise_variance, 3 * cell_variance("geometric", 0.8 / 4))


def _cell(f: PrivateForest, counts: np.ndarray, x: float) -> int:
    """The released count of class 0 in the leaf of ``x`` (tree 0)."""
    return int(counts[0, f.structure.apply(np.array([[x]]), f.schema.is_categorical)[0, 0], 0])


def _fresh(s: Schema) -> PrivateForest:
    return PrivateForest.create(s, n_trees=1, height=1, epsilon=2.0, threshold_share=0.25, prior_trees=0, seed=1)


@pytest.mark.slow
def test_empirical_audit_of_a_later_release_at_the_whole_epsilon():
    """Neighbouring streams differ by one record in the second release (x = 5, class 0); the first release drew
    the thresholds (the same history in both worlds: the bound holds given any history). The audit's lower bound
    must not exceed epsilon = 2 and must exceed what the share left (1.5): a later release uses the whole budget,
    no more (what update_encoded merges after the first release is this delta)."""
    s = _schema(d=1)
    f = _fresh(s).update_encoded(*_concentrated(200, d=1))
    assert not f.thresholds_due and f.epsilon_per_tree == 2.0
    N, events = 20000, []
    for extra in (0, 1):
        X, y = np.full((extra, 1), 5.0), np.zeros(extra, dtype=np.int64)
        events.append([sum(_cell(f, f.noisy_delta_encoded(X, y), 5.0) >= 1 for _ in range(N))])
    lb = epsilon_lower_bound(events[0], events[1], N)
    assert 1.5 < lb <= 2.0, (lb, events)


@pytest.mark.slow
def test_empirical_audit_of_the_first_release():
    """Neighbouring first releases: no record, and one at x = 5 of class 0. The redrawn threshold and the counts
    together: the lower bound must not exceed epsilon = 2 (histograms 0.5, counts 1.5) and has power (above 0.5)."""
    s = _schema(d=1)
    base, rng = _fresh(s), SecureRandom()
    N, events = 8000, []
    for extra in (0, 1):
        X, y = np.full((extra, 1), 5.0), np.zeros(extra, dtype=np.int64)
        low = cell = both = 0
        for _ in range(N):
            f = base.with_counts(np.zeros(base.shape, dtype=np.int64), version=0, n_releases=0)
            f.update_encoded(X, y, rng)
            t, c = float(f.structure.threshold[0, 0]) <= 100 / 16, _cell(f, f.counts, 5.0) >= 1
            low, cell, both = low + t, cell + c, both + (t and c)
        events.append([low, cell, both])
    lb = epsilon_lower_bound(events[0], events[1], N)
    assert 0.5 < lb <= 2.0, (lb, events)
