"""Release windows in the service: seal, noise once, merge and publish on the public schedule.

For ``release="window"``, ``"grow"`` and ``"tree"`` (:mod:`streamdp.release.continual`) workers add each
entry's EXACT tally into the open window's accumulator ``priv:acc:<w>`` (a hash with one field per add:
``b:<first batch id>`` -> the add's nonzero cells, :func:`.accumulator.joined_cells`; worker-only) in the atomic add
script (:data:`.commit.WINDOW_ADD_LUA`), which records the batch id and XACKs in the same step. The open
window is the state field ``open``: a public rule (the first window not yet sealed), read inside the
script, so an entry lands in exactly one window.

Closing window ``w`` is three idempotent steps any worker may run (no lock; a short lease
``priv:closing:<w>`` only keeps the other workers from duplicating a close, never decides anything):

1. **seal** (:data:`.commit.SEAL_LUA`): once the clock passed ``w``'s end
   (:func:`~streamdp.release.continual.windows_due`, ``release_every`` seconds from the model's creation),
   ``open`` moves from ``w`` to ``w+1`` if nothing is sealed yet; from then on adds go to ``w+1`` and
   ``priv:acc:<w>`` is frozen;
2. **noise**: read the state, the frozen accumulator's fields (and the tree state) in one MULTI, then their
   adds a group at a time (:func:`.accumulator.read_acc_counts`); draw the window's noisy delta (``window``)
   or each closing node's noisy sum (``tree``), or the whole grown release (``grow``: structure and counts,
   as a model blob), and store it with ``SET NX`` (``priv:wdelta:<w>``, ``priv:node:<epoch:level:index>``)
   before use: a racing or later closer reads the stored draw, so each release's noise is drawn once;
3. **merge** (:meth:`WindowCloser._release`, one MULTI/EXEC under WATCH of the state): CAS on
   ``releases == w-1``, ``open > w`` and the version; write counts (``grow``: the grown blob; and the tree
   state), publish ``pub:model``/``pub:v:<N>``, delete the accumulator, set a TTL on the stored noise,
   announce. Exactly one closer wins.

A closer killed after any step leaves state another worker's next tick resumes from: nothing
sealed-but-lost (adds after the seal go to ``w+1``), nothing noised twice (step 2's SET NX), nothing merged
twice (step 3's CAS). Windows are released in order and every due window is released, empty or not, so the
number of releases is a function of the clock alone; with a cadence (:mod:`.schedule`,
:mod:`streamdp.release.cadence`) each window's end is fixed by the releases before it, so the releases are a
function of the clock and of released values, and a release whose total says it carries no record is left
out of the published counts. A ``window`` model with a half-life publishes decayed counts of the released
deltas (:mod:`.forgetting`), and every release appends its public line to the model's history (:mod:`.history`).
"""

from __future__ import annotations

import json
import logging
import math
import secrets
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import redis

from streamdp.estimation import cell_variance
from streamdp.forest.model import PrivateForest
from streamdp.release.cadence import Cadence, Schedule, release_total
from streamdp.release.continual import (
    ReleasePolicy,
    TreeState,
    noisy_node,
    published_variance,
    window_delta,
    window_end,
    windows_closed,
)
from streamdp.service.accumulator import AccumulatorGone, read_acc_counts
from streamdp.service.commit import SEAL_LUA, UNLEASE_LUA
from streamdp.service.draw_once import PENDING_TTL_S, drawn_once, stored_once
from streamdp.service.forgetting import Decay, Decayed, release_records
from streamdp.service.history import append, entry
from streamdp.service.keys import Keys, as_str
from streamdp.service.log import jlog
from streamdp.service.model_store import read_published_counts
from streamdp.service.published import published_fields, release_record_parts
from streamdp.service.rollback import NoiseSource, RollbackGuard
from streamdp.service.schedule import WindowSchedule, release_left_out

__all__ = ["WindowCloser"]

log = logging.getLogger("streamdp.worker")
#: What a windowed model's state holds where it held a copy of the published counts (or grown blob): closers read
#: ``pub:model``'s. A worker of an earlier version, in a rolling upgrade, reads only the state's copy: these bytes
#: fit no forest, so it stops with an error instead of taking a missing copy for zero counts.
COUNTS_IN_PUB_MODEL = b"streamdp: counts in pub:model"
MAX_CLOSES_PER_TICK = 1000


