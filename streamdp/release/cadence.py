"""Cadence from released values: how long each release window of a stream model is, and which releases the
published estimate merges.

A windowed stream model (``release="window"`` or ``"grow"``) releases the exact tally of each window once,
noised. With a fixed clock every window costs one noise draw per count, whether it holds records or not, so an
idle worker wears a good model down. Here a window's length follows the *released* record rate instead:

* after each release the next window's length is chosen from released numbers only: the release's noisy
  record total ``n`` (the prior stumps' class totals of the release, :func:`release_total`) and the noisy
  totals of the releases merged before. While a release cannot be told from an empty one (``n <= keep_z`` sd of
  its noise), the next window is four times as long; once data flow, the next window is the shortest on the grid
  ``release_every * 2**j`` expected, at the last release's noisy rate, to hold ``growth`` times the records
  merged before that release (at least ``keep_z`` sd), at most four times the last one and never longer than
  :data:`LAG_SHARE` of ``max_lag`` seconds (how long a record can wait to be published). Idle stretches then release
  ``O(log(idle / release_every) + idle / max_lag)`` times instead of ``idle / release_every``; a steady
  stream's releases grow up to ``max_lag`` (the least noise for the lag the user chose), so the
  published noise grows with the logarithm of the records, not with the clock; and a burst that holds more
  records than the model had before shortens the windows toward ``release_every`` (those releases are worth
  their noise);
* :func:`keeps`: a release whose noisy total does not stand ``keep_z`` sd above zero is left out of the
  published estimate (the counts stay as they were; its records are lost to the estimate, which is the
  measured cost of the rule), so idle windows and the empty ones before the first record cost no accuracy;
  unless the releases that did not stand clear on their own, the last :data:`POOL` of them with this one,
  stand clear together (``keep_z * sd * sqrt(m)`` for ``m`` of them): a trickle too slow for one window of
  ``max_lag`` to hold ``keep_z`` sd of records is then merged once its releases add up (a burst that stands
  clear alone does not count, so the idle windows after it are still left out).

Privacy (proof sketch: adaptive parallel composition, Dwork & Roth's adaptive composition applied to
disjoint windows). Windows ``W_1, W_2, ...`` partition the stream by the time a worker adds an entry: the
add script puts each entry in the one open window, and sealing moves the open window on exactly once
(:mod:`streamdp.service.windows`), so each record lies in exactly one window. Window ``k+1``'s end is
``end_k + length_{k+1}``, and :meth:`Schedule.after` computes ``length_{k+1}`` from the public
:class:`Cadence`, the clock and the released outputs ``R_1..R_k`` alone (it never sees a record, a count or
an arrival); it is sealed only after ``R_k`` is released. For neighbouring streams differing in one record
``r``: given the same ``R_1..R_{j-1}``, every window up to ``W_j`` (the one holding ``r``) has the same bounds
and the same records, so ``R_1..R_{j-1}`` have the same distribution; ``R_j`` is the only release whose input
differs (by one record: ``epsilon`` per tree); and given ``R_1..R_j``, every later window has the same bounds
and the same records again. The whole transcript is therefore ``epsilon``-DP per tree, the schedule costs
nothing, and so does :func:`keeps` (a function of ``R_k`` itself: post-processing). What must never feed the
schedule: exact counts, the number of records, the arrival of a record.

>>> c = Cadence(max_lag=0.16 / LAG_SHARE)
>>> s = Schedule.first(start=0.0, release_every=0.02)
>>> for n in (0.0, 0.0, 0.0, 0.0, 0.0):  # idle: every release noise only
...     s = s.after(n, sd=35.0, cadence=c, release_every=0.02)
>>> round(s.length, 2), s.merged
(0.16, 0)
>>> s = s.after(800.0, 35.0, c, 0.02)  # records flow: 800 in 0.16 s, merged; 105 (3 sd) are due in 0.04 s
>>> round(s.length, 2), s.merged, s.total
(0.04, 1, 800.0)
>>> s = s.after(200.0, 35.0, c, 0.02)  # the next should hold twice the 800 merged before: 0.32 s, at most 0.16
>>> round(s.length, 2), s.merged, s.total
(0.16, 2, 1000.0)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from streamdp.validation import Interval

__all__ = [
    "DEFAULT_MAX_LAG",
    "KEEP_Z",
    "GROWTH",
    "POOL",
    "LAG_SHARE",
    "GRACE",
    "Cadence",
    "Schedule",
    "keeps",
    "release_total",
    "total_sd",
    "schedule_of",
]

#: The longest a window may be by default (seconds): how long a record may wait to be published.
DEFAULT_MAX_LAG = 300.0
#: A release is merged when its noisy record total exceeds this many sd of its noise (an empty release passes
#: with probability about 0.0013 under Gaussian-like noise).
KEEP_Z = 3.0
#: The next release should hold this many times the records merged before the last one.
GROWTH = 2.0
#: How many of the last releases that did not stand clear on their own the merge rule pools.
POOL = 32
#: The longest window is this share of ``max_lag``: the rest is the time a worker takes to read and add a record and
#: to release its window, so a record is published within ``max_lag`` of its push while workers keep up.
LAG_SHARE = 0.9
#: A window may be at most ``2**STEP`` times the one before it (half the releases a ramp of doublings takes to
#: reach ``max_lag``: each one less noise draw on every count).
STEP = 2
#: A service model's grace (:attr:`Cadence.grace`): its first windows stay ``release_every`` long until one is merged,
#: so records pushed soon after ``model create`` are published within a window or two, where the idle ramp would
#: hold them for a window four times longer (a few more releases of noise, left out).
GRACE = 8


@dataclass(frozen=True)
class Cadence:
    """The public rule of a model's window lengths (stored with its release policy, fixed for its life).

    ``max_lag``: the longest window (seconds, at least the policy's ``release_every``); ``keep_z``: the
    merge rule's threshold in sd of a release's total; ``growth``: the records the next release should hold,
    as a multiple of those merged so far; ``grace``: how many first windows stay ``release_every`` long while
    nothing is merged (0: the idle ramp starts at once; a service model gets :data:`GRACE`; one stored without
    the field has none).

    >>> Cadence.from_dict(Cadence(5.12).to_dict())
    Cadence(max_lag=5.12, keep_z=3.0, growth=2.0, grace=0)
    >>> Cadence.from_dict({"max_lag": 5.12, "keep_z": 3.0, "growth": 2.0}).grace
    0
    >>> Cadence(0.0)
    Traceback (most recent call last):
    ...
    ValueError: max_lag must be a number in (0, inf), got 0.0
    """

    max_lag: float = DEFAULT_MAX_LAG
    keep_z: float = KEEP_Z
    growth: float = GROWTH
    grace: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "max_lag", Interval(float, 0, math.inf, closed="neither").check(self.max_lag, "max_lag")
        )
        object.__setattr__(self, "keep_z", Interval(float, 0, 100).check(self.keep_z, "keep_z"))
        object.__setattr__(self, "growth", Interval(float, 0, 100).check(self.growth, "growth"))
        object.__setattr__(self, "grace", Interval(int, 0, 1000).check(self.grace, "grace"))

    def longest(self, release_every: float) -> float:
        """The longest window (seconds): :data:`LAG_SHARE` of ``max_lag`` (the rest is left for a worker to add a
        record and release its window), never shorter than ``release_every``."""
        return max(LAG_SHARE * self.max_lag, release_every)

    def levels(self, release_every: float) -> int:
        """The longest window's level ``J``: the first ``j`` with ``release_every * 2**j`` at least :meth:`longest`."""
        return max(0, math.ceil(math.log2(self.longest(release_every) / release_every) - 1e-9))

    def length(self, level: int, release_every: float) -> float:
        """A window's length at ``level`` (seconds): ``release_every * 2**level``, at most :meth:`longest`."""
        return min(release_every * 2.0**level, self.longest(release_every))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Any) -> Cadence:
        if not isinstance(d, dict) or not {"max_lag", "keep_z", "growth"} <= set(d) <= {*_FIELDS}:
            got = sorted(d) if isinstance(d, dict) else type(d).__name__
            raise ValueError(f"a cadence is a map of max_lag, keep_z, growth and optionally grace; got {got}")
        return cls(**d)

    def __str__(self) -> str:
        return f"windows from the release rate, at most {self.max_lag:g} s (a record waits at most that long)"


