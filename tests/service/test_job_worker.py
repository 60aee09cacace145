"""Job workers on a real Redis: charge first and once, refuse before reading, survive killed workers.

Every test uses its own model names, ledger sources and job queue (``sdp:jobs:<unique>``),
so job workers here never take another test's (or person's) jobs."""

from __future__ import annotations

import io
import json
import multiprocessing as mp
import os
import signal
import time
import uuid
from contextlib import redirect_stdout

import numpy as np
import pytest

from streamdp.forest.model import PrivateForest
from streamdp.jobs.runner import JobError
from streamdp.learners import load_model
from streamdp.privacy.ledger import file_sha256
from streamdp.service import job_data, job_queue, job_worker
from streamdp.service.connection import connect
from streamdp.service.consumer import Consumer
from streamdp.service.job_queue import JobQueue, fetch_model
from streamdp.service.job_worker import JobWorker
from streamdp.service.keys import JOB_RESULTS, REGISTRY, Keys, as_str
from streamdp.service.ledger_store import RedisLedger, ledger_keys
from streamdp.service.registry import create_model, delete_model
from streamdp.service.retention import set_retention
from tests.service.conftest import VOTES, _cli, _votes_csv  # noqa: E402

KANON = {"n_trees": 3, "height": 3, "k": 5, "beta": 0.1}


@pytest.fixture
def r(redis_url):
    return connect(redis_url)


def _spends(r, source, job_id):
    return [s for s in RedisLedger(r).spends(source) if s.key == job_id]


def _kanon_delta() -> float:
    return PrivateForest.create(
        VOTES.schema,
        n_trees=KANON["n_trees"],
        height=KANON["height"],
        epsilon=1.0,
        mechanism="kanon",
        k=KANON["k"],
        beta=KANON["beta"],
    ).delta


# -- service ---------------------------------------------------------------------------------
def test_private_rdt_and_kanon_jobs_over_retained_records(r, model, queue):
    q, _ = queue
    RedisLedger(r).set_budget(model, 10.0, _kanon_delta() + 1e-6)
    jq = JobQueue(r, q)
    rdt = jq.submit("private-rdt", model, 2.0, {"n_trees": 10, "height": 3})
    kan = jq.submit("kanon-forest", model, 1.0, KANON, result_name=f"{model}-kanon")
    assert jq.status(rdt)["status"] == "queued"
    assert JobWorker(r, queue=q, block_ms=50).run(until_drained=True, handle_signals=False) == 2
    for jid, eps in ((rdt, 2.0), (kan, 1.0)):
        st = jq.status(jid)
        assert st["status"] == "done" and st["attempts"] == 1 and st["fraction"] == 1.0, st
        assert [s.epsilon for s in _spends(r, model, jid)] == [eps]
    forest = fetch_model(r, jq.status(rdt)["result"])
    pred = forest.predict(VOTES.X)
    assert set(pred) <= set(VOTES.schema.classes)
    # 10 trees x 8 leaves, eps 2: measured min 0.85 over 300 fits (none <= 0.75); the majority rate is 0.61
    assert (pred == VOTES.y).mean() > 0.75
    kf = fetch_model(r, f"{model}-kanon")
    assert kf.mechanism == "kanon" and set(kf.predict(VOTES.X)) <= set(VOTES.schema.classes)
    # consumers fetch a forest result like the stream forest
    with Consumer(r, jq.status(rdt)["result"]) as c:
        assert np.array_equal(c.latest().counts, forest.counts)
    entry = json.loads(r.hget(JOB_RESULTS, f"{model}-kanon"))
    assert entry["kind"] == "job" and entry["job"] == kan and entry["delta"] > 0
    assert r.hget(REGISTRY, f"{model}-kanon") is None  # job models have their own registry and key space
    assert r.exists(Keys(f"{model}-kanon", job=True).pub_model) and not r.exists(Keys(f"{model}-kanon").pub_model)
    assert isinstance(jq.result(kan), PrivateForest)
    # by the result's name too (the docs said so; a user's `job result NAME` found no job)
    assert jq.result_bytes(f"{model}-kanon") == jq.result_bytes(kan)
    with pytest.raises(LookupError, match="no job 'no-such-result'"):
        jq.result("no-such-result")
    assert [j["id"] for j in jq.list()] == [kan, rdt]


