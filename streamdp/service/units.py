"""The unit of privacy of a stream model: at most K records per person over the whole stream, exactly once.

A model created with a privacy id (``create_model(privacy_id="user", max_records_per_id=K)``) protects a
person, not a record. Producers send each record's id beside it (:func:`streamdp.service.codec.encode_batch`
``ids=``); the workers keep, per id, the running count of that id's records merged so far, in one Redis hash
per model (:attr:`Unit` ``key``: field = the id's keyed hash, value = the count), and merge a record only while
its id's count is below ``K``: records beyond K are dropped before anything is tallied.

Ids are stored only as keyed hashes: the first 16 bytes of HMAC-SHA256 under a key derived from the workers'
master noise key (``$STREAMDP_NOISE_KEY_FILE``, never in Redis) and the model's id; a worker without that key
refuses a model with a privacy id. The raw id is never stored, logged or published. How many records were
dropped is counted, exactly, in the worker counters ``records_dropped_over_k`` (an id already at K) and
``records_dropped_over_max_ids`` (a new id past ``max_ids``), written by the same script that writes the counts
(so once per merged batch, whatever the retries): EXACT figures, shown only by ``streamdp stats --exact``.

Exactly once. Under the release windows (``"window"``, ``"grow"``, ``"tree"``) the counts change only inside the
add script that merges the records (:data:`streamdp.service.commit.WINDOW_ADD_LUA`), in the same atomic step as
the batch-id dedup, the tally and the XACK: the worker chooses the records to keep from its own view of the
ids' counts (:class:`IdBound`: a lower bound of the stored ones), and the script writes only if every count
the worker's choice moves is unchanged (and the ids kept fit ``max_ids``), else nothing, replying the current
counts for the worker to choose again. A retried batch is a duplicate batch id: refused whole, never counted
twice; a batch never merged never moved a count. Under ``release="batch"``, whose noise is drawn before the
commit, the same check runs in a claim made once per batch before its draw (:mod:`.unit_claim`).

Proof sketch (``epsilon``-DP per person, whatever the windows). A person's merged records, over every
window and worker, sum to at most ``K``: each merge adds to the id's count exactly the records it keeps, under
a check that the count it read is current, and keeps none past ``K``. While fewer than ``max_ids`` ids are
kept, another person's kept records depend only on their own records and order (each id's count is its own),
so removing one person changes at most ``K`` records of the merged stream. The model's forest draws every
release's noise at ``epsilon / K`` per record (``create_model`` stores it so: the ledger is charged the
declared ``epsilon``): the whole transcript, ``epsilon / K``-DP per record under the release policy's own
accounting, is ``epsilon``-DP for any ``K`` records by group privacy (pure DP). The ``(epsilon, delta)``
k-anonymity mechanism is refused with a privacy id.

Two limits of that argument (docs/decisions/012). Once ``max_ids`` ids are kept, one person's presence can
decide whether a later new person is admitted: removing them changes at most their own ``K`` records and
another person's ``K``, so the bound is ``2 * epsilon`` for streams that reach ``max_ids`` (set it above the
persons expected). Two persons whose keyed hashes collide share one count: removing one can let the other's
records in, the same factor 2; with 16-byte hashes of ``n`` ids a given person collides with probability
below ``n / 2**128``, far below any failure of the secure noise source, so the hashes are not narrowed.

Scale: each id kept costs one hash field (16 bytes of hash and a small count, plus Redis' per-field overhead).
``max_ids`` bounds them: once that many ids are kept, records of a NEW id are dropped (an id already kept goes on
until its K); the bound is public, in the spec.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from streamdp.privacy.contribution import MAX_RECORDS_PER_ID, check_unit

__all__ = [
    "unit_of",
    "DEFAULT_MAX_IDS",
    "MAX_ID_BYTES",
    "Unit",
    "id_key",
    "hash_ids",
    "choose",
    "choice",
    "IdBound",
    "IDS_LUA",
]

#: The ids a model keeps by default (memory: see the module docstring).
DEFAULT_MAX_IDS = 10_000_000
#: The longest privacy id accepted (bytes); a longer one's record is dropped as invalid.
MAX_ID_BYTES = 1024


@dataclass(frozen=True)
class Unit:
    """A model's unit of privacy: the column naming the person, K, and the bound on ids kept (public)."""

    privacy_id: str
    max_records_per_id: int
    max_ids: int = DEFAULT_MAX_IDS

    def __post_init__(self) -> None:
        check_unit(self.privacy_id, self.max_records_per_id)
        if not isinstance(self.privacy_id, str) or not self.privacy_id:
            raise ValueError(f"privacy_id must name a column, got {self.privacy_id!r}")
        if isinstance(self.max_ids, bool) or not isinstance(self.max_ids, int) or self.max_ids < 1:
            raise ValueError(f"max_ids must be a whole number >= 1, got {self.max_ids!r}")

    def to_dict(self) -> dict:
        return {"privacy_id": self.privacy_id, "max_records_per_id": self.max_records_per_id, "max_ids": self.max_ids}

    @classmethod
    def from_json(cls, text: Any) -> Unit | None:
        """The unit stored in a model's state (None: the unit is a record)."""
        if not text:
            return None
        d = json.loads(text)
        return cls(str(d["privacy_id"]), int(d["max_records_per_id"]), int(d["max_ids"]))

    def describe(self) -> str:
        return (
            f"a person (column {self.privacy_id!r}): at most {self.max_records_per_id} records per person over the "
            f"whole stream, epsilon per person; at most {self.max_ids:,} persons kept"
        )


