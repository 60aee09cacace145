"""A stream model whose unit is a person (fakeredis): at most K records per id over the whole stream, exactly
once, ids stored only as keyed hashes, noise per person."""

from __future__ import annotations

import json
import logging
import math
import os

import numpy as np
import pytest

fakeredis = pytest.importorskip("fakeredis")
pytest.importorskip("lupa")

from streamdp.estimation import cell_variance  # noqa: E402
from streamdp.forest.model import PrivateForest  # noqa: E402
from streamdp.records.datasets import load  # noqa: E402
from streamdp.service.keys import Keys  # noqa: E402
from streamdp.service.ledger_store import RedisLedger  # noqa: E402
from streamdp.service.merging import WorkerEntry  # noqa: E402
from streamdp.service.pool import EXIT_REFUSED, _child  # noqa: E402
from streamdp.service.producer import Producer  # noqa: E402
from streamdp.service.published import counts_from_bytes  # noqa: E402
from streamdp.service.registry import create_model, list_models, load_policy, show_model  # noqa: E402
from streamdp.service.rollback import NoiseKeyMismatch, NoNoiseKey  # noqa: E402
from streamdp.service.stats import collect, prometheus_text, public  # noqa: E402
from streamdp.service.stream_worker import Worker, preflight  # noqa: E402
from streamdp.service.units import Unit, choose, hash_ids, id_key  # noqa: E402

# create_model(not_private=True)'s own NotPrivateWarning, expected here
pytestmark = pytest.mark.filterwarnings("ignore:model .*NOT private:streamdp.privacy.secure_random.NotPrivateWarning")

DS = load("congressional-voting")
EVERY = 10.0


def _model(r, k=2, epsilon=math.inf, key_file=None, **kw):
    kw.setdefault("n_trees", 3)
    kw.setdefault("height", 3)
    kw.setdefault("seed", 1)
    # the clock's windows, every release merged: the tests tick the clock
    spec = create_model(
        r, "m", DS.schema, epsilon=epsilon, release="window", release_every=EVERY, privacy_id="user",
        max_records_per_id=k, noise_key_file=key_file, cadence="fixed", **kw, not_private=math.isinf(epsilon),
    )  # fmt: skip
    return spec


def _worker(r, key_file, **kw):
    return Worker(r, "m", block_ms=1, noise_key_file=key_file, **kw)


def _add_all(w, limit=1000):
    for _ in range(limit):
        entries = w.reader.read(w.config.batch_entries, 1)
        if not entries:
            return
        es = [WorkerEntry(e.id, e.fields, e.deliveries) for e in entries]
        for e in es:
            w._decode(e)
        merge = {e.batch.batch_id: e for e in es if e.batch is not None and len(e.batch.y)}
        w.merger.merge(merge, [e for e in es if e.batch is None or not len(e.batch.y)])


def _at(r, k):
    return load_policy(r, "m")[1] + k * EVERY + 0.001


def _published(r, spec):
    return counts_from_bytes(r.hget(Keys("m").pub_model, "counts"), spec)


def _exact(spec, idx):
    return PrivateForest(spec.schema, spec.structure, epsilon=math.inf).noisy_delta(DS.X[idx], DS.y[idx])


def _first_k(ids, k):
    """Positions of each id's first k records, in order (what one worker merging in push order keeps)."""
    seen: dict = {}
    out = []
    for i, v in enumerate(ids):
        seen[v] = seen.get(v, 0) + 1
        if seen[v] <= k:
            out.append(i)
    return np.array(out, dtype=np.int64)


