"""The budget of a private dataset and of its parts, accounted as PINQ does.

A dataset's spend is its own charges plus, for each partition made of it, the maximum spend among the
parts (they hold disjoint records: parallel composition); the root's spend is what the records lost. A
charge that would take the root past its allotment is refused before anything is read. Kept apart from
:class:`~streamdp.learners.private_data.PrivateDataset`'s queries so that the accounting reads no record.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

from streamdp.privacy.ledger import TOLERANCE, BudgetExceeded
from streamdp.privacy.mechanisms import NotPrivateWarning, SecureRandom
from streamdp.validation import check_epsilon

__all__ = ["Allotment"]


class Allotment:
    """An epsilon allotment shared by a dataset and the parts partitioned from it (a base class)."""

    def __init__(self, epsilon: float, rng: SecureRandom, parent: Allotment | None = None, path: tuple = ()):
        self.epsilon = epsilon
        self._rng = rng
        self._parent = parent
        self.path = path
        self._own = 0.0
        self._groups: list[Sequence[Allotment]] = []
        self._spent = 0.0
        self._log: list[tuple[tuple, str, float]] = [] if parent is None else parent._log

    @property
    def spent(self) -> float:
        """Epsilon this dataset (with its parts) has used: own + sum over partitions of the max part."""
        return self._spent

    @property
    def remaining(self) -> float:
        """What the root's allotment has left."""
        r = self._root()
        return max(r.epsilon - r._spent, 0.0)

    @property
    def private(self) -> bool:
        """False when noise is reproducible (a test seed) or the allotment is infinite."""
        return self._rng.private and math.isfinite(self._root().epsilon)

    @property
    def log(self) -> list[tuple[tuple, str, float]]:
        """Every operation charged in this dataset's tree: ``(path, what, epsilon)``."""
        return list(self._log)

    def _root(self) -> Allotment:
        node = self
        while node._parent is not None:
            node = node._parent
        return node

    @staticmethod
    def _combine(
        own: float, groups: Sequence[Sequence[Allotment]], swap: Allotment | None = None, value: float = 0.0
    ) -> float:
        total = own
        for g in groups:
            total += max((value if c is swap else c._spent) for c in g)
        return total

    def _tentative(self, epsilon: float) -> list[tuple[Allotment, float]]:
        """Each node from this one up to the root with its spend if this node were charged ``epsilon`` more."""
        chain = [(self, self._spent + epsilon)]
        node = self
        while node._parent is not None:
            parent = node._parent
            chain.append((parent, self._combine(parent._own, parent._groups, node, chain[-1][1])))
            node = parent
        return chain

    def can_charge(self, epsilon: float) -> bool:
        """Whether charging this part ``epsilon`` keeps the root within its allotment (parallel parts counted
        as their max, so a share may take what its siblings took). Reads no record."""
        root, total = self._tentative(epsilon)[-1]
        return total <= root.epsilon + TOLERANCE

    def _charge(self, epsilon: float, what: str) -> None:
        """Charge this node; refuse (charging nothing) if the root's allotment would be exceeded."""
        check_epsilon(epsilon, allow_inf=True)
        if math.isinf(epsilon):
            if math.isfinite(self._root().epsilon):
                raise BudgetExceeded(f"dataset: epsilon=inf for {what} exceeds any finite allotment")
            warnings.warn("epsilon=inf: this release is exact, NOT private", NotPrivateWarning, stacklevel=3)
        chain = self._tentative(epsilon)
        root, total = chain[-1]
        if total > root.epsilon + TOLERANCE:
            raise BudgetExceeded(
                f"dataset: charging epsilon={epsilon:g} for {what} would spend {total:g} of {root.epsilon:g} "
                f"({max(root.epsilon - root._spent, 0.0):g} left); refused before reading any data"
            )
        self._own += epsilon
        for n, v in chain:
            n._spent = v
        self._log.append((self.path, what, float(epsilon)))
