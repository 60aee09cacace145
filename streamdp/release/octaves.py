"""The dyadic nodes of ``release="tree"`` and how each window's epsilon is spread over them, by octave.

Public and data-free: which node covers which windows, closes when, is released with how many units of
epsilon, and the variance of its estimate. The mechanism and its privacy sketch:
:mod:`streamdp.release.tree`.

>>> [node_units(0, j) for j in range(4)] == [UNITS] * 4   # windows 1..4: plain (octaves 0-1)
True
>>> closing_nodes(4)
[Node(level=0, index=3), Node(level=1, index=1), Node(level=2, index=0)]
>>> prefix_nodes(6)
[Node(level=2, index=0), Node(level=1, index=2)]
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from streamdp.validation import check_integer

__all__ = [
    "UNITS",
    "PLAIN_OCTAVES",
    "Node",
    "node_units",
    "window_units",
    "closing_nodes",
    "prefix_nodes",
    "node_windows",
    "node_weight",
    "tree_variance_factor",
]

#: Units of epsilon per window: ``lcm(1..16)``, so octaves of up to 16 levels split them exactly evenly.
UNITS = 720720
#: Windows ``1 .. 2**PLAIN_OCTAVES`` are released as plain windows (their leaf has every unit).
PLAIN_OCTAVES = 8


class Node(NamedTuple):
    """Dyadic node: windows ``index*2**level + 1 .. (index+1)*2**level``."""

    level: int
    index: int  # type: ignore[assignment]  # (a field named like tuple.index, as the windows' index)

    @property
    def key(self) -> str:
        """A stable name for storage (``"u:level:index"``; the fixed-horizon tree's were ``"epoch:level:index"``)."""
        return f"u:{self.level}:{self.index}"

    @property
    def units(self) -> int:
        """Units of epsilon this node is released with (0: never noised), :func:`node_units`."""
        return node_units(self.level, self.index)


def _octave(level: int, index: int) -> int:
    """The octave of a node with ``index >= 1``: ``level + floor(log2 index)``."""
    return level + index.bit_length() - 1


def node_units(level: int, index: int) -> int:
    """Units of epsilon node ``(level, index)`` is released with (the allocation; public).

    >>> {node_units(lv, 1 << (8 - lv)) for lv in range(9)}  # octave 8: nine levels split the units evenly
    {80080}
    >>> node_units(3, 0), node_units(1, 5)        # a prefix above the leaves; a plain octave's inner node
    (0, 0)
    """
    if index == 0:
        return UNITS if level == 0 else 0
    m = _octave(level, index)
    if m < PLAIN_OCTAVES:
        return UNITS if level == 0 else 0
    base, extra = divmod(UNITS, m + 1)
    return base + (1 if level < extra else 0)


def window_units(w: int) -> int:
    """Units of epsilon window ``w`` is noised with over all its nodes (always :data:`UNITS`; the privacy test)."""
    check_integer(w, "window", low=1)
    return sum(node_units(lv, (w - 1) >> lv) for lv in range(int(w).bit_length() + 1))


def closing_nodes(t: int) -> list[Node]:
    """Nodes whose last window is ``t``, lowest level first (released or not: see :attr:`Node.units`)."""
    check_integer(t, "window index", low=1)
    return [Node(lv, (t >> lv) - 1) for lv in range(int(t).bit_length()) if t % (1 << lv) == 0]


def prefix_nodes(t: int) -> list[Node]:
    """The binary decomposition of ``t``: the maximal closed nodes, covering windows ``1..t`` once."""
    check_integer(t, "window index", low=1)
    return [Node(lv, (t >> lv) - 1) for lv in reversed(range(int(t).bit_length())) if t >> lv & 1]


def node_windows(node: Node) -> range:
    """Window indices a node covers."""
    return range(node.index * 2**node.level + 1, (node.index + 1) * 2**node.level + 1)


@functools.lru_cache(maxsize=4096)
def _z_factor(level: int, octave: int) -> float:
    """Variance of a node's estimate ``z`` in units of one draw's variance at the whole epsilon (``UNITS``
    units); ``octave = -1`` for a prefix node. Depends on the level and octave only."""
    index = 0 if octave < 0 else 1 << (octave - level)
    c = node_units(level, index)
    own = (UNITS / c) ** 2 if c else float("inf")
    if level == 0:
        return own
    left = _z_factor(level - 1, -1 if octave < 0 else octave)
    right = _z_factor(level - 1, level - 1 if octave < 0 else octave)
    sub = left + right
    return sub if not c else 1.0 / (1.0 / own + 1.0 / sub)


def node_weight(node: Node) -> float:
    """Weight of the node's own ``y / c`` in its estimate: ``Var(children's sum) / (own variance + it)``."""
    c = node.units
    if not c:
        return 0.0
    if node.level == 0:
        return 1.0
    octave = -1 if node.index == 0 else _octave(node.level, node.index)
    own = (UNITS / c) ** 2
    sub = _z_factor(node.level - 1, -1 if octave < 0 else octave) + _z_factor(
        node.level - 1, node.level - 1 if octave < 0 else octave
    )
    return sub / (own + sub)


def tree_variance_factor(t: int) -> float:
    """``Var S(t)`` in units of one draw's variance at the whole per-tree epsilon (the plain window's):
    ``t`` for ``t <= 2**PLAIN_OCTAVES``, then ``O(log^3 t)``.

    >>> tree_variance_factor(256), tree_variance_factor(257)   # the plain sum, then one leaf at a ninth
    (256.0, 337.0)
    """
    return sum(_z_factor(n.level, -1 if n.index == 0 else _octave(n.level, n.index)) for n in prefix_nodes(t))