def test_contributions_beyond_k_never_reach_a_count_over_windows_and_retries(r, key_file):
    spec = _model(r, k=2, key_file=key_file)
    w = _worker(r, key_file)
    p = Producer(r, "m")
    rng = np.random.default_rng(0)
    all_idx, all_ids = [], []
    for window in range(1, 5):  # people come back in every window; a retried XADD in each
        idx = rng.integers(0, len(DS.y), 30)
        ids = [f"user-{int(v)}" for v in rng.integers(0, 12, 30)]
        bid = f"b{window}"
        p.push(DS.X[idx], DS.y[idx], ids=ids, batch_id=bid)
        p.push(DS.X[idx], DS.y[idx], ids=ids, batch_id=bid)  # the same batch again: merged once
        all_idx.append(idx)
        all_ids += ids
        _add_all(w)
        assert w.closer.tick(_at(r, window)) == 1
    idx = np.concatenate(all_idx)
    kept = _first_k(all_ids, 2)
    np.testing.assert_array_equal(_published(r, spec), _exact(spec, idx[kept]))
    counts = r.hgetall(Keys("m").ids)
    assert sorted(int(c) for c in counts.values()) == sorted(min(all_ids.count(u), 2) for u in set(all_ids))
    assert all(len(h) == 16 for h in counts)
    stats = collect(r, "m")  # every record past K counted once, the re-pushed batches included
    assert stats["records_dropped_over_k"] == len(all_ids) - len(kept)
    assert stats["records_dropped_over_max_ids"] == 0
    assert "records_dropped_over_k" not in public(stats)  # EXACT: never exported by default, never served
    assert "records_dropped_over_k" not in prometheus_text({"m": stats})
    assert "records_dropped_over_k" in prometheus_text({"m": stats}, exact=True)
    for key in r.keys("*"):  # no raw id anywhere in Redis but the records stream itself
        if key == Keys("m").records.encode():
            continue
        dump = r.dump(key) or b""
        assert b"user-" not in dump and b"user-" not in key, key


def test_a_person_counted_by_two_workers_racing_is_counted_once(r, key_file):
    """Worker B merges a batch of the same people while worker A is between reading the ids' counts and its
    add: A's add finds the counts moved, writes nothing, and chooses again; no id passes K."""
    spec = _model(r, k=3, key_file=key_file)
    a, b = _worker(r, key_file), _worker(r, key_file)
    p = Producer(r, "m")
    ids = ["ann", "bob"] * 10
    p.push(DS.X[:20], DS.y[:20], ids=ids, batch_id="first")
    raced = []

    def race(point):
        if point == "before_commit" and not raced:
            raced.append(1)
            p.push(DS.X[20:40], DS.y[20:40], ids=ids, batch_id="second")
            _add_all(b)

    a.merger.fault = race
    _add_all(a)
    _add_all(b)
    assert raced and {int(c) for c in r.hgetall(Keys("m").ids).values()} == {3}
    a.closer.tick(_at(r, 1))
    pub = _published(r, spec)
    assert int(pub[0].sum()) == 6  # tree 0: 3 records of each of the two people


def test_a_worker_killed_after_its_add_is_not_counted_twice(r, key_file):
    """The add ran (counts and tally in one script), then the worker died before it knew: the entries are
    claimed by another worker and acknowledged as merged, the ids' counts unchanged."""

    class Died(Exception):
        pass

    def die(point):
        if point == "in_commit":
            raise Died(point)

    spec = _model(r, k=5, key_file=key_file)
    a = _worker(r, key_file, faults=die)
    p = Producer(r, "m")
    ids = [f"u{i % 4}" for i in range(40)]
    p.push(DS.X[:40], DS.y[:40], ids=ids, batch_id="x")
    with pytest.raises(Died):
        _add_all(a)
    before = r.hgetall(Keys("m").ids)
    b = _worker(r, key_file, claim_idle_ms=0)
    for _ in range(3):
        b.step()
    assert r.hgetall(Keys("m").ids) == before and {int(v) for v in before.values()} == {5}
    assert collect(r, "m")["records_dropped_over_k"] == 20  # counted by the add that ran, not again
    b.closer.tick(_at(r, 1))
    np.testing.assert_array_equal(_published(r, spec), _exact(spec, _first_k(ids, 5)))


