"""Producers on fakeredis: coding from the registry summary, batch ids, value-free dead letters."""

from __future__ import annotations

import math

import msgpack
import numpy as np
import pytest

fakeredis = pytest.importorskip("fakeredis")
pytest.importorskip("lupa")

from streamdp.service.consumer import Consumer  # noqa: E402
from streamdp.service.keys import Keys  # noqa: E402
from streamdp.service.producer import Producer  # noqa: E402
from streamdp.service.registry import ModelNotFound, delete_model, list_models, show_model  # noqa: E402
from streamdp.service.stats import collect  # noqa: E402
from tests.service.conftest import DS, _drain, _model, _worker  # noqa: E402


def test_a_producer_codes_from_the_registry_summary_without_reading_the_spec(r):
    """The spec holds the structure (gigabytes at height 10): a producer needs the schema and the batch-id salt
    only, stored in the registry summary at creation. A model created before falls back to the spec, with the
    same schema and salt (so the same batch ids: a duplicate push across the upgrade is still recognised)."""
    import json

    from streamdp.service.registry import PRODUCER_FIELDS, REGISTRY

    _model(r)
    spec = r.get(Keys("m").spec)
    r.delete(Keys("m").spec)
    p = Producer(r, "m")  # would raise ModelNotFound if it read the spec
    r.set(Keys("m").spec, spec)
    info = json.loads(r.hget(REGISTRY, "m"))
    r.hset(REGISTRY, "m", json.dumps({k: v for k, v in info.items() if k not in PRODUCER_FIELDS}))
    old = Producer(r, "m")
    assert p.schema.to_dict() == old.schema.to_dict() == DS.schema.to_dict() and p._salt == old._salt
    p.push(DS.X[:10], DS.y[:10])
    old.push(DS.X[:10], DS.y[:10])
    assert p.last_batch_ids == old.last_batch_ids
    assert not set(PRODUCER_FIELDS) & set(list_models(r)["m"]) and not set(PRODUCER_FIELDS) & set(show_model(r, "m"))


def test_a_push_to_a_deleted_model_is_refused_and_makes_no_stream(r):
    _model(r)
    p = Producer(r, "m")
    delete_model(r, "m")
    with pytest.raises(ModelNotFound, match="no record stream"):
        p.push(DS.X[:10], DS.y[:10])
    assert not r.exists(Keys("m").records)  # raw records no worker would ever read or trim


# -- idempotent producers ------------------------------------------------------------
def test_pushing_the_same_records_twice_merges_them_once(r):
    _model(r, epsilon=math.inf)
    p = Producer(r, "m", batch_size=40)
    first = p.push(DS.X[:300], DS.y[:300])
    ids = list(p.last_batch_ids)
    assert len(first) == 8 and len(set(ids)) == 8 and all(len(b) == 64 for b in ids)
    Producer(r, "m", batch_size=40).push(DS.X[:300], DS.y[:300])  # a second push (another process)
    assert p.last_batch_ids == ids
    p.push(DS.X[:300], DS.y[:300], source="day-2")  # genuinely new records with the same content
    assert not set(p.last_batch_ids) & set(ids)
    Producer(r, "m", batch_size=40, dedup=False).push(DS.X[:40], DS.y[:40])  # random ids: counted again
    _drain(_worker(r, "m", batch_entries=4))
    got = Consumer(r, "m").latest()
    spec = _worker(r, "m").spec
    expect = 2 * spec.noisy_delta(DS.X[:300], DS.y[:300]) + spec.noisy_delta(DS.X[:40], DS.y[:40])
    assert np.array_equal(got.counts, expect)
    assert int(r.hget(Keys("m").stats, "batches_merged")) == 17
    assert int(r.hget(Keys("m").stats, "acked_without_merge")) == 8


def test_batch_ids_depend_on_content_position_and_model(r):
    _model(r)
    _model(r, name="m2")
    p = Producer(r, "m", batch_size=10)
    p.push(DS.X[:20], DS.y[:20])
    a = list(p.last_batch_ids)
    X = DS.X[:20].copy()
    X[15, 0] = "y" if X[15, 0] != "y" else "n"
    p.push(X, DS.y[:20])
    assert p.last_batch_ids[0] == a[0] and p.last_batch_ids[1] != a[1]  # only the changed batch differs
    p.push(DS.X[10:20], DS.y[10:20])
    assert p.last_batch_ids[0] != a[1]  # the same records at another position are new records
    q = Producer(r, "m2", batch_size=10)
    q.push(DS.X[:20], DS.y[:20])
    assert not set(q.last_batch_ids) & set(a)  # ids are keyed by the model's spec


