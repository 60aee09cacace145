"""Checks every learner of the catalogue passes (the stream's forest included), run through the job runner.

- the ledger is charged before any record is read, and a refused charge reads nothing;
- the fitted model's blob round-trips: decoded, it predicts what the fitted model predicts, and encodes to
  the same fields (but the time it was written);
- the same seed gives the same model: the structure (forests) or the whole blob (learners with a test seed).

A learner added to the catalogue is checked here without a line of its own.
"""

from __future__ import annotations

import warnings

import msgpack
import numpy as np
import pytest

from streamdp.jobs.runner import JobSpec, _build, run_job
from streamdp.learners import load_model
from streamdp.learners.catalogue import ALGORITHMS
from streamdp.privacy import NotPrivateWarning
from streamdp.privacy.ledger import BudgetExceeded, InMemoryLedger
from streamdp.records.datasets import load

DS = load("congressional-voting")
X = DS.schema.encode(DS.X).X
Y = DS.schema.encode_labels(DS.y)
NAMES = sorted(ALGORITHMS)
#: Parameters an algorithm cannot run without, and a small k-anonymous forest (the rest: the catalogue's defaults).
REQUIRED = {"kanon-forest": {"k": 5, "beta": 0.01, "n_trees": 3, "height": 3}}


def _spec(name: str, epsilon: float = 2.0, **params) -> JobSpec:
    return JobSpec(algorithm=name, epsilon=epsilon, params={**REQUIRED.get(name, {}), **params})


def _fit(name: str, **kw) -> bytes:
    ledger = InMemoryLedger()
    ledger.set_budget("votes", 10.0, delta=0.9)
    return run_job(_spec(name, **kw), DS.schema, lambda: (X, Y), ledger, "votes", f"job-{name}").blob


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "kanon-forest" else n for n in NAMES])
def test_the_ledger_is_charged_before_any_record_is_read(name):
    ledger = InMemoryLedger()
    ledger.set_budget("votes", 1.0, delta=0.9)
    seen_when_read = []

    def records():
        seen_when_read.append(ledger.spent("votes")[0])
        return X, Y

    with pytest.raises(BudgetExceeded):
        run_job(_spec(name, epsilon=1.5), DS.schema, records, ledger, "votes", "too-much")
    assert seen_when_read == [] and ledger.spent("votes")[0] == 0.0

    run_job(_spec(name, epsilon=0.5), DS.schema, records, ledger, "votes", "fits")
    assert seen_when_read == [pytest.approx(0.5)]


def _content(blob: bytes) -> dict:
    """A blob's fields but the time it was written."""
    doc = msgpack.unpackb(blob, raw=False)
    doc.pop("created", None)
    return doc


@pytest.mark.parametrize("name", NAMES)
def test_the_blob_round_trips(name):
    data = _fit(name)
    model = load_model(data)
    again = load_model(model.to_bytes())
    assert _content(model.to_bytes()) == _content(data)
    np.testing.assert_array_equal(model.predict(DS.X), again.predict(DS.X))
    np.testing.assert_allclose(model.predict_proba(DS.X), again.predict_proba(DS.X))
    assert set(model.predict(DS.X)) <= set(DS.schema.classes)


@pytest.mark.parametrize("name", NAMES)
def test_the_same_seed_gives_the_same_model(name):
    a = ALGORITHMS[name]
    if a.is_forest:
        one, two, other = (_build(a, _spec(name, seed=s), DS.schema) for s in (3, 3, 4))
        for attr in ("feature", "threshold", "child"):
            np.testing.assert_array_equal(getattr(one.structure, attr), getattr(two.structure, attr))
        assert any(
            not np.array_equal(getattr(one.structure, attr), getattr(other.structure, attr))
            for attr in ("feature", "threshold")
        )
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        fits = []
        for seed in (5, 5, 6):
            seeds = {"noise_seed": seed, **({"seed": seed} if "seed" in a.cls()._param_names() else {})}
            m = a.cls()(schema=DS.schema, epsilon=1.0, **seeds).fit(DS.X, DS.y)
            fits.append(m.predict_proba(DS.X))
    np.testing.assert_array_equal(fits[0], fits[1])
    assert not np.array_equal(fits[0], fits[2])


@pytest.mark.parametrize("name", ["sulq-id3", "diffp-id3", "diffp-c45", "hanisch-forest", "dpea"])
def test_a_second_fit_warns_that_it_spends_epsilon_again_as_the_forest_does(name):
    """A batch learner fitted twice on records spent 2 epsilon with no word (the forest warned); with a ledger the
    second spend is charged, so no warning; a fit on a PrivateDataset is charged to it."""
    ds = DS
    m = ALGORITHMS[name].cls()(ds.schema, epsilon=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        m.fit(ds.X, ds.y)  # the first fit: no warning
    with pytest.warns(UserWarning, match="this learner holds a release already: fitting again spends epsilon=1 more"):
        m.fit(ds.X, ds.y)
    ledger = InMemoryLedger()
    ledger.set_budget("votes", 5.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        m.fit(ds.X, ds.y, ledger=ledger, source="votes")
    assert ledger.spent("votes")[0] == pytest.approx(1.0)
