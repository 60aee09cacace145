"""The privacy budget ledger in Redis: the check-and-charge is one atomic Lua script.

Keys of source ``S`` (all with the hash tag ``{S}``, so one Cluster slot)::

    sdp:{S}:ledger          hash: budget_epsilon, budget_delta, spent_epsilon, spent_delta, unit
    sdp:{S}:ledger:spends   list: one msgpack-encoded Spend dict per charge, oldest first
    sdp:{S}:ledger:keys     hash: idempotency key -> index into the spends list

Sums are stored as ``%.17g`` strings, so a double survives the round trip
through Lua exactly and the script compares the same IEEE sums Python would.
The ledger is history: deleting a model never deletes its ledger (privacy
loss is permanent). ``unit`` is the ledger's unit of privacy (``record`` or ``person:COLUMN``), written by
its first charge; the charge script refuses a charge in another unit in the same atomic step as the budget
check, so two racing chargers cannot mix units. A ledger with spends and no ``unit`` (charged before units
were recorded) counts as ``record``.

The example needs a running Redis, so the doctest run skips it;
``tests/privacy/test_ledger.py`` makes the same calls against a real server.

>>> led = RedisLedger("redis://localhost:6379/0")  # doctest: +SKIP
>>> led.set_budget("adult", 1.0)  # doctest: +SKIP
>>> led.charge("adult", 0.5, who="alice", what="DiffPID3", key="job-1").epsilon  # doctest: +SKIP
0.5
"""

from __future__ import annotations

import math
import time
from typing import Any

import msgpack

from streamdp.privacy.ledger import (
    RECORD,
    TOLERANCE,
    BudgetExceeded,
    Ledger,
    Spend,
    UnitMismatch,
    check_charge,
    describe_unit,
    exceeds,
    refusal,
    unit_of_charge,
    unit_refusal,
)
from streamdp.service.connection import connect
from streamdp.service.keys import check_name

__all__ = ["RedisLedger", "ledger_keys", "charge_model"]

# KEYS: ledger hash, spends list, idempotency hash. ARGV: epsilon, delta, key, encoded spend, tolerance, unit.
_CHARGE = """
if ARGV[3] ~= '' then
  local idx = redis.call('HGET', KEYS[3], ARGV[3])
  if idx then return {'dup', redis.call('LINDEX', KEYS[2], tonumber(idx))} end
end
local b = redis.call('HMGET', KEYS[1], 'budget_epsilon', 'budget_delta', 'spent_epsilon', 'spent_delta', 'unit')
local se, sd = b[3] or '0', b[4] or '0'
if not b[1] then return {'nobudget', '', '', se, sd} end
local u = b[5]
if not u and redis.call('LLEN', KEYS[2]) > 0 then u = 'record' end
if u and u ~= ARGV[6] then return {'unit', u} end
local bd = b[2] or '0'
local e, d, tol = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[5])
local ne, nd = tonumber(se) + e, tonumber(sd) + d
if ne > tonumber(b[1]) + tol or nd > tonumber(bd) + tol then
  return {'refused', b[1], bd, se, sd}
end
local n = redis.call('RPUSH', KEYS[2], ARGV[4])
if ARGV[3] ~= '' then redis.call('HSET', KEYS[3], ARGV[3], n - 1) end
redis.call('HSET', KEYS[1], 'spent_epsilon', string.format('%.17g', ne), 'spent_delta', string.format('%.17g', nd),
           'unit', ARGV[6])
return {'ok'}
"""

# KEYS: ledger hash, spends list. ARGV: unit, '1' when the caller states that spends before units were in it.
_DECLARE_UNIT = """
if redis.call('HEXISTS', KEYS[1], 'budget_epsilon') == 0 then return {'nobudget'} end
local u = redis.call('HGET', KEYS[1], 'unit')
if u then
  if u == ARGV[1] then return {'ok'} end
  return {'unit', u}
end
if redis.call('LLEN', KEYS[2]) > 0 and ARGV[1] ~= 'record' and ARGV[2] ~= '1' then return {'legacy'} end
redis.call('HSET', KEYS[1], 'unit', ARGV[1])
return {'ok'}
"""

# KEYS: ledger hash. ARGV: budget epsilon, budget delta, tolerance.
_SET_BUDGET = """
local s = redis.call('HMGET', KEYS[1], 'spent_epsilon', 'spent_delta')
local se, sd = s[1] or '0', s[2] or '0'
local tol = tonumber(ARGV[3])
if tonumber(ARGV[1]) + tol < tonumber(se) or tonumber(ARGV[2]) + tol < tonumber(sd) then
  return {'below', se, sd}
end
redis.call('HSET', KEYS[1], 'budget_epsilon', ARGV[1], 'budget_delta', ARGV[2], 'spent_epsilon', se, 'spent_delta', sd)
return {'ok'}
"""


