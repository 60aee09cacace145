"""The privacy budget ledger: per data source, a total budget and every spend.

Every release computed from a data source (a stream's model, a dataset
name) is one *spend*. Spends over the same records compose sequentially, so
a source's spent epsilon is the sum of its spends, and a charge that would
push it past the total is refused *before* any data is read.

>>> led = InMemoryLedger()
>>> led.set_budget("adult", 1.0)
>>> led.charge("adult", 0.75, who="alice", what="DiffPID3").epsilon
0.75
>>> led.charge("adult", 0.5, who="bob", what="SuLQID3")
Traceback (most recent call last):
...
streamdp.privacy.ledger.BudgetExceeded: source 'adult': charging epsilon=0.5 would spend 1.25 of a budget of 1 (0.25 left); refused before reading any data
>>> round(led.remaining("adult"), 9)
0.25

The Redis store for the service is :class:`streamdp.service.ledger_store.RedisLedger`,
which makes the check-and-charge one atomic script.

A source is a free-text label: the same records released under two labels
are charged to two ledgers. :func:`file_source` binds a file to one ledger by
its content (the SHA-256 of its bytes), whatever its path or label; it
cannot see that two *different* files share people (a reordered or extended
copy is another file), so labels of overlapping data remain the data
owner's responsibility.

A ledger has one **unit of privacy**, fixed by its first spend: a record, or a person named by an id column
(each spend records its own K, the records per person it bounded to). Every spend's epsilon is then the same
figure (per record, or per person), so the sum is what a record, or a person, has lost; a charge in another
unit is refused (:class:`UnitMismatch`) before anything is charged or read. Spends of different K compose per
person (each is epsilon-DP per person), so K is not part of the unit. A ledger whose spends predate units
counts as per record.

>>> led.charge("adult", 0.25, who="carol", what="DPEA", privacy_id="user", max_records_per_id=3)
Traceback (most recent call last):
...
streamdp.privacy.ledger.UnitMismatch: source 'adult' is accounted per record: its spends are epsilon per record, and this charge is per person (column 'user', K=3) (a ledger sums one unit's epsilon). Charge it per record (no privacy id), or account per person from the start on a source of its own (a new ledger, for people no spend on 'adult' covered); refused before reading any data
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import IO

from streamdp.privacy.contribution import check_unit
from streamdp.validation import check_delta, check_epsilon

__all__ = [
    "Spend",
    "Ledger",
    "InMemoryLedger",
    "BudgetExceeded",
    "UnitMismatch",
    "RECORD",
    "unit_of_charge",
    "describe_unit",
    "unit_refusal",
    "TOLERANCE",
    "file_sha256",
    "stream_sha256",
    "file_source",
    "left_of",
    "exceeds",
    "refusal",
    "refit_words",
]

# Floating sums of budget shares (eps/3 + eps/3 + eps/3) may exceed eps by rounding.
TOLERANCE = 1e-9


def refit_words(kind: str, epsilon: float) -> str:
    """The one wording of the warning a second fit gives (a forest, a batch learner): its records are released
    again. Why: without a ledger nothing else counts the second spend.

    >>> refit_words("forest", 1.0)[:62]
    'this forest holds a release already: fitting again spends epsi'
    """
    return (
        f"this {kind} holds a release already: fitting again spends epsilon={epsilon:g} more on any records it was "
        f"fitted on before (sequential composition), which its epsilon does not count; create a new {kind} per "
        "fit, or charge each fit to a ledger (streamdp.privacy.ledger)"
    )


def left_of(budget: float, spent: float) -> float:
    """What is left of a budget, 0 within :data:`TOLERANCE` (ten spends of 0.1 of 1 leave 1.1e-16).

    >>> left_of(1.0, sum([0.1] * 10)), left_of(1.0, 0.25)
    (0.0, 0.75)
    """
    left = budget - spent
    return left if left > TOLERANCE else 0.0


def file_sha256(path: str) -> str:
    """The SHA-256 (hex) of a file's bytes."""
    with open(path, "rb") as fh:
        return stream_sha256(fh)


