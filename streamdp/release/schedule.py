"""The public release schedule: windows of ``release_every`` seconds from the model's creation.

A function of the clock alone, so when releases happen reveals nothing about the data.
"""

from __future__ import annotations

import math

__all__ = ["window_index", "window_end", "windows_due", "windows_closed"]


def window_index(t: float, start: float, release_every: float) -> int:
    """The 1-based window holding wall-clock time ``t``: window ``w`` is ``[start + (w-1)*every, start + w*every)``.

    >>> window_index(10.0, 10.0, 1.0), window_index(12.5, 10.0, 1.0)
    (1, 3)
    """
    if t < start:
        raise ValueError(f"time {t} is before the schedule's start {start}")
    return math.floor((t - start) / release_every) + 1


def window_end(w: int, start: float, release_every: float) -> float:
    """Wall-clock time at which window ``w`` closes (and is released)."""
    return start + w * release_every


def windows_due(now: float, start: float, release_every: float, released: int) -> range:
    """Windows closed by ``now`` and not yet released, in order: every one must be released, empty or not.

    A function of the clock only, so the number of releases reveals nothing about the data.

    >>> list(windows_due(13.2, 10.0, 1.0, released=1))
    [2, 3]
    """
    return range(released + 1, windows_closed(now, start, release_every) + 1)


def windows_closed(now: float, start: float, release_every: float) -> int:
    """How many windows have closed by ``now`` (public: the clock only).

    >>> windows_closed(13.2, 10.0, 1.0), windows_closed(9.0, 10.0, 1.0)
    (3, 0)
    """
    return max(0, math.floor((now - start) / release_every))
