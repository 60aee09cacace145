"""A branch's budget in the learners that grow a tree query by query (Friedman & Schuster's ID3 and C4.5, Bai et
al.'s DPEA): when a node stops, and what its leaf gets.

Every root-to-leaf path (a branch) of these trees has the learner's whole
budget ``B``: the paths hold disjoint records, so their queries compose in
parallel. A node stops growing by Friedman & Schuster's rule (:func:`stops`);
a branch that stops before its last level has not spent all of ``B``, and
with ``top_up`` (our addition to the papers) its leaf's class counts get the
rest (:func:`rest_of_branch`), so every path spends exactly ``B``. The
decision to stop reads released counts only. Why on by default:
docs/decisions/003-top-up-stopped-branches.md.

>>> stops(10.0, 3, 2, 0.1), stops(1000.0, 3, 2, 0.1)  # 10 / 6 records a cell against sqrt(2) / 0.1
(True, False)
>>> rest_of_branch(1.0, 0.25) == 0.75 * (1 - 1e-12)
True
"""

from __future__ import annotations

import math

__all__ = ["stops", "rest_of_branch"]


def stops(n_t: float, arity: int, n_classes: int, eps: float) -> bool:
    """Friedman & Schuster's rule: a node whose noisy count ``n_t`` gives each cell of its widest split left (``arity``
    values by ``n_classes`` classes) fewer than ``sqrt(2) / eps`` records (the noise's standard deviation at one
    query's ``eps``) becomes a leaf: below that its counts would be mostly noise."""
    return n_t / (arity * n_classes) < math.sqrt(2) / eps


def rest_of_branch(budget: float, spent: float) -> float:
    """What a branch that has spent ``spent`` of ``budget`` has left (0 if nothing), less a relative ``1e-12``: the
    float sums of a path's charges never pass its budget."""
    return max(0.0, (float(budget) - spent) * (1 - 1e-12))
