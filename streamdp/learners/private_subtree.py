"""The subtree exponential mechanism of Bai et al. (DPEA), run INSIDE the private data layer.

This module sees raw (encoded) records; learners never import it. The data
layer (:mod:`streamdp.learners.private_data`) exposes it as one charged query
(``PrivateDataset.subtree_mechanism``); the
learner :class:`streamdp.learners.DPEA` only ever receives the returned
structure: attribute numbers, no counts, no rows.

The mechanism
-------------
A *step* grows a node by up to ``levels`` split levels at once. The candidate
set is every subtree rooted at the node where

* an inner node splits on one attribute into one child per declared value,
* no attribute repeats along a root-to-leaf path (the node's ancestors
  outside the subtree count too),
* a node is split iff its local depth is below ``levels``, its global depth is
  below ``max_depth``, an attribute is left, and its *nominal share*
  ``n_hat / prod(arities on the path from the step root)`` is at least
  ``min_instances``. ``n_hat`` is a *released noisy* count of the step root,
  so the candidate set depends on the data only through already-released
  values (it is public to the mechanism). The step root itself is always split.

Output ``st`` is drawn with probability ``mu(st) * exp(eps * q'(st) / (2 * 2))``
where ``q'`` is eq. 2 of Bai et al. (minus the weighted Gini of the subtree's
leaves, ``-sum_l (n_l - sum_c n_{l,c}^2 / n_l)``, sensitivity 2) and ``mu`` is
the *branching* base measure: each inner node's attribute uniform among the
attributes allowed there (``mu`` is data independent, so this is an
exponential mechanism with a base measure, epsilon-DP as usual). ``mu`` is
also the law of "a random subtree" that Bai's MCMC starts from; the uniform
measure over distinct subtrees would instead favour high-arity attributes by
factors like ``20**11`` (more completions), which no one wants.

Samplers
--------
* :func:`exact_subtree` (used for ``levels <= 2``): exact sampling by the
  factorisation ``Z(node) = 1/m * sum_a prod_children Z(child)`` (q' is a sum
  over leaves and mu a product over nodes), then top-down draws. It is the
  exhaustive enumeration of Bai's Algorithm 2 without listing the (up to
  ``21**12``) trees; its distribution is the exact mechanism.
* :func:`mcmc_subtree` (``levels > 2``, Bai's Algorithm 3): Metropolis–Hastings.
  Proposal: pick an inner node ``u`` uniformly among the inner nodes with at
  least two allowed attributes, pick a new attribute uniformly among the
  others allowed at ``u``, redraw everything below ``u`` from ``mu``. Accept
  with ``min(1, exp(eps (q'(st') - q'(st)) / 4) * I(st) / I(st'))``; the factor
  ``I(st)/I(st')`` (numbers of eligible inner nodes) is the Hastings
  correction that the paper's rule omits; without it the chain does not
  target the mechanism when the tree shape changes. The chain stops when the
  variance of the last ``buffer_size`` scores is below ``variance_threshold``
  or after ``step_limit`` steps. As in the paper (and Xiao et al.), a chain
  run for finitely many steps only approximates the mechanism: its privacy is
  that of the exponential mechanism only to the extent the chain has mixed.
  The stopping rule depends on the data through the score trace; the trace is
  returned to the (trusted) caller for diagnostics only and must not be
  published.

Scoring is numpy: a leaf score is one ``bincount`` of the leaf's class codes;
the exact sampler scores all attributes of a node with one ``bincount`` over
``(attribute, value, class)`` cells; the chain caches each node's subtree
score and re-scores only the redrawn part.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from streamdp.privacy.mechanisms import SecureRandom, exponential_mechanism

__all__ = [
    "SENSITIVITY",
    "SubtreeSpace",
    "leaf_quality",
    "subtree_quality",
    "exact_subtree",
    "mcmc_subtree",
    "enumerate_subtrees",
    "structure_leaves",
    "route",
    "MCMCResult",
]

#: Global sensitivity of q' (eq. 2): one record lies in one leaf; adding it
#: changes that leaf's ``n - sum_c n_c^2/n`` by less than 2 (checked by brute force in tests).
SENSITIVITY = 2.0


# -- the candidate space (public) -------------------------------------------------


@dataclass(frozen=True)
class SubtreeSpace:
    """Everything that defines the candidate set of one step; all of it public.

    ``used`` are the attributes on the path from the tree root to the step
    root; ``depth`` is the step root's global depth; ``n_hat`` the released
    noisy count of the step root.
    """

    arities: tuple
    n_classes: int
    levels: int
    max_depth: int
    min_instances: float
    n_hat: float
    used: frozenset = frozenset()
    depth: int = 0

    def allowed(self, used: frozenset) -> list[int]:
        return [a for a in range(len(self.arities)) if a not in used and self.arities[a] > 0]

    def splits(self, local_depth: int, used: frozenset, log_share: float) -> bool:
        """Is a node of this step split? Public: depends on no record."""
        if local_depth == 0:
            return self.depth < self.max_depth and bool(self.allowed(used))
        if local_depth >= self.levels or self.depth + local_depth >= self.max_depth:
            return False
        if not self.allowed(used):
            return False
        if self.n_hat <= 0:
            return False
        return log_share >= math.log(max(self.min_instances, 1e-300))


def leaf_quality(y: np.ndarray, n_classes: int) -> float:
    """``-(n - sum_c n_c^2 / n)``: minus the weighted Gini of one leaf (0 when empty)."""
    n = y.shape[0]
    if n == 0:
        return 0.0
    c = np.bincount(y, minlength=n_classes).astype(np.float64)
    return -(n - float(c @ c) / n)


def _all_attr_leaf_quality(X: np.ndarray, y: np.ndarray, attrs: list[int], arities, n_classes: int) -> np.ndarray:
    """q' of the one-level split of these rows on each attribute in ``attrs`` (one bincount)."""
    if len(attrs) == 0:
        return np.zeros(0)
    n = X.shape[0]
    ar = np.array([arities[a] for a in attrs], dtype=np.int64)
    if n == 0:
        return np.zeros(len(attrs))
    offs = np.concatenate([[0], np.cumsum(ar * n_classes)[:-1]])
    cells = X[:, attrs] * n_classes + y[:, None] + offs[None, :]
    cnt = np.bincount(cells.ravel(), minlength=int((ar * n_classes).sum())).astype(np.float64)
    # per (attribute, value): n_j and sum_c n_jc^2
    cnt = cnt.reshape(-1, n_classes)
    nj = cnt.sum(axis=1)
    sq = (cnt * cnt).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        term = np.where(nj > 0, sq / np.where(nj > 0, nj, 1.0), 0.0)
    seg = np.repeat(np.arange(len(attrs)), ar)
    return -(n - np.bincount(seg, weights=term, minlength=len(attrs)))


