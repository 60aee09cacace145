"""Test helper: redis-server processes running the shipped deploy config (deploy/redis.conf, users.acl), restartable.

:class:`DeployRedis` renders ``deploy/users.acl`` with test passwords, adapts ``deploy/redis.conf`` (and
``redis-cluster.conf`` for a cluster) to a temporary directory and free loopback ports, and keeps those across
:meth:`DeployRedis.shutdown`, :meth:`DeployRedis.kill` and :meth:`DeployRedis.start`, so a restart loads the same
AOF. Only ``bind``, ``port``, ``dir``, the ACL file path and (cluster) the settings that need replicas or hostnames
are changed: AOF, fsync policy and ACLs are exactly what deploy ships.
"""

from __future__ import annotations

import importlib.util
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from streamdp.service.embedded import _start_watchdog
from streamdp.service.local_cluster import _free_cluster_port

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
USERS = ("admin", "producer", "worker", "jobworker", "consumer")


def acl_tool():
    spec = importlib.util.spec_from_file_location("acl_passwords", DEPLOY / "acl_passwords.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class DeployRedis:
    """``n`` redis-server processes with the deploy config: one standalone server, or ``cluster`` masters."""

    def __init__(self, n: int = 1, *, cluster: bool = False, acl_text: str | None = None):
        self.cluster = cluster
        self.dir = Path(tempfile.mkdtemp(prefix="streamdp-deploy-"))
        self.passwords = {u: f"test-{u}-pw" for u in USERS}
        text, _ = acl_tool().render(acl_text or (DEPLOY / "users.acl").read_text(), self.passwords, cluster=cluster)
        (self.dir / "users.acl").write_text(text)
        self.ports: list[int] = []
        for _ in range(n):
            self.ports.append(_free_cluster_port(self.ports))
        self.procs: list[subprocess.Popen | None] = [None] * n
        self._watchdogs: list = [None] * n
        for i, port in enumerate(self.ports):
            self._write_conf(i, port)

    def _write_conf(self, i: int, port: int) -> None:
        d = self.dir / f"node{i}"
        d.mkdir()
        conf = (DEPLOY / "redis.conf").read_text()
        for old, new in (
            ("aclfile /etc/redis/users.acl", f"aclfile {self.dir / 'users.acl'}"),
            ("bind 0.0.0.0 -::*", "bind 127.0.0.1"),
            ("port 6379", f"port {port}"),
            ("dir /data", f"dir {d}"),
        ):
            assert old in conf, f"deploy/redis.conf no longer has {old!r}: adapt tests/service/deploy_server.py"
            conf = conf.replace(old, new)
        (d / "redis.conf").write_text(conf)
        if self.cluster:
            cc = (DEPLOY / "redis-cluster.conf").read_text()
            cc = cc.replace("include /usr/local/etc/redis/redis.conf", f"include {d / 'redis.conf'}")
            cc = cc.replace("cluster-config-file /data/nodes.conf", f"cluster-config-file {d / 'nodes.conf'}")
            # no replicas and no hostnames on loopback: the rest is deploy's
            cc += "\ncluster-preferred-endpoint-type ip\nmin-replicas-to-write 0\n"
            (d / "redis-cluster.conf").write_text(cc)

    def conf(self, i: int) -> Path:
        d = self.dir / f"node{i}"
        return d / ("redis-cluster.conf" if self.cluster else "redis.conf")

    def log(self, i: int = 0) -> str:
        p = self.dir / f"node{i}" / "redis.log"
        return p.read_text() if p.exists() else ""

    # -- clients ------------------------------------------------------------------------
    def url(self, user: str, i: int = 0) -> str:
        return f"redis://{user}:{self.passwords[user]}@127.0.0.1:{self.ports[i]}/0"

    def node(self, i: int, user: str = "admin") -> redis.Redis:
        """A plain client on node ``i`` (no cluster redirections)."""
        return redis.Redis(
            port=self.ports[i],
            username=user,
            password=self.passwords[user],
            socket_timeout=10,
            socket_connect_timeout=5,
        )

    # -- processes ----------------------------------------------------------------------
    def start(self, which: list[int] | None = None, timeout: float = 30.0, *, joined: bool = True) -> DeployRedis:
        """Start the nodes ``which`` (all), wait until each has loaded its files and (``joined`` cluster) the cluster
        is ok."""
        for i in which if which is not None else range(len(self.ports)):
            assert self.procs[i] is None or self.procs[i].poll() is not None
            p = subprocess.Popen(
                ["redis-server", str(self.conf(i)), "--logfile", str(self.dir / f"node{i}" / "redis.log")],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                stdin=subprocess.DEVNULL,
            )
            self.procs[i] = p
            self._watchdogs[i] = _start_watchdog(p.pid, None)
        deadline = time.monotonic() + timeout
        for i in which if which is not None else range(len(self.ports)):
            self._wait(lambda i=i: self._loaded(i), deadline, f"node {i} to load")
        if joined and self.cluster and all(p is not None and p.poll() is None for p in self.procs):
            self._wait(self.cluster_ok, deadline, "cluster_state:ok")
        return self

    def _loaded(self, i: int) -> bool:
        p = self.procs[i]
        if p is not None and p.poll() is not None:
            raise RuntimeError(f"redis-server {i} exited ({p.returncode}): {self.log(i)[-2000:]}")
        try:
            with self.node(i) as c:
                return c.info("persistence").get("loading") == 0
        except (redis.RedisError, OSError):
            return False

    def cluster_ok(self) -> bool:
        for i in range(len(self.ports)):
            try:
                with self.node(i) as c:
                    if c.cluster("info").get("cluster_state") != "ok":
                        return False
            except (redis.RedisError, OSError):
                return False
        return True

    def create_cluster(self, timeout: float = 30.0) -> None:
        subprocess.run(
            [
                "redis-cli",
                "--user",
                "admin",
                "--pass",
                self.passwords["admin"],
                "--no-auth-warning",
                "--cluster",
                "create",
                *[f"127.0.0.1:{p}" for p in self.ports],
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=timeout,
        )
        self._wait(self.cluster_ok, time.monotonic() + timeout, "cluster_state:ok")

    def shutdown(self, which: list[int] | None = None) -> None:
        """SHUTDOWN (a clean stop: the AOF is flushed and fsynced)."""
        for i in which if which is not None else range(len(self.ports)):
            try:
                with self.node(i) as c:
                    c.shutdown()
            except redis.ConnectionError:
                pass  # the server closes the connection as it exits
            self.procs[i].wait(30)

    def kill(self, which: list[int] | None = None) -> None:
        """SIGKILL: no flush, no fsync, no goodbye (the OS keeps what was written)."""
        for i in which if which is not None else range(len(self.ports)):
            self.procs[i].send_signal(signal.SIGKILL)
            self.procs[i].wait(30)

    def _wait(self, cond, deadline: float, what: str) -> None:
        while not cond():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            time.sleep(0.05)  # bounded wait on a condition

    def stop(self) -> None:
        for p in self.procs:
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(10)
        for w in self._watchdogs:
            if w is not None:
                try:
                    w.stdin.close()
                    w.wait(10)
                except (OSError, subprocess.TimeoutExpired):
                    w.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> DeployRedis:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _read(c: redis.Redis, key: bytes) -> object:
    kind = c.type(key).decode()
    if kind == "string":
        value: object = c.get(key)
    elif kind == "hash":
        value = sorted(c.hgetall(key).items())
    elif kind == "zset":
        value = c.zrange(key, 0, -1, withscores=True)
    elif kind == "set":
        value = sorted(c.smembers(key))
    elif kind == "list":
        value = c.lrange(key, 0, -1)
    elif kind == "stream":
        groups = [(g["name"], g["last-delivered-id"], g["pending"]) for g in c.xinfo_groups(key)]
        pending = [
            sorted((p["message_id"], p["consumer"]) for p in c.xpending_range(key, g[0], "-", "+", 10**6))
            for g in groups
        ]
        value = (c.xrange(key), groups, pending)
    else:
        value = kind
    return kind, value, c.pttl(key) > 0


def snapshot(server: DeployRedis) -> dict:
    """Every key of every node with its type, whole value and whether it expires (as admin)."""
    out = {}
    for i in range(len(server.ports)):
        with server.node(i) as c:
            for key in c.keys("*"):
                out[key] = _read(c, key)
    return out
