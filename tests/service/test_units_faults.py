"""A person-unit model on a real Redis: under SIGKILLed workers (a smaller variant of test_faults) no id is counted
twice and no record past K reaches a count; a million distinct ids in one batch are each counted once."""

from __future__ import annotations

import math
import os
import signal
import time
import uuid

import numpy as np
import pytest
import redis

from streamdp.service.keys import Keys
from streamdp.service.producer import Producer
from streamdp.service.published import counts_from_bytes
from streamdp.service.registry import create_model, load_spec
from tests.service.test_faults import DS, POINTS, WORKERS, Fleet

# create_model(not_private=True)'s own NotPrivateWarning, expected here
pytestmark = [
    pytest.mark.filterwarnings("ignore:model .*NOT private:streamdp.privacy.secure_random.NotPrivateWarning"),
    pytest.mark.redis,
    pytest.mark.slow,
]

KILLS = 40
K = 3


@pytest.mark.parametrize("release", ["window", pytest.param("batch", marks=pytest.mark.long)])
def test_sigkill_workers_never_count_a_person_twice(redis_url, unique_name, tmp_path, monkeypatch, release):
    key = tmp_path / "noise.key"
    key.write_bytes(os.urandom(64))
    key.chmod(0o600)
    monkeypatch.setenv("STREAMDP_NOISE_KEY_FILE", str(key))  # (the forked workers inherit it)
    model = unique_name
    create_model(
        redis_url, model, DS.schema, n_trees=2, height=3, epsilon=math.inf, seed=3, release=release,
        release_every=0.1 if release == "window" else None, privacy_id="user", max_records_per_id=K, not_private=True,
    )  # fmt: skip
    keys = Keys(model)
    r = redis.Redis.from_url(redis_url)
    fleet = Fleet(redis_url, model, str(tmp_path / "kills.log"), points=POINTS)
    rng = np.random.default_rng()
    per_person: dict[str, int] = {}
    batches: dict[str, tuple] = {}
    t0 = time.monotonic()
    try:
        with Producer(redis_url, model) as prod:
            for _ in range(WORKERS):
                fleet.start(p_kill=0.05)
            while fleet.sigkilled < KILLS or len(batches) < 100:
                assert time.monotonic() - t0 < 150, f"fault phase too slow: {fleet.sigkilled} kills"
                g = r.xinfo_groups(keys.records)[0]
                if (g.get("lag") or 0) + g["pending"] < 15 and len(batches) < 600:
                    idx = rng.integers(0, len(DS.y), 20)
                    # a few people well past K, many below it
                    heavy = rng.random(20) < 0.5
                    ids = [
                        f"person-{int(v)}" for v in np.where(heavy, rng.integers(0, 60, 20), rng.integers(60, 3000, 20))
                    ]
                    bid = uuid.uuid4().hex
                    prod.push(DS.X[idx], DS.y[idx], ids=ids, batch_id=bid)
                    batches[bid] = (idx, ids)
                    for u in ids:
                        per_person[u] = per_person.get(u, 0) + 1
                    old = str(rng.choice(list(batches)))  # a retried XADD of an earlier batch
                    prod.push(DS.X[batches[old][0]], DS.y[batches[old][0]], ids=batches[old][1], batch_id=old)
                fleet.churn(p_kill=0.05)
            fleet.kill_all()
        fleet.finish_clean(r, keys, windows=release == "window")
    finally:
        for p in fleet.alive():
            os.kill(p.pid, signal.SIGKILL)
    counts = sorted(int(v) for v in r.hgetall(keys.ids).values())
    assert counts == sorted(min(n, K) for n in per_person.values())  # each person once, never past K
    spec = load_spec(r, model)
    pub = counts_from_bytes(r.hget(keys.pub_model, "counts"), spec)
    for t in range(spec.n_trees):  # every kept record in exactly one leaf of each tree: nothing else counted
        assert int(pub[t].sum()) == sum(counts), (t, int(pub[t].sum()), sum(counts))
    assert r.zcard(keys.merged) == len(batches)
    for c in r.keys(keys.claim("*")):  # claims left by a worker killed after its commit: merged, expiring
        assert r.zscore(keys.merged, c.decode().rsplit(":", 1)[1]) is not None and 0 < r.ttl(c), c
    print(
        f"\nperson-unit fault injection ({release}): {len(batches)} batches, {fleet.sigkilled} SIGKILLs, {len(counts)} persons"
    )


@pytest.mark.long  # (a real million-id batch; the fakeredis one runs by default)
def test_a_million_distinct_ids_in_one_batch_are_each_counted_once(redis_url, unique_name, tmp_path):
    from streamdp.service.stream_worker import Worker

    key = tmp_path / "noise.key"
    key.write_bytes(os.urandom(64))
    key.chmod(0o600)
    model = unique_name
    create_model(
        redis_url, model, DS.schema, n_trees=2, height=2, epsilon=math.inf, release="window", release_every=1.0,
        privacy_id="user", max_records_per_id=1, noise_key_file=str(key), not_private=True,
    )  # fmt: skip
    n = 1_000_000
    idx = np.arange(n) % len(DS.y)
    with Producer(redis_url, model, batch_size=n) as p:
        p.push(DS.X[idx], DS.y[idx], ids=[f"id-{i}" for i in range(n)])
    w = Worker(redis_url, model, block_ms=50, noise_key_file=str(key))
    w.run(until_drained=True, max_seconds=300, handle_signals=False)
    r = redis.Redis.from_url(redis_url)
    keys = Keys(model)
    assert r.hlen(keys.ids) == n
    spec = load_spec(r, model)
    pub = counts_from_bytes(r.hget(keys.pub_model, "counts"), spec)
    assert [int(pub[t].sum()) for t in range(spec.n_trees)] == [n] * spec.n_trees
