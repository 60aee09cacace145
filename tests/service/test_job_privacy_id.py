"""Batch jobs per person on a real Redis: a dataset's privacy id column, K records per id, refusals before
any charge."""

from __future__ import annotations

import csv
import io
import json

import pytest

from streamdp.jobs.runner import JobError
from streamdp.privacy.ledger import file_sha256
from streamdp.service import job_queue
from streamdp.service.connection import connect
from streamdp.service.job_queue import JobQueue
from streamdp.service.job_worker import JobWorker
from streamdp.service.ledger_store import RedisLedger, ledger_keys
from tests.service.conftest import VOTES, _cli


@pytest.fixture
def r(redis_url):
    return connect(redis_url)


def _people_csv(tmp_path, per_person: int = 5, id_column: str = "user"):
    """The votes with an id column first: person ``p<i // per_person>``; and the schema file."""
    schema = VOTES.schema
    buf = io.StringIO()
    wr = csv.writer(buf)
    wr.writerow([id_column, *schema.names, schema.label.name])
    for i, (x, y) in enumerate(zip(VOTES.X, VOTES.y)):
        wr.writerow([f"p{i // per_person}", *x, y])
    data, sch = tmp_path / "people.csv", tmp_path / "schema.json"
    data.write_text(buf.getvalue())
    sch.write_text(json.dumps(schema.to_dict()))
    return data, sch


def test_a_dataset_job_per_person_from_the_cli(r, redis_url, queue, tmp_path, monkeypatch):
    q, _ = queue
    data, sch = _people_csv(tmp_path)
    source = "file-" + file_sha256(str(data))[:32]
    RedisLedger(r).set_budget(source, 5.0)
    seen = []
    real = job_queue.JobQueue  # (the worker's fit goes through run_job: spy on what the data layer receives)
    from streamdp.jobs import runner

    real_pds = runner.PrivateDataset

    def spy(schema, X, y, **kw):
        seen.append((X.shape[0], kw.get("records_per_unit")))
        return real_pds(schema, X, y, **kw)

    monkeypatch.setattr(runner, "PrivateDataset", spy)
    try:
        rc, out = _cli(
            redis_url,
            "job", "submit", "sulq-id3", "--queue", q, "--source-file", str(data), "--schema", str(sch),
            "--epsilon", "1", "--param", "max_depth=2", "--privacy-id", "user", "--max-records-per-id", "2",
        )  # fmt: skip
        assert rc == 0, out
        jid = out.strip()
        JobWorker(r, queue=q, block_ms=50).run(until_drained=True, handle_signals=False)
        st = real(r, q).status(jid)
        assert st["status"] == "done", (st.get("reason"), st.get("error"))
        assert st["privacy_id"] == "user" and st["max_records_per_id"] == 2
        people = -(-len(VOTES.y) // 5)
        assert seen == [(2 * people, 2)]  # 435 = 87 people of 5: two records each
        assert RedisLedger(r).spent(source)[0] == 1.0
        rc, out = _cli(redis_url, "job", "status", jid, "--queue", q)
        assert "privacy_id    user" in out and "max_records_per_id 2" in out
    finally:
        r.delete(*ledger_keys(source))
        r.hdel(job_queue.FILE_SOURCES, file_sha256(str(data)))


def test_privacy_id_mistakes_are_refused_before_any_charge(r, model, queue, tmp_path):
    q, _ = queue
    jq = JobQueue(r, q)
    data, sch = _people_csv(tmp_path)
    before, own = RedisLedger(r).spent(model), model
    people = f"{model}-people"  # (a ledger of no unit yet: the model's own is per record)
    RedisLedger(r).set_budget(people, 5.0)
    try:
        with pytest.raises(JobError, match="model's own unit of privacy"):
            jq.submit("private-rdt", model, 1.0, {}, privacy_id="user", max_records_per_id=2)
        kw = dict(source_kind="dataset", dataset=str(data), schema=str(sch))
        with pytest.raises(JobError, match="accounted per record"):  # the model's ledger is per record
            jq.submit("private-rdt", model, 1.0, {}, privacy_id="user", max_records_per_id=2, **kw)
        model = people
        with pytest.raises(JobError, match=r"lacks the columns \['who'\]"):
            jq.submit("private-rdt", model, 1.0, {}, privacy_id="who", max_records_per_id=2, **kw)
        attr = VOTES.schema.names[0]
        with pytest.raises(JobError, match="is a schema attribute or the label"):
            jq.submit("private-rdt", model, 1.0, {}, privacy_id=attr, max_records_per_id=2, **kw)
        with pytest.raises(JobError, match="privacy_id needs max_records_per_id"):
            jq.submit("private-rdt", model, 1.0, {}, privacy_id="user", **kw)
        with pytest.raises(JobError, match="needs a header"):
            jq.submit(
                "private-rdt", model, 1.0, {}, privacy_id="user", max_records_per_id=2, header=False,
                dataset=str(data), schema=str(sch), source_kind="dataset",
            )  # fmt: skip
        with pytest.raises(JobError, match="known dataset without a privacy id"):
            jq.submit(
                "private-rdt", model, 1.0, {}, privacy_id="user", max_records_per_id=2,
                source_kind="dataset", dataset="congressional-voting",
            )  # fmt: skip
        assert jq.list() == [] and RedisLedger(r).spent(own) == before and RedisLedger(r).spent(people) == (0.0, 0.0)
    finally:
        r.hdel(job_queue.FILE_SOURCES, file_sha256(str(data)))
        r.delete(*ledger_keys(people))


def test_a_job_over_a_person_models_records_keeps_its_k_per_person(r, queue, unique_name, tmp_path, monkeypatch):
    from streamdp.jobs import runner
    from streamdp.service.producer import Producer
    from streamdp.service.registry import create_model
    from streamdp.service.retention import set_retention

    q, _ = queue
    key = tmp_path / "noise.key"
    key.write_bytes(bytes(range(64)))
    key.chmod(0o600)
    create_model(
        r, unique_name, VOTES.schema, n_trees=2, height=2, epsilon=1.0, ledger_budget=10.0, release="window",
        privacy_id="user", max_records_per_id=2, noise_key_file=str(key),
    )  # fmt: skip
    set_retention(r, unique_name, records=10**6)
    with Producer(r, unique_name, batch_size=100) as p:
        p.push(VOTES.X[:300], VOTES.y[:300], ids=[f"p{i % 30}" for i in range(300)])
        p.push(VOTES.X[300:310], VOTES.y[300:310])  # no ids: not read by the job
    seen = []
    real_pds = runner.PrivateDataset

    def spy(schema, X, y, **kw):
        seen.append((X.shape[0], kw.get("records_per_unit")))
        return real_pds(schema, X, y, **kw)

    monkeypatch.setattr(runner, "PrivateDataset", spy)
    jq = JobQueue(r, q)
    with pytest.raises(JobError, match=r"\(epsilon, delta\)-DP"):  # the model's unit applies to its jobs
        jq.submit("kanon-forest", unique_name, 1.0, {"k": 5, "beta": 0.1})
    jid = jq.submit("sulq-id3", unique_name, 1.0, {"max_depth": 2})
    JobWorker(r, queue=q, block_ms=50).run(until_drained=True, handle_signals=False)
    st = jq.status(jid)
    assert st["status"] == "done", (st.get("reason"), st.get("error"))
    assert seen == [(60, 2)]  # 30 people, 2 records each
