"""Embedded Redis: starts, answers, stops, and leaves no orphan even when its owner is SIGKILLed."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import redis

from streamdp.service.embedded import EmbeddedRedis, _answers, reachable, resolve_redis

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not on PATH")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _wait(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def test_start_stop_cleans_up():
    emb = EmbeddedRedis.start()
    try:
        assert emb.kind == "redis-server"
        assert redis.Redis.from_url(emb.url).ping()
        pid, d = emb.pid, emb._dir
        assert d and os.path.isdir(d)
    finally:
        emb.stop()
    assert not _alive(pid)
    assert not os.path.exists(d)
    assert not reachable(emb.url)
    emb.stop()  # idempotent


def test_context_manager_and_extra_args():
    with EmbeddedRedis.start(args=["--maxmemory-policy", "noeviction"]) as emb:
        r = redis.Redis.from_url(emb.url, decode_responses=True)
        assert r.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
    assert not reachable(emb.url)


def test_readiness_counts_an_auth_refusal_as_up(tmp_path):
    acl = tmp_path / "users.acl"
    acl.write_text("user default off\nuser admin on >pw ~* &* +@all\n")
    with EmbeddedRedis.start(args=["--aclfile", str(acl)]) as emb:
        assert _answers(emb.url) and not reachable(emb.url)
        host_port = emb.url.split("//", 1)[1]
        assert redis.Redis.from_url(f"redis://admin:pw@{host_port}").ping()


def test_bad_args_fail_fast():
    with pytest.raises(RuntimeError, match="did not start"):
        EmbeddedRedis.start(timeout=5, args=["--no-such-option", "x"])


def test_resolve_prefers_explicit_url(monkeypatch):
    monkeypatch.setenv("REDIS_URL", "redis://example.invalid:1/0")
    assert resolve_redis() == ("redis://example.invalid:1/0", None)


_OWNER = """
import sys
from streamdp.service.embedded import EmbeddedRedis
emb = EmbeddedRedis.start()
print(emb.url, emb.pid, emb._dir, flush=True)
sys.stdin.read()  # wait to be killed
"""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_no_orphan_when_owner_dies(sig):
    owner = subprocess.Popen([sys.executable, "-c", _OWNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = owner.stdout.readline().split()
        assert len(line) == 3, "owner did not report its server"
        url, pid, d = line[0], int(line[1]), line[2]
        assert reachable(url)
        owner.send_signal(sig)
        owner.wait(10)
        _wait(lambda: not _alive(pid), 10, "the embedded redis-server to be stopped by its watchdog")
        _wait(lambda: not os.path.exists(d), 10, "the server directory to be removed")
        assert not reachable(url)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()


def test_a_port_taken_by_another_server_is_not_mistaken_for_ours(monkeypatch):
    """If the probed free port is taken by another Redis before ours binds, start() must not return it."""
    import streamdp.service.embedded as emb_mod

    with EmbeddedRedis.start() as other:
        taken = int(other.url.rsplit(":", 1)[1].split("/")[0])
        ports = iter([taken])
        real = emb_mod._free_port
        monkeypatch.setattr(emb_mod, "_free_port", lambda: next(ports, None) or real())
        with EmbeddedRedis.start() as mine:
            assert mine.url != other.url
            assert redis.Redis.from_url(mine.url).info("server")["process_id"] == mine.pid
