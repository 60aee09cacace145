"""Push errors point at the input (a CSV file's line, a record's 0-based position) and say what was pushed.

Against a real Redis (the ``redis_url`` fixture); the models made here are named ``pe-...`` and deleted.
"""

from __future__ import annotations

import csv
import math
import re
from importlib import resources
from pathlib import Path

import pytest
import redis as redis_py

from streamdp import Schema
from streamdp.cli import main
from streamdp.cli.push import NO_WORKER
from streamdp.records.datasets import load
from streamdp.records.sources import SourceError
from streamdp.service import Producer, create_model
from streamdp.service.keys import Keys

# create_model(not_private=True)'s own NotPrivateWarning, expected here
pytestmark = [
    pytest.mark.redis,
    pytest.mark.filterwarnings("ignore:model .*NOT private:streamdp.privacy.secure_random.NotPrivateWarning"),
]
DS = load("congressional-voting")
SCHEMA = str(resources.files("streamdp").joinpath("data", "schemas", "congressional-voting.json"))


@pytest.fixture
def name(redis_url, unique_name):
    """The test's model name: its keys, the ledger included, go at teardown (``unique_name``)."""
    return unique_name


def _votes_rows(n):
    return [[*map(str, DS.X[i % len(DS.y)]), str(DS.y[i % len(DS.y)])] for i in range(n)]


def _write(path, rows):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow([*DS.schema.names, "party"])
        w.writerows(rows)


def test_cli_push_of_a_file_malformed_mid_way_names_the_line_and_what_was_pushed(
    redis_url, name, tmp_path, capsys, monkeypatch
):
    """An unbalanced quote after 500 of 1,000 records (chunks of 200 records, batches of 50): the push stops
    naming line 502 (no content), says 400 records were pushed (the progress bar's last line too), and the
    corrected file pushed again merges only the other 600."""
    import streamdp.records.frames

    monkeypatch.setattr(streamdp.records.frames, "CHUNK_ROWS", 200)  # push's chunks: 200 records, 4 batches
    u = ["--redis-url", redis_url]
    assert (
        main(u + ["model", "create", name, "--schema", SCHEMA, "--trees", "2", "--height", "3", "--epsilon", "1"]) == 0
    )
    rows = _votes_rows(1000)
    good = tmp_path / "votes.csv"
    _write(good, rows)
    text = good.read_text().splitlines(keepends=True)
    bad = tmp_path / "votes-bad.csv"
    bad.write_text("".join(text[:501] + ['"' + text[501]] + text[502:]))  # line 502: the 501st record
    capsys.readouterr()
    assert main(u + ["push", name, str(bad), "--batch-size", "50"]) == 2
    err = capsys.readouterr().err
    msg = err.splitlines()[-1]
    assert msg.startswith("streamdp: error: ") and f"{bad}: line 502: malformed CSV" in msg
    assert "the first 400 records were pushed" in msg and "merges only the rest" in msg
    assert not re.search(r"democrat|republican|C error|row \d", msg)
    bars = [ln for ln in err.splitlines() if ln.startswith("[")]
    assert bars and " 400 records" in bars[-1]  # the bar's last line: what was pushed
    r = redis_py.Redis.from_url(redis_url, socket_timeout=30)
    assert r.xlen(Keys(name).records) == 8
    assert main(u + ["push", name, str(good), "--batch-size", "50", "-q"]) == 0  # the corrected file
    assert "sent 1,000 records in 20 batches" in capsys.readouterr().out
    assert main(u + ["worker", name, "--processes", "1", "--until-drained", "--block-ms", "100"]) == 0
    stats = r.hgetall(Keys(name).stats)
    assert int(stats[b"records_merged"]) == 1000 and int(stats[b"batches_merged"]) == 20
    assert int(stats[b"acked_without_merge"]) == 8


def _model_and_a_file_with_a_bad_line(redis_url, name, tmp_path) -> tuple[list[str], Path]:
    """A fresh model and a 30-record file whose third record (line 4) has an undeclared value."""
    u = ["--redis-url", redis_url]
    assert (
        main(u + ["model", "create", name, "--schema", SCHEMA, "--trees", "2", "--height", "3", "--epsilon", "1"]) == 0
    )
    rows = _votes_rows(30)
    rows[2][0] = "perhaps"  # the third record: line 4
    path = tmp_path / "v.csv"
    _write(path, rows)
    return u, path


