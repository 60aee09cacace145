"""The job runner: charge first and once per job id, refuse bad jobs with clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from streamdp.forest.model import PrivateForest
from streamdp.jobs import runner
from streamdp.jobs.runner import JobError, JobSpec, run_job
from streamdp.learners import load_model
from streamdp.privacy.ledger import BudgetExceeded, InMemoryLedger
from streamdp.records.datasets import load

VOTES = load("congressional-voting")


# -- pure ------------------------------------------------------------------------------------
def test_run_job_charges_before_loading_and_once_per_job_id():
    led = InMemoryLedger()
    led.set_budget("src", 1.0)
    enc = VOTES.schema.encode(VOTES.X, VOTES.y)
    calls = []

    def loader():
        calls.append(led.spent("src")[0])  # what was charged when the data was read
        return enc.X, enc.y

    spec = JobSpec("private-rdt", 0.75, {"n_trees": 3, "height": 2})
    a = run_job(spec, VOTES.schema, loader, led, "src", "job-a")
    b = run_job(spec, VOTES.schema, loader, led, "src", "job-a")  # a retry: same key, charged once
    assert calls == [0.75, 0.75] and led.spent("src") == (0.75, 0.0)
    assert isinstance(load_model(a.blob), PrivateForest) and a.blob != b.blob
    with pytest.raises(BudgetExceeded, match="refused before reading any data"):
        run_job(spec, VOTES.schema, loader, led, "src", "job-b")
    assert len(calls) == 2  # the refused job never called the loader


def test_bad_jobs_are_refused_with_clear_errors():
    with pytest.raises(JobError, match="unknown algorithm 'nope'; known: dpea"):
        run_job(JobSpec("nope", 1.0), VOTES.schema, lambda: None, InMemoryLedger(), "s", "j")
    with pytest.raises(JobError, match="has no parameter 'depth'; parameters: n_trees, height"):
        run_job(JobSpec("private-rdt", 1.0, {"depth": 3}), VOTES.schema, lambda: None, InMemoryLedger(), "s", "j")
    with pytest.raises(JobError, match="noise_seed is for tests only"):
        run_job(JobSpec("private-rdt", 1.0, {"noise_seed": 3}), VOTES.schema, lambda: None, InMemoryLedger(), "s", "j")
    with pytest.raises(JobError, match="kanon-forest needs parameters k"):
        run_job(JobSpec("kanon-forest", 1.0, {}), VOTES.schema, lambda: None, InMemoryLedger(), "s", "j")
    with pytest.raises(JobError, match="epsilon must be a finite number > 0"):
        run_job(JobSpec("private-rdt", -1.0), VOTES.schema, lambda: None, InMemoryLedger(), "s", "j")


# -- the unit of privacy ------------------------------------------------------------------------
def _people_loader(enc, per_person: int):
    """The votes as people of ``per_person`` records each (ids "p0", "p1", ...)."""
    ids = np.array([f"p{i // per_person}" for i in range(len(enc.y))], dtype=object)
    return lambda: (enc.X, enc.y, ids)


def test_a_job_with_a_privacy_id_keeps_at_most_k_records_per_person(monkeypatch):
    led = InMemoryLedger()
    led.set_budget("src", 10.0)
    enc = VOTES.schema.encode(VOTES.X, VOTES.y)
    seen = []
    real = runner.PrivateDataset

    def spy(schema, X, y, **kw):
        seen.append((X.shape[0], kw.get("records_per_unit")))
        return real(schema, X, y, **kw)

    monkeypatch.setattr(runner, "PrivateDataset", spy)
    spec = JobSpec("sulq-id3", 1.0, {"max_depth": 2}, "user", 2)
    run_job(spec, VOTES.schema, _people_loader(enc, 5), led, "src", "j1")
    n_people = -(-len(enc.y) // 5)
    assert seen == [(2 * (n_people - 1) + min(2, len(enc.y) - 5 * (n_people - 1)), 2)]
    assert led.spent("src")[0] == 1.0  # the epsilon, per person: charged once as declared
    # without an id: every record, the unit a record (on a ledger of its own: "src" is accounted per person)
    led.set_budget("src2", 10.0)
    run_job(JobSpec("sulq-id3", 1.0, {"max_depth": 2}), VOTES.schema, lambda: (enc.X, enc.y), led, "src2", "j2")
    assert seen[-1] == (len(enc.y), 1)


def test_a_forest_job_with_a_privacy_id_draws_its_noise_per_record_at_epsilon_over_k():
    led = InMemoryLedger()
    led.set_budget("src", 10.0)
    enc = VOTES.schema.encode(VOTES.X, VOTES.y)
    res = run_job(
        JobSpec("private-rdt", 2.0, {"n_trees": 3, "height": 2}, "user", 4),
        VOTES.schema,
        _people_loader(enc, 3),
        led,
        "src",
        "j",
    )
    assert res.epsilon == 2.0 and led.spent("src")[0] == 2.0
    assert load_model(res.blob).epsilon == 0.5


def test_bad_privacy_ids_are_refused_before_any_charge():
    led = InMemoryLedger()
    led.set_budget("src", 10.0)

    def never():
        raise AssertionError("read")

    cases = [
        (JobSpec("private-rdt", 1.0, {}, "user", None), "privacy_id needs max_records_per_id"),
        (JobSpec("private-rdt", 1.0, {}, None, 3), "max_records_per_id needs privacy_id"),
        (JobSpec("private-rdt", 1.0, {}, "user", 0), "max_records_per_id"),
        (JobSpec("private-rdt", 1.0, {}, "", 2), "privacy_id must name a column"),
        (JobSpec("kanon-forest", 1.0, {"k": 5, "beta": 0.1}, "user", 2), r"\(epsilon, delta\)-DP"),
        (JobSpec("private-rdt", 1e-8, {}, "user", 100), "epsilon / max_records_per_id"),
    ]
    for spec, match in cases:
        with pytest.raises(JobError, match=match):
            run_job(spec, VOTES.schema, never, led, "src", "j")
    assert led.spent("src")[0] == 0.0
    with pytest.raises(JobError, match="privacy id disagree"):  # a loader without ids for a spec with one
        enc = VOTES.schema.encode(VOTES.X, VOTES.y)
        run_job(JobSpec("private-rdt", 1.0, {}, "user", 2), VOTES.schema, lambda: (enc.X, enc.y), led, "src", "k")
    assert JobSpec.from_dict(JobSpec("dpea", 1.0, {}, "user", 3).to_dict()) == JobSpec("dpea", 1.0, {}, "user", 3)