def ledger_keys(source: str) -> tuple[str, str, str]:
    """The three keys of ``source``'s ledger (hash, spends list, idempotency hash).

    >>> ledger_keys("votes")
    ('sdp:{votes}:ledger', 'sdp:{votes}:ledger:spends', 'sdp:{votes}:ledger:keys')
    """
    try:
        check_name(source)
    except ValueError:
        raise ValueError(
            f"invalid ledger source {source!r}: use 1-64 letters, digits, '_', '.', '-' "
            "(starting with a letter or digit)"
        ) from None
    base = f"sdp:{{{source}}}:ledger"
    return base, f"{base}:spends", f"{base}:keys"


def _decode_spend(raw: bytes) -> Spend:
    try:
        return Spend.from_dict(msgpack.unpackb(raw, raw=False))
    except (ValueError, KeyError, TypeError, msgpack.UnpackException) as e:
        raise ValueError(f"unreadable ledger spend record: {e}") from None


def _f(v: Any) -> float:
    return float(v.decode() if isinstance(v, bytes) else v)


class RedisLedger(Ledger):
    """A :class:`~streamdp.privacy.ledger.Ledger` shared by every process through Redis."""

    def __init__(self, r: Any = None):
        self.r = connect(r)
        self._charge = self.r.register_script(_CHARGE)
        self._set_budget = self.r.register_script(_SET_BUDGET)
        self._declare_unit = self.r.register_script(_DECLARE_UNIT)

    def set_budget(self, source: str, epsilon: float, delta: float = 0.0) -> None:
        check_charge(source, epsilon, delta)
        h, _, _ = ledger_keys(source)
        res = self._set_budget(keys=[h], args=[repr(float(epsilon)), repr(float(delta)), repr(TOLERANCE)])
        if res[0] == b"below":
            raise ValueError(
                f"source {source!r} has already spent epsilon={_f(res[1]):g}, delta={_f(res[2]):g}; "
                "the budget cannot go below that"
            )

    def budget(self, source: str) -> tuple[float, float] | None:
        h, _, _ = ledger_keys(source)
        e, d = self.r.hmget(h, "budget_epsilon", "budget_delta")
        return None if e is None else (_f(e), _f(d or 0))

    def charge(
        self,
        source: str,
        epsilon: float,
        *,
        who: str,
        what: str,
        delta: float = 0.0,
        key: str = "",
        privacy_id: str | None = None,
        max_records_per_id: int | None = None,
    ) -> Spend:
        unit = check_charge(source, epsilon, delta, privacy_id, max_records_per_id)
        if not isinstance(key, str):
            raise ValueError(f"key must be a string, got {key!r}")
        k = None if privacy_id is None else int(max_records_per_id)  # type: ignore[arg-type]
        spend = Spend(source, float(epsilon), float(delta), str(who), str(what), time.time(), key, privacy_id, k)
        h, sp, ks = ledger_keys(source)
        res = self._charge(
            keys=[h, sp, ks],
            args=[
                repr(spend.epsilon),
                repr(spend.delta),
                key,
                msgpack.packb(spend.to_dict(), use_bin_type=True),
                repr(TOLERANCE),
                unit,
            ],
        )
        status = res[0]
        if status == b"ok":
            return spend
        if status == b"dup":
            return _decode_spend(res[1])
        if status == b"unit":
            raise unit_refusal(source, res[1].decode(), unit, k)
        budget_e = None if status == b"nobudget" else _f(res[1])
        budget_d = 0.0 if status == b"nobudget" else _f(res[2])
        raise refusal(source, spend.epsilon, _f(res[3]), budget_e, spend.delta, _f(res[4]), budget_d)

    def unit(self, source: str) -> str | None:
        h, sp, _ = ledger_keys(source)
        p = self.r.pipeline(transaction=True)
        p.hget(h, "unit")
        p.llen(sp)
        u, n = p.execute()
        if u is not None:
            return u.decode() if isinstance(u, bytes) else str(u)
        return RECORD if n else None

    def declare_unit(self, source: str, privacy_id: str | None, *, earlier_spends_per_person: bool = False) -> str:
        """Fix the unit of ``source``'s ledger before its next spend (``privacy_id`` None: per record); returns it.

        For a data owner who knows the unit ahead (a job in another unit is then refused at submit), and for a
        ledger charged before units were recorded (it counts as per record): declaring it per person then needs
        ``earlier_spends_per_person=True``, the owner's statement that every earlier spend was per person by that
        column (a person model's creation and its jobs); a wrong statement undercounts what a person lost.
        Raises :class:`~streamdp.privacy.ledger.UnitMismatch` when the ledger's unit is fixed to another,
        :class:`ValueError` without a budget or, for a ledger charged before units, without that statement."""
        h, sp, _ = ledger_keys(source)
        unit = unit_of_charge(privacy_id)
        res = self._declare_unit(keys=[h, sp], args=[unit, "1" if earlier_spends_per_person else "0"])
        status = res[0]
        if status == b"nobudget":
            raise ValueError(
                f"source {source!r} has no budget; set one first (streamdp ledger {source} --set-budget E)"
            )
        if status == b"unit":
            raise unit_refusal(source, res[1].decode(), unit)
        if status == b"legacy":
            raise ValueError(
                f"source {source!r} was charged before ledgers recorded their unit, so its spends count per record; "
                f"declaring it {describe_unit(unit)} states that every earlier spend was per person by that column "
                "(a model created with that privacy id, and its jobs): confirm with --earlier-spends-per-person"
            )
        return unit

    def spends(self, source: str) -> list[Spend]:
        _, sp, _ = ledger_keys(source)
        return [_decode_spend(raw) for raw in self.r.lrange(sp, 0, -1)]

    def spent(self, source: str) -> tuple[float, float]:
        """The sums the charge script checks (kept in the ledger hash; O(1))."""
        h, _, _ = ledger_keys(source)
        e, d = self.r.hmget(h, "spent_epsilon", "spent_delta")
        return (_f(e or 0), _f(d or 0))

    def sources(self) -> list[str]:
        """Every source with a ledger (a SCAN over the keyspace: for admin use)."""
        out = set()
        for k in self.r.scan_iter(match="sdp:{*}:ledger", count=1000):
            k = k.decode() if isinstance(k, bytes) else k
            name = k[len("sdp:{") : -len("}:ledger")]
            try:
                out.add(check_name(name))
            except ValueError:
                continue
        return sorted(out)