def unit_of(privacy_id: Any, max_records_per_id: Any, max_ids: Any, release: str | None, mechanism: str) -> Unit | None:
    """A stream model's unit of privacy (None: a record), refused with a mechanism it cannot bound
    (``release`` is any policy: ``"batch"`` claims each batch's records before its noise, :mod:`.unit_claim`)."""
    if privacy_id is None and max_records_per_id is None and max_ids is None:
        return None
    if privacy_id is None:
        raise ValueError("max_records_per_id and max_ids go with privacy_id (the column naming each record's person)")
    if mechanism == "kanon":
        raise ValueError("the k-anonymity mechanism is (epsilon, delta)-DP: a privacy id does not make it per person")
    return Unit(privacy_id, max_records_per_id, DEFAULT_MAX_IDS if max_ids is None else max_ids)


RECORD_UNIT = "a record: a person with many records is protected only as a group (see --privacy-id)"


def id_key(master: bytes, model_id: str) -> bytes:
    """The model's id-hashing key, derived from the workers' master key (never stored)."""
    return hmac.new(master, b"streamdp privacy id\x00" + model_id.encode(), hashlib.sha256).digest()


def hash_ids(key: bytes, ids: list, memo: dict | None = None) -> list[bytes]:
    """Each id's keyed hash (16 bytes): HMAC-SHA256 (RFC 2104) truncated; a str id is hashed as its UTF-8
    bytes, bytes as they are. ``memo`` (raw id -> hash, filled here) carries the hashes over calls.

    HMAC written out over copies of the keyed inner and outer SHA-256 states (the same digest as
    :func:`hmac.digest`): per id only C calls, no key padding or Python HMAC object.

    >>> k = b"k" * 32
    >>> hash_ids(k, ["ann"]) == [hmac.digest(k, b"ann", "sha256")[:16]]
    True
    """
    if len(key) > 64:
        key = hashlib.sha256(key).digest()
    key = key.ljust(64, b"\0")
    inner, outer = hashlib.sha256(bytes(b ^ 0x36 for b in key)).copy, hashlib.sha256(bytes(b ^ 0x5C for b in key)).copy
    memo = {} if memo is None else memo
    out = []
    for v in ids:
        h = memo.get(v)
        if h is None:
            i = inner()
            i.update(v.encode("utf-8", "surrogatepass") if isinstance(v, str) else bytes(v))
            o = outer()
            o.update(i.digest())
            h = memo[v] = o.digest()[:16]
        out.append(h)
    return out


def choose(hashes: list[bytes], counts: dict[bytes, int], n_ids: int, unit: Unit) -> tuple[np.ndarray, dict, int]:
    """Which records to keep (:func:`choice`): the keep mask, the new counts of the ids that changed, the new
    id count."""
    c = choice(hashes, counts, n_ids, unit)
    return c.keep, dict(zip(c.moved, c.now.tolist())), n_ids + c.new