def test_over_budget_job_is_refused_charges_nothing_reads_nothing(r, model, queue, monkeypatch, caplog):
    import logging

    q, _ = queue
    reads = []
    monkeypatch.setattr(
        job_worker,
        "read_model_records",
        lambda *a, **k: reads.append(a) or (_ for _ in ()).throw(AssertionError("data read")),
    )
    before = RedisLedger(r).spent(model)
    jq = JobQueue(r, q)
    with pytest.raises(JobError, match="would spend 10.5 of a budget of 10 .*; nothing was queued"):  # at submit
        jq.submit("private-rdt", model, 9.5, {"n_trees": 2})  # 1 of 10 is spent by the stream model
    assert r.xlen(q) == 0
    jid = jq.submit("private-rdt", model, 8.5, {"n_trees": 2})  # it fits when queued ...
    RedisLedger(r).set_budget(model, 9.0)  # ... and not when the worker charges it (the ledger changed since)
    with caplog.at_level(logging.INFO, logger="streamdp.jobs"):
        JobWorker(r, queue=q, block_ms=50).run(until_drained=True, handle_signals=False)
    # every ended job is logged with -v (only errors were: a user's finding)
    assert any(f'"event": "job.refused", "job": "{jid}"' in rec.getMessage() for rec in caplog.records)
    st = jq.status(jid)
    assert st["status"] == "refused" and "refused before reading any data" in st["reason"], st
    assert "would spend 9.5 of a budget of 9" in st["reason"]
    assert reads == [] and RedisLedger(r).spent(model) == before and _spends(r, model, jid) == []
    assert not r.exists(Keys(st["result"], job=True).pub_model) and not r.hexists(JOB_RESULTS, st["result"])
    with pytest.raises(LookupError, match="is refused"):
        jq.result(jid)


def _child(url: str, q: str, point: str) -> None:
    """A job worker that SIGKILLs itself just before (or just after) publishing: the charge is done."""
    w = JobWorker(connect(url), queue=q, block_ms=50, consumer="doomed")
    real = w._publish

    def publish(*a, **k):
        if point == "before_publish":
            os.kill(os.getpid(), signal.SIGKILL)
        out = real(*a, **k)
        os.kill(os.getpid(), signal.SIGKILL)
        return out

    w._publish = publish
    w.run(once=True, handle_signals=False)


def _kill_during_job(url: str, q: str, point: str) -> None:
    p = mp.get_context("fork").Process(target=_child, args=(url, q, point))
    p.start()
    p.join(60)
    assert p.exitcode == -signal.SIGKILL


@pytest.mark.parametrize("point", ["before_publish", "after_publish"])
def test_killed_job_worker_is_retried_charged_once_published_once(r, redis_url, model, queue, point):
    q, _ = queue
    jq = JobQueue(r, q)
    jid = jq.submit("private-rdt", model, 1.0, {"n_trees": 3, "height": 3})
    _kill_during_job(redis_url, q, point)
    st = jq.status(jid)
    assert st["status"] == "running" and st["worker"] == "doomed" and len(_spends(r, model, jid)) == 1
    result = Keys(st["result"], job=True).pub_model
    first = r.hget(result, "blob")
    assert (first is not None) == (point == "after_publish")
    # Another worker reclaims the dead worker's entry once it has been idle 200 ms.
    w = JobWorker(r, queue=q, block_ms=20, claim_idle_ms=200, claim_every_s=0.02)
    deadline = time.monotonic() + 20
    while jq.status(jid)["status"] == "running" and time.monotonic() < deadline:
        w.step()
    st = jq.status(jid)
    assert st["status"] == "done" and st["attempts"] == 2, st
    assert len(_spends(r, model, jid)) == 1 and RedisLedger(r).spent(model)[0] == pytest.approx(2.0)
    assert r.hget(result, "job").decode() == jid and int(r.hget(result, "version")) == 1
    if point == "after_publish":  # the first release stands; the retry did not fit or publish again
        assert r.hget(result, "blob") == first
    assert isinstance(jq.result(jid), PrivateForest)
    assert w.drained()


def test_a_slow_job_is_not_taken_for_dead(r, model, queue):
    """The running worker heartbeats its entry: another worker with the same idle limit leaves it alone."""
    import threading

    q, _ = queue
    jq = JobQueue(r, q)
    jid = jq.submit("private-rdt", model, 0.5, {"n_trees": 2})
    slow = JobWorker(r, queue=q, block_ms=20, claim_idle_ms=150)
    real, release, inside = slow._publish, threading.Event(), threading.Event()

    def publish(*a, **k):
        inside.set()
        release.wait(10)
        return real(*a, **k)

    slow._publish = publish
    t = threading.Thread(target=slow.run, kwargs={"once": True, "handle_signals": False})
    t.start()
    assert inside.wait(10)
    other = JobWorker(r, queue=q, block_ms=20, claim_idle_ms=150, claim_every_s=0.0)
    deadline = time.monotonic() + 0.75  # 5 idle limits
    while time.monotonic() < deadline:
        assert other.step() == 0
    release.set()
    t.join(10)
    st = jq.status(jid)
    assert st["status"] == "done" and st["attempts"] == 1 and st["worker"] == slow.name


