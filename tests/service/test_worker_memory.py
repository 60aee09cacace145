"""A window release holds one counts-sized array (the noised tally, which becomes the counts), a batch commit the
sum of its noised deltas and the one being drawn, not several counts-sized copies; neither holds counts between. Deterministic: tracemalloc's peak over one step of a worker, on a real Redis (which holds what is
stored out of this process; fakeredis would count its own copies)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import redis

from streamdp.records.schema import Schema  # noqa: E402
from streamdp.release import continual
from streamdp.service.keys import Keys  # noqa: E402
from streamdp.service.producer import Producer  # noqa: E402
from streamdp.service.registry import create_model, delete_model, load_policy  # noqa: E402
from streamdp.service.stream_worker import Worker  # noqa: E402

# create_model(not_private=True)'s own NotPrivateWarning, expected here
pytestmark = pytest.mark.filterwarnings("ignore:model .*NOT private:streamdp.privacy.secure_random.NotPrivateWarning")

ARITIES = [3, 4, 5] * 3


def _schema() -> Schema:
    return Schema.from_dict(
        {
            "attributes": [
                {"name": f"a{j}", "type": "categorical", "values": list(range(a))} for j, a in enumerate(ARITIES)
            ],
            "label": {"name": "y", "values": [0, 1]},
        }
    )


@pytest.fixture
def r(redis_url, unique_name):
    """A client of the test's Redis; the model ``unique_name`` and its ledger are deleted afterwards."""
    client = redis.Redis.from_url(redis_url)
    yield client
    delete_model(client, unique_name)
    for k in client.scan_iter(match=f"{Keys(unique_name).prefix}:ledger*"):
        client.delete(k)


def _exact_model(redis_url: str, name: str):
    """An exact (epsilon inf, tests only) model of :func:`_schema`, 4 trees of height 8, hourly windows."""
    return create_model(
        redis_url,
        name,
        _schema(),
        n_trees=4,
        height=8,
        epsilon=float("inf"),
        seed=3,
        release_every=3600.0,
        not_private=True,
    )


def _peak_above(fn) -> int:
    """Bytes allocated at the peak of ``fn()`` above what was allocated before it."""
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("release", ["window", "batch"])
def test_a_release_holds_the_counts_and_one_noised_tally(release, r, redis_url, unique_name):
    _release(r, redis_url, unique_name, release)


def _release(r: redis.Redis, url: str, name: str, release: str) -> None:
    spec = create_model(
        url,
        name,
        _schema(),
        n_trees=4,
        height=8,
        epsilon=1.0,
        seed=3,
        release=release,
        release_every=None if release == "batch" else 3600.0,
    )
    counts = spec.counts.nbytes
    blob = len(spec.to_bytes())
    assert counts > 4 << 20  # large enough for the fixed costs not to matter
    assert spec.counts.size > 8 * continual.NOISE_BLOCK  # noised block by block
    w = Worker(url, name, block_ms=1, batch_entries=4)
    rng = np.random.default_rng(0)
    p = Producer(url, name)

    def push(k: int) -> None:
        for _ in range(k):
            p.push(np.column_stack([rng.integers(a, size=2000) for a in ARITIES]), rng.integers(2, size=2000))

    push(1)
    w.step(block_ms=1)  # routing tables built, counts held (window: tallied into window 1; batch: version 1)
    push(3)
    if release == "window":
        w.step(block_ms=1)  # the entries' exact tallies go into window 1's accumulator
        assert w.step(block_ms=1) == 0
        # closing window 1: the accumulator, the noise (stored first), the new counts, blob, record
        peak = _peak_above(lambda: w.closer.tick(load_policy(r, name)[1] + 3600.0 + 0.001))
    else:
        peak = _peak_above(lambda: w.step(block_ms=1))  # three batches: three deltas drawn, one commit
    assert int(r.hget(Keys(name).pub_model, "version")) == (1 if release == "window" else 2)
    # No blob is built (pub:model holds counts on the spec); a window close noises the fresh tally in place,
    # stores it as its own bytes and adds the published counts into it a part at a time (none before version 1):
    # one counts-sized array and a noise block's temporaries; a batch commit sums its batches' noised deltas
    # (the first is the sum), then adds the published counts into the sum the same way: the sum and the delta
    # being drawn. (plus a fixed allowance: the close's first call imports and caches small objects, tens of KiB)
    assert peak < (1.6 if release == "window" else 2.7) * counts + (64 << 10), (peak / counts, blob / counts)


def test_packb_keeps_no_reference_to_what_it_packed():
    """Packb's placeholder table used to live in a reference cycle: every packed array (a delta, the counts)
    stayed alive until the garbage collector ran, several counts-sized arrays at once in a worker."""
    import gc
    import sys

    from streamdp import blob

    a = np.zeros(1 << 17)
    before = sys.getrefcount(a)
    was = gc.isenabled()
    gc.disable()
    try:
        data = blob.packb(blob.pack_array(a))
        assert sys.getrefcount(a) == before
    finally:
        if was:
            gc.enable()
    assert np.array_equal(blob.unpack_array(blob.loads(blob.dumps("t", 1, {"a": blob.pack_array(a)}), "t", 1)["a"]), a)
    assert len(data) > a.nbytes


