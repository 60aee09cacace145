"""How a stream worker's entries reach the model: one atomic script per group of entries, exactly once.

By the model's release policy (:class:`.registry.ReleasePolicy`):

* :class:`BatchMerge` (``release="batch"``, Jagannathan et al.'s update): each batch's noised delta is
  drawn **once** (stored with ``SET NX`` under ``priv:delta:<batch_id>`` before the commit; a redelivered
  batch reuses it), the deltas are summed in numpy and committed with the new counts by one script
  (:data:`.commit.COMMIT_LUA`: ownership, dedup, version CAS, counts, release record, XACK, announce).
* :class:`WindowAdd` (``"window"`` and ``"tree"``): no noise here; the entries' EXACT tallies are added
  into the open window's worker-only accumulator by one script that also records the batch ids and
  XACKs (:data:`.commit.WINDOW_ADD_LUA`); the window is noised once when it closes (:mod:`.windows`).

Both write the entries' dead letters in the same script, ack batches merged before without merging
them, and retry what a conflict or a rejection leaves (:meth:`_Merge._rejected`).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import msgpack
import numpy as np
import redis

from streamdp.forest.model import PrivateForest
from streamdp.service import codec
from streamdp.service.accumulator import joined_cells
from streamdp.service.commit import COMMIT_LUA, WINDOW_ADD_LUA
from streamdp.service.draw_once import PENDING_TTL_S, drawn_once
from streamdp.service.group import Entry
from streamdp.service.keys import GROUP, Keys, as_str
from streamdp.service.log import jlog
from streamdp.service.model_store import read_published_counts
from streamdp.service.published import counts_view, release_record, release_record_around_counts
from streamdp.service.rollback import NoiseSource, RollbackGuard
from streamdp.service.unit_claim import Claims
from streamdp.service.units import IdBound, Unit

__all__ = ["BatchMerge", "Outcome", "WindowAdd", "WorkerEntry"]

log = logging.getLogger("streamdp.worker")


def _id_bound(unit: Unit, key: bytes | None) -> IdBound:
    if not key:
        raise ValueError("a model with a privacy id needs the id-hashing key (the master noise key)")
    return IdBound(unit, key)


class WorkerEntry(Entry):
    """A stream entry with what the worker made of it: a decoded batch, or a dead-letter reason and detail."""

    def __init__(self, id: str, fields: Any, deliveries: int = 1):
        super().__init__(id, fields, deliveries)
        self.batch: codec.Batch | None = None
        self.dead: tuple[str, bytes] | None = None


@dataclass
class Outcome:
    """What a merge did: ``"ok"`` (``entries`` committed, ``merged`` if any added to the model; ``dead_written``: the
    ids of those whose dead letter the script wrote now (its reply numbers them after 'ok' and a value), not at an
    earlier delivery of their batch), ``"replaced"`` (the model re-created under its name: nothing written),
    ``"gave_up"`` (retries exhausted: the entries stay pending and are reclaimed) or ``"nothing"``."""

    status: str
    entries: list[WorkerEntry] = field(default_factory=list)
    merged: bool = False
    dead_written: set[str] = field(default_factory=set)


def entry_args(
    merging: list[WorkerEntry], ack_only: list[WorkerEntry], dead: list[tuple[str, str, bytes, str]]
) -> list:
    """The commit scripts' entry arguments: (entry id, batch id) pairs, ack-only ids, dead-letter quadruples."""
    args: list[Any] = []
    for e in merging:
        args += [e.id, e.batch.batch_id]
    args += [e.id for e in ack_only]
    for d in dead:
        args += list(d)
    return args


#: Invalid rows a dead letter lists (row, reason) for a decodable batch; the count is in its reason.
DEAD_ROWS = 10


