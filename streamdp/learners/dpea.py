"""DPEA: embedding differential privacy in decision trees with different depths (Bai et al. 2017).

>>> from streamdp.records.datasets import load
>>> ds = load("congressional-voting")
>>> clf = DPEA(ds.schema, max_depth=4, embed_depth=2, epsilon=10.0, min_instances=20).fit(ds.X, ds.y)
>>> bool((clf.predict(ds.X) == ds.y).mean() > 0.8)
True

The learner grows the tree ``embed_depth`` levels at a time: each *step*
draws a whole subtree below a node with one exponential mechanism (quality
q' = minus the weighted Gini of the subtree's leaves, eq. 2, sensitivity 2),
exactly when the step has at most 2 levels and by Metropolis–Hastings
otherwise; ``embed_depth >= max_depth`` (``"whole"``) is the whole-tree
algorithm, one step for the whole tree. It reaches the data only through the
private data layer (:mod:`streamdp.learners.private_data`): noisy counts, partitions
and the subtree mechanism of :mod:`streamdp.learners.private_subtree`. It never sees a
record.

Depth convention: ``max_depth`` = D counts split levels (a leaf is at depth
<= D; sklearn's convention). The paper counts layers, so its "whole tree,
d = D - 1" is our ``embed_depth = max_depth``; both give one step and
``eps/2`` for the structure.

Budget (along any root-to-leaf branch, sequential composition; branches are
disjoint, parallel composition). With ``n = ceil(D / d)`` steps at most:

* each subtree selection gets ``eps' = eps / (n + 1)``, as in the paper;
* the paper also checks the stopping rule ("fewer than min_instances") at
  every step's leaves *without* noise ("a hidden middle calculation step").
  That check reads the data, so here it uses released noisy class counts:
  one count of the root (to size the first step's candidate set) and one
  class-count histogram of each step's leaves (stopping check, and labels of
  the leaves that stop). These ``n + 1`` releases share the remaining
  ``eps / (n + 1)``: ``eps / (n + 1)**2`` each.

So a branch that runs all ``n`` steps spends ``n * eps/(n+1) + (n+1) * eps/(n+1)**2 = eps``.
A branch that stops after ``k < n`` steps (its noisy count below the bar) has
spent ``eps/(n+1)**2 + k (eps/(n+1) + eps/(n+1)**2)``; its leaf's class counts
are released once more with the rest (our addition: in Bai et al. that budget
is charged and never used, and a leaf of one-step DPEA at depth 6 carries the
noise of ``eps/49``), the two releases averaged by inverse variance. So every branch
spends exactly ``eps`` (branches are disjoint: the fit costs ``eps``; the choice
to stop reads released counts only). Estimation reads every release: a step
root's own class counts and its leaves' sum are combined
(:func:`streamdp.estimation.released_node_counts`, ``Tree.own_var``). Why on by
default: docs/decisions/003-top-up-stopped-branches.md. For the whole-tree algorithm
(n = 1): structure eps/2, root count eps/4, leaf class counts eps/4.

Stopping between steps: a leaf of a step becomes the root of the next step
only if its noisy count is at least ``min_instances`` *and* at least twice
the standard deviation of the noise in that count (``2 sqrt(2C) / eps_c``
for C classes): both are public, and the second keeps tiny budgets (eps =
0.01, where the noise is thousands of records) from growing a tree of noise
to the maximum depth (the paper checks exact counts here, which is not
private).

Inside a step no noisy count is available, so a node of the candidate
subtree is split only when its *nominal share* (the step root's noisy count
divided by the product of the arities on its path) is at least
``min_instances``; this keeps the candidate set independent of the data given
released values and bounds the tree size (see :mod:`streamdp.learners.private_subtree`).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from streamdp.estimation.rule import cell_variance
from streamdp.estimation.trees import inverse_variance_mean
from streamdp.learners._base import PrivateLearner
from streamdp.learners.branch import rest_of_branch
from streamdp.learners.private_data import PrivateDataset
from streamdp.learners.private_subtree import SubtreeSpace
from streamdp.learners.tree import Tree
from streamdp.privacy.mechanisms import NotPrivateWarning
from streamdp.records.domains import Categorical
from streamdp.records.schema import Schema
from streamdp.validation import Interval, check_integer, check_number

__all__ = ["DPEA", "FORMAT"]

FORMAT = "streamdp.dpea"


class DPEA(PrivateLearner):
    """Bai et al.'s DP embedding algorithm as a scikit-learn style classifier.

    Parameters
    ----------
    schema: the declared schema. DPEA splits on categorical attributes only (as
        the paper); numeric attributes are ignored.
    max_depth: D, maximum number of split levels.
    embed_depth: d, levels drawn per exponential-mechanism step (1 = Friedman–Schuster's
        one-step, 2, 3, ...; ``"whole"`` or any value >= D = the whole-tree algorithm).
    epsilon: total privacy budget of the fit.
    min_instances: a node whose noisy count is below this stops (paper: 20 vote, 50 mushroom).
    buffer_size, step_limit, variance_threshold: the MCMC stopping rule (steps with > 2 levels).
    exact_max_levels: steps with at most this many levels are sampled exactly (paper: 2).
    top_up: a branch that stops before its last step releases its leaf's class counts again with the budget it
        has left (module docstring); False keeps Bai et al.'s budget, the remainder unspent.
    noise_seed: tests only; makes the noise reproducible and the model NOT private.
    keep_traces: diagnostics only: keep each MCMC run's EXACT score trace in ``traces_`` (data-dependent,
        not private: a NotPrivateWarning says so; never pickled). Off by default: the released tree's exact
        score, readable from ``traces_``, tells neighbouring datasets apart.
    """

    ALLOWS_INF = False  # the MCMC stopping rule and the budget split need a finite epsilon
    MIN_DEPTH = 1

    FORMAT = FORMAT

    def __init__(
        self,
        schema: Schema,
        max_depth: int = 5,
        embed_depth: int | str = 1,
        epsilon: float = 1.0,
        min_instances: float = 20,
        buffer_size: int = 50,
        step_limit: int = 1000,
        variance_threshold: float = 0.0,
        exact_max_levels: int = 2,
        noise_seed: int | None = None,
        keep_traces: bool = False,
        top_up: bool = True,
    ):
        self.schema = schema
        self.max_depth = max_depth
        self.embed_depth = embed_depth
        self.epsilon = epsilon
        self.min_instances = min_instances
        self.buffer_size = buffer_size
        self.step_limit = step_limit
        self.variance_threshold = variance_threshold
        self.exact_max_levels = exact_max_levels
        self.noise_seed = noise_seed
        self.keep_traces = keep_traces
        self.top_up = top_up

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "traces_"}  # exact diagnostics stay in the process

    def __repr__(self) -> str:
        return f"DPEA(max_depth={self.max_depth}, embed_depth={self.embed_depth!r}, epsilon={self.epsilon})"

    # -- budget ----------------------------------------------------------------------
    def _levels(self) -> int:
        D = self._check_depth()
        d = self.embed_depth
        if d == "whole":
            return D
        return min(Interval(int, 1).check(d, "embed_depth (or 'whole')"), D)

    def _check_depth(self) -> int:
        return check_integer(self.max_depth, "max_depth")

    @property
    def n_steps(self) -> int:
        """Most subtree selections on one branch, ``ceil(D/d)`` (1 for the whole tree)."""
        return math.ceil(self._check_depth() / self._levels())

    @property
    def epsilon_structure(self) -> float:
        """eps' of each subtree selection: ``eps / (ceil(D/d) + 1)``."""
        return self.epsilon / (self.n_steps + 1)

    @property
    def epsilon_count(self) -> float:
        """Each noisy count release (root count, each step's leaf histogram): ``eps / (n+1)**2``."""
        return self.epsilon / (self.n_steps + 1) ** 2

    def epsilon_leaf_counts(self) -> float:
        """Each step's leaf histogram is one count release: :attr:`epsilon_count` (with ``top_up`` a branch stopped
        early releases its leaf again with what it has left, averaged in by inverse variance, ``Tree.own_var``)."""
        return self.epsilon_count

    # -- fit -------------------------------------------------------------------------
    def _check_params(self) -> None:
        super()._check_params()
        check_number(self.min_instances, "min_instances", low=0)
        for name in ("buffer_size", "step_limit", "exact_max_levels"):
            check_integer(getattr(self, name), name)
        check_number(self.variance_threshold, "variance_threshold", low=0)
        self._levels()

    def _fit(self, pds: PrivateDataset) -> None:
        schema = self.schema
        D, d = self._check_depth(), self._levels()
        arities = tuple(int(a.arity) if isinstance(a, Categorical) else 0 for a in schema.attributes)
        C = schema.n_classes
        eps_st, eps_c = self.epsilon_structure, self.epsilon_count
        v_c = cell_variance("geometric", eps_c / pds.records_per_unit)

        feature: list[int] = [-1]
        child_start: list[int] = [-1]
        counts: list[np.ndarray] = [np.zeros(C)]
        own_var: list[float] = [0.0]  # the root's total is released, not its class counts
        depth: list[int] = [0]
        parent: list[int] = [-1]
        traces: list[np.ndarray] | None = [] if self.keep_traces else None
        if traces is not None:
            warnings.warn(
                "DPEA(keep_traces=True): traces_ holds the MCMC runs' EXACT scores (diagnostics, not "
                "differentially private): never publish it",
                NotPrivateWarning,
                stacklevel=3,
            )
            self.traces_ = traces
        else:
            self.__dict__.pop("traces_", None)
        self.n_mechanism_calls_ = 0

        # A branch goes on only if its noisy count clears min_instances AND twice the
        # noise's standard deviation (C geometric cells ~ Laplace(1/eps_c) each): with
        # tiny budgets noisy counts are mostly noise and would otherwise grow huge trees.
        threshold = max(float(self.min_instances), 2.0 * math.sqrt(2.0 * C) / eps_c)
        self.continue_threshold_ = threshold
        root_total = float(pds.noisy_count(eps_c))
        # queue of (dataset, node id, used attributes, noisy count)
        queue: list[tuple[PrivateDataset, int, frozenset[int], float, int]] = [(pds, 0, frozenset(), root_total, 1)]
        n_steps = self.n_steps
        while queue:
            node_pds, nid, used, n_hat, step = queue.pop()
            g = depth[nid]
            space = SubtreeSpace(arities, C, d, D, float(self.min_instances), float(n_hat), used, g)
            levels_left = min(d, D - g)
            sampler = "exact" if levels_left <= self.exact_max_levels else "mcmc"
            st = node_pds.subtree_mechanism(
                space,
                eps_st,
                sampler=sampler,
                buffer_size=int(self.buffer_size),
                step_limit=int(self.step_limit),
                variance_threshold=float(self.variance_threshold),
                trace=traces,
            )
            self.n_mechanism_calls_ += 1
            # attach st below nid
            leaves: list[tuple[int, Any, frozenset]] = []

            def attach(node_id, struct, ds, used_here):
                if struct is None:
                    leaves.append((node_id, ds, used_here))
                    return
                a, children = struct
                feature[node_id] = a
                child_start[node_id] = len(feature)
                kids = ds.partition(a)
                ids = []
                for _ in children:
                    ids.append(len(feature))
                    feature.append(-1)
                    child_start.append(-1)
                    counts.append(np.zeros(C))
                    own_var.append(0.0)
                    depth.append(depth[node_id] + 1)
                    parent.append(node_id)
                for cid, ch, kd in zip(ids, children, kids):
                    attach(cid, ch, kd, used_here | {a})

            attach(nid, st, node_pds, used)
            for lid, ds, used_here in leaves:
                c = np.asarray(ds.noisy_class_counts(eps_c), dtype=np.float64)
                total = float(c.sum())
                _release(counts, own_var, lid, c, v_c)  # where a later step splits it, estimation uses both
                allowed = [a for a in range(len(arities)) if arities[a] > 0 and a not in used_here]
                # a branch never runs more than n = ceil(D/d) steps (its budget); a step
                # cut short by the nominal-share rule still counts as a step
                if total >= threshold and depth[lid] < D and allowed and lid != nid and step < n_steps:
                    queue.append((ds, lid, used_here, total, step + 1))
                    continue
                # the branch stops: what it has not spent (root count, then `step` steps) tops up its leaf
                left = rest_of_branch(self.epsilon, eps_c + step * (eps_st + eps_c))
                if self.top_up and left > 1e-9 * self.epsilon:
                    top = np.asarray(ds.noisy_class_counts(left), dtype=np.float64)
                    _release(counts, own_var, lid, top, cell_variance("geometric", left / pds.records_per_unit))
        f = np.asarray(feature, dtype=np.int64)
        tree = Tree(
            f,
            np.full(f.size, np.inf),
            np.asarray(child_start, dtype=np.int64),
            np.vstack(counts).astype(np.float64),
            np.asarray(depth, dtype=np.int64),
            np.asarray(parent, dtype=np.int64),
            np.asarray(own_var, dtype=np.float64),
        )
        tree.fill_inner_counts()  # a leaf with no positive count predicts from its ancestors
        self.trees_ = [tree]

    # -- the fitted tree ------------------------------------------------------------
    @property
    def tree_(self) -> Tree:
        """The fitted tree (DPEA fits one); :class:`RuntimeError` if the learner is not fitted."""
        self._check_fitted()
        return self.trees_[0]

    @property
    def feature_(self) -> np.ndarray:
        """Split attribute per node (-1 for a leaf)."""
        return self.tree_.feature

    @property
    def n_leaves_(self) -> int:
        """The fitted tree's number of leaves."""
        return self.tree_.n_leaves

    @property
    def depth_(self) -> int:
        """The fitted tree's depth."""
        return self.tree_.max_depth

    def apply(self, X: Any) -> np.ndarray:
        """Leaf node id of each query record (dicts or a 2-D array in schema order)."""
        self._check_fitted()
        return self.tree_.apply(self._encode(X))

    def _encode(self, X: Any) -> np.ndarray:
        """Codes of prediction inputs (public query records; never the training data)."""
        if isinstance(X, PrivateDataset):
            raise TypeError("predict takes query records (dicts or a 2-D array), not a PrivateDataset")
        return self.schema.encode(X).X


def _release(counts: list, own_var: list, node: int, c: np.ndarray, v: float) -> None:
    """Node ``node``'s class counts ``c`` (cell noise variance ``v``), averaged by inverse variance with a release
    it already has (a step root drawn as a leaf, a stopped leaf's top-up): post-processing of two releases."""
    if own_var[node] > 0:
        counts[node], own_var[node] = inverse_variance_mean(c, v, counts[node], own_var[node])
        own_var[node] = float(own_var[node])
    else:
        counts[node], own_var[node] = c, v