def test_max_attempts_ends_failed_with_reason(r, redis_url, model, queue):
    q, _ = queue
    jq = JobQueue(r, q)
    killed = jq.submit("private-rdt", model, 0.5, {"n_trees": 2}, max_attempts=1)
    _kill_during_job(redis_url, q, "before_publish")
    w = JobWorker(r, queue=q, block_ms=20, claim_idle_ms=200, claim_every_s=0.02)
    deadline = time.monotonic() + 20
    while jq.status(killed)["status"] == "running" and time.monotonic() < deadline:
        w.step()
    st = jq.status(killed)
    assert st["status"] == "failed" and "gave up after 1 attempt;" in st["reason"], st
    assert "job worker doomed stopped during the last attempt" in st["reason"]
    assert len(_spends(r, model, killed)) == 1  # charged once (privacy loss is permanent), never released
    assert not r.exists(Keys(st["result"], job=True).pub_model)

    # A job whose attempts keep raising is retried, then failed with the last error.
    flaky = jq.submit("private-rdt", model, 0.5, {"n_trees": 2}, max_attempts=2)
    w._publish = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("disk on fire"))
    w.run(until_drained=True, handle_signals=False)
    st = jq.status(flaky)
    assert st["status"] == "failed" and st["attempts"] == 2
    # its message is not shown (after the charge it may quote the data: a shape error's record count), where it is
    assert st["reason"].startswith("gave up after 2 attempts; last error: RuntimeError (its message is not shown")
    assert "disk on fire" not in st["reason"] + st["error"] and "test_job_worker.py:" in st["reason"]
    assert len(_spends(r, model, flaky)) == 1


def test_dataset_job_from_csv(r, queue, tmp_path, unique_name):
    q, _ = queue
    data, sch = _votes_csv(tmp_path)
    led = RedisLedger(r)
    led.set_budget(unique_name, 1.0)
    try:
        jq = JobQueue(r, q)
        jid = jq.submit(
            "private-rdt",
            unique_name,
            1.0,
            {"n_trees": 5, "height": 3},
            source_kind="dataset",
            dataset=str(data),
            schema=str(sch),
        )
        JobWorker(r, queue=q, block_ms=50).run(until_drained=True, handle_signals=False)
        assert jq.status(jid)["status"] == "done"
        assert (jq.result(jid).predict(VOTES.X) == VOTES.y).mean() > 0.6  # measured min 0.82 over 300 fits
        assert led.spent(unique_name)[0] == 1.0
    finally:
        r.delete(*ledger_keys(unique_name))
        r.hdel(job_queue.FILE_SOURCES, file_sha256(str(data)))


def test_retention_set_after_the_records_were_merged_refuses_jobs_until_a_new_version(r, queue, unique_name):
    """A trial's order: push, merge, then `model retention`, then a job: the job was done, charged, and fit no
    record. The setting's version and the published version (public) refuse it before any charge, until a
    release merged after the retention was set."""
    from streamdp.service.producer import Producer
    from streamdp.service.stream_worker import Worker

    q, _ = queue
    create_model(r, unique_name, VOTES.schema, n_trees=3, height=3, epsilon=1.0, ledger_budget=3.0, release="batch")
    try:
        with Producer(r, unique_name, batch_size=100) as p:
            p.push(VOTES.X[:200], VOTES.y[:200])
        Worker(r, unique_name, block_ms=20).run(until_drained=True, handle_signals=False)
        set_retention(r, unique_name, seconds=3600)
        set_retention(r, unique_name, seconds=7200)  # changing the caps keeps when records started being kept
        jq = JobQueue(r, q)
        refused = r"started keeping records at version [1-9]\d* .* no version since.* nothing was charged"
        with pytest.raises(JobError, match=refused):
            jq.submit("diffp-id3", unique_name, 0.5, {})
        assert RedisLedger(r).spent(unique_name)[0] == 1.0  # the model's epsilon only
        with Producer(r, unique_name, batch_size=100) as p:
            p.push(VOTES.X[200:300], VOTES.y[200:300])
        with pytest.raises(JobError, match=refused):  # not what the stream holds: what it published
            jq.submit("diffp-id3", unique_name, 0.5, {})
        Worker(r, unique_name, block_ms=20).run(until_drained=True, handle_signals=False)
        assert jq.submit("diffp-id3", unique_name, 0.5, {})  # a version published since the retention: accepted
    finally:
        delete_model(r, unique_name)
        r.delete(*ledger_keys(unique_name))


