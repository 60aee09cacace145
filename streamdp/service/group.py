"""Reading a stream in a consumer group, shared by the stream worker and the job worker.

:class:`GroupReader` reads a stream in a consumer group, in this order:

1. once after a (re)start, the consumer's own pending entries (a restarted
   worker with a fixed name re-reads what it held when it died), then the
   entries of consumers whose process is provably gone (:func:`gone`: a
   worker of this host killed with SIGKILL; no wait for ``claim_idle_ms``);
2. every ``claim_every_s``, the entries of consumers gone since (a sibling
   process of a pool that died), then ``XAUTOCLAIM`` of entries idle for
   ``claim_idle_ms`` (held by dead workers), with their delivery counts, so
   the caller can dead-letter poison entries (:meth:`Entry.poison`);
3. new entries with ``XREADGROUP ... BLOCK block_ms`` (no block while
   entries are in hand).

Entries are acked by the caller (the stream worker acks inside its atomic
commit script, the job worker with :meth:`GroupReader.ack`).
The run loop around a worker's ``step()`` is :class:`streamdp.service.loop.GroupLoop`.

>>> Entry("1-0", {b"d": b"x"}, deliveries=6).poison(5)
True
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import socket
import time
from dataclasses import dataclass
from typing import Any

import redis

from streamdp.service.connection import connect, heal
from streamdp.service.keys import as_str
from streamdp.service.log import jlog

__all__ = ["Entry", "GroupReader", "Holder", "LIVE_IDLE_S", "consumer_name", "gone", "holders"]


def _pid_space() -> str:
    """A tag of this boot and pid namespace (8 hex digits; "" where unknown, e.g. without ``/proc``): two processes
    with the same tag see the same pids, so one can tell whether the other's pid is still running."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""
    return hashlib.sha256(f"{boot}/{ns}".encode()).hexdigest()[:8]


PID_SPACE = _pid_space()


def consumer_name() -> str:
    """A unique consumer name: host, pid, a random suffix and, where known, the pid space's tag (:func:`gone`)."""
    name = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
    return f"{name}-{PID_SPACE}" if PID_SPACE else name


def gone(consumer: str) -> bool:
    """Whether ``consumer`` is the name of a process that provably no longer runs: one named by
    :func:`consumer_name` in this boot and pid namespace whose pid is not running. False when unsure (another host
    or container, a name given by hand, a pid reused since: its entries wait ``claim_idle_ms``). Why: a worker
    restarted after a SIGKILL takes over its predecessor's entries at once, and never a live worker's.

    >>> gone(consumer_name()), gone("worker-1"), gone(f"h-{2**22 + 1}-abcdef-ffffffff")
    (False, False, False)
    """
    parts = consumer.rsplit("-", 3)
    pid = parts[1] if len(parts) == 4 else ""
    if not PID_SPACE or parts[-1] != PID_SPACE or not (pid.isascii() and pid.isdigit()):  # (not '²', not '١٢')
        return False
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return True
    except (OSError, OverflowError):  # (another user's process: it runs)
        return False
    return False


#: A consumer that read or claimed within this many seconds counts as a live worker (:attr:`Holder.live`) unless its
#: process is provably gone (:func:`gone`); one silent longer is a worker that died (SIGKILL, out of memory) and is
#: not forgotten yet, or one blocked in a longer read (``--block-ms`` above it). Why: the group keeps a dead
#: worker's consumer for an hour.
LIVE_IDLE_S = 30


#: A history read from here returns none of the consumer's pending entries (ids are below it; the maximum itself
#: means ``>``) yet refreshes its ``idle``: :meth:`GroupLoop.still_here`.
_NOTHING_PENDING = "18446744073709551615-18446744073709551614"