def dead_items(es: list[WorkerEntry]) -> list[tuple[str, str, bytes, str]]:
    """The dead letters of ``es``: (entry id, reason, detail, once) for undecodable entries and batches with
    invalid rows, each within the dead-letter bounds (:func:`.codec.dead_letter`).

    ``once`` is the batch id of every letter whose entry decoded to a batch (its refused rows, or the whole batch
    refused: no privacy ids, not tallied; the commit scripts write a letter once per batch id,
    :data:`.commit.COMMIT_LUA`: a re-pushed batch is merged once, and refused once), else ``""`` (always written:
    an undecodable entry has no batch id to know it by). Why: a re-push of a file must not repeat its refusals.

    >>> e = WorkerEntry("1-0", None)
    >>> e.dead = ("undecodable", b"")
    >>> dead_items([e])
    [('1-0', 'undecodable', b'', '')]
    """
    out = []
    for e in es:
        if e.dead is not None:
            out.append((e.id, *codec.dead_letter(*e.dead), e.batch.batch_id if e.batch is not None else ""))
        elif e.batch is not None and e.batch.dropped:
            rows = e.batch.dropped
            detail = msgpack.packb(
                {"batch_id": e.batch.batch_id, "rows": [[r, why[:150]] for r, why in rows[:DEAD_ROWS]]},
                use_bin_type=True,
            )
            reason = (
                f"{len(rows)} invalid record(s) of {e.batch.n_in}; first: record {rows[0][0]} "
                f"(0-based) of the batch: {rows[0][1]}"
            )
            out.append((e.id, *codec.dead_letter(reason, detail), e.batch.batch_id))
    return out


def _attempt(merge: dict[str, WorkerEntry], ack_only: list[WorkerEntry]) -> tuple[list, list, list] | None:
    """One attempt's entries: those to merge, all of them (the merging ones first, as the scripts number them)
    and their dead letters; None when none is left."""
    m_entries = list(merge.values())
    ids_all = m_entries + ack_only
    return (m_entries, ids_all, dead_items(ids_all)) if ids_all else None


class _Merge:
    """What both ways share: the model's keys, the worker's name and settings (read once, when the worker is
    built), and rejection handling."""

    def __init__(
        self,
        r: redis.Redis,
        keys: Keys,
        spec: PrivateForest,
        consumer: str,
        *,
        dead_maxlen: int,
        max_commit_retries: int,
        fault: Callable[[str], None],
    ):
        self.redis, self.keys, self.spec, self.consumer = r, keys, spec, consumer
        self.dead_maxlen, self.max_commit_retries, self.fault = dead_maxlen, max_commit_retries, fault

    def reset(self) -> None:
        """Forget what was cached of the model's state (after a lost connection)."""

    def _rejected(
        self, res: Any, ids_all: list[WorkerEntry], m: int, merge: dict[str, WorkerEntry], ack_only: list[WorkerEntry]
    ) -> None:
        """Apply a ``rejected`` reply: duplicates become ack-only, entries no longer ours are dropped."""
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
            jlog(log, logging.INFO, "worker.rejected", model=self.keys.name, entry=e.id, reason=reason)

    def _gave_up(self) -> Outcome:
        jlog(log, logging.ERROR, "worker.give_up", model=self.keys.name, retries=self.max_commit_retries + 1)
        return Outcome("gave_up")  # entries stay pending and are reclaimed later


