"""Forgetting in the service (streamdp.service.forgetting): a half-life's published counts are the decayed released
deltas, each release decayed once, through closes killed at any point, rollbacks and the cadence's left-out releases.

Clock-driven steps call :meth:`WindowCloser.tick` with an explicit ``now``: nothing sleeps.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from streamdp.release.continual import ReleasePolicy, decayed_variance, variance_bound
from streamdp.release.decay import DecayedCounts
from streamdp.service.connection import connect
from streamdp.service.draw_once import noise_from_bytes
from streamdp.service.forgetting import release_records
from streamdp.service.keys import Keys
from streamdp.service.merging import WorkerEntry
from streamdp.service.producer import Producer
from streamdp.service.published import counts_from_bytes
from streamdp.service.registry import create_model, load_policy, show_model
from streamdp.service.stream_worker import Worker
from tests.service.conftest import DS

EVERY = 10.0  # seconds; ticks pass explicit times, nothing waits for it


class Died(Exception):
    """A closer 'killed' at a fault point (in-process stand-in for SIGKILL)."""


def _model(r, name="m", cadence="fixed", **kw):
    kw.setdefault("half_life", 2.0)
    kw.setdefault("release_every", EVERY)
    kw.setdefault("n_trees", 3)
    return create_model(r, name, DS.schema, height=3, epsilon=1.0, seed=1, cadence=cadence, **kw)


def _worker(r, name="m", point=None):
    def fault(p):
        if p == point:
            raise Died(p)

    return Worker(r, name, block_ms=1, delta_ttl_s=3600, faults=fault)  # released noise kept for the checks


def _add_all(w):
    for _ in range(1000):
        entries = w.reader.read(w.config.batch_entries, 1)
        if not entries:
            return
        es = [WorkerEntry(e.id, e.fields, e.deliveries) for e in entries]
        for e in es:
            w._decode(e)
        w.merger.merge({e.batch.batch_id: e for e in es if e.batch is not None}, [])


def _at(r, name, k):
    return load_policy(r, name)[1] + k * EVERY + 0.001


def _published(r, name, spec):
    return counts_from_bytes(r.hget(Keys(name).pub_model, "counts"), spec)


def _library(r, name, spec, windows):
    """The library's decayed counts (streamdp.release.decay) over the service's stored released deltas."""
    policy = load_policy(r, name)[0]
    d = DecayedCounts(policy)
    for w in windows:
        delta = noise_from_bytes(r.get(Keys.of(r, name).window_delta(w)), spec)
        d.update(delta, records=release_records(delta, spec))
    return d


def _run(r, spec, feed, name="m", w=None):
    """Push ``feed[k]`` records (0: none) into window k + 1 and release it; returns the worker."""
    w = w or _worker(r, name)
    p = Producer(r, name)
    for k, n in enumerate(feed, start=1):
        if n:
            idx = np.arange(10 * k, 10 * k + n) % len(DS.y)
            p.push(DS.X[idx], DS.y[idx])
            _add_all(w)
        assert w.closer.tick(_at(r, name, k)) == 1
    return w


@pytest.mark.parametrize("unit", ["releases", "records"])
def test_the_published_counts_are_the_decayed_released_deltas(r, unit):
    """Every window merged (fixed cadence): the published counts are the library's DecayedCounts over the stored
    deltas, rounded; the published noise variance is the decayed one, below its bound, and ``model show`` says so."""
    spec = _model(r, half_life=2.0 if unit == "releases" else 60.0, half_life_unit=unit)
    _run(r, spec, [40, 0, 60, 0, 0, 30, 50, 0])
    lib = _library(r, "m", spec, range(1, 9))
    np.testing.assert_array_equal(_published(r, "m", spec), np.rint(lib.counts).astype(np.int64))
    v = spec.cell_variance
    info = show_model(r, "m")
    assert info["releases"] == 8 and info["release"]["half_life_unit"] == unit
    assert info["noise_variance"] == pytest.approx(lib.variance(v)) == pytest.approx(decayed_variance(lib.factors, v))
    assert lib.variance(v) < min(8 * v, variance_bound(ReleasePolicy.from_dict(info["release"]), v))  # 8: no decay
    assert float(r.hget(Keys("m").pub_model, "noise_variance")) == pytest.approx(lib.variance(v))


@pytest.mark.parametrize(
    "point", ["close_after_seal", "close_after_draw", "close_after_store", "close_before_commit", "close_in_commit"]
)
def test_a_close_killed_at_any_point_and_retried_decays_once(r, point):
    spec = _model(r)
    w = _run(r, spec, [40])  # window 1 released: the base the retried close decays
    dying = _worker(r, point=point)
    Producer(r, "m").push(DS.X[:50], DS.y[:50], batch_id="a")
    _add_all(dying)
    with pytest.raises(Died):
        dying.closer.tick(_at(r, "m", 2))
    for closer in (_worker(r).closer, w.closer, dying.closer):  # a fresh one, a cached one, the dead one's again
        closer.fault = lambda p: None
        closer.tick(_at(r, "m", 2))
    assert show_model(r, "m")["releases"] == 2
    lib = _library(r, "m", spec, (1, 2))
    np.testing.assert_array_equal(_published(r, "m", spec), np.rint(lib.counts).astype(np.int64))
    assert lib.factors[1] == pytest.approx(0.5**0.5)  # one decay by lam, not lam**2


def test_a_rolled_back_model_redecays_from_the_state_it_rolled_back_to(r, tmp_path):
    """A Redis that restarts from a snapshot taken after release 1 forgets release 2 and its decayed counts
    together (one hash): with the noise key, the worker re-releases window 2 from release 1's decayed counts,
    byte for byte the same."""
    key = tmp_path / "noise.key"
    key.write_bytes(bytes(range(32)))
    key.chmod(0o600)
    spec = _model(r, noise_key_file=str(key))

    def worker():
        return Worker(r, "m", block_ms=1, delta_ttl_s=3600, noise_key_file=str(key))

    _run(r, spec, [40], w=worker())
    k = Keys("m")
    Producer(r, "m").push(DS.X[:50], DS.y[:50], batch_id="b")
    snap = {name: r.dump(name) for name in r.keys("sdp:{m}:*")}  # the "old snapshot": before release 2
    w = worker()
    _add_all(w)
    w.closer.tick(_at(r, "m", 2))
    first = (r.hget(k.pub_model, "counts"), r.hget(k.state, "decayed"))
    for name in r.keys("sdp:{m}:*"):
        r.delete(name)
    for name, dump in snap.items():
        r.restore(name, 0, dump)
    assert show_model(r, "m")["releases"] == 1
    w = worker()
    _add_all(w)
    w.closer.tick(_at(r, "m", 2))
    assert (r.hget(k.pub_model, "counts"), r.hget(k.state, "decayed")) == first
    lib = _library(r, "m", spec, (1, 2))
    np.testing.assert_array_equal(_published(r, "m", spec), np.rint(lib.counts).astype(np.int64))


def test_a_release_the_cadence_leaves_out_does_not_decay_the_counts(r):
    """Adaptive cadence: idle windows are left out of the estimate (lam = 1 for them), so the counts the model
    learnt stay as they were while no data flow; the merged ones are the library's decay over the merged deltas."""
    spec = _model(r, cadence=None, max_lag=16 * EVERY, n_trees=2)
    w = _worker(r)
    Producer(r, "m").push(DS.X, DS.y)
    _add_all(w)
    sched = w.closer.windows.read()
    assert w.closer.tick(sched.end + 0.001) == 1
    merged_windows = [1]
    before = _published(r, "m", spec)
    for _ in range(6):  # idle: each release noise only (kept with probability about 0.0013 each)
        s = w.closer.windows.read()
        version = show_model(r, "m")["version"]
        assert w.closer.tick(s.end + 0.001) == 1
        if show_model(r, "m")["version"] > version:
            merged_windows.append(s.released + 1)
        else:
            np.testing.assert_array_equal(_published(r, "m", spec), before)
        before = _published(r, "m", spec)
    info = show_model(r, "m")
    assert info["windows"] == 7 and info["releases"] == len(merged_windows) < 7
    lib = _library(r, "m", spec, merged_windows)
    np.testing.assert_array_equal(_published(r, "m", spec), np.rint(lib.counts).astype(np.int64))


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"release": "tree"}, "half_life .*release='window'"),
        ({"release": "batch", "release_every": None}, "half_life .*release='window'"),
        ({"release": "grow"}, "half_life .*release='window'"),
        ({"half_life": 0.0}, "half_life must be"),
        ({"half_life": None, "half_life_unit": "records"}, "half_life_unit .*needs half_life"),
        ({"half_life_unit": "days"}, "half_life_unit must be"),
        ({"max_lag": 30.0}, "max_lag .*cadence='fixed'"),
        ({"half_life": None, "cadence": "sometimes"}, "cadence must be one of"),
        ({"half_life": None, "cadence": "adaptive", "release": "tree"}, "cadence='adaptive'"),
        ({"half_life": None, "cadence": "fixed", "release": "batch", "release_every": None}, "release='batch'"),
    ],
)
def test_combinations_that_make_no_sense_are_refused_before_anything_is_stored(r, kw, match):
    with pytest.raises(ValueError, match=match):
        _model(r, **kw)
    assert not r.keys("*")