def test_a_job_over_a_model_that_keeps_nothing_is_refused_before_any_charge(r, queue, unique_name):
    """A trial's finding: a job over a model with no retention set was charged and fit on no record."""
    q, _ = queue
    create_model(r, unique_name, VOTES.schema, n_trees=3, height=3, epsilon=1.0, ledger_budget=3.0, release="batch")
    try:
        with pytest.raises(JobError, match="keeps no merged records .* nothing was charged"):
            JobQueue(r, q).submit("diffp-id3", unique_name, 0.5, {})
        assert RedisLedger(r).spent(unique_name)[0] == 1.0  # the model's epsilon only
        set_retention(r, unique_name, seconds=60)
        JobQueue(r, q).submit("diffp-id3", unique_name, 0.5, {})  # accepted once it keeps records
    finally:
        delete_model(r, unique_name)
        r.delete(*ledger_keys(unique_name))


def test_a_dataset_file_without_a_header_and_a_relative_path(r, redis_url, queue, tmp_path, unique_name, monkeypatch):
    """A trial's findings: job submit had no --no-header (the shipped UCI files have none), and a relative path
    was opened in the job worker's directory ('changed or vanished')."""
    from streamdp.cli import main

    q, _ = queue
    data = tmp_path / "votes.data"
    data.write_text("".join(f"{y},{','.join(map(str, x))}\n" for x, y in zip(VOTES.X, VOTES.y)))  # label first
    sch = tmp_path / "schema.json"
    sch.write_text(json.dumps(VOTES.schema.to_dict()))
    RedisLedger(r).set_budget(unique_name, 1.0)
    monkeypatch.chdir(tmp_path)
    u = ["--redis-url", redis_url]
    try:
        assert (
            main(
                u
                + [
                    "job",
                    "submit",
                    "private-rdt",
                    "--source",
                    unique_name,
                    "--dataset",
                    "votes.data",
                    "--schema",
                    "schema.json",
                    "--epsilon",
                    "0.5",
                    "--queue",
                    q,
                    "--param",
                    "height=3",
                ]
            )
            == 2
        )
        assert RedisLedger(r).spent(unique_name)[0] == 0.0  # the header check refused it: nothing charged
        jid = JobQueue(r, q).submit(
            "private-rdt",
            unique_name,
            0.5,
            {"height": 3},
            source_kind="dataset",
            dataset="votes.data",
            schema=str(sch),
            header=False,
        )
        assert JobQueue(r, q).status(jid)["dataset"] == str(data)  # absolute: any worker's directory reads it
        monkeypatch.chdir("/")
        JobWorker(r, queue=q, block_ms=50).run(until_drained=True, handle_signals=False)
        assert JobQueue(r, q).status(jid)["status"] == "done"
        assert (JobQueue(r, q).result(jid).predict(VOTES.X) == VOTES.y).mean() > 0.6
        # a trial: deleting a job's model named a ledger of the result's name, which does not exist
        buf = io.StringIO()
        with redirect_stdout(buf):
            assert main(u + ["model", "delete", JobQueue(r, q).status(jid)["result"]]) == 0
        assert f"stays on the ledger of source '{unique_name}'" in buf.getvalue()
    finally:
        r.delete(*ledger_keys(unique_name))
        r.hdel(job_queue.FILE_SOURCES, file_sha256(str(data)))


