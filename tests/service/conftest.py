"""Fixtures and helpers shared by the service tests.

``r`` is a fakeredis server per test, with a small model on it (:func:`_model`); a test module on the real
Redis defines its own ``r`` (``connect(redis_url)``), which the job fixtures below (``model``, ``queue``)
then use.
"""

from __future__ import annotations

import csv
import io
import json
import math
import uuid
import warnings
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from streamdp.privacy import NotPrivateWarning
from streamdp.records.datasets import load
from streamdp.service import job_queue
from streamdp.service.keys import JOB_RESULTS, Keys
from streamdp.service.ledger_store import ledger_keys
from streamdp.service.producer import Producer
from streamdp.service.registry import create_model, delete_model
from streamdp.service.retention import set_retention
from streamdp.service.stream_worker import Worker

DS = load("congressional-voting")


@pytest.fixture
def r():
    """A fakeredis server of its own (Lua via lupa); a test module on the real Redis defines its own ``r``."""
    fakeredis = pytest.importorskip("fakeredis")
    pytest.importorskip("lupa")
    server = fakeredis.FakeServer()
    client = fakeredis.FakeRedis(server=server, version=(7, 0))
    yield client


@pytest.fixture
def key_file(tmp_path):
    """A noise key file the workers accept (mode 600): models with a privacy id need one."""
    f = tmp_path / "noise.key"
    f.write_bytes(bytes(range(64)))
    f.chmod(0o600)
    return str(f)


def _model(r, name="m", epsilon=1.0, **kw):
    kw.setdefault("release", "batch")  # these tests are about the per-batch commit; windows: test_windows.py
    with warnings.catch_warnings():  # (epsilon=inf: create_model's NotPrivateWarning, expected here)
        warnings.simplefilter("ignore", NotPrivateWarning)
        return create_model(
            r, name, DS.schema, n_trees=3, height=3, epsilon=epsilon, seed=1, **kw, not_private=math.isinf(epsilon)
        )


def _worker(r, name, **kw):
    kw.setdefault("block_ms", 10)
    return Worker(r, name, consumer=kw.pop("consumer", None), **kw)


def _drain(w, limit=1000):
    for _ in range(limit):
        if w.step(block_ms=10) == 0 and w.drained():
            return
    raise AssertionError("stream not drained")


VOTES = load("congressional-voting")  # the job tests' data


@pytest.fixture
def model(r, unique_name):
    """A vote model with all 435 records still in its stream (no stream worker ran), ledger budget 10."""
    create_model(r, unique_name, VOTES.schema, n_trees=3, height=3, epsilon=1.0, ledger_budget=10.0, release="batch")
    set_retention(r, unique_name, records=10**6)  # (a job over a model that keeps nothing merged is refused)
    with Producer(r, unique_name, batch_size=100) as p:
        p.push(VOTES.X, VOTES.y)
    yield unique_name
    delete_model(r, unique_name)
    r.delete(*ledger_keys(unique_name))


@pytest.fixture
def queue(r):
    q = f"sdp:jobs:t-{uuid.uuid4().hex[:10]}"
    created: list[str] = []
    yield q, created
    ids = [i.decode() for i in r.zrange(f"{q}:index", 0, -1)]
    for i in ids:
        res = r.hget(job_queue.job_key(i), "result")
        if res:
            r.hdel(JOB_RESULTS, res.decode())
            if r.hget(job_queue.RESULT_NAMES, res.decode()) == i.encode():  # (the name's hold, the job's own only)
                r.hdel(job_queue.RESULT_NAMES, res.decode())
            r.delete(Keys(res.decode(), job=True).pub_model)
        r.delete(job_queue.job_key(i))
    r.delete(q, f"{q}:index")


def _votes_csv(tmp_path, name: str = "votes.csv", tail: str = "") -> tuple[Path, Path]:
    """The votes as a CSV file with a header (plus ``tail``), and its schema JSON file."""
    schema = VOTES.schema
    buf = io.StringIO()
    wr = csv.writer(buf)
    wr.writerow([*schema.names, schema.label.name])
    for x, y in zip(VOTES.X, VOTES.y):
        wr.writerow([*x, y])
    data, sch = tmp_path / name, tmp_path / "schema.json"
    data.write_text(buf.getvalue() + tail)
    sch.write_text(json.dumps(schema.to_dict()))
    return data, sch


# -- CLI -------------------------------------------------------------------------------------
def _cli(url, *argv) -> tuple[int, str]:
    from streamdp.cli import main

    out = io.StringIO()
    with redirect_stdout(out):
        rc = main(["--redis-url", url, *argv])
    return rc, out.getvalue()
