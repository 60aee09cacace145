"""A throwaway Redis Cluster on loopback ports (tests and benchmarks): ``n`` masters, no replicas.

Each master is ``redis-server --cluster-enabled yes`` on a free 127.0.0.1 port
with its own node-config file in a temporary directory (watched like
:class:`~streamdp.service.embedded.EmbeddedRedis`, so a SIGKILLed owner leaves
no orphan); ``redis-cli --cluster create`` assigns the 16384 slots, and
:meth:`LocalCluster.start` returns once every node reports ``cluster_state:ok``
and agrees on the slot map (polled with a deadline).

>>> LocalCluster.missing() in (None, "redis-server", "redis-cli")
True
"""

from __future__ import annotations

import atexit
import random
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

import redis

from streamdp.service.embedded import _start_watchdog

__all__ = ["LocalCluster"]


@dataclass
class LocalCluster:
    """``ports`` of the masters; ``url`` points at the first (any node works: the client discovers the rest)."""

    ports: list[int] = field(default_factory=list)
    procs: list[subprocess.Popen] = field(default_factory=list)
    _dir: str = ""
    _watchdogs: list = field(default_factory=list)
    _stopped: bool = False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    @staticmethod
    def missing() -> str | None:
        """The first binary needed that is not on PATH (None when both are)."""
        return next((b for b in ("redis-server", "redis-cli") if shutil.which(b) is None), None)

    @classmethod
    def start(cls, n: int = 3, timeout: float = 30.0) -> LocalCluster:
        """Start ``n`` masters, create the cluster, wait for ``cluster_state:ok`` (RuntimeError after ``timeout``)."""
        if cls.missing():
            raise RuntimeError(f"{cls.missing()} is not on PATH (apt-get install redis-server brings both)")
        c = cls(_dir=tempfile.mkdtemp(prefix="streamdp-cluster-"))
        atexit.register(c.stop)
        deadline = time.monotonic() + timeout
        try:
            for i in range(n):
                port = _free_cluster_port(c.ports)
                proc = subprocess.Popen(
                    [
                        "redis-server",
                        "--port",
                        str(port),
                        "--bind",
                        "127.0.0.1",
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        f"{c._dir}/nodes-{i}.conf",
                        "--dir",
                        c._dir,
                        "--save",
                        "",
                        "--appendonly",
                        "no",
                        "--daemonize",
                        "no",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    stdin=subprocess.DEVNULL,
                )
                c.ports.append(port)
                c.procs.append(proc)
                c._watchdogs.append(_start_watchdog(proc.pid, None))
            for port in c.ports:
                c._wait(lambda p=port: _ping(p), deadline, f"node {port} to answer")
            subprocess.run(
                [
                    "redis-cli",
                    "--cluster",
                    "create",
                    *[f"127.0.0.1:{p}" for p in c.ports],
                    "--cluster-replicas",
                    "0",
                    "--cluster-yes",
                ],
                check=True,
                capture_output=True,
                timeout=max(deadline - time.monotonic(), 1),
            )
            c._wait(c.ready, deadline, "cluster_state:ok on every node")
            return c
        except BaseException:
            c.stop()
            raise

    def _wait(self, cond, deadline: float, what: str) -> None:
        while not cond():
            if any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"a redis-server of the cluster exited while waiting for {what}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            time.sleep(0.05)

    def ready(self) -> bool:
        """Every node says ``cluster_state:ok`` and knows all 16384 slots."""
        for port in self.ports:
            try:
                with redis.Redis(port=port, socket_timeout=1, socket_connect_timeout=1) as r:
                    info = r.cluster("info")
            except (redis.RedisError, OSError):
                return False
            if info.get("cluster_state") != "ok" or int(info.get("cluster_slots_ok", 0)) != 16384:
                return False
        return True

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for w in self._watchdogs:
            if w is not None:
                try:
                    w.stdin.close()
                    w.wait(10)
                except (OSError, subprocess.TimeoutExpired):
                    w.kill()
        shutil.rmtree(self._dir, ignore_errors=True)
        try:
            atexit.unregister(self.stop)
        except Exception:  # pragma: no cover
            pass

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _free_cluster_port(taken: list[int]) -> int:
    """A free loopback port P whose cluster-bus port P + 10000 is free too (both below 65536)."""
    for _ in range(200):
        port = random.randrange(20000, 55000)
        if port in taken or port + 10000 in taken:
            continue
        socks = []
        try:
            for p in (port, port + 10000):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return port
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port pair (P, P + 10000) found on 127.0.0.1")


def _ping(port: int) -> bool:
    try:
        with redis.Redis(port=port, socket_timeout=0.5, socket_connect_timeout=0.5) as r:
            return bool(r.ping())
    except (redis.RedisError, OSError):
        return False
