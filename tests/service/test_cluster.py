"""The service on a real Redis Cluster (three masters, the ``cluster_url`` fixture of conftest).

The Redis tests of the stream service, the CLI (``streamdp demo`` included) and the ledger run here
unchanged against the cluster (imported below; the module's ``redis_url``
fixture points them at the cluster): every script, MULTI and multi-key command
must stay within one slot or the cluster refuses it (CROSSSLOT). Then: several
models on different nodes at once, and a stream worker killed with SIGKILL
mid-stream on the cluster (exactly-once holds). The job queue's tests run on
the cluster in ``test_jobs_cluster.py``.
"""

from __future__ import annotations

import math
import os
import signal
import time
import uuid

import numpy as np
import pytest
from redis.cluster import RedisCluster

from streamdp.service import Consumer, Keys, Producer, WorkerPool, create_model, delete_model
from streamdp.service.connection import connect, is_cluster
from streamdp.service.stats import collect
from streamdp.service.stream_worker import Worker
from tests.cli.test_service import test_cli_demo_runs_and_cleans_up, test_cli_end_to_end  # noqa: F401

# (the ledger's 8-process races are left out: the same single-key script, 25 s each on this machine)
from tests.privacy.conftest import led, source  # noqa: F401
from tests.privacy.test_ledger import (  # noqa: F401
    test_cli_ledger,
    test_create_model_charges_its_epsilon,
    test_create_model_with_too_small_a_budget_leaves_nothing,
    test_idempotent_key_charges_once,
    test_non_private_model_is_not_charged_but_refused_over_a_budget,
    test_redis_layout_and_names,
    test_refused_before_anything_is_recorded,
    test_set_budget_cannot_go_below_spent,
)

# the same test functions, collected again in this module (so they use its redis_url fixture)
from tests.service.test_redis import *  # noqa: F401,F403
from tests.service.test_redis import DS, _wait  # noqa: F811

# create_model(not_private=True)'s own NotPrivateWarning, expected here
pytestmark = [
    pytest.mark.filterwarnings("ignore:model .*NOT private:streamdp.privacy.secure_random.NotPrivateWarning"),
    pytest.mark.redis,
    pytest.mark.slow,
]


@pytest.fixture(scope="module")
def redis_url(cluster_url):
    return cluster_url


def _names_on_different_nodes(r: RedisCluster, n: int) -> list[str]:
    """``n`` fresh model names whose slots are served by ``n`` different masters (n <= number of masters)."""
    names, nodes = [], set()
    while len(names) < n:
        name = f"t-{uuid.uuid4().hex[:12]}"
        node = r.get_node_from_key(Keys(name).records).name
        if node not in nodes:
            nodes.add(node)
            names.append(name)
    return names


def test_a_url_naming_any_node_gives_a_cluster_client(cluster_url, redis_url):
    assert is_cluster(cluster_url)
    assert isinstance(connect(cluster_url), RedisCluster)
    assert isinstance(connect(cluster_url.replace("redis://", "redis+cluster://")), RedisCluster)
    blocking = connect(cluster_url, block_s=30)
    assert isinstance(blocking, RedisCluster) and blocking.get_connection_kwargs()["socket_timeout"] > 30
    assert not isinstance(connect(cluster_url + "?cluster=0"), RedisCluster)


def test_models_on_three_masters_at_once_with_consumers(redis_url):
    r = connect(redis_url)
    names = _names_on_different_nodes(r, 3)
    assert len({r.keyslot(Keys(n).records) for n in names}) == 3
    try:
        for i, name in enumerate(names):
            create_model(
                redis_url,
                name,
                DS.schema,
                n_trees=3,
                height=3,
                epsilon=math.inf,
                seed=i,
                release="batch",
                not_private=True,
            )
        for name in names:
            with Producer(redis_url, name, batch_size=50) as p:
                p.push(DS.X, DS.y)  # 9 batches each
        waits = {name: Consumer(redis_url, name) for name in names}
        with (
            WorkerPool(names[0], 1, redis_url, until_drained=True, block_ms=100, log_level=30) as p0,
            WorkerPool(names[1], 1, redis_url, until_drained=True, block_ms=100, log_level=30) as p1,
        ):
            w = Worker(redis_url, names[2], block_ms=100)
            w.run(until_drained=True, max_seconds=60, handle_signals=False)
            assert p0.wait(60) and p1.wait(60)
        for name in names:
            f = waits[name].wait_newer(0, timeout=5)  # pub/sub across nodes, or the version re-read
            assert f is not None and f.n_releases == 9
            assert np.array_equal(f.counts, Worker(redis_url, name).spec.noisy_delta(DS.X, DS.y))
            assert collect(redis_url, name)["records_merged"] == len(DS.y)
    finally:
        for name in names:
            try:
                delete_model(redis_url, name)
            except KeyError:
                pass


