"""The startup check for servers that drop transactions when they reload their append-only file."""

from __future__ import annotations

import logging
import shutil

import pytest
import redis

from streamdp.service import durability
from streamdp.service.durability import ReplayUnsafe, affected, check_replay, parse_version, replay_risks


class FakeNode:
    """INFO, CONFIG GET and ACL DRYRUN of one server, as redis-py returns them."""

    def __init__(self, version="7.0.15", aof="yes", default_denied=("SET",), server=None, denied_all=False):
        self.version, self.aof, self.denied, self.server, self.denied_all = (
            version,
            aof,
            default_denied,
            server,
            denied_all,
        )
        self.connection_pool = type("P", (), {"connection_kwargs": {"host": "h", "port": 1}})()

    def info(self, section):
        if self.denied_all:
            raise redis.exceptions.NoPermissionError("this user has no permissions to run the 'info' command")
        info = {"redis_version": "7.2.4" if self.server == "valkey" else self.version}
        if self.server == "valkey":
            info["valkey_version"] = self.version
        return info

    def config_get(self, name):
        return {name: self.aof}

    def execute_command(self, *args):
        assert args[:3] == ("ACL", "DRYRUN", "default")
        return "OK" if args[3] not in self.denied else f"User default has no permissions to run the '{args[3]}' command"


def test_versions():
    assert parse_version("7.0.15") == (7, 0, 15) and parse_version("8.2") == (8, 2, 0)
    with pytest.raises(ValueError, match="not a server version"):
        parse_version("unstable")
    assert affected(("redis", (7, 0, 15))) and affected(("redis", (7, 2, 11))) and affected(("valkey", (8, 1, 0)))
    assert not affected(("redis", (5, 0, 14)))


def test_a_default_user_without_rights_and_aof_is_refused():
    risks = replay_risks(FakeNode())
    assert [r.denied for r in risks] == [("SET",)] and risks[0].version == (7, 0, 15)
    with pytest.raises(ReplayUnsafe, match=r"h:1 \(redis 7.0.15\) has appendonly yes.*default off resetpass"):
        check_replay(FakeNode(), refuse=True)


@pytest.mark.parametrize(
    "node",
    [
        FakeNode(aof="no"),  # nothing to replay
        FakeNode(default_denied=()),  # the deploy ACL: default off with every right
        FakeNode(version="5.0.14"),  # no ACLs
    ],
)
def test_safe_combinations_pass(node):
    assert replay_risks(node) == [] and check_replay(node, refuse=True) == []


def test_a_fixed_release_passes(monkeypatch):
    monkeypatch.setitem(durability.FIXED_IN, "redis", {(8, 4): (8, 4, 1)})
    assert replay_risks(FakeNode(version="8.4.1")) == []
    assert len(replay_risks(FakeNode(version="8.4.0"))) == 1  # before the fix on its line
    assert len(replay_risks(FakeNode(version="8.2.3"))) == 1  # another line without a fix


def test_valkey_is_named_by_its_own_version():
    (risk,) = replay_risks(FakeNode(version="8.1.1", server="valkey"))
    assert (risk.server, risk.version) == ("valkey", (8, 1, 1))


def test_warns_instead_when_not_refusing(caplog):
    got = []
    assert len(check_replay(FakeNode(), refuse=False, warn=got.append)) == 1
    assert "appendonly yes" in got[0]
    with caplog.at_level(logging.WARNING, logger="streamdp.durability"):
        check_replay(FakeNode(), refuse=False)
    assert "DATA LOSS ON RESTART" in caplog.text


def test_a_user_that_may_not_ask_skips_the_check():
    assert check_replay(FakeNode(denied_all=True), refuse=True) is None


@pytest.mark.redis
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs the redis-server binary")
def test_model_create_refuses_a_real_server_that_would_drop_it(tmp_path, capsys):
    """A real redis-server with AOF on and a `default` user without rights (the ACL deploy shipped before)."""
    from streamdp.records.datasets import load
    from streamdp.service import create_model
    from streamdp.service.embedded import EmbeddedRedis

    acl = tmp_path / "users.acl"
    acl.write_text("user default off resetpass resetkeys resetchannels -@all\nuser admin on >pw ~* &* +@all\n")
    with EmbeddedRedis.start(args=["--appendonly", "yes", "--aclfile", str(acl)]) as emb:
        hp = emb.url.split("//", 1)[1]
        with pytest.raises(ReplayUnsafe, match="may not run SET, DEL"):
            create_model(f"redis://admin:pw@{hp}", "m", load("congressional-voting").schema, n_trees=2, height=3)
        assert redis.Redis.from_url(f"redis://admin:pw@{hp}").keys("*") == []  # nothing stored, nothing charged
        from streamdp.cli import main

        schema = tmp_path / "schema.json"
        schema.write_text(load("congressional-voting").schema.to_json())
        argv = [
            "--redis-url",
            f"redis://admin:pw@{hp}",
            "model",
            "create",
            "m",
            "--schema",
            str(schema),
            "--epsilon",
            "1",
        ]
        assert main(argv) == 2  # the CLI says why, no traceback
        assert "a Redis restart would erase this model" in capsys.readouterr().err


def test_a_worker_that_may_ask_warns_loudly(monkeypatch, caplog):
    """The stream worker runs the check at start and logs ``worker.restart_loses_data`` (it does not refuse: the
    model exists already; model create is where a new model is refused)."""
    import fakeredis

    from streamdp.records.datasets import load
    from streamdp.service import Worker, create_model

    r = fakeredis.FakeRedis(server=fakeredis.FakeServer(), version=(7, 0))
    create_model(r, "m", load("congressional-voting").schema, n_trees=2, height=3, release="batch")
    risk = durability.ReplayRisk("h:1", "redis", (7, 0, 15), ("SET",))
    monkeypatch.setattr(durability, "replay_risks", lambda client: [risk])
    w = Worker(r, "m", block_ms=10)
    with caplog.at_level(logging.WARNING, logger="streamdp.worker"):
        w._on_start()
    (line,) = [rec.getMessage() for rec in caplog.records if "worker.restart_loses_data" in rec.getMessage()]
    assert "h:1 (redis 7.0.15) has appendonly yes" in line