def _partition(X: np.ndarray, a: int, arity: int) -> list[np.ndarray]:
    """Row index arrays of the children of a split on ``a``."""
    codes = X[:, a]
    if codes.shape[0] == 0:
        return [np.zeros(0, dtype=np.int64)] * arity
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(arity + 1))
    return [order[bounds[v] : bounds[v + 1]] for v in range(arity)]


# A structure is ``None`` (leaf) or ``[attr, [child_0, ..., child_{k-1}]]``.


def subtree_quality(X: np.ndarray, y: np.ndarray, st, n_classes: int) -> float:
    """q'(st) on these rows (eq. 2)."""
    if st is None:
        return leaf_quality(y, n_classes)
    a, children = st
    arity = len(children)
    return sum(subtree_quality(X[idx], y[idx], ch, n_classes) for idx, ch in zip(_partition(X, a, arity), children))


def structure_leaves(st, path=()):
    """The leaves of a structure as paths ``((attr, value), ...)`` in depth-first order."""
    if st is None:
        return [path]
    a, children = st
    out = []
    for v, ch in enumerate(children):
        out += structure_leaves(ch, path + ((a, v),))
    return out


def route(X: np.ndarray, st) -> np.ndarray:
    """Leaf number (depth-first order of :func:`structure_leaves`) of each row."""
    out = np.zeros(X.shape[0], dtype=np.int64)

    def rec(idx, node, base):
        if node is None:
            out[idx] = base
            return base + 1
        a, children = node
        codes = X[idx, a]
        for v, ch in enumerate(children):
            base = rec(idx[codes == v], ch, base)
        return base

    rec(np.arange(X.shape[0]), st, 0)
    return out


# -- exact sampling ---------------------------------------------------------------


def _logsumexp(v: np.ndarray) -> float:
    m = float(np.max(v))
    return m + math.log(float(np.sum(np.exp(v - m))))


def _draw_log_weights(logw: np.ndarray, rng: SecureRandom) -> int:
    """Index drawn with probability ∝ exp(logw), by the vetted Gumbel sampler of
    :func:`streamdp.privacy.exponential_mechanism` (epsilon=2, sensitivity=1 makes
    its logits exactly ``logw``)."""
    return exponential_mechanism(logw, 2.0, 1.0, rng)


