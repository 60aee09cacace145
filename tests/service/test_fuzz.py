"""Fuzz the workers: >= 10^4 malformed entries become dead letters with reasons, workers survive,
and good batches interleaved with them are merged exactly (eps = inf: counts equal the tally).

Malformed entries: garbage bytes, msgpack that is not a map, wrong/missing
envelope fields, wrong types, unknown kinds, arrays with wrong dtypes /
shapes / sizes, NaN and infinities, out-of-range codes and labels, unknown
categories, records of the wrong type or length, huge batches (over the
per-entry limit), msgpack bombs (deep nesting, headers announcing billions
of elements, truncated data, ext types), entries without the ``d`` field,
and whole batches of invalid rows. Also "mixed" batches whose good rows
must be merged and bad rows dead-lettered.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import random
import re
import time
import uuid
from collections import Counter

import msgpack
import numpy as np
import pytest
import redis

from streamdp import blob
from streamdp.records.datasets import load
from streamdp.service import codec
from streamdp.service.consumer import Consumer
from streamdp.service.keys import GROUP, Keys
from streamdp.service.registry import create_model, delete_model, load_spec

# create_model(not_private=True)'s own NotPrivateWarning, expected here
pytestmark = [
    pytest.mark.filterwarnings("ignore:model .*NOT private:streamdp.privacy.secure_random.NotPrivateWarning"),
    pytest.mark.redis,
    pytest.mark.slow,
]

DS = load("congressional-voting")
SCHEMA = DS.schema
N_BAD = 10_000
GOOD_EVERY = 50
N_ATTR = SCHEMA.n_attributes


def _env(**doc) -> bytes:
    base = {"format": codec.FORMAT, "format_version": 1, "batch_id": uuid.uuid4().hex, "t": time.time()}
    base.update(doc)
    return msgpack.packb({k: v for k, v in base.items() if v is not _DROP}, use_bin_type=True)


_DROP = object()


def _arr(a) -> dict:
    return blob.pack_array(np.asarray(a))


def _codes(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    return rng.integers(0, 3, (n, N_ATTR)).astype("|u1"), rng.integers(0, 2, n).astype("|u1")


class Gen:
    """Malformed payloads, one category per method; each returns (fields, category)."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.py = random.Random(seed)

    def garbage(self):
        n = int(self.rng.integers(0, 300))
        return os.urandom(n)

    def not_a_map(self):
        return msgpack.packb(
            self.py.choice([1, -5, 3.5, "str", b"bytes", None, True, [1, 2], [], {1: 2}]), use_bin_type=True
        )

    def bad_envelope(self):
        c = self.py.randrange(9)
        X, y = _codes(5, self.rng)
        good = dict(kind="codes", X=_arr(X), y=_arr(y))
        if c == 0:
            return _env(format=_DROP, **good)
        if c == 1:
            return _env(format="other.format", **good)
        if c == 2:
            return _env(format_version=self.py.choice([0, 2, "1", None, 1.5]), **good)
        if c == 3:
            return _env(batch_id=_DROP, **good)
        if c == 4:
            return _env(
                batch_id=self.py.choice(["", "x" * 65, "bad id", "a/b", "{tag}", 123, None, b"raw", "é"]), **good
            )
        if c == 5:
            return _env(t=self.py.choice(["now", float("nan"), float("inf"), [1], True]), **good)
        if c == 6:
            return _env(kind=self.py.choice([_DROP, "rows", None, 7, "CODES"]), X=good["X"], y=good["y"])
        if c == 7:
            return _env(invalid=self.py.choice(["x", [1], [[1]], [["a", "b"]], [[True, "r"]], {"a": 1}]), **good)
        return msgpack.packb({1: 2, "format": codec.FORMAT}, use_bin_type=True)  # non-string key

    def bad_arrays(self):
        c = self.py.randrange(12)
        n = int(self.rng.integers(1, 20))
        X, y = _codes(n, self.rng)
        if c == 0:
            return _env(kind="codes", X=X.tobytes(), y=_arr(y))  # raw bytes, no array record
        if c == 1:
            return _env(
                kind="codes",
                X={
                    "dtype": self.py.choice(["|O", "<c16", "<f2", "<U4", "object", 5, "V8"]),
                    "shape": [n, N_ATTR],
                    "data": X.tobytes(),
                },
                y=_arr(y),
            )
        if c == 2:
            return _env(kind="codes", X={"dtype": "|u1", "shape": [n, N_ATTR + 1], "data": X.tobytes()}, y=_arr(y))
        if c == 3:
            return _env(kind="codes", X=_arr(X.reshape(-1)), y=_arr(y))  # 1-D
        if c == 4:
            return _env(kind="codes", X=_arr(X[:, :-1]), y=_arr(y))  # wrong column count
        if c == 5:
            return _env(kind="codes", X=_arr(X), y=_arr(np.r_[y, 1]))  # length mismatch
        if c == 6:
            return _env(kind="codes", X=_arr(X), y=_arr(y.astype("<f8")))  # float labels
        if c == 7:
            return _env(kind="codes", X={"dtype": "|u1", "shape": [n, -1], "data": X.tobytes()}, y=_arr(y))
        if c == 8:
            return _env(kind="codes", X={"dtype": "|u1", "shape": "big", "data": X.tobytes()}, y=_arr(y))
        if c == 9:  # NaN / inf in float codes
            Xf = X.astype("<f8")
            Xf[0, self.py.randrange(N_ATTR)] = self.py.choice([math.nan, math.inf, -math.inf])
            return _env(kind="codes", X=_arr(Xf), y=_arr(y))
        if c == 10:
            return _env(kind="codes", X=_arr(X.astype(bool)), y=_arr(y))
        return _env(kind="codes", X={"dtype": "|u1", "shape": [n, N_ATTR], "data": "text"}, y=_arr(y))

    def bad_rows(self):
        """Decodable entries in which every row is invalid: a dead letter, nothing merged."""
        c = self.py.randrange(6)
        n = int(self.rng.integers(1, 20))
        X, y = _codes(n, self.rng)
        if c == 0:
            X[:, self.py.randrange(N_ATTR)] = self.py.choice([3, 7, 255])  # code out of range
            return _env(kind="codes", X=_arr(X), y=_arr(y))
        if c == 1:
            return _env(kind="codes", X=_arr(X), y=_arr(np.full(n, self.py.choice([2, 9, 255]), "|u1")))
        if c == 2:
            Xi = X.astype("<i8")
            Xi[:, 0] = -1
            return _env(kind="codes", X=_arr(Xi), y=_arr(y))
        if c == 3:
            Xf = X.astype("<f8")
            Xf[:, 1] = 0.5  # non-integer code
            return _env(kind="codes", X=_arr(Xf), y=_arr(y))
        recs = [dict(zip(SCHEMA.names, row)) for row in DS.X[self.rng.integers(0, len(DS.y), n)]]
        if c == 4:  # unknown category / NaN / wrong type in one attribute of every record
            a = self.py.choice(SCHEMA.names)
            for r in recs:
                r[a] = self.py.choice(["maybe", math.nan, None, 3, [1], {"x": 1}, True, b"y"])
            return _env(kind="records", records=recs, labels=list(DS.y[:n]))
        # unknown labels, or records missing attributes
        if self.py.random() < 0.5:
            return _env(kind="records", records=recs, labels=[self.py.choice(["green", None, math.nan, 5])] * n)
        return _env(
            kind="records", records=[{k: v for k, v in list(r.items())[:-1]} for r in recs], labels=list(DS.y[:n])
        )

    def bad_records(self):
        c = self.py.randrange(6)
        if c == 0:
            return _env(kind="records", records="abc", labels=[])
        if c == 1:
            return _env(kind="records", records=[1, 2, 3], labels=["democrat"] * 3)
        if c == 2:
            return _env(kind="records", records=[["y"] * (N_ATTR - 1)], labels=["democrat"])
        if c == 3:
            return _env(kind="records", records=[{"a": 1}] * 2, labels=["democrat"])  # length mismatch
        if c == 4:
            return _env(kind="records", records=[{str(i): "y" for i in range(5)}], labels=[["democrat"]])
        return _env(kind="records", records=_DROP, labels=_DROP)

    def bomb(self):
        c = self.py.randrange(7)
        if c == 0:
            return b"\x91" * 100_000 + b"\xc0"  # 100k-deep nested arrays
        if c == 1:
            return b"\xdd\xff\xff\xff\xff"  # array32 announcing 4 billion elements, no data
        if c == 2:
            return b"\xdf\xff\xff\xff\xff" + b"\xa1a" * 10  # map32 announcing 4 billion pairs
        if c == 3:
            return b"\xc6\x7f\xff\xff\xff" + b"x" * 100  # bin32 announcing 2 GiB
        if c == 4:
            return msgpack.packb(msgpack.ExtType(5, os.urandom(30)))
        if c == 5:
            return _env(kind="codes", X={"dtype": "|u1", "shape": [1 << 40, N_ATTR], "data": b""}, y=_arr([0]))
        return _env(kind="records", records=[[]] * 50_000, labels=[0])  # big, mismatched

    def huge(self):
        """Over the per-entry record limit (codec.MAX_RECORDS)."""
        n = codec.MAX_RECORDS + 1
        return _env(kind="codes", X=_arr(np.zeros((n, N_ATTR), "|u1")), y=_arr(np.zeros(n, "|u1")))

    def no_d_field(self):
        return None  # the caller XADDs another field instead

    CATEGORIES = [
        ("garbage", 25),
        ("not_a_map", 8),
        ("bad_envelope", 15),
        ("bad_arrays", 20),
        ("bad_rows", 15),
        ("bad_records", 8),
        ("bomb", 6),
        ("no_d_field", 3),
    ]

    def any(self):
        name = self.py.choices([c for c, _ in self.CATEGORIES], [w for _, w in self.CATEGORIES])[0]
        return name, getattr(self, name)()


