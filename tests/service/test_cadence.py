"""Windows from the released rate in the service (fakeredis, explicit ticks): the schedule reads released values
only, every entry counts once across windows of several lengths, releases carrying no record are left out, and
users see the cadence (``model show``, the worker's INFO log)."""

from __future__ import annotations

import json
import logging
import math
from dataclasses import replace

import numpy as np
import pytest

fakeredis = pytest.importorskip("fakeredis")
pytest.importorskip("lupa")

from streamdp.cli.model_show import cadence_lines as _cadence_lines  # noqa: E402
from streamdp.forest.model import PrivateForest  # noqa: E402
from streamdp.records.datasets import load  # noqa: E402
from streamdp.release.cadence import GRACE, LAG_SHARE, Cadence, Schedule  # noqa: E402
from streamdp.service.history import read_history  # noqa: E402
from streamdp.service.keys import Keys  # noqa: E402
from streamdp.service.producer import Producer  # noqa: E402
from streamdp.service.published import counts_from_bytes  # noqa: E402
from streamdp.service.registry import create_model, load_policy, load_spec, show_model  # noqa: E402
from tests.service.test_windows import _add_all, _worker  # noqa: E402

# create_model(not_private=True)'s own NotPrivateWarning, expected here
pytestmark = pytest.mark.filterwarnings("ignore:model .*NOT private:streamdp.privacy.secure_random.NotPrivateWarning")
DS = load("congressional-voting")
EVERY = 10.0  # seconds; ticks pass explicit times
MAX_LAG = 8 * EVERY / LAG_SHARE  # windows of at most 8 * EVERY


@pytest.fixture
def r():
    return fakeredis.FakeRedis(server=fakeredis.FakeServer(), version=(7, 0))


def _model(r, name="m", epsilon=math.inf, release="window", **kw):
    kw.setdefault("max_lag", MAX_LAG)
    return create_model(
        r,
        name,
        DS.schema,
        n_trees=3,
        height=3,
        epsilon=epsilon,
        seed=1,
        release=release,
        release_every=EVERY,
        **kw,
        not_private=math.isinf(epsilon),
    )


def _sched(r, name="m") -> Schedule:
    return Schedule.from_dict(json.loads(r.hget(Keys(name).state, "schedule")))


def _relative(r, name) -> dict:
    """The schedule with its end from the model's start (two models are created at two times), to the microsecond."""
    s = _sched(r, name)
    return replace(s, end=round(s.end - load_policy(r, name)[1], 6)).to_dict()


def _run_to(w, r, name, t: float) -> None:
    """Tick the model's closer at every window end up to time ``t`` (the public schedule), then at ``t``."""
    while _sched(r, name).end <= t:
        assert w.closer.tick(_sched(r, name).end + 0.001) >= 1
    w.closer.tick(t)


def _published(r, name, spec):
    return counts_from_bytes(r.hget(Keys(name).pub_model, "counts"), spec)


def test_an_unreleased_record_does_not_move_the_schedule(r):
    """Two streams with the same releases so far, one with a record more in the open window: the same schedule
    (the open window's end is fixed by the releases before it), and both release that window at its end."""
    for name in ("a", "b"):
        _model(r, name)
    ws = {n: _worker(r, n) for n in ("a", "b")}
    for n in ("a", "b"):  # the same records, released in the same windows
        Producer(r, n).push(DS.X[:40], DS.y[:40], batch_id="same")
        _add_all(ws[n])
        _run_to(ws[n], r, n, load_policy(r, n)[1] + 35 * EVERY)
    assert _relative(r, "a") == _relative(r, "b") and _sched(r, "a").merged == 1
    Producer(r, "a").push(DS.X[40:41], DS.y[40:41], batch_id="one-more")  # not released yet
    _add_all(ws["a"])
    assert r.exists(Keys("a").acc(_sched(r, "a").released + 1))
    assert _relative(r, "a") == _relative(r, "b")
    for n in ("a", "b"):
        end = _sched(r, n).end
        assert ws[n].closer.tick(end - 0.001) == 0  # not before its end...
        assert ws[n].closer.tick(end + 0.001) == 1  # ...and at its end, with or without the record
    assert _sched(r, "a").released == _sched(r, "b").released