def test_the_noise_is_per_person_and_the_ledger_charged_per_person(r, key_file):
    spec = _model(r, k=4, epsilon=2.0, n_trees=10, height=5, key_file=key_file)
    assert spec.epsilon == 0.5  # the noise per record: epsilon / K
    assert RedisLedger(r).spent("m")[0] == 2.0
    info = show_model(r, "m")
    assert info["unit"] == {"privacy_id": "user", "max_records_per_id": 4, "max_ids": 10_000_000}
    assert info["epsilon"] == 2.0 and info["epsilon_per_record"] == 0.5
    w = _worker(r, key_file)
    p = Producer(r, "m")
    rng = np.random.default_rng(1)
    diffs, prev = [], np.zeros(spec.shape, np.int64)
    for k in range(1, 7):
        idx = rng.integers(0, len(DS.y), 40)
        p.push(DS.X[idx], DS.y[idx], ids=[f"w{k}-{i}" for i in range(40)])
        _add_all(w)
        w.closer.tick(_at(r, k))
        pub = _published(r, spec)
        diffs.append((pub - prev - _exact(spec, idx))[spec.real_cells])
        prev = pub
    d = np.concatenate(diffs).astype(float)
    expected = cell_variance("geometric", 2.0 / 4 / 10)
    assert 0.75 < d.var() / expected < 1.25, (d.var(), expected)


def test_model_show_states_the_noise_per_cell_at_the_per_record_epsilon(r, key_file):
    """``model show``'s noise per cell (and the merge bar built on it) was computed at the per-person epsilon,
    K times the one the releases draw at: read against the worker's own scale."""
    _model(r, k=4, epsilon=2.0, key_file=key_file)
    w = _worker(r, key_file)
    info = show_model(r, "m")
    assert info["cell_sd"] ** 2 == pytest.approx(w.closer._release_variance())


def test_hostile_ids_and_batches_without_ids(r, key_file):
    spec = _model(r, k=1, key_file=key_file)
    w = _worker(r, key_file)
    p = Producer(r, "m", on_invalid="dead-letter")
    ids = [b"\xff\xfe", b"\xff\xfe", "x" * 5000, "ok", "", "\u00e9t\u00e9"]
    p.push(DS.X[:6], DS.y[:6], ids=ids, batch_id="h")
    p.push(DS.X[6:9], DS.y[6:9], batch_id="none")  # no ids at all: dead-lettered whole
    _add_all(w)
    w.closer.tick(_at(r, 1))
    np.testing.assert_array_equal(_published(r, spec), _exact(spec, np.array([0, 3, 5])))
    assert r.xlen(Keys("m").dead) == 2


def test_a_batch_without_ids_pushed_again_is_dead_lettered_once(r, key_file, caplog):
    """A batch refused whole (no privacy ids) was dead-lettered at every re-push: its batch id is known, so its
    letter is written once, as a batch's refused rows are; the worker's warning follows the letter (once), a
    re-push only says at INFO that it was recorded before."""
    _model(r, k=1, key_file=key_file)
    w = _worker(r, key_file)
    p = Producer(r, "m", on_invalid="dead-letter")
    with caplog.at_level(logging.WARNING, logger="streamdp"):
        for _ in range(3):  # the same file pushed three times
            p.push(DS.X[6:9], DS.y[6:9], batch_id="none")
            while w.step(block_ms=1):
                pass
    assert r.xlen(Keys("m").dead) == 1
    assert r.zcard(Keys("m").dead_batches) == 1
    lines = [json.loads(m.getMessage()) for m in caplog.records if m.getMessage().startswith("{")]
    assert [ln["event"] for ln in lines if ln["event"].startswith("worker.dead_letter")] == ["worker.dead_letter"]