class BatchMerge(_Merge):
    """``release="batch"``: noise each batch once and merge the noised deltas into the published counts.

    ``keep_versions``: retained versions (``pub:v:<N>``; 0: no bound), each commit dropping the one that
    falls out; ``version_ttl_s``, ``delta_ttl_s``: their TTLs (0: none; stored deltas dropped at the merge).
    """

    def __init__(
        self,
        r: redis.Redis,
        keys: Keys,
        spec: PrivateForest,
        consumer: str,
        *,
        noise: NoiseSource,
        guard: RollbackGuard,
        keep_versions: int,
        version_ttl_s: int = 0,
        delta_ttl_s: int = 0,
        unit: Unit | None = None,
        id_key: bytes | None = None,
        **common: Any,
    ):
        super().__init__(r, keys, spec, consumer, **common)
        self.noise, self.guard = noise, guard
        self.claims = Claims(r, keys, _id_bound(unit, id_key)) if unit is not None else None
        self.keep_versions, self.version_ttl_s, self.delta_ttl_s = keep_versions, version_ttl_s, delta_ttl_s
        self._script = r.register_script(COMMIT_LUA)
        self._dtype = spec.counts.dtype.type  # the forest owns its counts dtype (float for laplace)

    def merge(self, merge: dict[str, WorkerEntry], ack_only: list[WorkerEntry]) -> Outcome:
        """Noise ``merge``'s batches (each once) and commit them, with ``ack_only``'s acks and dead letters.

        Under a privacy id each batch's kept records are claimed first (:mod:`.unit_claim`), then noised."""
        if self.claims is None:
            return self.commit(merge, self.sum_deltas(merge, ack_only), ack_only)
        for bid, e in list(merge.items()):
            got = self.claims.claim(cast(codec.Batch, e.batch))
            if got in ("replaced", "busy"):
                return Outcome("replaced") if got == "replaced" else self._gave_up()
            if isinstance(got, codec.Batch):
                e.batch = got
                continue
            if got == "no-ids":
                e.dead = (f"no privacy ids: this model's unit is a person ({self.claims.ids.unit.privacy_id!r})", b"")
            ack_only.append(merge.pop(bid))  # (merged before: acknowledged, not merged again)
        out = self.commit(merge, self.sum_deltas(merge, ack_only), ack_only)
        if out.status == "ok":
            self.claims.drop(list(merge))
        return out

    def delta(self, batch: codec.Batch) -> np.ndarray:
        """The batch's noised delta: the stored one if any, else drawn now and stored with SET NX."""

        def draw() -> np.ndarray:
            rng = self.noise.rng("batch", batch.batch_id, batch.X, batch.y)
            return self.spec.noisy_delta_encoded(batch.X, batch.y, rng)

        return drawn_once(
            self.redis,
            self.keys.delta(batch.batch_id),
            draw,
            self.spec,
            stats_key=self.keys.stats,
            reused="delta_reused",
            after_draw=lambda: self.fault("after_draw"),
            ttl_s=PENDING_TTL_S,
        )

    def sum_deltas(self, merge: dict[str, WorkerEntry], ack_only: list[WorkerEntry]) -> np.ndarray | None:
        """The sum of the entries' noised deltas, each drawn once (stored, :meth:`delta`) and added as it comes:
        one counts-sized sum and one delta in memory, not one per entry. An entry whose stored delta is
        unusable moves to ``ack_only`` as a dead letter (never redrawn). None when nothing is left to merge."""
        total = None
        for bid, e in list(merge.items()):
            try:
                d = self.delta(e.batch)
                self.fault("after_store")
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

    def commit(self, merge: dict[str, WorkerEntry], total: np.ndarray | None, ack_only: list[WorkerEntry]) -> Outcome:
        """Merge ``total`` (the sum of ``merge``'s noised deltas) in one atomic commit, retrying on conflicts.

        Memory: ``total`` becomes the new counts, the published ones added into it a part at a time
        (:func:`.model_store.read_published_counts`; a failed commit sums the stored deltas again), sent as a
        view, once (the script writes the retained release record around them); no model blob is built, and
        a worker holds no counts between its commits."""
        keys = self.keys
        retries = 0
        while True:
            attempt = _attempt(merge, ack_only)
            if attempt is None:
                return Outcome("nothing")
            m_entries, ids_all, dead = attempt
            m = len(m_entries)
            new_version, counts_b, record, releases, n_records = 0, b"", (b"", b"", 0), 0, 0
            new_counts = None
            if m:
                if total is None:  # entries rejected, or a commit lost: the sum of those left, from their stored deltas
                    total = self.sum_deltas(merge, ack_only)
                    continue
                v, rel = (int(x or 0) for x in self.redis.hmget(keys.state, "version", "releases"))
                self.guard.check(v)
                new_counts, total = total, None  # the sum becomes the counts (version 0's are zero: not read)
                if v and read_published_counts(self.redis, keys, v, self.spec, into=new_counts) is None:
                    retries += 1  # committed meanwhile: summed again on the new version
                    if retries > self.max_commit_retries:
                        return self._gave_up()
                    continue
                releases = rel + m
                new_version = v + 1
                forest = self.spec.with_counts(new_counts, version=new_version, n_releases=releases)
                around = release_record_around_counts(forest)  # the script writes head, counts, tail
                record = (*around, 1) if around else (release_record(forest), b"", 0)
                counts_b = counts_view(new_counts)
                del forest, around
                n_records = sum(len(e.batch.y) for e in m_entries)
            keep = self.keep_versions
            drop = m > 0 and keep > 0 and new_version - keep >= 0
            script_keys = [
                keys.records,
                keys.state,
                keys.pub_model,
                keys.merged,
                keys.stats,
                keys.dead,
                keys.pub_version(new_version),
                keys.pub_version(new_version - keep if drop else new_version),
                keys.dead_batches,
            ]
            script_keys += [keys.delta(e.batch.batch_id) for e in m_entries]
            args: list[Any] = [
                GROUP,
                self.consumer,
                new_version - 1,
                counts_b,
                *record,
                releases,
                n_records,
                int(time.time() * 1000),
                self.version_ttl_s,
                1 if drop else 0,
                self.delta_ttl_s,
                keys.pub_events,
                self.dead_maxlen,
                m,
                len(ack_only),
                len(dead),
            ]
            args += [*entry_args(m_entries, ack_only, dead), keys.model_id]
            self.fault("before_commit")
            res = self._script(keys=script_keys, args=args)
            del args, counts_b, record
            self.fault("in_commit")
            status = as_str(res[0])
            del new_counts
            if status == "ok":
                if m:
                    self.guard.record(new_version)
                    # (no figures of entries: how many were merged, acked or dead is exact, stats --exact)
                    jlog(log, logging.DEBUG, "worker.commit", model=keys.name, version=new_version, retries=retries)
                return Outcome("ok", ids_all, m > 0, {dead[int(i) - 1][0] for i in res[2:]})
            if status == "replaced":
                return Outcome("replaced")
            retries += 1
            if status == "conflict":
                self.redis.hincrby(keys.stats, "commit_retries", 1)
            elif status == "rejected":
                self._rejected(res, ids_all, m, merge, ack_only)
            else:
                raise RuntimeError(f"unexpected commit reply {res!r}")
            if retries > self.max_commit_retries:
                return self._gave_up()
            if status == "conflict" and retries > 3:
                time.sleep(min(0.05, 0.001 * retries) * (0.5 + secrets.randbelow(1000) / 1000))