def test_a_large_spec_is_read_in_parts(monkeypatch, r, redis_url, unique_name):
    from streamdp.service import model_store as registry

    spec = create_model(redis_url, unique_name, _schema(), n_trees=2, height=5, seed=4)
    size = r.strlen(Keys(unique_name).spec)
    monkeypatch.setattr(registry, "SPEC_READ_PART", size // 7 + 1)  # 7 parts, the last one short
    got = registry.load_spec(redis_url, unique_name)
    assert got.structure.n_leaves.tolist() == spec.structure.n_leaves.tolist()
    assert all(np.array_equal(a, b) for a, b in zip(got.structure.arrays().values(), spec.structure.arrays().values()))
    assert got.counts.shape == spec.counts.shape and not got.counts.any()


def test_a_busy_windows_adds_are_read_a_group_at_a_time(r, redis_url, unique_name):
    """A window whose adds hold three times the counts' bytes: the close reads them a group of at most
    READ_BYTES at a time into the exact counts, so its peak is the counts once (the tally, noised in place into
    the release) and one group as redis-py reads it (its buffer, the reply, the reply's slice), not the adds
    beside them; the released counts hold every add."""
    from streamdp.service.accumulator import READ_BYTES, joined_cells

    spec = _exact_model(redis_url, unique_name)
    counts = spec.counts.nbytes
    w = Worker(redis_url, unique_name, block_ms=1)
    keys = Keys(unique_name)
    rng = np.random.default_rng(1)
    real = np.flatnonzero(spec.real_cells.reshape(-1))
    want = np.zeros(spec.counts.size, np.int64)
    pairs = READ_BYTES // 16 // 2  # two adds to a group
    for i in range(3 * counts // (16 * pairs) + 1):
        idx = rng.choice(real, size=pairs)
        np.add.at(want, idx, 1)
        r.hset(keys.acc(1), f"b:{i}", joined_cells([(idx, np.ones(pairs, np.int64))]))
    assert r.memory_usage(keys.acc(1)) > 3 * counts
    peak = _peak_above(lambda: w.closer.tick(load_policy(r, unique_name)[1] + 3600.0 + 0.001))
    assert int(r.hget(keys.pub_model, "version")) == 1
    from streamdp.service.consumer import Consumer

    got = Consumer(redis_url, unique_name).latest().counts.reshape(-1)
    assert np.array_equal(got, want)  # (epsilon inf: the released counts are the adds' sum)
    assert peak < counts + 3 * READ_BYTES + (512 << 10), peak / counts


def test_a_closer_adds_the_published_counts_a_part_at_a_time(monkeypatch, r, redis_url, unique_name):
    """Worker B released window 1, then worker A window 2, then B closes window 3: it holds no counts from its
    own release, and adds the published ones into its noised tally a part at a time from the retained version
    (not one HGET, which made redis-py hold the value three times over): at its peak it holds that one
    counts-sized array and a noise block's temporaries."""
    from streamdp.service import model_store
    from streamdp.service.consumer import Consumer

    monkeypatch.setattr(model_store, "COUNTS_READ_PART", 256 << 10)
    spec = _exact_model(redis_url, unique_name)
    counts = spec.counts.nbytes
    a, b = (Worker(redis_url, unique_name, block_ms=1, batch_entries=4) for _ in range(2))
    rng = np.random.default_rng(0)
    p = Producer(redis_url, unique_name)
    start = load_policy(r, unique_name)[1]
    X = [np.column_stack([rng.integers(k, size=3000) for k in ARITIES]) for _ in range(3)]
    y = [rng.integers(2, size=3000) for _ in range(3)]
    for w in (a, b):
        w.spec.structure.router()  # (built at a worker's first step: held whatever the closes do)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i, w in enumerate((b, a, b)):  # window i + 1 released by B, A, then B again
            p.push(X[i], y[i])
            w.step(block_ms=1)
            if i == 2:
                tracemalloc.reset_peak()
            assert w.closer.tick(start + 3600.0 * (i + 1) + 0.001) == 1
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert int(r.hget(Keys(unique_name).pub_model, "version")) == 3
    got = Consumer(redis_url, unique_name).latest().counts
    assert np.array_equal(got, spec.tally_encoded(np.vstack(X), np.concatenate(y)))  # (epsilon inf: exact)
    # the tally (noised, then the counts), a noise block's temporaries or three parts as redis-py reads one
    assert peak < counts + 24 * continual.NOISE_BLOCK, peak / counts


def test_a_grow_close_holds_the_tally_and_the_grown_release_and_nothing_between(r, redis_url, unique_name):
    """``release="grow"`` on Adult at the budgeted draw (height None): past the first close (its imports and small
    caches), a close's peak above what the worker held is the window's exact tally on the drawn trees (the counts'
    size, as a ``window`` close's) and a small multiple of the grown release (the published one read back, the new
    one, their node arrays and the blob), and the closer holds nothing of them afterwards."""
    from streamdp.forest.model import PrivateForest
    from streamdp.records.datasets import load

    adult = load("adult")
    spec = create_model(redis_url, unique_name, adult.schema, seed=7, release="grow", release_every=3600.0)
    drawn_counts = spec.counts.nbytes
    del spec
    w = Worker(redis_url, unique_name, block_ms=1, batch_entries=8)
    p = Producer(redis_url, unique_name)
    start = load_policy(r, unique_name)[1]
    at = 0
    for i, n in enumerate((2000, 10000, 10000), start=1):
        p.push(adult.X[at : at + n], adult.y[at : at + n])
        at += n
        while w.step(block_ms=1):
            pass
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            assert w.closer.tick(start + 3600.0 * i + 0.001) == 1
            held, peak = (x - base for x in tracemalloc.get_traced_memory())
        finally:
            tracemalloc.stop()
        grown = PrivateForest.from_bytes(r.hget(Keys(unique_name).pub_model, "blob")).counts.nbytes
        if i > 1:
            assert peak < drawn_counts + 12 * grown + (1 << 20), ((peak - drawn_counts) / grown, grown)
            assert held < grown // 4 + (64 << 10), held / grown