def charge_model(
    r: Any,
    name: str,
    epsilon: float,
    delta: float,
    ledger_budget: float | None,
    model_id: str,
    privacy_id: str | None = None,
    max_records_per_id: int | None = None,
) -> None:
    """Charge a stream model's creation, ``epsilon`` and ``delta``, to the ledger of source ``name`` (setting or raising its budget).

    A model with a unit of privacy (``privacy_id``, K ``max_records_per_id``) charges per person: its unit fixes
    a new ledger's, and a ledger of another unit refuses it (:class:`~streamdp.privacy.ledger.UnitMismatch`).
    A charge the budget set here could not take is refused before the budget is written: a refused create
    leaves the ledger as it was (``--epsilon 3 --ledger-budget 2`` is refused and leaves no budget of 2 behind)."""
    ledger = RedisLedger(r)
    current = ledger.budget(name)
    unit = check_charge(name, epsilon, delta, privacy_id, max_records_per_id) if math.isfinite(epsilon) else RECORD
    fixed = ledger.unit(name)
    if math.isfinite(epsilon) and fixed not in (None, unit):  # (before the budget below is written; the charge
        raise unit_refusal(name, fixed, unit, max_records_per_id)  # checks again, atomically)
    if not math.isfinite(epsilon):
        if current is not None or ledger_budget is not None:
            raise BudgetExceeded(
                f"source {name!r}: a non-private model (epsilon=inf) cannot be charged to a privacy "
                "budget; refused before reading any data"
            )
        return
    new = None
    if current is None:
        new = (epsilon if ledger_budget is None else ledger_budget, delta)
    elif ledger_budget is not None and ledger_budget > current[0]:
        new = (ledger_budget, max(current[1], delta))
    elif ledger_budget is not None and ledger_budget < current[0]:
        raise ValueError(
            f"source {name!r} already has a budget of {current[0]:g}: --ledger-budget can only raise "
            f"it, not set {ledger_budget:g} (its spends: streamdp ledger {name})"
        )
    if new is not None:
        spent = ledger.spent(name) if current is not None else (0.0, 0.0)
        if exceeds(spent, (epsilon, delta), new):  # (the charge below would refuse it, too late)
            raise refusal(name, epsilon, spent[0], new[0], delta, spent[1], new[1])
        ledger.set_budget(name, *new)
    try:
        ledger.charge(
            name,
            epsilon,
            delta=delta,
            who="stream",
            what="PrivateForest (stream model)",
            key=f"model:{model_id}",
            privacy_id=privacy_id,
            max_records_per_id=max_records_per_id,
        )
    except BudgetExceeded as e:
        if current is None or isinstance(e, UnitMismatch):
            raise
        # a deleted model's name created again: the ledger is kept (spends are history)
        raise BudgetExceeded(
            f"{e}. The ledger of {name!r} was spent before (a model or job of this name, perhaps "
            f"deleted since: ledgers are kept): raise its budget with --ledger-budget, or use "
            f"another name (streamdp ledger {name} lists its spends)"
        ) from None