@dataclass
class Holder:
    """A consumer of a group: its name, ms since it last read or claimed (``idle_ms``), whether its process is
    provably gone (:func:`gone`) and whether it holds pending entries."""

    name: str
    idle_ms: int
    gone: bool
    pending: bool = True

    @property
    def live(self) -> bool:
        """Read or claimed within :data:`LIVE_IDLE_S` and not provably gone.

        >>> Holder("w", 1_000, gone=False).live, Holder("w", 1_000, gone=True).live, Holder("w", 60_000, False).live
        (True, False, False)
        """
        return self.idle_ms < LIVE_IDLE_S * 1000 and not self.gone

    def wait_ms(self, claim_idle_ms: int) -> int:
        """The longest its entries can still wait to be claimed, were it dead: each entry was delivered to it no later
        than its last read, so it has been idle at least ``idle_ms`` (0 when gone: taken over at once).

        >>> Holder("w", 5_000, gone=False).wait_ms(30_000), Holder("w", 5_000, gone=True).wait_ms(30_000)
        (25000, 0)
        """
        return 0 if self.gone else max(0, claim_idle_ms - self.idle_ms)


def holders(r: Any, stream: str, group: str, exclude: str = "") -> list[Holder]:
    """The consumers of ``group`` on ``stream`` (``exclude`` aside; none when the stream or group is missing).

    >>> import fakeredis
    >>> r = fakeredis.FakeRedis()
    >>> _ = r.xadd("s", {"d": b"x"}); _ = r.xgroup_create("s", "g", id="0")
    >>> _ = r.xreadgroup("g", "w-1", {"s": ">"}, count=1)
    >>> [(h.name, h.gone, h.pending) for h in holders(r, "s", "g")], holders(r, "nothing", "g")
    ([('w-1', False, True)], [])
    """
    try:
        infos = r.xinfo_consumers(stream, group)
    except redis.ResponseError:
        return []
    return [
        Holder(as_str(c["name"]), int(c.get("idle", 0)), gone(as_str(c["name"])), bool(int(c.get("pending", 0))))
        for c in infos
        if as_str(c["name"]) != exclude
    ]


# Move the pending entries of consumer ARGV[3] (up to ARGV[4]) to ARGV[2], atomically: only entries it still holds
# (never one another reader took meanwhile); the consumer is removed once it holds nothing (its process is gone).
# Returns {ids, delivery counts before, entries claimed}. KEYS: 1 stream. ARGV: 1 group, 2 me, 3 the gone
# consumer, 4 count.
_TAKEOVER_LUA = r"""
local p = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', tonumber(ARGV[4]), ARGV[3])
local ids, times, claimed = {}, {}, {}
for i, e in ipairs(p) do ids[i] = e[1]; times[i] = e[4] end
if #ids > 0 then claimed = redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, unpack(ids)) end
if #redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[3]) == 0 then
  redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[3])
end
return {ids, times, claimed}
"""


@dataclass
class Entry:
    """A stream entry as read: id, raw field map (None if deleted while pending), times delivered."""

    id: str
    fields: Any
    deliveries: int = 1

    def poison(self, max_deliveries: int) -> bool:
        """Delivered more than ``max_deliveries`` times (it keeps killing or stalling its readers)."""
        return self.deliveries > max_deliveries


