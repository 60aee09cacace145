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
   version CAS, writes the counts and the release record, XACKs and announces. Conflicts
   are retried.
6. Every ``trim_every`` commits, and every ``trim_idle_s`` while no entry
   arrives, the stream is trimmed with ``MINID`` to the model's retention
   window, no further than the oldest pending entry (never past an unacked entry).

With ``release="window"`` or ``"tree"`` (the default is window; :mod:`.windows`), step 4
draws no noise: the entries' EXACT tallies are added into the open window's worker-only
accumulator by one atomic script that also records the batch ids and XACKs
(:data:`.commit.WINDOW_ADD_LUA`), and each step first releases the windows due on the
public schedule (seal, noise once, release: any worker, lock-free). Noise is keyed by
``$STREAMDP_NOISE_KEY_FILE`` when set, and a rolled-back model is refused
(:mod:`.rollback`).

Steps 1-2 are the consumer-group loop shared with the job worker
(:mod:`.group`). Counters live in ``priv:stats`` (see :mod:`.stats`); logs are
JSON lines on the ``streamdp.worker`` logger. Test-only fault points:
:mod:`.faults`.
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

import msgpack
import numpy as np
import redis

from . import codec
from .commit import COMMIT_LUA, WINDOW_ADD_LUA
from .connection import connect
from .faults import FaultPoints
from .group import Entry, GroupLoop, GroupReader, consumer_name, jlog
from .keys import GROUP, Keys, as_str
from .draw_once import PENDING_TTL_S, drawn_once
from .published import (KEEP_BYTES, counts_from_bytes, counts_view, release_record, release_record_around_counts,
                        versions_kept)
from .registry import grown_blob_bound, load_policy, load_spec
from .retention import get_retention, parse_id, policy_minid, trim_minid
from .rollback import ENV_STATE, NoiseSource, RollbackGuard, load_noise_key
from .windows import WindowCloser, joined_cells
from ..validation import MAX_BLOCK_MS, check_integer

__all__ = ["Worker", "WorkerConfig"]

log = logging.getLogger("streamdp.worker")


@dataclass
class WorkerConfig:
    batch_entries: int = 16        # k: entries coalesced per commit
    block_ms: int = 1000           # XREADGROUP BLOCK
    claim_idle_ms: int = 30_000    # reclaim entries of workers idle this long
    claim_every_s: float = 1.0     # how often to run XAUTOCLAIM
    max_deliveries: int = 5        # poison threshold
    delta_ttl_s: int = 0           # stored deltas and window noise kept this long after their merge (0: dropped)
    keep_versions: int = 20        # pub:v:<N> retained (0: no bound in number; keep_bytes still bounds them)
    keep_bytes: int = KEEP_BYTES   # ... and no more of them than fit in these bytes (0: no bound; at least one)
    version_ttl_s: int = 0         # TTL of pub:v:<N> (0: none)
    dead_maxlen: int = 100_000     # dead-letter stream approximate cap
    trim_every: int = 20           # commits between MINID trims
    trim_idle_s: float = 60.0      # an idle stream is trimmed this often (retention holds without traffic)
    max_commit_retries: int = 1000
    forget_consumers_s: float = 3600.0  # drop group consumers idle this long with nothing pending (0: never)
    noise_key_file: str | None = None  # master noise key (default $STREAMDP_NOISE_KEY_FILE): rollback-proof noise
    state_dir: str | None = None       # rollback guard's directory (default $STREAMDP_STATE_DIR)

    def check(self) -> "WorkerConfig":
        """Each setting in its range, with an error naming it (the CLI checks before starting any worker).

        >>> WorkerConfig(block_ms=0).check()
        Traceback (most recent call last):
        ...
        ValueError: block_ms must be an integer in [1, 3.6e+06], got 0
        """
        check_integer(self.batch_entries, "batch_entries", low=1, high=1000)  # entries per atomic commit
        check_integer(self.block_ms, "block_ms", low=1, high=MAX_BLOCK_MS)  # 0 is BLOCK forever in Redis
        check_integer(self.claim_idle_ms, "claim_idle_ms", low=0)
        check_integer(self.max_deliveries, "max_deliveries", low=1)
        for name in ("keep_versions", "keep_bytes", "version_ttl_s", "delta_ttl_s", "dead_maxlen"):
            check_integer(getattr(self, name), name, low=0)
        check_integer(self.trim_every, "trim_every", low=1)
        return self


