"""Retention of a model's raw records (for batch jobs): how long and how many, never past unacked entries.

Policy, per model, in the hash ``sdp:{NAME}:priv:retention`` (fields ``seconds``, ``records``):

* nothing set (the default): keep nothing beyond what the stream workers have
  not acknowledged yet (merged records are trimmed);
* ``seconds=S``: keep acknowledged records at most ``S`` seconds old (by stream id time);
* ``records=N``: keep at most the ``N`` newest records (stream entries);
* both: both caps apply (the smaller window wins).

When a model starts keeping records (from nothing) the hash also records ``since_version``, the model's
published version then, and ``set_at`` (epoch seconds): public values, so a job can be refused before any
charge when the records merged before were trimmed and no release has been merged since
(:func:`retention_refusal`). Changing the caps keeps both.

The stream worker's trim enforces it with ``XTRIM MINID`` where
``MINID = min(oldest pending id, max(time cutoff id, id of the N-th newest entry))``:
an entry that is still pending (unacked) or not yet delivered is never dropped,
whatever the policy says.

>>> trim_minid("5-0", None)
'5-0'
>>> trim_minid("5-0", "3-1"), trim_minid("5-0", "7-0")
('3-1', '5-0')
>>> retention_floor(Retention(seconds=10), now_ms=60_000, nth_newest=None)
'50000-0'
>>> retention_floor(Retention(seconds=10, records=2), now_ms=60_000, nth_newest="55000-0")
'55000-0'
>>> retention_floor(Retention(), now_ms=60_000, nth_newest=None) is None
True
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import redis

from streamdp.service.keys import Keys, as_str
from streamdp.validation import Interval, check_integer

__all__ = [
    "Retention",
    "retention_refusal",
    "retention_key",
    "get_retention",
    "set_retention",
    "retention_floor",
    "trim_minid",
    "policy_minid",
]


@dataclass(frozen=True)
class Retention:
    """``seconds``/``records`` caps of the raw-record window; None = that cap is not set."""

    seconds: float | None = None
    records: int | None = None
    since_version: int | None = None
    set_at: float | None = None

    @property
    def keeps_nothing(self) -> bool:
        return self.seconds is None and self.records is None

    def to_dict(self) -> dict:
        return {"seconds": self.seconds, "records": self.records}  # (the caps; since_version/set_at: show)


def retention_key(name: str) -> str:
    """``sdp:{NAME}:priv:retention`` (worker-readable, consumer-invisible).

    >>> retention_key("votes")
    'sdp:{votes}:priv:retention'
    """
    return f"{Keys(name).prefix}:priv:retention"


def _check(seconds: float | None, records: int | None) -> None:
    if seconds is not None:
        Interval(float, 0, math.inf, closed="neither").check(seconds, "retention seconds")
    if records is not None:
        check_integer(records, "retention records")


def set_retention(r: Any, name: str, *, seconds: float | None = None, records: int | None = None) -> Retention:
    """Set the policy of model ``name`` (both None: back to the default, keep nothing acked). A model that kept
    nothing before gets ``since_version`` (its published version now) and ``set_at``; one that kept records
    keeps them."""
    _check(seconds, records)
    key = retention_key(name)
    cur = get_retention(r, name)
    since, at = cur.since_version, cur.set_at
    if cur.keeps_nothing:
        v = r.hget(Keys(name).pub_model, "version")
        since, at = (int(as_str(v)) if v is not None else None), time.time()
    p = r.pipeline(transaction=True)
    p.delete(key)
    caps = {k: repr(v) for k, v in (("seconds", seconds), ("records", records)) if v is not None}
    if caps:
        marks = {k: repr(v) for k, v in (("since_version", since), ("set_at", at)) if v is not None}
        p.hset(key, mapping={**caps, **marks})
    p.execute()
    if not caps:
        return Retention()
    return Retention(None if seconds is None else float(seconds), records, since, at)


def get_retention(r: Any, name: str) -> Retention:
    """The policy of model ``name`` (unreadable fields count as unset)."""
    s, n, v, at = r.hmget(retention_key(name), "seconds", "records", "since_version", "set_at")
    seconds, records = _parsed(s, float), _parsed(n, int)
    seconds, records = (seconds if seconds and seconds > 0 else None), (records if records and records > 0 else None)
    if seconds is None and records is None:
        return Retention()
    return Retention(seconds, records, _parsed(v, int), _parsed(at, float))


def _parsed(raw: Any, kind: type) -> Any:
    """``raw`` (bytes or str) as ``kind``, None when absent or unreadable."""
    try:
        return None if raw is None else kind(as_str(raw))
    except ValueError:
        return None


def parse_id(i: str) -> tuple[int, int]:
    """A stream id ``ms-seq`` as a pair of integers (comparable)."""
    ms, _, seq = i.partition("-")
    return int(ms), int(seq or 0)


def retention_floor(ret: Retention, *, now_ms: int, nth_newest: str | None) -> str | None:
    """The oldest stream id the policy keeps, or None when it keeps nothing.

    ``nth_newest``: the id of the ``records``-th newest entry (None if the
    stream holds fewer, i.e. the record cap keeps everything).
    """
    if ret.keeps_nothing:
        return None
    floors = []
    if ret.seconds is not None:
        floors.append(f"{max(int(now_ms - ret.seconds * 1000), 0)}-0")
    if ret.records is not None:
        floors.append(nth_newest or "0-0")
    return max(floors, key=parse_id)


def trim_minid(pending_floor: str, policy_floor: str | None) -> str:
    """``min(pending floor, policy floor)``: the MINID that keeps both the unacked entries and the window."""
    if policy_floor is None:
        return pending_floor
    return min(pending_floor, policy_floor, key=parse_id)


def policy_minid(r: Any, name: str, stream: str, ret: Retention | None = None) -> str | None:
    """The policy floor of model ``name`` read from Redis (server clock, ``XREVRANGE`` for the N-th newest);
    ``ret``: its retention, when the caller read it already."""
    ret = get_retention(r, name) if ret is None else ret
    if ret.keeps_nothing:
        return None
    sec, usec = r.time()
    nth = None
    if ret.records is not None:
        n, length = ret.records, int(r.xlen(stream))
        if length > n:
            # Walk from the cheaper end: at steady state only the entries added since the last trim lie past the cap.
            if length - n < n:
                nth = as_str(r.xrange(stream, "-", "+", count=length - n + 1)[-1][0])
            else:
                nth = as_str(r.xrevrange(stream, "+", "-", count=n)[-1][0])
    return retention_floor(ret, now_ms=int(sec) * 1000 + int(usec) // 1000, nth_newest=nth)


def retention_refusal(r: Any, name: str) -> str | None:
    """Why a job over model ``name``'s records would fit nothing but noise, from public values only; None if not.

    * no retention set: merged records are trimmed, so a job reads at most the few not merged yet;
    * the retention was set after the model had merged releases (``since_version`` > 0) and the published version
      has not moved since: the records merged before were trimmed, and no release has been merged since.

    Never from the records themselves (how many the stream holds is data): the setting, when it was set and the
    published version are public. Where this client may not read the setting: None (the check only spares a
    submitter a job over nothing; the job worker asks again before it charges).
    """
    try:
        ret = get_retention(r, name)
        version = r.hget(Keys(name).pub_model, "version")
    except redis.exceptions.NoPermissionError:
        return None
    if ret.keeps_nothing:
        return (
            f"model {name!r} keeps no merged records (no retention set), so a job over it would charge epsilon "
            f"for the few records not merged yet; set `streamdp model retention {name} --seconds S` before the "
            f"data is pushed (or create the model with --retention-seconds S); nothing was charged"
        )
    now = int(as_str(version)) if version is not None else 0
    if ret.since_version and now <= ret.since_version:
        at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ret.set_at or 0))
        return (
            f"model {name!r} started keeping records at version {ret.since_version} ({at}), after earlier releases "
            "whose records were not kept, and has published no version since: a job over it would charge epsilon "
            "to fit (almost) no record; push the data to learn from now (a job reads records pushed after the "
            f"retention was set) and wait for a new version (streamdp model show {name}); next time set "
            f"`streamdp model retention {name} --seconds S` (or model create --retention-seconds S) before "
            "pushing; nothing was charged"
        )
    return None
