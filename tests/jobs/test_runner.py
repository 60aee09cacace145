"""The job runner: charge first and once per job id, refuse bad jobs with clear errors."""

from __future__ import annotations

import pytest

from streamdp.forest.model import PrivateForest
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
