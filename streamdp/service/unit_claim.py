"""The per-person bound under ``release="batch"``: each batch's kept records claimed before its noise is drawn.

``release="batch"`` draws each batch's noised delta once, before the commit (:class:`.merging.BatchMerge`), so
which of its records count must be fixed before the draw. A claim fixes it, exactly once per batch id: one
atomic script (:data:`CLAIM_LUA`) checks that the batch was not merged before and not claimed before, checks
that the ids' counts the worker chose from are current (:data:`.units.IDS_LUA`, as the window add does),
writes the new counts (and the records dropped, to the worker counters) and stores the batch's keep mask under
``priv:claim:<batch_id>``. A batch claimed before
(a redelivery, a worker killed after its claim) gets its stored mask back: the same records, so the same
delta, and no count moves twice. The delta is then drawn over the kept records only.

Why the bound holds (with :mod:`.units`' proof sketch). A person's counts move only in claims, each by the
records the claim keeps, under a check that the counts read are current and never past K; a batch's claim is
made at most once while it is stored, and never for a batch already merged. A claim whose batch is never
merged (dead-lettered, or a claim dropped after ``CLAIM_TTL_S`` unmerged and claimed again) moves counts that
no release used: the bound only gets stricter. So over every batch merged, a person has at most K records, and
each batch's delta, drawn at ``epsilon / K`` per record on disjoint records, makes the transcript
``epsilon``-DP per person (sequential composition over the at most K batches holding the person's records).
"""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import redis

from streamdp.service import codec
from streamdp.service.draw_once import PENDING_TTL_S
from streamdp.service.keys import Keys, as_str
from streamdp.service.log import jlog
from streamdp.service.units import IDS_LUA, IDS_WRITE_LUA, IdBound

__all__ = ["CLAIM_LUA", "CLAIM_TTL_S", "Claims"]

log = logging.getLogger("streamdp.worker")

#: A claim outlives its batch's pending delta (:data:`.draw_once.PENDING_TTL_S`): a delta drawn again after
#: its own expiry draws over the same records. A claim is dropped once its batch is merged.
CLAIM_TTL_S = 2 * PENDING_TTL_S

CLAIM_LUA = (
    r"""
-- Claim a batch's kept records, once. KEYS: 1 state, 2 merged, 3 claim, 4 the ids' counts, 5 stats.
-- ARGV: 1 batch id, 2 keep mask (packed bits), 3 ttl_s, 4-11 the ids' arguments (.units.IDS_LUA), 12 model id.
-- Replies {'ok', mask}, {'claimed', stored mask}, {'merged', 0}, {'replaced', 0} or IDS_LUA's 'ids-moved'.
local state_mid = redis.call('HGET', KEYS[1], 'model_id')
if state_mid and state_mid ~= ARGV[12] then return {'replaced', 0} end
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  redis.call('DEL', KEYS[3])  -- (left by a worker that died after its commit)
  return {'merged', 0}
end
local had = redis.call('GET', KEYS[3])
if had then return {'claimed', had} end
local io, ids_slot, stats_slot = 4, 4, 5
"""
    + IDS_LUA
    + IDS_WRITE_LUA
    + r"""
redis.call('SET', KEYS[3], ARGV[2], 'EX', ARGV[3])
return {'ok', ARGV[2]}
"""
)


class Claims:
    """A batch-release worker's claims: :meth:`claim` a batch's kept records before its delta is drawn."""

    def __init__(self, r: redis.Redis, keys: Keys, ids: IdBound, max_retries: int = 50):
        self.redis, self.keys, self.ids, self.max_retries = r, keys, ids, max_retries
        self._script = r.register_script(CLAIM_LUA)

    def claim(self, batch: codec.Batch) -> codec.Batch | str:
        """The batch with only its kept records (and no ids), or why none: ``"merged"`` (merged before: ack it),
        ``"replaced"`` (the model was re-created), ``"no-ids"`` (the entry carries no privacy ids), ``"busy"``
        (the counts kept moving, other workers merging the same people, past ``max_retries`` choices: try later)."""
        if batch.ids is None:
            return "no-ids"
        hashes = self.ids.hashes(batch.ids)
        keys = [self.keys.state, self.keys.merged, self.keys.claim(batch.batch_id), self.keys.ids, self.keys.stats]
        for _ in range(self.max_retries + 1):
            keep, args = self.ids.choose(hashes)
            res = self._script(
                keys=keys,
                args=[batch.batch_id, np.packbits(keep).tobytes(), CLAIM_TTL_S, *args, self.keys.model_id],
            )
            status = as_str(res[0])
            if status == "ids-moved":
                self.ids.moved(res)
                continue
            if status in ("merged", "replaced"):
                return status
            if status == "ok":
                self.ids.written()
            elif status != "claimed":
                raise RuntimeError(f"unexpected claim reply {res!r}")
            mask = np.unpackbits(np.frombuffer(res[1], dtype=np.uint8), count=len(batch.y)).astype(bool)
            return replace(batch, X=batch.X[mask], y=batch.y[mask], ids=None)
        jlog(log, logging.WARNING, "worker.claim_busy", model=self.keys.name, batch=batch.batch_id)
        return "busy"

    def drop(self, batch_ids: list[str]) -> None:
        """Drop the claims of merged batches (their ``merged`` mark now refuses a claim)."""
        if batch_ids:
            self.redis.delete(*[self.keys.claim(b) for b in batch_ids])
