"""A new user's trial of ``streamdp job submit`` (fakeredis): what cannot work is refused before any charge, what
the public parameters say is warned, and the messages name what is wrong."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from streamdp.privacy.ledger import file_source
from streamdp.records.datasets import load
from streamdp.service.ledger_store import RedisLedger
from tests.cli.conftest import run_cli

ROOT = Path(__file__).resolve().parents[2]
NUMERIC = {
    "attributes": [{"name": n, "type": "numeric", "min": 0, "max": 8} for n in ("sl", "sw", "pl", "pw")],
    "label": {"name": "species", "values": ["setosa", "versicolor", "virginica"]},
}


@pytest.fixture
def iris(r, tmp_path):
    """An all-numeric dataset file (150 records, a ledger budget of 2 for its content) and its schema file."""
    rng = np.random.default_rng(0)
    rows = "".join(
        f"{rng.uniform(0, 8):.1f},{rng.uniform(0, 8):.1f},{rng.uniform(0, 8):.1f},{rng.uniform(0, 8):.1f},"
        f"{NUMERIC['label']['values'][i % 3]}\n"
        for i in range(150)
    )
    (tmp_path / "iris.csv").write_text("sl,sw,pl,pw,species\n" + rows)
    (tmp_path / "iris_schema.json").write_text(json.dumps(NUMERIC))
    RedisLedger(r).set_budget(file_source(str(tmp_path / "iris.csv")), 2.0)
    return str(tmp_path / "iris.csv"), str(tmp_path / "iris_schema.json")


def _run(r, queue: str) -> None:
    from streamdp.service.job_worker import JobWorker

    assert JobWorker(r, queue=queue, block_ms=10).run(until_drained=True) == 1


def _status(jid: str, queue: str) -> dict:
    return json.loads(run_cli("job", "status", jid, "--queue", queue, "--json")[1])


@pytest.mark.parametrize("learner", ["sulq-id3", "diffp-id3", "dpea", "hanisch-forest"])
def test_a_categorical_only_learner_on_a_numeric_schema_is_refused_at_submit(r, iris, learner, capsys):
    """The trial's finding: charged, run, then a warning that nothing was used (the model: class counts alone)."""
    data, schema = iris
    rc, _ = run_cli(
        "job", "submit", learner, "--source-file", data, "--schema", schema, "--epsilon", "0.5", "--queue", "q",
    )  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and "splits on categorical attributes only and this schema has none" in err, err
    assert "nothing was charged" in err and not r.exists("q")  # nothing queued
    assert RedisLedger(r).spent(file_source(data)) == (0.0, 0.0)


def test_the_library_refuses_the_same_before_any_charge():
    from streamdp import Schema
    from streamdp.learners import DPEA, DiffPC45, SuLQID3
    from streamdp.learners.catalogue import AlgorithmError
    from streamdp.privacy.ledger import InMemoryLedger

    schema = Schema.from_dict(NUMERIC)
    X = np.random.default_rng(1).uniform(0, 8, (60, 4))
    y = np.array(NUMERIC["label"]["values"], dtype=object)[np.arange(60) % 3]
    led = InMemoryLedger()
    led.set_budget("iris", 1.0)
    for cls in (SuLQID3, DPEA):
        with pytest.raises(AlgorithmError, match="splits on categorical attributes only and this schema has none"):
            cls(schema, epsilon=0.5).fit(X, y, ledger=led, source="iris")
    assert led.spent("iris") == (0.0, 0.0)
    DiffPC45(schema, epsilon=0.5).fit(X, y, ledger=led, source="iris")  # (splits numbers: fits)
    assert led.spent("iris")[0] == pytest.approx(0.5)


def test_auto_leaves_out_the_candidates_that_cannot_use_the_schema(r, iris, capsys):
    data, schema = iris
    cands = '[["sulq-id3", {}], ["private-rdt", {"n_trees": 2}]]'
    rc, out = run_cli(
        "job", "submit", "auto", "--source-file", data, "--schema", schema, "--epsilon", "1",
        "--param", f"candidates={cands}", "--queue", "q",
    )  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    assert "auto leaves out candidate sulq-id3" in capsys.readouterr().err  # said at submit
    _run(r, "q")
    st = _status(out.strip(), "q")
    assert st["status"] == "done" and st["learner"] == "private-rdt n_trees=2", st  # the one left: no selection
    assert len([w for w in st["warnings"] if w.startswith("auto leaves out candidate sulq-id3")]) == 1, st["warnings"]
    # none left: refused at submit
    rc, _ = run_cli(
        "job", "submit", "auto", "--source-file", data, "--schema", schema, "--epsilon", "1",
        "--param", 'candidates=[["dpea", {}]]', "--queue", "q2",
    )  # fmt: skip
    assert rc == 2 and "auto has no candidate that can learn from this schema" in capsys.readouterr().err
    assert not r.exists("q2")