def test_new_ids_past_the_bound_are_refused():
    unit = Unit("user", 2, max_ids=3)
    h = [bytes([i]) * 16 for i in range(5)]
    keep, changed, n = choose([h[0], h[1], h[2], h[3], h[0], h[4], h[0], h[3]], {}, 0, unit)
    assert keep.tolist() == [True, True, True, False, True, False, False, False] and n == 3
    keep, changed, n = choose([h[1], h[4]], {h[1]: 1}, 3, unit)  # a kept id goes on; a new one is refused
    assert keep.tolist() == [True, False] and changed == {h[1]: 2}


def test_a_million_distinct_ids_in_one_batch_are_hashed_and_chosen():
    key = id_key(b"k" * 32, "model")
    ids = [f"id{i}" for i in range(1_000_000)]
    hs = hash_ids(key, ids)
    assert len(set(hs)) == 1_000_000
    keep, changed, n = choose(hs, {}, 0, Unit("user", 1, max_ids=2_000_000))
    assert keep.all() and n == 1_000_000 and len(changed) == 1_000_000


def test_the_unit_is_declared_and_checked_at_create(r, key_file):
    with pytest.raises(ValueError, match="k-anonymity"):
        create_model(r, "k", DS.schema, mechanism="kanon", k=5, beta=0.1, privacy_id="user", max_records_per_id=2)
    with pytest.raises(ValueError, match="schema attribute or the label"):
        create_model(r, "a", DS.schema, privacy_id=DS.schema.names[0], max_records_per_id=2)
    with pytest.raises(ValueError, match="privacy_id needs max_records_per_id"):
        create_model(r, "n", DS.schema, privacy_id="user")
    create_model(r, "plain", DS.schema, n_trees=2, height=2, epsilon=1.0)
    assert "unit" not in show_model(r, "plain")
    _model(r, key_file=key_file)
    with pytest.raises(NoNoiseKey, match="STREAMDP_NOISE_KEY_FILE"):
        Worker(r, "m", block_ms=1, noise_key_file=None)


def test_a_person_model_is_refused_without_a_noise_key_before_anything_is_charged(r, key_file, monkeypatch):
    monkeypatch.delenv("STREAMDP_NOISE_KEY_FILE", raising=False)
    with pytest.raises(
        ValueError, match=r"head -c 32 /dev/urandom > noise.key && chmod 600 noise.key; export STREAMDP_NOISE_KEY_FILE="
    ):
        _model(r, epsilon=1.0)
    assert RedisLedger(r).spent("m")[0] == 0.0 and "m" not in list_models(r) and not r.keys("*")
    _model(r, epsilon=1.0, key_file=key_file)  # the same name, once the key is there: charged once
    assert RedisLedger(r).spent("m")[0] == 1.0
    preflight(r, "m", key_file)  # what every worker process checks at start, checked once by `streamdp worker`
    with pytest.raises(NoNoiseKey, match="export STREAMDP_NOISE_KEY_FILE"):
        preflight(r, "m", None)
    other = key_file + ".other"
    with open(other, "wb") as fh:
        fh.write(bytes(range(1, 65)))
    os.chmod(other, 0o600)
    with pytest.raises(NoiseKeyMismatch, match="refusing to draw noise"):
        preflight(r, "m", other)


def test_a_stream_model_keeps_at_most_max_ids_persons(r, key_file):
    spec = _model(r, k=10, key_file=key_file, max_ids=3)
    w = _worker(r, key_file)
    p = Producer(r, "m")
    ids = ["a", "b", "a", "c", "d", "e", "b", "d"]
    p.push(DS.X[:5], DS.y[:5], ids=ids[:5])
    p.push(DS.X[5:8], DS.y[5:8], ids=ids[5:])
    _add_all(w)
    w.closer.tick(_at(r, 1))
    assert r.hlen(Keys("m").ids) == 3  # a, b, c; d and e came after the bound
    np.testing.assert_array_equal(_published(r, spec), _exact(spec, np.array([0, 1, 2, 3, 6])))
    assert show_model(r, "m")["unit"]["max_ids"] == 3
    stats = collect(r, "m")
    assert (stats["records_dropped_over_max_ids"], stats["records_dropped_over_k"]) == (3, 0)  # d, e, d