@dataclass(frozen=True)
class _Choice:
    keep: np.ndarray  # the records kept, in order
    moved: list[bytes]  # the ids whose count the choice moves, in order of first appearance
    seen: np.ndarray  # their counts chosen from
    now: np.ndarray  # their counts after
    new: int  # how many of them are new
    over_k: int  # records dropped: their id was at K
    over_ids: int  # records dropped: a new id past max_ids


def choice(hashes: list[bytes], counts: dict[bytes, int], n_ids: int, unit: Unit) -> _Choice:
    """Which records to keep, in order: a record is kept while its id's count (``counts``: the stored counts
    of the ids present, 0 for a new id) is below K, and a new id only while fewer than ``max_ids`` ids are
    kept (``n_ids`` stored).

    Vectorised: the ids numbered by first appearance, each record's rank among its id's records (a stable
    sort), kept iff its id is admitted and its stored count plus rank is below K."""
    index: dict[bytes, int] = {}
    inv = np.fromiter((index.setdefault(h, len(index)) for h in hashes), dtype=np.int64, count=len(hashes))
    distinct = list(index)
    base = np.fromiter((counts.get(h, 0) for h in distinct), dtype=np.int64, count=len(distinct))
    new = base == 0
    admitted = ~new | (np.cumsum(new) <= max(unit.max_ids - n_ids, 0))  # new ids in order of first appearance
    order = np.argsort(inv, kind="stable")
    starts = np.searchsorted(inv[order], np.arange(len(distinct)))
    rank = np.empty(len(hashes), dtype=np.int64)
    rank[order] = np.arange(len(hashes)) - starts[inv[order]]
    in_ids = admitted[inv]
    keep = in_ids & (base[inv] + rank < unit.max_records_per_id)
    added = np.bincount(inv[keep], minlength=len(distinct))
    moved = np.flatnonzero(added)
    over_ids = len(hashes) - int(in_ids.sum())
    over_k = len(hashes) - int(keep.sum()) - over_ids
    return _Choice(
        keep, [distinct[i] for i in moved], base[moved], (base + added)[moved], int(new[moved].sum()), over_k, over_ids
    )


class IdBound:
    """A worker's side of the bound: hashes the ids and chooses the records to keep from its own view of the
    ids' counts, which the add script checks (:data:`IDS_LUA`).

    The view is a lower bound of every stored count (counts and the number of ids only grow; an id not in the
    view counts as new): records it drops (count at K, or a new id past ``max_ids``) would be dropped by the
    stored counts too, and the records it keeps move counts the script checks are current. A stale view costs
    one ``ids-moved`` reply, which carries the current counts (:meth:`moved`): no read before an add.
    ``limit`` bounds the ids remembered (the view is dropped whole when full: a forgotten id is re-read on a
    mismatch)."""

    def __init__(self, unit: Unit, key: bytes, limit: int = 1_000_000):
        self.unit, self.key, self.limit = unit, key, limit
        self.counts: dict[bytes, int] = {}
        self.n_ids = 0
        self._memo: dict[Any, bytes] = {}
        self._pending: tuple[list[bytes], list[int], int] = ([], [], 0)

    def forget(self) -> None:
        """Drop the view (after a lost connection: the stored counts may have been rolled back)."""
        self.counts, self.n_ids = {}, 0

    def hashes(self, ids: list) -> list[bytes]:
        """The ids' keyed hashes (the raw ids hashed before are remembered, in this process only)."""
        if len(self._memo) + len(ids) > self.limit:
            self._memo = {}
        return hash_ids(self.key, ids, self._memo)

    def choose(self, hashes: list[bytes]) -> tuple[np.ndarray, list]:
        """The keep mask of ``hashes`` (the records to merge, in order) and the add script's id arguments."""
        c = choice(hashes, self.counts, self.n_ids, self.unit)
        now = c.now.tolist()
        self._pending = c.moved, now, c.new
        args = [
            len(c.moved),
            c.new,
            self.unit.max_ids,
            b"".join(c.moved),
            ",".join(map(str, c.seen.tolist())),
            ",".join(map(str, now)),
            c.over_k,
            c.over_ids,
        ]
        return c.keep, args

    def moved(self, reply: list) -> None:
        """Take in an ``ids-moved`` reply: the ids kept and the current counts of the ids the add would move."""
        moved = self._pending[0]
        self.n_ids = max(self.n_ids, int(reply[1]))
        cur = reply[2] if isinstance(reply[2], bytes) else str(reply[2]).encode()
        self._remember(moved, [int(v) for v in cur.split(b",")] if cur else [])

    def written(self) -> None:
        """The add was written: its counts are the stored ones."""
        moved, now, new = self._pending
        self.n_ids += new
        self._remember(moved, now)

    def _remember(self, hashes: list[bytes], counts: list[int]) -> None:
        if len(self.counts) + len(hashes) > self.limit:
            self.counts = {}
        self.counts.update((h, c) for h, c in zip(hashes, counts) if c > 0)