def stream_sha256(fh: IO[bytes], copy_to: IO[bytes] | None = None, limit: int | None = None) -> str:
    """The SHA-256 (hex) of what ``fh`` reads (at most ``limit`` bytes); with ``copy_to``, the very bytes hashed
    are also written there (one read: a job parses the copy, so what it checked is what it reads, whatever
    happens to the file after)."""
    h = hashlib.sha256()
    left = math.inf if limit is None else limit
    while left > 0:
        chunk = fh.read(int(min(1 << 20, left)))
        if not chunk:
            break
        left -= len(chunk)
        h.update(chunk)
        if copy_to is not None:
            copy_to.write(chunk)
    return h.hexdigest()


def file_source(path: str) -> str:
    """The ledger source bound to a file's content: ``file-`` and the first 128 bits of its SHA-256.

    The same bytes give the same source under any path or name.

    >>> import os, tempfile
    >>> d = tempfile.mkdtemp(); a, b = os.path.join(d, "a.csv"), os.path.join(d, "b.csv")
    >>> for p in (a, b): _ = open(p, "w").write("x,y\\n1,2\\n")
    >>> file_source(a) == file_source(b), file_source(a)[:5], len(file_source(a))
    (True, 'file-', 37)
    """
    return "file-" + file_sha256(path)[:32]


class BudgetExceeded(ValueError):
    """A charge would exceed the source's total budget; nothing was charged or read."""


class UnitMismatch(BudgetExceeded):
    """A charge in another unit of privacy than its ledger's (per record against per person, or another id
    column); nothing was charged or read. A :class:`BudgetExceeded`: a job refused for either ends ``refused``."""


#: The unit of a ledger whose spends are epsilon per record (and of a ledger charged before units were recorded).
RECORD = "record"


def unit_of_charge(privacy_id: str | None, max_records_per_id: int | None = None) -> str:
    """The ledger unit a charge is made in: :data:`RECORD`, or ``person:COLUMN`` (K is the spend's, not the unit's).

    Raises :class:`ValueError` for a privacy id that is not a non-empty string, or a K without a privacy id.

    >>> unit_of_charge(None), unit_of_charge("user", 3)
    ('record', 'person:user')
    """
    if privacy_id is None:
        if max_records_per_id is not None:
            raise ValueError("max_records_per_id goes with privacy_id (the column naming each record's person)")
        return RECORD
    if not isinstance(privacy_id, str) or not privacy_id:
        raise ValueError(f"privacy_id must name a column, got {privacy_id!r}")
    return f"person:{privacy_id}"


def describe_unit(unit: str, k: int | None = None) -> str:
    """A ledger unit in words (with a spend's K when given).

    >>> describe_unit("record"), describe_unit("person:user", 3)
    ('per record', "per person (column 'user', K=3)")
    """
    if unit == RECORD:
        return "per record"
    column = unit.partition(":")[2]
    return f"per person (column {column!r}" + (f", K={k})" if k is not None else ")")


def unit_refusal(source: str, ledger_unit: str, unit: str, k: int | None = None) -> UnitMismatch:
    """The refusal of a charge in ``unit`` (K ``k``) on a ledger accounted in ``ledger_unit``: both units and what to
    do (the words every store and the job submit use)."""
    theirs = "epsilon per record" if ledger_unit == RECORD else "epsilon per person"
    head = (
        f"source {source!r} is accounted {describe_unit(ledger_unit)}: its spends are {theirs}, and this charge is "
        f"{describe_unit(unit, k)} (a ledger sums one unit's epsilon). "
    )
    if ledger_unit == RECORD:
        todo = (
            f"Charge it per record (no privacy id), or account per person from the start on a source of its own "
            f"(a new ledger, for people no spend on {source!r} covered)"
        )
    elif unit == RECORD:
        column = ledger_unit.partition(":")[2]
        todo = (
            f"A per-record spend costs a person with up to K records K times its epsilon, and nothing bounds K "
            f"without the ids: give it the privacy id {column!r} and K (--privacy-id {column} "
            "--max-records-per-id K; its epsilon is then per person, noise drawn at epsilon / K)"
        )
    else:
        column = ledger_unit.partition(":")[2]
        todo = (
            f"The ledger cannot tell whether two id columns name the same people: if they do, name the column "
            f"{column!r} (rename it in the file); if not, use a source of their own"
        )
    return UnitMismatch(f"{head}{todo}; refused before reading any data")


