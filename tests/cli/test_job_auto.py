"""``streamdp job submit auto`` on fakeredis: queued like any learner, charged exactly its epsilon once, and
published as the winner's model."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import pytest

from streamdp.cli import job as job_cli
from streamdp.learners import load_model
from streamdp.learners.catalogue import ALGORITHMS
from streamdp.service.ledger_store import RedisLedger

fakeredis = pytest.importorskip("fakeredis")


@pytest.fixture
def r(monkeypatch):
    client = fakeredis.FakeRedis(server=fakeredis.FakeServer(), version=(7, 0))
    monkeypatch.setattr(job_cli, "client", lambda args: client)
    return client


def _cli(*argv: str) -> tuple[int, str]:
    from streamdp.cli import main

    out = io.StringIO()
    with redirect_stdout(out):
        rc = main(["--redis-url", "redis://unused:1", *argv])
    return rc, out.getvalue()


def test_submit_auto_runs_charges_epsilon_once_and_publishes_the_winner(r):
    from streamdp.service.job_worker import JobWorker

    RedisLedger(r).set_budget("votes-auto", 2.0)
    rc, out = _cli(
        "job", "submit", "auto", "--source", "votes-auto", "--dataset", "congressional-voting", "--epsilon", "1",
        "--param", 'candidates=[["private-rdt", {"n_trees": 3}], ["diffp-id3", {"max_depth": 2}]]',
        "--queue", "q-auto",
    )  # fmt: skip
    assert rc == 0, out
    jid = out.strip()
    assert JobWorker(r, queue="q-auto", block_ms=10).run(until_drained=True) == 1
    rc, out = _cli("job", "status", jid, "--queue", "q-auto", "--json")
    st = json.loads(out)
    assert st["status"] == "done", st
    assert RedisLedger(r).spent("votes-auto") == (pytest.approx(1.0), 0.0)
    from streamdp.service.job_queue import JobQueue

    model = load_model(JobQueue(r, "q-auto").result_bytes(jid))
    assert type(model).__name__ in ("PrivateForest", "DiffPID3")


def test_submit_auto_with_a_bad_candidate_is_refused_at_submit_before_any_charge(r, capsys):
    RedisLedger(r).set_budget("votes-auto", 2.0)
    rc, out = _cli(
        "job", "submit", "auto", "--source", "votes-auto", "--dataset", "congressional-voting", "--epsilon", "1",
        "--param", 'candidates=[["nope", {}]]', "--queue", "q-auto",
    )  # fmt: skip
    assert rc != 0 and out == ""
    assert "unknown algorithm 'nope'" in capsys.readouterr().err
    assert RedisLedger(r).spent("votes-auto") == (0.0, 0.0)
    assert r.xlen("q-auto") == 0  # nothing queued


def test_auto_is_listed_with_its_parameters():
    d = ALGORITHMS["auto"].describe()
    assert d["available"] and d["params"] == ["candidates", "selection_share", "seed", "holdout_share"]