class WindowAdd(_Merge):
    """``release="window"``/``"tree"``: add the entries' EXACT tallies into the open window's accumulator.

    ``noise``: keys the mechanism's per-batch sampling (disjoint budget, k-anonymity); no noise is added here.
    """

    def __init__(
        self,
        r: redis.Redis,
        keys: Keys,
        spec: PrivateForest,
        consumer: str,
        *,
        noise: NoiseSource,
        unit: Unit | None = None,
        id_key: bytes | None = None,
        **common: Any,
    ):
        super().__init__(r, keys, spec, consumer, **common)
        self.noise = noise
        self.unit = unit
        self.ids = _id_bound(unit, id_key) if unit is not None else None
        self._script = r.register_script(WINDOW_ADD_LUA)
        self.open_window: int | None = None  # the window this worker believes open (the script corrects it)

    def reset(self) -> None:
        self.open_window = None
        if self.ids is not None:
            self.ids.forget()

    def merge(self, merge: dict[str, WorkerEntry], ack_only: list[WorkerEntry]) -> Outcome:
        """Add ``merge``'s tallies into the open window, exactly once, with ``ack_only``'s acks and dead letters.

        One atomic script checks ownership and dedup, adds, records the batch ids and XACKs
        (:data:`.commit.WINDOW_ADD_LUA`); ``moved`` (a closer sealed the window meanwhile) retries
        into the new open window. Noise comes when the window closes (:mod:`.windows`).
        """
        # Each batch's tally as its nonzero cells only, never a dense (counts-sized) array.
        tallies: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        hashes: dict[str, list[bytes]] = {}
        for bid, e in list(merge.items()):
            batch = cast(codec.Batch, e.batch)
            if self.unit is not None:  # (per attempt below: which records count depends on the ids' counts)
                if batch.ids is None:
                    e.dead = (f"no privacy ids: this model's unit is a person ({self.unit.privacy_id!r})", b"")
                    ack_only.append(merge.pop(bid))
                else:
                    hashes[bid] = cast(IdBound, self.ids).hashes(batch.ids)
                continue
            try:  # the mechanism's sampling (disjoint budget, k-anonymity) drawn per batch, keyed when possible
                tallies[bid] = self._tally(batch.X, batch.y, bid, batch)
                # tallied: its rows are not read again (a step holds tallies, not records; a new empty array, as a
                # slice would keep the decoded rows alive)
                batch.X = np.empty((0, batch.X.shape[1]), batch.X.dtype)
            except (ValueError, TypeError) as err:
                e.dead = (f"batch not tallied: {err}"[:1000], b"")
                ack_only.append(merge.pop(bid))
        keys = self.keys
        retries = 0
        while True:
            attempt = _attempt(merge, ack_only)
            if attempt is None:
                return Outcome("nothing")
            m_entries, ids_all, dead = attempt
            m = len(m_entries)
            id_args: list[Any] = [0, 0, 0, b"", b"", b"", 0, 0]
            n_kept = sum(len(e.batch.y) for e in m_entries)
            if self.unit is not None and m:
                id_args, n_kept = self._bound(m_entries, hashes, tallies)
            cells = joined_cells([tallies[e.batch.batch_id] for e in m_entries]) if m else b""
            if self.open_window is None:
                self.open_window = int(self.redis.hget(keys.state, "open") or 1)
            args: list[Any] = [
                GROUP,
                self.consumer,
                self.open_window,
                n_kept,
                int(time.time() * 1000),
                self.dead_maxlen,
                m,
                len(ack_only),
                len(dead),
                cells,
            ]
            args += [*entry_args(m_entries, ack_only, dead), *id_args, keys.model_id]
            script_keys = [
                keys.records,
                keys.state,
                keys.merged,
                keys.stats,
                keys.dead,
                keys.acc(self.open_window),
                keys.ids,
                keys.dead_batches,
            ]
            self.fault("before_commit")
            res = self._script(keys=script_keys, args=args)
            self.fault("in_commit")
            status = as_str(res[0])
            if status == "ok":
                self.open_window = int(res[1])
                if self.ids is not None and m:
                    self.ids.written()
                return Outcome("ok", ids_all, m > 0, {dead[int(i) - 1][0] for i in res[2:]})
            if status == "replaced":
                return Outcome("replaced")
            retries += 1
            if status == "moved":
                self.open_window = int(res[1])
            elif status == "ids-moved":  # another worker merged records of these ids meanwhile: choose again
                cast(IdBound, self.ids).moved(res)
            elif status == "rejected":
                self._rejected(res, ids_all, m, merge, ack_only)
            else:
                raise RuntimeError(f"unexpected add reply {res!r}")
            if retries > self.max_commit_retries:
                return self._gave_up()

    def _tally(self, X: np.ndarray, y: np.ndarray, bid: str, batch: codec.Batch) -> tuple[np.ndarray, np.ndarray]:
        """A batch's (kept records') tally, its sampling keyed by the whole batch."""
        return self.spec.sparse_tally_encoded(X, y, self.noise.rng("tally", bid, batch.X, batch.y))

    def _bound(self, m_entries: list[WorkerEntry], hashes: dict[str, list[bytes]], tallies: dict) -> tuple[list, int]:
        """The records to merge under the unit (at most K per id over the stream, :mod:`.units`): keeps each
        batch's records that fit the ids' counts as this worker knows them (the add script checks them),
        tallies only those (into ``tallies``); returns the add script's id arguments and the records kept."""
        batches = [cast(codec.Batch, e.batch) for e in m_entries]
        keep, args = cast(IdBound, self.ids).choose([h for b in batches for h in hashes[b.batch_id]])
        at = 0
        for b in batches:
            k = keep[at : at + len(b.y)]
            at += len(b.y)
            tallies[b.batch_id] = self._tally(b.X[k], b.y[k], b.batch_id, b)
        return args, int(keep.sum())