def test_every_entry_counts_once_across_windows_of_several_lengths(r):
    spec = _model(r)
    w = _worker(r)
    p = Producer(r, "m")
    t, pushed, lengths = _sched(r).end - EVERY, [], set()
    for k in range(30):  # bursts and idle stretches
        t += EVERY * (1 + (k % 7))
        if k % 3 != 2:
            idx = np.arange(10 * k, 10 * k + 10) % len(DS.y)
            p.push(DS.X[idx], DS.y[idx], batch_id=f"b{k}")
            pushed.append(idx)
            _add_all(w)
        _run_to(w, r, "m", t)
        lengths.add(_sched(r).length)
    _run_to(w, r, "m", t + 2 * MAX_LAG)
    assert not w.closer.holds_unreleased()
    exact = PrivateForest(spec.schema, spec.structure, epsilon=math.inf).noisy_delta(
        DS.X[np.concatenate(pushed)], DS.y[np.concatenate(pushed)]
    )
    np.testing.assert_array_equal(_published(r, "m", spec), exact)  # nothing lost, nothing counted twice
    s = _sched(r)
    assert len(lengths) >= 3 and max(lengths) <= 8 * EVERY and min(lengths) >= EVERY
    info = show_model(r, "m")
    assert info["windows"] == s.released > s.merged == info["releases"] == info["version"]  # empty ones left out


def test_an_idle_model_keeps_its_published_counts_and_releases_rarely(r):
    spec = _model(r)
    w = _worker(r, delta_ttl_s=0)
    Producer(r, "m").push(DS.X[:100], DS.y[:100])
    _add_all(w)
    t = _sched(r).end
    _run_to(w, r, "m", t + 0.001)
    before, version = _published(r, "m", spec).copy(), show_model(r, "m")["version"]
    released = _sched(r).released
    _run_to(w, r, "m", t + 3600 * EVERY)  # 3,600 windows of the clock
    assert _sched(r).released - released <= 4 + math.ceil(3600 / 8)  # doubling to 8 windows, then every 8
    np.testing.assert_array_equal(_published(r, "m", spec), before)
    assert show_model(r, "m")["version"] == version
    assert not r.keys("*priv:acc:*") and not r.keys("*wdelta*")  # left-out windows leave nothing behind


def test_a_grown_model_leaves_out_releases_that_carry_only_noise(r):
    spec = _model(r, epsilon=1.0, release="grow", max_lag=4 * EVERY / LAG_SHARE)
    w = _worker(r)
    Producer(r, "m").push(DS.X, DS.y)
    _add_all(w)
    t = _sched(r).end
    _run_to(w, r, "m", t + 0.001)
    blob, s = r.hget(Keys("m").pub_model, "blob"), _sched(r)
    assert s.merged == 1 and s.last > 3 * w.closer.windows.sd  # 435 records stand clear of the noise
    _run_to(w, r, "m", t + 200 * EVERY)
    s2 = _sched(r)
    assert s2.released - s.released <= 2 + 200 // 4
    # a left-out release changes nothing published; a noise-only release passes 3 sd rarely (alone or pooled)
    assert s2.merged - s.merged <= 2
    if s2.merged == s.merged:
        assert r.hget(Keys("m").pub_model, "blob") == blob
    assert load_spec(r, "m").height == spec.height


def test_the_worker_logs_cadence_changes_at_info(r, caplog):
    _model(r)
    w = _worker(r)
    with caplog.at_level(logging.INFO, logger="streamdp.worker"):
        _run_to(w, r, "m", _sched(r).end + (GRACE + 5) * EVERY)  # the grace's windows, then the ramp
    events = [json.loads(rec.getMessage()) for rec in caplog.records if "worker.cadence" in rec.getMessage()]
    assert [e["length_s"] for e in events][:2] == [4 * EVERY, 8 * EVERY]
    assert all(e["merged"] is False and e["noisy_records"] == 0 for e in events)
    # one numbering: the window a line names is the history's window of the same noisy count, then the next one
    history = {e["window"]: e for e in read_history(r, "m")}
    assert all(history[e["window"]]["noisy_records"] == e["noisy_records"] for e in events)
    assert all(e["next_window"] == e["window"] + 1 for e in events)