def _choose_one_by_one(hashes, counts, n_ids, unit):
    """The rule record by record, as the docstring states it (the reference for the vectorised choose)."""
    now, ids_now, keep = {}, n_ids, []
    for h in hashes:
        c = now.get(h, counts.get(h, 0))
        if h not in now and c == 0:
            if ids_now >= unit.max_ids:
                keep.append(False)
                continue
            ids_now += 1
        keep.append(c < unit.max_records_per_id)
        now[h] = c + 1 if keep[-1] else c
    return keep, {h: c for h, c in now.items() if c != counts.get(h, 0)}, ids_now


def test_the_vectorised_choice_is_the_rule_record_by_record():
    rng = np.random.default_rng(7)
    for _ in range(200):
        pool = [bytes([i]) * 16 for i in range(int(rng.integers(1, 12)))]
        hashes = [pool[int(i)] for i in rng.integers(0, len(pool), int(rng.integers(0, 40)))]
        counts = {h: int(rng.integers(1, 5)) for h in pool if rng.random() < 0.4}
        unit = Unit("user", int(rng.integers(1, 5)), max_ids=int(rng.integers(1, 15)))
        n_ids = int(rng.integers(len(counts), len(counts) + 4))
        keep, changed, n = choose(hashes, counts, n_ids, unit)
        assert (keep.tolist(), changed, n) == _choose_one_by_one(hashes, counts, n_ids, unit)


def test_a_stale_view_of_the_counts_is_corrected_by_the_add_script(r, key_file):
    """A worker whose view of the counts is behind (another worker merged the same people since) gets the
    current counts back from the script and chooses again: nobody passes K."""
    _model(r, k=2, key_file=key_file)
    a, b = _worker(r, key_file), _worker(r, key_file)
    p = Producer(r, "m")
    p.push(DS.X[:4], DS.y[:4], ids=["ann", "bob", "ann", "cy"], batch_id="one")
    _add_all(a)  # a's view: ann 2, bob 1, cy 1
    p.push(DS.X[4:8], DS.y[4:8], ids=["bob", "cy", "cy", "dan"], batch_id="two")
    _add_all(b)  # b's view is empty: refused once with the counts, then keeps bob, one of cy's, dan
    p.push(DS.X[8:12], DS.y[8:12], ids=["bob", "cy", "dan", "ann"], batch_id="three")
    _add_all(a)  # a's view of bob and cy is behind: refused, then only dan's record kept
    stored = {k: int(v) for k, v in r.hgetall(Keys("m").ids).items()}
    assert sorted(stored.values()) == [2, 2, 2, 2]
    assert int(r.hget(Keys("m").stats, "records_merged")) == 8


def test_a_worker_process_without_the_key_logs_one_line_and_exits_non_zero(r, key_file, caplog, monkeypatch):
    monkeypatch.delenv("STREAMDP_NOISE_KEY_FILE", raising=False)
    _model(r, key_file=key_file)
    with caplog.at_level(logging.ERROR, logger="streamdp.worker"), pytest.raises(SystemExit) as e:
        _child(r, "m", {"noise_key_file": None, "block_ms": 1}, True, logging.WARNING)  # a pool's process
    assert e.value.code == EXIT_REFUSED
    got = [json.loads(x.getMessage()) for x in caplog.records if "worker.refused" in x.getMessage()]
    assert len(got) == 1 and got[0]["error"] == "NoNoiseKey" and "export STREAMDP_NOISE_KEY_FILE" in got[0]["reason"]
    assert not any(x.exc_info for x in caplog.records)