def test_cli_push_summary_names_the_first_invalid_line(redis_url, name, tmp_path, capsys):
    u, path = _model_and_a_file_with_a_bad_line(redis_url, name, tmp_path)
    capsys.readouterr()
    assert main(u + ["push", name, str(path), "--batch-size", "10", "-q"]) == 0
    got = capsys.readouterr()
    assert "1 invalid record goes to the dead-letter stream (first: line 4: attribute 'handicapped-infants'" in got.out
    assert "perhaps" not in got.out + got.err
    # the schema's declaration (public) is named, as on_invalid="raise" names it; the dead letter stores none
    declared = list(Schema.from_json(SCHEMA).attributes[0].values)
    assert f"has a value not declared in the schema (declared: {declared}))" in got.out
    # a user fixed the line and pushed the whole file again: that batch's 9 valid records counted twice
    assert "pushing a corrected copy of the whole file would count them again" in got.err


def test_cli_repush_of_a_file_with_a_bad_line_lists_its_dead_letter_once(redis_url, name, tmp_path, capsys):
    """A trial's finding: every re-push of a file with a bad line added one more dead letter (its good records
    merged once), so ``stats --dead-letters`` listed the same refused row once per push."""
    u, path = _model_and_a_file_with_a_bad_line(redis_url, name, tmp_path)
    worker = u + ["worker", name, "--processes", "1", "--until-drained", "--block-ms", "100"]
    for _ in range(3):
        assert main(u + ["push", name, str(path), "--batch-size", "10", "-q"]) == 0
        assert main(worker) == 0
    capsys.readouterr()
    assert main(u + ["stats", name, "--dead-letters"]) == 0
    out = capsys.readouterr().out
    assert [ln for ln in out.splitlines() if ln.startswith("    record ")] == [
        "    record 2 (0-based) of the entry's batch: producer: attribute 'handicapped-infants' has a value not declared in "
        "the schema"
    ] and "perhaps" not in out
    assert main(u + ["push", name, str(path), "--batch-size", "10", "-q", "--source", "tuesday"]) == 0
    assert main(worker) == 0
    capsys.readouterr()
    assert main(u + ["stats", name, "--dead-letters"]) == 0  # new records (another source): refused again
    assert sum(ln.startswith("    record 2 ") for ln in capsys.readouterr().out.splitlines()) == 2


def test_cli_worker_logs_json_lines_at_its_default_verbosity_as_documented(redis_url, name, tmp_path, capfd):
    """A trial asked whether the worker's JSON lines at its default verbosity contradict the docs: they do not
    (every log line is JSON, warnings always, INFO with -v: docs/service.md, ``worker -h``), and no line holds
    a record value."""
    import json

    u = ["--redis-url", redis_url]
    assert (
        main(u + ["model", "create", name, "--schema", SCHEMA, "--trees", "2", "--height", "3", "--epsilon", "1"]) == 0
    )
    rows = _votes_rows(30)
    rows[2][0] = "perhaps"
    path = tmp_path / "v.csv"
    _write(path, rows)
    assert main(u + ["push", name, str(path), "-q"]) == 0
    capfd.readouterr()
    assert main(u + ["worker", name, "--processes", "1", "--until-drained", "--block-ms", "100"]) == 0
    err = capfd.readouterr().err
    events = [json.loads(ln)["event"] for ln in err.splitlines() if ln.strip()]  # (every line is JSON)
    assert "worker.dead_letter" in events and "worker.claimed" not in events  # warnings, no INFO line
    assert "perhaps" not in err
    with pytest.raises(SystemExit):
        main(["worker", "-h"])
    out = " ".join(capfd.readouterr().out.split())
    assert "warnings and errors are logged without it" in out and "Every log line is one JSON object" in out