def test_files_whose_columns_cannot_be_the_schemas_are_refused_before_any_charge(r, queue, tmp_path, unique_name):
    """Without a header, a label index out of range failed after the charge, and a line
    with an id column first was read to no record (charged, 'done'); with a header, a label naming an attribute
    did the same."""
    q, _ = queue
    rows = [f"{y},{','.join(map(str, x))}" for x, y in zip(VOTES.X, VOTES.y)]
    plain, idfirst = tmp_path / "plain.data", tmp_path / "idfirst.data"
    plain.write_text("\n".join(rows) + "\n")
    idfirst.write_text("".join(f"{i},{row}\n" for i, row in enumerate(rows)))
    data, sch = _votes_csv(tmp_path)
    RedisLedger(r).set_budget(unique_name, 1.0)
    jq = JobQueue(r, q)
    try:
        for path, kw, why in (
            (plain, {"header": False, "label": 99}, "outside the 17 columns"),
            (plain, {"header": False, "label": "party"}, "the label column is an index"),
            (idfirst, {"header": False}, "its first record has 18 fields"),
            (data, {"label": "crime"}, "the label column 'crime' is an attribute"),
        ):
            with pytest.raises(JobError, match=why):
                jq.submit(
                    "private-rdt",
                    unique_name,
                    0.5,
                    {"height": 2},
                    source_kind="dataset",
                    dataset=str(path),
                    schema=str(sch),
                    **kw,
                )
        assert RedisLedger(r).spent(unique_name)[0] == 0.0
    finally:
        r.delete(*ledger_keys(unique_name))
        for path in (plain, idfirst, data):
            r.hdel(job_queue.FILE_SOURCES, file_sha256(str(path)))


def test_a_bundled_dataset_is_read_by_name_never_from_the_workers_directory(
    r, queue, tmp_path, unique_name, monkeypatch
):
    """A file named like a bundled dataset in the job worker's directory was read (and
    charged) instead of the dataset the job named."""
    q, _ = queue
    (tmp_path / "congressional-voting").write_text(
        ",".join([*VOTES.schema.names, "party"])
        + "\n"
        + "".join(",".join([*map(str, VOTES.X[0]), "democrat"]) + "\n" for _ in range(40))
    )
    RedisLedger(r).set_budget(unique_name, 1.0)
    try:
        jid = JobQueue(r, q).submit(
            "private-rdt",
            unique_name,
            1.0,
            {"n_trees": 2, "height": 2, "seed": 1},
            source_kind="dataset",
            dataset="congressional-voting",
            schema=VOTES.schema,
        )
        monkeypatch.chdir(tmp_path)
        import streamdp.records.datasets

        reads = []
        real = streamdp.records.datasets._read_lines
        monkeypatch.setattr(streamdp.records.datasets, "_read_lines", lambda *a: reads.append(a[0]) or real(*a))
        JobWorker(r, queue=q, block_ms=50).run(until_drained=True, handle_signals=False)
        assert JobQueue(r, q).status(jid)["status"] == "done"
        assert JobQueue(r, q).result(jid).estimated_records() > 200  # the 435 bundled records, not the 40
        # read once: the lines checked against the pinned SHA-256 are the lines parsed (nothing swapped in later)
        assert reads == ["congressional-voting"]
    finally:
        r.delete(*ledger_keys(unique_name))


