"""The job queue on a real Redis: results by name, and jobs refused at submit before any charge."""

from __future__ import annotations

import pytest

from streamdp.jobs.runner import JobError
from streamdp.privacy.ledger import file_sha256
from streamdp.service import job_queue
from streamdp.service.connection import connect
from streamdp.service.job_queue import JobQueue
from streamdp.service.ledger_store import RedisLedger, ledger_keys
from tests.service.conftest import _votes_csv  # noqa: E402


@pytest.fixture
def r(redis_url):
    return connect(redis_url)


def test_job_result_by_name_says_what_the_named_job_is_doing(r, model, queue):
    """By name, a job not yet done answered 'no job NAME' (only a published result knew its
    job); the name is held by its job from the submit on."""
    q, _ = queue
    jq = JobQueue(r, q)
    jid = jq.submit("private-rdt", model, 1.0, {"n_trees": 2}, result_name=f"{model}-named")
    with pytest.raises(LookupError, match=f"job {jid} is queued"):
        jq.result(f"{model}-named")


def test_jobs_that_could_only_fail_are_refused_at_submit_before_any_charge(r, queue, tmp_path, unique_name):
    """A dataset path that did not exist yet was not bound to its content (a file written
    later, other people, was read and charged to the named source); a bundled dataset under a schema of other
    columns, and an epsilon no learner can draw noise for, were charged and then failed."""
    q, _ = queue
    data, sch = _votes_csv(tmp_path)
    led = RedisLedger(r)
    led.set_budget(unique_name, 1.0)
    jq = JobQueue(r, q)
    try:
        with pytest.raises(JobError, match="does not exist"):
            jq.submit(
                "private-rdt",
                unique_name,
                0.5,
                {"n_trees": 3, "height": 2},
                source_kind="dataset",
                dataset=str(tmp_path / "later.csv"),
                schema=str(sch),
            )
        with pytest.raises(JobError, match="has the attributes"):
            jq.submit(
                "private-rdt",
                unique_name,
                0.5,
                {"n_trees": 3, "height": 2},
                source_kind="dataset",
                dataset="nursery",
                schema=str(sch),
            )
        with pytest.raises(JobError, match="below 1e-09"):
            jq.submit(
                "private-rdt",
                unique_name,
                1e-14,
                {"n_trees": 3, "height": 2},
                source_kind="dataset",
                dataset=str(data),
                schema=str(sch),
            )
        assert led.spent(unique_name)[0] == 0.0  # nothing charged
    finally:
        r.delete(*ledger_keys(unique_name))
        r.hdel(job_queue.FILE_SOURCES, file_sha256(str(data)))


def test_a_file_whose_first_record_is_not_the_schemas_is_refused_at_submit(r, queue, tmp_path, unique_name):
    """A user's file (values spelt "yes"/"no" where the schema declares y/n) was accepted, charged, and fit on
    no record; its first records are now read at submit (the owner's own file) as the job reads them, and a file of
    which none would be kept, or that holds no record, is refused uncharged; a stray bad first row is not."""
    q, _ = queue
    data, sch = _votes_csv(tmp_path)
    bad = tmp_path / "spelt.csv"
    head, *rows = data.read_text().splitlines()  # every record's label spelt otherwise
    bad.write_text(
        "\n".join([head, *(r.replace(",democrat", ",dem").replace(",republican", ",rep") for r in rows)]) + "\n"
    )
    RedisLedger(r).set_budget(unique_name, 1.0)

    def submit_file(path) -> str:
        args = ("private-rdt", unique_name, 0.5, {"n_trees": 2})
        return JobQueue(r, q).submit(*args, source_kind="dataset", dataset=str(path), schema=str(sch))

    try:
        with pytest.raises(
            JobError,
            match=r"none of its 435 records is one of the schema's \(first: line 2: "
            r"label 'party' has a class not declared.*nothing was charged",
        ):
            submit_file(bad)
        head = tmp_path / "head.csv"
        head.write_text(data.read_text().splitlines()[0] + "\n")
        with pytest.raises(JobError, match=r"holds no record \(a header line alone\?\); nothing was charged"):
            submit_file(head)
        assert RedisLedger(r).spent(unique_name) == (0.0, 0.0)
        lines = data.read_text().splitlines()
        stray = tmp_path / "stray.csv"  # its first record bad, the rest fine: the job reads the rest
        stray.write_text("\n".join([lines[0], lines[1].replace(",y,", ",yes,", 1), *lines[2:]]) + "\n")
        from streamdp.records.sources import InvalidRecordsWarning

        with pytest.warns(
            InvalidRecordsWarning,
            match=r"1 of its 435 records are not the schema's and a job drops "
            r"them \(first: line 2: attribute",
        ):
            submit_file(stray)
        late = tmp_path / "late.csv"  # misspelt past the first 100 records: said, not silent
        late.write_text("\n".join([lines[0], *lines[1:200], *(x.replace(",y,", ",yes,") for x in lines[200:])]) + "\n")
        with pytest.warns(InvalidRecordsWarning, match=r"of its 435 records are not the schema's.*first: line 20[0-9]"):
            submit_file(late)
    finally:
        r.delete(*ledger_keys(unique_name))