def _worker_child(url: str, model: str, until_drained: bool) -> None:
    w = Worker(
        url, model, consumer=f"w-{os.getpid()}", block_ms=50, claim_idle_ms=300, claim_every_s=0.05, batch_entries=2
    )
    w.run(until_drained=until_drained, max_seconds=90, handle_signals=True)


def test_sigkill_a_worker_mid_stream_on_the_cluster_exactly_once(redis_url):
    import multiprocessing as mp

    r = connect(redis_url)
    names = _names_on_different_nodes(r, 2)
    ctx = mp.get_context("fork")
    procs = []
    try:
        for name in names:
            create_model(
                redis_url,
                name,
                DS.schema,
                n_trees=3,
                height=4,
                epsilon=math.inf,
                seed=3,
                release="batch",
                not_private=True,
            )
        pushed = {}
        for name in names:
            with Producer(redis_url, name, batch_size=5) as p:
                p.push(DS.X, DS.y)  # 87 batches
                pushed[name] = set(p.last_batch_ids)
                p.push(DS.X[:5], DS.y[:5], batch_id=p.last_batch_ids[0])  # a retried XADD: merged once
        victim = ctx.Process(target=_worker_child, args=(redis_url, names[0], False), daemon=True)
        procs.append(victim)
        victim.start()
        c = Consumer(redis_url, names[0])
        _wait(lambda: c.version() >= 3, 60, "the first merges")
        os.kill(victim.pid, signal.SIGKILL)  # mid-stream
        victim.join(10)
        assert victim.exitcode == -signal.SIGKILL
        held = sum(int(x["pending"]) for x in r.xpending(Keys(names[0]).records, "workers")["consumers"] or [])
        assert c.version() < 40, "the victim drained most of the stream before the kill"
        for name in names:  # survivors on both models (one of them reclaims what the victim held)
            p = ctx.Process(target=_worker_child, args=(redis_url, name, True), daemon=True)
            procs.append(p)
            p.start()
        for p in procs[1:]:
            p.join(100)
            assert p.exitcode == 0
        for name in names:
            f = Consumer(redis_url, name).latest()
            assert f.n_releases == len(pushed[name]) == len(DS.y) // 5
            assert np.array_equal(f.counts, Worker(redis_url, name).spec.noisy_delta(DS.X, DS.y))  # eps=inf: exact
            assert {m.decode() for m in r.zrange(Keys(name).merged, 0, -1)} == pushed[name]
            st = collect(redis_url, name)
            assert st["pending"] == 0 and st["lag"] == 0 and st["batches_merged"] == f.n_releases
        if held:
            assert collect(redis_url, names[0])["claimed"] >= held
    finally:
        for p in procs:
            if p.is_alive():
                os.kill(p.pid, signal.SIGKILL)
        for name in names:
            try:
                delete_model(redis_url, name)
            except KeyError:
                pass


