"""Fault injection on a real Redis: workers SIGKILLed at random points lose nothing and double-count nothing.

Two (or more) worker processes run over a model's record stream while the
test kills them with SIGKILL, at least 100 times, and restarts them (half of
the time under the same consumer name, which re-reads its own pending
entries; otherwise a fresh name, whose predecessor's entries are reclaimed by
XAUTOCLAIM after a short idle time). Kills happen

* from inside, at named points, by the worker killing itself with SIGKILL
  (``os.kill(getpid(), SIGKILL)``: no cleanup, no atexit, exactly like an
  external kill at that instant), through the worker's public test-only hook
  ``STREAMDP_FAULT_POINTS`` (:mod:`streamdp.service.faults`, docs/service.md):

  - ``after_read``: entries read (XREADGROUP / XAUTOCLAIM), nothing processed;
  - ``after_draw``: noise drawn, delta not yet stored (the noise is lost, never released);
  - ``after_store``: noised delta stored with SET NX, not yet merged;
  - ``before_commit``: deltas summed, before the atomic commit (= before the ack,
    which is part of the commit script);
  - ``in_commit``: the commit script ran on the server, the worker dies before
    the call returns;

  plus stalls longer than the claim idle time before a commit (the stale
  worker's commit must be rejected, its noise never released);

* and from outside, by the test, at random instants.

Producers keep pushing (>= 300 unique batches, plus duplicate XADDs of the
same batch ids) until enough kills happened. Then two clean workers drain the
stream, and the test checks:

* eps = inf (no noise): the published counts equal the exact tally of every
  unique batch; each batch id merged once; nothing pending; no dead letter;
* normal eps: the published counts equal the sum of exactly one stored noised
  delta (``priv:delta:<batch_id>``) per unique batch.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import random
import signal
import time
import uuid

import numpy as np
import pytest
import redis

from streamdp.forest.model import PrivateForest
from streamdp.records.datasets import load
from streamdp.service.consumer import Consumer
from streamdp.service.keys import GROUP, Keys, as_str
from streamdp.service.producer import Producer
from streamdp.service.registry import create_model, delete_model, load_spec

# create_model(not_private=True)'s own NotPrivateWarning, expected here
pytestmark = [
    pytest.mark.filterwarnings("ignore:model .*NOT private:streamdp.privacy.secure_random.NotPrivateWarning"),
    pytest.mark.redis,
    pytest.mark.slow,
]

POINTS = ("after_read", "after_draw", "after_store", "before_commit", "in_commit")
CLOSE_POINTS = ("close_after_seal", "close_after_draw", "close_after_store", "close_before_commit", "close_in_commit")
KILLS_TARGET = 100
MIN_BATCHES = 300
BATCH = 20  # records per batch
WORKERS = 2
CLAIM_IDLE_MS = 150
DS = load("congressional-voting")


def _wait(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)  # bounded wait on a condition


# -- the child: a real Worker with fault points set in its environment --------------------
def _worker_child(
    url: str, model: str, consumer: str, p_kill: float, log_path: str, until_drained: bool, points: tuple = POINTS
) -> None:
    from streamdp.service.stream_worker import Worker

    if p_kill > 0:
        # a stall past the claim idle time before a commit: another worker reclaims the entries while this one
        # still holds their deltas; its commit must then be rejected (not-owner / not-pending)
        os.environ["STREAMDP_FAULT_POINTS"] = ",".join(
            [f"{pt}:{p_kill}" for pt in points] + [f"before_commit:{p_kill / 2}:stall={3 * CLAIM_IDLE_MS / 1000}"]
        )
        os.environ["STREAMDP_FAULT_LOG"] = log_path
    else:
        os.environ.pop("STREAMDP_FAULT_POINTS", None)
    # delta_ttl_s: the stored noise outlives its release, for the checks below (dropped at the release by default)
    w = Worker(
        url,
        model,
        consumer=consumer,
        block_ms=50,
        claim_idle_ms=CLAIM_IDLE_MS,
        claim_every_s=0.05,
        batch_entries=3,
        max_deliveries=10_000,
        trim_every=5,
        delta_ttl_s=3600,
    )
    w.run(until_drained=until_drained, max_seconds=150, handle_signals=True)
    os._exit(0)


class Fleet:
    def __init__(self, url: str, model: str, log_path: str, points: tuple = POINTS):
        self.url, self.model, self.log_path, self.points = url, model, log_path, points
        self.ctx = mp.get_context("fork")  # everything is imported already: restarts take milliseconds
        self.procs: list[mp.Process] = []
        self.names: dict[int, str] = {}
        self.external_kills = 0
        self.sigkilled = 0
        self.restarts_same_name = 0
        self.rng = random.Random(uuid.uuid4().int)

    def start(self, p_kill: float, name: str | None = None, until_drained: bool = False) -> mp.Process:
        if name is not None:
            self.restarts_same_name += 1
        name = name or f"w-{uuid.uuid4().hex[:8]}"
        p = self.ctx.Process(
            target=_worker_child,
            args=(self.url, self.model, name, p_kill, self.log_path, until_drained, self.points),
            daemon=True,
        )
        p.start()
        self.names[p.pid] = name
        self.procs.append(p)
        return p

    def alive(self) -> list[mp.Process]:
        return [p for p in self.procs if p.is_alive()]

    def reap(self) -> list[mp.Process]:
        dead = [p for p in self.procs if not p.is_alive()]
        for p in dead:
            p.join()
            if p.exitcode == -signal.SIGKILL:
                self.sigkilled += 1
            elif p.exitcode != 0:
                raise AssertionError(f"worker {self.names[p.pid]} exited with {p.exitcode}")
        self.procs = [p for p in self.procs if p not in dead]
        return dead

    def kill_random(self) -> None:
        live = self.alive()
        if live:
            os.kill(self.rng.choice(live).pid, signal.SIGKILL)
            self.external_kills += 1

    def kill_all(self) -> None:
        for p in self.alive():
            os.kill(p.pid, signal.SIGKILL)
            self.external_kills += 1
        _wait(lambda: not self.alive(), 10, "killed workers to exit")
        self.reap()

    def churn(self, p_kill: float) -> None:
        """One step of the chaos phase: now and then a SIGKILL from outside; the dead restarted (half under their
        old consumer name, whose pending entries they then own), the fleet kept at WORKERS processes."""
        if self.rng.random() < 0.03:
            self.kill_random()
        for p in self.reap():
            self.start(p_kill=p_kill, name=self.names[p.pid] if self.rng.random() < 0.5 else None)
        while len(self.alive()) < WORKERS:
            self.start(p_kill=p_kill)
        time.sleep(0.01)  # bounded polling step of the supervisor loop

    def finish_clean(self, r, keys: Keys, *, windows: bool = True) -> None:
        """The clean phase: workers without faults drain the stream (and, with ``windows``, release the window
        holding its last entries), then stop on SIGTERM once each has joined the group (one still starting when
        the others had drained died of SIGTERM's default action in a CI run)."""
        clean = [self.start(p_kill=0.0) for _ in range(WORKERS)]

        def drained() -> bool:
            g = r.xinfo_groups(keys.records)[0]
            return g["pending"] == 0 and (g.get("lag") or 0) == 0

        _wait(drained, 90, "clean workers to drain the stream")
        if windows:
            last = int(r.hget(keys.state, "open"))
            _wait(lambda: int(r.hget(keys.state, "releases") or 0) >= last, 30, "the last window's release")
        names = {self.names[p.pid] for p in clean}
        _wait(
            lambda: names <= {as_str(c["name"]) for c in r.xinfo_consumers(keys.records, GROUP)},
            30,
            "clean workers to join the group",
        )
        for p in clean:
            os.kill(p.pid, signal.SIGTERM)
        _wait(lambda: not any(p.is_alive() for p in clean), 30, "clean workers to stop")
        self.reap()


def _push_round(prod: Producer, rng: np.random.Generator, n_batches: int, batches: dict, n_dups: int) -> None:
    for _ in range(n_batches):
        idx = rng.integers(0, len(DS.y), BATCH)
        bid = uuid.uuid4().hex
        prod.push(DS.X[idx], DS.y[idx], batch_id=bid)
        batches[bid] = idx
    for bid in rng.choice(list(batches), n_dups, replace=False):  # retried XADDs of earlier batches
        idx = batches[bid]
        prod.push(DS.X[idx], DS.y[idx], batch_id=str(bid))


@pytest.mark.parametrize("epsilon", [math.inf, 1.0], ids=["eps_inf", "eps_1"])
def test_sigkill_workers_exactly_once(redis_url, unique_name, tmp_path, epsilon):
    model = unique_name
    create_model(
        redis_url,
        model,
        DS.schema,
        n_trees=3,
        height=4,
        epsilon=epsilon,
        seed=7,
        release="batch",
        not_private=math.isinf(epsilon),
    )
    keys = Keys(model)
    r = redis.Redis.from_url(redis_url)
    log_path = str(tmp_path / "kills.log")
    fleet = Fleet(redis_url, model, log_path)
    rng = np.random.default_rng()
    batches: dict[str, np.ndarray] = {}
    n_entries = 0
    t0 = time.monotonic()
    try:
        with Producer(redis_url, model) as prod:
            _push_round(prod, rng, 40, batches, 4)
            n_entries = 44
            for _ in range(WORKERS):
                fleet.start(p_kill=0.06)

            def self_kills() -> int:
                try:
                    with open(log_path) as f:
                        return sum(1 for _ in f)
                except FileNotFoundError:
                    return 0

            while fleet.sigkilled < KILLS_TARGET or len(batches) < MIN_BATCHES:
                assert time.monotonic() - t0 < 120, (
                    f"fault phase too slow: {fleet.sigkilled} kills, {len(batches)} batches"
                )
                # keep a backlog so there is always work to crash in
                lag = r.xinfo_groups(keys.records)[0]
                backlog = (lag.get("lag") or 0) + lag["pending"]
                if backlog < 15 and len(batches) < 1000:
                    _push_round(prod, rng, 20, batches, 2)
                    n_entries += 22
                # random external kills (about one per 0.3 s)
                if fleet.rng.random() < 0.03:
                    fleet.kill_random()
                for p in fleet.reap():
                    # restart: half of the time under the same consumer name
                    same = fleet.names[p.pid] if fleet.rng.random() < 0.5 else None
                    fleet.start(p_kill=0.06, name=same)
                while len(fleet.alive()) < WORKERS:
                    fleet.start(p_kill=0.06)
                time.sleep(0.01)  # bounded polling step of the supervisor loop
            fleet.kill_all()

        # clean phase: two workers without faults drain the stream and exit
        clean = [fleet.start(p_kill=0.0, until_drained=True) for _ in range(WORKERS)]
        _wait(lambda: not any(p.is_alive() for p in clean), 90, "clean workers to drain the stream")
        fleet.reap()
    finally:
        for p in fleet.alive():
            os.kill(p.pid, signal.SIGKILL)

    with open(log_path) as f:
        points = [ln.strip() for ln in f]
    stats = {k.decode(): int(float(v)) for k, v in r.hgetall(keys.stats).items() if k != b"last_commit_ms"}
    counts_by_point = {pt: points.count(pt) for pt in POINTS}
    print(
        f"\nfault injection eps={epsilon}: {len(batches)} unique batches, {n_entries} entries, "
        f"{fleet.sigkilled} SIGKILLs ({len(points)} at named points {counts_by_point}, "
        f"{fleet.external_kills} external), {fleet.restarts_same_name} same-name restarts, "
        f"{time.monotonic() - t0:.1f}s; worker counters {stats}"
    )
    assert fleet.sigkilled >= KILLS_TARGET
    assert len(batches) >= MIN_BATCHES
    assert all(counts_by_point[pt] > 0 for pt in POINTS), counts_by_point
    # the recovery paths were exercised: reclaimed entries, reused stored deltas, rejected stale commits
    assert stats.get("claimed", 0) > 0 and stats.get("delta_reused", 0) > 0, stats
    # (a stale commit refused, not-owner, or retried, version CAS, is timing here: most runs see several, one CI
    # run saw none of either; both are checked deterministically in test_stream_worker.py,
    # test_redelivered_batch_reuses_its_stored_delta and test_a_commit_that_lost_the_version_race_is_retried_...)
    assert stats.get("lost_trimmed", 0) == 0 and stats.get("poison", 0) == 0, stats  # MINID trims kept unacked entries

    # nothing pending, nothing undelivered, nothing dead-lettered
    g = next(g for g in r.xinfo_groups(keys.records) if g["name"].decode() == GROUP)
    assert g["pending"] == 0
    assert g.get("lag", 0) in (0, None)
    assert r.xlen(keys.dead) == 0, r.xrange(keys.dead, count=3)

    # each unique batch merged exactly once (duplicates and redeliveries included)
    merged = {m.decode() for m in r.zrange(keys.merged, 0, -1)}
    assert merged == set(batches)
    forest = Consumer(redis_url, model).latest()
    assert forest.n_releases == len(batches)
    state_counts = np.frombuffer(r.hget(keys.state, "counts"), dtype="<i8").reshape(forest.shape)
    np.testing.assert_array_equal(forest.counts, state_counts)

    spec = load_spec(redis_url, model)
    if math.isinf(epsilon):
        all_idx = np.concatenate(list(batches.values()))
        exact = spec.noisy_delta(DS.X[all_idx], DS.y[all_idx])
        np.testing.assert_array_equal(forest.counts, exact)
    else:
        from streamdp.service.draw_once import noise_from_bytes

        stored = r.mget([Keys.of(r, keys.name).delta(b) for b in batches])
        assert all(s is not None for s in stored), "a merged batch has no stored delta"
        deltas = [noise_from_bytes(s, spec) for s in stored]
        np.testing.assert_array_equal(forest.counts, np.sum(deltas, axis=0))
        # and the noise is really there (the sum differs from the exact tally)
        all_idx = np.concatenate(list(batches.values()))
        exact = PrivateForest.from_bytes(r.get(keys.spec))
        exact = PrivateForest(exact.schema, exact.structure, epsilon=math.inf).noisy_delta(DS.X[all_idx], DS.y[all_idx])
        assert not np.array_equal(forest.counts, exact)
    delete_model(redis_url, model)


def _check_rate_windows(r, keys, spec, forest, releases: int, every: float) -> None:
    """A model with a cadence after the fault phase: every window's stored release is there once; folding the
    pure rule over their released totals gives the stored schedule (windows of several lengths); the published
    counts are the sum of the merged ones (exactly the records, without noise)."""
    import json

    from streamdp.release.cadence import Cadence, Schedule
    from streamdp.service.draw_once import noise_from_bytes
    from streamdp.service.schedule import WindowSchedule

    stored = r.mget([Keys.of(r, keys.name).window_delta(w) for w in range(1, releases + 1)])
    assert all(s is not None for s in stored), "a released window has no stored noise"
    deltas = [noise_from_bytes(s, spec) for s in stored]
    cadence = Cadence.from_dict(json.loads(r.hget(keys.state, "cadence")))
    start = float(r.hget(keys.state, "release_start"))
    ws = WindowSchedule(r, keys, spec, forest_policy(r, keys), start, cadence)
    sched, merged, lengths = Schedule.first(start, every), [], set()
    for d in deltas:
        new = ws.next(sched, d[spec.n_trees :, 0])
        if new.merged > sched.merged:
            merged.append(d)
        lengths.add(round(sched.length, 6))
        sched = new
    assert sched == Schedule.from_dict(json.loads(r.hget(keys.state, "schedule")))
    assert len(lengths) > 1, lengths  # the windows did vary
    assert forest.n_releases == forest.version == len(merged) <= releases
    np.testing.assert_array_equal(forest.counts, np.sum(merged, axis=0))


def forest_policy(r, keys):
    from streamdp.service.registry import load_policy

    return load_policy(r, keys.name)[0]


# -- the Redis server itself crashes (SIGKILL) and restarts from its AOF ---------------------
@pytest.mark.skipif(__import__("shutil").which("redis-server") is None, reason="needs the redis-server binary")
def test_redis_sigkill_and_aof_restart_keeps_exactly_once(tmp_path, unique_name):
    """deploy/redis.conf's durability (AOF) is part of exactly-once: kill -9 Redis mid-stream, restart it
    from its AOF (appendfsync always here), restart the workers: every batch is merged exactly once."""
    import subprocess

    from streamdp.service.embedded import _free_port

    port = _free_port()
    url = f"redis://127.0.0.1:{port}/0"
    cmd = [
        "redis-server",
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        str(tmp_path),
        "--save",
        "",
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--maxmemory-policy",
        "noeviction",
    ]

    def start_server():
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def up():
            try:
                return redis.Redis.from_url(url, socket_connect_timeout=0.2).ping()
            except (redis.ConnectionError, redis.BusyLoadingError, OSError):
                assert proc.poll() is None, "redis-server exited"
                return False

        _wait(up, 15, "redis-server to answer")
        return proc

    server = start_server()
    fleet = Fleet(url, unique_name, str(tmp_path / "kills.log"))
    try:
        create_model(
            url,
            unique_name,
            DS.schema,
            n_trees=3,
            height=4,
            epsilon=math.inf,
            seed=7,
            release="batch",
            not_private=True,
        )
        keys = Keys(unique_name)
        r = redis.Redis.from_url(url)
        rng = np.random.default_rng()
        batches: dict[str, np.ndarray] = {}
        with Producer(url, unique_name) as prod:
            _push_round(prod, rng, 400, batches, 20)
        for _ in range(WORKERS):
            fleet.start(p_kill=0.0)
        _wait(lambda: int(r.hget(keys.pub_model, "releases") or 0) >= 30, 60, "some batches merged")
        at_kill = int(r.hget(keys.pub_model, "releases") or 0)
        server.kill()  # SIGKILL: no shutdown save, only what the AOF holds
        server.wait(10)
        server = start_server()
        r = redis.Redis.from_url(url)
        after = int(r.hget(keys.pub_model, "releases") or 0)
        print(f"\nredis killed with {at_kill}+ of {len(batches)} batches merged; {after} after the AOF restart")
        assert after >= at_kill  # nothing acknowledged was lost
        # workers lost their connection; whatever they do now, replace them all
        fleet.kill_all() if fleet.alive() else None
        for p in fleet.procs:
            p.join(5)
        fleet.procs = []
        with Producer(url, unique_name) as prod:
            _push_round(prod, rng, 50, batches, 5)
        clean = [fleet.start(p_kill=0.0, until_drained=True) for _ in range(WORKERS)]
        _wait(lambda: not any(p.is_alive() for p in clean), 90, "clean workers to drain the stream")
        assert [p.exitcode for p in clean] == [0] * WORKERS

        r = redis.Redis.from_url(url)
        g = next(g for g in r.xinfo_groups(keys.records) if g["name"].decode() == GROUP)
        assert g["pending"] == 0
        assert {m.decode() for m in r.zrange(keys.merged, 0, -1)} == set(batches)
        forest = Consumer(url, unique_name).latest()
        assert forest.n_releases == len(batches)
        all_idx = np.concatenate(list(batches.values()))
        np.testing.assert_array_equal(
            forest.counts, load_spec(url, unique_name).noisy_delta(DS.X[all_idx], DS.y[all_idx])
        )
    finally:
        for p in fleet.procs:
            if p.is_alive():
                os.kill(p.pid, signal.SIGKILL)
        server.kill()
        server.wait(10)


def _all_hit(log_path: str, points: tuple[str, ...]) -> bool:
    """Whether the fleet's kill log names every one of ``points``."""
    try:
        with open(log_path) as f:
            seen = {ln.strip() for ln in f}
    except FileNotFoundError:
        return False
    return seen.issuperset(points)


@pytest.mark.parametrize(
    "release,epsilon,rate",
    [
        ("window", math.inf, False),
        ("tree", math.inf, False),
        ("window", 1.0, False),
        ("grow", 1.0, False),
        pytest.param("window", math.inf, True, marks=pytest.mark.long),  # (variable windows: tens of seconds)
        pytest.param("window", 1.0, True, marks=pytest.mark.long),  # (minutes: noise-only releases wait to merge)
    ],
    ids=["window_eps_inf", "tree_eps_inf", "window_eps_1", "grow_eps_1", "rate_window_eps_inf", "rate_window_eps_1"],
)
def test_sigkill_workers_while_windows_close(redis_url, unique_name, tmp_path, release, epsilon, rate):
    """release=window/tree/grow under SIGKILLs at every add and close point (windows of 0.1 s, so hundreds of
    closes happen under fire): every entry lands in exactly one window, every due window is released once
    with one stored noise (grow: one stored release), and a closer killed at any point is taken over.
    ``rate``: windows from the released rate (0.1 to 0.8 s, streamdp.release.cadence), releases that carry only
    noise left out; else the clock's windows, every release merged (a model without a cadence)."""
    model = unique_name
    every = 0.1
    create_model(
        redis_url,
        model,
        DS.schema,
        n_trees=3,
        height=4,
        epsilon=epsilon,
        seed=7,
        release=release,
        release_every=every,
        max_lag=8 * every if rate else None,
        cadence=None if rate else "fixed",
        not_private=math.isinf(epsilon),
    )
    keys = Keys(model)
    r = redis.Redis.from_url(redis_url)
    log_path = str(tmp_path / "kills.log")
    fleet = Fleet(redis_url, model, log_path, points=POINTS + CLOSE_POINTS)
    rng = np.random.default_rng()
    batches: dict[str, np.ndarray] = {}
    t0 = time.monotonic()
    try:
        with Producer(redis_url, model) as prod:
            for _ in range(WORKERS):
                fleet.start(p_kill=0.04)
            # until every close point was hit too (a few hits each per 100 kills: one may see none in a run)
            while fleet.sigkilled < KILLS_TARGET or len(batches) < MIN_BATCHES or not _all_hit(log_path, CLOSE_POINTS):
                assert time.monotonic() - t0 < 150, f"fault phase too slow: {fleet.sigkilled} kills"
                g = r.xinfo_groups(keys.records)[0]
                if (g.get("lag") or 0) + g["pending"] < 15 and len(batches) < 1000:
                    _push_round(prod, rng, 10, batches, 1)
                fleet.churn(p_kill=0.04)
            fleet.kill_all()
        fleet.finish_clean(r, keys)
    finally:
        for p in fleet.alive():
            os.kill(p.pid, signal.SIGKILL)

    with open(log_path) as f:
        points = [ln.strip() for ln in f]
    by_point = {pt: points.count(pt) for pt in POINTS + CLOSE_POINTS}
    stats = {k.decode(): int(float(v)) for k, v in r.hgetall(keys.stats).items() if not k.endswith(b"_ms")}
    releases = int(r.hget(keys.state, "releases"))
    # The clock read after the count: a window is released only once it has ended, so the count cannot exceed
    # the windows ended by then (a clock read before it missed the windows closed in between).
    released_at = time.time()
    print(
        f"\nwindow fault injection {release} eps={epsilon}: {len(batches)} batches, {fleet.sigkilled} SIGKILLs "
        f"{by_point}, {releases} windows released; counters {stats}"
    )
    assert fleet.sigkilled >= KILLS_TARGET and all(by_point[pt] > 0 for pt in CLOSE_POINTS), by_point
    # no window skipped or released twice: releases follow the clock (one per window, in order)
    start = float(r.hget(keys.state, "release_start"))
    assert releases <= math.floor((released_at - start) / every)
    assert stats.get("windows_released", 0) == releases
    assert r.xlen(keys.dead) == 0 and stats.get("lost_trimmed", 0) == 0
    merged = {m.decode() for m in r.zrange(keys.merged, 0, -1)}
    assert merged == set(batches)  # every batch in exactly one window (a zset member has one score)
    forest = Consumer(redis_url, model).latest()
    spec = load_spec(redis_url, model)
    if rate:  # the schedule is the pure rule folded over the stored releases, and the counts their merged sum
        _check_rate_windows(r, keys, spec, forest, releases, every)
        if math.isinf(epsilon):  # nothing lost, nothing counted twice (the left-out windows held no record)
            all_idx = np.concatenate(list(batches.values()))
            exact = PrivateForest(spec.schema, spec.structure, epsilon=math.inf).noisy_delta(
                DS.X[all_idx], DS.y[all_idx]
            )
            np.testing.assert_array_equal(forest.counts, exact)
        delete_model(redis_url, model)
        return
    assert forest.n_releases == releases and forest.version == releases
    all_idx = np.concatenate(list(batches.values()))
    exact = PrivateForest(spec.schema, spec.structure, epsilon=math.inf).noisy_delta(DS.X[all_idx], DS.y[all_idx])
    if release == "grow":  # the published forest is the last stored release; each grew the one before it
        stored = r.mget([Keys.of(r, keys.name).window_delta(w) for w in range(1, releases + 1)])
        assert all(s is not None for s in stored), "a released window has no stored release"
        chain = [PrivateForest.from_bytes(s) for s in stored]
        assert [f.n_releases for f in chain] == list(range(1, releases + 1))
        assert r.hget(keys.pub_model, "blob") == stored[-1]
        assert [f.height for f in chain] == sorted(f.height for f in chain) and chain[-1].height <= spec.height
        from streamdp.forest.growth import drawn_nodes

        def inner(f):  # the drawn nodes a release split (each release grew from the one before: a superset)
            d = drawn_nodes(f.structure, spec.structure, spec.schema.arities, spec.schema.is_categorical)
            t, i = np.nonzero((f.structure.leaf < 0) & (d >= 0))
            return set(zip(t.tolist(), d[t, i].tolist()))

        splits = [inner(f) for f in chain]
        assert all(a <= b for a, b in zip(splits, splits[1:]))
        assert all(np.array_equal(spec.holding(f).counts, f.counts) for f in chain)  # each cut from these trees
    elif math.isinf(epsilon):
        np.testing.assert_array_equal(forest.counts, exact)  # nothing lost, nothing counted twice
    else:  # the published counts are the sum of exactly one stored noised delta per window
        from streamdp.service.draw_once import noise_from_bytes

        stored = r.mget([Keys.of(r, keys.name).window_delta(w) for w in range(1, releases + 1)])
        assert all(s is not None for s in stored), "a released window has no stored noise"
        deltas = [noise_from_bytes(s, spec) for s in stored]
        np.testing.assert_array_equal(forest.counts, np.sum(deltas, axis=0))
        assert not np.array_equal(forest.counts, exact)
    delete_model(redis_url, model)