def test_model_show_prints_the_window_the_records_per_release_the_noise_and_the_lag_bound(r):
    _model(r, epsilon=1.0)
    w = _worker(r)
    Producer(r, "m").push(DS.X[:200], DS.y[:200])
    _add_all(w)
    _run_to(w, r, "m", _sched(r).end + 0.001)
    info = show_model(r, "m")
    text = "\n".join(_cadence_lines(info))
    assert f"window now      {_sched(r).length:g} s" in text
    assert "noisy records in the last one" in text and f"{MAX_LAG:g} s" in text
    assert info["cell_sd"] == pytest.approx(math.sqrt(2 * math.exp(-0.25) / math.expm1(-0.25) ** 2))
    assert info["cadence"] == Cadence(MAX_LAG, grace=GRACE).to_dict()
    assert info["merge_bar"] == pytest.approx(3 * w.closer.windows.sd)  # the worker's own bar
    assert f"stands above {info['merge_bar']:,.0f}" in text


def test_model_show_states_the_noise_per_cell_the_grown_releases_draw(r):
    """A trial's finding: under ``grow`` the first release noises the random trees' counts with what the probe
    leaves of their budget (0.9 of it), while ``model show`` gave the later releases' sd alone. Read against
    the published release: a leaf's noise variance is the first release's, and grows by one release's."""
    _model(r, epsilon=4.0, release="grow")
    w = _worker(r)
    info = show_model(r, "m")
    assert info["first_cell_sd"] > info["cell_sd"] > 0
    assert "added to each published count (cell) by each merged release, one draw each (the first release: up to " in (
        "\n".join(_cadence_lines({**info, "schedule": {"length": EVERY, "released": 0, "merged": 0, "total": 0}}))
    )
    T = info["n_trees"]
    leaf_var = []
    for lo, hi in ((0, 300), (300, len(DS.y))):
        Producer(r, "m").push(DS.X[lo:hi], DS.y[lo:hi])
        _add_all(w)
        _run_to(w, r, "m", _sched(r).end + 0.001)
        f = PrivateForest.from_bytes(r.hget(Keys("m").pub_model, "blob"))
        assert f.n_releases == len(leaf_var) + 1 and np.all(f.structure.n_leaves[:T] > 1)  # (grown from the roots)
        leaf_var.append(f.node_variance[:T][f.structure.leaf[:T] >= 0])
    assert leaf_var[0] == pytest.approx(info["first_cell_sd"] ** 2)  # every leaf of the first release
    # the second release kept the trees (height 3, grown whole by the first): each leaf added one draw
    assert leaf_var[1] - leaf_var[0] == pytest.approx(info["cell_sd"] ** 2)


def test_model_show_states_the_noise_per_cell_a_window_release_draws(r):
    _model(r, epsilon=1.0)
    w = _worker(r)
    info = show_model(r, "m")
    assert info["cell_sd"] ** 2 == pytest.approx(w.closer._release_variance()) and "first_cell_sd" not in info
    assert (
        "one draw each\n"
        in "\n".join(_cadence_lines({**info, "schedule": {"length": EVERY, "released": 0, "merged": 0, "total": 0}}))
        + "\n"
    )


@pytest.mark.parametrize(
    "kw,word",
    [
        ({"release": "tree", "max_lag": 20.0}, "max_lag"),
        ({"release": "batch", "max_lag": 20.0}, "max_lag"),
        ({"release": "window", "mechanism": "kanon", "k": 2, "beta": 0.1, "max_lag": 20.0}, "max_lag"),
        ({"release": "window", "max_lag": 5.0}, "at least release_every"),
        ({"release": "window", "max_lag": "soon"}, "max_lag"),
    ],
)
def test_max_lag_is_refused_where_it_cannot_apply(r, kw, word):
    every = None if kw.get("release") == "batch" else EVERY
    with pytest.raises(ValueError, match=word):
        create_model(r, "m", DS.schema, n_trees=2, height=2, epsilon=1.0, release_every=every, **kw)
    assert not r.exists(Keys("m").spec)


def test_models_without_a_cadence_keep_the_clock(r):
    create_model(r, "t", DS.schema, n_trees=2, height=2, epsilon=1.0, release="tree", release_every=EVERY)
    assert r.hget(Keys("t").state, "cadence") is None and "schedule" not in show_model(r, "t")
