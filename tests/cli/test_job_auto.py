"""``streamdp job submit auto`` on fakeredis: queued like any learner, charged exactly its epsilon once, and
published as the winner's model."""

from __future__ import annotations

import json

import pytest

from streamdp.learners import load_model
from streamdp.learners.catalogue import ALGORITHMS
from streamdp.service.ledger_store import RedisLedger
from tests.cli.conftest import run_cli


def test_submit_auto_runs_charges_epsilon_once_and_publishes_the_winner(r):
    from streamdp.service.job_worker import JobWorker

    RedisLedger(r).set_budget("votes-auto", 2.0)
    rc, out = run_cli(
        "job", "submit", "auto", "--source", "votes-auto", "--dataset", "congressional-voting", "--epsilon", "1",
        "--param", 'candidates=[["private-rdt", {"n_trees": 3}], ["diffp-id3", {"max_depth": 2}]]',
        "--queue", "q-auto",
    )  # fmt: skip
    assert rc == 0, out
    jid = out.strip()
    assert JobWorker(r, queue="q-auto", block_ms=10).run(until_drained=True) == 1
    rc, out = run_cli("job", "status", jid, "--queue", "q-auto", "--json")
    st = json.loads(out)
    assert st["status"] == "done", st
    assert RedisLedger(r).spent("votes-auto") == (pytest.approx(1.0), 0.0)
    from streamdp.service.job_queue import JobQueue

    model = load_model(JobQueue(r, "q-auto").result_bytes(jid))
    assert type(model).__name__ in ("PrivateForest", "DiffPID3")
    won = {"PrivateForest": "private-rdt n_trees=3", "DiffPID3": "diffp-id3 max_depth=2"}
    assert st["learner"] == won[type(model).__name__] and st["warnings"] == []  # the winner is released
    rc, out = run_cli("job", "status", jid, "--queue", "q-auto")
    assert f"learner       {st['learner']}" in out
    rc, out = run_cli("job", "result", jid, "--queue", "q-auto")
    assert rc == 0 and f"learner: {st['learner']} (chosen privately by auto)" in out


def test_a_jobs_learner_warnings_are_in_its_status_and_result(r, tmp_path, capsys):
    """DPEA given numeric columns warned only in the worker's process; the job's status and result now say it."""
    from streamdp.service.job_worker import JobWorker

    schema = {
        "attributes": [
            {"name": "x", "type": "numeric", "min": 0, "max": 1},
            {"name": "c", "type": "categorical", "values": ["a", "b"]},
        ],
        "label": {"name": "y", "values": ["no", "yes"]},
    }
    (tmp_path / "s.json").write_text(json.dumps(schema))
    rows = "".join(f"{i / 100:.2f},{'ab'[i % 2]},{'yes' if i > 50 else 'no'}\n" for i in range(100))
    (tmp_path / "d.csv").write_text("x,c,y\n" + rows)
    RedisLedger(r).set_budget("mixed", 2.0)
    rc, out = run_cli(
        "job", "submit", "dpea", "--source", "mixed", "--dataset", str(tmp_path / "d.csv"),
        "--schema", str(tmp_path / "s.json"), "--epsilon", "1", "--queue", "q-w",
    )  # fmt: skip
    assert rc == 0, out
    jid = out.strip()
    assert JobWorker(r, queue="q-w", block_ms=10).run(until_drained=True) == 1
    st = json.loads(run_cli("job", "status", jid, "--queue", "q-w", "--json")[1])
    assert st["status"] == "done" and st["learner"] == "dpea"
    assert len(st["warnings"]) == 1 and "numeric ['x'] are not used" in st["warnings"][0]
    assert (
        "warning       DPEA splits on categorical attributes only" in run_cli("job", "status", jid, "--queue", "q-w")[1]
    )
    capsys.readouterr()
    assert run_cli("job", "result", jid, "--queue", "q-w")[0] == 0
    assert "warning: DPEA splits on categorical attributes only" in capsys.readouterr().err


def test_submit_auto_with_a_bad_candidate_is_refused_at_submit_before_any_charge(r, capsys):
    RedisLedger(r).set_budget("votes-auto", 2.0)
    rc, out = run_cli(
        "job", "submit", "auto", "--source", "votes-auto", "--dataset", "congressional-voting", "--epsilon", "1",
        "--param", 'candidates=[["nope", {}]]', "--queue", "q-auto",
    )  # fmt: skip
    assert rc != 0 and out == ""
    assert "candidate 'nope': unknown algorithm" in capsys.readouterr().err
    assert RedisLedger(r).spent("votes-auto") == (0.0, 0.0)
    assert r.xlen("q-auto") == 0  # nothing queued


def test_auto_is_listed_with_its_parameters():
    d = ALGORITHMS["auto"].describe()
    assert d["available"] and d["params"] == ["candidates", "selection_share", "seed", "holdout_share"]
