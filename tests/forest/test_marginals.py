"""Numeric thresholds where the data is: densities, the fit's share of epsilon, declared quantiles, the audit."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from streamdp import NotPrivateWarning, PrivateForest, Schema
from streamdp.estimation.rule import cell_variance
from streamdp.forest import first_release as first_module
from streamdp.forest import marginals as marginals_module
from streamdp.forest.marginals import Marginals, noisy_histograms, noisy_marginals
from streamdp.forest.structure import ForestStructure
from streamdp.jobs.runner import JobSpec, run_job
from streamdp.learners import load_model
from streamdp.options import DEFAULT_THRESHOLD_SHARE
from streamdp.privacy.ledger import InMemoryLedger
from streamdp.privacy.mechanisms import SecureRandom
from streamdp.records.domains import SchemaError
from tests.privacy.test_audit import epsilon_lower_bound


def _schema(d: int = 3, quantiles: list | None = None, categorical: bool = False) -> Schema:
    attrs: list[dict] = [{"name": f"x{i}", "type": "numeric", "min": 0, "max": 100} for i in range(d)]
    if quantiles is not None:
        attrs[0]["quantiles"] = quantiles
    if categorical:
        attrs.append({"name": "c", "type": "categorical", "values": ["a", "b"]})
    return Schema.from_dict({"attributes": attrs, "label": {"name": "y", "values": [0, 1]}})


def _numeric_thresholds(structure: ForestStructure, schema: Schema) -> np.ndarray:
    inner = (structure.leaf < 0) & (structure.feature < schema.n_attributes)
    return structure.threshold[inner & ~np.append(schema.is_categorical, False)[structure.feature]]


def _concentrated(n: int = 2000, d: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Every record's attributes in [38, 43] of the declared [0, 100]: the seventh of 16 bins, [37.5, 43.75]."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(38, 43, (n, d))
    return X, (X[:, 0] > 40.5).astype(np.int64)


def test_declared_quantiles_give_equal_mass_between_cut_points():
    m = Marginals.declared(_schema(quantiles=[10, 11, 12]))
    assert m is not None
    q = np.zeros(4, dtype=np.int64)
    assert np.allclose(m.cdf(q, np.array([0.0, 10.0, 11.5, 100.0])), [0, 0.25, 0.625, 1])
    draws = m.sample(np.zeros(20000, dtype=np.int64), np.zeros(20000), np.full(20000, 100.0), np.random.default_rng(1))
    inside = np.mean((draws >= 10) & (draws <= 12))
    assert abs(inside - 0.5) < 0.02  # 0.5 expected; 0.02 is over 5 standard deviations
    # restricted to a narrowed range: the draws stay in it
    lo, hi = np.full(1000, 50.0), np.full(1000, 60.0)
    d = m.sample(np.zeros(1000, dtype=np.int64), lo, hi, np.random.default_rng(2))
    assert d.min() >= 50 and d.max() <= 60
    assert Marginals.declared(_schema()) is None  # nothing declared: uniform, no density


def test_a_range_the_density_puts_no_mass_in_is_drawn_uniformly():
    s = _schema(d=1)
    m = Marginals.from_weights(s, np.array([[1.0, 0.0, 0.0, 0.0]]))  # all in [0, 25]
    d = m.sample(np.zeros(4000, dtype=np.int64), np.full(4000, 50.0), np.full(4000, 100.0), np.random.default_rng(0))
    assert d.min() >= 50 and d.max() <= 100 and abs(d.mean() - 75) < 1.5
    assert np.allclose(Marginals.from_weights(s, np.zeros((1, 4))).cum[0], [0, 0.25, 0.5, 0.75, 1])  # no weight


def test_thresholds_follow_a_concentrated_marginal():
    """Records in one bin of [0, 100]: with a share, the trees' thresholds sit in that bin; uniform draws put
    about 6% of the roots there."""
    s = _schema()
    X, y = _concentrated()
    f = PrivateForest.create(s, n_trees=10, height=4, epsilon=20.0, threshold_share=0.5).fit(X, y)
    t = _numeric_thresholds(f.drawn, s)
    assert t.size > 20 and np.mean((t >= 37.5) & (t <= 43.75)) > 0.9
    g = PrivateForest.create(s, n_trees=10, height=4, epsilon=20.0, threshold_share=0.0).fit(X, y)
    u = _numeric_thresholds(g.drawn, s)
    assert np.mean((u >= 37.5) & (u <= 43.75)) < 0.3
    assert f.marginals is not None and f.threshold_spent == 0.5


def test_redrawn_thresholds_keep_the_trees_shape():
    s = _schema(categorical=True)
    fs = ForestStructure.draw(s, n_trees=5, height=5, seed=3)
    m = Marginals.from_weights(s, np.array([[0, 1.0], [1.0, 0], [0, 1.0]]))
    g = fs.with_thresholds(s, m, seed=1)
    for name in ("feature", "child", "leaf", "n_leaves"):
        assert np.array_equal(getattr(g, name), getattr(fs, name))
    g.validate(s)
    assert np.array_equal(np.isfinite(g.threshold), np.isfinite(fs.threshold))


def test_the_fit_spends_the_share_on_histograms_and_the_rest_on_counts(monkeypatch):
    s = _schema()
    X, y = _concentrated(500)
    spent = []
    real = first_module.noisy_marginals

    def spy(X, schema, epsilon, rng, *a, **kw):
        spent.append(epsilon)
        return real(X, schema, epsilon, rng, *a, **kw)

    monkeypatch.setattr(first_module, "noisy_marginals", spy)
    f = PrivateForest.create(s, n_trees=4, height=3, epsilon=2.0, threshold_share=0.25)
    assert f.epsilon_per_tree == pytest.approx(2.0 / 5)  # nothing spent before the fit
    f.fit(X, y)
    assert spent == [pytest.approx(0.5)]
    # the counts got the rest (a stump's one cell shows it), and a later release gets the whole epsilon
    assert f.noise_variance[-1] == pytest.approx(cell_variance("geometric", 1.5 / 5))
    assert f.epsilon_per_tree * f.n_released_trees == pytest.approx(f.epsilon)
    g = PrivateForest.from_bytes(f.to_bytes())
    assert (g.threshold_share, g.threshold_spent, g.epsilon_per_tree) == (0.25, 0.25, f.epsilon_per_tree)
    assert np.array_equal(g.noise_variance, f.noise_variance)


def test_a_job_charges_the_ledger_once_for_the_histograms_and_the_counts():
    s = _schema()
    X, y = _concentrated(300)
    led = InMemoryLedger()
    led.set_budget("src", 1.0)
    read_after = []

    def loader():
        read_after.append(led.spent("src")[0])
        return s.encode(X, y).X, y

    spec = JobSpec("private-rdt", 1.0, {"n_trees": 3, "height": 3, "threshold_share": 0.2})
    model = load_model(run_job(spec, s, loader, led, "src", "job-t").blob)
    assert read_after == [1.0] and led.spent("src") == (1.0, 0.0)  # the whole epsilon, charged before reading
    assert (model.threshold_share, model.threshold_spent) == (0.2, 0.2)
    assert model.noise_variance[-1] == pytest.approx(cell_variance("geometric", 0.8 / 4))  # the counts: the rest


def test_defaults_follow_the_schema():
    assert PrivateForest.create(_schema(), n_trees=2, height=2).threshold_share == DEFAULT_THRESHOLD_SHARE
    declared = _schema(d=1, quantiles=[10, 20])
    assert PrivateForest.create(declared, n_trees=2, height=2).threshold_share == 0.0
    votes = Schema.from_dict(
        {
            "attributes": [{"name": "c", "type": "categorical", "values": [0, 1]}],
            "label": {"name": "y", "values": [0, 1]},
        }
    )
    assert PrivateForest.create(votes, n_trees=2, height=2).threshold_share == 0.0


def test_bad_shares_and_quantiles_are_refused_clearly():
    s = _schema()
    for bad in (1.0, -0.1, float("nan"), "0.1", True):
        with pytest.raises(ValueError, match="threshold_share"):
            PrivateForest.create(s, n_trees=2, height=2, threshold_share=bad)
    with pytest.raises(ValueError, match="threshold_share applies to mechanism='geometric' or 'laplace'"):
        PrivateForest.create(s, n_trees=2, height=2, mechanism="kanon", k=2, beta=0.5, threshold_share=0.1)
    votes = Schema.from_dict(
        {
            "attributes": [{"name": "c", "type": "categorical", "values": [0, 1]}],
            "label": {"name": "y", "values": [0, 1]},
        }
    )
    with pytest.raises(ValueError, match="needs a numeric attribute"):
        PrivateForest.create(votes, n_trees=2, height=2, threshold_share=0.1)
    with pytest.raises(SchemaError, match="quantile 130 is not strictly inside the range"):
        _schema(quantiles=[10, 130])
    with pytest.raises(SchemaError, match="quantile 0 is not strictly inside"):
        _schema(quantiles=[0, 10])
    with pytest.raises(SchemaError, match="quantiles must increase strictly"):
        _schema(quantiles=[20, 10])
    with pytest.raises(SchemaError, match="must be a finite number"):
        _schema(quantiles=[10, "x"])
    with pytest.raises(SchemaError, match="must be a list of 1 to"):
        _schema(quantiles=[])
    with pytest.raises(SchemaError, match="'quantiles' apply to numeric attributes only"):
        Schema.from_dict(
            {
                "attributes": [{"name": "c", "type": "categorical", "values": [0, 1], "quantiles": [0.5]}],
                "label": {"name": "y", "values": [0, 1]},
            }
        )
    with pytest.raises(ValueError, match="has no numeric attribute"):
        noisy_marginals(np.zeros((3, 1)), votes, 1.0, SecureRandom())


def test_declared_quantiles_place_a_streams_thresholds_before_any_record():
    s = _schema(d=1, quantiles=[40, 41, 42, 43, 44])  # five sixths of the mass in [40, 44]
    assert Schema.from_dict(s.to_dict()) == s  # the quantiles are part of the schema (and of a model's blob)
    fs = ForestStructure.draw(s, n_trees=50, height=1, seed=0)
    t = _numeric_thresholds(fs, s)
    assert abs(np.mean((t >= 40) & (t <= 44)) - 4 / 6) < 0.25
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        f = PrivateForest.create(s, n_trees=3, height=2, epsilon=1.0, seed=1)
    assert PrivateForest.from_bytes(f.to_bytes()).schema == s


def test_pruning_shares_follow_the_density():
    """A root split at the middle of the density's mass gives each child half of the records, where the
    uniform share would give the left child its part of the range."""
    s = _schema(d=1)
    fs = ForestStructure.draw(s, n_trees=1, height=1, seed=0)
    m = Marginals.from_weights(s, np.array([[1.0, 1.0, 0.0, 0.0]]))  # uniform over [0, 50]
    t = float(fs.threshold[0, 0])
    seen = []

    def split(nodes, share, rate):
        seen.append(share.copy())
        return np.ones(nodes.size, dtype=bool), rate

    fs.pruned(s, split, 1.0, m)
    expected = min(t, 50.0) / 50.0
    assert np.allclose(seen[1], [expected, 1 - expected])


@pytest.mark.slow
def test_empirical_epsilon_audit_of_the_histogram_release():
    """Neighbouring datasets: none, and one record in the first bin of both attributes. With epsilon 2 over
    two attributes (1 each), the events are both first bins at 1 or more, and neither; the densities are
    computed from these counts alone. The Clopper-Pearson lower bound (failure probability 1e-6) must not
    exceed 2, and the audit must have power (above 1)."""
    s = _schema(d=2)
    N = 20000
    rng = SecureRandom()
    events = []
    for X in (np.zeros((0, 2)), np.zeros((1, 2))):
        both = neither = 0
        for _ in range(N):
            first = noisy_histograms(X, s, 2.0, rng)[:, 0] >= 1
            both += bool(first.all())
            neither += not first.any()
        events.append([both, neither])
    lb = epsilon_lower_bound(events[0], events[1], N)
    assert 1.0 < lb <= 2.0, (lb, events)


def test_the_densities_are_computed_from_the_noisy_counts_alone(monkeypatch):
    """noisy_marginals is noisy_histograms then arithmetic on its output: the same noisy counts give the same
    densities, whatever the records."""
    s = _schema(d=2)
    fixed = np.array([[5] * 8 + [0] * 8, [0] * 15 + [40]])
    monkeypatch.setattr(marginals_module, "noisy_histograms", lambda *a, **k: fixed)
    ms = [noisy_marginals(X, s, 1.0, SecureRandom()) for X in (np.zeros((0, 2)), np.full((50, 2), 99.0))]
    assert all(np.array_equal(a, b) for a, b in zip(ms[0].cum, ms[1].cum))