def keeps(total: float, sd: float, keep_z: float) -> bool:
    """Whether a release with noisy record total ``total`` (noise sd ``sd``) is merged into the published estimate:
    it stands ``keep_z`` sd above an empty release's (without noise: any record at all). Post-processing.

    >>> keeps(120.0, 35.0, 3.0), keeps(100.0, 35.0, 3.0), keeps(1.0, 0.0, 3.0), keeps(0.0, 0.0, 3.0)
    (True, False, True, False)
    """
    return bool(total > keep_z * sd)


def release_total(stumps: np.ndarray, budget: str, n_rows: int) -> float:
    """A release's noisy record total from its prior stumps' released class counts ``stumps`` (``(P, C)``, the
    delta the release adds to the stumps): their mean total; with the disjoint budget each record lands in one of
    the ``n_rows`` trees (stumps included), so the stumps' mean total times ``n_rows``.

    >>> release_total(np.array([[3, 4], [5, 6]]), "split", 12), release_total(np.array([[3, 4]]), "disjoint", 4)
    (9.0, 28.0)
    """
    stumps = np.asarray(stumps, dtype=np.float64)
    mean = float(stumps.sum(axis=-1).mean())
    return mean * n_rows if budget == "disjoint" else mean


def total_sd(cell_var: float, n_classes: int, prior_trees: int, budget: str, n_rows: int) -> float:
    """The noise sd of :func:`release_total` (public): ``C`` cells of variance ``cell_var`` per stump, averaged over
    the ``P`` stumps (times ``n_rows`` with the disjoint budget).

    >>> round(total_sd(2.0, 2, 2, "split", 12), 3)
    1.414
    """
    sd = math.sqrt(cell_var * n_classes / prior_trees)
    return sd * n_rows if budget == "disjoint" else sd