class _Exact:
    """log Z over the candidate space, memo-free recursion with vectorised last level."""

    def __init__(self, space: SubtreeSpace, X, y, k: float):
        self.s, self.X, self.y, self.k = space, X, y, k

    def logz(self, idx, local, used, log_share):
        s = self.s
        if not s.splits(local, used, log_share):
            return self.k * leaf_quality(self.y[idx], s.n_classes)
        allowed = s.allowed(used)
        return _logsumexp(self.attr_logw(idx, local, used, log_share, allowed)) - math.log(len(allowed))

    def attr_logw(self, idx, local, used, log_share, allowed):
        """log of ``prod_children Z(child)`` for each allowed attribute."""
        s = self.s
        Xn, yn = self.X[idx], self.y[idx]
        out = np.empty(len(allowed))
        # Fast path: all children of every attribute are leaves -> one bincount.
        leaf_kids = [not s.splits(local + 1, used | {a}, log_share - math.log(s.arities[a])) for a in allowed]
        if all(leaf_kids):
            return self.k * _all_attr_leaf_quality(Xn, yn, allowed, s.arities, s.n_classes)
        for i, a in enumerate(allowed):
            parts = _partition(Xn, a, s.arities[a])
            ls = log_share - math.log(s.arities[a])
            out[i] = sum(self.logz(idx[p], local + 1, used | {a}, ls) for p in parts)
        return out

    def sample(self, idx, local, used, log_share, rng):
        s = self.s
        if not s.splits(local, used, log_share):
            return None
        allowed = s.allowed(used)
        logw = self.attr_logw(idx, local, used, log_share, allowed)
        a = allowed[_draw_log_weights(logw, rng)]
        parts = _partition(self.X[idx], a, s.arities[a])
        ls = log_share - math.log(s.arities[a])
        return [a, [self.sample(idx[p], local + 1, used | {a}, ls, rng) for p in parts]]


def _root_log_share(space: SubtreeSpace) -> float:
    return math.log(space.n_hat) if space.n_hat > 0 else -math.inf


def exact_subtree(space: SubtreeSpace, X: np.ndarray, y: np.ndarray, epsilon: float, rng: SecureRandom):
    """One exact draw of the subtree mechanism (any ``levels``; cost grows like ``N**levels``)."""
    k = epsilon / (2.0 * SENSITIVITY)
    ex = _Exact(space, np.asarray(X, dtype=np.int64), np.asarray(y, dtype=np.int64), k)
    return ex.sample(np.arange(len(y)), 0, frozenset(space.used), _root_log_share(space), rng)


def enumerate_subtrees(space: SubtreeSpace, X: np.ndarray, y: np.ndarray):
    """Every candidate with its q' and log base measure (small spaces only; for tests)."""
    X = np.asarray(X, dtype=np.int64)
    y = np.asarray(y, dtype=np.int64)

    def rec(idx, local, used, log_share):
        if not space.splits(local, used, log_share):
            return [(None, leaf_quality(y[idx], space.n_classes), 0.0)]
        allowed = space.allowed(used)
        out = []
        for a in allowed:
            parts = _partition(X[idx], a, space.arities[a])
            ls = log_share - math.log(space.arities[a])
            options = [rec(idx[p], local + 1, used | {a}, ls) for p in parts]
            combos = [([], 0.0, -math.log(len(allowed)))]
            for opts in options:
                combos = [(c + [o[0]], q + o[1], lm + o[2]) for (c, q, lm) in combos for o in opts]
            out += [([a, c], q, lm) for (c, q, lm) in combos]
        return out

    return rec(np.arange(len(y)), 0, frozenset(space.used), _root_log_share(space))


# -- Metropolis–Hastings ------------------------------------------------------------


class _Node:
    __slots__ = (
        "attr",
        "children",
        "parent",
        "slot",
        "idx",
        "local",
        "used",
        "log_share",
        "score",
        "n_elig",
        "n_allowed",
    )

    def __init__(self, idx, local, used, log_share, parent, slot):
        self.idx = idx
        self.local = local
        self.used = used
        self.log_share = log_share
        self.parent = parent
        self.slot = slot
        self.attr = -1
        self.children = None
        self.score = 0.0
        self.n_elig = 0
        self.n_allowed = 0


