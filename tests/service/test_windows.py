"""Release windows and the tree mechanism in the service (fakeredis): exactly once, takeover, schedule, noise, rollback.

Clock-driven steps call :meth:`WindowCloser.tick` with an explicit ``now`` (the public
schedule), so these tests never sleep; the real-time test waits on conditions with deadlines.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

fakeredis = pytest.importorskip("fakeredis")
pytest.importorskip("lupa")

from streamdp.estimation import cell_variance  # noqa: E402
from streamdp.records.datasets import load  # noqa: E402
from streamdp.release.continual import TreeState  # noqa: E402
from streamdp.service.draw_once import noise_from_bytes  # noqa: E402
from streamdp.service.keys import Keys  # noqa: E402
from streamdp.service.merging import WorkerEntry  # noqa: E402
from streamdp.service.producer import Producer  # noqa: E402
from streamdp.service.published import counts_from_bytes  # noqa: E402
from streamdp.service.registry import create_model, load_policy, show_model  # noqa: E402
from streamdp.service.rollback import NoiseKeyMismatch, RollbackDetected, key_fingerprint  # noqa: E402
from streamdp.service.stream_worker import Worker  # noqa: E402
from streamdp.service.windows import COUNTS_IN_PUB_MODEL  # noqa: E402

# create_model(not_private=True)'s own NotPrivateWarning, expected here
pytestmark = pytest.mark.filterwarnings("ignore:model .*NOT private:streamdp.privacy.secure_random.NotPrivateWarning")
DS = load("congressional-voting")
EVERY = 10.0  # seconds; ticks pass explicit times, nothing waits for it


@pytest.fixture
def r():
    return fakeredis.FakeRedis(server=fakeredis.FakeServer(), version=(7, 0))


class Died(Exception):
    """A worker 'killed' at a fault point (in-process stand-in for SIGKILL)."""


def _faults(point=None):
    def f(p):
        if p == point:
            raise Died(p)

    return f


def _model(r, name="m", release="window", epsilon=math.inf, **kw):
    kw.setdefault("n_trees", 3)
    kw.setdefault("height", 3)
    every = None if release == "batch" else EVERY
    kw.setdefault("seed", 1)
    # the clock's windows, every release merged (tests/service/test_cadence.py tests the variable windows)
    kw.setdefault("cadence", None if release == "batch" else "fixed")
    return create_model(
        r, name, DS.schema, epsilon=epsilon, release=release, release_every=every, **kw, not_private=math.isinf(epsilon)
    )


def _worker(r, name="m", **kw):
    # released noise kept for the checks that read it (dropped at the release by default: see
    # test_released_window_noise_is_dropped_and_unreleased_noise_expires)
    kw.setdefault("delta_ttl_s", 3600)
    return Worker(r, name, block_ms=1, **kw)


def _add_all(w, limit=1000):
    """Read and add every waiting entry (no window closes: the closer is driven by explicit ticks)."""
    for _ in range(limit):
        entries = w.reader.read(w.config.batch_entries, 1)
        if not entries:
            return
        es = [WorkerEntry(e.id, e.fields, e.deliveries) for e in entries]
        for e in es:
            w._decode(e)
        merge = {e.batch.batch_id: e for e in es if e.batch is not None and len(e.batch.y)}
        w.merger.merge(merge, [e for e in es if e.batch is None or not len(e.batch.y)])


def _at(r, name, k):
    """Wall time just after window k ends (the schedule starts at the model's creation)."""
    return load_policy(r, name)[1] + k * EVERY + 0.001


def _published(r, name, spec):
    return counts_from_bytes(r.hget(Keys(name).pub_model, "counts"), spec)


def _exact(spec, idx):
    from streamdp.forest.model import PrivateForest

    return PrivateForest(spec.schema, spec.structure, epsilon=math.inf).noisy_delta(DS.X[idx], DS.y[idx])


@pytest.mark.parametrize("release", ["window", "tree"])
def test_every_entry_counted_once_across_windows(r, release):
    spec = _model(r, release=release)  # tree: windows 257-264 are in octave 8's tree (every level noised)
    w = _worker(r)
    p = Producer(r, "m")
    pushed = []
    n_windows = 264 if release == "tree" else 8
    for k in range(1, n_windows + 1):  # windows, some empty, entries and duplicates in between
        if k % 3 and (k <= 8 or k > 256):
            for j in range(k if k <= 8 else k - 256):  # 1 to 8 batches (windows 257-264 as windows 1-8)
                idx = np.arange(10 * (len(pushed)), 10 * (len(pushed) + 1)) % len(DS.y)
                bid = f"b{len(pushed)}"
                p.push(DS.X[idx], DS.y[idx], batch_id=bid)
                pushed.append(idx)
                if j == 0 and len(pushed) > 1:
                    p.push(DS.X[pushed[-2]], DS.y[pushed[-2]], batch_id=f"b{len(pushed) - 2}")  # a retried XADD
            _add_all(w)
        assert w.closer.tick(_at(r, "m", k)) == 1
    assert show_model(r, "m")["releases"] == n_windows  # windows 3, 6 (9-256, ...) were empty and still released
    np.testing.assert_array_equal(_published(r, "m", spec), _exact(spec, np.concatenate(pushed)))
    assert r.zcard(Keys("m").merged) == len(pushed)
    assert not r.keys("sdp:{m}:priv:acc:*") or r.keys("sdp:{m}:priv:acc:*") == [Keys("m").acc(n_windows + 1).encode()]


@pytest.mark.parametrize("release", ["window", "grow"])
def test_until_drained_waits_for_the_window_holding_the_last_entries(r, release):
    """`streamdp worker NAME --until-drained` exited with every entry added to the open
    window's accumulator but the window not released yet, so the model held none of the pushed records."""
    _model(r, release=release, epsilon=1.0 if release == "grow" else math.inf)
    w = _worker(r)
    assert w.drained()  # nothing pushed, nothing held
    Producer(r, "m").push(DS.X[:50], DS.y[:50])
    _add_all(w)
    assert w.reader.drained() and not w.drained()  # the stream is read, window 1 is not released
    assert w.closer.tick(_at(r, "m", 1)) == 1
    assert w.drained() and show_model(r, "m")["releases"] == 1


def test_a_worker_run_until_drained_returns_with_the_records_published(r):
    """The real clock: a 0.3 s window, the loop exits only once that window is released (deadline 30 s)."""
    create_model(
        r,
        "rt",
        DS.schema,
        n_trees=3,
        height=3,
        epsilon=math.inf,
        seed=1,
        release="window",
        release_every=0.3,
        not_private=True,
    )
    Producer(r, "rt").push(DS.X[:40], DS.y[:40])
    t0 = time.monotonic()
    Worker(r, "rt", block_ms=50).run(until_drained=True, max_seconds=30, handle_signals=False)
    assert time.monotonic() - t0 < 30
    spec = create_model(r, "rt", DS.schema, exist_ok=True, epsilon=math.inf, not_private=True)
    assert int(_published(r, "rt", spec)[spec.n_trees :].sum()) == 40  # the stump's exact total: every record


def test_a_worker_run_until_drained_looks_often_whether_it_is_drained(r):
    """Of a pool's two workers, the one that did not release the last window blocked in its read until the
    next window's end (a second at the defaults) before it saw the stream drained; run ``until_drained`` a
    worker's reads block at most ``DRAIN_POLL_MS``."""
    _model(r, release="window", epsilon=math.inf)
    w = Worker(r, "m", block_ms=5000)
    blocks: list[int] = []
    read = w.reader.read
    w.reader.read = lambda n, block: (blocks.append(block), read(n, 1))[1]  # type: ignore[method-assign]
    w.drained = lambda: False  # type: ignore[method-assign]  # (a window holding records, not released yet)
    w.until_drained = True
    w.step()
    w.until_drained = False
    w.step()
    assert blocks[0] <= Worker.DRAIN_POLL_MS < blocks[1]


def test_a_drained_worker_stops_without_blocking_in_a_read(r):
    """Run ``until_drained``, a worker that finds the stream drained (another worker released the last window)
    returns from its step without reading: it stopped a read later, up to ``DRAIN_POLL_MS`` after the other."""
    _model(r, release="window", epsilon=math.inf)
    w = Worker(r, "m", block_ms=5000)
    blocks: list[int] = []
    w.reader.read = lambda n, block: (blocks.append(block), [])[1]  # type: ignore[method-assign]
    w.until_drained = True
    assert w.step() == 0 and blocks == []
    w.until_drained = False
    w.step()
    assert len(blocks) == 1 and blocks[0] > Worker.DRAIN_POLL_MS  # not run until drained: it blocks in its read


def test_a_worker_run_until_drained_follows_a_close_held_by_another_worker(r):
    """A due window leased by another worker (closing it) may be the last: a worker run ``until_drained``
    looks again within ``DRAIN_FOLLOW_MS``, not ``DRAIN_POLL_MS``, so it stops soon after that close."""
    _model(r, release="window", epsilon=math.inf)
    Producer(r, "m").push(DS.X[:40], DS.y[:40])
    w = _worker(r)
    _add_all(w)
    r.set(Keys("m").closing(1), b"another worker", px=60_000)
    w.closer.now = lambda: time.time() + 2 * EVERY  # type: ignore[method-assign]  # window 1 is due
    blocks: list[int] = []
    w.reader.read = lambda n, block: (blocks.append(block), [])[1]  # type: ignore[method-assign]
    w.until_drained = True
    w.config.block_ms = 5000
    assert w.step() == 0 and w.closer.closing_elsewhere
    assert blocks == [Worker.DRAIN_FOLLOW_MS] and Worker.DRAIN_FOLLOW_MS < Worker.DRAIN_POLL_MS
    r.delete(Keys("m").closing(1))
    w.step()  # the lease gone (that worker died): this one closes the window itself
    assert not w.closer.closing_elsewhere and w.drained()


@pytest.mark.parametrize("release", ["batch", "window"])
def test_a_worker_never_writes_into_a_model_re_created_under_its_name(r, release):
    """A worker of a deleted model (epsilon 500) kept running, read the re-created model's
    (epsilon 0.05, charged as such) entries and published them noised at 500. The state now carries the model's
    id, and the commit, add, seal and release steps refuse a worker holding another."""
    from streamdp.service.registry import delete_model

    _model(r, release=release, epsilon=500.0)
    old = _worker(r)
    delete_model(r, "m")
    _model(r, release=release, epsilon=0.05, seed=2, ledger_budget=501)
    Producer(r, "m").push(DS.X[:40], DS.y[:40])
    old.step()
    assert old.stopping  # it saw the state belongs to another model and stopped
    if release == "window":
        assert old.closer.tick(_at(r, "m", 1)) == 0  # its closer does not seal or release the new model either
    assert show_model(r, "m")["releases"] == 0 and int(r.hget(Keys("m").state, "version")) == 0
    assert not r.keys("sdp:{m}:priv:acc:*")  # nothing added by the old worker
    new = Worker(r, "m", block_ms=1, claim_idle_ms=0)  # the new model's own worker takes the entries over
    for _ in range(5):
        new.step()
    if release == "window":
        new.closer.tick(_at(r, "m", 1))
    assert show_model(r, "m")["releases"] == 1
    # nor through the noise it stored before it was refused (a review's finding): stored noise is named by the
    # model's id, so the new model's worker drew its own
    from streamdp.service.stats import collect

    assert collect(r, "m")["delta_reused"] == 0


def test_entries_committed_while_a_window_closes_land_in_the_next(r):
    spec = _model(r)
    w = _worker(r)
    p = Producer(r, "m")
    p.push(DS.X[:10], DS.y[:10], batch_id="a")
    _add_all(w)
    # the closer seals window 1 and dies before noising it
    w.closer.fault = _faults("close_after_seal")
    with pytest.raises(Died):
        w.closer.tick(_at(r, "m", 1))
    p.push(DS.X[10:30], DS.y[10:30], batch_id="b")
    _add_all(w)  # goes to window 2: window 1 is sealed
    k = Keys("m")
    assert r.zscore(k.merged, "a") == 1 and r.zscore(k.merged, "b") == 2
    w2 = _worker(r)  # another worker takes over window 1
    assert w2.closer.tick(_at(r, "m", 1)) == 1
    np.testing.assert_array_equal(_published(r, "m", spec), _exact(spec, np.arange(10)))
    assert w2.closer.tick(_at(r, "m", 2)) == 1
    np.testing.assert_array_equal(_published(r, "m", spec), _exact(spec, np.arange(30)))


def test_a_stale_add_targeting_a_sealed_window_moves_to_the_open_one(r):
    spec = _model(r)
    w = _worker(r)
    w.merger.open_window = 1  # this worker believes window 1 is open
    _worker(r).closer.tick(_at(r, "m", 1))  # another worker sealed and released it
    Producer(r, "m").push(DS.X[:10], DS.y[:10], batch_id="a")
    _add_all(w)
    assert r.zscore(Keys("m").merged, "a") == 2 and w.merger.open_window == 2
    w.closer.tick(_at(r, "m", 2))
    np.testing.assert_array_equal(_published(r, "m", spec), _exact(spec, np.arange(10)))


@pytest.mark.parametrize("release", ["window", "tree"])
@pytest.mark.parametrize(
    "point", ["close_after_seal", "close_after_draw", "close_after_store", "close_before_commit", "close_in_commit"]
)
def test_a_closer_killed_at_any_point_is_taken_over_without_a_second_noise(r, point, release):
    spec = _model(r, release=release, epsilon=1.0)
    w = _worker(r, faults=_faults(point))
    Producer(r, "m").push(DS.X[:50], DS.y[:50], batch_id="a")
    _add_all(w)
    with pytest.raises(Died):
        w.closer.tick(_at(r, "m", 2))
    k = Keys("m")
    stored_before = {key: r.get(key) for key in r.keys("sdp:{m}:priv:wdelta:*") + r.keys("sdp:{m}:priv:node:*")}
    w2 = _worker(r)
    w2.closer.tick(_at(r, "m", 2))
    assert show_model(r, "m")["releases"] == 2 and int(r.hget(k.state, "open")) == 3
    for key, val in stored_before.items():  # a noise stored before the death is the one used, never redrawn
        assert r.get(key) == val
    noise = {
        key.decode().rsplit(":", 1 if release == "window" else 3)[-1 if release == "window" else 0]
        for key in r.keys("sdp:{m}:priv:wdelta:*") + r.keys("sdp:{m}:priv:node:*")
    }
    if release == "window":  # published = the two stored window draws, each once
        d = [noise_from_bytes(r.get(Keys.of(r, "m").window_delta(i)), spec) for i in (1, 2)]
        np.testing.assert_array_equal(_published(r, "m", spec), d[0] + d[1])
        assert noise == {"1", "2"}
    else:  # published = the tree state's estimate from the stored nodes
        st = TreeState.from_bytes(r.get(k.tree))
        assert st.t == 2
        np.testing.assert_array_equal(_published(r, "m", spec), st.published())
    assert r.exists(k.acc(1)) == 0


@pytest.mark.parametrize("release", ["window", "grow"])
def test_the_release_count_does_not_depend_on_the_data(r, release):
    """Two models on the same clock schedule (``max_lag=release_every``), one fed and one idle, release the same
    number of windows (real time); how many releases each merges is a function of released values."""
    every = 0.05
    for name in ("fed", "idle"):
        create_model(
            r, name, DS.schema, n_trees=2, height=2, epsilon=1.0, release_every=every, release=release, max_lag=every
        )
    workers = {n: _worker(r, n) for n in ("fed", "idle")}
    p = Producer(r, "fed")
    deadline = time.monotonic() + 30
    while min(show_model(r, n)["windows"] for n in workers) < 6:
        assert time.monotonic() < deadline, "windows not released on schedule"
        p.push(DS.X[:20], DS.y[:20])
        for w in workers.values():
            w.step(block_ms=5)
    assert r.zcard(Keys("fed").merged) > 0 and r.zcard(Keys("idle").merged) == 0
    # at the same elapsed schedule time both have released exactly the windows due, no more, no fewer (a
    # schedule time past every window the loop above may have released, however slow the machine was)
    due = 4 + max(int((time.time() - load_policy(r, n)[1]) / every) for n in workers)
    for n, w in workers.items():
        w.closer.tick(_at_every(r, n, due, every))
        assert show_model(r, n)["windows"] == due, n


def _at_every(r, name, k, every):
    return load_policy(r, name)[1] + k * every + every / 10


def test_window_release_is_exact_tally_plus_one_noise_draw_of_the_right_scale(r):
    """Published - exact, over every real cell of 8 windows, has the variance of ONE geometric draw at
    epsilon_per_tree (not zero, not two draws). 10 trees x 32 leaves x 2 classes x 8 windows = 5,120 draws;
    the sample variance's relative sd is sqrt((kurtosis - 1) / n) <= 0.032 (discrete Laplace kurtosis <= 6):
    the band +-0.25 is > 7 sd wide (failure probability < 1e-12 under the CLT), and 2 draws (ratio 2) or
    none (ratio 0) are far outside it."""
    spec = _model(r, epsilon=2.0, n_trees=10, height=5)
    w = _worker(r)
    p = Producer(r, "m")
    rng = np.random.default_rng(0)
    diffs = []
    prev = np.zeros(spec.shape, np.int64)
    for k in range(1, 9):
        idx = rng.integers(0, len(DS.y), 40)
        p.push(DS.X[idx], DS.y[idx])
        _add_all(w)
        w.closer.tick(_at(r, "m", k))
        pub = _published(r, "m", spec)
        diffs.append((pub - prev - _exact(spec, idx))[spec.real_cells])
        prev = pub
    d = np.concatenate(diffs).astype(float)
    expected = cell_variance("geometric", spec.epsilon_per_tree)
    assert abs(d.mean()) < 8 * math.sqrt(expected / d.size)
    assert 0.75 < d.var() / expected < 1.25, (d.var(), expected)


def test_the_policy_is_public_and_validated(r):
    with pytest.raises(ValueError, match="levels belonged to the fixed-horizon binary tree"):
        _model(r, name="old", release="tree", levels=5)
    _model(r, release="tree")
    info = show_model(r, "m")
    assert info["release"] == {"kind": "tree", "release_every": EVERY, "levels": None, "estimator": "honaker"}
    with pytest.raises(ValueError, match="release must be one of"):
        _model(r, name="x", release="hourly")
    with pytest.raises(ValueError, match="needs mechanism"):
        create_model(
            r, "y", DS.schema, n_trees=2, height=2, epsilon=1.0, mechanism="kanon", k=5, beta=0.5, release="tree"
        )
    assert not r.hexists("sdp:registry", "x") and not r.hexists("sdp:registry", "y")
    assert not r.hexists("sdp:registry", "old")


# -- state rollback -----------------------------------------------------------


def _snapshot(r, name):
    return {k: r.dump(k) for k in r.keys(f"sdp:{{{name}}}:*")}


def _restore(r, name, snap):
    for k in r.keys(f"sdp:{{{name}}}:*"):
        r.delete(k)
    for k, v in snap.items():
        r.restore(k, 0, v)


def test_the_noise_layout_is_fixed_at_create_and_older_models_keep_the_stream_layout(r, tmp_path):
    key = _key(tmp_path)
    _model(r, epsilon=1.0, noise_key_file=str(key))
    assert r.hget(Keys("m").state, "noise_layout") == b"blocks"
    w = _worker(r, noise_key_file=str(key))
    assert w.noise.layout == "blocks" and w.noise.rng("window", "1", b"x").layout == "blocks"
    r.hdel(Keys("m").state, "noise_layout")  # what a model created before the field existed holds
    w = _worker(r, noise_key_file=str(key))
    assert w.noise.layout == "stream" and w.noise.rng("window", "1", b"x").layout == "stream"
    assert w.closer.noise is w.noise  # the closer draws every window from it


@pytest.mark.parametrize("release", ["batch", "window", "tree", "grow"])
def test_a_rolled_back_release_is_republished_with_the_same_noise(r, tmp_path, release):
    key = _key(tmp_path)
    spec = _model(r, release=release, epsilon=1.0, noise_key_file=str(key))
    Producer(r, "m").push(DS.X[:60], DS.y[:60], batch_id="a")

    def release_once():
        w = _worker(r, noise_key_file=str(key))
        if release == "batch":
            w.step(block_ms=1)
        else:
            _add_all(w)
            w.closer.tick(_at(r, "m", 1))
        assert show_model(r, "m")["releases"] == 1
        return _published_release(r)

    snap = _snapshot(r, "m")  # the "old snapshot": taken before the release
    first = release_once()
    _restore(r, "m", snap)  # Redis restarts from it: the stored noise is gone
    assert show_model(r, "m")["releases"] == 0
    again = release_once()
    assert again == first  # byte-identical: the redraw is the same draw
    if release != "grow":  # and it is noisy (grow: the trees it publishes are not the spec's)
        assert not np.array_equal(counts_from_bytes(first, spec), _exact(spec, np.arange(60)))
    # a host with another key, or none, would redraw it as a second, independent noise: it refuses to start
    _restore(r, "m", snap)
    for other in [{"noise_key_file": str(_key(tmp_path, "other.key", 7))}, {}]:
        with pytest.raises(NoiseKeyMismatch, match="refusing to draw noise"):
            _worker(r, **other)
    assert show_model(r, "m")["releases"] == 0
    assert release_once() == first  # the model's own key still redraws the same release


def _key(tmp_path, name="noise.key", start=0):
    key = tmp_path / name
    key.write_bytes(bytes(range(start, start + 32)))
    key.chmod(0o600)
    return key


def test_a_worker_with_another_noise_key_refuses_to_draw(r, tmp_path, caplog, monkeypatch):
    """The model keeps its creator's key fingerprint; a worker (and a running closer) with another key, with
    none when the model has one, or with one when it has none refuses before drawing any noise, and says so."""
    monkeypatch.delenv("STREAMDP_NOISE_KEY_FILE", raising=False)
    ka, kb = _key(tmp_path, "a.key", 0), _key(tmp_path, "b.key", 1)
    _model(r, epsilon=1.0, noise_key_file=str(ka))
    state = r.hget(Keys("m").state, "noise_key").decode()
    assert state == key_fingerprint(ka.read_bytes()) and ka.read_bytes().hex() not in state
    a = _worker(r, noise_key_file=str(ka))
    Producer(r, "m").push(DS.X[:40], DS.y[:40], batch_id="a")
    _add_all(a)
    with caplog.at_level("ERROR", logger="streamdp.worker"):
        with pytest.raises(NoiseKeyMismatch, match="another|fingerprint"):
            _worker(r, noise_key_file=str(kb))
    assert "worker.noise_key_mismatch" in caplog.text
    with pytest.raises(NoiseKeyMismatch, match="this worker has no noise key"):
        _worker(r)
    # a running closer checks again before it draws: the model re-keyed under it (say, re-created) is refused
    r.hset(Keys("m").state, "noise_key", key_fingerprint(kb.read_bytes()))
    with pytest.raises(NoiseKeyMismatch):
        a.closer.tick(_at(r, "m", 1))
    assert show_model(r, "m")["releases"] == 0 and not r.exists(Keys("m").window_delta(1))  # nothing drawn
    r.hset(Keys("m").state, "noise_key", state)
    a.closer.tick(_at(r, "m", 1))
    assert show_model(r, "m")["releases"] == 1
    # the converse: a model created without a key is refused by a keyed worker
    _model(r, name="n", epsilon=1.0)
    assert r.hget(Keys("n").state, "noise_key") == b"none"
    with pytest.raises(NoiseKeyMismatch, match="created with no noise key"):
        _worker(r, "n", noise_key_file=str(ka))
    _worker(r, "n")
    r.hdel(Keys("n").state, "noise_key")  # a model from before the field: not checked
    _worker(r, "n", noise_key_file=str(ka))


def _published_release(r, name="m"):
    """The published release's numbers: the counts (a grown model: its blob's counts and structure; the blob
    itself carries its creation time)."""
    from streamdp.forest.model import PrivateForest

    counts = r.hget(Keys(name).pub_model, "counts")
    if counts is not None:
        return counts
    f = PrivateForest.from_bytes(r.hget(Keys(name).pub_model, "blob"))
    return f.counts.tobytes() + b"".join(a.tobytes() for a in f.structure.arrays().values())


def test_a_worker_refuses_a_rolled_back_model(r, tmp_path):
    _model(r)
    state = tmp_path / "state"
    w = _worker(r, state_dir=str(state))
    snap = _snapshot(r, "m")
    w.closer.tick(_at(r, "m", 3))
    assert show_model(r, "m")["version"] == 3
    _restore(r, "m", snap)
    with pytest.raises(RollbackDetected, match="rolled back"):
        _worker(r, state_dir=str(state))
    with pytest.raises(RollbackDetected):  # a running worker refuses too, before publishing anything
        w.closer.tick(_at(r, "m", 4))
    assert show_model(r, "m")["version"] == 0
    _worker(r, state_dir=str(tmp_path / "elsewhere"))  # a host that never saw the model cannot tell


def test_a_deleted_model_is_never_recreated_by_a_closer(r):
    from streamdp.service.registry import delete_model

    _model(r)
    w = _worker(r)
    delete_model(r, "m")
    assert w.closer.tick(time.time() + 1e6) == 0  # a million windows due, none released
    assert not [k for k in r.keys("sdp:{m}:*") if b":ledger" not in k]


@pytest.mark.parametrize("release", ["window", "tree"])
def test_consumers_get_the_published_counts_noise_variance(r, release):
    """Estimation weighs the published counts by their noise: w windows' variance under `window`, the tree's
    estimate's under `tree` (the plain sum's first, then less); public (epsilon, policy and the window count only)."""
    from streamdp.release.continual import published_variance
    from streamdp.service.consumer import Consumer

    spec = _model(r, release=release, epsilon=1.0)
    w = _worker(r)
    policy = load_policy(r, "m")[0]
    for k in range(1, 6):
        assert w.closer.tick(_at(r, "m", k)) == 1
        got = Consumer(r, "m").latest().noise_variance
        want = published_variance(policy, k, cell_variance(spec.mechanism, policy.node_epsilon(spec.epsilon_per_tree)))
        assert np.allclose(got, want)
    if release == "window":
        assert np.allclose(got, 5 * spec.cell_variance)
    else:  # plain windows drawn in units: the window sum's variance, up to the geometric's rounding
        assert np.allclose(got, 5 * spec.cell_variance, rtol=0.02)
    # a retained version holds the release alone (no structure), and reads back as that version's forest
    from streamdp.service.published import is_release_record

    kept = r.get(Keys("m").pub_version(3))
    assert is_release_record(kept) and len(kept) < len(r.get(Keys("m").spec))
    assert r.hget(Keys("m").pub_model, "blob") is None  # counts on the spec (published.published_fields)
    v3 = Consumer(r, "m").get(3)
    assert v3.version == 3 and v3.n_releases == 3
    want3 = published_variance(policy, 3, cell_variance(spec.mechanism, policy.node_epsilon(spec.epsilon_per_tree)))
    assert np.allclose(v3.noise_variance, want3)
    assert Consumer(r, "m").get(0).version == 0  # pub:v:0 is the spec blob itself
    if release == "tree":
        for k in range(6, 265):  # into octave 8's tree: within 1.3x of the window sum's sd
            assert w.closer.tick(_at(r, "m", k)) == 1
        got = Consumer(r, "m").latest().noise_variance
        want = published_variance(
            policy, 264, cell_variance(spec.mechanism, policy.node_epsilon(spec.epsilon_per_tree))
        )
        assert np.allclose(got, want) and np.all(got < 1.3**2 * 264 * spec.cell_variance)


# -- release="grow": windows on trees that deepen (streamdp.forest.growth) ------------------------------


def test_a_grown_model_deepens_its_published_trees_window_by_window(r):
    """Votes at height 9, epsilon 2, four windows: the published trees start shallow and only grow, every entry
    is counted once (the stumps' published totals hold each window's noisy count), consumers read each version
    with its own structure, and retained versions are whole blobs."""
    from streamdp.service.consumer import Consumer

    _model(r, release="grow", epsilon=2.0, n_trees=4, height=9)
    assert "grow" in str(load_policy(r, "m")[0])
    w = _worker(r)
    p = Producer(r, "m")
    c = Consumer(r, "m")
    heights, leaves = [], []
    for k, idx in enumerate(np.array_split(np.arange(len(DS.y)), 4), start=1):
        p.push(DS.X[idx], DS.y[idx], batch_id=f"b{k}")
        p.push(DS.X[idx], DS.y[idx], batch_id=f"b{k}")  # a retried XADD: counted once
        _add_all(w)
        assert w.closer.tick(_at(r, "m", k)) == 1
        f = c.latest()
        assert f.version == k and f.n_releases == k and f.height <= 9
        heights.append(f.height)
        leaves.append(int(f.structure.n_leaves[:4].sum()))
        assert not r.hexists(Keys("m").pub_model, "counts")  # no counts-only fast path across structures
    assert heights == sorted(heights) and leaves == sorted(leaves) and heights[-1] < 9
    assert heights[-1] > heights[0] or leaves[-1] > leaves[0]
    assert r.zcard(Keys("m").merged) == 4
    from streamdp.service.stats import collect

    est = collect(r, "m")["estimated_records"]  # noisy, from the published blob (no counts field under grow)
    assert est == pytest.approx(len(DS.y), abs=60)  # 4 trees + 1 stump at eps 2: a few records of noise
    first = c.get(1)
    assert first.version == 1 and first.n_releases == 1 and int(first.structure.n_leaves[:4].sum()) == leaves[0]
    # the grown forest predicts like the library's: the consumer's forest is the stored release
    stored = _stored_release(r, 4)
    assert np.array_equal(c.latest().predict_proba(DS.X[:20]), stored.predict_proba(DS.X[:20]))


def _stored_release(r, w):
    from streamdp.forest.model import PrivateForest

    return PrivateForest.from_bytes(r.get(Keys.of(r, "m").window_delta(w)))


@pytest.mark.parametrize(
    "point", ["close_after_seal", "close_after_draw", "close_after_store", "close_before_commit", "close_in_commit"]
)
def test_a_grown_release_killed_at_any_point_is_taken_over_without_a_second_noise(r, point):
    _model(r, release="grow", epsilon=1.0, n_trees=3, height=6)
    w = _worker(r, faults=_faults(point))
    Producer(r, "m").push(DS.X[:200], DS.y[:200], batch_id="a")
    _add_all(w)
    with pytest.raises(Died):
        w.closer.tick(_at(r, "m", 2))
    k = Keys("m")
    stored_before = {key: r.get(key) for key in r.keys("sdp:{m}:priv:wdelta:*")}
    w2 = _worker(r)
    w2.closer.tick(_at(r, "m", 2))
    assert show_model(r, "m")["releases"] == 2 and int(r.hget(k.state, "open")) == 3
    for key, val in stored_before.items():  # a release stored before the death is the one published
        assert r.get(key) == val
    assert r.hget(k.pub_model, "blob") == r.get(Keys.of(r, "m").window_delta(2))
    assert r.hget(k.state, "blob") == COUNTS_IN_PUB_MODEL  # closers read the published blob


def test_an_adult_grow_model_grows_on_its_budgeted_draw_through_a_worker_restart(r):
    """Decisions/025: a mixed-schema (Adult) grow model with no height grows on the budgeted draw (window's). A worker closes window 1, adds window 2's records and dies before closing it; a new worker loads the
    published grown blob, releases window 2 from the stored accumulator and window 3 (a retried XADD among its
    entries): every batch is counted once, the published trees only deepen within the drawn ones, and each
    published blob is the release stored for its window."""
    from streamdp.records.datasets import load
    from streamdp.service.consumer import Consumer
    from streamdp.service.stats import collect

    adult = load("adult")
    spec = create_model(r, "m", adult.schema, epsilon=1.0, release="grow", release_every=EVERY, cadence="fixed", seed=2)
    assert load_policy(r, "m")[0].kind == "grow" and spec.height >= 12  # the budgeted draw, as window's
    parts = np.array_split(np.arange(6000), 3)
    p = Producer(r, "m", batch_size=2000)
    w1 = _worker(r)
    p.push(adult.X[parts[0]], adult.y[parts[0]], batch_id="p0")
    _add_all(w1)
    assert w1.closer.tick(_at(r, "m", 1)) == 1
    p.push(adult.X[parts[1]], adult.y[parts[1]], batch_id="p1")
    _add_all(w1)  # window 2's records are in its accumulator; the worker dies before the close
    del w1
    w2 = _worker(r)
    assert w2.closer.tick(_at(r, "m", 2)) == 1
    p.push(adult.X[parts[2]], adult.y[parts[2]], batch_id="p2")
    p.push(adult.X[parts[2]], adult.y[parts[2]], batch_id="p2")  # a retried XADD: counted once
    _add_all(w2)
    assert w2.closer.tick(_at(r, "m", 3)) == 1
    c = Consumer(r, "m")
    leaves = [int(c.get(v).structure.n_leaves[: spec.n_trees].sum()) for v in (1, 2, 3)]
    f = c.latest()
    assert f.version == 3 and f.n_releases == 3 and leaves == sorted(leaves) and leaves[0] > spec.n_trees
    assert f.height <= spec.height and (f.structure.n_leaves <= spec.structure.n_leaves).all()
    assert r.hget(Keys("m").pub_model, "blob") == r.get(Keys.of(r, "m").window_delta(3))
    assert r.zcard(Keys("m").merged) == 3
    assert collect(r, "m")["estimated_records"] == pytest.approx(6000, abs=200)  # the stumps' noisy totals
    majority = max(float(np.mean(adult.y[6000:8000] == v)) for v in adult.schema.label.values)  # 0.77
    assert float(np.mean(f.predict(adult.X[6000:8000]) == adult.y[6000:8000])) > majority - 0.02  # (noisy)


def _timeless(blob: bytes) -> bytes:
    """A model blob's bytes with its creation time (its last field, a msgpack float64) zeroed."""
    at = blob.rindex(b"\xa7created\xcb") + 9
    return blob[:at] + bytes(8) + blob[at + 8 :]


def test_a_keyed_grow_closer_releases_the_bytes_of_growing_a_copy_of_the_published_release(r, tmp_path):
    """The closer grows the published release without copying it (``holding(copy=False)``) and holds nothing
    between closes: each keyed release is byte for byte (but its creation time) the one drawn the plain way, on
    a copy of the release before it with the same keyed generator, on an Adult model at the budgeted draw."""
    from streamdp.forest.model import PrivateForest

    adult = load("adult")
    key = _key(tmp_path)
    spec = create_model(
        r,
        "m",
        adult.schema,
        epsilon=1.0,
        release="grow",
        release_every=EVERY,
        cadence="fixed",
        seed=5,
        noise_key_file=str(key),
    )
    w = _worker(r, noise_key_file=str(key))
    p = Producer(r, "m", batch_size=2000)
    for k, rows in enumerate(np.array_split(np.arange(4500), 3), start=1):
        base_b = r.hget(Keys("m").pub_model, "blob")
        p.push(adult.X[rows], adult.y[rows], batch_id=f"p{k}")
        _add_all(w)
        assert w.closer.tick(_at(r, "m", k)) == 1
        enc = spec.schema.encode(adult.X[rows], adult.y[rows])
        exact = spec.tally_encoded(enc.X, enc.y)
        base = spec.holding(PrivateForest.from_bytes(base_b)) if base_b else spec.holding(spec)
        rng = w.noise.rng("window", str(k), np.ascontiguousarray(exact, "<i8"), np.ascontiguousarray(base.counts))
        want = spec.holding(base).grow_exact(exact, rng).to_bytes()
        got = r.hget(Keys("m").pub_model, "blob")
        assert _timeless(got) == _timeless(want)
        assert PrivateForest.from_bytes(got).n_releases == k


def test_a_grow_consumer_reads_the_published_blob_not_the_spec(r):
    """A grown release publishes its blob (its structure changed): a consumer needs nothing else, and must not
    download the drawn trees' spec for every version (44x the blob at height 8, measured by the review)."""
    from streamdp.service.consumer import Consumer

    _model(r, release="grow", epsilon=1.0, n_trees=3, height=6)
    w = _worker(r)
    Producer(r, "m").push(DS.X[:200], DS.y[:200])
    _add_all(w)
    w.closer.tick(_at(r, "m", 1))
    spec = r.get(Keys("m").spec)
    r.delete(Keys("m").spec)  # a consumer that read it would fail now
    f = Consumer(r, "m").latest()
    assert f.version == 1 and r.hget(Keys("m").pub_model, "blob") is not None
    r.set(Keys("m").spec, spec)


def test_grow_is_refused_without_noise_or_with_k_anonymity(r):
    with pytest.raises(ValueError, match="finite epsilon"):
        _model(r, name="a", release="grow", epsilon=math.inf)
    with pytest.raises(ValueError, match="needs mechanism"):
        create_model(
            r, "b", DS.schema, n_trees=2, height=2, epsilon=1.0, mechanism="kanon", k=5, beta=0.5, release="grow"
        )
    assert not r.hexists("sdp:registry", "a") and not r.hexists("sdp:registry", "b")


def test_released_window_noise_is_dropped_and_unreleased_noise_expires(r):
    """A late worker of a default Adult model filled Redis (23.8 GB, killed) with each
    window's stored noise, counts-sized and kept 7 days after its release. Released noise is dropped now; noise
    stored for a release that never comes (a closer that died, a deleted model) expires (PENDING_TTL_S)."""
    from streamdp.service.windows import PENDING_TTL_S

    _model(r, epsilon=1.0)
    w = _worker(r, delta_ttl_s=0)  # the default
    Producer(r, "m").push(DS.X[:40], DS.y[:40])
    _add_all(w)
    for k in (1, 2, 3):
        assert w.closer.tick(_at(r, "m", k)) == 1
    assert not r.keys("sdp:{m}:priv:wdelta*") and show_model(r, "m")["releases"] == 3
    Producer(r, "m").push(DS.X[40:60], DS.y[40:60])
    _add_all(w)  # window 4 holds records: its noise is stored before its release
    w.closer.fault = _faults("close_before_commit")
    with pytest.raises(Died):
        w.closer.tick(_at(r, "m", 4))
    (stored,) = r.keys("sdp:{m}:priv:wdelta*")
    assert 0 < r.ttl(stored) <= PENDING_TTL_S
    audit = _worker(r, delta_ttl_s=600)  # kept for an audit when asked
    assert audit.closer.tick(_at(r, "m", 4)) == 1
    assert 0 < r.ttl(stored) <= 600


def test_a_closer_drops_only_its_own_lease(r):
    _model(r)
    w = _worker(r)
    lease = Keys("m").closing(1)
    r.set(lease, "another closer's token")
    w.closer._unlease(keys=[lease], args=[w.closer.token])
    assert r.get(lease) == b"another closer's token"
    r.set(lease, w.closer.token)
    w.closer._unlease(keys=[lease], args=[w.closer.token])
    assert not r.exists(lease)


def test_the_state_keeps_no_copy_of_the_counts_and_every_window_stores_its_noise(r):
    """The state keeps no copy of the published counts (closers read pub:model's): a window release writes three
    counts-sized values where it wrote four. A worker of an earlier version reading the state's copy gets bytes
    that fit no forest: an error, not zero counts. An empty window's noise is stored like any other: skipping it
    made empty windows' releases measurably earlier (a review), so their timing told which had records."""
    from streamdp.service.published import counts_from_bytes

    spec = _model(r, epsilon=1.0)
    w = _worker(r, delta_ttl_s=3600)  # (kept: a stored draw would show)
    writes = []
    real_store = w.closer._stored
    w.closer._stored = lambda key, draw: writes.append(key) or real_store(key, draw)
    assert w.closer.tick(_at(r, "m", 3)) == 3
    assert len(writes) == 3 and len(r.keys("sdp:{m}:priv:wdelta*")) == 3  # (kept: delta_ttl_s)
    assert r.hget(Keys("m").state, "counts") == COUNTS_IN_PUB_MODEL
    with pytest.raises(ValueError, match="stored counts have 29 bytes"):  # what an earlier version's closer reads
        counts_from_bytes(r.hget(Keys("m").state, "counts"), spec)
    pub = _published(r, "m", spec)
    assert np.any(pub[spec.real_cells] != 0)  # three windows of noise
    w2 = _worker(r)  # a closer without the cache reads the published counts
    Producer(r, "m").push(DS.X[:30], DS.y[:30])
    _add_all(w2)
    assert w2.closer.tick(_at(r, "m", 4)) == 1
    d4 = noise_from_bytes(r.get(Keys.of(r, "m").window_delta(4)), spec)
    np.testing.assert_array_equal(_published(r, "m", spec), pub + d4)


def test_a_worker_started_late_warns_of_the_windows_it_will_release(r, caplog):
    """A worker started 46 windows late releases them all (their noise swamped 300 records in late_worker.log):
    it says so at start (public: the clock and the published release count)."""
    import logging

    from streamdp.service.registry import load_policy

    _model(r, release="window", epsilon=1.0)
    start = load_policy(r, "m")[1]
    for late, warned in ((0.5, False), (50.5, True)):
        w = _worker(r)
        w.closer.now = lambda late=late: start + late * EVERY
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="streamdp.worker"):
            w._on_start()
        assert ("worker.behind_schedule" in caplog.text) is warned
        if warned:
            assert '"windows": 50' in caplog.text
