import pytest

from streamdp import PrivateForest
from streamdp.records.datasets import load


@pytest.mark.filterwarnings(
    "ignore:PrivateForest.create\\(epsilon=inf\\):streamdp.privacy.NotPrivateWarning"
)  # (exact counts on purpose)
def test_votes_forest_learns_something():
    ds = load("congressional-voting")
    f = PrivateForest.create(ds.schema, n_trees=5, epsilon=float("inf"), seed=0)
    f.fit(ds.X[:300], ds.y[:300])
    assert (f.predict(ds.X[300:]) == ds.y[300:]).mean() > 0.85