@dataclass(frozen=True)
class Spend:
    """One release charged to a source."""

    source: str
    epsilon: float
    delta: float
    who: str
    what: str
    when: float  # unix time
    key: str = ""  # idempotency key (e.g. a job id): charging the same key twice charges once
    privacy_id: str | None = None  # the id column of a per-person spend (None: per record)
    max_records_per_id: int | None = None  # K of a per-person spend: the records per person it bounded to

    @property
    def unit(self) -> str:
        """The ledger unit of this spend (:func:`unit_of_charge`)."""
        return unit_of_charge(self.privacy_id)

    def describe_unit(self) -> str:
        """``per record`` or ``per person (column 'user', K=3)``."""
        return describe_unit(self.unit, self.max_records_per_id)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Spend:
        return cls(
            str(d["source"]),
            float(d["epsilon"]),
            float(d["delta"]),
            str(d["who"]),
            str(d["what"]),
            float(d["when"]),
            str(d.get("key", "")),
            None if d.get("privacy_id") is None else str(d["privacy_id"]),  # (spends before units: per record)
            None if d.get("max_records_per_id") is None else int(d["max_records_per_id"]),
        )


def check_charge(
    source: str, epsilon: float, delta: float, privacy_id: str | None = None, max_records_per_id: int | None = None
) -> str:
    """Validate a charge's arguments (shared by every store); returns its unit (:func:`unit_of_charge`)."""
    if not isinstance(source, str) or not source:
        raise ValueError(f"source must be a non-empty string, got {source!r}")
    check_epsilon(epsilon, allow_zero=True)
    check_delta(delta)
    unit = unit_of_charge(privacy_id, max_records_per_id)
    if privacy_id is not None:
        check_unit(privacy_id, max_records_per_id)
    return unit


def exceeds(spent: tuple[float, float], charge: tuple[float, float], budget: tuple[float, float] | None) -> bool:
    """Whether a charge of ``(epsilon, delta)`` on top of ``spent`` passes ``budget`` (None: no budget), within
    :data:`TOLERANCE`: the ledgers' rule (the Redis ledger's charge script states it in Lua, alike).

    >>> exceeds((0.9, 0.0), (0.1, 0.0), (1.0, 0.0)), exceeds((0.9, 0.0), (0.2, 0.0), (1.0, 0.0))
    (False, True)
    """
    return (
        budget is None or spent[0] + charge[0] > budget[0] + TOLERANCE or spent[1] + charge[1] > budget[1] + TOLERANCE
    )


def refusal(
    source: str,
    epsilon: float,
    spent: float,
    budget: float | None,
    delta: float = 0.0,
    spent_delta: float = 0.0,
    budget_delta: float = 0.0,
) -> BudgetExceeded:
    if budget is None:
        return BudgetExceeded(
            f"source {source!r} has no budget; set one first (ledger.set_budget or 'streamdp ledger {source} --set-budget E')"
        )
    if spent_delta + delta > budget_delta + TOLERANCE and delta > 0:
        return BudgetExceeded(
            f"source {source!r}: charging delta={delta:g} would spend {spent_delta + delta:g} of a delta budget of {budget_delta:g}; refused before reading any data"
        )
    return BudgetExceeded(
        f"source {source!r}: charging epsilon={epsilon:g} would spend {spent + epsilon:g} of a budget of {budget:g} "
        f"({left_of(budget, spent):g} left); refused before reading any data"
    )


