"""The CLI's shared helpers."""

from __future__ import annotations


def test_cli_redacts_passwords():
    from streamdp.cli.common import redact

    assert redact("redis://worker:s3cret@host:6380/0") == "redis://worker:***@host:6380/0"
    assert redact("rediss://:pw@h/1") == "rediss://:***@h/1"
    assert redact("redis://localhost:6379/0") == "redis://localhost:6379/0"


def test_a_command_this_redis_user_may_not_run_says_which_user_runs_it(capsys):
    """A consumer user running `streamdp stats` got a bare "this user has no permissions" error."""
    import argparse

    import redis

    from streamdp.cli.common import _run

    def stats(args):
        raise redis.exceptions.NoPermissionError("this user has no permissions to run the 'xinfo|groups' command")

    args = argparse.Namespace(func=stats, redis_url="redis://consumer:pw@h:6379/0")
    assert _run(args) == 2
    err = capsys.readouterr().err
    assert "this Redis user may not run it" in err and "deploy/users.acl" in err and "pw@" not in err, err


def test_a_lost_connection_says_to_run_the_command_again(capsys):
    """During a cluster failover a command failed naming a node the user never gave, and nothing more."""
    import argparse

    import redis

    from streamdp.cli.common import _run

    def push(args):
        raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:7101. Connection refused.")

    assert _run(argparse.Namespace(func=push, redis_url="redis://127.0.0.1:7102/0")) == 2
    err = capsys.readouterr().err
    assert "run the command again in a few seconds; a push sent again merges its batches once" in err, err