# Lua (spliced into the add script after its checks, before any write): the ids' counts the worker chose from
# must be current and the new ids must fit the bound, then the new counts are written. Needs KEYS[ids_slot] (the
# counts hash) and ARGV from position `io`: n (ids changed), how many of them are new, max_ids, the n 16-byte
# hashes joined, their counts as the worker saw them and their new counts (decimal, comma-separated), then the
# records the choice drops over K and over max_ids: eight arguments whatever n, so the client packs no argument
# per id. The write (IDS_WRITE_LUA) also adds the drops to the worker counters, KEYS[stats_slot]. Otherwise it replies
# {'ids-moved', ids kept, the n current counts}: the worker chooses again from them without another read. A
# new id's count seen is 0, so two workers cannot both add it; the bound is checked against the ids kept at
# write time. The counts are read with HMGET in chunks (Lua's stack bounds an unpack).
IDS_LUA = r"""
local n_ids = tonumber(ARGV[io])
local id_new, id_hash = {}, {}
if n_ids > 0 then
  local hs = ARGV[io + 3]
  local seen = {}
  for v in string.gmatch(ARGV[io + 4], '%d+') do seen[#seen + 1] = tonumber(v) end
  for v in string.gmatch(ARGV[io + 5], '%d+') do id_new[#id_new + 1] = v end
  if #seen ~= n_ids or #id_new ~= n_ids or #hs ~= 16 * n_ids then return {'ids-bad', 0} end
  local cur, moved, sub = {}, false, string.sub
  for s = 1, n_ids, 4000 do
    local f = {}
    for i = s, math.min(s + 3999, n_ids) do
      local h = sub(hs, 16 * i - 15, 16 * i)
      f[#f + 1] = h
      id_hash[i] = h
    end
    local got = redis.call('HMGET', KEYS[ids_slot], unpack(f))
    for j = 1, #f do
      local c = tonumber(got[j] or '0')
      cur[#cur + 1] = c
      if c ~= seen[s + j - 1] then moved = true end
    end
  end
  local kept = redis.call('HLEN', KEYS[ids_slot])
  if moved or kept + tonumber(ARGV[io + 1]) > tonumber(ARGV[io + 2]) then
    return {'ids-moved', kept, table.concat(cur, ',')}
  end
end
"""

IDS_WRITE_LUA = r"""
if tonumber(ARGV[io + 6]) > 0 then redis.call('HINCRBY', KEYS[stats_slot], 'records_dropped_over_k', ARGV[io + 6]) end
if tonumber(ARGV[io + 7]) > 0 then
  redis.call('HINCRBY', KEYS[stats_slot], 'records_dropped_over_max_ids', ARGV[io + 7])
end
local pairs_ = {}
for i = 1, n_ids do
  pairs_[#pairs_ + 1] = id_hash[i]
  pairs_[#pairs_ + 1] = id_new[i]
  if #pairs_ >= 7000 or i == n_ids then
    redis.call('HSET', KEYS[ids_slot], unpack(pairs_))
    pairs_ = {}
  end
end
"""

assert MAX_RECORDS_PER_ID < 2**53  # (counts travel through Lua numbers)
