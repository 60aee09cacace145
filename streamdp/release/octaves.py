"""The nodes of ``release="tree"`` and how each window's epsilon is spread over them, by octave.

Public and data-free: which window is which leaf, which node closes when and is released with how many
units of epsilon, and the variance of the published estimate. The mechanism and its privacy sketch:
:mod:`streamdp.release.tree`.

Windows ``1 .. 2**PLAIN_OCTAVES`` are plain. Octave ``m >= PLAIN_OCTAVES`` (windows ``2^m + 1 .. 2^(m+1)``)
is a *smooth* binary tree (Andersson and Pagh): of :func:`octave_shape` ``(height h, zeros z)``, its
``2^m`` windows are, in order, the smallest ``h``-bit leaves with exactly ``z`` zero bits. Released: every
left child (even index) at levels ``0 .. h-1`` holding a window, and the root.

>>> octave_shape(8), bin(leaf(8, 0)), bin(leaf(8, 1))   # 24-bit leaves with two zeros, smallest first
((24, 2), '0b1111111111111111111111', '0b10111111111111111111111')
>>> [n.key for n in closing_nodes(257)]      # window 257, leaf 0: of its left ancestors, (22, 0) ends here
['s:8:22:0']
>>> sum(n.units for n in containing_nodes(257)) == UNITS
True
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

from streamdp.validation import check_integer

__all__ = [
    "UNITS",
    "PLAIN_OCTAVES",
    "ROOT_UNITS",
    "Node",
    "octave_shape",
    "leaf",
    "window_octave",
    "node_units",
    "containing_nodes",
    "window_units",
    "closing_nodes",
    "node_windows",
    "decomposition",
    "tree_variance_factor",
]

#: Units of epsilon per window: ``lcm(1..16)``, so small splits are exact.
UNITS = 720720
#: Windows ``1 .. 2**PLAIN_OCTAVES`` are released as plain windows (their leaf has every unit).
PLAIN_OCTAVES = 8
#: Units each window of a tree octave spends (at least) on its octave's root, the octave's total
#: (Chan, Shi and Song's logarithmic counter; 0.15 of the epsilon, chosen by docs/decisions/013).
ROOT_UNITS = 108108


class Node(NamedTuple):
    """A released node: ``octave = -1`` is plain window ``index + 1``; else node ``(level, index)`` of octave
    ``octave``'s smooth tree, leaves ``index*2**level .. (index+1)*2**level - 1`` (level ``h``: the root)."""

    octave: int
    level: int
    index: int  # type: ignore[assignment]  # (a field named like tuple.index, as the node's index)

    @property
    def key(self) -> str:
        """A stable name for storage (``"w:window"`` or ``"s:octave:level:index"``)."""
        if self.octave < 0:
            return f"w:{self.index + 1}"
        return f"s:{self.octave}:{self.level}:{self.index}"

    @property
    def units(self) -> int:
        """Units of epsilon this node is released with, :func:`node_units`."""
        return node_units(self)


@functools.cache
def octave_shape(m: int) -> tuple[int, int]:
    """``(height, zeros)`` of octave ``m``'s tree: the least ``ones * zeros**2`` (a prefix's variance: ``ones``
    nodes at ``1 / zeros`` of the epsilon each) with ``comb(height, zeros) >= 2**m`` leaves; ties to the lower.

    >>> [octave_shape(m) for m in (8, 12, 19)]
    [(24, 2), (31, 3), (39, 5)]
    """
    check_integer(m, "octave", low=0)
    best: tuple[int, int, int] | None = None
    for z in range(1, m + 2):
        lo, hi = 1, 2**m
        while lo < hi:  # the fewest ones with comb(ones + z, z) >= 2**m
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if math.comb(mid + z, z) >= 2**m else (mid + 1, hi)
        cand = (lo * z * z, lo + z, z)
        if best is None or cand < best:
            best = cand
    assert best is not None
    return best[1], best[2]


def _ones(m: int) -> int:
    h, z = octave_shape(m)
    return h - z


def leaf(m: int, i: int) -> int:
    """The leaf of octave ``m``'s ``i``-th window (from 0): the ``i``-th smallest ``h``-bit integer with
    ``z`` zeros (the combinatorial number system)."""
    h, z = octave_shape(m)
    k, out = h - z, 0
    for p in reversed(range(h)):
        below = math.comb(p, k) if k >= 0 else 0  # leaves with bit p = 0 and the k ones below it
        if i >= below:
            i -= below
            out |= 1 << p
            k -= 1
    if k != 0 or i != 0:
        raise ValueError(f"octave {m} has no window {i}")
    return out


def _rank(m: int, v: int) -> int:
    """How many of octave ``m``'s leaves (any ``h``-bit integer with ``z`` zeros) are below ``v``."""
    h, z = octave_shape(m)
    k, n = h - z, 0
    for p in reversed(range(h + 1)):
        if v >> p & 1:
            if p == h:
                return math.comb(h, k)
            if 0 <= k <= p:
                n += math.comb(p, k)
            k -= 1
            if k < 0:
                break
    return n


