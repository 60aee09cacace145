"""Continual counting with no horizon: a dyadic tree over every window, its epsilon spread by octave.

The stream model publishes running counts ``S(t) = x_1 + ... + x_t`` of per-window exact tallies.
``release="tree"`` releases noisy dyadic nodes and publishes Honaker's estimate of ``S(t)`` from them.
It is the hybrid mechanism of Chan, Shi and Song (2011) with plain windows first:

* Node ``(level l, index j)`` covers windows ``j*2^l + 1 .. (j+1)*2^l`` and closes with its last one.
* *Octave* ``m >= 0`` is windows ``2^m + 1 .. 2^(m+1)`` (window 1 stands alone). A node with ``j >= 1``
  lies inside one octave, ``m = l + floor(log2 j)``; a node with ``j = 0`` (a *prefix* ``1 .. 2^l``) does not.
* Each window has :data:`UNITS` units of epsilon (``epsilon_per_tree / UNITS`` each, the policy's
  ``node_epsilon``). Window 1 and the windows of octaves below :data:`PLAIN_OCTAVES` spend all of them
  on their leaf (the plain window sum while releases are few); a window of a later octave ``m`` spreads
  them evenly over its ``m + 1`` nodes inside the octave (levels ``0..m``, :func:`node_units`). Prefix
  nodes above the leaves are never noised: their estimate is the sum of their children's.
* A node of ``c`` units is released once as ``c * (its exact sum) + Z``, ``Z`` geometric (or Laplace)
  at ``epsilon_per_tree / UNITS``; ``y / c`` estimates its sum with the noise variance of one draw
  over ``c**2`` (the noise of a node at ``c / UNITS`` of the epsilon, integers kept).
* Estimator (Hay, Rastogi, Miklau & Suciu 2010 bottom-up; Honaker 2015): each closed node's estimate
  ``z`` is the inverse-variance mix of its own ``y / c`` and the sum of its children's ``z``;
  ``S(t)`` is the sum of ``z`` over the binary decomposition of ``t`` (every closed node lies inside
  one of those, so this is the least-squares estimate from every released node).

Privacy sketch: one record is in one window ``w`` (the windows partition the stream), hence in one
node per level, and its count changes a node's released ``c * sum`` by ``c`` per tree: that release is
``c * epsilon / UNITS``-DP (sensitivity ``c``, geometric noise at ``epsilon / UNITS``). The nodes holding
``w`` with ``c > 0`` are its octave's levels ``0..m`` (or its leaf alone), whose units sum to exactly
``UNITS`` (:func:`window_units`; tested for every window up to ``2^16`` and a sample up to ``2^60``), so all
releases together are
``epsilon``-DP per tree by sequential composition over the ``O(log T)`` nodes of ``w`` and parallel
composition over the disjoint windows of each level. The estimate is post-processing of noisy nodes;
which nodes close when is a function of the window count alone. There is no horizon: the number of
levels grows with ``log2 t`` and nothing restarts.

Error: after ``T`` windows in octave ``m``, ``S(T)`` carries the estimated totals of the octaves below
(the hybrid's log counter, from the octave trees) plus the decomposition of ``T - 2^m`` in octave
``m``'s tree: ``Var = O(log^3 T)`` (sd ``O(log^1.5 T)``), no ``T``-fold growth and no epochs; up to
``T = 2^PLAIN_OCTAVES`` it is the plain window sum (each window one draw at the whole epsilon, drawn in
units). :func:`streamdp.release.variance.published_variance` gives the exact variance for any ``T``.

The service calls, per closed window ``t``: :meth:`TreeState.closing_sums`, ``noisy_node(y, node_epsilon,
...)`` for each (store each SET NX before use: each node's noise is drawn once), :meth:`TreeState.advance`,
:meth:`TreeState.published`; the new state, the published counts and the deletion of the window
accumulator are committed in one atomic step.

The nodes, their units and variances: :mod:`streamdp.release.octaves`.

>>> s = TreeState.empty(ReleasePolicy("tree"), (1,))
>>> for t in range(1, 258):
...     s = s.advance(None, {n: np.zeros(1) for n in s.closing_sums(None)})
>>> s.t, [n.key for n in closing_nodes(258) if n.units]   # window 258 closes two nodes of octave 8's tree
(257, ['u:0:257', 'u:1:128'])
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
    node_units,
    node_weight,
    node_windows,
    prefix_nodes,
    tree_variance_factor,
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
    "prefix_nodes",
    "node_windows",
    "tree_variance_factor",
    "TreeState",
]

STATE_FORMAT = "streamdp.tree_state"
STATE_FORMAT_VERSION = 2  # 1: the fixed-horizon binary tree (L levels, epochs) of earlier versions


def _levels(t: int) -> int:
    """Levels of state kept after ``t`` windows: every level a node open or closed by then can have."""
    return int(t).bit_length() + 1


class TreeState:
    """What a ``tree`` model keeps between windows; worker-only (a ``priv:`` key), never published.

    ``t``: windows released so far. ``sums[l-1]``: the SECRET exact sum of the open node of level
    ``l >= 1`` over its windows closed so far. ``est[l]``: the estimate ``z`` of the last closed node of
    level ``l`` (noise only). Both grow by a level when ``t`` reaches a power of two. Build the first one
    with :meth:`empty`; each step returns a new state (nothing is changed in place).

    Raises ValueError for the policy of a fixed-horizon tree stored by an earlier version.
    """

    def __init__(self, policy: ReleasePolicy, t: int, sums: np.ndarray, est: np.ndarray):
        _check_policy(policy)
        check_integer(t, "tree state t", low=0)
        n = _levels(t)
        if sums.ndim < 1 or sums.shape[0] != n - 1 or est.shape != (n, *sums.shape[1:]):
            raise ValueError(f"tree state arrays do not hold {n} levels after {t} windows")
        if sums.dtype != np.int64 or est.dtype != np.float64:
            raise ValueError("tree state: sums must be int64, est float64")
        self.policy, self.t, self.sums, self.est = policy, int(t), sums, est

    @classmethod
    def empty(cls, policy: ReleasePolicy, shape: tuple) -> TreeState:
        return cls(policy, 0, np.zeros((0, *shape), np.int64), np.zeros((1, *shape)))

    @property
    def shape(self) -> tuple:
        return self.est.shape[1:]

    def closing_sums(self, window: np.ndarray | None) -> dict[Node, np.ndarray]:
        """SECRET: what to noise for the nodes released with window ``t + 1``, given its exact tally
        (``None``: no entry arrived): each node's exact sum times its units. Noise each with
        ``noisy_node(y, policy.node_epsilon(epsilon_per_tree), ...)``, store, then :meth:`advance`."""
        x = self._window(window)
        out = {}
        for n in closing_nodes(self.t + 1):
            if n.units:
                out[n] = (x if n.level == 0 else self.sums[n.level - 1] + x) * n.units
        return out

    def advance(self, window: np.ndarray | None, noisy: Mapping[Node, np.ndarray]) -> TreeState:
        """The state after window ``t + 1``, from its exact tally and the stored noisy closing nodes."""
        t = self.t + 1
        nodes = closing_nodes(t)
        released = {n for n in nodes if n.units}
        if set(noisy) != released:
            raise ValueError(
                f"window {t} releases nodes {sorted(n.key for n in released)}, got {sorted(n.key for n in noisy)}"
            )
        x = self._window(window)
        n_lev = _levels(t)
        sums = np.zeros((n_lev - 1, *self.shape), np.int64)
        sums[: len(self.sums)] = self.sums
        sums += x
        est = np.zeros((n_lev, *self.shape))
        est[: len(self.est)] = self.est
        for n in nodes:
            if n.level == 0:
                z = None
            else:  # the children: left closed earlier (self.est), right closed just now (est)
                z = self.est[n.level - 1] + est[n.level - 1]
            if n.units:
                y = np.asarray(noisy[n], dtype=np.float64)
                if y.shape != self.shape or not np.all(np.isfinite(y)):
                    raise ValueError(f"noisy node {n.key} must be finite, of shape {self.shape}")
                w = node_weight(n)
                own = y / n.units
                z = own if z is None else w * own + (1 - w) * z
            est[n.level] = z
            if n.level:
                sums[n.level - 1] = 0
        return TreeState(self.policy, t, sums, est)

    def estimate(self) -> np.ndarray:
        """Estimated running counts after window ``t`` (float; post-processing of noisy nodes only)."""
        if self.t == 0:
            return np.zeros(self.shape)
        return self.est[[n.level for n in prefix_nodes(self.t)]].sum(axis=0)

    def published(self, dtype: Any = np.int64) -> np.ndarray:
        """:meth:`estimate` in the model's counts dtype (integers are rounded: post-processing)."""
        e = self.estimate()
        return np.rint(e).astype(dtype) if np.dtype(dtype).kind in "iu" else e.astype(dtype)

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
                "sums": blob.pack_array(self.sums),
                "est": blob.pack_array(self.est),
            },
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> TreeState:
        """The state of :meth:`to_bytes`; :class:`streamdp.blob.BlobError` for anything else, naming the
        fixed-horizon tree's state of earlier versions (format 1) as such."""
        try:
            doc = blob.loads(data, STATE_FORMAT, STATE_FORMAT_VERSION)
        except blob.BlobError:
            try:
                blob.loads(data, STATE_FORMAT, 1)
            except blob.BlobError:
                raise
            raise blob.BlobError(_FIXED_HORIZON) from None
        try:
            policy = ReleasePolicy.from_dict(blob.field(doc, "policy", dict, STATE_FORMAT))
            shape = tuple(int(s) for s in blob.field(doc, "shape", list, STATE_FORMAT))
            t = blob.field(doc, "t", int, STATE_FORMAT)
            sums = blob.unpack_array(doc.get("sums"), "sums", "<i8").reshape(-1, *shape)
            est = blob.unpack_array(doc.get("est"), "est", "<f8").reshape(-1, *shape)
            return cls(policy, t, sums, est)
        except blob.BlobError:
            raise
        except ValueError as e:
            raise blob.BlobError(f"{STATE_FORMAT}: {e}") from None


_FIXED_HORIZON = (
    "this model's tree state is the fixed-horizon binary tree of an earlier version (L levels, epochs), which "
    "this version no longer runs: its published versions still load; create a new model to keep releasing"
)


def _check_policy(policy: ReleasePolicy) -> None:
    if policy.kind != "tree":
        raise ValueError(f"TreeState is for release='tree', got {policy.kind!r}")
    if policy.fixed_horizon:
        raise ValueError(_FIXED_HORIZON)