def test_job_conflicts_are_refused_before_any_charge(r, queue, tmp_path, unique_name, monkeypatch):
    """A second job of the same result name was charged and then refused at publishing; a
    decoy of a shared dataset where the worker looks (../shared/datasets) was read; a model whose retention was
    cleared after the submit was charged; a file without a header but with trailing commas was refused."""
    from streamdp.service.retention import set_retention

    q, _ = queue
    jq = JobQueue(r, q)
    RedisLedger(r).set_budget(unique_name, 5.0)
    name = f"res-{uuid.uuid4().hex[:8]}"
    try:

        def submit_named() -> str:
            kw = dict(source_kind="dataset", dataset="congressional-voting", result_name=name)
            return jq.submit("private-rdt", unique_name, 0.5, {"height": 2}, **kw)

        submit_named()
        n_docs = len(list(r.scan_iter(match="sdp:job:*", count=1000)))
        with pytest.raises(JobError, match=f"result name '{name}' is held by job"):
            submit_named()
        assert len(list(r.scan_iter(match="sdp:job:*", count=1000))) == n_docs  # the refused job left nothing
        # a name whose holder has ended is taken over once: two submitters who saw that holder cannot both take it
        holder = as_str(r.hget(job_queue.RESULT_NAMES, name))
        r.hset(job_queue.job_key(holder), "status", "failed")
        take = r.register_script(job_queue._TAKE_OVER)
        assert take(keys=[job_queue.RESULT_NAMES], args=[name, holder, "a"]) == 1
        assert take(keys=[job_queue.RESULT_NAMES], args=[name, holder, "b"]) == 0
        r.hset(job_queue.RESULT_NAMES, name, holder)
        assert jq.status(submit_named())["result"] == name
        # a pinned bundled dataset: the worker finds other bytes under that name (a decoy) and refuses uncharged
        jid = jq.submit("private-rdt", unique_name, 0.5, {"height": 2}, source_kind="dataset", dataset="nursery")
        decoy = tmp_path / "shared" / "datasets"
        (decoy / "nursery").mkdir(parents=True)
        (decoy / "nursery" / "nursery.data").write_text(
            "usual,proper,complete,1,convenient,convenient,nonprob,recommended,recommend\n" * 40
        )
        monkeypatch.setenv("STREAMDP_DATASETS", str(decoy))
        JobWorker(r, queue=q, block_ms=50).run(until_drained=True, handle_signals=False)
        st = jq.status(jid)
        assert st["status"] == "failed" and "not the one submitted" in st.get("reason", "") + st.get("error", ""), {
            k: st.get(k) for k in ("reason", "error", "progress")
        }
        monkeypatch.delenv("STREAMDP_DATASETS")
        # retention cleared after the submit: the worker refuses before charging
        create_model(
            r, f"{unique_name}-m", VOTES.schema, n_trees=2, height=2, epsilon=1.0, ledger_budget=3.0, release="batch"
        )
        set_retention(r, f"{unique_name}-m", records=100)
        jid = jq.submit("diffp-id3", f"{unique_name}-m", 0.5, {})
        set_retention(r, f"{unique_name}-m")
        JobWorker(r, queue=q, block_ms=50).run(until_drained=True, handle_signals=False)
        assert "keeps no merged records" in jq.status(jid).get("reason", "")
        assert RedisLedger(r).spent(f"{unique_name}-m")[0] == 1.0  # the model's epsilon only
        # trailing commas and a blank first line, without a header: read as the reader reads them
        data = tmp_path / "votes.data"
        data.write_text("\n" + "".join(f"{y},{','.join(map(str, x))},\n" for x, y in zip(VOTES.X, VOTES.y)))
        jid = jq.submit(
            "private-rdt",
            unique_name,
            0.5,
            {"height": 2},
            source_kind="dataset",
            dataset=str(data),
            schema=VOTES.schema,
            header=False,
        )
        JobWorker(r, queue=q, block_ms=50).run(until_drained=True, handle_signals=False)
        assert jq.status(jid)["status"] == "done"
    finally:
        r.delete(*ledger_keys(unique_name))
        try:
            delete_model(r, f"{unique_name}-m")
        except Exception:
            pass
        r.delete(*ledger_keys(f"{unique_name}-m"))
        r.hdel(job_queue.RESULT_NAMES, name)


def test_a_user_file_is_read_as_checked_even_if_swapped_after_the_check(r, queue, tmp_path, unique_name, monkeypatch):
    """The worker hashed a user's file, then (after the charge) read it again by its path, so
    a file replaced in between was read and charged as the one submitted. The bytes hashed are copied aside and
    the copy is parsed: the job sees the 435 records submitted, not the 40 swapped in; the copy is removed."""
    q, _ = queue
    data, sch = _votes_csv(tmp_path)
    decoy = tmp_path / "decoy.csv"
    decoy.write_text(
        data.read_text().splitlines()[0]
        + "\n"
        + "".join(",".join([*map(str, VOTES.X[0]), "democrat"]) + "\n" for _ in range(40))
    )
    RedisLedger(r).set_budget(unique_name, 1.0)
    read = []
    real_read, real_run = job_data.read_dataset, job_worker.run_job

    def swap_then_run(*a, **kw):  # after the worker's check, before the charge and the read
        os.replace(decoy, data)
        return real_run(*a, **kw)

    monkeypatch.setattr(job_worker, "run_job", swap_then_run)
    monkeypatch.setattr(job_data, "read_dataset", lambda p, *a, **kw: read.append(p) or real_read(p, *a, **kw))
    try:
        jid = JobQueue(r, q).submit(
            "private-rdt",
            unique_name,
            0.5,
            {"n_trees": 2, "height": 2, "seed": 1},
            source_kind="dataset",
            dataset=str(data),
            schema=str(sch),
        )
        JobWorker(r, queue=q, block_ms=50).run(until_drained=True, handle_signals=False)
        assert JobQueue(r, q).status(jid)["status"] == "done"
        assert data.read_text().count("\n") == 41  # the swap happened
        assert len(read) == 1 and read[0].name == str(data) and read[0].closed  # the copy, closed once parsed
        assert JobQueue(r, q).result(jid).estimated_records() > 200  # the 435 records submitted, not the 40
        # a reader's error (after the charge) names the file submitted, not the private copy
        monkeypatch.setattr(job_worker, "run_job", real_run)
        bad = tmp_path / "bad.csv"
        head, *rows = data.read_text().splitlines(keepends=True)  # (the 41 lines swapped in)
        bad.write_text(head + "".join(rows * 3) + '"y,n\n')  # the header, 120 records, then line 122
        # (submit reads the whole file and would refuse it, uncharged: a job queued by a version that did not)
        monkeypatch.setattr(job_queue, "check_records", lambda *a, **kw: None)
        jid = JobQueue(r, q).submit(
            "private-rdt",
            unique_name,
            0.1,
            {"n_trees": 2, "height": 2},
            source_kind="dataset",
            dataset=str(bad),
            schema=str(sch),
            max_attempts=1,
        )
        JobWorker(r, queue=q, block_ms=50).run(until_drained=True, handle_signals=False)
        st = JobQueue(r, q).status(jid)
        assert st["status"] == "failed" and st["reason"].startswith(f"{bad}: line 122"), st
    finally:
        r.delete(*ledger_keys(unique_name))


