"""Stream workers: read batches in a consumer group, noise each batch once, merge exactly once.

One loop step:

1. ``XAUTOCLAIM`` entries of dead workers idle for ``claim_idle_ms`` (sooner, at the start and at each claim
   interval, those of a worker whose process is provably gone: :func:`.group.gone`); entries
   delivered more than ``max_deliveries`` times are dead-lettered (poison).
2. ``XREADGROUP`` up to ``batch_entries`` new entries (blocking ``block_ms``).
3. Decode and validate each entry (:mod:`.codec`); undecodable entries and bad
   rows go to the dead-letter stream with a reason. The worker never dies on input.
4. Batches merged before (a duplicate XADD, a redelivery after its commit) are only acked; the others
   reach the model exactly once by the model's release policy (:mod:`.merging`): under ``batch`` each
   batch's noised delta is drawn **once** (stored before the commit) and the sum committed by one atomic
   script with the new counts; under ``window``, ``grow`` and ``tree`` the EXACT tallies
   are added into the open window's worker-only accumulator, and each step first releases the windows
   due on the public schedule (:mod:`.windows`: seal, noise once, release; any worker, lock-free).
5. Every ``trim_every`` merging commits, and every ``trim_idle_s`` while no entry arrives, the stream is
   trimmed to the model's retention window, never past an unacked entry (:mod:`.trimming`).

Noise is keyed by ``$STREAMDP_NOISE_KEY_FILE`` when set, and a rolled-back model is refused
(:mod:`.rollback`).

Steps 1-2 are the consumer-group loop shared with the job worker
(:mod:`.group`). Counters live in ``priv:stats`` (see :mod:`.stats`); logs are
JSON lines on the ``streamdp.worker`` logger. Test-only fault points:
:mod:`.faults`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import redis

from streamdp.service import codec
from streamdp.service.beat import beating
from streamdp.service.connection import connect, heal
from streamdp.service.durability import check_replay
from streamdp.service.faults import FaultPoints
from streamdp.service.group import LIVE_IDLE_S, GroupReader, consumer_name
from streamdp.service.keys import GROUP, Keys, as_str
from streamdp.service.log import jlog
from streamdp.service.loop import GroupLoop
from streamdp.service.merging import BatchMerge, WindowAdd, WorkerEntry
from streamdp.service.published import KEEP_BYTES, versions_kept
from streamdp.service.registry import load_cadence, load_policy, load_spec, load_unit
from streamdp.service.rollback import (
    ENV_KEY,
    ENV_STATE,
    NoiseKeyMismatch,
    NoiseSource,
    NoNoiseKey,
    RollbackGuard,
    load_noise_key,
)
from streamdp.service.size_limits import grown_blob_bound
from streamdp.service.trimming import StreamTrimmer
from streamdp.service.units import Unit, id_key
from streamdp.service.windows import WindowCloser
from streamdp.validation import MAX_BLOCK_MS, check_integer

__all__ = ["Worker", "WorkerConfig"]

log = logging.getLogger("streamdp.worker")


@dataclass
class WorkerConfig:
    batch_entries: int = 16  # k: entries coalesced per commit
    block_ms: int = 1000  # XREADGROUP BLOCK
    claim_idle_ms: int = 30_000  # reclaim entries of workers idle this long
    claim_every_s: float = 1.0  # how often to run XAUTOCLAIM
    max_deliveries: int = 5  # poison threshold
    delta_ttl_s: int = 0  # stored deltas and window noise kept this long after their merge (0: dropped)
    keep_versions: int = 20  # pub:v:<N> retained (0: no bound in number; keep_bytes still bounds them)
    keep_bytes: int = KEEP_BYTES  # ... and no more of them than fit in these bytes (0: no bound; at least one)
    version_ttl_s: int = 0  # TTL of pub:v:<N> (0: none)
    dead_maxlen: int = 10_000  # dead-letter stream approximate cap (each letter is bounded in bytes: codec.dead_letter)
    trim_every: int = 20  # commits between MINID trims
    trim_idle_s: float = 60.0  # an idle stream is trimmed this often (retention holds without traffic)
    max_commit_retries: int = 1000
    forget_consumers_s: float = 3600.0  # drop group consumers idle this long with nothing pending (0: never)
    noise_key_file: str | None = None  # master noise key (default $STREAMDP_NOISE_KEY_FILE): rollback-proof noise
    state_dir: str | None = None  # rollback guard's directory (default $STREAMDP_STATE_DIR)

    def check(self) -> WorkerConfig:
        """Each setting in its range, with an error naming it (the CLI checks before starting any worker).

        >>> WorkerConfig(block_ms=0).check()
        Traceback (most recent call last):
        ...
        ValueError: block_ms must be an integer in [1, 3600000], got 0
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


