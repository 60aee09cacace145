"""The cadence rule (pure): window lengths from released values, the merge rule, and a privacy audit of a whole
transcript of adaptive releases."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest

from streamdp.privacy.mechanisms import SecureRandom, geometric_noise
from streamdp.release import cadence
from streamdp.release.cadence import LAG_SHARE, Cadence, Schedule, keeps, release_total, schedule_of, total_sd
from tests.privacy.test_audit import epsilon_lower_bound


def test_doctests():
    assert doctest.testmod(cadence).failed == 0


def run(rate: float, seconds: float, every: float, c: Cadence, sd: float, rng, start: float = 0.0) -> list[Schedule]:
    """Releases of a stream of ``rate`` records a second (Poisson) with Gaussian noise of ``sd`` on each total."""
    s, out = Schedule.first(start, every), []
    while s.end <= start + seconds:
        n = rng.poisson(rate * s.length) + rng.normal(0, sd)
        s = s.after(float(n), sd, c, every)
        out.append(s)
    return out


def test_an_idle_model_releases_logarithmically_then_every_max_lag():
    c, every, sd = Cadence(max_lag=5.12 / LAG_SHARE), 0.02, 35.0
    hist = run(0.0, 72.0, every, c, sd, np.random.default_rng(1))
    lengths = [s.length for s in hist]
    assert lengths[:4] == pytest.approx([every * 4**k for k in range(1, 5)])  # four times as long, to 256 windows
    assert max(lengths) == pytest.approx(5.12)
    assert len(hist) <= 4 + math.ceil(72 / 5.12)  # against 3,600 windows on the clock
    assert hist[-1].merged == 0  # nothing but noise: nothing merged


def test_a_grace_keeps_the_first_windows_short_until_one_is_merged():
    c, every, sd = Cadence(max_lag=64.0 / LAG_SHARE, grace=4), 1.0, 10.0
    s, lengths = Schedule.first(0.0, every), []
    for _ in range(6):  # idle from creation: 4 windows of 1 s (the first included), then the ramp
        s = s.after(0.0, sd, c, every)
        lengths.append(s.length)
    assert [1.0, *lengths] == [1.0, 1.0, 1.0, 1.0, 4.0, 16.0, 64.0]
    s = Schedule.first(0.0, every).after(1_000.0, sd, c, every)  # records in the first window: merged, grace over
    assert s.merged == 1
    for _ in range(2):
        s = s.after(0.0, sd, c, every)
    assert s.length > every  # idle after a merge: the ramp at once, the grace is not spent again
    assert Cadence(8.0).grace == 0 and cadence.GRACE > 1  # the library's rule has none; a service model's has


def test_a_steady_stream_grows_its_releases_up_to_the_lag_bound():
    c, every, sd = Cadence(max_lag=5.12 / LAG_SHARE), 0.02, 35.0
    hist = run(500.0, 20.7, every, c, sd, np.random.default_rng(2))
    lengths = [s.length for s in hist]
    assert all(every - 1e-12 <= x <= LAG_SHARE * c.max_lag + 1e-12 for x in lengths)
    assert lengths[-1] == pytest.approx(5.12)
    assert hist[-1].merged <= 9  # about log4(records / first release) + stream / max_lag, not 1,000 windows
    assert hist[-1].total == pytest.approx(500 * 20.7, rel=0.3)


def test_windows_shrink_back_when_the_rate_rises():
    c, every, sd = Cadence(max_lag=64.0 / LAG_SHARE), 1.0, 10.0
    s = Schedule.first(0.0, every)
    for _ in range(4):
        s = s.after(0.0, sd, c, every)  # idle: up to 64 s
    assert s.length == 64.0
    s = s.after(6_400.0, sd, c, every)  # 100 a second, the first records: the next 30 (3 sd) are due in 1 s
    assert s.length == 1.0 and s.merged == 1
    for _ in range(4):  # steady: each release should hold twice what was merged before: up to 64 s
        s = s.after(100.0 * s.length, sd, c, every)
    assert s.length == 64.0
    s = s.after(64 * 100_000.0, sd, c, every)  # a burst of 100,000 a second: twice the merged records in 1 s
    assert s.length == 1.0


def test_lengths_never_leave_the_grid_and_max_lag_needs_not_be_on_it():
    c, every = Cadence(max_lag=3.0 / LAG_SHARE), 1.0
    s = Schedule.first(0.0, every)
    for _ in range(5):
        s = s.after(0.0, 1.0, c, every)
    assert s.length == 3.0 and c.levels(every) == 2
    assert s.after(0.0, 1.0, Cadence(max_lag=64.0 / LAG_SHARE), every).length == 16.0  # level 2 to 4: at most 4x a step
    assert Cadence(max_lag=1.0).length(5, 1.0) == 1.0  # max_lag = release_every: the clock's windows
    assert Cadence(max_lag=10.0).longest(1.0) == pytest.approx(9.0)  # the rest: a worker's time to add and release


def test_the_schedule_is_a_function_of_released_values_only():
    """Two streams that differ in records but give the same released totals get the same schedule: the rule reads
    released totals (and the clock's start and the public cadence), nothing else."""
    c, every, sd = Cadence(max_lag=8.0, grace=2), 1.0, 5.0
    totals = [3.0, -2.0, 40.0, 100.0, 7.0, 0.0, 250.0]
    a = schedule_of(10.0, every, c, totals, sd)
    b = Schedule.first(10.0, every)
    for t in totals:
        b = b.after(t, sd, c, every)
    assert a == b
    assert schedule_of(10.0, every, c, [*totals[:-1], 251.0], sd) != a  # released values do move it


def test_a_trickle_too_slow_for_one_window_is_merged_once_its_releases_add_up():
    c, every, sd = Cadence(max_lag=5.12 / LAG_SHARE), 0.02, 35.0
    rng = np.random.default_rng(3)
    hist = run(5.0, 300.0, every, c, sd, rng)  # 26 records a window of max_lag: each below 3 sd (105)
    assert hist[-1].merged >= len(hist) // 3  # pooled, they stand clear: most releases are merged in the end
    assert hist[-1].total == pytest.approx(5.0 * 300, rel=0.5)


def test_the_idle_windows_after_a_burst_are_still_left_out():
    c, every, sd = Cadence(max_lag=5.12 / LAG_SHARE), 0.02, 35.0
    s = Schedule.first(0.0, every).after(10_000.0, sd, c, every)  # a burst: stands clear alone, not pooled
    assert s.merged == 1 and s.pool == ()
    for _ in range(20):
        s = s.after(0.0, sd, c, every)
    assert s.merged == 1 and len(s.pool) == 20


def test_keeps_and_the_release_total():
    assert keeps(3.1 * 35, 35.0, 3.0) and not keeps(3.0 * 35, 35.0, 3.0)
    assert release_total(np.array([[1.0, 2.0, 3.0]]), "split", 11) == 6.0
    assert release_total(np.array([[1.0, 2.0], [3.0, 4.0]]), "split", 12) == 5.0
    assert total_sd(2.0, 5, 1, "split", 11) == pytest.approx(math.sqrt(10.0))
    assert total_sd(2.0, 5, 1, "disjoint", 11) == pytest.approx(11 * math.sqrt(10.0))


@pytest.mark.parametrize(
    "kw,word",
    [({"max_lag": -1.0}, "max_lag"), ({"max_lag": 1.0, "keep_z": -1.0}, "keep_z"), ({"growth": "x"}, "growth")],
)
def test_the_cadence_is_validated_naming_the_setting(kw, word):
    with pytest.raises(ValueError, match=word):
        Cadence(**kw)


def test_cadence_and_schedule_round_trip_and_refuse_other_maps():
    c = Cadence(5.12, 2.5, 0.5)
    assert Cadence.from_dict(c.to_dict()) == c
    s = Schedule.first(1.0, 0.02).after(120.0, 35.0, c, 0.02)
    assert Schedule.from_dict(s.to_dict()) == s
    with pytest.raises(ValueError, match="max_lag"):
        Cadence.from_dict({"max_lag": 1.0})
    with pytest.raises(ValueError, match="schedule"):
        Schedule.from_dict({"released": 1})


# -- an empirical epsilon audit of a whole transcript of adaptive releases --------------------------------------


AT = 0.5  # the neighbouring stream's extra record (the exact count of its window then stands at the keep rule's bar)


def _transcripts(extra: bool, n: int, eps: float, exact_schedule: bool = False) -> np.ndarray:
    """``n`` transcripts of one count released per window under the cadence (geometric noise at ``eps``): records
    arrive 1.5 a second, plus, with ``extra``, one record at ``AT``. Returns per transcript the released value
    of the window holding ``AT`` and the lengths of the three windows after it. ``exact_schedule``: a WRONG rule
    fed the exact counts (the audit's negative control)."""
    c, every = Cadence(max_lag=8.0, keep_z=2.0), 1.0
    sd = math.sqrt(2 * math.exp(-eps) / (1 - math.exp(-eps)) ** 2)
    times = np.arange(0.0, 60.0, 1 / 1.5) + 0.01
    if extra:
        times = np.sort(np.append(times, AT))
    noise = geometric_noise((n, 40), eps, SecureRandom())
    out = np.zeros((n, 4))
    for i in range(n):
        s, y, lengths = Schedule.first(0.0, every), None, []
        for k in range(40):
            lo, hi = s.end - s.length, s.end
            x = int(np.count_nonzero((times >= lo) & (times < hi)))
            noisy = x + int(noise[i, k])
            s = s.after(float(x if exact_schedule else noisy), sd, c, every)
            if lo <= AT < hi:
                y = noisy
            if y is not None:
                lengths.append(s.length)
                if len(lengths) == 3:
                    break
        out[i] = [y, *lengths]
    return out


def _events(t: np.ndarray) -> list[np.ndarray]:
    """The released value of the record's window at thresholds, alone and joint with the schedule after it."""
    ev = [t[:, 0] >= v for v in range(-2, 9)]
    for length in (1.0, 2.0, 4.0, 8.0):
        ev.append(t[:, 1] == length)
        ev += [(t[:, 1] == length) & (t[:, 0] >= v) for v in (2, 4, 6)]
    return ev


@pytest.mark.slow
def test_an_adaptive_transcript_is_no_more_than_epsilon_private():
    """Neighbouring streams (one record more at 4.5 s) through the cadence: no event of the released value of the
    record's window and the schedule after it proves more than the declared epsilon; the same audit against a rule
    that reads exact counts proves far more (the audit has power)."""
    n, eps = 20_000, 1.0
    e0, e1 = _events(_transcripts(False, n, eps)), _events(_transcripts(True, n, eps))
    bound = epsilon_lower_bound([int(e.sum()) for e in e0], [int(e.sum()) for e in e1], n)
    assert bound <= eps, bound
    w0, w1 = _events(_transcripts(False, n, eps, True)), _events(_transcripts(True, n, eps, True))
    leaky = epsilon_lower_bound([int(e.sum()) for e in w0], [int(e.sum()) for e in w1], n)
    assert leaky > 2 * eps, leaky