class WindowCloser:
    """Closes the due windows of one model (run by every worker; see the module docstring)."""

    def __init__(
        self,
        r: redis.Redis,
        keys: Keys,
        spec: PrivateForest,
        policy: ReleasePolicy,
        start: float,
        *,
        noise: NoiseSource,
        guard: RollbackGuard,
        fault: Callable[[str], None],
        version_ttl_s: int = 0,
        keep_versions: int = 20,
        noise_ttl_s: int = 0,
        cadence: Cadence | None = None,
    ):
        if policy.kind == "batch":
            raise ValueError("release='batch' has no windows")
        self.r, self.keys, self.spec, self.policy, self.start = r, keys, spec, policy, start
        self.noise, self.guard, self.fault = noise, guard, fault
        self.version_ttl_s, self.keep_versions, self.noise_ttl_s = version_ttl_s, keep_versions, noise_ttl_s
        self.dtype = spec.counts.dtype.type  # the forest owns its counts dtype (float for laplace)
        self.eps_node = policy.node_epsilon(spec.epsilon_per_tree)
        self.real = spec.real_rows  # (the real cells block by block: no counts-sized mask held)
        self._seal, self._unlease = r.register_script(SEAL_LUA), r.register_script(UNLEASE_LUA)
        self._released = -1  # last known releases (a cache: the scripts decide)
        self.closing_elsewhere = False  # whether the last tick found a due window leased by another worker
        # Every worker of a model ticks at the same window ends: without the lease each would draw the blob and
        # send it (tens of MB at height 6) only for all but one to lose the CAS. Correctness never depends on
        # it (SET NX noise, CAS close); it expires after about what a close of this size takes, so a closer
        # killed mid-close delays the window by that much.
        self.lease_ms = 250 + int(np.prod(spec.shape)) // 1000
        self.token = secrets.token_hex(8)
        # window lengths from released values (streamdp.release.cadence); None: the clock's windows
        self.windows = WindowSchedule(r, keys, spec, policy, start, cadence)
        self.cadence = self.windows.cadence
        # a half-life: the published counts decay over the released deltas (streamdp.service.forgetting)
        self.decay = Decay(policy, spec) if policy.half_life is not None else None

    def now(self) -> float:
        """The schedule's clock: the host's wall clock (keep hosts on NTP). Only the schedule's
        precision depends on it: sealing and releasing are decided by the scripts' checks."""
        return time.time()

    def due(self, now: float) -> int:
        """How many windows have ended by ``now`` (public: the clock and, with a cadence, the released values)."""
        if self.cadence is None:
            return windows_closed(now, self.start, self.policy.release_every)
        return self.windows.read().due(now)

    def seconds_to_next(self, now: float) -> float:
        """Seconds until the next window ends (the worker bounds its blocking read by it)."""
        if self.cadence is None:
            return max(0.0, window_end(self.due(now) + 1, self.start, self.policy.release_every) - now)
        return max(0.0, (self.windows.cached or self.windows.read()).end - now)

    def tick(self, now: float | None = None) -> int:
        """Seal and release every window due by ``now``; returns the number this worker released."""
        now = self.now() if now is None else now
        self.closing_elsewhere = False
        if self.cadence is None:
            due = self.due(now)
            if due <= self._released:
                return 0
        elif self.windows.cached is not None and now < self.windows.cached.end:
            return 0  # (a stale cache's end is never later than the stored one's)
        n = 0
        for _ in range(MAX_CLOSES_PER_TICK):
            if self.cadence is not None:
                due = self.windows.read().due(now)  # the open window's end is fixed by the releases before it
            open_, rel = (int(x) for x in self._seal(keys=[self.keys.state], args=[due, self.keys.model_id]))
            if rel < 0:
                break  # the model was deleted (its workers stop on NOGROUP)
            self._released = rel
            if open_ <= rel + 1:
                break  # nothing sealed: no window due
            self.fault("close_after_seal")
            lease = self.keys.closing(rel + 1)
            if not self.r.set(lease, self.token, nx=True, px=self.lease_ms):
                self.closing_elsewhere = True
                break  # another worker is closing it: a later tick resumes if that one died (the lease expires)
            try:
                if self.close(rel + 1):
                    n += 1
            except AccumulatorGone:
                pass  # released by another closer while this one read it: the next seal looks again
            finally:
                self._unlease(keys=[lease], args=[self.token])  # only this closer's (a slow close's may have expired)
        return n

    def holds_unreleased(self) -> bool:
        """Whether a window that entries were added to is not released yet (its accumulator exists): a worker
        run ``until_drained`` waits for it, on the public schedule, or it would exit with the last records
        merged but not published."""
        open_, rel = (int(x or 0) for x in self.r.hmget(self.keys.state, "open", "releases"))
        return open_ > rel and bool(self.r.exists(*(self.keys.acc(w) for w in range(rel + 1, open_ + 1))))

    def close(self, w: int) -> bool:
        """Noise and release sealed window ``w`` (False: another worker released it first)."""
        p = self.r.pipeline(transaction=True)
        window = self.policy.kind == "window"  # (``tree`` publishes its state's estimate and needs no counts)
        p.hmget(self.keys.state, "version", "releases", "open", "schedule", "noise_key")
        p.hkeys(self.keys.acc(w))  # (its fields: read in groups below, not whole)
        p.get(self.keys.tree)
        (version, rel, open_, sched_raw, noise_key), acc_fields, tree_b = p.execute()
        version, rel, open_ = int(version or 0), int(rel or 0), int(open_ or 1)
        if rel != w - 1 or open_ <= w:
            return False
        self.guard.check(version)
        self.noise.check(noise_key, self.keys.name)  # before any draw: the key the model was created with
        sched = self.windows.of(rel, sched_raw)

        own_sd = math.sqrt(self._release_variance()) if window else None  # (tree: per node; grow: _close_grown)

        def entry_of(records: float | None, sd: float, published: int = version, merged: bool = False) -> dict:
            return entry(w, published, merged, sched.end, sched.length, records, sd, own_sd)  # (public values)

        if self.policy.kind == "grow":
            return self._close_grown(w, version, acc_fields, sched)
        base: Decayed | None = None  # (a decayed model's counts before this release, and after it)
        decayed: Decayed | None = None
        if window and self.decay is not None:  # the decayed counts' base, read with the version it belongs to
            base = self.decay.base(self.r, self.keys.state, version, self.spec.shape)
            if version and base is None:
                return False  # released meanwhile (the caller seals and looks again)
        exact = read_acc_counts(self.r, self.keys.acc(w), acc_fields, self.spec.shape)
        extra: dict[str, Any] = {}  # state fields the release writes besides the counts' (a decayed model's)
        if window:
            key = self.keys.window_delta(w)

            def draw() -> np.ndarray:  # in place: the accumulator's counts become the delta (its key hashed before)
                return window_delta(
                    exact,
                    self.spec.shape,
                    self.eps_node,
                    self.spec.mechanism,
                    self.noise.rng("window", str(w), self._exact_bytes(exact)),
                    self.real,
                    self.spec.k,
                    in_place=True,
                )

            # Stored for an empty window too, though its release is pure noise: skipping the write would make
            # empty windows' releases earlier, and their timing would say which windows received records.
            delta, noise_keys = self._stored(key, draw), [key]
            del exact
            records = release_records(delta, self.spec)  # (released values)
            new_sched = self.windows.next(sched, delta[self.spec.n_trees :, 0])
            if new_sched.merged == sched.merged:  # left out of the estimate (its released total says: noise)
                sd = math.sqrt(base.variance if base is not None else self._variance(sched.merged))
                return self._left_out(w, version, sched, new_sched, noise_keys, entry_of(records, sd))
            state_b = b""
            if self.decay is not None:  # lam_t * C_(t-1) + D_t over the released deltas (post-processing)
                decayed = self.decay.fold(base, delta, cell_variance(self.spec.mechanism, self.eps_node, self.spec.k))
                new_counts, extra = self.decay.published(decayed, np.dtype(self.dtype)), Decay.fields(decayed)
            else:  # the delta becomes the counts: the published ones (none before the first release) added in
                # place, a part at a time as they are read, so a worker holds no counts between its closes
                new_counts = delta if delta.flags.writeable else delta.copy()  # (a stored draw reused: read-only)
                if version and read_published_counts(self.r, self.keys, version, self.spec, into=new_counts) is None:
                    return False  # released meanwhile (the caller seals and looks again)
            del delta
        else:
            state = TreeState.from_bytes(tree_b) if tree_b else TreeState.empty(self.policy, self.spec.shape)
            if state.t != w - 1:
                raise RuntimeError(f"tree state is at window {state.t}, the model released {w - 1}: corrupted state")
            noisy, noise_keys = {}, []
            for node, x in state.closing_sums(exact).items():
                key = self.keys.node(node.key)
                noisy[node] = self._stored(
                    key,
                    lambda x=x, node=node: noisy_node(
                        x, self.eps_node, self.spec.mechanism, self.noise.rng("node", node.key, x), self.real
                    ),
                )
                noise_keys.append(key)
            new_state = state.advance(exact, noisy)
            new_counts, state_b = new_state.published(self.dtype), new_state.to_bytes()
            new_sched = self.windows.next(sched, None)
            records = None  # (a tree release's nodes span windows: no one window's count)
        # the published counts' noise variance: the merged windows' under `window`, the decomposition's under `tree`
        merged = new_sched.merged
        variance = decayed.variance if decayed is not None else self._variance(merged)
        forest = self.spec.with_counts(new_counts, version=version + 1, n_releases=merged, noise_variance=variance)
        self.fault("close_before_commit")
        line = entry_of(records, math.sqrt(variance), version + 1, True)
        ok = self._release(
            w, version, forest, state_b, noise_keys, variance, schedule=new_sched, state_extra=extra, history=line
        )
        self.fault("close_in_commit")
        if not ok:
            return False
        self.guard.record(version + 1)
        self._released = w
        if self.decay is not None and decayed is not None:
            self.decay.cached = decayed
        jlog(log, logging.DEBUG, "worker.window_released", model=self.keys.name, window=w, version=version + 1)
        self.windows.released_as(sched, new_sched)
        return True

    def _close_grown(self, w: int, version: int, acc_fields: list, sched: Schedule) -> bool:
        """``grow``: window ``w``'s exact tally on the drawn trees grows the published forest by one release
        (:meth:`PrivateForest.grow_exact`); the whole new release (structure, counts, node variances) is
        stored SET NX before it is published, so a retry or a racing closer publishes the same one."""
        # Memory: the published release is read (its blob's bytes dropped once decoded) and grown without a copy
        # (a grown release replaces the arrays it grows from); the closer holds nothing between closes.
        now_version, blob_b = self.r.hmget(self.keys.pub_model, "version", "blob")  # the published release
        if int(now_version or 0) != version:
            return False  # released meanwhile (the caller seals and looks again)
        read = PrivateForest.from_bytes(blob_b) if blob_b else self.spec  # (none yet: the spec's zero counts)
        del blob_b
        old = self.spec.holding(read, copy=False)
        del read
        exact = read_acc_counts(self.r, self.keys.acc(w), acc_fields, self.spec.shape)
        key = self.keys.window_delta(w)

        drawn: list[PrivateForest] = []

        def draw(exact: np.ndarray | None = exact, old: PrivateForest = old) -> bytes:  # (no closure: dropped below)
            tally = np.zeros(self.spec.shape, np.int64) if exact is None else exact
            # keyed over the base release too: a re-released (rolled back) base makes another release
            rng = self.noise.rng("window", str(w), self._exact_bytes(exact), np.ascontiguousarray(old.counts))
            drawn.append(self.spec.holding(old, copy=False).grow_exact(tally, rng))  # (``old`` stays as it was)
            return drawn[0].to_bytes()

        blob_b, fresh = stored_once(
            self.r,
            key,
            draw,
            stats_key=self.keys.stats,
            reused="noise_reused",
            after_draw=lambda: self.fault("close_after_draw"),
            after_store=lambda: self.fault("close_after_store"),
            ttl_s=PENDING_TTL_S,
        )
        del draw, exact  # (the window's tally: summed into the grown leaves)
        # this closer's draw as it is, or the one stored first (decoded and checked)
        forest = drawn.pop() if fresh else self.spec.holding(PrivateForest.from_bytes(blob_b), copy=False)
        if forest.version != version + 1 or forest.n_releases != old.n_releases + 1:
            raise RuntimeError(
                f"stored release {key} is version {forest.version} of {forest.n_releases} releases, "
                f"the model expects {version + 1} of {old.n_releases + 1}: corrupted state"
            )
        T = self.spec.n_trees  # the stumps' release: what the grown release added to them (public)
        stumps = forest.counts[T:, 0].astype(np.float64) - old.counts[T:, 0].astype(np.float64)
        old_sd = float(np.sqrt(np.max(old.noise_variance)))
        # the sd this release drew per node: a fresh forest's first release from what it drew (its published leaves'
        # variance: the probe's share is spent only where the probe splits something), later ones by the rule
        if old.n_releases == 0:
            own_sd = float(np.sqrt(np.max(forest.noise_variance[: self.spec.n_trees])))
        else:
            own_sd = math.sqrt(cell_variance(self.spec.mechanism, self.eps_node, self.spec.k))
        del old
        new_sched = self.windows.next(sched, stumps)
        records = release_total(stumps, self.spec.budget, self.spec.structure.n_trees) if len(stumps) else None
        if new_sched.merged == sched.merged:  # left out: the published release stays
            line = entry(w, version, False, sched.end, sched.length, records, old_sd, own_sd)
            return self._left_out(w, version, sched, new_sched, [key], line)
        self.fault("close_before_commit")
        # a grown release changes the structure: its state, pub:model and retained version are whole blobs
        variance = float(np.max(forest.noise_variance))
        line = entry(w, version + 1, True, sched.end, sched.length, records, math.sqrt(variance), own_sd)
        ok = self._release(w, version, forest, b"", [key], variance, grown=blob_b, schedule=new_sched, history=line)
        self.fault("close_in_commit")
        if not ok:
            return False
        self.guard.record(version + 1)
        self._released = w
        jlog(
            log,
            logging.DEBUG,
            "worker.window_released",
            model=self.keys.name,
            window=w,
            version=version + 1,
            height=forest.height,
        )
        self.windows.released_as(sched, new_sched)
        return True

    def _release(
        self,
        w: int,
        version: int,
        forest: PrivateForest,
        state_b: bytes,
        noise_keys: list[str],
        variance: float,
        grown: bytes | None = None,
        schedule: Schedule | None = None,
        state_extra: dict[str, Any] | None = None,
        history: dict[str, Any] | None = None,
    ) -> bool:
        """Step 3: publish window ``w``'s release in one MULTI/EXEC, on condition (WATCH of the state) that
        the state is still at ``version`` with ``w - 1`` released and ``w`` sealed; False otherwise.

        Plain commands, not a script: a script copies its arguments (tens of MB at height 6) into Lua
        strings before writing them, which made a release about twice as slow. The state hash holds
        everything the condition reads, and any write to it between WATCH and EXEC (a seal, another
        closer's release) makes EXEC write nothing.

        Memory: the counts travel as views of the forest's array (:func:`.published.counts_view`, and
        the release record in pieces, :func:`.published.release_record_parts`); no model blob is built
        (``pub:model`` holds the counts; the structure is the spec's, :func:`.published.published_fields`).

        ``grown`` (``release="grow"``): the stored release's blob. The structure changes with the releases,
        so ``pub:model`` holds the blob and no counts field (the
        consumers' counts-only fast path assumes one structure) and the retained version is the blob."""
        # (the window's scheduled end, public, when there is one; the wall clock after a close would tell how long the
        # close took, and so roughly how busy the window was)
        nv, now = version + 1, int((history["time"] if history is not None else time.time()) * 1000)
        keep = self.keep_versions
        with self.r.pipeline(transaction=True) as p:
            try:
                p.watch(self.keys.state)
                v, rel, open_, mid = p.hmget(self.keys.state, "version", "releases", "open", "model_id")
                if int(v or 0) != version or int(rel or 0) != w - 1 or int(open_ or 1) <= w:
                    return False
                if mid is not None and as_str(mid) != self.keys.model_id:  # (keys: the state's id, Keys.of)
                    return False  # deleted and re-created under this name: not the model this closer holds
                # the structure is the spec's: counts only, as views; a grown release's blob instead of counts
                pub = {**published_fields(forest, grown=grown, noise_variance=variance, view=True), "updated": now}
                record = release_record_parts(forest) if grown is None else [grown]
                gone = "blob" if grown is None else "counts"
                p.multi()
                # The state keeps no copy of the counts (or grown blob): closers read pub:model's, written in this
                # transaction (a counts-sized write and the counts' memory in Redis less); its fields say so
                # in bytes that fit no forest, for the workers of earlier versions (COUNTS_IN_PUB_MODEL).
                state: dict[str, Any] = {
                    "version": nv,
                    "releases": w,
                    "counts": COUNTS_IN_PUB_MODEL,
                    "blob": COUNTS_IN_PUB_MODEL,
                    **(state_extra or {}),
                }
                if self.cadence is not None and schedule is not None:  # (public: released values)
                    state["schedule"] = pub["schedule"] = json.dumps(schedule.to_dict())
                p.hset(self.keys.state, mapping=state)
                p.hdel(self.keys.pub_model, gone)
                p.hset(self.keys.pub_model, mapping=pub)
                # a retained version holds the release alone (the structure is the spec's), written in its
                # pieces (SET, then APPEND, in this transaction): no copy of the counts
                p.set(self.keys.pub_version(nv), record[0], ex=self.version_ttl_s or None)
                for part in record[1:]:
                    if len(part):
                        p.append(self.keys.pub_version(nv), part)
                if keep > 0 and nv - keep >= 0:
                    p.delete(self.keys.pub_version(nv - keep))
                p.delete(self.keys.acc(w))
                if state_b:
                    p.set(self.keys.tree, state_b)
                # Nothing reads a released window's noise again (the CAS refuses the window): dropped, unless
                # kept ``noise_ttl_s`` for an audit (each is counts-sized: kept longer, they fill Redis).
                for k in noise_keys:
                    if self.noise_ttl_s:
                        p.expire(k, self.noise_ttl_s)
                    else:
                        p.delete(k)
                p.hincrby(self.keys.stats, "windows_released", 1)
                p.hset(self.keys.stats, "last_release_ms", now)
                if history is not None:
                    append(p, self.keys, history)
                p.execute()
            except redis.WatchError:
                return False
        # Announced after EXEC: redis-py's cluster pipelines refuse PUBLISH, and a lost announcement only
        # delays a consumer (Consumer.wait_newer re-reads the version).
        self.r.publish(self.keys.pub_events, nv)
        return True

    def _variance(self, merged: int) -> float:
        """The published counts' noise variance per cell after ``merged`` releases (not decayed; public)."""
        return published_variance(self.policy, merged, self._release_variance())

    def _release_variance(self) -> float:
        """The noise variance one release draws on each count (a window's delta, or a tree node; public)."""
        return cell_variance(self.spec.mechanism, self.eps_node, self.spec.k)

    def _left_out(
        self, w: int, version: int, sched: Schedule, new: Schedule, noise_keys: list[str], line: dict[str, Any]
    ) -> bool:
        """Release window ``w`` without merging it (:func:`.schedule.release_left_out`; ``line``: its history)."""
        self.fault("close_before_commit")
        ok = release_left_out(self.r, self.keys, w, version, new, noise_keys, self.noise_ttl_s, line)
        self.fault("close_in_commit")
        if ok:
            self._released = w
            jlog(log, logging.DEBUG, "worker.window_left_out", model=self.keys.name, window=w, version=version)
            self.windows.released_as(sched, new)
        return ok

    def _exact_bytes(self, exact: np.ndarray | None) -> bytes | np.ndarray:
        """The exact counts as the noise key hashes them (little-endian int64; no copy on little-endian hosts)."""
        return b"" if exact is None else np.ascontiguousarray(exact, dtype="<i8")

    def _stored(self, key: str, draw: Callable[[], np.ndarray]) -> np.ndarray:
        """The noise stored under ``key``, or drawn now and stored with SET NX (the first stored one wins)."""
        return drawn_once(
            self.r,
            key,
            draw,
            self.spec,
            stats_key=self.keys.stats,
            reused="noise_reused",
            after_draw=lambda: self.fault("close_after_draw"),
            after_store=lambda: self.fault("close_after_store"),
            ttl_s=PENDING_TTL_S,
        )