def warn_unkeyed(model: str, **context: Any) -> None:
    """Log ``worker.unkeyed_noise`` (a warning) for ``model``: once per worker, or once per pool
    (:class:`~streamdp.service.pool.WorkerPool` logs it and its processes do not)."""
    _jlog(
        logging.WARNING,
        "worker.unkeyed_noise",
        model=model,
        **context,
        hint="set STREAMDP_NOISE_KEY_FILE: without it a Redis rollback re-noises releases (docs/service.md)",
    )


def refuse_unkeyed(model: str, unit: Unit | None, master: bytes | None) -> None:
    """Raise :class:`~streamdp.service.rollback.NoNoiseKey` when ``model`` protects persons (``unit``) and this
    host has no noise key (``master``): its workers hash the ids with a key derived from it."""
    if unit is not None and master is None:
        raise NoNoiseKey(
            f"model {model!r} protects persons (privacy id {unit.privacy_id!r}): its workers hash the ids with a key "
            f"derived from the noise key the model was created with; give every worker that same file "
            f"(export {ENV_KEY}=/path/to/noise.key; a new key would not match the model's)"
        )


def preflight(r: Any, model: str, noise_key_file: str | None = None) -> None:
    """What every worker process of ``model`` would refuse at its start, checked once before any is started
    (``streamdp worker`` prints one error line instead of one per process). Raises
    :class:`~streamdp.service.rollback.WorkerRefused` (no key for a person unit, or another key than the model's),
    ValueError or OSError (an unusable key file)."""
    r = connect(r)
    master = load_noise_key(noise_key_file)
    refuse_unkeyed(model, load_unit(r, model), master)
    msg = NoiseSource(master, "preflight", "blocks").mismatch(r.hget(Keys(model).state, "noise_key"), model)
    if msg is not None:
        raise NoiseKeyMismatch(msg)


def _no_fault(point: str) -> None:
    pass


