"""The river classifier's trees' releases weighed by their sizes (streamdp.river.release_weights)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("river")

from river.datasets import synth  # noqa: E402

from streamdp.privacy.mechanisms import NotPrivateWarning  # noqa: E402
from streamdp.river import (
    PrivateForestClassifier,  # noqa: E402
    release_weights,  # noqa: E402
)
from streamdp.river import schemas as rs  # noqa: E402
from streamdp.river.release_weights import SizeWeighted  # noqa: E402

SIZES = (100, 200, 400, 800)


def test_the_weighted_estimate_keeps_the_counts_and_cuts_the_noise():
    """20,000 simulated streams of doubling releases (a cell holding 30% of each batch, noise sd 20 per release):
    the estimate's mean is the 450 records' count within 5 standard errors (fails with probability < 1e-6),
    and its variance is the sampling's plus N^2 / sum m^2 (2.65) releases' noise, within 5%, where the plain
    sum carries 4 (the weighted variance's sampling part is sum m^3 N^2 / (sum m^2)^2 times the plain one's)."""
    rng = np.random.default_rng(0)
    trials, p, sd = 20_000, 0.3, 20.0
    est = np.zeros(trials)
    w = [SizeWeighted() for _ in range(trials)]
    for m in SIZES:
        y = rng.binomial(m, p, trials) + rng.normal(0.0, sd, trials)
        for t in range(trials):
            est[t] = w[t].add(np.array([y[t]]), m, sd**2)[0][0]
    n, q, cube = sum(SIZES), sum(m * m for m in SIZES), sum(m**3 for m in SIZES)
    assert abs(est.mean() - n * p) < 5 * est.std() / np.sqrt(trials)
    expected = sd**2 * n * n / q + p * (1 - p) * cube * n * n / q**2
    assert abs(est.var() / expected - 1) < 0.05
    assert w[0].variance == pytest.approx(sd**2 * n * n / q) and n * n / q < 0.7 * len(SIZES)


def _model(**kw) -> PrivateForestClassifier:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        return PrivateForestClassifier(rs.agrawal_schema(), n_trees=3, height=4, seed=3, **kw)


def _learn(model: PrivateForestClassifier, data: list) -> PrivateForestClassifier:
    enc = model.encoder
    X, _ = enc.encode_many([x for x, _ in data])
    model.learn_encoded(X, np.array([enc.encode_label(label) for _, label in data]))
    return model


def test_the_classifier_weighs_its_trees_and_keeps_its_stumps_plain(monkeypatch):
    """The same seeded releases (a 100-record prior phase, then the trees' 100, 200, 400, 800): the stumps are the
    plain sum either way; the trees' noise variance is N^2 / sum m^2 releases' worth, not 4; a window sums."""
    data = list(synth.Agrawal(seed=1).take(1600))
    weighed = _learn(_model(), data)
    monkeypatch.setattr(release_weights, "WEIGHED", False)
    plain = _learn(_model(), data)
    f, g, T = weighed.forest, plain.forest, weighed.forest.n_trees
    n, q = sum(SIZES), sum(m * m for m in SIZES)
    assert weighed.n_releases == plain.n_releases == 5 + 4  # the prior phase's 4, 8, 16, 32, 40; the trees' four
    assert np.array_equal(f.counts[T:], g.counts[T:]) and np.allclose(f.noise_variance[T:], g.noise_variance[T:])
    assert np.allclose(f.noise_variance[:T], f.cell_variance * n * n / q)
    assert np.allclose(g.noise_variance[:T], 4 * g.cell_variance)
    assert not np.array_equal(f.counts[:T], g.counts[:T])
    assert not f.counts[:T][~f.real_cells[:T]].any()  # padding stays empty
    assert _model(window=3)._weights is None