def window_octave(t: int) -> tuple[int, int]:
    """``(octave, position from 0)`` of window ``t``; octave ``-1`` for a plain window (position ``t - 1``)."""
    check_integer(t, "window index", low=1)
    if t <= 2**PLAIN_OCTAVES:
        return -1, t - 1
    m = (t - 1).bit_length() - 1
    return m, t - 2**m - 1


def _left_units(m: int) -> int:
    return (UNITS - ROOT_UNITS) // octave_shape(m)[1]


def node_units(node: Node) -> int:
    """Units of epsilon a node is released with (the allocation; public). Every window of octave ``m`` is in
    ``z`` released left nodes at :func:`_left_units` each and the root, which takes the rest of its units.

    >>> node_units(Node(-1, 0, 0)), node_units(Node(8, 24, 0)), node_units(Node(8, 22, 0)), node_units(Node(8, 22, 1))
    (720720, 108108, 306306, 0)
    """
    if node.octave < 0:
        return UNITS
    h, z = octave_shape(node.octave)
    if node.level == h:
        return UNITS - z * _left_units(node.octave)
    if node.index % 2 or not 0 <= node.level < h or not node_windows(node):
        return 0
    return _left_units(node.octave)


def containing_nodes(t: int) -> list[Node]:
    """The released nodes that hold window ``t`` (the privacy test sums their units)."""
    m, i = window_octave(t)
    if m < 0:
        return [Node(-1, 0, i)]
    h, _ = octave_shape(m)
    x = leaf(m, i)
    return [Node(m, lv, x >> lv) for lv in range(h) if not x >> lv & 1] + [Node(m, h, 0)]


def window_units(t: int) -> int:
    """Units of epsilon window ``t`` is noised with over all its nodes (always :data:`UNITS`)."""
    return sum(n.units for n in containing_nodes(t))


def closing_nodes(t: int) -> list[Node]:
    """The released nodes whose last window is ``t``, lowest level first (the root last, at the octave's end)."""
    m, i = window_octave(t)
    nodes = containing_nodes(t)
    if m < 0 or i + 1 == 2**m:
        return nodes
    nxt = leaf(m, i + 1)
    return [n for n in nodes[:-1] if nxt >> n.level != n.index]


def node_windows(node: Node) -> range:
    """Window indices a node holds."""
    if node.octave < 0:
        return range(node.index + 1, node.index + 2)
    m = node.octave
    lo = min(_rank(m, node.index << node.level), 2**m)
    hi = min(_rank(m, (node.index + 1) << node.level), 2**m)
    return range(2**m + 1 + lo, 2**m + 1 + hi)


def decomposition(m: int, v: int) -> list[Node]:
    """The released nodes of octave ``m`` that sum to its windows on leaves ``0 .. v - 1`` (the dyadic
    decomposition of ``v``, empty nodes left out: their sum is zero), highest level first."""
    h, z = octave_shape(m)
    return [
        Node(m, lv, (v >> lv) - 1)
        for lv in reversed(range(h))
        if v >> lv & 1 and 0 <= (h - z) - bin((v >> lv) - 1).count("1") <= lv
    ]


def _var(units: int) -> float:
    """A node's variance in units of one plain window's (every unit)."""
    return (UNITS / units) ** 2


@functools.lru_cache(maxsize=256)
def _total_variance(m: int) -> float:
    """Variance of the estimated total of octave ``m``: its root and its decomposition, by inverse variance."""
    h, _ = octave_shape(m)
    tree = len(decomposition(m, leaf(m, 2**m - 1) + 1)) * _var(_left_units(m))
    root = _var(node_units(Node(m, h, 0)))
    return 1.0 / (1.0 / tree + 1.0 / root)


def _carry_variance(m: int) -> float:
    """Variance of the estimate of windows ``1 .. 2**m`` (``m >= PLAIN_OCTAVES``)."""
    return float(2**PLAIN_OCTAVES) + sum(_total_variance(j) for j in range(PLAIN_OCTAVES, m))


def tree_variance_factor(t: int) -> float:
    """``Var S(t)`` in units of one plain window's (a draw at the whole per-tree epsilon): ``t`` for
    ``t <= 2**PLAIN_OCTAVES``, then the earlier octaves' totals plus ``ones`` nodes at most.

    >>> tree_variance_factor(256), round(tree_variance_factor(257), 2)   # plain, then one node of octave 8
    (256.0, 261.54)
    """
    m, i = window_octave(t)
    if m < 0:
        return float(t)
    if i + 1 == 2**m:
        return _carry_variance(m + 1)
    return _carry_variance(m) + len(decomposition(m, leaf(m, i + 1))) * _var(_left_units(m))
