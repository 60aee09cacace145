"""The job commands of the CLI and the job worker script, on a real Redis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from streamdp.forest.model import PrivateForest
from streamdp.learners import load_model
from streamdp.service.connection import connect
from tests.service.conftest import _cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def r(redis_url):
    return connect(redis_url)


def test_cli_submit_status_list_result_and_worker_script(r, redis_url, model, queue, tmp_path, capsys):
    q, _ = queue
    rc, out = _cli(
        redis_url,
        "job",
        "submit",
        "private-rdt",
        "--source",
        model,
        "--epsilon",
        "0.5",
        "--param",
        "n_trees=3",
        "--param",
        "height=2",
        "--name",
        f"{model}-cli",
        "--queue",
        q,
    )
    assert rc == 0
    jid = out.strip()
    rc, out = _cli(redis_url, "job", "status", jid, "--queue", q, "--json")
    assert json.loads(out)["status"] == "queued"
    rc, out = _cli(redis_url, "job", "status", f"{model}-cli", "--queue", q, "--json")  # by the result's name
    assert rc == 0 and json.loads(out)["id"] == jid and json.loads(out)["status"] == "queued"
    # the worker entry point, as a real process
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)}
    p = subprocess.run(
        [sys.executable, str(ROOT / "workers" / "job_worker.py"), "--until-drained", "--queue", q, "--block-ms", "50"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    rc, out = _cli(redis_url, "job", "status", jid, "--queue", q)
    assert rc == 0 and "status        done" in out
    assert _cli(redis_url, "job", "status", f"{model}-cli", "--queue", q) == (rc, out)
    rc, out = _cli(redis_url, "job", "list", "--queue", q)
    assert jid in out and "done" in out
    rc, out = _cli(redis_url, "job", "result", jid, "--queue", q, "-o", str(tmp_path / "m.bin"))
    assert rc == 0 and isinstance(load_model((tmp_path / "m.bin").read_bytes()), PrivateForest)
    rc, out = _cli(redis_url, "model", "retention", model, "--records", "5", "--json")
    assert json.loads(out) == {"seconds": None, "records": 5}
    capsys.readouterr()
    rc, _ = _cli(
        redis_url,
        "job",
        "submit",
        "private-rdt",
        "--source",
        model,
        "--epsilon",
        "1",
        "--param",
        "trees=3",
        "--queue",
        q,
    )
    assert rc == 2 and "has no parameter 'trees'" in capsys.readouterr().err
    rc, _ = _cli(redis_url, "job", "submit", "nope", "--source", model, "--epsilon", "1", "--queue", q)
    assert rc == 2 and "unknown algorithm 'nope'" in capsys.readouterr().err
