"""Redis tests clean up their keys even when they fail (the ``unique_name`` and ``job_queue`` fixtures' finalizers).

A test that creates a model, merges records, submits a job and then fails runs in a pytest subprocess against the
same Redis; afterwards none of its keys is left.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from streamdp.service.connection import connect

ROOT = Path(__file__).resolve().parents[1]

FAILING_TEST = """
import os

from streamdp.records.datasets import load
from streamdp.service import JobQueue, Producer, Worker, create_model
from streamdp.service.connection import connect
from streamdp.service.retention import set_retention


def test_fails_after_writing(redis_url, unique_name, job_queue):
    ds = load("congressional-voting")
    create_model(redis_url, unique_name, ds.schema, n_trees=2, height=3, epsilon=1.0, release="batch", ledger_budget=2.0)
    set_retention(connect(redis_url), unique_name, records=1000)
    with Producer(redis_url, unique_name, batch_size=100) as p:
        p.push(ds.X, ds.y)
    Worker(redis_url, unique_name, block_ms=20).run(until_drained=True, max_seconds=60, handle_signals=False)
    jid = JobQueue(redis_url, job_queue).submit("private-rdt", unique_name, 0.1, {}, result_name=unique_name + "-rdt")
    r = connect(redis_url)
    n = len(list(r.scan_iter(match="sdp:{%s}:*" % unique_name, count=10_000)))
    with open(os.environ["STREAMDP_TEST_NAMES"], "w") as f:
        f.write(" ".join([unique_name, job_queue, jid, str(n)]))
    assert False, "a failure forced inside the test body"
"""


@pytest.mark.slow
def test_a_failing_redis_test_leaves_no_keys(redis_url, tmp_path):
    (tmp_path / "conftest.py").write_text("from tests.conftest import *  # noqa: F403\n")
    (tmp_path / "test_fails.py").write_text(FAILING_TEST)
    names = tmp_path / "names"
    env = {**os.environ, "REDIS_URL": redis_url, "STREAMDP_TEST_NAMES": str(names), "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-q", str(tmp_path / "test_fails.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 1 and "a failure forced inside the test body" in run.stdout, run.stdout + run.stderr
    name, queue, job_id, n_keys = names.read_text().split()
    assert int(n_keys) >= 5  # spec, state, stream, published model and versions, ledger, ... existed
    r = connect(redis_url)
    left = [k for pattern in (f"sdp:{{{name}}}:*", f"sdp:{{job:{name}*}}:*") for k in r.scan_iter(match=pattern)]
    assert left == []
    assert not r.hexists("sdp:registry", name) and not r.hexists("sdp:job-names", f"{name}-rdt")
    assert not r.exists(queue, f"{queue}:index", f"sdp:job:{{{job_id}}}")
