"""The ``streamdp`` command line without Redis: every subcommand's help, the entry points, lazy imports, errors."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from streamdp.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def _commands(parser: argparse.ArgumentParser, path: tuple = ()):
    """``(path, parser)`` for the parser and, recursively, every subcommand under it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, path + (name,))


COMMANDS = [path for path, _ in _commands(build_parser())]


def test_the_walk_finds_every_command_group():
    groups = {p[0] for p in COMMANDS if p}
    assert groups == {"model", "push", "worker", "stats", "demo", "evaluate", "ledger", "job"}
    assert ("model", "retention") in COMMANDS and ("job", "worker") in COMMANDS


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "streamdp")
def test_every_help_exits_0(path, capsys):
    with pytest.raises(SystemExit) as e:
        main([*path, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: " + " ".join(("streamdp", *path)))


def test_every_leaf_command_has_a_handler():
    for path, parser in _commands(build_parser()):
        if not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
            assert callable(parser.get_default("func")), path


@pytest.mark.parametrize("module", ["streamdp.cli", "streamdp.evaluate"])
def test_python_dash_m_help(module):
    r = subprocess.run(
        [sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=60, env=ENV, cwd=ROOT
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: streamdp")
    if module == "streamdp.cli":
        assert "{model,push,worker,stats,demo,evaluate,ledger,job}" in r.stdout


def test_console_script_entry_point():
    try:
        (ep,) = metadata.entry_points(group="console_scripts", name="streamdp")
    except ValueError:
        pytest.skip("streamdp is not pip-installed (no console script)")
    assert ep.load() is main
    exe = shutil.which("streamdp")
    if exe is None:
        pytest.skip("the streamdp console script is not on PATH")
    r = subprocess.run([exe, "job", "--help"], capture_output=True, text=True, timeout=60, env=ENV, cwd=ROOT)
    assert r.returncode == 0 and r.stdout.startswith("usage: streamdp job"), r.stderr


def test_help_loads_neither_redis_nor_river():
    code = (
        "import sys\nfrom streamdp.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('redis', 'river', 'streamdp.service', 'streamdp.evaluate') if m in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=ENV, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "[]"


def test_redis_error_exits_2_with_the_password_redacted(capsys):
    # port 1: nothing listens, the connection is refused at once
    assert main(["--redis-url", "redis://:s3cret@127.0.0.1:1/0", "model", "list"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("streamdp: redis error:") and "redis://:***@127.0.0.1:1/0" in err
    assert "s3cret" not in err


def test_bad_input_exits_2_with_a_message(capsys):
    assert main(["ledger"]) == 2  # neither NAME nor --list: refused before any connection
    assert capsys.readouterr().err == "streamdp: error: give a source NAME or --list (not both)\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["model", "create", "m", "--schema", "s.json", "--epsilon", "1e400"],  # overflowed to inf: a non-private model
        ["model", "create", "m", "--schema", "s.json", "--epsilon", "nan"],
        ["model", "create", "m", "--schema", "s.json", "--epsilon", "-1"],  # refused only once the model was built
        ["demo", "--epsilon", "0"],
        ["job", "submit", "private-rdt", "--source", "s", "--epsilon", "1e999"],
        ["worker", "m", "--processes", "99999999999999999999"],  # an ever-growing process list
        ["worker", "m", "--processes", "-1"],  # started nothing and exited 0
        ["worker", "m", "--block-ms", "0"],  # blocked forever
        ["worker", "m", "--block-ms", "99999999999999999999"],  # an OverflowError traceback
        ["job", "worker", "--block-ms", "0"],
        ["job", "submit", "private-rdt", "--source", "s", "--epsilon", "1", "--wait", "--timeout", "nan"],
        ["job", "list", "--limit", "0"],
        ["job", "submit", "private-rdt", "--source", "s", "--epsilon", "1", "--max-attempts", "99999999999999999999"],
        ["evaluate", "uci:congressional-voting", "--n", "-1"],
        ["evaluate", "uci:congressional-voting", "--window-size", "0"],
        ["demo", "--batch-size", "0"],  # (a trial: the demo created a model and started workers first)
        ["demo", "--height", "0"],
        ["demo", "--trees", "0"],
    ],
)
def test_out_of_range_arguments_are_one_line_errors(argv, capsys):
    """These were accepted and then hung, overflowed, did nothing or made a model
    non-private; argparse now refuses them (exit 2, one line naming the argument)."""
    from streamdp.cli import build_parser

    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(argv)
    assert e.value.code == 2 and "error: argument" in capsys.readouterr().err


@pytest.mark.parametrize(
    "bad, why",
    [
        ("uci:votes", "uci:NAME takes one of"),
        ("agrawal:99", "0..9"),
        ("stagger:3", "0..2"),
        ("nope", "unknown dataset"),
    ],
)
def test_evaluate_checks_every_dataset_before_running_any(bad, why, capsys, monkeypatch):
    """Trials: a bad name after a good one failed only once the good one had run (8 s, or a whole UCI run)."""
    import streamdp.river.evaluate

    ran = []
    monkeypatch.setattr(streamdp.river.evaluate, "evaluate", lambda dataset, *a, **k: ran.append(dataset))
    assert main(["evaluate", "uci:congressional-voting", bad]) == 2
    assert why in capsys.readouterr().err and ran == []  # nothing ran, not even the good name first


@pytest.mark.parametrize(
    "opt, why",
    [
        ("--references=ht,xyz", "unknown reference model 'xyz'"),
        ("--window-learners=foo", "unknown window learner 'foo'"),
        ("--epsilons=1,2,-1", "epsilon must be a finite number > 0, got -1.0"),  # (ran 1 and 2, then lost them)
        ("--epsilons=inf", "epsilon must be a finite number > 0, got inf"),
        ("--batch-sizes=100,0", "batch size must be an integer >= 1, got 0"),
        ("--height=0", "height must be an integer >= 1, got 0"),
    ],
)
def test_evaluate_checks_every_model_name_before_running_any(opt, why, capsys, monkeypatch):
    """A mistyped reference or window learner was refused after the whole grid had run."""
    import streamdp.river.evaluate

    ran = []
    monkeypatch.setattr(streamdp.river.evaluate, "load_stream", lambda *a, **k: ran.append(a) or (None, [], []))
    assert main(["evaluate", "agrawal:0", "--n", "100", opt]) == 2
    assert why in capsys.readouterr().err and ran == []


@pytest.mark.slow
def test_evaluate_shows_progress_for_every_model_river_references_included(capsys):
    """`streamdp evaluate` sat silent through river's reference trees (the long runs): every model's run, ours and
    river's, has a progress bar on stderr, ending at the stream's length; -q draws none."""
    pytest.importorskip("river")
    argv = ["evaluate", "stagger:0", "--n", "1000", "--epsilons", "1", "--batch-sizes", "500", "--references", "ht,arf"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "HoeffdingTree (not private)" in out and "\r" not in out  # the table, with no bar in it
    for model in ("PrivateForest eps=1 bs=500", "HoeffdingTree (not private)", "ARF(10) (not private)"):
        assert f"100.0% 1,000/1,000 records {model} " in err, err
    assert main([*argv[:-2], "--references", "", "-q"]) == 0
    assert "records" not in capsys.readouterr().err


def test_a_job_line_shows_a_result_only_where_there_is_one():
    """A walkthrough: `job list` showed a refused job's result name, which `job result` then said does not exist."""
    from streamdp.cli.job import _line

    st = {
        "id": "j1",
        "status": "refused",
        "progress": "refused",
        "algorithm": "dpea",
        "epsilon": 0.5,
        "source": "votes",
        "result": "dpea-j1",
        "attempts": 1,
        "max_attempts": 3,
        "reason": "no budget",
    }
    assert "(no result)" in _line(st) and "dpea-j1" not in _line(st)
    assert "result=dpea-j1" in _line({**st, "status": "done", "reason": ""})


def test_redis_url_is_taken_before_or_after_the_command():
    """A user's ``streamdp worker votes --redis-url URL`` was refused, and ``workers/*.py`` (which put their
    command first) could not take a URL at all."""
    from streamdp.cli import build_parser

    p = build_parser()
    assert p.parse_args(["worker", "votes", "--redis-url", "redis://a:1/0"]).redis_url == "redis://a:1/0"
    assert p.parse_args(["--redis-url", "redis://b:1/0", "job", "worker"]).redis_url == "redis://b:1/0"
    assert p.parse_args(["model", "list"]).redis_url is None
    assert p.parse_args(["model", "--redis-url", "redis://c:1/0", "list"]).redis_url == "redis://c:1/0"


def test_a_commands_warnings_are_one_line_and_its_own(capsys):
    """CLI warnings print as one 'streamdp: warning:' line; the command's display is its own."""
    import warnings

    from streamdp.cli import common

    before = warnings.showwarning

    def warn(args):
        warnings.warn("a library warning", UserWarning)
        return 0

    import argparse

    assert common.run(argparse.Namespace(func=warn)) == 0
    assert "streamdp: warning: UserWarning: a library warning" in capsys.readouterr().err
    assert warnings.showwarning is before  # (the command's display ends with it; a caller's is its own again)


def test_model_create_with_a_deeply_nested_schema_is_one_error_line(tmp_path, capsys):
    """100,000 nested brackets: a one-line error and exit status 2, no RecursionError traceback (before any
    connection: the server address below is never reached)."""
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000)
    code = main(
        ["model", "create", "x", "--schema", str(path), "--epsilon", "1", "--redis-url", "redis://127.0.0.1:1/0"]
    )
    err = capsys.readouterr().err
    assert code == 2 and "nested too deeply" in err and "Traceback" not in err and "RecursionError" not in err


def test_evaluate_plot_draws_learning_curves(tmp_path, capsys):
    """`streamdp evaluate --plot FILE`: the private forest's curves beside river's HoeffdingTree, as a PNG."""
    pytest.importorskip("matplotlib")
    out = tmp_path / "curves" / "votes.png"
    args = ["evaluate", "uci:congressional-voting", "--epsilons", "1", "--batch-sizes", "50", "--references", "ht"]
    assert main([*args, "-q", "--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    assert f"plot: {out}" in capsys.readouterr().out
