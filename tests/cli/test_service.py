"""CLI smoke tests against a real Redis: model create / push / worker until drained / show / get / stats / delete."""

from __future__ import annotations

import csv
import math
import subprocess
import sys
from importlib import resources

import pytest

from streamdp import PrivateForest
from streamdp.cli import main
from streamdp.estimation import cell_variance
from streamdp.records.datasets import load

pytestmark = pytest.mark.redis
DS = load("congressional-voting")
SCHEMA = str(resources.files("streamdp").joinpath("data", "schemas", "congressional-voting.json"))


def _csv(path, rows, labels, bad=()):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(DS.schema.names + ["party"])
        for i, (r, lab) in enumerate(zip(rows, labels)):
            r = list(r)
            if i in bad:
                r[0] = "perhaps"
            w.writerow(r + [lab])


def test_cli_end_to_end(redis_url, unique_name, tmp_path, capsys):
    u = ["--redis-url", redis_url]
    name = unique_name
    assert (
        main(
            u
            + [
                "model",
                "create",
                name,
                "--schema",
                SCHEMA,
                "--trees",
                "4",
                "--height",
                "3",
                "--epsilon",
                "2",
                "--release",
                "batch",
            ]
        )
        == 0
    )
    assert main(u + ["model", "create", name, "--schema", SCHEMA, "--epsilon", "2"]) == 2  # exists: clear error
    assert "already exists" in capsys.readouterr().err
    assert main(u + ["model", "show", name]) == 0
    assert "last update     none yet (created " in capsys.readouterr().out  # not the creation time as an update
    data = tmp_path / "votes.csv"
    _csv(data, DS.X[:200], DS.y[:200], bad={7})
    assert main(u + ["push", name, str(data), "--batch-size", "50"]) == 0
    out = capsys.readouterr()
    assert "sent 200 records in 4 batches" in out.out and "1 invalid" in out.out
    assert "100.0%" in out.err  # progress
    assert main(u + ["worker", name, "--processes", "1", "--until-drained", "--block-ms", "100"]) == 0
    assert f"drained {name!r}: version 1 published, 4 releases merged in all" in capsys.readouterr().out
    assert main(u + ["model", "show", name]) == 0
    out = capsys.readouterr().out
    assert (
        "merged          4 releases in the published counts" in out
        and "release         batch" in out
        and "version" in out
    )
    sd = math.sqrt(4 * cell_variance("geometric", 2 / 5))  # 4 releases at epsilon 2 over 4 trees and a stump
    assert f"noise now       sd {sd:,.0f} on the published estimate of each class's record count" in out
    blob = tmp_path / "m.sdp"
    assert main(u + ["model", "get", name, "-o", str(blob)]) == 0
    f = PrivateForest.from_bytes(blob.read_bytes())
    assert f.version >= 1 and f.n_releases == 4 and f.n_trees == 4
    assert main(u + ["model", "get", name, "--version", "0", "-o", str(blob)]) == 0
    assert PrivateForest.from_bytes(blob.read_bytes()).version == 0
    assert main(u + ["stats", name, "--prometheus"]) == 0
    out, err = capsys.readouterr()
    assert f'streamdp_batches_merged_total{{model="{name}"}} 4' in out
    assert f'streamdp_estimated_records{{model="{name}"}} ' in out  # noisy, from the published counts
    # exact record-dependent counts only on request, with a warning
    assert "records_merged" not in out and "dead_letter" not in out and "warning" not in err
    assert main(u + ["stats", name]) == 0
    out = capsys.readouterr().out
    assert "records_merged" not in out and "dead_letters" not in out and "estimated_records" in out
    assert main(u + ["stats", name, "--prometheus", "--exact"]) == 0
    out, err = capsys.readouterr()
    assert f'streamdp_dead_letters_total{{model="{name}"}} 1' in out
    assert f'streamdp_records_merged_total{{model="{name}"}} 199' in out
    assert "warning: --exact" in err and "not differentially private" in err
    assert "# HELP streamdp_records_merged_total valid records merged (EXACT" in out
    # the dead letter itself: when, which entry, why (the attribute named, never the value), with the warning
    assert main(u + ["stats", name, "--dead-letters"]) == 0
    out, err = capsys.readouterr()
    line, row = out.splitlines()  # the dead letter, then each refused row of its batch
    assert "entry " in line and "1 invalid record(s) of 50; first: record 7 (0-based)" in line and "UTC" in line
    assert row.startswith("    record 7 (0-based) of the entry's batch: ") and "handicapped" in row
    assert "perhaps" not in out and "warning: --dead-letters" in err and "not differentially private" in err
    assert main(u + ["stats", "--dead-letters"]) == 2  # one model's: NAME is needed
    assert "give its NAME" in capsys.readouterr().err
    assert main(u + ["model", "list"]) == 0 and name in capsys.readouterr().out
    assert main(u + ["model", "delete", name]) == 0
    assert main(u + ["model", "show", name]) == 2
    capsys.readouterr()
    assert main(u + ["stats", name]) == 2  # a deleted (or mistyped) model: an error, not all-zero counters
    assert f"no model named {name!r}" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_demo_runs_and_cleans_up(redis_url):
    """The demo as a new user runs it: default arguments, a version per batch, its model deleted at the end."""
    from streamdp.service.connection import connect
    from streamdp.service.keys import REGISTRY

    r = subprocess.run(
        [sys.executable, "-m", "streamdp.cli", "--redis-url", redis_url, "demo"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "nearly exact" not in r.stderr  # (epsilon 1: the warning of test_nearly_exact_warning.py is not said)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("version")]
    # a line per batch: a version, or a batch left out (a window that closed with too few of its records, as
    # happens on a loaded machine, is left out until later releases add up)
    per_batch = lines + [ln for ln in r.stdout.splitlines() if ln.startswith("batch of")]
    assert len(per_batch) >= 3 and lines and "accuracy" in lines[-1], r.stdout
    name = r.stdout.split("model ", 1)[1].split(":", 1)[0]
    assert name.startswith("demo-votes-") and not connect(redis_url).hexists(REGISTRY, name)


def test_stream_worker_entry_point_help():
    r = subprocess.run(
        [sys.executable, "workers/stream_worker.py", "--help"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0 and "--processes" in r.stdout


def test_cli_push_twice_merges_once(redis_url, unique_name, tmp_path, capsys):
    """The same CSV pushed twice is merged once; --source labels genuinely new records."""
    import redis as redis_py

    from streamdp.service.keys import Keys

    u = ["--redis-url", redis_url]
    name = unique_name
    assert (
        main(
            u
            + ["model", "create", name, "--schema", SCHEMA, "--trees", "2", "--height", "3", "--epsilon", "1"]
            # short windows: each worker run below waits until the window holding its last records is released
            + ["--release-every", "0.2", "--max-lag", "1"]
        )
        == 0
    )
    data = tmp_path / "votes.csv"
    _csv(data, DS.X[:300], DS.y[:300])
    for _ in range(2):
        assert main(u + ["push", name, str(data), "--batch-size", "100", "-q"]) == 0
    assert main(u + ["worker", name, "--processes", "1", "--until-drained", "--block-ms", "100"]) == 0
    stats = redis_py.Redis.from_url(redis_url, socket_timeout=30).hgetall(Keys(name).stats)
    assert int(stats[b"batches_merged"]) == 3 and int(stats[b"records_merged"]) == 300
    assert int(stats[b"acked_without_merge"]) == 3
    assert main(u + ["push", name, str(data), "--batch-size", "100", "-q", "--source", "day-2"]) == 0
    assert main(u + ["worker", name, "--processes", "1", "--until-drained", "--block-ms", "100"]) == 0
    stats = redis_py.Redis.from_url(redis_url, socket_timeout=30).hgetall(Keys(name).stats)
    assert int(stats[b"records_merged"]) == 600
    main(u + ["model", "delete", name])


def test_cli_creates_a_grown_model_and_shows_its_policy(redis_url, unique_name, capsys):
    u = ["--redis-url", redis_url]
    assert (
        main(
            u
            + [
                "model",
                "create",
                unique_name,
                "--schema",
                SCHEMA,
                "--trees",
                "3",
                "--height",
                "9",
                "--epsilon",
                "1",
                "--release",
                "grow",
                "--release-every",
                "5",
            ]
        )
        == 0
    )
    assert main(u + ["model", "show", unique_name]) == 0
    assert "grow: every 5 s, trees deepened as the released counts allow" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(u + ["model", "create", unique_name + "x", "--schema", SCHEMA, "--epsilon", "inf", "--release", "grow"])
    assert e.value.code == 2
    # the service publishes only private models: inf is refused as a job's is, before anything is stored
    assert "'inf': epsilon must be a finite number > 0, got inf" in capsys.readouterr().err
    assert main(u + ["model", "show", unique_name + "x"]) != 0
    capsys.readouterr()
    assert main(u + ["model", "delete", unique_name]) == 0
    assert f"see `streamdp ledger {unique_name}`" in capsys.readouterr().out  # (the name, not a placeholder)


def test_cli_model_get_of_an_empty_model_says_so(redis_url, unique_name, tmp_path, capsys):
    """`model get` before any release wrote a version-0 model without a word. It still writes the (valid, empty)
    model and exits 0, and says on stderr that nothing is released yet; after a release it says nothing."""
    from streamdp.service import Producer
    from streamdp.service.stream_worker import Worker

    u, name = ["--redis-url", redis_url], unique_name
    create = ["model", "create", name, "--schema", SCHEMA, "--trees", "2", "--height", "3", "--epsilon", "1"]
    assert main(u + create + ["--release", "batch"]) == 0
    blob = tmp_path / "m.sdp"
    assert "release batch publishes one release per pushed batch: how many batches and when are public" in (
        capsys.readouterr().err
    )
    assert main(u + ["model", "get", name, "-o", str(blob)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("wrote ") and PrivateForest.from_bytes(blob.read_bytes()).version == 0
    assert f"streamdp: note: {name!r} is empty (version 0, nothing merged yet)" in err and "clears the merge bar" in err
    assert f"(streamdp worker {name})" in err
    Producer(redis_url, name).push(DS.X[:50], DS.y[:50])
    Worker(redis_url, name, block_ms=50).run(until_drained=True, max_seconds=60, handle_signals=False)
    for version in ([], ["--version", "0"]):  # a release, or version 0 asked for by number: nothing to say
        assert main(u + ["model", "get", name, *version, "-o", str(blob)]) == 0
        assert capsys.readouterr().err == ""
    assert PrivateForest.from_bytes(blob.read_bytes()).version == 0
    nowhere = tmp_path / "no" / "such" / "dir" / "m.sdp"
    assert main(u + ["model", "get", name, "-o", str(nowhere)]) == 2
    assert capsys.readouterr().err == f"streamdp: error: {nowhere}: No such file or directory\n"  # not "[Errno 2]"


def test_the_worker_command_starts_its_workers_without_loading_the_model(redis_url, unique_name, monkeypatch, capsys):
    """The pool's parent only checks that the model exists: the workers load it, each in its own process."""
    import streamdp.service.pool as pool
    import streamdp.service.registry as registry

    registry.create_model(redis_url, unique_name, DS.schema, n_trees=2, height=2, epsilon=1.0)

    def no_load(*a, **kw):
        raise AssertionError("the pool's parent loaded the model")

    started = []
    monkeypatch.setattr(pool, "run_workers", lambda name, *a, **kw: started.append(name) or [0, 0])
    monkeypatch.setattr(registry, "load_spec", no_load)
    monkeypatch.setattr(PrivateForest, "from_doc", classmethod(no_load))
    assert main(["--redis-url", redis_url, "worker", unique_name, "--processes", "2"]) == 0
    assert started == [unique_name]
    assert main(["--redis-url", redis_url, "worker", unique_name + "-none", "--processes", "2"]) != 0
    assert started == [unique_name] and "no model" in capsys.readouterr().err.lower()


def test_cli_creates_a_decayed_model_with_the_fixed_cadence_and_shows_both(redis_url, unique_name, capsys):
    u = ["--redis-url", redis_url]
    create = ["model", "create", unique_name, "--schema", SCHEMA, "--trees", "3", "--height", "3", "--epsilon", "1"]
    assert main(u + create + ["--half-life", "4", "--half-life-unit", "records", "--cadence", "fixed"]) == 0
    assert main(u + ["model", "show", unique_name]) == 0
    out = capsys.readouterr().out
    assert "window: every 1 s, counts decayed with a half-life of 4 records" in out
    assert "cadence         fixed: a window every 1 s, every release merged" in out
    assert "forgetting      half-life 4 records: noise sd per cell 0.0 now, never above" in out
    for bad, says in [
        (["--half-life", "4", "--release", "tree"], "half_life (CLI --half-life) decays the released deltas"),
        (["--half-life-unit", "records"], "needs half_life (CLI --half-life)"),
        (["--cadence", "fixed", "--max-lag", "30"], "cadence='fixed' releases a window every release_every"),
    ]:
        assert main(u + create[:2] + [unique_name + "x"] + create[3:] + bad) == 2
        assert says in capsys.readouterr().err


def test_cli_model_create_sets_the_retention_in_one_command(redis_url, unique_name, capsys):
    """`model create --retention-seconds S` keeps the raw records for jobs from the first push on (as
    `model retention NAME --seconds S` before any push does); a value that cannot work is refused before creating."""
    from streamdp.service.connection import connect
    from streamdp.service.retention import get_retention

    u = ["--redis-url", redis_url]
    create = u + ["model", "create", unique_name, "--schema", SCHEMA, "--trees", "2", "--epsilon", "1"]
    with pytest.raises(SystemExit):
        main(create + ["--retention-seconds", "0"])
    assert "seconds > 0" in capsys.readouterr().err
    assert main(u + ["model", "show", unique_name]) == 2  # nothing created
    capsys.readouterr()
    assert main(create + ["--retention-seconds", "3600"]) == 0
    assert "keeps raw records at most 3600 s old" in capsys.readouterr().out
    ret = get_retention(connect(redis_url), unique_name)
    assert (ret.seconds, ret.records, ret.since_version) == (3600.0, None, 0)
    assert main(u + ["model", "delete", unique_name]) == 0


def test_the_drained_line_says_how_many_releases_were_left_out(monkeypatch, capsys):
    """A windowed model's releases whose released totals could not be told from an empty window are left out of
    the published counts: records in them are not in the model, and the drained line says so."""
    import argparse

    from streamdp.cli import worker as worker_cli
    from streamdp.service import registry

    args = argparse.Namespace(name="m", redis_url="redis://127.0.0.1:1/0")
    for windows, said in ((5, "; 3 left out, their released totals too small"), (2, " (streamdp model show")):
        info = {"version": 2, "releases": 2, "windows": windows}
        monkeypatch.setattr(registry, "show_model", lambda r, name, info=info: info)
        worker_cli._say_drained(args)
        out = capsys.readouterr().out
        assert out.startswith("drained 'm': version 2 published, 2 releases merged in all" + said), out


def test_model_create_takes_a_bundled_schema_by_name_from_any_directory(redis_url, unique_name, tmp_path, capsys,
                                                                       monkeypatch):  # fmt: skip
    """The documented `--schema streamdp/data/schemas/congressional-voting.json` worked from the repo's root
    only (and not for an installed package): `--schema` also takes a bundled schema's name."""
    from streamdp.service.registry import load_spec

    monkeypatch.chdir(tmp_path)  # (no streamdp/ here)
    u = ["--redis-url", redis_url]
    args = ["model", "create", unique_name, "--schema", "congressional-voting", "--trees", "2", "--epsilon", "1"]
    assert main(u + args) == 0
    assert load_spec(redis_url, unique_name).schema == DS.schema
    assert main(u + ["model", "create", unique_name + "x", "--schema", "votes", "--epsilon", "1"]) == 2
    err = capsys.readouterr().err
    assert "--schema 'votes': no such file, nor a bundled schema (adult, congressional-voting, " in err
    with pytest.raises(SystemExit):
        main(["model", "create", "-h"])
    from streamdp.records.datasets import DATASETS

    assert ", ".join(sorted(DATASETS)) in " ".join(capsys.readouterr().out.split())  # the help names them all
    assert main(u + ["model", "delete", unique_name]) == 0


def test_cli_worker_says_what_it_consumes_at_start_and_when_held_entries_are_taken_over(
    redis_url, unique_name, tmp_path, capfd
):
    """A trial's findings: ``streamdp worker`` without -v printed nothing at its start, and a worker started
    while another consumer held entries (its predecessor killed on another host) waited ``--claim-idle-ms`` in
    silence. Its first line (JSON, as every log line; also without -v) names the model, stream and group, how it
    stops, and when the held entries are taken over; no record value."""
    import json

    import redis

    from streamdp.service.keys import GROUP, Keys

    u, name = ["--redis-url", redis_url], unique_name
    create = ["model", "create", name, "--schema", SCHEMA, "--trees", "2", "--height", "3", "--epsilon", "1"]
    assert main(u + create + ["--release", "batch"]) == 0
    data = tmp_path / "votes.csv"
    _csv(data, DS.X[:40], DS.y[:40], bad={3})
    assert main(u + ["push", name, str(data), "--batch-size", "20", "-q"]) == 0
    # a worker on another host took a batch and died (its name says nothing this host could check)
    r = redis.Redis.from_url(redis_url)
    assert r.xreadgroup(GROUP, "otherhost-1-abcdef", {Keys(name).records: ">"}, count=1)
    capfd.readouterr()
    worker = ["worker", name, "--processes", "1", "--until-drained", "--block-ms", "50", "--claim-idle-ms", "500"]
    assert main(u + worker) == 0
    err = capfd.readouterr().err
    first = json.loads(err.splitlines()[0])
    assert first["event"] == "worker.pool_start" and first["model"] == name and first["processes"] == 1
    assert first["stream"] == Keys(name).records and first["group"] == GROUP and "SIGTERM" in first["stop"]
    assert first["consumers_holding_entries"] == 1 and 0 <= first["taken_over_within_s"] <= 1
    assert "perhaps" not in err
    assert r.xpending(Keys(name).records, GROUP)["pending"] == 0  # taken over and merged
    r.close()