_FIELDS = ("max_lag", "keep_z", "growth", "grace")


@dataclass(frozen=True)
class Schedule:
    """The public state of a model's windows after ``released`` releases: window ``released + 1`` (the open one)
    ends at ``end`` (epoch seconds) and is ``length`` seconds long (``level`` on the grid); ``merged`` releases
    make up the published estimate, holding ``total`` noisy records; ``last`` is the last release's noisy total
    (None before the first); ``pool`` the noisy totals of the last releases that could not be told from an
    empty one alone (:data:`POOL` at most). Every field is a function of the clock, the :class:`Cadence` and released values.
    """

    released: int
    end: float
    length: float
    level: int = 0
    merged: int = 0
    total: float = 0.0
    last: float | None = None
    pool: tuple[float, ...] = ()

    @classmethod
    def first(cls, start: float, release_every: float) -> Schedule:
        """Before any release: window 1 is ``[start, start + release_every)``."""
        return cls(0, start + release_every, release_every)

    def due(self, now: float) -> int:
        """How many windows have ended by ``now``, as far as this state knows: the open one's end decides
        (a later one's end is fixed by the open one's release)."""
        return self.released + 1 if now >= self.end else self.released

    def after(self, total: float, sd: float, cadence: Cadence, release_every: float) -> Schedule:
        """The state once the open window is released with noisy record total ``total`` (noise sd ``sd``): whether
        it is merged (:func:`keeps`) and the next window's length (the module docstring's rule) on the grid of
        ``release_every`` (the policy's shortest window)."""
        every = release_every
        kept, pool = keeps(total, sd, cadence.keep_z), self.pool
        if not kept:  # a release that cannot be told from an empty one alone: pooled with the like before it
            pool = (*self.pool, float(total))[-POOL:]
            kept = keeps(sum(pool), sd * math.sqrt(len(pool)), cadence.keep_z)
        merged, records = (self.merged + 1, self.total + total) if kept else (self.merged, self.total)
        top = min(self.level + STEP, cadence.levels(every))
        if merged == 0 and self.released + 1 < cadence.grace:
            top = 0  # (the released and merged counts are public: the grace is post-processing too)
        if not kept or total <= 0:
            level = top
        else:
            target = max(cadence.keep_z * sd, cadence.growth * self.total)  # the records merged before this one
            ideal = target * self.length / total  # the records expected per second, times the target
            level = 0
            while level < top and cadence.length(level, every) < ideal:
                level += 1
        length = cadence.length(level, every)
        return replace(
            self,
            released=self.released + 1,
            end=self.end + length,
            length=length,
            level=level,
            merged=merged,
            total=records,
            last=float(total),
            pool=pool,
        )

    def to_dict(self) -> dict:
        return {**asdict(self), "pool": list(self.pool)}

    @classmethod
    def from_dict(cls, d: Any) -> Schedule:
        fields = {"released", "end", "length", "level", "merged", "total", "last", "pool"}
        if not isinstance(d, dict) or set(d) != fields:
            got = sorted(d) if isinstance(d, dict) else type(d).__name__
            raise ValueError(f"a window schedule is a map of {', '.join(sorted(fields))}; got {got}")
        return cls(**{**d, "pool": tuple(float(x) for x in d["pool"])})


def schedule_of(start: float, release_every: float, cadence: Cadence, totals: list[float], sd: float) -> Schedule:
    """The schedule after releases with noisy record totals ``totals`` (each with noise sd ``sd``): a function of
    the clock's start, the public cadence and released values only.

    >>> s = schedule_of(0.0, 1.0, Cadence(8.0 / LAG_SHARE), [0.0, 0.0, 0.0], sd=10.0)
    >>> s.released, s.length, s.end   # windows of 1, 4 and 8 s were released; the next is 8 s long too
    (3, 8.0, 21.0)
    """
    s = Schedule.first(start, release_every)
    for t in totals:
        s = s.after(t, sd, cadence, release_every)
    return s
