"""Private learner selection: the whole epsilon and no more, the choice a function of the noisy selection only."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from streamdp import PrivateForest
from streamdp.learners import AutoPrivateClassifier, load_model
from streamdp.learners.catalogue import AlgorithmError
from streamdp.learners.private_data import PrivateDataset
from streamdp.learners.selection import default_candidates, select_learner
from streamdp.privacy.ledger import BudgetExceeded, InMemoryLedger
from streamdp.records.datasets import load

VOTES = load("congressional-voting")
SMALL = [("private-rdt", {"n_trees": 3}), ("diffp-id3", {"max_depth": 2})]


def votes(epsilon: float) -> PrivateDataset:
    return PrivateDataset.from_records(VOTES.schema, VOTES.X, VOTES.y, epsilon=epsilon)


@pytest.mark.parametrize("share", [0.3, 0.5, 1.0])
def test_the_ledger_is_charged_exactly_epsilon_and_the_data_layer_spends_it_all(share):
    ledger = InMemoryLedger()
    ledger.set_budget("votes", 2.0)
    clf = AutoPrivateClassifier(VOTES.schema, epsilon=0.7, candidates=SMALL, selection_share=share)
    clf.fit(VOTES.X, VOTES.y, ledger=ledger, source="votes")
    assert ledger.spent("votes") == (pytest.approx(0.7), 0.0)
    assert clf.epsilon_spent_ == pytest.approx(0.7)
    assert clf.winner_ in SMALL
    assert set(clf.predict(VOTES.X)) <= set(VOTES.schema.classes)


def test_a_refit_spends_the_rest_and_no_refit_keeps_the_share_model():
    pds = votes(1.0)
    sel = select_learner(pds, 1.0, SMALL, selection_share=0.25)
    assert pds.spent == pytest.approx(1.0)
    selection = [e for _, what, e in pds.log if what.startswith("most_accurate")]
    assert selection == [pytest.approx(0.25)]
    in_shares = [e for path, _, e in pds.log if path and path[0][0] == "share"]
    assert in_shares and max(in_shares) <= 0.25 + 1e-12  # the shares: 0.25 (parallel), the refit: the rest
    assert sum(e for path, _, e in pds.log if not path) > 0  # the refit reads the root
    assert isinstance(sel.model, PrivateForest) == (sel.winner[0] == "private-rdt")


def test_the_choice_is_the_noisy_selection_and_nothing_else(monkeypatch):
    """Whatever the data, the winner is the index the held-out share's most_accurate returned."""
    for pick in (0, 1):
        monkeypatch.setattr(PrivateDataset, "most_accurate", lambda self, predictors, epsilon, p=pick: p)
        for share in (0.5, 1.0):
            assert select_learner(votes(1.0), 1.0, SMALL, share).winner == SMALL[pick]


def test_selection_is_refused_before_reading_when_the_budget_is_short():
    pds = votes(0.5)
    with pytest.raises(BudgetExceeded):
        select_learner(pds, 0.6, SMALL)
    assert pds.spent == 0.0 and pds.log == []


@pytest.mark.parametrize(
    "candidates, match",
    [
        ([], "non-empty list"),
        ([("nope", {})], "unknown algorithm; a candidate is one of dpea, "),
        ([("auto", {})], "'auto': a candidate is one of .*private-rdt$"),
        ([("kanon-forest", {"k": 5, "beta": 0.1})], "'kanon-forest': a candidate is one of"),
        ([("dpea", {"max_depth": 99})], "max_depth must be"),
        (["dpea"], "is \\[algorithm, params\\]"),
    ],
)
def test_bad_candidates_are_refused_before_anything_is_charged(candidates, match):
    ledger = InMemoryLedger()
    ledger.set_budget("votes", 1.0)
    with pytest.raises((AlgorithmError, ValueError), match=match):
        AutoPrivateClassifier(VOTES.schema, epsilon=0.5, candidates=candidates).fit(
            VOTES.X, VOTES.y, ledger=ledger, source="votes"
        )
    assert ledger.spent("votes") == (0.0, 0.0)


def _schema(numeric: int, categorical: int):
    from streamdp.records.schema import Schema

    xs = [{"name": f"x{i}", "type": "numeric", "min": 0, "max": 1} for i in range(numeric)]
    cs = [{"name": f"c{i}", "type": "categorical", "values": [0, 1, 2]} for i in range(categorical)]
    return Schema.from_dict({"attributes": xs + cs, "label": {"name": "y", "values": [0, 1]}})


def test_the_defaults_offer_dpea_only_where_categorical_attributes_outnumber_numeric_ones():
    """A trial's finding: on a schema with numeric columns `auto` picked DPEA, which ignores them, and scored the
    majority share (benchmarks/results/auto_numeric_candidates.md: synth-linear with 3 categorical columns)."""
    names = lambda s: [name for name, _ in default_candidates(s)]  # noqa: E731
    assert names(_schema(1, 0)) == names(_schema(1, 1)) == names(_schema(20, 3)) == ["private-rdt"]
    assert names(_schema(6, 8)) == names(_schema(0, 2)) == names(VOTES.schema) == ["private-rdt", "dpea"]


def test_auto_on_a_mostly_numeric_schema_fits_the_forest_and_warns_of_nothing():
    """No DPEA candidate, so no IgnoredAttributesWarning from a learner that lost or won; the winner is named."""
    rng = np.random.default_rng(0)
    X = np.hstack([rng.uniform(0, 1, (300, 4)), rng.integers(0, 3, (300, 1))]).astype(object)
    y = (X[:, 0].astype(float) > 0.5).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clf = AutoPrivateClassifier(_schema(4, 1), epsilon=1.0).fit(X, y)
    assert clf.learner_ == "private-rdt" and clf.winner_ == ("private-rdt", {})


def test_only_the_winners_warnings_are_raised():
    """Candidates fitted on shares warn into a list; only the chosen one's are raised (a forest's win: none)."""
    from streamdp.learners import IgnoredAttributesWarning

    rng = np.random.default_rng(1)
    X = np.hstack([rng.uniform(0, 1, (400, 1)), rng.integers(0, 3, (400, 1))]).astype(object)
    y = (X[:, 0].astype(float) > 0.5).astype(int)
    cands = [("private-rdt", {}), ("dpea", {})]
    winners = set()
    for _ in range(6):  # (the draw is private: either may win)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            clf = AutoPrivateClassifier(_schema(1, 1), epsilon=2.0, candidates=cands, selection_share=1.0).fit(X, y)
        ignored = [w for w in caught if issubclass(w.category, IgnoredAttributesWarning)]
        assert len(ignored) == (1 if clf.winner_[0] == "dpea" else 0), clf.winner_
        winners.add(clf.learner_)
    assert winners <= {"private-rdt", "dpea"}


def test_the_blob_is_the_winners_and_one_candidate_gets_everything():
    clf = AutoPrivateClassifier(VOTES.schema, epsilon=1.0, candidates=[("diffp-id3", {"max_depth": 2})])
    clf.fit(VOTES.X, VOTES.y)
    assert clf.epsilon_spent_ == pytest.approx(1.0) and clf.model_.epsilon == 1.0
    again = load_model(clf.to_bytes())
    np.testing.assert_array_equal(again.predict(VOTES.X), clf.predict(VOTES.X))
    with pytest.raises(ValueError, match="selection_share"):
        AutoPrivateClassifier(VOTES.schema, selection_share=0).fit(VOTES.X, VOTES.y)