def test_a_dataset_without_the_schema_columns_is_refused_before_any_charge(r, queue, tmp_path, unique_name):
    """A CSV lacking a schema column failed only after the ledger was charged; now the header is checked first
    (at submit, and again by the worker before charging), reading the header line only."""
    q, _ = queue
    data, sch = _votes_csv(tmp_path)
    lines = data.read_text().splitlines()
    cut = [",".join(row.split(",")[1:]) for row in lines]  # drop the first attribute's column
    data.write_text("\n".join(cut) + "\n")
    led = RedisLedger(r)
    led.set_budget(unique_name, 1.0)
    try:
        with pytest.raises(JobError, match="lacks the columns"):
            JobQueue(r, q).submit(
                "private-rdt",
                unique_name,
                0.5,
                {"n_trees": 3, "height": 2},
                source_kind="dataset",
                dataset=str(data),
                schema=str(sch),
            )
        assert led.spent(unique_name)[0] == 0.0
    finally:
        r.delete(*ledger_keys(unique_name))


@pytest.mark.redis
def test_a_file_source_binds_a_dataset_to_one_ledger_by_content(r, redis_url, queue, tmp_path):
    """The same file under another name or label no longer gets a fresh budget."""
    from streamdp.privacy.ledger import file_sha256, file_source
    from streamdp.service.job_queue import FILE_SOURCES, SourceLabelWarning

    q, _ = queue
    # a unique last line (dropped as a bad row): this test's own ledger on the shared Redis
    a, sch = _votes_csv(tmp_path, "a.csv", tail=f"# {uuid.uuid4().hex}\n")
    b = tmp_path / "copy-of-a.csv"
    b.write_bytes(a.read_bytes())
    original = a.read_text()
    source = file_source(str(a))
    digest = file_sha256(str(a))
    label = f"label-{uuid.uuid4().hex[:8]}"
    try:
        assert source == file_source(str(b)) and source.startswith("file-")
        rc, out = _cli(redis_url, "ledger", "--source-file", str(b), "--set-budget", "1")
        assert rc == 0 and source in out
        common = ["--schema", str(sch), "--epsilon", "0.6", "--param", "n_trees=3", "--param", "height=2", "--queue", q]
        rc, jid1 = _cli(redis_url, "job", "submit", "private-rdt", "--source-file", str(a), *common)
        assert rc == 0
        rc, jid2 = _cli(redis_url, "job", "submit", "private-rdt", "--source-file", str(b), *common)
        assert rc == 0
        JobWorker(r, queue=q, block_ms=50).run(until_drained=True, handle_signals=False)
        jq = JobQueue(r, q)
        assert jq.status(jid1.strip())["status"] == "done"
        st2 = jq.status(jid2.strip())
        assert st2["status"] == "refused" and st2["source"] == source, st2  # the copy hits the same ledger
        assert RedisLedger(r).spent(source)[0] == pytest.approx(0.6)
        # the same bytes under a free-text label: allowed (another ledger), but flagged
        with pytest.raises(JobError, match=f"source '{label}' has no budget.*nothing was charged"):
            jq.submit(
                "private-rdt", label, 0.5, {"n_trees": 2}, source_kind="dataset", dataset=str(b), schema=str(sch)
            )  # (refused at submit: a user's job without a budget was accepted)
        RedisLedger(r).set_budget(label, 1.0)
        with pytest.warns(SourceLabelWarning, match=f"submitted under source '{source}' before"):
            jq.submit("private-rdt", label, 0.5, {"n_trees": 2}, source_kind="dataset", dataset=str(b), schema=str(sch))
        # a file-<hash> source must be that file's content
        with pytest.raises(JobError, match="names another file's content"):
            jq.submit("private-rdt", source, 0.5, {}, source_kind="dataset", dataset=str(sch), schema=str(sch))
        # a file changed after submit is refused before any charge
        RedisLedger(r).set_budget(source, 5.0)
        jid3 = jq.submit(
            "private-rdt", source, 0.5, {"n_trees": 2}, source_kind="dataset", dataset=str(a), schema=str(sch)
        )
        a.write_text(original + "# changed\n")
        q_only = JobWorker(r, queue=q, block_ms=50)
        while jq.status(jid3)["status"] not in ("done", "failed", "refused"):
            assert q_only.step() == 1
        st3 = jq.status(jid3)
        assert st3["status"] == "failed" and "changed or vanished" in st3["reason"], st3
        assert not _spends(r, source, jid3)
    finally:
        r.delete(*ledger_keys(source), *ledger_keys(label))
        r.hdel(FILE_SOURCES, digest)


