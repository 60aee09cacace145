"""Hanisch's private random forest (Hanisch), generalised to any number of classes.

>>> from streamdp.records.datasets import load
>>> ds = load("congressional-voting")
>>> clf = HanischForest(ds.schema, epsilon=5.0, max_depth=3, n_trees=5).fit(ds.X, ds.y)
>>> bool(clf.score(ds.X, ds.y) > 0.8)
True

Each tree is a random decision tree: at every node of depth below
``max_depth`` an unused categorical attribute is drawn uniformly and the node
splits on all its declared values; the structure is drawn from the schema
alone (a generator seeded from the OS CSPRNG, or ``seed`` for reproducible
structures), before any data is read. Each leaf releases its class counts
with geometric noise and ``epsilon / n_trees``: the leaves of one tree are
disjoint (parallel composition), the trees see the same records (sequential
composition), so the forest spends exactly ``epsilon``.

Prediction (``vote``). ``"majority"`` is Hanisch's: each tree labels a
record by its leaf's estimate (:mod:`streamdp.estimation`, the bar lowered by
``sqrt(n_trees)``; ``estimator="leaf"``: the largest noisy count, falling back
to the class prior where no count is positive) and the trees vote;
``predict_proba`` gives the vote shares. ``"proba"`` (the default, our
addition) pools the trees' evidence as PrivateForest's probability vote does
(:meth:`streamdp.estimation.ForestNodes.path_proba`): at each depth the
record's nodes in all trees are summed (their noises are independent) and
shrunk toward the pooled estimate one level up, from the class prior at the
roots (a forest of one tree: that tree's estimate, its root shrunk toward
the prior). Post-processing of the same release, so a fitted forest can be
read either way (``set_params(vote=...)``). Under ``estimator="leaf"`` (kept
for comparison) the probability vote is the mean of the trees'
leaf-rule distributions. Why pooled by default: docs/decisions/002-hanisch-pooled-vote-and-prior-stump.md.

Differences from the paper: classes are not limited to two; integer counts
get two-sided geometric noise (the paper's Laplace on counts); queries go
through the private data layer, never through SQL strings; ``prior_trees``
prior stumps (default 1) release the class totals, one cell per class, each
at one tree's share ``epsilon / (n_trees + prior_trees)``: the class prior a
swamped leaf falls back to is then measured with one cell's noise where a
root sums all its leaves' (the roots and the stumps weighed by inverse
variance); the same decision record says why. Numeric
attributes are never split (Hanisch bins them beforehand; declare them as
categorical bins).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from streamdp.estimation.rule import SNR_MIN
from streamdp.learners._base import PrivateLearner
from streamdp.learners.private_data import PrivateDataset
from streamdp.learners.tree import Tree
from streamdp.options import MAX_PRIOR_TREES
from streamdp.privacy.mechanisms import SecureRandom
from streamdp.records.domains import Categorical
from streamdp.validation import check_integer

__all__ = ["HanischForest"]


class HanischForest(PrivateLearner):
    """Hanisch's private random forest (see the module docstring).

    ``max_leaves`` refuses, before any data is read, a forest whose trees
    could have more leaves than this (the product of the largest arities).
    ``seed``: reproducible structures (the noise stays secure);
    ``noise_seed``: reproducible noise, NOT private (tests only).
    ``vote``: ``"proba"`` (the trees' evidence pooled, the default) or ``"majority"`` (Hanisch's vote).
    """

    prior_trees = 0  # (a model pickled before prior stumps existed has none: __init__ sets the parameter)

    FORMAT = "streamdp.hanisch_forest"
    vote = "majority"  # (a model pickled before the vote was a parameter: Hanisch's; __init__ sets the parameter)

    def __init__(
        self,
        schema: Any,
        epsilon: float = 1.0,
        max_depth: int = 3,
        n_trees: int = 10,
        max_leaves: int = 1_000_000,
        seed: int | None = None,
        noise_seed: int | None = None,
        prior_trees: int = 1,
        vote: str = "proba",
    ):
        self.schema = schema
        self.epsilon = epsilon
        self.max_depth = max_depth
        self.n_trees = n_trees
        self.max_leaves = max_leaves
        self.seed = seed
        self.noise_seed = noise_seed
        self.prior_trees = prior_trees
        self.vote = vote

    def _check_params(self) -> None:
        super()._check_params()
        check_integer(self.n_trees, "n_trees")
        check_integer(self.prior_trees, "prior_trees", low=0, high=MAX_PRIOR_TREES)
        check_integer(self.max_leaves, "max_leaves")
        # (a schema without categorical attributes: refused by the catalogue's rule, super()._check_params)
        cats = sorted((a.arity for a in self.schema.attributes if isinstance(a, Categorical)), reverse=True)
        worst = int(np.prod(cats[: int(self.max_depth)], dtype=np.float64))
        if worst > self.max_leaves:
            raise ValueError(
                f"a tree of depth {self.max_depth} could have {worst:,} leaves, above "
                f"max_leaves={self.max_leaves:,}; lower max_depth or raise max_leaves"
            )

    def _fit(self, pds: PrivateDataset) -> None:
        if self.seed is None:
            seed = int.from_bytes(SecureRandom().token_bytes(16), "little")
        else:
            seed = int(self.seed)
        rng = np.random.default_rng(seed)  # structure only: drawn from the schema, never from data
        eps = self.epsilon_leaf_counts()
        self.trees_ = [self._tree(pds, rng, eps) for _ in range(int(self.n_trees))]
        # prior stumps: the class totals, one cell per class at one tree's share (our addition, as PrivateForest's)
        self.stumps_ = np.array(
            [pds.noisy_class_counts(eps) for _ in range(int(self.prior_trees))], dtype=np.float64
        ).reshape(-1, self.schema.n_classes)

    def estimation_snr(self) -> float:
        """Each tree's bar under the majority vote, as PrivateForest's: SNR_MIN lowered by sqrt(n_trees) (the vote
        pools the trees)."""
        return SNR_MIN / math.sqrt(len(self.trees_))

    def epsilon_leaf_counts(self) -> float:
        """Each tree's leaf histogram, and each prior stump's class counts, get ``epsilon / (n_trees +
        prior_trees)``."""
        return float(self.epsilon) / (int(self.n_trees) + int(self.prior_trees))

    def _tree(self, pds: PrivateDataset, rng: np.random.Generator, eps: float) -> Tree:
        tree = self._structure(rng)  # drawn first: the structure cannot depend on the counts
        counts = pds.noisy_leaf_class_counts(tree.feature, tree.threshold, tree.child_start, eps).astype(np.float64)
        if tree.feature[0] >= 0:  # the root's prior: the sum of clipped leaf counts (post-processing)
            counts[0] = np.clip(counts[tree.feature < 0], 0, None).sum(axis=0)
        tree.counts = counts
        return tree

    def _structure(self, rng: np.random.Generator) -> Tree:
        """A random tree, level by level: every node below ``max_depth`` splits on an attribute
        drawn uniformly from the categorical ones unused on its path (nodes numbered breadth first)."""
        cats = np.array([j for j, a in enumerate(self.schema.attributes) if isinstance(a, Categorical)])
        arity = np.array([self.schema.attributes[j].arity for j in cats])
        feature, child_start, depth, parent = [], [], [np.zeros(1, np.int64)], [np.full(1, -1, np.int64)]
        used = np.zeros((1, cats.size), dtype=bool)  # per frontier node: attributes on its path
        first, n_nodes = 0, 1
        for d in range(int(self.max_depth) + 1):
            m = used.shape[0]
            if d == int(self.max_depth) or used.all(axis=1).all():
                feature.append(np.full(m, -1, np.int64))
                child_start.append(np.full(m, -1, np.int64))
                break
            pick = np.argmax(np.where(used, -1.0, rng.random(used.shape)), axis=1)  # uniform over unused
            k = arity[pick]
            feature.append(cats[pick])
            child_start.append(n_nodes + np.concatenate([[0], np.cumsum(k)[:-1]]))
            used = np.repeat(used, k, axis=0)
            used[np.arange(used.shape[0]), np.repeat(pick, k)] = True
            parent.append(np.repeat(np.arange(first, first + m), k))
            depth.append(np.full(used.shape[0], d + 1, np.int64))
            first, n_nodes = n_nodes, n_nodes + used.shape[0]
        f = np.concatenate(feature)
        return Tree(
            f,
            np.full(f.size, np.inf),
            np.concatenate(child_start),
            np.zeros((f.size, self.schema.n_classes)),
            np.concatenate(depth),
            np.concatenate(parent),
        )