class Worker(GroupLoop):
    """One worker process (a consumer in group ``workers`` of the model's record stream).

    ``faults``: test-only fault points (:mod:`.faults`); default: ``$STREAMDP_FAULT_POINTS``, normally unset.
    ``warn_unkeyed``: log ``worker.unkeyed_noise`` at start when no noise key is set (False in a pool's
    processes: the pool logs it once for all of them).
    """

    log = log
    event_prefix = "worker"
    #: Longest blocking read (ms) of a worker run ``until_drained`` while another worker closes a due window.
    DRAIN_FOLLOW_MS = 10

    def __init__(
        self,
        redis_url: Any = None,
        model: str = "",
        *,
        consumer: str | None = None,
        config: WorkerConfig | None = None,
        faults: FaultPoints | None = None,
        warn_unkeyed: bool = True,
        **overrides: Any,
    ):
        super().__init__()
        self.warn_unkeyed = warn_unkeyed
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
        if not self.spec.private or math.isinf(self.spec.epsilon):  # (one made before epsilon=inf was refused)
            hint = "this model releases exact counts (epsilon inf): NOT private; delete it and create it again"
            _jlog(logging.WARNING, "worker.not_private", model=model, hint=hint)
        self.schema = self.spec.schema
        self.name = consumer or consumer_name()
        self.reader = GroupReader(
            self.redis,
            self.keys.records,
            GROUP,
            self.name,
            block_ms=cfg.block_ms,
            claim_idle_ms=cfg.claim_idle_ms,
            claim_every_s=cfg.claim_every_s,
            stats=self.keys.stats,
            logger=log,
            context={"model": model},
        )
        self._beat = contextlib.ExitStack()  # (the run's heartbeat: _on_start, _on_stop)
        self._fault: Callable[[str], None] = faults or FaultPoints.from_env() or _no_fault
        self._commits_since_trim = 0
        self._last_trim = time.monotonic()
        self.reader.create()
        self.policy, start = load_policy(self.redis, model)
        # The model's identity (its state's model_id: the scripts refuse a worker of another model re-created under
        # the name; stored noise is named by it). A model from before the field: pub:model's id, for the noise key.
        self.keys = Keys.of(self.redis, model)
        model_id = self.keys.model_id or as_str(self.redis.hget(self.keys.pub_model, "model_id") or b"")
        # a model created before the "blocks" noise layout has none in its state: it keeps "stream"
        layout = as_str(self.redis.hget(self.keys.state, "noise_layout") or b"stream")
        master = load_noise_key(cfg.noise_key_file)
        self.noise = NoiseSource(master, model_id, layout)
        unit = load_unit(self.redis, model)
        refuse_unkeyed(model, unit, master)
        self.noise.check(self.redis.hget(self.keys.state, "noise_key"), model)  # the key the model was created with
        self.guard = RollbackGuard(cfg.state_dir or os.environ.get(ENV_STATE) or None, model_id)
        self.guard.check(int(self.redis.hget(self.keys.state, "version") or 0))  # refuse a rolled-back model
        # a retained version: the counts, or a grown release's whole blob (at most its bound)
        version_bytes = (
            grown_blob_bound(self.spec, int(self.redis.strlen(self.keys.spec)))
            if self.policy.kind == "grow"
            else self.spec.counts.nbytes
        )
        self.keep_versions = versions_kept(cfg.keep_versions, version_bytes, cfg.keep_bytes)
        self._drop_stale_versions()
        common = dict(dead_maxlen=cfg.dead_maxlen, max_commit_retries=cfg.max_commit_retries, fault=self._fault)
        self.closer: WindowCloser | None = None
        self.merger: BatchMerge | WindowAdd
        if self.policy.kind == "batch":
            self.merger = BatchMerge(
                self.redis,
                self.keys,
                self.spec,
                self.name,
                noise=self.noise,
                guard=self.guard,
                keep_versions=self.keep_versions,
                version_ttl_s=cfg.version_ttl_s,
                delta_ttl_s=cfg.delta_ttl_s,
                unit=unit,
                id_key=id_key(master, model_id) if unit is not None and master else None,
                **common,
            )
        else:
            self.merger = WindowAdd(
                self.redis,
                self.keys,
                self.spec,
                self.name,
                noise=self.noise,
                unit=unit,
                id_key=id_key(master, model_id) if unit is not None and master else None,
                **common,
            )
            self.closer = WindowCloser(
                self.redis,
                self.keys,
                self.spec,
                self.policy,
                start,
                noise=self.noise,
                guard=self.guard,
                fault=self._fault,
                version_ttl_s=cfg.version_ttl_s,
                keep_versions=self.keep_versions,
                noise_ttl_s=cfg.delta_ttl_s,
                cadence=load_cadence(self.redis, model),
            )
        self.trimmer = StreamTrimmer(self.redis, self.keys, self.name, forget_consumers_s=cfg.forget_consumers_s)

    def _drop_stale_versions(self) -> int:
        """Remove the retained versions older than the ones this worker keeps, left by workers that kept more (an
        upgrade to the byte bound, a lower --keep-mib or --keep-versions): each release drops only the one version
        that falls out of the window, so they would stay for good. Walks down from the newest
        one to drop until a version is missing; returns how many were removed."""
        if self.keep_versions <= 0:
            return 0
        n = int(self.redis.hget(self.keys.state, "version") or 0) - self.keep_versions
        dropped = 0
        while n >= 0 and self.redis.delete(self.keys.pub_version(n)):
            n, dropped = n - 1, dropped + 1
        return dropped

    # -- control (the run loop is :class:`.loop.GroupLoop`'s) ----------------------
    def _log_context(self) -> dict:
        return {"model": self.model}

    def _on_start(self) -> None:
        _jlog(
            logging.INFO,
            "worker.start",
            model=self.model,
            consumer=self.name,
            config={  # the paths in use, also where the environment names them (a path, never a key)
                **asdict(self.config),
                "noise_key_file": self.config.noise_key_file or os.environ.get(ENV_KEY) or None,
                "state_dir": self.config.state_dir or os.environ.get(ENV_STATE) or None,
            },
            release=self.policy.to_dict(),
            keyed_noise=self.noise.keyed,
            rollback_guard=self.guard.path is not None,
        )
        check_replay(  # when this user may ask (the deploy worker user may not; model create, as admin, refuses)
            self.redis,
            refuse=False,
            warn=lambda problem: _jlog(logging.WARNING, "worker.restart_loses_data", model=self.model, problem=problem),
        )
        if not self.noise.keyed and self.warn_unkeyed:
            warn_unkeyed(self.model)
        if self.closer is not None and self.closer.cadence is None:  # (public: the clock and the release count)
            behind = self.closer.due(self.closer.now()) - int(self.redis.hget(self.keys.state, "releases") or 0)
            if behind >= BEHIND_WARN:
                _jlog(
                    logging.WARNING,
                    "worker.behind_schedule",
                    model=self.model,
                    windows=behind,
                    hint="every window due is released, empty or not, each adding a noise draw to every count: "
                    "start workers with the model (README, the late worker)",
                )
        # one heartbeat for the run: the consumer stays live however long a step takes (closed in _on_stop)
        self._beat.enter_context(beating(self.reader.still_here, LIVE_IDLE_S / 3))

    def _on_disconnect(self) -> None:
        if self.redis is not self.reader.r:  # (the reader heals its own client: often this one)
            heal(self.redis)
        self.reader.reset()
        self.merger.reset()

    def _on_stop(self) -> None:
        self._beat.close()
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
        entries were handled. Under :meth:`run` the consumer stays live (:attr:`.group.Holder.live`) however long
        a step takes (one heartbeat thread for the run, not one a step)."""
        if self.closer is not None:
            now = self.closer.now()
            self.closer.tick(now)
            wait_ms = int(self.closer.seconds_to_next(now) * 1000) + 1
            block_ms = min(self.config.block_ms if block_ms is None else block_ms, wait_ms)
        if self.until_drained:
            if self.drained():  # (another worker released the last window since: stop now, not after a read)
                return 0
            # another worker closing a window may be closing the last one: look again soon, to stop with it
            poll = (
                self.DRAIN_FOLLOW_MS
                if self.closer is not None and self.closer.closing_elsewhere
                else self.DRAIN_POLL_MS
            )
            block_ms = min(self.config.block_ms if block_ms is None else block_ms, poll)
        entries = self._entries(self.reader.read(self.config.batch_entries, block_ms))
        if not entries:
            if time.monotonic() - self._last_trim >= self.config.trim_idle_s:
                self.trim()  # without traffic no commit triggers a trim: the retention window still holds
            return 0
        self._fault("after_read")
        self._handle(entries)
        return len(entries)

    @staticmethod
    def _entries(read: Any) -> list[WorkerEntry]:
        """The group reader's entries as this worker's (which carry the decoded batch or the dead-letter reason)."""
        return [WorkerEntry(e.id, e.fields, e.deliveries) for e in read]

    def _decode(self, e: WorkerEntry) -> None:
        """The decode boundary: a batch, or a dead letter with a reason (total: the worker never dies on input)."""
        try:
            if e.fields is not None and e.poison(self.config.max_deliveries):
                e.dead = (
                    f"poison: delivered {e.deliveries} times (max {self.config.max_deliveries})",
                    codec.entry_detail(e.fields, head=self._dead_head()),
                )
                self.redis.hincrby(self.keys.stats, "poison", 1)
                return
            e.batch, e.dead = codec.decode_entry(self.schema, e.fields, head=self._dead_head())
            if e.dead is not None and "(internal" in e.dead[0]:
                _jlog(logging.ERROR, "worker.decode_bug", model=self.model, entry=e.id, reason=e.dead[0])
        except redis.RedisError:
            raise
        except Exception as err:  # never die on input
            e.batch, e.dead = None, (f"undecodable (internal {type(err).__name__})", b"")
            _jlog(logging.ERROR, "worker.decode_bug", model=self.model, entry=e.id, error=type(err).__name__)
        e.fields = None  # decoded (or a dead letter with its detail): the payload is not read again

    def _dead_head(self) -> int:
        """Payload bytes a dead letter keeps: none where the model retains no raw records (its retention, as the
        last trim read it), else :data:`.codec.DEAD_HEAD`."""
        return 0 if self.trimmer.retention.keeps_nothing else codec.DEAD_HEAD

    def _handle(self, entries: list[WorkerEntry]) -> None:
        for e in entries:
            self._decode(e)
        merge: dict[str, WorkerEntry] = {}
        ack_only: list[WorkerEntry] = []
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
        out = self.merger.merge(merge, ack_only)
        if out.status == "replaced":
            self._replaced()
        elif out.status == "ok":
            self._after_commit(out.entries, out.dead_written)

    def _replaced(self) -> None:
        """The model was deleted and re-created under this name since this worker loaded it: write nothing and
        stop (its entries stay pending in the new model's group, where its own workers reclaim them)."""
        _jlog(
            logging.ERROR,
            "worker.model_replaced",
            model=self.model,
            hint="the model was deleted and re-created: start a new worker for it",
        )
        self.stop()

    def _after_commit(self, entries: list[WorkerEntry], written: set[str]) -> None:
        """After a successful commit or add: log the dead letters ``written`` (entry ids; ``worker.dead_letter``, once
        per batch id as they are written; a re-pushed batch's, recorded before, only at INFO), trim every
        ``trim_every`` commits (dead-letter-only ones too)."""
        # the distinct reasons only (how many entries or records were bad is exact: stats --exact; the counts
        # and rows stay in the worker-only dead-letter stream)
        bad = [e for e in entries if e.dead is not None or (e.batch is not None and e.batch.dropped)]
        reasons = {
            e.dead[0] if e.dead is not None else f"invalid records: {e.batch.dropped[0][1]}"
            for e in bad
            if e.id in written
        }
        if reasons:
            _jlog(logging.WARNING, "worker.dead_letter", model=self.model, reasons=sorted(r[:200] for r in reasons)[:5])
        if any(e.id not in written for e in bad):
            _jlog(
                logging.INFO,
                "worker.dead_letter_recorded_before",
                model=self.model,
                note="a re-pushed batch with refused records: its dead letter was written at its first delivery",
            )
        self._commits_since_trim += 1  # every commit: acked entries (merged, duplicate or dead) wait for a trim
        if self._commits_since_trim >= self.config.trim_every:
            self._commits_since_trim = 0
            self.trim()

    def trim(self) -> int:
        """Trim the record stream now (:meth:`.trimming.StreamTrimmer.trim`); returns how many entries went."""
        self._last_trim = time.monotonic()
        return self.trimmer.trim()

    def forget_idle_consumers(self) -> list[str]:
        """Remove the group's consumers idle for ``forget_consumers_s`` with nothing pending (not this one)."""
        return self.trimmer.forget_idle_consumers()
