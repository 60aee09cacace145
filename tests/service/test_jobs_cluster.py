"""The job queue's Redis tests on a real Redis Cluster (the ``cluster_url`` fixture of conftest).

The same test functions as ``test_job_worker.py``, ``test_retention.py`` and the CLI's ``test_jobs.py``,
collected again here so their
``redis_url`` is the cluster: the jobs stream and index are global keys, each
job hash has its own tag, the model's records and ledger carry the model's tag;
a job worker must never combine them in one script or MULTI (CROSSSLOT otherwise).
"""

from __future__ import annotations

import pytest

from tests.cli.test_jobs import test_cli_submit_status_list_result_and_worker_script  # noqa: F401
from tests.service.test_job_worker import (  # noqa: F401
    r,
    test_job_entry_with_undecodable_fields_is_acked_and_the_job_worker_goes_on,
    test_killed_job_worker_is_retried_charged_once_published_once,
    test_max_attempts_ends_failed_with_reason,
    test_over_budget_job_is_refused_charges_nothing_reads_nothing,
    test_private_rdt_and_kanon_jobs_over_retained_records,
)
from tests.service.test_retention import (  # noqa: F401
    test_idle_stream_is_trimmed_to_its_window_without_new_traffic,
    test_retention_trim_keeps_the_window_and_pending_entries,
)

pytestmark = [pytest.mark.redis, pytest.mark.slow]


@pytest.fixture(scope="module")
def redis_url(cluster_url):
    return cluster_url