def test_dpea_job_when_present(r, model, queue):
    pytest.importorskip("streamdp.learners.dpea")
    q, _ = queue
    jq = JobQueue(r, q)
    with pytest.raises(JobError, match="DPEA has no parameter|has no parameter 'bogus'"):
        jq.submit("dpea", model, 1.0, {"bogus": 1})
    jid = jq.submit("dpea", model, 1.0, {"max_depth": 3, "embed_depth": 1})
    JobWorker(r, queue=q, block_ms=50).run(until_drained=True, handle_signals=False)
    st = jq.status(jid)
    assert st["status"] == "done", st
    assert set(jq.result(jid).predict(VOTES.X)) <= set(VOTES.schema.classes)


LEARNER_JOBS = [
    ("sulq-id3", "id3", {"max_depth": 3}),
    ("diffp-id3", "id3", {"max_depth": 3, "scorer": "max"}),
    ("diffp-c45", "c45", {"max_depth": 3, "scorer": "gini"}),
    ("hanisch-forest", "hanisch", {"max_depth": 2, "n_trees": 5}),
]


@pytest.mark.parametrize("alg,module,params", LEARNER_JOBS, ids=[a for a, _, _ in LEARNER_JOBS])
def test_every_batch_learner_runs_as_a_job(r, redis_url, model, queue, tmp_path, alg, module, params):
    pytest.importorskip(f"streamdp.learners.{module}")
    from streamdp.cli import main as cli_main

    q, _ = queue
    jq = JobQueue(r, q)
    jid = jq.submit(alg, model, 2.0, params)
    JobWorker(r, queue=q, block_ms=50).run(until_drained=True, handle_signals=False)
    st = jq.status(jid)
    assert st["status"] == "done", st
    assert [s.epsilon for s in _spends(r, model, jid)] == [2.0]
    est = jq.result(jid)
    assert type(est).__name__ == type(fetch_model(r, st["result"])).__name__
    assert est.epsilon_spent_ <= 2.0 + 1e-9
    assert set(est.predict(VOTES.X)) <= set(VOTES.schema.classes)
    # 'streamdp model get' writes any job model; load_model reads it back
    out = tmp_path / "m.sdp"
    rc = cli_main(["--redis-url", redis_url, "model", "get", st["result"], "-o", str(out)])
    assert rc == 0
    back = load_model(out.read_bytes())
    assert np.array_equal(back.predict(VOTES.X), est.predict(VOTES.X))


def test_unavailable_algorithm_is_reported(r, model, queue, monkeypatch):
    import dataclasses

    from streamdp.jobs import runner as jobs

    # a build without the learner's module: the registry names a class streamdp.learners lacks
    gone = dataclasses.replace(jobs.ALGORITHMS["hanisch-forest"], learner="NoSuchLearner")
    monkeypatch.setitem(jobs.ALGORITHMS, "hanisch-forest", gone)
    with pytest.raises(JobError, match="algorithm 'hanisch-forest' is not available in this build"):
        JobQueue(r, queue[0]).submit("hanisch-forest", model, 1.0)


def test_job_entry_with_undecodable_fields_is_acked_and_the_job_worker_goes_on(r, queue):
    """A job-queue entry whose job id (or field name) is not UTF-8 is dropped; the job worker does not die."""
    q, _ = queue
    w = JobWorker(r, queue=q, block_ms=50)
    r.xadd(q, {b"job": b"\xff\xfe"})
    r.xadd(q, {b"\xff": b"x"})
    assert w.run(until_drained=True, max_seconds=20, handle_signals=False) == 2
    assert r.xlen(q) == 0 and w.drained()
