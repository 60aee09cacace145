"""Release policies and continual counting: when the stream model is noised and published.

A stream model publishes running counts ``S(t) = x_1 + ... + x_t`` of per-window
exact tallies ``x_w`` (each one the forest's counts shape). Four policies:

* ``batch``: Jagannathan et al.'s update: every pushed batch is noised once and
  merged. Noise grows with the number of batches producers happen to send.
* ``window``: workers add each entry's exact tally into a secret accumulator of the
  open window; on the public schedule (``release_every`` seconds) the window is
  closed, noised once with the full per-tree epsilon and merged, even when empty.
  ``Var S(t) = t * s^2``: sd ~ sqrt(2t)/eps.
* ``grow``: ``window``'s schedule and accumulator on trees that start from their
  roots and deepen as the records released so far allow, never past the drawn
  height (:mod:`streamdp.forest.growth`: each window is one release at the whole per-tree
  epsilon, cut by released numbers only); the published structure changes with it.
* ``tree``: the binary tree mechanism (Dwork, Naor, Pitassi & Rothblum 2010; Chan,
  Shi & Song 2011) over the same windows. Node ``(level l, index j)`` holds windows
  ``j*2^l + 1 .. (j+1)*2^l`` and is noised once when its last window closes, with
  ``epsilon_per_tree / L`` (``L = levels``). ``S(t)`` is read from the nodes of the
  binary decomposition of ``t``: sd ~ sqrt(popcount(t) * 2) * L / eps, polylog in t.

Privacy sketch (tree): one record is in one window, hence in at most one node per
level of its epoch (parallel composition within a level, disjoint windows), and
in ``L`` noised nodes in all; each node's tally has L1 sensitivity 1 per tree and
gets noise of ``epsilon/L``, so all releases together are ``epsilon``-DP per tree
(sequential composition over the levels). Every published number is computed from
the noisy nodes only (post-processing). The schedule (which node closes when, the
number of releases) depends on the clock alone, never on the data. ``window`` is
the case ``L = 1``. Past ``T_max = 2**L - 1`` windows a new *epoch* starts: a fresh
tree over the next ``T_max`` windows whose records are disjoint from the earlier
epochs' (so no extra epsilon and no ledger charge); the finished epoch's estimated
total is carried, so the variance grows by one full epoch's ``Var S(T_max)`` per
epoch (documented trade-off; choose ``levels`` for the expected horizon).

Estimators (tree): ``"decomposition"`` sums the noisy nodes of the binary
decomposition of ``t``; ``"honaker"`` (the default) replaces each decomposition
node by the least-squares estimate of its total from its whole closed subtree
(Hay, Rastogi, Miklau & Suciu 2010 bottom-up step; Honaker 2015), which is the
minimum-variance unbiased estimate of ``S(t)`` from every closed node: a node at
level ``l`` then has variance ``s^2 * 2^l / (2^(l+1) - 1)`` instead of ``s^2`` (up
to half), at the same storage (one estimate per level) and no extra epsilon.

The service stores bytes and calls, per closed window ``t`` (from :func:`windows_due`):
``window``: :func:`window_delta` (store it SET NX before merging) then merge;
``grow``: :meth:`streamdp.PrivateForest.grow_exact` on the published forest (store the whole
grown release SET NX before publishing it);
``tree``: :meth:`TreeState.closing_sums`, :func:`noisy_node` for each (store each
SET NX before use: each node's noise is drawn once), :meth:`TreeState.advance`,
:meth:`TreeState.published`; the new state, the published counts and the deletion
of the window accumulator are committed in one atomic step. :class:`Counter` does
exactly that in memory (the reference the service mirrors).

>>> policy = ReleasePolicy("tree", levels=3)
>>> policy.max_windows, policy.node_epsilon(1.5)
(7, 0.5)
>>> closing_nodes(4, levels=3)
[Node(epoch=0, level=0, index=3), Node(epoch=0, level=1, index=1), Node(epoch=0, level=2, index=0)]
>>> prefix_nodes(6, levels=3)
[Node(epoch=0, level=2, index=0), Node(epoch=0, level=1, index=2)]
>>> c = Counter(policy, shape=(2,), epsilon=math.inf, rng=SecureRandom())
>>> for w in range(1, 6):
...     c.add(np.array([w, 1]))
...     published = c.close()
>>> published.tolist()   # no noise at epsilon=inf: the exact running sum
[15, 5]
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from streamdp import blob
from streamdp.estimation import cell_variance
from streamdp.options import PRUNE_PROBE, RELEASES
from streamdp.privacy.mechanisms import SecureRandom, geometric_noise, laplace_noise
from streamdp.validation import Interval, check_epsilon, check_integer

__all__ = [
    "RELEASES",
    "ReleasePolicy",
    "Node",
    "window_index",
    "window_end",
    "windows_due",
    "closing_nodes",
    "prefix_nodes",
    "node_windows",
    "windows_closed",
    "published_variance",
    "class_total_sd",
    "noisy_node",
    "window_delta",
    "TreeState",
    "Counter",
]

ESTIMATORS = ("honaker", "decomposition")
#: The shortest window (seconds) a new model may have: each release writes the model's counts and adds a noise
#: draw to every count, so shorter windows only add noise (a new user's 1 ms windows: 20,008 versions in 20 s,
#: below the majority). Models stored before the rule still load (a review).
MIN_RELEASE_EVERY = 0.01
DEFAULT_LEVELS = 20  # T_max = 2**20 - 1 windows: 12.1 days at one window per second
MAX_LEVELS = 48
STATE_FORMAT = "streamdp.tree_state"
STATE_FORMAT_VERSION = 1


# -- the policy -------------------------------------------------------------------


@dataclass(frozen=True)
class ReleasePolicy:
    """How a stream model is released: ``kind`` in :data:`RELEASES`.

    ``release_every`` (seconds, ``window``, ``grow`` and ``tree``) is the public schedule;
    ``levels`` (``tree``) fixes ``L`` and ``T_max = 2**L - 1`` windows per epoch;
    ``estimator`` (``tree``) is ``"honaker"`` or ``"decomposition"``.

    >>> ReleasePolicy.from_dict(ReleasePolicy("tree", 2.0, levels=10).to_dict())
    ReleasePolicy(kind='tree', release_every=2.0, levels=10, estimator='honaker')
    >>> print(ReleasePolicy("tree", levels=10))
    tree: every 1 s, L=10 levels (T_max=1023 windows per epoch), honaker estimator
    """

    kind: str = "window"
    release_every: float = 1.0
    levels: int = DEFAULT_LEVELS
    estimator: str = "honaker"

    def __post_init__(self) -> None:
        if self.kind not in RELEASES:
            raise ValueError(f"release must be one of {RELEASES}, got {self.kind!r}")
        # (the minimum, MIN_RELEASE_EVERY, is a rule for new models: registry.create_model; a stored policy loads)
        object.__setattr__(
            self,
            "release_every",
            Interval(float, 0, math.inf, closed="neither").check(self.release_every, "release_every"),
        )
        object.__setattr__(self, "levels", check_integer(self.levels, "levels", high=MAX_LEVELS))
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"estimator must be one of {ESTIMATORS}, got {self.estimator!r}")

    @property
    def max_windows(self) -> int:
        """Windows per epoch of the tree (``2**levels - 1``); 1 for ``window`` (every window stands alone)."""
        return 2**self.levels - 1 if self.kind == "tree" else 1

    def node_epsilon(self, epsilon_per_tree: float) -> float:
        """The one rule from the model's per-tree epsilon to the epsilon of one release (node).

        ``tree``: a window is in ``levels`` noised nodes, so each gets ``epsilon/levels``;
        ``batch`` and ``window``: a record is in one release, which gets all of it.
        """
        check_epsilon(epsilon_per_tree, "epsilon_per_tree", allow_inf=True)
        return epsilon_per_tree / self.levels if self.kind == "tree" else float(epsilon_per_tree)

    def check_drawable(self, epsilon_per_tree: float, mechanism: str) -> None:
        """Refuse a per-tree epsilon whose smallest release (a node; a grown release's probe, ``PRUNE_PROBE`` of it)
        has noise the samplers cannot draw (a model so created was charged, then every release failed: a red
        team's finding). Draws one cell of noise on nothing: no data is read.

        >>> ReleasePolicy("window").check_drawable(1e-300, "geometric")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: its smallest release would be noised at epsilon 1e-300 per tree and node (...)
        """

        if math.isinf(epsilon_per_tree) or mechanism == "kanon":
            return
        smallest = self.node_epsilon(epsilon_per_tree) * (PRUNE_PROBE if self.kind == "grow" else 1.0)
        try:
            noisy_node(np.zeros((1, 1, 1), dtype=np.int64), smallest, mechanism, SecureRandom())
        except (ValueError, OverflowError, ZeroDivisionError, FloatingPointError) as e:
            raise ValueError(
                f"its smallest release would be noised at epsilon {smallest:g} per tree and node ({e})"
            ) from None

    def check_mechanism(self, mechanism: str) -> None:
        """Refuse a mechanism this policy has no privacy analysis for."""
        if self.kind in ("tree", "grow") and mechanism not in ("geometric", "laplace"):
            raise ValueError(f"release={self.kind!r} needs mechanism 'geometric' or 'laplace', got {mechanism!r}")

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "release_every": self.release_every,
            "levels": self.levels,
            "estimator": self.estimator,
        }

    @classmethod
    def from_dict(cls, d: Any) -> ReleasePolicy:
        if not isinstance(d, dict) or set(d) != {"kind", "release_every", "levels", "estimator"}:
            got = sorted(d) if isinstance(d, dict) else type(d).__name__
            raise ValueError(f"a release policy is a map of kind, release_every, levels, estimator; got {got}")
        return cls(**d)

    def __str__(self) -> str:
        if self.kind == "batch":
            return "batch: each pushed batch noised once (Jagannathan et al.)"
        if self.kind == "window":
            return f"window: every {self.release_every:g} s"
        if self.kind == "grow":
            return f"grow: every {self.release_every:g} s, trees deepened as the released counts allow"
        return (
            f"tree: every {self.release_every:g} s, L={self.levels} levels "
            f"(T_max={self.max_windows} windows per epoch), {self.estimator} estimator"
        )


# -- the public schedule ------------------------------------------------------------


def window_index(t: float, start: float, release_every: float) -> int:
    """The 1-based window holding wall-clock time ``t``: window ``w`` is ``[start + (w-1)*every, start + w*every)``.

    >>> window_index(10.0, 10.0, 1.0), window_index(12.5, 10.0, 1.0)
    (1, 3)
    """
    if t < start:
        raise ValueError(f"time {t} is before the schedule's start {start}")
    return math.floor((t - start) / release_every) + 1


def window_end(w: int, start: float, release_every: float) -> float:
    """Wall-clock time at which window ``w`` closes (and is released)."""
    return start + w * release_every


def windows_due(now: float, start: float, release_every: float, released: int) -> range:
    """Windows closed by ``now`` and not yet released, in order: every one must be released, empty or not.

    A function of the clock only, so the number of releases reveals nothing about the data.

    >>> list(windows_due(13.2, 10.0, 1.0, released=1))
    [2, 3]
    """
    return range(released + 1, windows_closed(now, start, release_every) + 1)


def windows_closed(now: float, start: float, release_every: float) -> int:
    """How many windows have closed by ``now`` (public: the clock only).

    >>> windows_closed(13.2, 10.0, 1.0), windows_closed(9.0, 10.0, 1.0)
    (3, 0)
    """
    return max(0, math.floor((now - start) / release_every))


class Node(NamedTuple):
    """Dyadic node of an epoch's tree: windows ``index*2**level + 1 .. (index+1)*2**level`` of that epoch."""

    epoch: int
    level: int
    index: int

    @property
    def key(self) -> str:
        """A stable name for storage (``"epoch:level:index"``)."""
        return f"{self.epoch}:{self.level}:{self.index}"


def _epoch_local(t: int, levels: int) -> tuple[int, int]:
    check_integer(t, "window index")
    tmax = 2**levels - 1
    return (int(t) - 1) // tmax, (int(t) - 1) % tmax + 1


def closing_nodes(t: int, levels: int) -> list[Node]:
    """Nodes whose last window is ``t`` (global index), lowest level first: levels ``0..v2(u)`` of local ``u``."""
    epoch, u = _epoch_local(t, levels)
    out = []
    for lv in range(levels):
        if u % (1 << lv):
            break
        out.append(Node(epoch, lv, (u >> lv) - 1))
    return out


def prefix_nodes(t: int, levels: int) -> list[Node]:
    """The binary decomposition of local ``u``: the maximal closed nodes, covering windows 1..u of the epoch once.

    Earlier epochs enter the published counts through their carried totals.
    """
    epoch, u = _epoch_local(t, levels)
    return [Node(epoch, lv, (u >> lv) - 1) for lv in reversed(range(levels)) if u >> lv & 1]


def node_windows(node: Node, levels: int) -> range:
    """Global window indices a node covers."""
    base = node.epoch * (2**levels - 1)
    return range(base + node.index * 2**node.level + 1, base + (node.index + 1) * 2**node.level + 1)


# -- variance (public: depends on epsilon, mechanism and the schedule only) -------------


def _honaker_factor(level: int) -> float:
    """Var of the subtree least-squares estimate of a level-``level`` node, in units of one node's variance."""
    return 2**level / (2 ** (level + 1) - 1)


def published_variance(policy: ReleasePolicy, t: int, variance: float) -> float:
    """Variance of one published cell after ``t`` releases (windows; batches for ``batch``).

    ``variance`` is :func:`streamdp.estimation.cell_variance` at ``policy.node_epsilon(...)``. Rounding of the
    Honaker estimate to integers (geometric) adds at most 1/12 and is not included.
    """
    if policy.kind != "tree":
        return t * variance
    epoch, u = _epoch_local(t, policy.levels)

    def one(u: int) -> float:
        if policy.estimator == "decomposition":
            return bin(u).count("1") * variance
        return sum(_honaker_factor(lv) for lv in range(policy.levels) if u >> lv & 1) * variance

    return epoch * one(policy.max_windows) + one(u)


def class_total_sd(
    policy: ReleasePolicy, releases: int, epsilon: float, mechanism: str, budget: str, n_trees: int, prior_trees: int
) -> float | None:
    """Standard deviation of the noise on a stream model's estimate of one class's record count, from its
    prior stumps (public: the model's parameters and its release count; None for k-anonymity or without a stump).

    What the vote's prior rests on (:func:`streamdp.estimation.forest_prior`; the random trees' roots add
    little, each about its number of leaves times noisier, so this is an upper bound). The model can tell
    its majority class only once that class leads the next by several times ``sqrt(2)`` times this (at 3x
    it names the wrong one in about 0.1% of models); below, no estimate can keep the majority
    class's accuracy, the floor of issue 13 (``benchmarks/studies/stream_floor_identifiable.py``). Under the
    disjoint budget a stump counts ``1 / (n_trees + prior_trees)`` of the records, so its counts are scaled up
    (sampling error not included).

    >>> round(class_total_sd(ReleasePolicy("window"), 47, 1.0, "geometric", "split", 10, 1), 1)  # Votes, 47 windows
    106.6
    """
    if mechanism == "kanon" or prior_trees < 1:
        return None
    if math.isinf(epsilon) or releases < 1:
        return 0.0
    trees = n_trees + prior_trees
    per_tree = epsilon / trees if budget == "split" else epsilon
    v = published_variance(policy, releases, cell_variance(mechanism, policy.node_epsilon(per_tree))) / prior_trees
    return math.sqrt(v) * (trees if budget == "disjoint" else 1.0)


# -- releases -------------------------------------------------------------------------


#: The noise layout "blocks": cells (flat, C order) ``[b * NOISE_BLOCK, (b + 1) * NOISE_BLOCK)`` of a
#: release draw their noise from the next child of the release's generator (:meth:`SecureRandom.spawn`;
#: child ``b`` when the generator draws one release). Part of every keyed release's definition:
#: changing it changes every redraw (never change it; ``test_the_block_layout_is_pinned``).
NOISE_BLOCK = 1 << 16
#: The layout "stream" (keyed models created before "blocks"): one stream, chunks of this many cells.
STREAM_CHUNK = 1 << 20


def noisy_node(
    exact: np.ndarray,
    epsilon: float,
    mechanism: str,
    rng: SecureRandom,
    real: np.ndarray | None = None,
    k: int | None = None,
    in_place: bool = False,
) -> np.ndarray:
    """The one private release of a node's (or window's) exact integer counts.

    ``epsilon`` is ``policy.node_epsilon(epsilon_per_tree)``; geometric noise keeps
    integers, Laplace gives floats; ``real`` (boolean, the counts' shape) marks the
    cells that exist: the others stay exactly 0. ``mechanism="kanon"`` (``window`` and
    ``batch`` only) zeroes cells below ``k`` of a beta-sampled tally instead. The
    caller must store the result (SET NX) before using it, and reuse the stored one
    on a retry: each node's noise is drawn once. ``in_place``: the noise is added into
    ``exact`` itself where its dtype is the result's and it is C-contiguous (a fresh
    tally the caller drops: no second counts-sized array); use the returned array.

    Layout (``rng.layout``): "blocks" draws each block of :data:`NOISE_BLOCK` cells
    from its own child of ``rng``, the real cells only, in C order: a keyed release is
    a function of the key, the context, the block's real cells and the generator's
    earlier spawns, the same draw whatever chunking a version of this code uses, and
    the sampler's temporaries are a block's (a few MiB), not the counts'. "stream" is
    the layout of keyed models created before it (one stream in chunks of
    :data:`STREAM_CHUNK`), kept byte for byte so their redraws after a rollback stay the
    same draw (except for input that is not C-contiguous, which that code left without
    noise beyond one chunk: now noised).

    >>> rng = SecureRandom.from_key(b"k" * 32, b"doc")
    >>> a = noisy_node(np.zeros(3 * NOISE_BLOCK, np.int64), 1.0, "geometric", rng)
    >>> b = noisy_node(np.zeros(NOISE_BLOCK, np.int64), 1.0, "geometric", SecureRandom.from_key(b"k" * 32, b"doc"))
    >>> bool((a[:NOISE_BLOCK] == b).all())  # a block's noise does not depend on the blocks after it
    True
    """
    exact = np.asarray(exact)
    if exact.dtype.kind not in "iu":
        raise ValueError(f"exact counts must be integers, got dtype {exact.dtype}")
    if real is not None and np.shape(real) != exact.shape:
        raise ValueError(f"real mask of shape {np.shape(real)} does not match counts of shape {exact.shape}")
    if mechanism == "kanon":
        if k is None:
            raise ValueError("mechanism='kanon' needs the threshold k")
        out = exact.astype(np.int64)
        out[out < k] = 0
        return out
    if mechanism not in ("geometric", "laplace"):
        raise ValueError(f"mechanism must be 'geometric', 'laplace' or 'kanon', got {mechanism!r}")
    out = exact.astype(np.int64 if mechanism == "geometric" else np.float64, copy=not in_place)
    if not out.flags.c_contiguous:  # the cells are noised through a flat view
        out = np.ascontiguousarray(out)
    draw = geometric_noise if mechanism == "geometric" else laplace_noise
    stream = rng.layout == "stream"
    if stream and out.size <= STREAM_CHUNK:
        if real is None:
            out += draw(exact.shape, epsilon, rng)
        else:
            mask = np.asarray(real, dtype=bool)
            out[mask] += draw(int(mask.sum()), epsilon, rng)
        return out
    flat = out.reshape(-1)
    mask = None if real is None else np.asarray(real, dtype=bool).reshape(-1)
    step = STREAM_CHUNK if stream else NOISE_BLOCK
    for s in range(0, flat.size, step):
        seg = flat[s : s + step]
        src = rng if stream else rng.spawn()
        if mask is None:
            seg += draw(seg.size, epsilon, src)
        else:
            m = mask[s : s + step]
            seg[m] += draw(int(m.sum()), epsilon, src)
    return out


def window_delta(
    exact: np.ndarray | None,
    shape: tuple,
    epsilon: float,
    mechanism: str,
    rng: SecureRandom,
    real: np.ndarray | None = None,
    k: int | None = None,
    in_place: bool = False,
) -> np.ndarray:
    """``release="window"``: the noisy delta to merge for one closed window.

    ``exact`` is the window's secret accumulator, or ``None`` when no entry arrived: an
    empty window is released too (pure noise), so the releases do not depend on the data.
    Store the delta (SET NX) before merging; delete the accumulator in the merge step.
    ``in_place``: as :func:`noisy_node`'s (the caller's accumulator becomes the delta).

    >>> d = window_delta(None, (2, 3), math.inf, "geometric", SecureRandom())
    >>> d.tolist()
    [[0, 0, 0], [0, 0, 0]]
    """
    if exact is None:
        exact = np.zeros(shape, dtype=np.int64)
    elif np.shape(exact) != tuple(shape):
        raise ValueError(f"window accumulator of shape {np.shape(exact)} where {tuple(shape)} was expected")
    return noisy_node(exact, epsilon, mechanism, rng, real, k, in_place)


# -- the tree mechanism's state ---------------------------------------------------------


class TreeState:
    """What a ``tree`` model keeps between windows; worker-only (a ``priv:`` key), never published.

    ``t``: windows released so far. ``sums[l-1]``: the SECRET exact sum of the open node of
    level ``l >= 1`` over its windows closed so far. ``est[l]``: the estimate (noisy node,
    or its Honaker subtree estimate) of the last closed node of level ``l``; derived from
    noise only. ``carry``: the estimated total of the finished epochs. Build the first one
    with :meth:`empty`; each step returns a new state (nothing is changed in place).
    """

    def __init__(self, policy: ReleasePolicy, t: int, sums: np.ndarray, est: np.ndarray, carry: np.ndarray):
        if policy.kind != "tree":
            raise ValueError(f"TreeState is for release='tree', got {policy.kind!r}")
        L = policy.levels
        shape = carry.shape
        if sums.shape != (L - 1, *shape) or est.shape != (L, *shape):
            raise ValueError(f"tree state arrays do not match {L} levels and counts shape {shape}")
        if sums.dtype != np.int64 or est.dtype != np.float64 or carry.dtype != np.float64:
            raise ValueError("tree state: sums must be int64, est and carry float64")
        check_integer(t, "tree state t", low=0)
        self.policy, self.t, self.sums, self.est, self.carry = policy, int(t), sums, est, carry

    @classmethod
    def empty(cls, policy: ReleasePolicy, shape: tuple) -> TreeState:
        L = policy.levels
        return cls(policy, 0, np.zeros((L - 1, *shape), np.int64), np.zeros((L, *shape)), np.zeros(shape))

    @property
    def shape(self) -> tuple:
        return self.carry.shape

    def closing_sums(self, window: np.ndarray | None) -> dict[Node, np.ndarray]:
        """SECRET exact sums of the nodes that close with window ``t + 1``, given its exact tally
        (``None``: no entry arrived). Noise each with :func:`noisy_node`, store, then :meth:`advance`."""
        x = self._window(window)
        return {
            n: x if n.level == 0 else self.sums[n.level - 1] + x for n in closing_nodes(self.t + 1, self.policy.levels)
        }

    def advance(self, window: np.ndarray | None, noisy: Mapping[Node, np.ndarray]) -> TreeState:
        """The state after window ``t + 1``, from its exact tally and the stored noisy closing nodes."""
        t = self.t + 1
        L = self.policy.levels
        nodes = closing_nodes(t, L)
        if set(noisy) != set(nodes):
            raise ValueError(f"window {t} closes nodes {[n.key for n in nodes]}, got {sorted(n.key for n in noisy)}")
        x = self._window(window)
        sums = self.sums + x
        est = self.est.copy()
        for n in nodes:
            y = np.asarray(noisy[n], dtype=np.float64)
            if y.shape != self.shape or not np.all(np.isfinite(y)):
                raise ValueError(f"noisy node {n.key} must be finite, of shape {self.shape}")
            if n.level == 0 or self.policy.estimator == "decomposition":
                est[n.level] = y
            else:
                # Hay et al.'s bottom-up step: inverse-variance mix of the node and its two children's
                # estimates (left child closed earlier: self.est; right child closed just now: est).
                w = _honaker_factor(n.level)
                est[n.level] = w * y + (1 - w) * (self.est[n.level - 1] + est[n.level - 1])
            if n.level:
                sums[n.level - 1] = 0
        carry = self.carry
        epoch, u = _epoch_local(t, L)
        if u == self.policy.max_windows:  # epoch over: carry its total, forget its secret and noisy state
            carry = carry + est.sum(axis=0)
            sums = np.zeros_like(sums)
            est = np.zeros_like(est)
        return TreeState(self.policy, t, sums, est, carry)

    def estimate(self) -> np.ndarray:
        """Estimated running counts after window ``t`` (float; post-processing of noisy nodes only)."""
        if self.t == 0:
            return np.zeros(self.shape)
        _, u = _epoch_local(self.t, self.policy.levels)
        if u == self.policy.max_windows:
            return self.carry.copy()
        bits = [lv for lv in range(self.policy.levels) if u >> lv & 1]
        return self.carry + self.est[bits].sum(axis=0)

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
                "sums": blob.pack_array(self.sums),
                "est": blob.pack_array(self.est),
                "carry": blob.pack_array(self.carry),
            },
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> TreeState:
        doc = blob.loads(data, STATE_FORMAT, STATE_FORMAT_VERSION)
        try:
            policy = ReleasePolicy.from_dict(blob.field(doc, "policy", dict, STATE_FORMAT))
            return cls(
                policy,
                blob.field(doc, "t", int, STATE_FORMAT),
                blob.unpack_array(doc.get("sums"), "sums", "<i8"),
                blob.unpack_array(doc.get("est"), "est", "<f8"),
                blob.unpack_array(doc.get("carry"), "carry", "<f8"),
            )
        except blob.BlobError:
            raise
        except ValueError as e:
            raise blob.BlobError(f"{STATE_FORMAT}: {e}") from None


# -- the in-memory reference ------------------------------------------------------------


class Counter:
    """Continual release of running counts in memory: the steps the service performs, in order.

    ``add`` puts an exact tally into the open window (``batch``: noises and merges it at
    once); ``close`` releases the open window; ``tick(now)`` closes every window due by
    ``now`` on the public schedule starting at ``start``. ``published`` is what consumers see.
    """

    def __init__(
        self,
        policy: ReleasePolicy,
        shape: tuple,
        epsilon: float,
        rng: SecureRandom,
        mechanism: str = "geometric",
        real: np.ndarray | None = None,
        start: float = 0.0,
        k: int | None = None,
    ):
        policy.check_mechanism(mechanism)
        self.policy, self.shape, self.rng, self.mechanism, self.real, self.start = (
            policy,
            tuple(shape),
            rng,
            mechanism,
            real,
            start,
        )
        self.k = k
        self.epsilon_node = policy.node_epsilon(epsilon)
        dtype = np.float64 if mechanism == "laplace" else np.int64
        self.published = np.zeros(self.shape, dtype)
        self.releases = 0
        self.window: np.ndarray | None = None  # SECRET: the open window's exact tally
        self.state = TreeState.empty(policy, self.shape) if policy.kind == "tree" else None

    def add(self, tally: np.ndarray, now: float | None = None) -> None:
        if now is not None:
            self.tick(now)
        tally = np.asarray(tally, dtype=np.int64)
        if self.policy.kind == "batch":
            self.published = self.published + noisy_node(
                tally, self.epsilon_node, self.mechanism, self.rng, self.real, self.k
            )
            self.releases += 1
        else:
            self.window = tally if self.window is None else self.window + tally

    def tick(self, now: float) -> None:
        if self.policy.kind != "batch":
            for _ in windows_due(now, self.start, self.policy.release_every, self.releases):
                self.close()

    def close(self) -> np.ndarray:
        if self.policy.kind == "window":
            delta = window_delta(
                self.window, self.shape, self.epsilon_node, self.mechanism, self.rng, self.real, self.k
            )
            self.published = self.published + delta
        elif self.policy.kind == "tree":
            exact = self.state.closing_sums(self.window)
            noisy = {n: noisy_node(x, self.epsilon_node, self.mechanism, self.rng, self.real) for n, x in exact.items()}
            self.state = self.state.advance(self.window, noisy)
            self.published = self.state.published(self.published.dtype)
        else:
            raise ValueError("release='batch' has no windows to close")
        self.window = None
        self.releases += 1
        return self.published