def test_deploy_acl_users_work_on_every_node_of_the_cluster(redis_url, cluster_url):
    """deploy/users.acl rendered with --cluster and loaded on every node: each role does its job, no more."""
    import importlib.util
    from pathlib import Path

    import redis

    deploy = Path(__file__).resolve().parents[2] / "deploy"
    spec = importlib.util.spec_from_file_location("acl_passwords", deploy / "acl_passwords.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    users = ("admin", "producer", "worker", "consumer")
    pws = {u: f"test-{u}-{uuid.uuid4().hex[:6]}" for u in users}
    text, _ = tool.render((deploy / "users.acl").read_text(), pws, cluster=True)
    admin = connect(cluster_url)
    for node in admin.get_primaries():  # ACLs are per node (the session's default user stays on for the others)
        for line in text.splitlines():
            parts = line.split()
            if parts and parts[0] == "user" and parts[1] in users:
                admin.execute_command("ACL", "SETUSER", *parts[1:], target_nodes=node)
    hostport = cluster_url.split("//", 1)[1].rsplit("/", 1)[0]
    url = {u: f"redis://{u}:{pws[u]}@{hostport}/0" for u in users}
    name = _names_on_different_nodes(admin, 1)[0]
    try:
        assert isinstance(connect(url["worker"]), RedisCluster)  # CLUSTER INFO allowed: detected
        create_model(
            url["admin"],
            name,
            DS.schema,
            n_trees=3,
            height=3,
            epsilon=math.inf,
            seed=5,
            release="batch",
            not_private=True,
        )
        with Producer(url["producer"], name, batch_size=100) as p:
            p.push(DS.X, DS.y)
        Worker(url["worker"], name, block_ms=50).run(until_drained=True, max_seconds=60, handle_signals=False)
        c = Consumer(url["consumer"], name)
        f = c.latest()
        assert f.n_releases == 5 and np.array_equal(f.counts, Worker(url["admin"], name).spec.noisy_delta(DS.X, DS.y))
        with pytest.raises(redis.exceptions.NoPermissionError):
            connect(url["consumer"]).hget(Keys(name).state, "counts")  # private state stays private
        with pytest.raises(redis.exceptions.NoPermissionError):
            connect(url["producer"]).xrange(Keys(name).records)
    finally:
        delete_model(cluster_url, name)
        for node in admin.get_primaries():
            for u in users:
                admin.execute_command("ACL", "DELUSER", u, target_nodes=node)


def test_window_release_on_the_cluster_counts_every_record_once(cluster_url):
    """release="window" (the default) on a cluster: the window scripts stay in the model's slot and every record
    is counted once (epsilon=inf: the published counts equal the exact tally)."""
    name = _names_on_different_nodes(connect(cluster_url), 1)[0]
    create_model(
        cluster_url,
        name,
        DS.schema,
        n_trees=3,
        height=3,
        epsilon=math.inf,
        seed=7,
        release="window",
        release_every=0.1,
        not_private=True,
    )
    try:
        with Producer(cluster_url, name, batch_size=50) as p:
            p.push(DS.X, DS.y)
        w = Worker(cluster_url, name, block_ms=20)
        exact = w.spec.noisy_delta(DS.X, DS.y)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            w.step()
            f = Consumer(cluster_url, name).latest()
            if np.array_equal(f.counts, exact):
                break
        assert np.array_equal(f.counts, exact) and f.n_releases >= 1
    finally:
        delete_model(cluster_url, name)


def test_a_worker_whose_default_node_died_finds_the_cluster_again(redis_url, unique_name):
    """An operator's worker, its model on another master, retried XREADGROUP against a killed master until it came
    back, though its replica had taken over: redis-py asks its default node for a movable-keys command's keys.
    The same state, made by pointing the default node at a dead address: the worker's step fails, its reconnect
    heals the client (`connection.heal`), and the next step reads."""
    import socket

    import redis
    from redis.cluster import ClusterNode

    create_model(redis_url, unique_name, DS.schema, n_trees=2, height=2, epsilon=1.0, release="batch")
    Producer(redis_url, unique_name).push(DS.X[:20], DS.y[:20])
    w = Worker(redis_url, unique_name, block_ms=50)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = ClusterNode("127.0.0.1", s.getsockname()[1])
    dead.redis_connection = redis.Redis(dead.host, dead.port, socket_connect_timeout=1)
    for client in {id(w.redis): w.redis, id(w.reader.r): w.reader.r}.values():
        client.nodes_manager.default_node = dead
    with pytest.raises(redis.ConnectionError):
        w.step()
    w._on_disconnect()
    assert w.step() == 1 and collect(redis_url, unique_name)["batches_merged"] == 1
