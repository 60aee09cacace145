"""A Redis restart with the shipped deploy config (AOF, ACL users) keeps every model and every acknowledged record.

Each test starts its own redis-server(s) from ``deploy/redis.conf`` and ``deploy/users.acl``
(:class:`tests.service.deploy_server.DeployRedis`), creates models as ``admin``, pushes records as ``producer``
and merges them as ``worker``, leaves the second half of the records unread, then stops Redis (SHUTDOWN, or
SIGKILL) and starts it again on the same files. Every key must come back exactly as it was (models, versions,
ledger, registry, stream entries, consumer group and its pending entries; nothing deleted may come back), and a
worker must then merge the rest: each record counted once.
"""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest

from streamdp.records.datasets import load
from streamdp.service import Consumer, Producer, Worker, create_model
from streamdp.service.durability import replay_risks
from streamdp.service.stats import collect
from tests.service.deploy_server import DeployRedis, snapshot

# create_model(not_private=True)'s own NotPrivateWarning, expected here
pytestmark = [
    pytest.mark.filterwarnings("ignore:model .*NOT private:streamdp.privacy.secure_random.NotPrivateWarning"),
    pytest.mark.redis,
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("redis-server") is None or shutil.which("redis-cli") is None,
        reason="needs the redis-server and redis-cli binaries",
    ),
]
DS = load("congressional-voting")
HALF = len(DS.y) // 2
BATCH = 20


def _drain(server: DeployRedis, name: str) -> None:
    Worker(server.url("worker"), name, block_ms=50, trim_every=1).run(
        until_drained=True, max_seconds=120, handle_signals=False
    )


MODELS = {  # name: (epsilon, release): exact counts, a private model with a ledger, release windows
    "exact": (math.inf, "batch"),
    "private": (1.0, "batch"),
    "windowed": (math.inf, "window"),
}


def _before_restart(server: DeployRedis) -> tuple[dict, list[str]]:
    """Three models, half the records merged (and released), half only pushed."""
    names = list(MODELS)
    for name, (eps, release) in MODELS.items():
        every = 0.5 if release == "window" else None
        create_model(
            server.url("admin"),
            name,
            DS.schema,
            n_trees=3,
            height=4,
            epsilon=eps,
            seed=3,
            release=release,
            release_every=every,
            not_private=math.isinf(eps),
        )
        with Producer(server.url("producer"), name, batch_size=BATCH) as p:
            p.push(DS.X[:HALF], DS.y[:HALF])
        _drain(server, name)
        with Producer(server.url("producer"), name, batch_size=BATCH) as p:
            acked = p.push(DS.X[HALF:], DS.y[HALF:])  # acknowledged by Redis, not read by any worker yet
        assert len(acked) == math.ceil((len(DS.y) - HALF) / BATCH)
    return snapshot(server), names


def _after_restart(server: DeployRedis, before: dict, names: list[str]) -> None:
    after = snapshot(server)
    lost = sorted(set(before) - set(after))
    back = sorted(set(after) - set(before))
    changed = sorted(k for k in set(before) & set(after) if before[k] != after[k])
    assert (lost, back, changed) == ([], [], []), server.log()[-3000:]
    n_batches = math.ceil(HALF / BATCH) + math.ceil((len(DS.y) - HALF) / BATCH)
    for name in names:
        _drain(server, name)
        st = collect(server.url("admin"), name)
        assert st["records_merged"] == len(DS.y) and st["pending"] == 0
        if MODELS[name][1] == "batch":
            assert st["batches_merged"] == n_batches
            assert Consumer(server.url("consumer"), name).latest().n_releases == n_batches
    for name in ("exact", "windowed"):  # no noise: the released counts are the exact tally
        latest = Consumer(server.url("consumer"), name).latest()
        w = Worker(server.url("worker"), name)
        assert np.array_equal(latest.counts, w.spec.noisy_delta(DS.X, DS.y))  # every record once, none twice


@pytest.mark.parametrize("stop", ["shutdown", "kill"])
def test_deploy_config_keeps_every_model_and_record_across_a_restart(stop):
    """SHUTDOWN, or SIGKILL of the process: with appendfsync everysec the writes Redis acknowledged are in the OS by
    then (a machine crash can still lose the last second: docs/security.md)."""
    with DeployRedis() as server:
        server.start()
        assert replay_risks(server.node(0)) == []  # the deploy config passes the startup check
        before, names = _before_restart(server)
        getattr(server, stop)()
        server.start()
        assert "NOPERM" not in server.log()
        _after_restart(server, before, names)


@pytest.mark.long
@pytest.mark.parametrize("stop", ["shutdown", "kill"])
def test_deploy_cluster_keeps_every_model_and_record_across_a_restart(stop):
    """The same on a three-master cluster from deploy/redis-cluster.conf: every master restarted (the models' slots
    are on some of them), by SHUTDOWN or SIGKILL."""
    with DeployRedis(3, cluster=True) as server:
        server.start(joined=False)
        server.create_cluster()
        before, names = _before_restart(server)
        getattr(server, stop)()
        server.start()
        assert not any("NOPERM" in server.log(i) for i in range(3))
        _after_restart(server, before, names)
