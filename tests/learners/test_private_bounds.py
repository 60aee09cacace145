"""The unit of privacy in the data layer: a privacy id, at most K records per id, noise per person."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest

from streamdp import Schema
from streamdp.learners import load_model
from streamdp.learners.catalogue import ALGORITHMS
from streamdp.learners.private_data import PrivateDataset
from streamdp.privacy.mechanisms import NotPrivateWarning
from tests.privacy.test_audit import epsilon_lower_bound

SCHEMA = Schema.from_dict(
    {
        "attributes": [
            {"name": "a", "type": "categorical", "values": ["p", "q", "r"]},
            {"name": "b", "type": "categorical", "values": [0, 1]},
        ],
        "label": {"name": "y", "values": ["no", "yes"]},
    }
)


def people(counts: dict[str, int], seed: int = 0) -> tuple[list[dict], list[str]]:
    """Records as dicts with a ``user`` column: ``counts[user]`` records each, attribute ``a`` cycling p, q, r
    (a person's records fall in every part of a partition on ``a``)."""
    rng = np.random.default_rng(seed)
    rows, ys = [], []
    for user, n in counts.items():
        for i in range(n):
            rows.append({"user": user, "a": "pqr"[i % 3], "b": int(rng.integers(2))})
            ys.append("yes" if rng.random() < 0.5 else "no")
    return rows, ys


def exact(rows, ys, k, **kw):
    """A dataset of infinite allotment: its counts are exact (the bound is what is tested)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        return PrivateDataset.from_records(
            SCHEMA, rows, ys, epsilon=math.inf, privacy_id="user", max_records_per_id=k, **kw
        )


def count(d: PrivateDataset) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        return d.noisy_count(math.inf)


def test_contributions_beyond_k_never_reach_a_count():
    rows, ys = people({"ann": 50, "bob": 2, "cy": 7})
    d = exact(rows, ys, 3)
    assert d.records_per_unit == 3
    assert count(d) == 3 + 2 + 3
    parts = d.partition("a")
    assert sum(count(p) for p in parts) == 8
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        assert int(d.noisy_class_counts(math.inf).sum()) == 8
        assert int(d.noisy_contingency("b", math.inf).sum()) == 8


def test_the_id_comes_from_a_column_a_frame_or_an_array_and_is_never_an_attribute():
    rows, ys = people({"ann": 4, "bob": 4})
    assert count(exact(rows, ys, 1)) == 2
    frame = pd.DataFrame(rows)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        d = PrivateDataset.from_records(SCHEMA, frame, ys, epsilon=math.inf, privacy_id="user", max_records_per_id=2)
        assert count(d) == 4
        X = [[r["a"], r["b"]] for r in rows]
        d = PrivateDataset.from_records(
            SCHEMA, X, ys, epsilon=math.inf, privacy_id=[r["user"] for r in rows], max_records_per_id=3
        )
        assert count(d) == 6
    with pytest.raises(ValueError, match="'a' is a schema attribute"):
        PrivateDataset.from_records(SCHEMA, rows, ys, epsilon=1.0, privacy_id="a", max_records_per_id=2)
    with pytest.raises(ValueError, match="'y' is a schema attribute or the label"):
        PrivateDataset.from_records(SCHEMA, rows, ys, epsilon=1.0, privacy_id="y", max_records_per_id=2)
    with pytest.raises(ValueError, match="names a column: X must be records"):
        PrivateDataset.from_records(SCHEMA, X, ys, epsilon=1.0, privacy_id="user", max_records_per_id=2)
    with pytest.raises(ValueError, match="not a column of X"):
        PrivateDataset.from_records(SCHEMA, frame, ys, epsilon=1.0, privacy_id="who", max_records_per_id=2)
    with pytest.raises(ValueError, match="has no privacy id"):
        PrivateDataset.from_records(SCHEMA, [{"a": "p", "b": 0}], ["no"], epsilon=1.0, privacy_id="user",
                                    max_records_per_id=2)  # fmt: skip
    with pytest.raises(ValueError, match="privacy_id needs max_records_per_id"):
        PrivateDataset.from_records(SCHEMA, rows, ys, epsilon=1.0, privacy_id="user")


def test_dropped_invalid_rows_keep_their_ids_aligned():
    rows, ys = people({"ann": 3, "bob": 3})
    rows[0] = {**rows[0], "a": "not-a-value"}  # ann's first record is invalid and dropped
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        d = PrivateDataset.from_records(
            SCHEMA, rows, ys, epsilon=math.inf, privacy_id="user", max_records_per_id=5, on_invalid="drop"
        )
    assert count(d) == 5


def test_without_an_id_the_unit_is_a_record():
    rows, ys = people({"ann": 5})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        d = PrivateDataset.from_records(SCHEMA, rows, ys, epsilon=math.inf)
    assert d.records_per_unit == 1 and count(d) == 5


@pytest.mark.slow
def test_empirical_epsilon_audit_one_persons_records_over_several_parts():
    """Neighbours: the same crowd with and without one person of K = 3 records, one in each part of a
    partition (their records spread over parts: parallel composition no longer covers them, the noise per
    person must), epsilon 1, one count per part. Events: every part at least t above its crowd count (the
    ratio is exactly e**epsilon at t = 1) and the sum. The audit's lower bound must stay at or below epsilon,
    and come close (power); noise per record (K ignored, the control) is caught above it."""
    eps, k = 1.0, 3
    crowd = {f"u{i}": 1 + i % 3 for i in range(30)}  # at most K each: the crowd's part counts are fixed
    worlds = [people(crowd), people({**crowd, "target": k})]
    base = np.array([sum(1 for r in worlds[0][0] if r["a"] == v) for v in "pqr"])

    def releases(rows, ys, unit, n):
        out = np.empty((n, 3), dtype=np.int64)
        for t in range(n):
            d = PrivateDataset.from_records(SCHEMA, rows, ys, epsilon=eps, privacy_id="user", max_records_per_id=k)
            d.records_per_unit = unit  # (unit 1: noise per record, the control)
            out[t] = [p.noisy_count(eps) for p in d.partition("a")]
        return out - base

    def events(out):
        low = out.min(axis=1)
        return [int(np.sum(low >= t)) for t in range(-2, 4)] + [int(np.sum(out.sum(axis=1) >= t)) for t in range(6)]

    n = 10_000
    ok = [releases(*w, k, n) for w in worlds]
    lb = epsilon_lower_bound(events(ok[0]), events(ok[1]), n)
    assert 0.5 * eps < lb <= eps, lb
    naive = [releases(*w, 1, n // 4) for w in worlds]
    assert epsilon_lower_bound(events(naive[0]), events(naive[1]), n // 4) > eps


FAST = {
    "dpea": {"max_depth": 2},
    "sulq-id3": {"max_depth": 2},
    "diffp-id3": {"max_depth": 2},
    "diffp-c45": {"max_depth": 2},
    "hanisch-forest": {"n_trees": 2, "max_depth": 2},
    "auto": {"candidates": [("dpea", {"max_depth": 2}), ("diffp-id3", {"max_depth": 2})]},  # (learners' blobs)
}


@pytest.mark.parametrize("name", sorted(a for a in ALGORITHMS if not ALGORITHMS[a].is_forest))
def test_every_learner_fits_per_person_and_keeps_the_unit_in_its_blob(name):
    a = ALGORITHMS[name]
    rows, ys = people({f"u{i}": 1 + i % 7 for i in range(200)})
    params = {k: v for k, v in FAST.get(name, {}).items() if k in a.cls()._param_names()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = a.cls()(schema=SCHEMA, epsilon=2.0, **params)
        m.fit(rows, ys, privacy_id="user", max_records_per_id=2)
        assert m.records_per_unit_ == 2
        assert math.isclose(m.epsilon_spent_, 2.0) or m.epsilon_spent_ <= 2.0 + 1e-9
        back = load_model(m.to_bytes())
    assert back.records_per_unit_ == 2
    assert back.cell_variance() == m.cell_variance()
    assert m.predict(rows[:5]).shape == (5,)
    with pytest.raises(ValueError, match="takes no privacy_id"):
        d = PrivateDataset.from_records(SCHEMA, rows, ys, epsilon=2.0)
        m.fit(d, privacy_id="user", max_records_per_id=2)