def test_a_kanon_forest_that_released_nothing_says_so(r, capsys):
    """k=30 at beta=0.01 over the 435 votes: every released count is 0 (a cell needs about 3,000 records)."""
    RedisLedger(r).set_budget("votes-k", 5.0, delta=0.5)
    rc, out = run_cli(
        "job", "submit", "kanon-forest", "--source", "votes-k", "--dataset", "congressional-voting",
        "--epsilon", "0.3", "--param", "k=30", "--param", "beta=0.01", "--queue", "q",
    )  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    _run(r, "q")
    st = _status(out.strip(), "q")
    assert st["status"] == "done"
    said = [w for w in st["warnings"] if "released no records" in w]
    assert len(said) == 1 and "3,000 records of a class" in said[0], st["warnings"]
    assert "warning       kanon-forest released no records" in run_cli("job", "status", st["id"], "--queue", "q")[1]


def test_missing_files_are_named_clearly(r, tmp_path, capsys):
    RedisLedger(r).set_budget("votes", 1.0)
    missing = str(tmp_path / "nosuch.json")
    rc, _ = run_cli(
        "job", "submit", "private-rdt", "--source", "votes", "--dataset", "congressional-voting",
        "--schema", missing, "--epsilon", "0.5", "--queue", "q",
    )  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and f"schema {missing!r}: no such file, nor a bundled schema" in err and "Errno" not in err, err
    rc, _ = run_cli(
        "job", "submit", "private-rdt", "--source-file", "congressional-voting", "--epsilon", "0.5", "--queue", "q",
    )  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and "Errno" not in err, err
    assert "takes a CSV file's path" in err and "name it with --dataset congressional-voting" in err
    assert not r.exists("q")


def test_a_dataset_charged_to_a_models_ledger_is_warned(r, capsys):
    from streamdp.service.registry import create_model

    votes = load("congressional-voting")
    create_model(r, "votes-model", votes.schema, n_trees=2, height=2, epsilon=1.0, ledger_budget=5.0)
    rc, _ = run_cli(
        "job", "submit", "private-rdt", "--source", "votes-model", "--dataset", "congressional-voting",
        "--epsilon", "0.5", "--queue", "q",
    )  # fmt: skip
    assert rc == 0
    assert "source 'votes-model' is a model: this job over 'congressional-voting' is charged to that model's " in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize("learner", ["diffp-id3", "private-rdt", "auto"])
def test_a_nearly_exact_epsilon_is_warned_at_submit_and_in_the_status(r, capsys, learner):
    RedisLedger(r).set_budget("votes", 1e301)
    rc, out = run_cli(
        "job", "submit", learner, "--source", "votes", "--dataset", "congressional-voting",
        "--epsilon", "1e300", "--queue", "q",
    )  # fmt: skip
    assert rc == 0
    err = capsys.readouterr().err
    assert err.count("releases nearly exact counts") == 1 and "warning: epsilon=1e+300 releases nearly" in err, err
    _run(r, "q")
    st = _status(out.strip(), "q")
    assert st["status"] == "done" and sum("releases nearly exact counts" in w for w in st["warnings"]) == 1, st
    rc, out = run_cli(
        "job", "submit", learner, "--source", "votes", "--dataset", "congressional-voting",
        "--epsilon", "1", "--queue", "q",
    )  # fmt: skip
    assert rc == 0 and "nearly exact" not in capsys.readouterr().err


def test_an_empty_name_is_refused_and_a_waiting_job_has_no_result_yet(r, capsys):
    RedisLedger(r).set_budget("votes", 1.0)
    argv = ("job", "submit", "private-rdt", "--source", "votes", "--dataset", "congressional-voting", "--epsilon",
            "0.5", "--queue", "q")  # fmt: skip
    rc, _ = run_cli(*argv, "--name", "")
    assert rc == 2 and "result name: invalid model name ''" in capsys.readouterr().err and not r.exists("q")
    rc, out = run_cli(*argv)
    assert rc == 0
    capsys.readouterr()
    rc, _ = run_cli("job", "result", out.strip(), "--queue", "q")
    err = capsys.readouterr().err
    assert rc == 2 and f"job {out.strip()} is queued: no result yet" in err and "(queued)" not in err, err


def test_python_dash_m_streamdp_is_therun_cli():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run(
        [sys.executable, "-m", "streamdp", "job", "--help"], env=env, capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0 and "usage: streamdp job" in p.stdout, p.stderr