class _Uniforms:
    """Secure uniforms drawn in blocks (one keystream read per 4096 draws)."""

    def __init__(self, rng: SecureRandom, block: int = 4096):
        self.rng, self.block = rng, block
        self.buf = rng.uniform(block)
        self.i = 0

    def next(self) -> float:
        if self.i >= self.block:
            self.buf = self.rng.uniform(self.block)
            self.i = 0
        u = self.buf[self.i]
        self.i += 1
        return float(u)

    def integer(self, high: int) -> int:
        return min(int(self.next() * high), high - 1)


@dataclass
class MCMCResult:
    structure: object
    trace: np.ndarray  # q' of the current state after each step (trusted diagnostics; not private)
    steps: int
    accepted: int
    converged: bool = field(default=False)


class _Chain:
    def __init__(self, space: SubtreeSpace, X, y, k: float, u: _Uniforms):
        self.s, self.X, self.y, self.k, self.u = space, X, y, k, u

    def grow(self, node: _Node, attr: int | None = None) -> _Node:
        """Draw ``node``'s subtree from mu (with ``attr`` forced at ``node`` if given); fill scores."""
        s = self.s
        if not s.splits(node.local, node.used, node.log_share):
            node.attr, node.children = -1, None
            node.score = leaf_quality(self.y[node.idx], s.n_classes)
            node.n_elig = 0
            return node
        allowed = s.allowed(node.used)
        node.n_allowed = len(allowed)
        a = allowed[self.u.integer(len(allowed))] if attr is None else attr
        node.attr = a
        parts = _partition(self.X[node.idx], a, s.arities[a]) if node.idx.shape[0] else [node.idx] * s.arities[a]
        ls = node.log_share - math.log(s.arities[a])
        used = node.used | {a}
        node.children = [self.grow(_Node(node.idx[p], node.local + 1, used, ls, node, j)) for j, p in enumerate(parts)]
        node.score = sum(c.score for c in node.children)
        node.n_elig = (1 if len(allowed) >= 2 else 0) + sum(c.n_elig for c in node.children)
        return node

    def pick(self, root: _Node) -> _Node:
        """Uniform among eligible inner nodes (those with >= 2 allowed attributes)."""
        r = self.u.integer(root.n_elig)
        node = root
        while True:
            own = 1 if node.n_allowed >= 2 else 0
            if r < own:
                return node
            r -= own
            for c in node.children:
                if r < c.n_elig:
                    node = c
                    break
                r -= c.n_elig


def _structure(node: _Node):
    if node.children is None:
        return None
    return [node.attr, [_structure(c) for c in node.children]]


def mcmc_subtree(
    space: SubtreeSpace,
    X: np.ndarray,
    y: np.ndarray,
    epsilon: float,
    rng: SecureRandom,
    *,
    buffer_size: int = 50,
    step_limit: int = 1000,
    variance_threshold: float = 0.0,
    min_steps: int = 0,
) -> MCMCResult:
    """Bai's Algorithm 3 with the Hastings correction (see the module docstring)."""
    X = np.asarray(X, dtype=np.int64)
    y = np.asarray(y, dtype=np.int64)
    k = epsilon / (2.0 * SENSITIVITY)
    u = _Uniforms(rng)
    ch = _Chain(space, X, y, k, u)
    root = ch.grow(_Node(np.arange(len(y)), 0, frozenset(space.used), _root_log_share(space), None, 0))
    trace = np.empty(step_limit, dtype=np.float64)
    steps = accepted = 0
    converged = False
    if root.children is None or root.n_elig == 0:
        return MCMCResult(_structure(root), trace[:0], 0, 0, True)
    while steps < step_limit:
        node = ch.pick(root)
        allowed = space.allowed(node.used)
        j = u.integer(len(allowed) - 1)
        cur = allowed.index(node.attr)
        a = allowed[j if j < cur else j + 1]
        new = ch.grow(_Node(node.idx, node.local, node.used, node.log_share, node.parent, node.slot), attr=a)
        d_elig = new.n_elig - node.n_elig
        log_alpha = k * (new.score - node.score) + math.log(root.n_elig) - math.log(root.n_elig + d_elig)
        if log_alpha >= 0 or math.log(u.next()) < log_alpha:
            accepted += 1
            d_score = new.score - node.score
            if node.parent is None:
                root = new
            else:
                node.parent.children[node.slot] = new
                p = node.parent
                while p is not None:
                    p.score += d_score
                    p.n_elig += d_elig
                    p = p.parent
        trace[steps] = root.score
        steps += 1
        if (
            steps >= max(buffer_size, min_steps)
            and float(np.var(trace[steps - buffer_size : steps])) < variance_threshold
        ):
            converged = True
            break
    return MCMCResult(_structure(root), trace[:steps], steps, accepted, converged)
