"""Stream workers: read batches in a consumer group, noise each batch once, merge exactly once.

One loop step:

1. ``XAUTOCLAIM`` entries of dead workers idle for ``claim_idle_ms``; entries
   delivered more than ``max_deliveries`` times are dead-lettered (poison).
2. ``XREADGROUP`` up to ``batch_entries`` new entries (blocking ``block_ms``).
3. Decode and validate each entry (:mod:`.codec`); undecodable entries and bad
   rows go to the dead-letter stream with a reason. The worker never dies on input.
4. Each new batch's noised delta is drawn **once**: stored with ``SET NX``
   under ``priv:delta:<batch_id>`` before the commit; a redelivered batch
   reuses the stored delta. Batch ids already merged are only acked.
5. The deltas of the k entries are summed in numpy and committed by one
   atomic Lua script (:mod:`.commit`) that checks ownership, dedups, does a
   version CAS, writes counts + model blob, XACKs and announces. Conflicts
   are retried.
6. Every ``trim_every`` commits, and every ``trim_idle_s`` while no entry
   arrives, the stream is trimmed with ``MINID`` to the model's retention
   window, no further than the oldest pending entry (never past an unacked entry).

Counters live in ``priv:stats`` (see :mod:`.stats`); logs are JSON lines on
the ``streamdp.worker`` logger.
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import signal
import socket
import secrets
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

import msgpack
import numpy as np
import redis

from .. import blob
from ..forest import PrivateForest
from . import codec
from .commit import COMMIT_LUA
from .keys import GROUP, Keys, as_str
from .registry import connect, counts_from_bytes, load_spec
from .retention import policy_minid, trim_minid

__all__ = ["Worker", "WorkerConfig", "WorkerPool", "run_workers"]

log = logging.getLogger("streamdp.worker")
DETAIL_MAX = 1 << 20  # bytes of an undecodable payload kept in its dead letter


@dataclass
class WorkerConfig:
    batch_entries: int = 16        # k: entries coalesced per commit
    block_ms: int = 1000           # XREADGROUP BLOCK
    claim_idle_ms: int = 30_000    # reclaim entries of workers idle this long
    claim_every_s: float = 1.0     # how often to run XAUTOCLAIM
    max_deliveries: int = 5        # poison threshold
    delta_ttl_s: int = 7 * 86400   # stored deltas kept this long after their merge
    keep_versions: int = 20        # pub:v:<N> retained (0: keep all, rely on version_ttl_s)
    version_ttl_s: int = 0         # TTL of pub:v:<N> (0: none)
    dead_maxlen: int = 100_000     # dead-letter stream approximate cap
    trim_every: int = 20           # commits between MINID trims
    trim_idle_s: float = 60.0      # an idle stream is trimmed this often (retention holds without traffic)
    max_commit_retries: int = 1000
    forget_consumers_s: float = 3600.0  # drop group consumers idle this long with nothing pending (0: never)


def _jlog(level: int, event: str, **kv: Any) -> None:
    if log.isEnabledFor(level):
        log.log(level, json.dumps({"ts": round(time.time(), 3), "event": event, **kv}, default=str))


def _le_bytes(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()


class _Entry:
    __slots__ = ("id", "fields", "deliveries", "batch", "dead")

    def __init__(self, id: str, fields: Any, deliveries: int = 1):
        self.id, self.fields, self.deliveries = id, fields, deliveries
        self.batch: codec.Batch | None = None
        self.dead: tuple[str, bytes] | None = None


class Worker:
    """One worker process (a consumer in group ``workers`` of the model's record stream)."""

    def __init__(self, redis_url: Any = None, model: str = "", *, consumer: str | None = None,
                 config: WorkerConfig | None = None, **overrides: Any):
        if not model:
            raise ValueError("Worker needs a model name")
        self.config = config or WorkerConfig()
        for k, v in overrides.items():
            if not hasattr(self.config, k):
                raise TypeError(f"unknown worker option {k!r}")
            setattr(self.config, k, v)
        if not 1 <= self.config.batch_entries <= 1000:
            raise ValueError("batch_entries must be in 1..1000 (entries per atomic commit)")
        self.redis = connect(redis_url)
        self.keys = Keys(model)
        self.model = model
        self.spec = load_spec(self.redis, model)
        self.schema = self.spec.schema
        self.name = consumer or f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self._commit = self.redis.register_script(COMMIT_LUA)
        self._forget = self.redis.register_script(FORGET_LUA)
        self._stop = threading.Event()
        self._state_version: int | None = None
        self._counts: np.ndarray | None = None
        self._releases = 0
        self._claim_cursor = "0-0"
        self._last_claim = 0.0
        self._own_pel_read = False
        self._commits_since_trim = 0
        self._last_trim = time.monotonic()
        self._dtype = np.float64 if self.spec.mechanism == "laplace" else np.int64
        try:
            self.redis.xgroup_create(self.keys.records, GROUP, id="0", mkstream=True)
        except redis.ResponseError as e:
            if "BUSYGROUP" not in str(e):
                raise

    # -- control -------------------------------------------------------------
    def stop(self, *_: Any) -> None:
        """Ask the loop to stop after the step in hand (SIGTERM handler)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self, *, until_drained: bool = False, max_seconds: float | None = None,
            handle_signals: bool = True) -> None:
        """Loop until :meth:`stop` (or SIGTERM/SIGINT), or until the stream is drained if asked."""
        if handle_signals and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self.stop)
            signal.signal(signal.SIGINT, self.stop)
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        _jlog(logging.INFO, "worker.start", model=self.model, consumer=self.name, config=asdict(self.config))
        backoff = 0.0
        try:
            while not self._stop.is_set():
                try:
                    n = self.step()
                    if n == 0 and until_drained and self.drained():
                        break
                    backoff = 0.0
                except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError) as err:
                    # Redis restarting / failing over: entries in hand stay pending (re-read or reclaimed later).
                    backoff = min(5.0, max(0.1, backoff * 2))
                    _jlog(logging.WARNING, "worker.disconnected", model=self.model, error=str(err), retry_s=backoff)
                    self._stop.wait(backoff)
                    self._own_pel_read = False
                    self._state_version = None
                if deadline is not None and time.monotonic() > deadline:
                    break
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        try:
            mine = self.redis.xpending_range(self.keys.records, GROUP, "-", "+", 1, consumername=self.name)
            if not mine:  # nothing in hand: leave the group cleanly
                self.redis.xgroup_delconsumer(self.keys.records, GROUP, self.name)
        except redis.RedisError:
            pass
        _jlog(logging.INFO, "worker.stop", model=self.model, consumer=self.name)

    def drained(self) -> bool:
        """No entry waits: nothing pending in the group and every entry delivered."""
        try:
            groups = self.redis.xinfo_groups(self.keys.records)
            stream = self.redis.xinfo_stream(self.keys.records)
        except redis.ResponseError:
            return True
        g = next((g for g in groups if as_str(g["name"]) == GROUP), None)
        if g is None:
            return False
        last = stream.get("last-generated-id")
        return int(g["pending"]) == 0 and (stream.get("length", 0) == 0 or as_str(g["last-delivered-id"]) == as_str(last))

    # -- one step ------------------------------------------------------------
    def step(self, block_ms: int | None = None) -> int:
        """Read, process and commit up to ``batch_entries`` entries; returns how many were handled."""
        cfg = self.config
        k = cfg.batch_entries
        entries: list[_Entry] = []
        try:
            if not self._own_pel_read:  # a restarted worker with a fixed name re-reads its own PEL first
                self._own_pel_read = True
                resp = self.redis.xreadgroup(GROUP, self.name, {self.keys.records: "0"}, count=k)
                entries += self._entries(resp)
            now = time.monotonic()
            if len(entries) < k and now - self._last_claim >= cfg.claim_every_s:
                self._last_claim = now
                entries += self._claim(k - len(entries))
            if len(entries) < k:
                block = None if entries else (cfg.block_ms if block_ms is None else block_ms)
                resp = self.redis.xreadgroup(GROUP, self.name, {self.keys.records: ">"}, count=k - len(entries),
                                             block=block)
                entries += self._entries(resp)
        except redis.ResponseError as e:
            if "NOGROUP" in str(e):
                _jlog(logging.WARNING, "worker.nogroup", model=self.model)
                self._stop.set()
                return 0
            raise
        if not entries:
            if time.monotonic() - self._last_trim >= cfg.trim_idle_s:
                self.trim()  # without traffic no commit triggers a trim: the retention window still holds
            return 0
        self._handle(entries)
        return len(entries)

    def _entries(self, resp: Any) -> list[_Entry]:
        out = []
        for _stream, items in resp or []:
            for eid, fields in items:
                out.append(_Entry(as_str(eid), fields))
        if out:
            self.redis.hincrby(self.keys.stats, "entries_read", len(out))
        return out

    def _claim(self, count: int) -> list[_Entry]:
        cfg = self.config
        res = self.redis.xautoclaim(self.keys.records, GROUP, self.name, cfg.claim_idle_ms,
                                    start_id=self._claim_cursor, count=count)
        cursor, items = res[0], res[1]
        deleted = res[2] if len(res) > 2 else []
        self._claim_cursor = as_str(cursor)
        if deleted:
            self.redis.hincrby(self.keys.stats, "lost_trimmed", len(deleted))
            _jlog(logging.ERROR, "worker.lost_trimmed", model=self.model, ids=[as_str(d) for d in deleted])
        entries = [_Entry(as_str(eid), fields) for eid, fields in items]
        if not entries:
            return []
        p = self.redis.pipeline(transaction=False)
        for e in entries:
            p.xpending_range(self.keys.records, GROUP, e.id, e.id, 1)
        for e, info in zip(entries, p.execute()):
            e.deliveries = int(info[0]["times_delivered"]) if info else 1
        self.redis.hincrby(self.keys.stats, "claimed", len(entries))
        _jlog(logging.INFO, "worker.claimed", model=self.model, consumer=self.name, n=len(entries))
        return entries

    def _decode(self, e: _Entry) -> None:
        fields = e.fields
        if fields is None:  # entry deleted from the stream while pending
            e.dead = ("entry deleted from the stream", b"")
            return
        data = fields.get(b"d") if isinstance(fields, dict) else None
        raw = data if isinstance(data, bytes) else msgpack.packb({as_str(k): v for k, v in fields.items()},
                                                                 use_bin_type=True) if isinstance(fields, dict) else b""
        if e.deliveries > self.config.max_deliveries:
            e.dead = (f"poison: delivered {e.deliveries} times (max {self.config.max_deliveries})", raw[:DETAIL_MAX])
            self.redis.hincrby(self.keys.stats, "poison", 1)
            return
        if data is None:
            e.dead = ("entry has no 'd' field", raw[:DETAIL_MAX])
            return
        try:
            e.batch = codec.decode(self.schema, data)
        except codec.EnvelopeError as err:
            e.dead = (f"undecodable: {err}"[:1000], raw[:DETAIL_MAX])
        except Exception as err:  # never die on input
            e.dead = (f"undecodable (internal {type(err).__name__}: {err})"[:1000], raw[:DETAIL_MAX])
            _jlog(logging.ERROR, "worker.decode_bug", model=self.model, entry=e.id, error=repr(err))

    def _delta(self, batch: codec.Batch) -> np.ndarray:
        """The batch's noised delta: the stored one if any, else drawn now and stored with SET NX."""
        key = self.keys.delta(batch.batch_id)
        stored = self.redis.get(key)
        if stored is None:
            delta = self.spec.noisy_delta_encoded(batch.X, batch.y)
            packed = msgpack.packb(blob.pack_array(delta.astype(self._dtype)), use_bin_type=True)
            if self.redis.set(key, packed, nx=True):
                return delta.astype(self._dtype)
            stored = self.redis.get(key)  # another worker stored it first: use that one
            self.redis.hincrby(self.keys.stats, "delta_reused", 1)
        else:
            self.redis.hincrby(self.keys.stats, "delta_reused", 1)
        arr = blob.unpack_array(msgpack.unpackb(stored, raw=False), "delta", np.dtype(self._dtype).newbyteorder("<").str,
                                ndim=3)
        if arr.shape != self.spec.shape:
            raise ValueError(f"stored delta of {batch.batch_id} has shape {arr.shape}")
        return arr.astype(self._dtype)

    def _handle(self, entries: list[_Entry]) -> None:
        for e in entries:
            self._decode(e)
        merge: dict[str, _Entry] = {}
        ack_only: list[_Entry] = []
        for e in entries:
            if e.batch is None or len(e.batch.y) == 0 or e.batch.batch_id in merge:
                ack_only.append(e)
            else:
                merge[e.batch.batch_id] = e
        if merge:  # batches merged before (duplicate XADD, or a redelivery after commit): ack only
            p = self.redis.pipeline(transaction=False)
            for bid in merge:
                p.zscore(self.keys.merged, bid)
            for bid, score in zip(list(merge), p.execute()):
                if score is not None:
                    ack_only.append(merge.pop(bid))
        deltas: dict[str, np.ndarray] = {}
        for bid, e in list(merge.items()):
            try:
                deltas[bid] = self._delta(e.batch)
            except (ValueError, TypeError) as err:  # a corrupted stored delta: dead-letter, never redraw
                e.dead = (f"stored delta unusable: {err}"[:1000], b"")
                ack_only.append(merge.pop(bid))
        self._commit_entries(merge, deltas, ack_only)

    def _dead_items(self, es: list[_Entry]) -> list[tuple[str, str, bytes]]:
        out = []
        for e in es:
            if e.dead is not None:
                out.append((e.id, e.dead[0], e.dead[1]))
            elif e.batch is not None and e.batch.dropped:
                rows = e.batch.dropped
                detail = msgpack.packb({"batch_id": e.batch.batch_id, "rows": [[r, why] for r, why in rows[:10_000]]},
                                       use_bin_type=True)
                out.append((e.id, f"{len(rows)} invalid record(s) of {e.batch.n_in}; first: row {rows[0][0]}: "
                                  f"{rows[0][1]}"[:1000], detail))
        return out

    def _commit_entries(self, merge: dict[str, _Entry], deltas: dict[str, np.ndarray], ack_only: list[_Entry]) -> None:
        cfg = self.config
        retries = 0
        while True:
            m_entries = list(merge.values())
            ids_all = m_entries + ack_only
            if not ids_all:
                return
            dead = self._dead_items(ids_all)
            m = len(m_entries)
            new_version, counts_b, blob_b, releases, n_records = 0, b"", b"", 0, 0
            if m:
                v = self.redis.hget(self.keys.state, "version")
                v = int(v or 0)
                if v != self._state_version or self._counts is None:
                    _, c, rel = self.redis.hmget(self.keys.state, "version", "counts", "releases")
                    self._counts = counts_from_bytes(c, self.spec) if c else np.zeros(self.spec.shape, self._dtype)
                    self._releases = int(rel or 0)
                    self._state_version = v
                total = sum(deltas[e.batch.batch_id] for e in m_entries)
                new_counts = self._counts + total
                releases = self._releases + m
                new_version = v + 1
                forest = PrivateForest(
                    self.schema, self.spec.structure, epsilon=self.spec.epsilon, mechanism=self.spec.mechanism,
                    k=self.spec.k, beta=self.spec.beta, vote=self.spec.vote, budget=self.spec.budget,
                    counts=new_counts, version=new_version, n_releases=releases, private=self.spec.private)
                counts_b, blob_b = _le_bytes(new_counts), forest.to_bytes()
                n_records = sum(len(e.batch.y) for e in m_entries)
            keep = cfg.keep_versions
            drop = m > 0 and keep > 0 and new_version - keep >= 0
            keys = [self.keys.records, self.keys.state, self.keys.pub_model, self.keys.merged, self.keys.stats,
                    self.keys.dead, self.keys.pub_version(new_version),
                    self.keys.pub_version(new_version - keep if drop else new_version)]
            keys += [self.keys.delta(e.batch.batch_id) for e in m_entries]
            args: list[Any] = [GROUP, self.name, new_version - 1, counts_b, blob_b, releases, n_records,
                               int(time.time() * 1000), cfg.version_ttl_s, 1 if drop else 0, cfg.delta_ttl_s,
                               self.keys.pub_events, cfg.dead_maxlen, m, len(ack_only), len(dead)]
            for e in m_entries:
                args += [e.id, e.batch.batch_id]
            args += [e.id for e in ack_only]
            for d in dead:
                args += list(d)
            res = self._commit(keys=keys, args=args)
            status = as_str(res[0])
            if status == "ok":
                if m:
                    self._state_version, self._counts, self._releases = new_version, new_counts, releases
                    self._commits_since_trim += 1
                    _jlog(logging.DEBUG, "worker.commit", model=self.model, version=new_version, batches=m,
                          acked=len(ack_only), dead=len(dead), retries=retries)
                if dead:
                    _jlog(logging.WARNING, "worker.dead_letter", model=self.model, n=len(dead),
                          reasons=[d[1][:200] for d in dead[:5]])
                if self._commits_since_trim >= cfg.trim_every:
                    self._commits_since_trim = 0
                    self.trim()
                return
            retries += 1
            if status == "conflict":
                self._state_version = None
                self.redis.hincrby(self.keys.stats, "commit_retries", 1)
            elif status == "rejected":
                self.redis.hincrby(self.keys.stats, "commit_rejections", 1)
                flat = res[1:]
                for i in range(0, len(flat), 2):
                    idx, reason = int(flat[i]) - 1, as_str(flat[i + 1])
                    e = ids_all[idx]
                    if reason == "dup-batch" and idx < m:
                        merge.pop(e.batch.batch_id, None)
                        ack_only.append(e)
                    else:  # not ours any more (reclaimed by another worker, or acked): forget it
                        if idx < m:
                            merge.pop(e.batch.batch_id, None)
                        elif e in ack_only:
                            ack_only.remove(e)
                    _jlog(logging.INFO, "worker.rejected", model=self.model, entry=e.id, reason=reason)
            else:
                raise RuntimeError(f"unexpected commit reply {res!r}")
            if retries > cfg.max_commit_retries:
                _jlog(logging.ERROR, "worker.give_up", model=self.model, retries=retries)
                return  # entries stay pending and are reclaimed later
            if status == "conflict" and retries > 3:
                time.sleep(min(0.05, 0.001 * retries) * (0.5 + secrets.randbelow(1000) / 1000))

    def trim(self) -> int:
        """XTRIM MINID: never drops an unacked entry, keeps the model's retention window (:mod:`.retention`).

        ``MINID = min(oldest pending id (or the last delivered one), retention floor)``.
        """
        self._last_trim = time.monotonic()
        try:
            groups = self.redis.xinfo_groups(self.keys.records)  # read before XPENDING: see docs/service.md
            g = next((g for g in groups if as_str(g["name"]) == GROUP), None)
            if g is None:
                return 0
            last = as_str(g["last-delivered-id"])
            pend = self.redis.xpending(self.keys.records, GROUP)
            minid = as_str(pend["min"]) if pend and pend.get("pending") else last
            if minid in ("0-0", "None"):
                return 0
            minid = trim_minid(minid, policy_minid(self.redis, self.model, self.keys.records))
            if minid == "0-0":
                return 0
            n = self.redis.xtrim(self.keys.records, minid=minid, approximate=False)
            if n:
                self.redis.hincrby(self.keys.stats, "trimmed", n)
            self.forget_idle_consumers()
            return int(n)
        except redis.RedisError as err:
            _jlog(logging.WARNING, "worker.trim_failed", model=self.model, error=str(err))
            return 0


    def forget_idle_consumers(self) -> list[str]:
        """Remove consumers (e.g. of SIGKILLed workers) idle for ``forget_consumers_s`` with an empty PEL.

        The PEL check and XGROUP DELCONSUMER run in one script: a consumer that
        took an entry in between is kept (deleting it would drop its pending entries).
        """
        limit = self.config.forget_consumers_s
        if limit <= 0:
            return []
        gone = []
        for c in self.redis.xinfo_consumers(self.keys.records, GROUP):
            name = as_str(c["name"])
            if name != self.name and int(c["pending"]) == 0 and int(c["idle"]) > limit * 1000:
                if int(self._forget(keys=[self.keys.records], args=[GROUP, name])):
                    gone.append(name)
        if gone:
            _jlog(logging.INFO, "worker.forgot_consumers", model=self.model, consumers=gone)
        return gone


FORGET_LUA = """
local p = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if #p > 0 then return 0 end
redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
return 1
"""


def _child(redis_url: Any, model: str, kw: dict, until_drained: bool, log_level: int) -> None:
    logging.basicConfig(level=log_level, format="%(message)s")
    Worker(redis_url, model, **kw).run(until_drained=until_drained)


class WorkerPool:
    """``processes`` worker processes (spawned) for one model; :meth:`stop` ends them gracefully."""

    def __init__(self, model: str, processes: int | None = None, redis_url: Any = None, *,
                 until_drained: bool = False, log_level: int = logging.INFO, **config: Any):
        if isinstance(redis_url, redis.Redis):
            raise TypeError("worker processes need a URL, not a client")
        for k in config:
            if not hasattr(WorkerConfig, k):
                raise TypeError(f"unknown worker option {k!r}")
        self.n = processes or os.cpu_count() or 1
        ctx = mp.get_context("spawn")
        self.procs = [ctx.Process(target=_child, args=(redis_url, model, config, until_drained, log_level),
                                  daemon=True, name=f"streamdp-worker-{i}") for i in range(self.n)]

    def start(self) -> "WorkerPool":
        for p in self.procs:
            p.start()
        return self

    def alive(self) -> bool:
        return any(p.is_alive() for p in self.procs)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for every process to exit by itself; True if they all did."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for p in self.procs:
            p.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not self.alive()

    def stop(self, timeout: float = 10.0) -> list[int | None]:
        """SIGTERM every worker (each finishes its step), then kill any left after ``timeout``."""
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        deadline = time.monotonic() + timeout
        for p in self.procs:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join()
        return [p.exitcode for p in self.procs]

    def __enter__(self) -> "WorkerPool":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def run_workers(model: str, processes: int | None = None, redis_url: Any = None, *, until_drained: bool = False,
                log_level: int = logging.INFO, **config: Any) -> list[int | None]:
    """Run ``processes`` worker processes (default: one per core) until they stop; returns exit codes.

    SIGTERM/SIGINT to this process stop the workers gracefully (each finishes
    its step); a worker that does not stop within 10 s is killed.
    """
    pool = WorkerPool(model, processes, redis_url, until_drained=until_drained, log_level=log_level, **config)
    stopping = threading.Event()
    old = {}
    if threading.current_thread() is threading.main_thread():
        for s in (signal.SIGTERM, signal.SIGINT):
            old[s] = signal.signal(s, lambda *_: stopping.set())
    pool.start()
    try:
        while pool.alive() and not stopping.is_set():
            stopping.wait(0.2)  # signals interrupt this wait; process exits are checked each 0.2 s
    finally:
        codes = pool.stop()
        for s, h in old.items():
            signal.signal(s, h)
    return codes
