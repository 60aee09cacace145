"""Continual counting with no horizon: plain windows, then a smooth binary tree per octave.

The stream model publishes running counts ``S(t) = x_1 + ... + x_t`` of per-window exact tallies.
``release="tree"`` releases noisy nodes and publishes an estimate of ``S(t)`` from them. It is Chan, Shi
and Song's hybrid mechanism (a tree per octave and a logarithmic counter of the octaves' totals) with
Andersson and Pagh's smooth binary tree inside each octave, and plain windows first:

* Windows ``1 .. 2**PLAIN_OCTAVES`` are each released alone with every unit (the plain window sum).
* Octave ``m`` (windows ``2^m + 1 .. 2^(m+1)``) is a binary tree of height ``h`` whose leaves in use
  are, in order, the smallest ``h``-bit integers with exactly ``z`` zero bits
  (:func:`streamdp.release.octaves.octave_shape`, :func:`~streamdp.release.octaves.leaf`). A prefix of
  leaves ``0 .. v - 1`` is the sum of the left children (even index) at the set bits of ``v``, so only
  left children are released; a window sits in exactly ``z`` of them (its zero bits), each at ``u`` units,
  and in the octave's root (its total), which takes the rest of the window's units (``UNITS - z * u``,
  at least :data:`~streamdp.release.octaves.ROOT_UNITS`). Each prefix inside the octave then has
  ``h - z`` nodes at most, whatever its position: the error does not jump with the bits of ``t``.
* A node of ``c`` units is released once, when its last window closes, as ``c * (its exact sum) + Z``,
  ``Z`` geometric (or Laplace) at ``epsilon_per_tree / UNITS``; ``y / c`` estimates its sum with the noise
  variance of one draw over ``c**2``.
* Estimator: ``S(t)`` is the estimate of windows ``1 .. 2^m`` (the carry: the plain windows and every
  earlier octave's total) plus the left children at the set bits of the next window's leaf. An octave's
  total is the inverse-variance (least-squares, Honaker) mix of its root and of its own decomposition.

Privacy sketch: one record is in one window ``w`` (the windows partition the stream), so its count
changes exactly the released nodes that hold ``w``, each's ``c * sum`` by ``c`` per tree: that release is
``c * epsilon / UNITS``-DP (sensitivity ``c``, geometric noise at ``epsilon / UNITS``). Every node's
windows share its ``c`` (all left children of an octave have ``u``; the root its own), and the nodes
holding ``w`` are its plain leaf alone or its ``z`` left ancestors and its octave's root, whose units sum
to exactly ``UNITS`` (:func:`streamdp.release.octaves.window_units`, tested), so all releases together
are ``epsilon``-DP per tree by sequential composition over the nodes of ``w`` and parallel composition
over the disjoint windows of each node set. Which node closes when, and its units, are functions of the
window count alone; the estimate is post-processing. There is no horizon and nothing restarts.

Error: up to ``T = 2^PLAIN_OCTAVES`` the plain window sum; then the carry (the plain windows and one
total per octave) plus at most ``h - z`` nodes, ``O(log^3 T)`` with a smaller constant than the binary
tree's. :func:`streamdp.release.octaves.tree_variance_factor` gives the exact variance for any ``T``.

The service calls, per closed window ``t``: :meth:`TreeState.closing_sums`, ``noisy_node(y, node_epsilon,
...)`` for each (store each SET NX before use: each node's noise is drawn once), :meth:`TreeState.advance`,
:meth:`TreeState.published`; the new state, the published counts and the deletion of the window
accumulator are committed in one atomic step.

>>> s = TreeState.empty(ReleasePolicy("tree"), (1,))
>>> for t in range(1, 258):
...     s = s.advance(None, {n: np.zeros(1) for n in s.closing_sums(None)})
>>> s.t, [n.key for n in closing_nodes(258)]   # window 258 (leaf 0b1011..1) ends its left ancestor (21, 2)
(257, ['s:8:21:2'])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from streamdp import blob
from streamdp.release.octaves import (
    PLAIN_OCTAVES,
    UNITS,
    Node,
    closing_nodes,
    decomposition,
    leaf,
    node_units,
    node_windows,
    octave_shape,
    tree_variance_factor,
    window_octave,
    window_units,
)
from streamdp.release.policy import ReleasePolicy
from streamdp.validation import check_integer

__all__ = [
    "UNITS",
    "PLAIN_OCTAVES",
    "Node",
    "node_units",
    "window_units",
    "closing_nodes",
    "node_windows",
    "tree_variance_factor",
    "TreeState",
]

STATE_FORMAT = "streamdp.tree_state"
#: 1: the fixed-horizon binary tree (L levels, epochs); 2: octaves of full dyadic trees; 3: smooth octaves.
STATE_FORMAT_VERSION = 3


def _layout(t: int) -> tuple[list[int], list[Node]]:
    """What the state holds after ``t`` windows: the levels of the open left children (holding the last
    window, still to close) and the closed nodes the next estimates need (the next leaf's decomposition)."""
    m, i = window_octave(t) if t else (-1, 0)
    if m < 0 or i + 1 == 2**m:
        return [], []
    h, _ = octave_shape(m)
    x, nxt = leaf(m, i), leaf(m, i + 1)
    return [lv for lv in range(h) if not x >> lv & 1 and nxt >> lv == x >> lv], decomposition(m, nxt)


class TreeState:
    """What a ``tree`` model keeps between windows; worker-only (a ``priv:`` key), never published.

    ``t``: windows released so far. ``carry``: the estimate of windows ``1 .. 2^m`` before the current
    octave (noise only). SECRET: ``block``, the exact sum of the current octave's windows so far (its
    root's), and ``sums``, the exact sums of its open left children (levels :func:`_layout`). ``est``: the
    estimates of the closed nodes the next leaf's decomposition needs. Build the first one with
    :meth:`empty`; each step returns a new state (nothing is changed in place).

    Raises ValueError for the policy of a fixed-horizon tree stored by an earlier version.
    """

    def __init__(
        self,
        policy: ReleasePolicy,
        t: int,
        carry: np.ndarray,
        block: np.ndarray,
        sums: np.ndarray,
        est: np.ndarray,
    ):
        _check_policy(policy)
        check_integer(t, "tree state t", low=0)
        opened, needed = _layout(t)
        shape = carry.shape
        if block.shape != shape or sums.shape != (len(opened), *shape) or est.shape != (len(needed), *shape):
            raise ValueError(f"tree state arrays do not hold the {len(opened)} open and {len(needed)} closed levels")
        if block.dtype != np.int64 or sums.dtype != np.int64 or carry.dtype != np.float64 or est.dtype != np.float64:
            raise ValueError("tree state: block and sums must be int64, carry and est float64")
        self.policy, self.t, self.carry, self.block, self.sums, self.est = policy, int(t), carry, block, sums, est

    @classmethod
    def empty(cls, policy: ReleasePolicy, shape: tuple) -> TreeState:
        return cls(
            policy,
            0,
            np.zeros(shape),
            np.zeros(shape, np.int64),
            np.zeros((0, *shape), np.int64),
            np.zeros((0, *shape)),
        )

    @property
    def shape(self) -> tuple:
        return self.carry.shape

    def _open(self) -> dict[int, np.ndarray]:
        return dict(zip(_layout(self.t)[0], self.sums))

    def closing_sums(self, window: np.ndarray | None) -> dict[Node, np.ndarray]:
        """SECRET: what to noise for the nodes released with window ``t + 1``, given its exact tally
        (``None``: no entry arrived): each node's exact sum times its units. Noise each with
        ``noisy_node(y, policy.node_epsilon(epsilon_per_tree), ...)``, store, then :meth:`advance`."""
        x = self._window(window)
        opened = self._open()
        out = {}
        for n in closing_nodes(self.t + 1):
            if n.octave < 0:
                s = x
            elif n.level == octave_shape(n.octave)[0]:
                s = self.block + x
            else:
                s = opened.get(n.level, 0) + x
            out[n] = s * n.units
        return out

    def advance(self, window: np.ndarray | None, noisy: Mapping[Node, np.ndarray]) -> TreeState:
        """The state after window ``t + 1``, from its exact tally and the stored noisy closing nodes."""
        t = self.t + 1
        nodes = closing_nodes(t)
        if set(noisy) != set(nodes):
            raise ValueError(
                f"window {t} releases nodes {sorted(n.key for n in nodes)}, got {sorted(n.key for n in noisy)}"
            )
        own = {n: self._noisy(n, noisy[n]) / n.units for n in nodes}
        x = self._window(window)
        m, i = window_octave(t)
        carry, block = self.carry.copy(), np.zeros(self.shape, np.int64)
        if m < 0:
            carry += own[nodes[0]]
            return TreeState(self.policy, t, carry, block, *self._empty_levels())
        h, _ = octave_shape(m)
        ell = leaf(m, i)
        opened = self._open()
        for lv in range(h):
            if not ell >> lv & 1:
                opened[lv] = opened.get(lv, 0) + x
        est = dict(zip(_layout(self.t)[1], self.est))
        for n in nodes:
            est[n] = own[n]
            opened.pop(n.level, None)
        if i + 1 == 2**m:  # the octave's end: its total, root and decomposition mixed by inverse variance
            tree_nodes = decomposition(m, ell + 1)
            tree = sum((est[n] for n in tree_nodes), np.zeros(self.shape))
            root = Node(m, h, 0)
            w_tree = node_units(tree_nodes[0]) ** 2 / len(tree_nodes)  # 1 / variance, up to the draw's
            w_root = root.units**2
            carry += (w_tree * tree + w_root * est[root]) / (w_tree + w_root)
            return TreeState(self.policy, t, carry, block, *self._empty_levels())
        block = self.block + x
        opened_levels, needed = _layout(t)
        try:
            sums = self._stack([opened[lv] for lv in opened_levels], np.int64)
            kept = self._stack([est[n] for n in needed], np.float64)
        except KeyError as e:
            raise ValueError(f"tree state after window {self.t} lacks node {e}: corrupted state") from None
        return TreeState(self.policy, t, carry, block, sums, kept)

    def estimate(self) -> np.ndarray:
        """Estimated running counts after window ``t`` (float; post-processing of noisy nodes only)."""
        return self.carry + self.est.sum(axis=0)

    def published(self, dtype: Any = np.int64) -> np.ndarray:
        """:meth:`estimate` in the model's counts dtype (integers are rounded: post-processing)."""
        e = self.estimate()
        return np.rint(e).astype(dtype) if np.dtype(dtype).kind in "iu" else e.astype(dtype)

    def _noisy(self, node: Node, y: Any) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64)
        if y.shape != self.shape or not np.all(np.isfinite(y)):
            raise ValueError(f"noisy node {node.key} must be finite, of shape {self.shape}")
        return y

    def _stack(self, arrays: list, dtype: Any) -> np.ndarray:
        out = np.zeros((len(arrays), *self.shape), dtype)
        for j, a in enumerate(arrays):
            out[j] = a
        return out

    def _empty_levels(self) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros((0, *self.shape), np.int64), np.zeros((0, *self.shape))

    def _window(self, window: np.ndarray | None) -> np.ndarray:
        if window is None:
            return np.zeros(self.shape, np.int64)
        window = np.asarray(window)
        if window.shape != self.shape or window.dtype.kind not in "iu":
            raise ValueError(f"window tally must be integers of shape {self.shape}, got {window.dtype} {window.shape}")
        return window.astype(np.int64)

    def to_bytes(self) -> bytes:
        return blob.dumps(
            STATE_FORMAT,
            STATE_FORMAT_VERSION,
            {
                "policy": self.policy.to_dict(),
                "t": self.t,
                "shape": list(self.shape),
                "carry": blob.pack_array(self.carry),
                "block": blob.pack_array(self.block),
                "sums": blob.pack_array(self.sums),
                "est": blob.pack_array(self.est),
            },
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> TreeState:
        """The state of :meth:`to_bytes`; :class:`streamdp.blob.BlobError` for anything else, naming the
        states of earlier layouts (format 1: the fixed-horizon tree; 2: octaves of full dyadic trees)."""
        try:
            doc = blob.loads(data, STATE_FORMAT, STATE_FORMAT_VERSION)
        except blob.BlobError:
            for version, why in _EARLIER.items():
                try:
                    blob.loads(data, STATE_FORMAT, version)
                except blob.BlobError:
                    continue
                raise blob.BlobError(why) from None
            raise
        try:
            policy = ReleasePolicy.from_dict(blob.field(doc, "policy", dict, STATE_FORMAT))
            shape = tuple(int(s) for s in blob.field(doc, "shape", list, STATE_FORMAT))
            t = blob.field(doc, "t", int, STATE_FORMAT)
            carry = blob.unpack_array(doc.get("carry"), "carry", "<f8").reshape(shape)
            block = blob.unpack_array(doc.get("block"), "block", "<i8").reshape(shape)
            sums = blob.unpack_array(doc.get("sums"), "sums", "<i8").reshape(-1, *shape)
            est = blob.unpack_array(doc.get("est"), "est", "<f8").reshape(-1, *shape)
            return cls(policy, t, carry, block, sums, est)
        except blob.BlobError:
            raise
        except ValueError as e:
            raise blob.BlobError(f"{STATE_FORMAT}: {e}") from None


_FIXED_HORIZON = (
    "this model's tree state is the fixed-horizon binary tree of an earlier version (L levels, epochs), which "
    "this version no longer runs: its published versions still load; create a new model to keep releasing"
)
_EARLIER = {
    1: _FIXED_HORIZON,
    2: (
        "this model's tree state is an earlier version's layout (octaves of full dyadic trees), which this "
        "version no longer runs: its published versions still load; create a new model to keep releasing"
    ),
}


def _check_policy(policy: ReleasePolicy) -> None:
    if policy.kind != "tree":
        raise ValueError(f"TreeState is for release='tree', got {policy.kind!r}")
    if policy.fixed_horizon:
        raise ValueError(_FIXED_HORIZON)