def test_the_choices_are_stored_public_and_a_half_life_alone_means_window(r):
    _model(r, cadence=None, half_life=500.0, half_life_unit="records")  # (no release: window, adaptive)
    info = show_model(r, "m")
    assert info["release"] == {**info["release"], "kind": "window", "half_life": 500.0, "half_life_unit": "records"}
    assert "cadence" in info and info["noise_variance"] == 0.0
    _model(r, "f", half_life=None)
    assert "cadence" not in show_model(r, "f") and "schedule" not in show_model(r, "f")
    assert r.hget(Keys("f").state, "cadence") is None


@pytest.mark.redis
def test_a_decayed_model_through_a_real_redis_publishes_the_decayed_released_deltas(redis_url, unique_name):
    r = connect(redis_url)
    spec = _model(r, unique_name, half_life=3.0)
    _run(r, spec, [30, 0, 50, 20, 0, 40], name=unique_name)
    lib = _library(r, unique_name, spec, range(1, 7))
    np.testing.assert_array_equal(_published(r, unique_name, spec), np.rint(lib.counts).astype(np.int64))
    assert show_model(r, unique_name)["noise_variance"] == pytest.approx(lib.variance(spec.cell_variance))
    assert math.isfinite(show_model(r, unique_name)["class_total_sd"])