class GroupReader:
    """Read ``stream`` as ``consumer`` of ``group`` (own PEL once, idle claims, then new entries)."""

    def __init__(
        self,
        r: redis.Redis,
        stream: str,
        group: str,
        consumer: str,
        *,
        block_ms: int = 1000,
        claim_idle_ms: int = 30_000,
        claim_every_s: float = 1.0,
        stats: str | None = None,
        logger: logging.Logger | None = None,
        context: dict | None = None,
    ):
        self.r = connect(r, block_s=block_ms / 1000)
        self.stream, self.group, self.consumer = stream, group, consumer
        self.block_ms, self.claim_idle_ms, self.claim_every_s = int(block_ms), int(claim_idle_ms), claim_every_s
        self.stats = stats  # a hash counting entries_read / claimed / lost_trimmed, if given
        self.log = logger or logging.getLogger("streamdp.group")
        self.context = context or {}
        self._claim_cursor = "0-0"
        self._last_claim = 0.0
        self._own_pel_read = False
        self._takeover = self.r.register_script(_TAKEOVER_LUA)
        self._gone_due = True  # look for gone consumers' entries (at the start, after a lost connection)

    def create(self) -> None:
        """Create the group (and the stream) if missing."""
        try:
            self.r.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except redis.ResponseError as e:
            if "BUSYGROUP" not in str(e):
                raise

    def reset(self) -> None:
        """After a lost connection: re-read the own pending entries first (and a cluster client looks for the
        cluster again, :func:`.connection.heal`)."""
        heal(self.r)
        self._own_pel_read = False
        self._gone_due = True

    def read(self, count: int, block_ms: int | None = None) -> list[Entry]:
        """Up to ``count`` entries: own pending ones (once), those of gone consumers (:meth:`take_over`), claimed idle
        ones (when due), then new ones."""
        entries: list[Entry] = []
        if not self._own_pel_read:
            self._own_pel_read = True
            entries += self.parse(self.r.xreadgroup(self.group, self.consumer, {self.stream: "0"}, count=count))
        if self._gone_due and len(entries) < count:
            entries += self.take_over(count - len(entries))
        now = time.monotonic()
        if len(entries) < count and now - self._last_claim >= self.claim_every_s:
            self._last_claim = now
            entries += self.take_over(count - len(entries), quiet=True)  # (a sibling process died since)
            if len(entries) < count:
                entries += self.claim(count - len(entries))
        if len(entries) < count:
            block = None if entries else (self.block_ms if block_ms is None else block_ms)
            resp = self.r.xreadgroup(
                self.group, self.consumer, {self.stream: ">"}, count=count - len(entries), block=block
            )
            entries += self.parse(resp)
        if not entries:  # an idle stream: say this consumer is still here (Redis < 7.2: empty reads leave its idle)
            self.still_here()
        return entries

    def still_here(self) -> None:
        """Refresh this consumer's ``idle`` (:attr:`Holder.live`), reading no entry and leaving delivery counts as they
        are: Redis < 7.2 leaves it on a read that delivers nothing, and a long step reads nothing."""
        self.r.xreadgroup(self.group, self.consumer, {self.stream: _NOTHING_PENDING}, count=1)

    def parse(self, resp: Any) -> list[Entry]:
        """An XREADGROUP reply as entries (counted in ``entries_read``)."""
        out = [Entry(as_str(eid), fields) for _stream, items in resp or [] for eid, fields in items]
        if out and self.stats:
            self.r.hincrby(self.stats, "entries_read", len(out))
        return out

    def claim(self, count: int) -> list[Entry]:
        """``XAUTOCLAIM`` up to ``count`` entries idle for ``claim_idle_ms``, with their delivery counts."""
        res = self.r.xautoclaim(
            self.stream, self.group, self.consumer, self.claim_idle_ms, start_id=self._claim_cursor, count=count
        )
        cursor, items = res[0], res[1]
        deleted = res[2] if len(res) > 2 else []
        self._claim_cursor = as_str(cursor)
        if deleted:
            self._lost([as_str(d) for d in deleted])
        entries = [Entry(as_str(eid), fields) for eid, fields in items]
        if not entries:
            return []
        p = self.r.pipeline(transaction=False)
        for e in entries:
            p.xpending_range(self.stream, self.group, e.id, e.id, 1)
        for e, info in zip(entries, p.execute()):
            e.deliveries = int(info[0]["times_delivered"]) if info else 1
        if self.stats:
            self.r.hincrby(self.stats, "claimed", len(entries))
        # (not how many: under a window policy the entries claimed are an exact figure, stats.BATCH_LEVEL)
        jlog(self.log, logging.INFO, "worker.claimed", **self.context, consumer=self.consumer)
        return entries

    def take_over(self, count: int, quiet: bool = False) -> list[Entry]:
        """Up to ``count`` pending entries of consumers whose process is gone (:func:`gone`), with their delivery
        counts, at once; once none is left, says ``worker.pending_elsewhere`` (INFO; not when ``quiet``: the look
        each claim interval, for a sibling process that died since) when other consumers hold entries, and when
        they are claimed were they dead. Exactly once holds as for ``XAUTOCLAIM``: the move is
        atomic and takes only what the gone consumer still holds."""
        out: list[Entry] = []
        if count <= 0:
            return out
        more = False  # whether a gone consumer may still hold entries (asked for as many as it gave)
        others = holders(self.r, self.stream, self.group, exclude=self.consumer)
        for h in others:
            if not h.gone:
                continue  # (a gone consumer holding nothing is removed as well: a worker of it is not counted live)
            asked = count - len(out)
            if asked <= 0:
                more = True
                continue
            ids, times, claimed = self._takeover(keys=[self.stream], args=[self.group, self.consumer, h.name, asked])
            more = more or len(ids) >= asked  # (ids the stream lost shorten ``out``, not what it held)
            fields = {as_str(eid): f for eid, f in (_pairs(e) for e in claimed or [] if e)}
            # (an id the stream no longer holds was dropped from the group by XCLAIM: counted as lost_trimmed)
            lost = [as_str(i) for i in ids if as_str(i) not in fields]
            if lost:
                self._lost(lost)
            out += [Entry(as_str(i), fields[as_str(i)], int(t) + 1) for i, t in zip(ids, times) if as_str(i) in fields]
        if not more:  # every gone consumer's entries taken: not looked for again until a reset
            self._gone_due = False
            waiting = [h for h in others if h.pending and not h.gone]
            if waiting and not quiet:
                jlog(
                    self.log,
                    logging.INFO,
                    "worker.pending_elsewhere",
                    **self.context,
                    consumers=len(waiting),
                    claimed_within_s=round(max(h.wait_ms(self.claim_idle_ms) for h in waiting) / 1000, 1),
                    note="entries held by other consumers: a live worker commits them; a dead one's are claimed "
                    "once idle claim_idle_ms",
                )
        if out:
            if self.stats:
                self.r.hincrby(self.stats, "claimed", len(out))
            jlog(self.log, logging.INFO, "worker.claimed", **self.context, consumer=self.consumer, holder="gone")
        return out

    def _lost(self, ids: list[str]) -> None:
        """Pending entries found deleted from the stream: counted and logged (``worker.lost_trimmed``)."""
        if self.stats:
            self.r.hincrby(self.stats, "lost_trimmed", len(ids))
        jlog(self.log, logging.ERROR, "worker.lost_trimmed", **self.context, ids=ids)

    def ack(self, ids: list[str], *, delete: bool = False) -> None:
        """XACK ``ids`` (and XDEL them if ``delete``), atomically."""
        p = self.r.pipeline(transaction=True)
        p.xack(self.stream, self.group, *ids)
        if delete:
            p.xdel(self.stream, *ids)
        p.execute()

    def leave(self) -> None:
        """Leave the group if this consumer holds nothing (its pending entries would be lost otherwise)."""
        try:
            mine = self.r.xpending_range(self.stream, self.group, "-", "+", 1, consumername=self.consumer)
            if not mine:
                self.r.xgroup_delconsumer(self.stream, self.group, self.consumer)
        except redis.RedisError:
            pass

    def drained(self) -> bool:
        """No entry waits: nothing pending in the group and every entry in the stream delivered."""
        try:
            groups = self.r.xinfo_groups(self.stream)
        except redis.ResponseError:
            return True  # no stream
        g = next((g for g in groups if as_str(g["name"]) == self.group), None)
        if g is None or int(g.get("pending", 0)):
            return False
        newest = self.r.xrevrange(self.stream, "+", "-", count=1)
        if not newest:
            return True
        last = tuple(int(x) for x in as_str(g["last-delivered-id"]).split("-"))
        return tuple(int(x) for x in as_str(newest[0][0]).split("-")) <= last


def _pairs(e: Any) -> tuple[Any, Any]:
    """An entry of a script's ``XCLAIM`` reply as (id, field map): Lua hands the fields over as a flat list."""
    eid, flat = e[0], e[1]
    if isinstance(flat, dict):
        return eid, flat
    return eid, dict(zip(flat[::2], flat[1::2]))
