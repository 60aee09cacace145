"""Trimming a model's record stream: merged entries go once the retention window has passed them.

``XTRIM MINID`` never drops an unacked entry, and keeps the model's retention window
(:mod:`.retention`); entries a producer dated ahead of the clock are deleted by id once merged; group
consumers of dead workers with nothing pending are forgotten. The dead-letter stream is trimmed to the same
retention window (its newest N entries, or those younger than S seconds) where the model retains records; where it
retains none, dead letters hold nothing of their payload but its size (:func:`.codec.entry_detail`) and only
``dead_maxlen`` bounds them. Used by the stream worker
(:class:`.stream_worker.Worker`) every ``trim_every`` commits and while the stream is idle.
"""

from __future__ import annotations

import logging

import redis

from streamdp.service.keys import GROUP, Keys, as_str
from streamdp.service.log import jlog
from streamdp.service.retention import Retention, get_retention, parse_id, policy_minid, trim_minid

__all__ = ["StreamTrimmer"]

log = logging.getLogger("streamdp.worker")

FORGET_LUA = """
local p = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if #p > 0 then return 0 end
redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
return 1
"""


class StreamTrimmer:
    """Trim ``keys``' record stream as ``consumer`` (who is never forgotten by its own trims).

    ``forget_consumers_s``: group consumers idle this long with nothing pending are removed (0: never).
    """

    #: An entry id more than this far ahead of the server's clock was given by its producer (XADD with an id).
    FUTURE_ID_SLACK_MS = 60_000

    def __init__(self, r: redis.Redis, keys: Keys, consumer: str, *, forget_consumers_s: float = 3600.0):
        self.redis, self.keys, self.model, self.consumer = r, keys, keys.name, consumer
        self.forget_consumers_s = forget_consumers_s
        self._forget = r.register_script(FORGET_LUA)
        #: the model's retention as last read (the worker keeps payload heads in dead letters only where it retains)
        self.retention: Retention = get_retention(r, keys.name)

    def trim(self) -> int:
        """XTRIM MINID: never drops an unacked entry, keeps the model's retention window (:mod:`.retention`).

        ``MINID = min(oldest pending id (or the id just after the last delivered one), retention floor)``:
        with nothing pending every delivered entry is acked, the last one included (XTRIM MINID keeps
        the entry equal to MINID, so MINID must be past it, or a merged batch would stay in Redis).
        Returns how many entries went; a Redis error is logged and trims nothing (the next trim retries).
        """
        try:
            groups = self.redis.xinfo_groups(self.keys.records)  # read before XPENDING: see docs/service.md
            g = next((g for g in groups if as_str(g["name"]) == GROUP), None)
            if g is None:
                return 0
            last = as_str(g["last-delivered-id"])
            pend = self.redis.xpending(self.keys.records, GROUP)
            minid = as_str(pend["min"]) if pend and pend.get("pending") else _next_id(last)
            if minid in ("0-0", "None"):
                return 0
            ret = self.retention = get_retention(self.redis, self.model)
            self.trim_dead(ret)
            minid = trim_minid(minid, policy_minid(self.redis, self.model, self.keys.records, ret))
            if minid == "0-0":
                return 0
            n = self.redis.xtrim(self.keys.records, minid=minid, approximate=False)
            if ret.seconds is not None:  # (nothing kept: MINID passed them; the newest N kept: they are among them)
                n += self._trim_future(last, as_str(pend["min"]) if pend and pend.get("pending") else None)
            if n:
                self.redis.hincrby(self.keys.stats, "trimmed", n)
            self.forget_idle_consumers()
            return int(n)
        except redis.RedisError as err:
            if isinstance(err, redis.ResponseError) and "no such key" in str(err):
                return 0  # the stream is gone (the model deleted): nothing to trim, nothing failed
            jlog(log, logging.WARNING, "worker.trim_failed", model=self.model, error=str(err))
            return 0

    def trim_dead(self, ret: Retention) -> int:
        """Trim the dead-letter stream to the retention window ``ret`` (nothing when it retains no records: then
        dead letters keep no payload bytes and ``dead_maxlen`` caps them). The batch ids written once
        (``priv:dead_batches``, :mod:`.commit`) older than the floor go with them. Returns how many letters went."""
        floor = policy_minid(self.redis, self.model, self.keys.dead, ret)
        if floor is None or floor == "0-0":
            return 0
        self.redis.zremrangebyscore(self.keys.dead_batches, "-inf", f"({floor.partition('-')[0]}")
        n = int(self.redis.xtrim(self.keys.dead, minid=floor, approximate=False))
        if n:
            self.redis.hincrby(self.keys.stats, "dead_trimmed", n)
        return n

    def _trim_future(self, last: str, pending_min: str | None) -> int:
        """Delete merged entries whose ids a producer set ahead of the clock (where retention is bounded in
        time): MINID trimming goes by id, so they would outlive the policy by as long as the producer chose.
        Only entries delivered (at most ``last``) and acked (below ``pending_min``) go."""
        sec, usec = self.redis.time()
        start = f"{int(sec) * 1000 + int(usec) // 1000 + self.FUTURE_ID_SLACK_MS}-0"
        last_id, low = parse_id(last), parse_id(pending_min) if pending_min else None
        n = 0
        for _ in range(100):  # pages of 1,000 (a backlog drains over trims)
            future = [as_str(i) for i, _ in self.redis.xrange(self.keys.records, start, "+", count=1000)]
            ids = [i for i in future if parse_id(i) <= last_id and (low is None or parse_id(i) < low)]
            n += int(self.redis.xdel(self.keys.records, *ids)) if ids else 0
            if len(future) < 1000 or len(ids) < len(future):
                break  # the end, or entries not merged yet (they stay until they are)
            start = "(" + future[-1]
        return n

    def forget_idle_consumers(self) -> list[str]:
        """Remove consumers (e.g. of SIGKILLed workers) idle for ``forget_consumers_s`` with an empty PEL.

        The PEL check and XGROUP DELCONSUMER run in one script: a consumer that
        took an entry in between is kept (deleting it would drop its pending entries).
        """
        limit = self.forget_consumers_s
        if limit <= 0:
            return []
        gone = []
        for c in self.redis.xinfo_consumers(self.keys.records, GROUP):
            name = as_str(c["name"])
            if name != self.consumer and int(c["pending"]) == 0 and int(c["idle"]) > limit * 1000:
                if int(self._forget(keys=[self.keys.records], args=[GROUP, name])):
                    gone.append(name)
        if gone:
            jlog(log, logging.INFO, "worker.forgot_consumers", model=self.model, consumers=gone)
        return gone


def _next_id(stream_id: str) -> str:
    """The smallest stream id after ``stream_id`` (``ms-seq`` -> ``ms-(seq+1)``); "0-0" and "None" pass through.

    >>> _next_id("1700000000000-4"), _next_id("0-0")
    ('1700000000000-5', '0-0')
    """
    if stream_id in ("0-0", "None"):
        return stream_id
    ms, _, seq = stream_id.partition("-")
    return f"{ms}-{int(seq or 0) + 1}"