def _child(url: str, model: str) -> None:
    from streamdp.service.stream_worker import Worker

    # every dead letter kept (the default cap, 10,000, is about what this test pushes): the test counts them all
    worker = Worker(url, model, batch_entries=64, block_ms=50, claim_idle_ms=5000, dead_maxlen=1_000_000)
    worker.run(until_drained=True, max_seconds=150)
    os._exit(0)


@pytest.mark.parametrize("release", ["batch", "window"])
def test_fuzz_dead_letters_and_exact_good_batches(redis_url, unique_name, release):
    model = unique_name
    create_model(
        redis_url,
        model,
        SCHEMA,
        n_trees=3,
        height=4,
        epsilon=math.inf,
        seed=3,
        release=release,
        release_every=None if release == "batch" else 0.2,
        # windows of 0.2 to 1.6 s from the released rate: with the default longest window (minutes) the last
        # window, and the workers run until it is released, would outlast the test
        max_lag=None if release == "batch" else 1.6,
        not_private=True,
    )
    keys = Keys(model)
    r = redis.Redis.from_url(redis_url)
    seed = int.from_bytes(os.urandom(4), "little")
    gen = Gen(seed)
    rng = np.random.default_rng(seed)
    good_idx: list[np.ndarray] = []
    mixed_good: list[np.ndarray] = []
    cats: Counter = Counter()
    t0 = time.monotonic()
    n_bad = n_entries = 0
    pipe = r.pipeline(transaction=False)

    def flush():
        pipe.execute()

    for i in range(N_BAD):
        if i % GOOD_EVERY == 0:  # a good batch (producer-encoded codes)
            idx = rng.integers(0, len(DS.y), 20)
            good_idx.append(idx)
            pipe.xadd(keys.records, {"d": codec.encode_batch(SCHEMA, DS.X[idx], DS.y[idx])})
            n_entries += 1
        if i % 997 == 0:  # a mixed batch: its good rows are merged, its bad rows dead-lettered
            idx = rng.integers(0, len(DS.y), 10)
            recs = [dict(zip(SCHEMA.names, row)) for row in DS.X[idx]] + [{"handicapped-infants": "maybe"}]
            labels = list(DS.y[idx]) + ["democrat"]
            pipe.xadd(keys.records, {"d": codec.encode_records(recs, labels)})
            mixed_good.append(idx)
            n_entries += 1
            n_bad += 1
        cat, payload = gen.any()
        cats[cat] += 1
        if payload is None:
            pipe.xadd(keys.records, {"x": os.urandom(8), "data": b"no d"})
        else:
            pipe.xadd(keys.records, {"d": payload})
        n_entries += 1
        n_bad += 1
        if len(pipe) >= 500:
            flush()
    for _ in range(2):  # huge batches
        cats["huge"] += 1
        pipe.xadd(keys.records, {"d": gen.huge()})
        n_entries += 1
        n_bad += 1
        flush()
    flush()
    t_push = time.monotonic() - t0

    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_child, args=(redis_url, model), daemon=True) for _ in range(2)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + 110
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        p.kill()
    assert not alive, "workers did not drain the fuzzed stream in time"
    assert [p.exitcode for p in procs] == [0, 0], "a worker died on input"

    g = next(g for g in r.xinfo_groups(keys.records) if g["name"].decode() == GROUP)
    assert g["pending"] == 0

    dead = r.xrange(keys.dead)
    reasons = Counter()
    for _id, f in dead:
        reason = f[b"reason"].decode()
        assert reason.strip(), f"dead letter without a reason: {f}"
        assert "internal" not in reason, f"codec bug (unexpected exception) on input: {reason}"
        reasons[re.sub(r"\d+", "N", reason)[:45]] += 1
    print(
        f"\nfuzz seed={seed}: {n_bad} malformed of {n_entries} entries in {t_push:.1f}s push + "
        f"{time.monotonic() - t0 - t_push:.1f}s work; categories {dict(cats)}; "
        f"dead-letter reasons {reasons.most_common(12)}"
    )
    assert len(dead) == n_bad, f"{n_bad} malformed entries but {len(dead)} dead letters"
    assert n_bad >= 10_000

    if release == "window":  # release the window holding the last entries (every window is released, in order)
        from streamdp.service.stream_worker import Worker

        closer = Worker(redis_url, model, block_ms=10).closer
        last = int(r.hget(keys.state, "open"))
        deadline = time.monotonic() + 30
        while int(r.hget(keys.state, "releases")) < last:
            assert time.monotonic() < deadline, "the last window was not released"
            closer.tick()
            time.sleep(0.02)  # bounded wait for the schedule's next window end
        assert r.zcard(keys.merged) == len(good_idx) + len(mixed_good)
    forest = Consumer(redis_url, model).latest()
    all_idx = np.concatenate(good_idx + mixed_good)
    exact = load_spec(redis_url, model).noisy_delta(DS.X[all_idx], DS.y[all_idx])
    np.testing.assert_array_equal(forest.counts, exact)
    if release == "batch":
        assert forest.n_releases == len(good_idx) + len(mixed_good)
    else:
        # every due window released; the published model merges those that carry records (the cadence leaves
        # out the releases that cannot be told from an empty one's), and its counts are exact (above)
        assert (
            1 <= forest.n_releases <= int(r.hget(keys.state, "releases"))
            and int(r.hget(keys.state, "releases")) >= last
        )
    delete_model(redis_url, model)