def test_cli_push_of_a_file_whose_every_record_is_invalid_fails(redis_url, name, tmp_path, capsys):
    """A user pushed a file whose label is last without --label -1: every record dead-lettered, exit 0."""
    u = ["--redis-url", redis_url]
    assert (
        main(u + ["model", "create", name, "--schema", SCHEMA, "--trees", "2", "--height", "3", "--epsilon", "1"]) == 0
    )
    path = tmp_path / "v.csv"
    _write(path, _votes_rows(20))
    capsys.readouterr()
    assert main(u + ["push", name, str(path), "--no-header", "-q"]) == 2  # the header line taken for a record
    assert "the file has a header row" in capsys.readouterr().err  # (it said its label was not a class)
    bad = tmp_path / "b.csv"  # every label undeclared: every record dead-lettered
    _write(bad, [[*row[:-1], "independent"] for row in _votes_rows(20)])
    assert main(u + ["push", name, str(bad), "-q"]) == 2
    err = capsys.readouterr().err
    assert "every record of" in err and "independent" not in err
    labels = list(Schema.from_json(SCHEMA).label.values)  # what to check the spelling against: the declaration
    assert f"has a class not declared in the schema (declared: {labels})): check the values' spelling" in err


def test_cli_push_of_a_header_alone_fails_and_sends_nothing(redis_url, name, tmp_path, capsys):
    """A trial's finding: a file of a header line alone pushed an empty batch and exited 0."""
    u = ["--redis-url", redis_url]
    assert (
        main(u + ["model", "create", name, "--schema", SCHEMA, "--trees", "2", "--height", "3", "--epsilon", "1"]) == 0
    )
    path = tmp_path / "v.csv"
    _write(path, [])
    capsys.readouterr()
    assert main(u + ["push", name, str(path), "-q"]) == 2
    assert "holds no record" in capsys.readouterr().err
    assert redis_py.Redis.from_url(redis_url).xlen(Keys(name).records) == 0


def test_release_options_of_another_policy_are_refused(redis_url, name, capsys):
    """A trial's finding: --release batch --release-every 5 was accepted and meant nothing."""
    u = ["--redis-url", redis_url]
    base = u + ["model", "create", name, "--schema", SCHEMA, "--trees", "2", "--height", "3", "--epsilon", "1"]
    assert main(base + ["--release", "batch", "--release-every", "5"]) == 2
    assert "release_every (CLI --release-every) is the schedule of release='window'" in capsys.readouterr().err
    assert main(base + ["--release", "tree", "--release-every", "2"]) == 0  # nothing charged before
    assert main(["--redis-url", redis_url, "model", "show", name, "--json"]) == 0
    assert '"kind": "tree"' in capsys.readouterr().out


def test_producer_push_names_records_0_based_and_what_was_pushed(redis_url, name, monkeypatch):
    import streamdp.records.frames

    s = Schema.from_dict(
        {
            "attributes": [
                {"name": "x0", "type": "categorical", "values": ["a", "b"]},
                {"name": "x1", "type": "categorical", "values": ["a", "b"]},
            ],
            "label": {"name": "y", "values": ["neg", "pos"]},
        }
    )
    create_model(redis_url, name, s, n_trees=2, height=2, epsilon=math.inf, not_private=True)
    p = Producer(redis_url, name, batch_size=50)
    with pytest.raises(SourceError) as e:
        p.push([{"x0": "a"}], ["neg"])
    assert str(e.value).startswith("record 0 (0-based): attribute 'x1' is missing; no record was pushed")
    monkeypatch.setattr(streamdp.records.frames, "CHUNK_ROWS", 100)  # push's chunks: 100 records, 2 batches
    recs = [{"x0": "a", "x1": "b"} for _ in range(300)]
    recs[250]["x1"] = "SECRET"
    with pytest.raises(SourceError) as e:
        p.push(recs, ["neg"] * 300)
    msg = str(e.value)
    assert (
        msg.startswith(
            "record 250 (0-based): attribute 'x1' has a value not declared in the schema; "
            "the first 200 records were pushed"
        )
        and "SECRET" not in msg
    )
    assert e.value.n_pushed == 200
    assert redis_py.Redis.from_url(redis_url, socket_timeout=30).xlen(Keys(name).records) == 4
    nodedup = Producer(redis_url, name, batch_size=50, dedup=False)
    with pytest.raises(SourceError, match="pushing them again counts them again"):
        nodedup.push(recs, ["neg"] * 300)