#: Windows due and not released at a worker's start from which it warns (``worker.behind_schedule``): a worker
#: started late releases every missed window, and on a small stream their noise can swamp the records.
BEHIND_WARN = 10


def _jlog(level: int, event: str, **kv: Any) -> None:
    jlog(log, level, event, **kv)


class _Entry(Entry):
    """A stream entry with what the worker made of it: a decoded batch, or a dead-letter reason and detail."""

    def __init__(self, id: str, fields: Any, deliveries: int = 1):
        super().__init__(id, fields, deliveries)
        self.batch: codec.Batch | None = None
        self.dead: tuple[str, bytes] | None = None


def _entry_args(merging: list[_Entry], ack_only: list[_Entry], dead: list[tuple[str, str, bytes]]) -> list:
    """The commit scripts' entry arguments: (entry id, batch id) pairs, ack-only ids, dead-letter triples."""
    args: list[Any] = []
    for e in merging:
        args += [e.id, e.batch.batch_id]
    args += [e.id for e in ack_only]
    for d in dead:
        args += list(d)
    return args


def _no_fault(point: str) -> None:
    pass


class Worker(GroupLoop):
    """One worker process (a consumer in group ``workers`` of the model's record stream).

    ``faults``: test-only fault points (:mod:`.faults`); default: ``$STREAMDP_FAULT_POINTS``, normally unset.
    """

    log = log
    event_prefix = "worker"

    def __init__(self, redis_url: Any = None, model: str = "", *, consumer: str | None = None,
                 config: WorkerConfig | None = None, faults: FaultPoints | None = None, **overrides: Any):
        super().__init__()
        if not model:
            raise ValueError("Worker needs a model name")
        self.config = config or WorkerConfig()
        for k, v in overrides.items():
            if not hasattr(self.config, k):
                raise TypeError(f"unknown worker option {k!r}")
            setattr(self.config, k, v)
        cfg = self.config.check()
        self.redis = connect(redis_url, block_s=cfg.block_ms / 1000)
        self.keys = Keys(model)
        self.model = model
        self.spec = load_spec(self.redis, model)
        self.schema = self.spec.schema
        self.name = consumer or consumer_name()
        self.reader = GroupReader(self.redis, self.keys.records, GROUP, self.name, block_ms=cfg.block_ms,
                                  claim_idle_ms=cfg.claim_idle_ms, claim_every_s=cfg.claim_every_s,
                                  stats=self.keys.stats, logger=log, context={"model": model})
        self._commit = self.redis.register_script(COMMIT_LUA)
        self._forget = self.redis.register_script(FORGET_LUA)
        self._fault: Callable[[str], None] = faults or FaultPoints.from_env() or _no_fault
        self._state_version: int | None = None
        self._counts: np.ndarray | None = None
        self._releases = 0
        self._commits_since_trim = 0
        self._last_trim = time.monotonic()
        self._dtype = self.spec.counts.dtype.type  # the forest owns its counts dtype (float for laplace)
        self.reader.create()
        self.policy, start = load_policy(self.redis, model)
        # The model's identity (its state's model_id: the scripts refuse a worker of another model re-created under
        # the name; stored noise is named by it). A model from before the field: pub:model's id, for the noise key.
        self.keys = Keys.of(self.redis, model)
        model_id = self.keys.model_id or as_str(self.redis.hget(self.keys.pub_model, "model_id") or b"")
        # a model created before the "blocks" noise layout has none in its state: it keeps "stream"
        layout = as_str(self.redis.hget(self.keys.state, "noise_layout") or b"stream")
        self.noise = NoiseSource(load_noise_key(cfg.noise_key_file), model_id, layout)
        self.guard = RollbackGuard(cfg.state_dir or os.environ.get(ENV_STATE) or None, model_id)
        self.guard.check(int(self.redis.hget(self.keys.state, "version") or 0))  # refuse a rolled-back model
        self._open: int | None = None
        self._add = self.redis.register_script(WINDOW_ADD_LUA)
        # a retained version: the counts, or a grown release's whole blob (at most its bound)
        version_bytes = (grown_blob_bound(self.spec, int(self.redis.strlen(self.keys.spec)))
                         if self.policy.kind == "grow" else self.spec.counts.nbytes)
        self.keep_versions = versions_kept(cfg.keep_versions, version_bytes, cfg.keep_bytes)
        self._drop_stale_versions()
        self.closer = None if self.policy.kind == "batch" else WindowCloser(
            self.redis, self.keys, self.spec, self.policy, start, noise=self.noise, guard=self.guard,
            fault=self._fault, version_ttl_s=cfg.version_ttl_s, keep_versions=self.keep_versions,
            noise_ttl_s=cfg.delta_ttl_s)

    def _drop_stale_versions(self) -> int:
        """Remove the retained versions older than the ones this worker keeps, left by workers that kept more (an
        upgrade to the byte bound, a lower --keep-mib or --keep-versions): each release drops only the one version
        that falls out of the window, so they would stay for good (a reviewer's finding). Walks down from the newest
        one to drop until a version is missing; returns how many were removed."""
        if self.keep_versions <= 0:
            return 0
        n = int(self.redis.hget(self.keys.state, "version") or 0) - self.keep_versions
        dropped = 0
        while n >= 0 and self.redis.delete(self.keys.pub_version(n)):
            n, dropped = n - 1, dropped + 1
        return dropped

    # -- control (the run loop is :class:`.group.GroupLoop`'s) ----------------------
    def _log_context(self) -> dict:
        return {"model": self.model}

    def _on_start(self) -> None:
        _jlog(logging.INFO, "worker.start", model=self.model, consumer=self.name, config=asdict(self.config),
              release=self.policy.to_dict(), keyed_noise=self.noise.keyed, rollback_guard=self.guard.path is not None)
        if not self.noise.keyed:
            _jlog(logging.WARNING, "worker.unkeyed_noise", model=self.model,
                  hint="set STREAMDP_NOISE_KEY_FILE: without it a Redis rollback re-noises releases (docs/service.md)")
        if self.closer is not None:  # (public: the clock and the published release count)
            behind = self.closer.due(self.closer.now()) - int(self.redis.hget(self.keys.pub_model, "releases") or 0)
            if behind >= BEHIND_WARN:
                _jlog(logging.WARNING, "worker.behind_schedule", model=self.model, windows=behind,
                      hint="every window due is released, empty or not, each adding a noise draw to every count: "
                           "start workers with the model (README, the late worker)")

    def _on_disconnect(self) -> None:
        self.reader.reset()
        self._state_version = None
        self._open = None

    def _on_stop(self) -> None:
        self.trim()  # what this worker merged is not kept past the retention window, also when it stops
        self.reader.leave()  # nothing in hand: leave the group cleanly
        _jlog(logging.INFO, "worker.stop", model=self.model, consumer=self.name)

    def drained(self) -> bool:
        """No entry waits (nothing pending in the group, every entry delivered) and, with release windows,
        every window holding added entries released (:meth:`WindowCloser.holds_unreleased`)."""
        return self.reader.drained() and (self.closer is None or not self.closer.holds_unreleased())

    # -- one step ------------------------------------------------------------
    def step(self, block_ms: int | None = None) -> int:
        """Release due windows, then read, process and commit up to ``batch_entries`` entries; returns how many
        entries were handled."""
        if self.closer is not None:
            now = self.closer.now()
            self.closer.tick(now)
            wait_ms = int(self.closer.seconds_to_next(now) * 1000) + 1
            block_ms = min(self.config.block_ms if block_ms is None else block_ms, wait_ms)
        entries = self._entries(self.reader.read(self.config.batch_entries, block_ms))
        if not entries:
            if time.monotonic() - self._last_trim >= self.config.trim_idle_s:
                self.trim()  # without traffic no commit triggers a trim: the retention window still holds
            return 0
        self._fault("after_read")
        self._handle(entries)
        return len(entries)

    @staticmethod
    def _entries(read: Any) -> list[_Entry]:
        """The group reader's entries as this worker's (which carry the decoded batch or the dead-letter reason)."""
        return [_Entry(e.id, e.fields, e.deliveries) for e in read]

    def _decode(self, e: _Entry) -> None:
        """The decode boundary: a batch, or a dead letter with a reason (total: the worker never dies on input)."""
        try:
            if e.fields is not None and e.poison(self.config.max_deliveries):
                e.dead = (f"poison: delivered {e.deliveries} times (max {self.config.max_deliveries})",
                          codec.entry_detail(e.fields))
                self.redis.hincrby(self.keys.stats, "poison", 1)
                return
            e.batch, e.dead = codec.decode_entry(self.schema, e.fields)
            if e.dead is not None and "(internal" in e.dead[0]:
                _jlog(logging.ERROR, "worker.decode_bug", model=self.model, entry=e.id, reason=e.dead[0])
        except redis.RedisError:
            raise
        except Exception as err:  # never die on input
            e.batch, e.dead = None, (f"undecodable (internal {type(err).__name__})", b"")
            _jlog(logging.ERROR, "worker.decode_bug", model=self.model, entry=e.id, error=type(err).__name__)

    def _delta(self, batch: codec.Batch) -> np.ndarray:
        """The batch's noised delta: the stored one if any, else drawn now and stored with SET NX."""
        def draw() -> np.ndarray:
            rng = self.noise.rng("batch", batch.batch_id, batch.X, batch.y)
            return self.spec.noisy_delta_encoded(batch.X, batch.y, rng)

        return drawn_once(self.redis, self.keys.delta(batch.batch_id), draw, self.spec, stats_key=self.keys.stats,
                          reused="delta_reused", after_draw=lambda: self._fault("after_draw"), ttl_s=PENDING_TTL_S)

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
        if self.closer is not None:
            self._add_entries(merge, ack_only)
            return
        self._commit_entries(merge, self._sum_deltas(merge, ack_only), ack_only)

    def _sum_deltas(self, merge: dict[str, _Entry], ack_only: list[_Entry]) -> np.ndarray | None:
        """The sum of the entries' noised deltas, each drawn once (stored, :meth:`_delta`) and added as it comes:
        one counts-sized sum and one delta in memory, not one per entry. An entry whose stored delta is
        unusable moves to ``ack_only`` as a dead letter (never redrawn). None when nothing is left to merge."""
        total = None
        for bid, e in list(merge.items()):
            try:
                d = self._delta(e.batch)
                self._fault("after_store")
            except (ValueError, TypeError) as err:  # a corrupted stored delta: dead-letter, never redraw
                e.dead = (f"stored delta unusable: {err}"[:1000], b"")
                ack_only.append(merge.pop(bid))
                continue
            if total is None:  # the first delta is the sum (a stored one read back is read-only: copied)
                total = d if d.flags.writeable and d.dtype == self._dtype else d.astype(self._dtype)
            else:
                total += d
            del d
        return total

    def _dead_items(self, es: list[_Entry]) -> list[tuple[str, str, bytes]]:
        out = []
        for e in es:
            if e.dead is not None:
                out.append((e.id, e.dead[0], e.dead[1]))
            elif e.batch is not None and e.batch.dropped:
                rows = e.batch.dropped
                detail = msgpack.packb({"batch_id": e.batch.batch_id, "rows": [[r, why] for r, why in rows[:10_000]]},
                                       use_bin_type=True)
                out.append((e.id, f"{len(rows)} invalid record(s) of {e.batch.n_in}; first: record {rows[0][0]} "
                                  f"(0-based) of the batch: {rows[0][1]}"[:1000], detail))
        return out

    def _commit_entries(self, merge: dict[str, _Entry], total: np.ndarray | None, ack_only: list[_Entry]) -> None:
        """Merge ``total`` (the sum of ``merge``'s noised deltas) in one atomic commit, retrying on conflicts.

        Memory: the new counts are this worker's cached counts with ``total`` added in place (the
        cache is dropped meanwhile: a failed commit reads the counts again), sent as a view, once (the
        script writes the retained release record around them); no model blob is built."""
        cfg = self.config
        retries = 0
        while True:
            m_entries = list(merge.values())
            ids_all = m_entries + ack_only
            if not ids_all:
                return
            dead = self._dead_items(ids_all)
            m = len(m_entries)
            new_version, counts_b, record, releases, n_records = 0, b"", (b"", b"", 0), 0, 0
            new_counts = None
            if m:
                v = self.redis.hget(self.keys.state, "version")
                v = int(v or 0)
                if v != self._state_version or self._counts is None:
                    self.guard.check(v)
                    self._counts = None  # the old counts go before the new ones are read
                    rel = self.redis.hget(self.keys.state, "releases")
                    # version 0 holds the spec's zero counts: not read (a counts-sized read costs redis-py 2x briefly)
                    c = self.redis.hget(self.keys.state, "counts") if v else None
                    self._counts = counts_from_bytes(c, self.spec) if c else np.zeros(self.spec.shape, self._dtype)
                    del c
                    self._releases = int(rel or 0)
                    self._state_version = v
                if total is None:  # entries were rejected: the sum of those left, from their stored deltas
                    total = self._sum_deltas(merge, ack_only)
                    continue
                new_counts, self._counts, self._state_version = self._counts, None, None
                new_counts += total
                releases = self._releases + m
                new_version = v + 1
                forest = self.spec.with_counts(new_counts, version=new_version, n_releases=releases)
                around = release_record_around_counts(forest)  # the script writes head, counts, tail
                record = (*around, 1) if around else (release_record(forest), b"", 0)
                counts_b = counts_view(new_counts)
                del forest, around
                n_records = sum(len(e.batch.y) for e in m_entries)
            keep = self.keep_versions
            drop = m > 0 and keep > 0 and new_version - keep >= 0
            keys = [self.keys.records, self.keys.state, self.keys.pub_model, self.keys.merged, self.keys.stats,
                    self.keys.dead, self.keys.pub_version(new_version),
                    self.keys.pub_version(new_version - keep if drop else new_version)]
            keys += [self.keys.delta(e.batch.batch_id) for e in m_entries]
            args: list[Any] = [GROUP, self.name, new_version - 1, counts_b, *record, releases, n_records,
                               int(time.time() * 1000), cfg.version_ttl_s, 1 if drop else 0, cfg.delta_ttl_s,
                               self.keys.pub_events, cfg.dead_maxlen, m, len(ack_only), len(dead)]
            args += [*_entry_args(m_entries, ack_only, dead), self.keys.model_id]
            self._fault("before_commit")
            res = self._commit(keys=keys, args=args)
            del args, counts_b, record
            self._fault("in_commit")
            status = as_str(res[0])
            if status == "ok":
                if m:
                    self._state_version, self._counts, self._releases = new_version, new_counts, releases
                    self.guard.record(new_version)
                    # (no figures of entries: how many were merged, acked or dead is exact, stats --exact)
                    _jlog(logging.DEBUG, "worker.commit", model=self.model, version=new_version, retries=retries)
                self._after_commit(ids_all, merged=m > 0)
                return
            if status == "replaced":
                return self._replaced()
            retries += 1
            if status == "conflict":
                self._state_version = None
                self.redis.hincrby(self.keys.stats, "commit_retries", 1)
            elif status == "rejected":
                self._rejected(res, ids_all, m, merge, ack_only)
                total = None  # summed again over the entries left
            else:
                raise RuntimeError(f"unexpected commit reply {res!r}")
            if retries > cfg.max_commit_retries:
                _jlog(logging.ERROR, "worker.give_up", model=self.model, retries=retries)
                return  # entries stay pending and are reclaimed later
            if status == "conflict" and retries > 3:
                time.sleep(min(0.05, 0.001 * retries) * (0.5 + secrets.randbelow(1000) / 1000))

    def _replaced(self) -> None:
        """The model was deleted and re-created under this name since this worker loaded it: write nothing and
        stop (its entries stay pending in the new model's group, where its own workers reclaim them)."""
        _jlog(logging.ERROR, "worker.model_replaced", model=self.model,
              hint="the model was deleted and re-created: start a new worker for it")
        self.stop()

    def _after_commit(self, entries: list[_Entry], *, merged: bool) -> None:
        """After a successful commit or add: log the dead letters, trim every ``trim_every`` merging commits."""
        # the distinct reasons only (how many entries or records were bad is exact: stats --exact; the counts
        # and rows stay in the worker-only dead-letter stream)
        reasons = {e.dead[0] if e.dead is not None else f"invalid records: {e.batch.dropped[0][1]}"
                   for e in entries if e.dead is not None or (e.batch is not None and e.batch.dropped)}
        if reasons:
            _jlog(logging.WARNING, "worker.dead_letter", model=self.model, reasons=sorted(r[:200] for r in reasons)[:5])
        self._commits_since_trim += 1 if merged else 0
        if self._commits_since_trim >= self.config.trim_every:
            self._commits_since_trim = 0
            self.trim()

    def _rejected(self, res: Any, ids_all: list[_Entry], m: int, merge: dict[str, _Entry],
                  ack_only: list[_Entry]) -> None:
        """Apply a ``rejected`` commit reply: duplicates become ack-only, entries no longer ours are dropped."""
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

    def _add_entries(self, merge: dict[str, _Entry], ack_only: list[_Entry]) -> None:
        """``window``/``tree``: add the entries' EXACT tallies into the open window's accumulator, exactly once.

        One atomic script checks ownership and dedup, adds, records the batch ids and XACKs
        (:data:`.commit.WINDOW_ADD_LUA`); ``moved`` (a closer sealed the window meanwhile) retries
        into the new open window. Noise comes when the window closes (:mod:`.windows`).
        """
        # Each batch's tally as its nonzero cells only, never a dense (counts-sized) array.
        tallies: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for bid, e in list(merge.items()):
            try:  # the mechanism's sampling (disjoint budget, k-anonymity) drawn per batch, keyed when possible
                tallies[bid] = self.spec.sparse_tally_encoded(
                    e.batch.X, e.batch.y, self.noise.rng("tally", bid, e.batch.X, e.batch.y))
            except (ValueError, TypeError) as err:
                e.dead = (f"batch not tallied: {err}"[:1000], b"")
                ack_only.append(merge.pop(bid))
        cfg = self.config
        retries = 0
        while True:
            m_entries = list(merge.values())
            ids_all = m_entries + ack_only
            if not ids_all:
                return
            dead = self._dead_items(ids_all)
            m = len(m_entries)
            cells = joined_cells([tallies[e.batch.batch_id] for e in m_entries]) if m else b""
            if self._open is None:
                self._open = int(self.redis.hget(self.keys.state, "open") or 1)
            args: list[Any] = [GROUP, self.name, self._open, sum(len(e.batch.y) for e in m_entries),
                               int(time.time() * 1000), cfg.dead_maxlen, m, len(ack_only), len(dead), cells]
            args += [*_entry_args(m_entries, ack_only, dead), self.keys.model_id]
            keys = [self.keys.records, self.keys.state, self.keys.merged, self.keys.stats, self.keys.dead,
                    self.keys.acc(self._open)]
            self._fault("before_commit")
            res = self._add(keys=keys, args=args)
            self._fault("in_commit")
            status = as_str(res[0])
            if status == "ok":
                self._open = int(res[1])
                self._after_commit(ids_all, merged=m > 0)
                return
            if status == "replaced":
                return self._replaced()
            retries += 1
            if status == "moved":
                self._open = int(res[1])
            elif status == "rejected":
                self._rejected(res, ids_all, m, merge, ack_only)
            else:
                raise RuntimeError(f"unexpected add reply {res!r}")
            if retries > cfg.max_commit_retries:
                _jlog(logging.ERROR, "worker.give_up", model=self.model, retries=retries)
                return  # entries stay pending and are reclaimed later

    def trim(self) -> int:
        """XTRIM MINID: never drops an unacked entry, keeps the model's retention window (:mod:`.retention`).

        ``MINID = min(oldest pending id (or the id just after the last delivered one), retention floor)``:
        with nothing pending every delivered entry is acked, the last one included (XTRIM MINID keeps
        the entry equal to MINID, so MINID must be past it, or a merged batch would stay in Redis).
        """
        self._last_trim = time.monotonic()
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
            ret = get_retention(self.redis, self.model)
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
            _jlog(logging.WARNING, "worker.trim_failed", model=self.model, error=str(err))
            return 0

    #: An entry id more than this far ahead of the server's clock was given by its producer (XADD with an id).
    FUTURE_ID_SLACK_MS = 60_000

    def _trim_future(self, last: str, pending_min: str | None) -> int:
        """Delete merged entries whose ids a producer set ahead of the clock (where retention is bounded in
        time): MINID trimming goes by id, so they outlived the policy by as long as the producer chose (a red
        team's finding). Only entries delivered (at most ``last``) and acked (below ``pending_min``) go."""
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


def _next_id(stream_id: str) -> str:
    """The smallest stream id after ``stream_id`` (``ms-seq`` -> ``ms-(seq+1)``); "0-0" and "None" pass through."""
    if stream_id in ("0-0", "None"):
        return stream_id
    ms, _, seq = stream_id.partition("-")
    return f"{ms}-{int(seq or 0) + 1}"