def test_producer_dead_letters_with_value_free_reasons_and_stable_ids(r):
    _model(r)
    p = Producer(r, "m", batch_size=10, on_invalid="dead-letter")
    X = DS.X[:20].copy()
    X[12, 2] = "SECRET"
    p.push(X, DS.y[:20])
    ids = list(p.last_batch_ids)
    p.push(X, DS.y[:20])
    assert p.last_batch_ids == ids
    entries = r.xrange(Keys("m").records)
    docs = [msgpack.unpackb(d[b"d"], raw=False) for _, d in entries]
    assert docs[1]["invalid"] == [[2, f"attribute {DS.schema.names[2]!r} has a value not declared in the schema"]]
    assert b"SECRET" not in b"".join(d[b"d"] for _, d in entries)


def test_a_push_with_no_valid_record_is_not_a_crash(r):
    """An empty input, or a chunk whose every row is invalid, used to raise TypeError in the array packing."""
    _model(r, epsilon=math.inf)
    p = Producer(r, "m", batch_size=40, on_invalid="dead-letter")
    p.push(DS.X[:0], DS.y[:0])
    bad = [dict(zip(DS.schema.names, row)) for row in DS.X[:3].tolist()]
    for rec in bad:
        rec[DS.schema.names[0]] = "not-declared"
    p.push(bad, list(DS.y[:3]))
    _drain(_worker(r, "m", batch_entries=4))
    assert r.xlen(Keys("m").dead) >= 1  # the invalid rows reached the dead-letter stream


def test_a_producer_without_the_victims_key_cannot_test_whether_a_record_was_pushed(r, tmp_path, monkeypatch):
    """(release='batch'): batch ids were content hashes salted with a public value,
    so anyone allowed to push and read could re-push a guessed record and see from the release count whether it
    had been merged before. Ids are now keyed by the producer's secret key: another key's push of the same record
    is merged (the count moves either way), while the victim's own retry still counts once."""
    import os
    import stat

    from streamdp.service.producer import ENV_PRODUCER_KEY, producer_id_key

    _model(r, epsilon=math.inf)
    victim_key, attacker_key = tmp_path / "victim.key", tmp_path / "attacker.key"
    monkeypatch.setenv(ENV_PRODUCER_KEY, str(victim_key))
    victim = Producer(r, "m")
    victim.push(DS.X[:1], DS.y[:1])  # the key file is made on first use, owner-only
    assert stat.S_IMODE(os.stat(victim_key).st_mode) == 0o600 and producer_id_key() == victim.id_key
    w = _worker(r, "m")
    _drain(w)
    assert show_model(r, "m")["releases"] == 1
    attacker = Producer(r, "m", id_key=producer_id_key(attacker_key))
    attacker.push(DS.X[:1], DS.y[:1])  # the victim's record, guessed: merged, not recognised
    _drain(w)
    assert show_model(r, "m")["releases"] == 2
    Producer(r, "m").push(DS.X[:1], DS.y[:1])  # the victim's retry (its key): counted once
    _drain(w)
    assert show_model(r, "m")["releases"] == 2 and collect(r, "m")["records_merged"] == 2
    short = tmp_path / "short.key"
    short.write_bytes(b"abc")
    with pytest.raises(ValueError, match="at least 16 random bytes"):
        producer_id_key(short)
    # no writable place for the key (a container without a home): a key for this process, with a warning
    monkeypatch.setenv(ENV_PRODUCER_KEY, "/proc/no-such-dir/producer.key")
    p = Producer(r, "m")
    with pytest.warns(RuntimeWarning, match="for this process only"):
        p.push(DS.X[1:2], DS.y[1:2])
    assert len(p.id_key) == 32


def test_producer_key_file_never_appears_half_written(tmp_path, monkeypatch):
    """A review's race: the key file was created at its path, then written, so a producer racing its first use
    read it empty (18 of 200 trials). Now the key is written whole elsewhere and linked into place: when its
    bytes are drawn, the path does not exist yet; a racing creator's key is kept and read."""
    import os

    from streamdp.service import producer as producer_mod

    path = tmp_path / "k" / "producer.key"
    urandom = os.urandom
    seen = []

    def watch(n):
        seen.append(path.exists())
        return urandom(n)

    monkeypatch.setattr(producer_mod.os, "urandom", watch)
    key = producer_mod.producer_id_key(path)
    assert seen == [False] and len(key) == 32 and path.read_bytes() == key
    assert producer_mod.producer_id_key(path) == key and seen == [False]  # read, not made again
    other = tmp_path / "o" / "producer.key"

    def racing(n):  # another producer links its key in between
        other.write_bytes(b"r" * 32)
        return urandom(n)

    other.parent.mkdir()
    monkeypatch.setattr(producer_mod.os, "urandom", racing)
    assert producer_mod.producer_id_key(other) == b"r" * 32 and sorted(os.listdir(other.parent)) == ["producer.key"]
