"""A source's ledger has one unit of privacy, on a real Redis: a job in another unit is refused at submit (before
the file is read or anything charged), and two jobs of two units queued on a ledger of no unit yet cannot both be
charged (the worker's charge checks the unit in the ledger script's atomic step)."""

from __future__ import annotations

import json

import pytest

from streamdp.jobs.runner import JobError
from streamdp.privacy.ledger import file_sha256
from streamdp.service import job_queue, job_worker
from streamdp.service.connection import connect
from streamdp.service.job_queue import JobQueue
from streamdp.service.job_worker import JobWorker
from streamdp.service.ledger_store import RedisLedger, ledger_keys
from tests.service.conftest import _cli
from tests.service.test_job_privacy_id import _people_csv


@pytest.fixture
def r(redis_url):
    return connect(redis_url)


def test_a_per_record_job_on_a_per_person_ledger_is_refused_at_submit(r, redis_url, queue, unique_name, tmp_path,
                                                                     capsys):  # fmt: skip
    """The new user's trial: the same job with and without --privacy-id on one source."""
    q, _ = queue
    data, sch = _people_csv(tmp_path, per_person=7)  # (a file of its own: the content binds a ledger label)
    source = unique_name
    RedisLedger(r).set_budget(source, 5.0)
    base = ["job", "submit", "diffp-c45", "--queue", q, "--source", source, "--dataset", str(data),
            "--schema", str(sch), "--epsilon", "0.5"]  # fmt: skip
    try:
        rc, out = _cli(redis_url, *base, "--privacy-id", "user", "--max-records-per-id", "3")
        assert rc == 0, out
        JobWorker(r, queue=q, block_ms=50).run(until_drained=True, handle_signals=False)
        assert JobQueue(r, q).status(out.strip())["status"] == "done"
        capsys.readouterr()
        rc, out = _cli(redis_url, *base)
        err = capsys.readouterr().err
        assert rc == 2 and out == ""
        assert f"source {source!r} is accounted per person (column 'user')" in err
        assert "this charge is per record" in err and "--privacy-id user --max-records-per-id K" in err
        assert "nothing was charged" in err
        assert JobQueue(r, q).list(10)[0]["privacy_id"] == "user" and len(JobQueue(r, q).list(10)) == 1
        rc, out = _cli(redis_url, "ledger", source, "--json")
        d = json.loads(out)
        assert (d["unit"], d["privacy_id"], d["spent_epsilon"]) == ("person", "user", 0.5)
        assert [(s["privacy_id"], s["max_records_per_id"], s["what"]) for s in d["spends"]] == [
            ("user", 3, "diffp-c45 {}")
        ]
        rc, out = _cli(redis_url, "ledger", source)
        assert "remaining  epsilon 4.5 per person" in out and "person:user K=3" in out
    finally:
        r.hdel(job_queue.FILE_SOURCES, file_sha256(str(data)))


def test_a_per_person_job_on_a_models_per_record_ledger_is_refused_before_the_file_is_read(
    r, model, queue, tmp_path, monkeypatch
):
    q, _ = queue
    data, sch = _people_csv(tmp_path, per_person=8)
    read = []
    monkeypatch.setattr(job_queue, "check_records", lambda *a, **k: read.append(a))
    monkeypatch.setattr(job_queue, "check_columns", lambda *a, **k: read.append(a))
    with pytest.raises(JobError, match=r"accounted per record.*per person \(column 'user', K=2\)"):
        JobQueue(r, q).submit("sulq-id3", model, 1.0, {}, source_kind="dataset", dataset=str(data),
                              schema=str(sch), privacy_id="user", max_records_per_id=2)  # fmt: skip
    assert read == [] and r.hget(job_queue.FILE_SOURCES, file_sha256(str(data))) is None


def test_jobs_of_two_units_queued_on_a_fresh_ledger_are_not_both_charged(r, queue, unique_name, tmp_path,
                                                                        monkeypatch):  # fmt: skip
    """Both pass the submit (the ledger has no unit yet); the worker's charge of the second refuses it, unread."""
    q, _ = queue
    data, sch = _people_csv(tmp_path, per_person=6)
    source = unique_name
    RedisLedger(r).set_budget(source, 5.0)
    loads = []
    real = job_worker.dataset_loader

    def spy(doc, schema, stack):
        load = real(doc, schema, stack)
        return lambda: (loads.append(doc["id"]), load())[1]

    monkeypatch.setattr(job_worker, "dataset_loader", spy)
    jq = JobQueue(r, q)
    kw = dict(source_kind="dataset", dataset=str(data), schema=str(sch))
    try:
        person = jq.submit("sulq-id3", source, 0.5, {"max_depth": 2}, privacy_id="user", max_records_per_id=2, **kw)
        record = jq.submit("sulq-id3", source, 0.5, {"max_depth": 2}, **kw)
        JobWorker(r, queue=q, block_ms=50).run(until_drained=True, handle_signals=False)
        a, b = jq.status(person), jq.status(record)
        assert a["status"] == "done", (a.get("reason"), a.get("error"))
        assert b["status"] == "refused" and "accounted per person (column 'user')" in b["reason"]
        assert "this charge is per record" in b["reason"]
        assert loads == [person]  # the refused job read nothing
        led = RedisLedger(r)
        assert led.unit(source) == "person:user" and [s.key for s in led.spends(source)] == [person]
    finally:
        r.hdel(job_queue.FILE_SOURCES, file_sha256(str(data)))
        r.delete(*ledger_keys(source))