class Ledger(ABC):
    """A budget per source and the list of its spends."""

    @abstractmethod
    def set_budget(self, source: str, epsilon: float, delta: float = 0.0) -> None:
        """Set (or raise) the total budget. Lowering it below what is spent is refused."""

    @abstractmethod
    def budget(self, source: str) -> tuple[float, float] | None:
        """``(epsilon, delta)`` total, or None when no budget was set."""

    @abstractmethod
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
        """Record a spend, or raise :class:`BudgetExceeded` without recording anything.

        With a non-empty ``key``, a second charge with the same key returns the
        first spend and charges nothing (a retried job is charged once). ``privacy_id`` and
        ``max_records_per_id`` (K) make the spend per person; the ledger's first spend fixes its unit, and a
        charge in another unit raises :class:`UnitMismatch` (checked in the same atomic step as the budget).
        """

    @abstractmethod
    def unit(self, source: str) -> str | None:
        """The ledger's unit (:data:`RECORD` or ``person:COLUMN``), or None before its first spend (a ledger
        whose spends predate units: :data:`RECORD`)."""

    @abstractmethod
    def spends(self, source: str) -> list[Spend]:
        """Every spend, oldest first."""

    def spent(self, source: str) -> tuple[float, float]:
        """``(epsilon, delta)`` spent so far (sequential composition: sums)."""
        s = self.spends(source)
        return (math.fsum(x.epsilon for x in s), math.fsum(x.delta for x in s))

    def remaining(self, source: str) -> float:
        b = self.budget(source)
        if b is None:
            return 0.0
        return left_of(b[0], self.spent(source)[0])


class InMemoryLedger(Ledger):
    """Ledger for library use, in one process (thread-safe)."""

    def __init__(self) -> None:
        self._budgets: dict[str, tuple[float, float]] = {}
        self._spends: dict[str, list[Spend]] = {}
        self._units: dict[str, str] = {}  # (declared ahead of a first spend: declare_unit)
        self._lock = threading.Lock()

    def set_budget(self, source: str, epsilon: float, delta: float = 0.0) -> None:
        check_charge(source, epsilon, delta)
        with self._lock:
            eps_spent, d_spent = self._spent_unlocked(source)
            if epsilon + TOLERANCE < eps_spent or delta + TOLERANCE < d_spent:
                raise ValueError(
                    f"source {source!r} has already spent epsilon={eps_spent:g}, delta={d_spent:g}; the budget cannot go below that"
                )
            self._budgets[source] = (float(epsilon), float(delta))

    def budget(self, source: str) -> tuple[float, float] | None:
        return self._budgets.get(source)

    def _spent_unlocked(self, source: str) -> tuple[float, float]:
        s = self._spends.get(source, [])
        return (math.fsum(x.epsilon for x in s), math.fsum(x.delta for x in s))

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
        with self._lock:
            if key:
                for s in self._spends.get(source, []):
                    if s.key == key:
                        return s
            b = self._budgets.get(source)
            eps_spent, d_spent = self._spent_unlocked(source)
            if b is not None and (fixed := self._unit_unlocked(source)) not in (None, unit):
                raise unit_refusal(source, fixed, unit, max_records_per_id)
            if exceeds((eps_spent, d_spent), (epsilon, delta), b):
                raise refusal(
                    source, epsilon, eps_spent, None if b is None else b[0], delta, d_spent, 0.0 if b is None else b[1]
                )
            spend = Spend(
                source,
                float(epsilon),
                float(delta),
                str(who),
                str(what),
                time.time(),
                str(key),
                privacy_id,
                None if privacy_id is None else int(max_records_per_id),  # type: ignore[arg-type]
            )
            self._spends.setdefault(source, []).append(spend)
            return spend

    def _unit_unlocked(self, source: str) -> str | None:
        s = self._spends.get(source)
        return s[0].unit if s else self._units.get(source)

    def declare_unit(self, source: str, privacy_id: str | None) -> str:
        """Fix the unit of ``source``'s ledger before its first spend (``privacy_id`` None: per record), as
        :meth:`RedisLedger.declare_unit <streamdp.service.ledger_store.RedisLedger.declare_unit>` does; returns it.
        Raises :class:`UnitMismatch` when the unit is fixed to another, :class:`ValueError` without a budget.

        >>> led = InMemoryLedger(); led.set_budget("s", 1.0)
        >>> led.declare_unit("s", "user"), led.unit("s")
        ('person:user', 'person:user')
        """
        unit = unit_of_charge(privacy_id)
        with self._lock:
            if source not in self._budgets:
                raise ValueError(f"source {source!r} has no budget; set one first")
            if (fixed := self._unit_unlocked(source)) not in (None, unit):
                raise unit_refusal(source, fixed, unit)
            self._units[source] = unit
        return unit

    def unit(self, source: str) -> str | None:
        with self._lock:
            return self._unit_unlocked(source)

    def spends(self, source: str) -> list[Spend]:
        with self._lock:
            return list(self._spends.get(source, []))