def test_cli_push_says_when_no_worker_consumes_the_model(redis_url, name, tmp_path, capsys):
    """Forgetting the worker gave no hint: push reported success and the records waited unseen. Without a worker
    in the model's group push says so (one line on stderr); with one running it says nothing."""
    import threading
    import time

    from streamdp.service.stream_worker import Worker

    u = ["--redis-url", redis_url]
    create = [
        "model",
        "create",
        name,
        "--schema",
        SCHEMA,
        "--trees",
        "2",
        "--height",
        "3",
        "--epsilon",
        "1",
        "--release",
        "batch",
    ]
    assert main(u + create) == 0
    path = tmp_path / "v.csv"
    _write(path, _votes_rows(30))
    capsys.readouterr()
    assert main(u + ["push", name, str(path), "-q"]) == 0
    got = capsys.readouterr()
    assert got.out.startswith("sent 30 records")
    assert [line for line in got.err.splitlines() if "records wait" in line] == [
        "streamdp: note: " + NO_WORKER.format(name)
    ]

    w = Worker(redis_url, name, block_ms=50)
    t = threading.Thread(target=w.run, kwargs={"handle_signals": False}, daemon=True)
    t.start()
    try:
        r = redis_py.Redis.from_url(redis_url, socket_timeout=5)
        deadline = time.monotonic() + 30
        while not r.xinfo_groups(Keys(name).records)[0]["consumers"]:
            assert time.monotonic() < deadline, "the worker did not join the group"
            time.sleep(0.02)  # bounded wait on a condition
        assert main(u + ["push", name, str(path), "-q", "--source", "again"]) == 0
        got = capsys.readouterr()
        assert got.out.startswith("sent 30 records") and "records wait" not in got.err
    finally:
        w.stop()
        t.join(30)
    assert not t.is_alive()


def test_cli_push_names_the_columns_it_ignores_and_says_a_repeat_is_merged_once(redis_url, name, tmp_path, capsys):
    """A column meant as a person's id, pushed to a model created without --privacy-id, was silently dropped."""
    assert main(["--redis-url", redis_url, "model", "create", name, "--schema", SCHEMA, "--trees", "2",
                 "--height", "2", "--epsilon", "1"]) == 0  # fmt: skip
    path = tmp_path / "v.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["user", *DS.schema.names, "party", "note"])
        w.writerows([[f"p{i}", *row, "x"] for i, row in enumerate(_votes_rows(10))])
    capsys.readouterr()
    assert main(["--redis-url", redis_url, "push", name, str(path), "-q"]) == 0
    got = capsys.readouterr()
    notes = [line for line in got.err.splitlines() if "ignored" in line]
    assert notes == [
        f"streamdp: note: {path}: columns 'user', 'note' not in the schema, ignored (model {name!r} has no "
        "privacy id: its unit is a record, see --privacy-id)"
    ]
    assert got.out.startswith("sent 10 records in 1 batch") and "merged once" in got.out
    _write(path, _votes_rows(10))  # the schema's columns alone: no note
    assert main(["--redis-url", redis_url, "push", name, str(path), "-q", "--no-dedup"]) == 0
    got = capsys.readouterr()
    assert "ignored" not in got.err and "merged once" not in got.out


def test_cli_push_says_no_worker_runs_when_the_group_holds_only_a_killed_one(redis_url, name, tmp_path, capsys):
    """A worker killed with SIGKILL stays in the group for an hour: the note counts live workers, not the group."""
    import subprocess
    import sys

    from streamdp.service.group import PID_SPACE
    from streamdp.service.keys import GROUP

    if not PID_SPACE:
        pytest.skip("no /proc: a gone process cannot be told")
    u = ["--redis-url", redis_url]
    assert (
        main(u + ["model", "create", name, "--schema", SCHEMA, "--trees", "2", "--height", "3", "--epsilon", "1"]) == 0
    )
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    r = redis_py.Redis.from_url(redis_url, socket_timeout=5)
    stream = Keys(name).records
    assert GROUP in [g["name"].decode() for g in r.xinfo_groups(stream)]  # (model create makes the group)
    assert r.xgroup_createconsumer(stream, GROUP, f"host-{int(dead.stdout)}-abcdef-{PID_SPACE}") == 1
    path = tmp_path / "v.csv"
    _write(path, _votes_rows(30))
    capsys.readouterr()
    assert main(u + ["push", name, str(path), "-q"]) == 0
    assert "streamdp: note: " + NO_WORKER.format(name) in capsys.readouterr().err.splitlines()
