"""A windowed model's release history: one public line per released window, for ``streamdp model history``.

The closer appends, in each release's own MULTI/EXEC (merged or left out), a JSON line to the capped list
``sdp:{NAME}:pub:history`` (the last :data:`HISTORY_LEN` windows): the window, the version it published, whether
it was merged, the window's scheduled end (public: never the wall clock of the close, whose delay would tell how
busy the window was), the window's length, the release's noisy record count, the published counts' noise sd per
cell (``cell_sd``: every merged release's noise, accumulated) and the noise sd the release itself drew per count
(``release_sd``: ``"window"``'s on each count, ``"grow"``'s on each node it releases, by
:meth:`~streamdp.release.policy.ReleasePolicy.first_node_epsilon`'s rule on a fresh forest's first release;
absent for ``"tree"``, whose nodes each draw their own, and in lines written before the field).
The time (``time``) is the window's scheduled end, not when the release was made: no release time is stored.
Every field is public: the clock, the model's parameters and released values (no exact count, no arrival time of
a record). Windows are numbered from 1 (the first window after ``model create``), as in the worker's log lines.

>>> e = entry(3, 2, True, 1700000000.0, 0.5, 41.26, 12.0, 4.0)
>>> e == {"window": 3, "version": 2, "merged": True, "time": 1700000000.0, "length_s": 0.5,
...       "noisy_records": 41.3, "cell_sd": 12.0, "release_sd": 4.0}
True
"""

from __future__ import annotations

import json
from typing import Any

from streamdp.service.connection import connect
from streamdp.service.keys import Keys

__all__ = ["HISTORY_LEN", "FLOORED", "entry", "append", "read_history", "at_floor"]

#: Windows the history keeps (the oldest fall off): a few hundred KiB per model at most.
HISTORY_LEN = 4096


def entry(
    window: int,
    version: int,
    merged: bool,
    time_s: float,
    length_s: float,
    noisy_records: float | None,
    cell_sd: float,
    release_sd: float | None = None,
) -> dict[str, Any]:
    """One history line (public values only; ``noisy_records`` None where a release has no record count)."""
    line = {
        "window": int(window),
        "version": int(version),
        "merged": bool(merged),
        "time": round(float(time_s), 3),
        "length_s": round(float(length_s), 6),
        "noisy_records": None if noisy_records is None else round(float(noisy_records), 1),
        "cell_sd": round(float(cell_sd), 4),
    }
    if release_sd is not None:
        line["release_sd"] = round(float(release_sd), 4)
    return line


#: The release policies whose noisy record count a window's release floors at 0 (``window``:
#: :func:`.forgetting.release_records`; ``grow``'s is the stumps' total as released, negative at times; ``tree``
#: has none).
FLOORED = ("window",)


def at_floor(line: dict[str, Any], kind: str) -> bool:
    """Whether history ``line`` of a model of release policy ``kind`` holds a noisy record count the release
    floored at 0: the window's noisy total came out at or below 0 (stored as 0 all the same). Why: a reader must
    not take that 0 for an exact count of none. Reads the stored line only: nothing released or stored changes.

    >>> at_floor({"noisy_records": 0.0}, "window"), at_floor({"noisy_records": 0.0}, "grow")
    (True, False)
    >>> at_floor({"noisy_records": 3.5}, "window"), at_floor({"noisy_records": None}, "tree")
    (False, False)
    """
    return kind in FLOORED and line.get("noisy_records") == 0


def append(p: Any, keys: Keys, line: dict[str, Any]) -> None:
    """Queue the append of ``line`` on pipeline ``p`` (inside the release's MULTI), capped at :data:`HISTORY_LEN`."""
    p.rpush(keys.pub_history, json.dumps(line))
    p.ltrim(keys.pub_history, -HISTORY_LEN, -1)


def read_history(r: Any, name: str) -> list[dict[str, Any]]:
    """Model ``name``'s release history, oldest first (empty: nothing released yet, or a ``batch`` model)."""
    return [json.loads(x) for x in connect(r).lrange(Keys(name).pub_history, 0, -1)]
