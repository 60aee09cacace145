"""The differentially private random forest (Private-RDT, Jagannathan et al.).

>>> from streamdp.records.datasets import load
>>> ds = load("congressional-voting")
>>> forest = PrivateForest.create(ds.schema, n_trees=5, height=2, epsilon=1.0, seed=2)
>>> _ = forest.fit(ds.X[:300], ds.y[:300])
>>> acc = (forest.predict(ds.X[300:]) == ds.y[300:]).mean()
>>> bool(acc > 0.75)
True

Privacy in one paragraph: the structure is drawn from the schema alone. One
record lands in exactly one cell of each tree's leaf vector, so one tree's
vector has L1 sensitivity 1. ``budget="split"`` lets every tree see every
record and gives each tree ``epsilon / n_trees`` (sequential composition);
``budget="disjoint"`` routes each record to one tree chosen at random and
gives each tree the full ``epsilon`` (parallel composition). ``update`` is
Jagannathan's procedure: the new batch alone is tallied into an empty clone,
noised once with the same scale, and added; batches are disjoint, so the
model stays ``epsilon``-DP however many batches it absorbs (parallel
composition). With ``mechanism="kanon"`` each (record, tree) pair is kept with
probability ``beta`` and cells below ``k`` are zeroed (Li–Qardaji–Su): the
forest is ``(epsilon, delta)``-DP with ``delta`` from :func:`kanon_delta`.
``mechanism="laplace"`` adds Laplace noise on a power-of-two grid
(:func:`streamdp.privacy.noise.laplace_noise`; before, floating-point Laplace, open to
Mironov's attack); ``"geometric"`` (the default) adds integer noise.

Height as a ceiling: :meth:`PrivateForest.fit` releases the prior stumps first
and prunes each random tree where its nodes cannot expect enough records to
stand above the noise (a probe of the leaf totals, 10% of each tree's budget,
finds where records concentrate), then releases the pruned trees: the same
per-tree epsilon, decisions read released numbers only
(:meth:`PrivateForest.fit_encoded`). :meth:`PrivateForest.grow` continues it
release by release (the trees deepen as the released counts allow, never past
the drawn height: :mod:`streamdp.forest.growth`, the service's ``release="grow"``);
``update`` keeps the structure it was given.

Prior stumps: ``prior_trees`` single-leaf trees follow the ``n_trees`` random
trees in the structure (:meth:`ForestStructure.with_stumps`). To every
mechanism a stump is one more tree: under ``budget="split"`` every tree gets
``epsilon / (n_trees + prior_trees)``, under ``"disjoint"`` each record goes
to one tree drawn among all of them, and k-anonymity samples and prunes it
like any other; so the guarantee above holds with ``n_trees + prior_trees``
trees, and the published counts keep their format (one more row). A stump's
cells are the class totals with the noise of one cell, where a random tree's
root is the sum of its ``L`` leaves (``L`` times the variance): estimation
(:mod:`streamdp.estimation`) takes the forest-wide class prior mostly from
the stumps; stumps take no part in the vote. ``n_trees`` always means the
random trees; ``structure.n_trees`` counts the stumps too.
"""

from __future__ import annotations

import functools
import math
import time
import warnings
from typing import Any

import numpy as np

from streamdp import blob
from streamdp.estimation import ESTIMATORS, SNR_MIN, ForestNodes, cell_variance, leaf_rule_proba, prior_from
from streamdp.forest import pruning
from streamdp.forest.growth import aggregate, drawn_nodes, grown_release, leaves_below
from streamdp.forest.structure import DEFAULT_MAX_CELLS, ForestStructure
from streamdp.forest.tally import sparse_tally, tally
from streamdp.options import BUDGETS, MAX_PRIOR_TREES, MECHANISMS, VOTES
from streamdp.privacy.mechanisms import SecureRandom, bernoulli_sample, kanon_check, kanon_delta
from streamdp.records.schema import Schema
from streamdp.release.continual import noisy_node
from streamdp.validation import NotFittedError, check_choice, check_epsilon, check_integer

__all__ = ["PrivateForest", "MECHANISMS", "FORMAT"]

FORMAT = "streamdp.forest"
FORMAT_VERSION = 1


class PrivateForest:
    """A fixed random forest whose released leaf counts are differentially private.

    Build one with :meth:`create`; see the module docstring for the guarantee.
    """

    def __init__(
        self,
        schema: Schema,
        structure: ForestStructure,
        *,
        epsilon: float = 1.0,
        mechanism: str = "geometric",
        k: int | None = None,
        beta: float | None = None,
        vote: str = "proba",
        budget: str = "split",
        counts: np.ndarray | None = None,
        version: int = 0,
        n_releases: int = 0,
        noise_seed: int | None = None,
        private: bool = True,
        prior_trees: int = 0,
        noise_variance: Any = None,
    ):
        check_choice(mechanism, "mechanism", MECHANISMS)
        check_choice(vote, "vote", VOTES)
        check_choice(budget, "budget", BUDGETS)
        check_epsilon(epsilon, allow_inf=True)
        self.schema = schema
        self.structure = structure
        self.drawn = structure  # what fit starts from (a fit may replace self.structure by a pruned one)
        self.prior_trees = self._check_stumps(structure, prior_trees, schema.n_attributes)
        self.mechanism = mechanism
        self.vote = vote
        self.budget = budget
        self._epsilon = float(epsilon)
        self.k, self.beta = k, beta
        if mechanism == "kanon":
            if k is None or beta is None:
                missing = " and ".join(
                    n for n, v in (("k (threshold)", k), ("beta (sampling rate)", beta)) if v is None
                )
                raise ValueError(f"mechanism='kanon' needs {missing} (CLI: --k, --beta)")
            if math.isinf(epsilon):
                raise ValueError("mechanism='kanon' needs a finite epsilon (the forest's total)")
            kanon_check(k, beta, self.epsilon_per_tree)
            self._delta = self._kanon_forest_delta()
        else:
            if k is not None or beta is not None:
                raise ValueError(f"k and beta apply to mechanism='kanon' only, not {mechanism!r}")
            self._delta = 0.0
        self._rng = SecureRandom(noise_seed)
        self.private = private and self._rng.private and not math.isinf(epsilon)
        dtype = np.float64 if mechanism == "laplace" else np.int64
        if counts is None:
            counts = np.zeros(self.shape, dtype=dtype)
        elif counts.shape != self.shape or counts.dtype != dtype:
            raise ValueError(
                f"counts must be {dtype.__name__} of shape {self.shape}, got {counts.dtype} {counts.shape}"
            )
        elif self._padding_nonzero(counts):
            raise ValueError("counts must be zero past each tree's last leaf")
        self._counts = counts
        self.noise_variance = noise_variance
        self._node_variance = None
        self.estimator = "shrink"
        #: A class prior measured from released numbers by the owner of the releases (the river classifier's
        #: :func:`streamdp.estimation.release_prior`), used by estimation in place of forest_prior; None: forest_prior.
        #: Post-processing; not part of the blob (a loaded forest uses forest_prior).
        self.class_prior: np.ndarray | None = None
        self.version = version
        self.n_releases = n_releases

    def __setstate__(self, state: dict) -> None:
        if "_drawn" in state:  # pickled before the attribute was public
            state["drawn"] = state.pop("_drawn")
        self.__dict__.update(state)

    @classmethod
    def create(
        cls,
        schema: Schema,
        n_trees: int = 10,
        height: int | None = None,
        epsilon: float = 1.0,
        mechanism: str = "geometric",
        k: int | None = None,
        beta: float | None = None,
        seed: int | None = None,
        *,
        vote: str = "proba",
        budget: str = "split",
        noise_seed: int | None = None,
        max_cells: int = DEFAULT_MAX_CELLS,
        prior_trees: int = 1,
    ) -> PrivateForest:
        """Draw the random structure from ``schema`` and return an empty private forest.

        ``seed`` makes the structure reproducible (it is public anyway); the
        noise stays fresh and secure. ``noise_seed`` is for tests only and
        marks the forest as not private. ``prior_trees`` single-leaf trees
        are appended after the ``n_trees`` random ones (module docstring;
        0 gives the forest without them).
        """
        check_integer(prior_trees, "prior_trees", low=0, high=MAX_PRIOR_TREES)  # before drawing anything
        structure = ForestStructure.draw(schema, n_trees, height, seed=seed, max_cells=max_cells)
        return cls(
            schema,
            structure.with_stumps(prior_trees, schema.n_attributes),
            epsilon=epsilon,
            mechanism=mechanism,
            k=k,
            beta=beta,
            vote=vote,
            budget=budget,
            noise_seed=noise_seed,
            prior_trees=prior_trees,
        )

    @staticmethod
    def _check_stumps(structure: ForestStructure, prior_trees: int, n_attributes: int) -> int:
        """``prior_trees`` in ``[0, structure.n_trees)`` and the last ``prior_trees`` trees single leaves."""
        check_integer(prior_trees, "prior_trees", low=0, high=min(MAX_PRIOR_TREES, structure.n_trees - 1))
        if prior_trees:
            tail = slice(structure.n_trees - prior_trees, None)
            if np.any(structure.leaf[tail, 0] != 0) or np.any(structure.feature[tail, 0] != n_attributes):
                raise ValueError(
                    f"prior_trees={prior_trees}: the last {prior_trees} trees of the structure must be single leaves"
                )
        return int(prior_trees)

    # -- privacy facts ----------------------------------------------------------
    @property
    def n_trees(self) -> int:
        """Random trees (what was asked for); the structure holds ``n_trees + prior_trees`` rows."""
        return self.structure.n_trees - self.prior_trees

    @property
    def n_released_trees(self) -> int:
        """Every tree whose counts are released and noised: random trees and prior stumps."""
        return self.structure.n_trees

    @property
    def height(self) -> int:
        return self.structure.height

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.structure.n_trees, self.structure.max_leaves, self.schema.n_classes)

    @property
    def epsilon(self) -> float:
        """Total epsilon of every release of this model (constant over disjoint updates)."""
        return self._epsilon

    @property
    def delta(self) -> float:
        return self._delta

    @property
    def epsilon_per_tree(self) -> float:
        return self._epsilon / self.n_released_trees if self.budget == "split" else self._epsilon

    @property
    def record_share(self) -> float:
        """Probability that a record is counted in a given tree (public: disjoint routing, k-anonymity sampling)."""
        share = 1.0 / self.n_released_trees if self.budget == "disjoint" else 1.0
        return share * self.beta if self.mechanism == "kanon" else share

    @property
    def noise_scale(self) -> float:
        """Laplace scale b of the noise on every cell (``(n_trees + prior_trees)/epsilon`` with the split budget)."""
        return 0.0 if self.mechanism == "kanon" else 1.0 / self.epsilon_per_tree

    def _kanon_forest_delta(self) -> float:
        d = kanon_delta(self.k, self.beta, self.epsilon_per_tree)
        return min(1.0, d * self.n_released_trees) if self.budget == "split" else d

    @property
    def counts(self) -> np.ndarray:
        """Released noisy counts ``(n_trees + prior_trees, max_leaves, n_classes)``, zero past each tree's last leaf.

        A read-only view: updates add into it in place (copy it to keep a snapshot).
        """
        v = self._counts.view()
        v.flags.writeable = False
        return v

    def estimated_records(self) -> float:
        """Noisy estimate of the number of records absorbed, at least 0 (post-processing of the counts only).

        Split budget: every tree counts every record, so each tree's total estimates it, with the noise of
        all its leaves; the totals are averaged by inverse noise variance (:attr:`node_variance` of the roots),
        so a prior stump's total (one cell per class) outweighs a tall tree's (a trial read 24,309 for 32,561
        Adult records from the plain mean of 11 totals, one of them 6,076). Disjoint: the totals' sum."""
        per_tree = self._counts.sum(axis=(1, 2)).astype(np.float64)  # unclamped: the noise has mean zero
        if self.budget == "disjoint":
            est = float(per_tree.sum())
        else:
            if self.mechanism == "kanon":
                var = np.zeros(per_tree.size)
            else:  # the roots' variance: leaves times one cell's, unless grown (their own, tracked)
                var = (
                    self.structure.n_leaves * self.noise_variance
                    if self._node_variance is None
                    else self._node_variance[:, 0]
                )
            est = float(np.average(per_tree, weights=1.0 / var)) if np.all(var > 0) else float(per_tree.mean())
        return max(0.0, est / self.beta if self.mechanism == "kanon" else est)

    # -- learning ----------------------------------------------------------------
    def fit(self, X: Any, y: Any, *, prune: bool = True) -> PrivateForest:
        """Private-RDT on one dataset: replaces the counts with one noisy release of ``(X, y)``.

        With ``prune`` (and at least one prior stump) the height is a ceiling:
        see :meth:`fit_encoded`.
        """
        enc = self.schema.encode(X, y)
        return self.fit_encoded(enc.X, enc.y, prune=prune)

    def fit_encoded(
        self, X: np.ndarray, y: np.ndarray, *, prune: bool = True, rng: SecureRandom | None = None
    ) -> PrivateForest:
        """:meth:`fit` for records already encoded by :meth:`Schema.encode`.

        Pruning (``prune=True``, at least one prior stump, finite epsilon):
        :mod:`streamdp.forest.pruning` (the rule, its privacy and its measurements),
        the first release of :func:`streamdp.forest.growth.grown_release` with a probe. The structure, its height and the counts' shape become
        the pruned ones; :meth:`update` adds to them. A refit starts again from
        the structure the forest was built with (a forest loaded from a blob:
        the structure the blob holds, so a pruned blob cannot grow back). A forest that holds a release
        already warns: fitting again releases its records again (``epsilon`` more, sequential composition),
        which :attr:`epsilon` does not count.
        """
        if self.n_releases and not math.isinf(self.epsilon):
            warnings.warn(
                f"this forest holds a release already: fitting again spends epsilon={self.epsilon:g} more on "
                "any records it was fitted on before (sequential composition), which its epsilon does not "
                "count; create a new forest per fit, or charge each fit to a ledger (streamdp.privacy.ledger)",
                UserWarning,
                stacklevel=3,
            )
        rng = rng or self._rng
        if self.structure is not self.drawn:  # a refit starts from the drawn trees, not an earlier fit's pruning
            self.structure = self.drawn
            self.__dict__.pop("real_cells", None)
        if prune and self.prior_trees and not math.isinf(self.epsilon):  # no noise: nothing to prune against
            X, y = self._checked(X, y)
            self.n_releases, self._counts = 0, np.zeros(self.shape, dtype=self._counts.dtype)
            return self._released(*grown_release(self, *self._tallies(X, y, rng), rng, probe=pruning.PRUNE_PROBE))
        self._counts = self._noise(self.tally_encoded(X, y, rng), rng)
        self.noise_variance = self._node_variance = None
        self.version += 1
        self.n_releases = 1
        return self

    @property
    def can_grow(self) -> bool:
        """Whether :meth:`grow` cuts the trees (:meth:`growable` of this forest's parameters)."""
        return self.growable(self.epsilon, self.mechanism, self.prior_trees)

    @staticmethod
    def growable(epsilon: float, mechanism: str, prior_trees: int = 1) -> bool:
        """Whether a forest of these parameters can grow: a prior stump to count the records, noise to weigh
        them against, not k-anonymity (whose delta is for one release per tree).

        >>> PrivateForest.growable(1.0, "geometric"), PrivateForest.growable(float("inf"), "geometric")
        (True, False)
        """
        return bool(prior_trees) and not math.isinf(epsilon) and mechanism != "kanon"

    def _released(self, structure: ForestStructure, counts: np.ndarray, node_var: np.ndarray) -> PrivateForest:
        """Hold one more release that may change the structure (:mod:`streamdp.forest.growth`)."""
        old = self.structure
        if old.feature.shape == structure.feature.shape and all(
            np.array_equal(getattr(old, k), getattr(structure, k)) for k in ("feature", "child", "leaf", "threshold")
        ):
            structure = old  # the same trees: keep the object, and what readers derived from it (routes, layouts)
        self.structure = structure
        self.__dict__.pop("real_cells", None)
        self._counts = counts
        self.node_variance = node_var
        # per tree, the noise of its noisiest leaf cell (what a reader without node variances assumes)
        self.noise_variance = np.max(np.where(structure.leaf >= 0, node_var, 0.0), axis=1)
        self.version += 1
        self.n_releases += 1
        return self

    def update(self, X: Any, y: Any) -> PrivateForest:
        """Jagannathan's update: tally only the new records, noise that delta once, add it."""
        return self.merge(self.noisy_delta(X, y))

    def grow(self, X: Any, y: Any) -> PrivateForest:
        """:meth:`update` with the height as a ceiling: one release of the batch that may deepen the trees.

        :mod:`streamdp.forest.growth` (the rule, its privacy): a fresh forest starts
        from its roots and every batch may split further where the records
        seen so far stand clear of the noise, never past the drawn height.
        Needs a prior stump and geometric or Laplace noise (else, k-anonymity or
        no noise included, it is :meth:`update`). A fresh
        forest's first :meth:`grow` is a pruned :meth:`fit` (with its probe);
        a forest updated on its drawn trees keeps them.
        """
        enc = self.schema.encode(X, y)
        return self.grow_encoded(enc.X, enc.y)

    def grow_encoded(self, X: np.ndarray, y: np.ndarray, rng: SecureRandom | None = None) -> PrivateForest:
        """:meth:`grow` for records already encoded by :meth:`Schema.encode`."""
        if not self.can_grow:
            return self.merge(self.noisy_delta_encoded(X, y, rng))
        rng = rng or self._rng
        X, y = self._checked(X, y)
        return self._released(*grown_release(self, *self._tallies(X, y, rng), rng, probe=pruning.PRUNE_PROBE))

    def grow_exact(self, exact: np.ndarray, rng: SecureRandom | None = None) -> PrivateForest:
        """:meth:`grow` from an EXACT tally on the drawn trees (:meth:`tally_encoded` of a forest holding
        them; the stream service's window accumulator), sampling masks already applied."""
        drawn, C = self.drawn, self.schema.n_classes
        exact = np.asarray(exact)
        if exact.shape != (drawn.n_trees, drawn.max_leaves, C) or exact.dtype.kind not in "iu":
            raise ValueError(
                f"an exact tally on the drawn trees is integers of shape "
                f"{(drawn.n_trees, drawn.max_leaves, C)}, got {exact.dtype} {exact.shape}"
            )
        if not self.can_grow:
            raise ValueError("growing needs a prior stump and geometric or laplace noise (see grow)")
        arities, is_cat = self.schema.arities, self.schema.is_categorical
        return self._released(
            *grown_release(
                self,
                lambda s: aggregate(exact, drawn, s, arities, is_cat),
                exact[self.n_trees :, :1],
                rng or self._rng,
                probe=pruning.PRUNE_PROBE,
            )
        )

    def _tallies(self, X: np.ndarray, y: np.ndarray, rng: SecureRandom):
        """What :func:`~streamdp.forest.growth.grown_release` reads of checked encoded records: their exact tally
        on any pruning of the drawn trees and the stumps' exact counts, under one sampling mask."""
        T, C = self.n_trees, self.schema.n_classes
        mask = self.sample_mask(len(y), rng)
        stumps = np.stack(
            [np.bincount(y if mask is None else y[mask[:, T + j]], minlength=C) for j in range(self.prior_trees)]
        )[:, None, :]
        return (lambda s: self.tally_on(s, X, y, mask)), stumps

    def merge(self, delta: np.ndarray, releases: int = 1, variance: Any = None) -> PrivateForest:
        """Add an already-noised delta (from :meth:`noisy_delta`, possibly on another worker).

        ``variance``: the noise variance the delta adds per cell (a number or one per tree);
        default ``releases * cell_variance`` (0 for a delta that takes an old release away
        again as it adds a new one, as the river classifier's sliding window does).
        """
        delta = np.asarray(delta)
        if delta.shape != self.shape or delta.dtype != self._counts.dtype:
            raise ValueError(
                f"delta must be {self._counts.dtype} of shape {self.shape}, got {delta.dtype} {delta.shape}"
            )
        if self._padding_nonzero(delta):
            raise ValueError("delta must be zero past each tree's last leaf")
        if delta.dtype.kind == "f" and not np.all(np.isfinite(delta)):
            raise ValueError("delta contains NaN or infinite values")
        before = self.noise_variance  # read before n_releases moves (the default variance follows it)
        self._counts += delta  # in place: no second counts-sized array (readers hold read-only views)
        self.version += 1
        self.n_releases += releases
        added = releases * self.cell_variance if variance is None else np.asarray(variance)
        if variance is not None or self._noise_variance is not None:
            self.noise_variance = before + added
        if self._node_variance is not None:  # a grown forest: each node adds the noise of the leaves below it
            self.node_variance = (
                self._node_variance
                + leaves_below(self.structure)
                * np.broadcast_to(np.asarray(added, dtype=np.float64), (self.structure.n_trees,))[:, None]
            )
        return self

    def with_counts(
        self,
        counts: np.ndarray,
        *,
        version: int,
        n_releases: int,
        noise_variance: Any = None,
        node_variance: Any = None,
    ) -> PrivateForest:
        """The same forest (schema, settings, structure) holding other released counts, validated.

        >>> from streamdp.records.datasets import load
        >>> f = PrivateForest.create(load("congressional-voting").schema, n_trees=2, height=2, seed=1)
        >>> g = f.with_counts(f.counts + 0, version=3, n_releases=2)
        >>> (g.version, g.n_releases, g.structure is f.structure)
        (3, 2, True)
        """
        forest = PrivateForest(
            self.schema,
            self.structure,
            epsilon=self.epsilon,
            mechanism=self.mechanism,
            k=self.k,
            beta=self.beta,
            vote=self.vote,
            budget=self.budget,
            counts=counts,
            version=version,
            n_releases=n_releases,
            private=self.private,
            prior_trees=self.prior_trees,
            noise_variance=noise_variance,
        )
        forest.node_variance = node_variance
        return forest

    def holding(self, grown: PrivateForest) -> PrivateForest:
        """This forest's drawn trees and settings holding ``grown``'s release (trees cut from them by
        :meth:`grow`, as a grown model's blob holds them), ready to grow on; :class:`ValueError` unless
        ``grown``'s trees are a pruning of this forest's.

        >>> from streamdp.records.datasets import load
        >>> ds = load("congressional-voting")
        >>> spec = PrivateForest.create(ds.schema, n_trees=3, height=8, epsilon=1.0, seed=1)
        >>> grown = PrivateForest.from_bytes(spec.holding(spec).grow(ds.X, ds.y).to_bytes())
        >>> spec.holding(grown).grow(ds.X, ds.y).n_releases
        2
        """
        drawn = self.drawn
        if grown.schema.to_dict() != self.schema.to_dict() or grown.structure.n_trees != drawn.n_trees:
            raise ValueError("the grown forest has another schema or number of trees")
        mine = (self.epsilon, self.mechanism, self.k, self.beta, self.budget, self.prior_trees, self.private)
        theirs = (grown.epsilon, grown.mechanism, grown.k, grown.beta, grown.budget, grown.prior_trees, grown.private)
        if mine != theirs:
            raise ValueError(
                f"the grown forest was released with other settings (epsilon, mechanism, k, beta, "
                f"budget, prior_trees, private): {theirs}, this forest {mine}"
            )
        try:
            ids = drawn_nodes(grown.structure, drawn, self.schema.arities, self.schema.is_categorical)
            t, i = np.nonzero((grown.structure.leaf < 0) & (ids >= 0))
            same = np.array_equal(grown.structure.feature[t, i], drawn.feature[t, ids[t, i]]) and np.array_equal(
                grown.structure.threshold[t, i], drawn.threshold[t, ids[t, i]]
            )
        except IndexError:
            same = False
        if not same:
            raise ValueError("the grown forest's trees are not cut from this forest's drawn trees")
        out = PrivateForest(
            self.schema,
            grown.structure,
            epsilon=self.epsilon,
            mechanism=self.mechanism,
            k=self.k,
            beta=self.beta,
            vote=self.vote,
            budget=self.budget,
            counts=grown.counts.copy(),
            version=grown.version,
            n_releases=grown.n_releases,
            private=self.private,
            prior_trees=self.prior_trees,
            noise_variance=grown._noise_variance,
        )
        out.node_variance = grown._node_variance
        out.drawn = drawn  # what it grows from (no drawn-sized array is made)
        return out

    def noisy_delta(self, X: Any, y: Any) -> np.ndarray:
        """The private release of one batch: validate, tally, then noise exactly once."""
        enc = self.schema.encode(X, y)
        return self._noise(self._tally_valid(enc.X, enc.y))  # codes from Schema.encode are valid by construction

    def noisy_delta_encoded(self, X: np.ndarray, y: np.ndarray, rng: SecureRandom | None = None) -> np.ndarray:
        """:meth:`noisy_delta` for records already encoded by :meth:`Schema.encode`.

        ``rng``: the noise source of this one release (default: the forest's own secure
        generator); the stream service passes a keyed one (:meth:`SecureRandom.from_key`).
        """
        return self._noise(self.tally_encoded(X, y, rng), rng)

    def prior_delta_encoded(
        self, y: np.ndarray, rng: SecureRandom | None = None, epsilon: float | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """A prior-phase release: the batch's class totals in the prior stumps alone, ``epsilon`` (default the
        forest's) shared by the stumps only (a record is counted once in each stump and in no random tree:
        ``epsilon / prior_trees`` each, sequential composition over the stumps). Returns the noised delta and the
        noise variance it adds per tree (0 for the random trees). The river classifier's prior phase releases its
        first records so, at the classifier's whole epsilon (its forest has what the guard leaves).

        >>> from streamdp.records.datasets import load
        >>> f = PrivateForest.create(load("congressional-voting").schema, n_trees=2, height=2, epsilon=1.0, seed=1)
        >>> delta, var = f.prior_delta_encoded(np.array([0, 1, 1]))
        >>> bool(np.all(delta[:2] == 0)), var.tolist()[:2], bool(var[2] > 0)
        (True, [0.0, 0.0], True)
        """
        T, P = self.n_trees, self.prior_trees
        if not P:
            raise ValueError("a prior-phase release needs prior stumps (prior_trees >= 1)")
        exact = np.zeros(self.shape, dtype=np.int64)
        exact[T:, 0, :] = np.bincount(np.asarray(y, dtype=np.int64), minlength=self.shape[2])[None, :]
        real = np.zeros(self.shape, dtype=bool)
        real[T:, 0, :] = True
        eps = (self.epsilon if epsilon is None else check_epsilon(epsilon)) / P
        delta = noisy_node(exact, eps, self.mechanism, rng or self._rng, real)
        var = np.zeros(self.n_released_trees)
        var[T:] = cell_variance(self.mechanism, eps)
        return delta.astype(self.counts.dtype, copy=False), var

    def noisy_statistic(self, value: int, epsilon: float, rng: SecureRandom | None = None) -> float:
        """One integer statistic of sensitivity 1 released once with this forest's mechanism and noise source at
        ``epsilon`` (the river classifier's guard: a batch's advantage of the forest over the prior)."""
        return float(noisy_node(np.array([int(value)]), epsilon, self.mechanism, rng or self._rng)[0])

    def tally_encoded(self, X: np.ndarray, y: np.ndarray, rng: SecureRandom | None = None) -> np.ndarray:
        """The EXACT (secret) counts of an encoded batch: never publish them, noise them once.

        Includes the mechanism's own sampling, drawn from ``rng``: the disjoint budget's
        tree per record and k-anonymity's beta-sampling. The window release policy adds
        these into a worker-only accumulator and noises the window (:mod:`streamdp.release.continual`).
        """
        X, y = self._checked(X, y)
        return self._tally_valid(X, y, rng)

    def sparse_tally_encoded(
        self, X: np.ndarray, y: np.ndarray, rng: SecureRandom | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`tally_encoded`'s nonzero cells (flat indices ascending, counts; EXACT and secret), with no
        counts-sized array: what a window worker adds to the accumulator per batch (:mod:`streamdp.forest.tally`)."""
        X, y = self._checked(X, y)
        leaves = self.structure.apply(X, self.schema.is_categorical)
        return sparse_tally(leaves, y.astype(np.int64), self.shape, self.sample_mask(X.shape[0], rng or self._rng))

    def _checked(self, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """An encoded batch as arrays, refused (ValueError) unless every code would land in its own cell."""
        X = np.asarray(X)
        y = np.asarray(y)
        if X.dtype.kind not in "iuf":
            raise ValueError(f"an encoded batch holds numbers, got dtype {X.dtype}")
        if X.ndim != 2 or X.shape[1] != self.schema.n_attributes or y.shape != (X.shape[0],):
            raise ValueError(
                f"encoded batch must be X of shape (n, {self.schema.n_attributes}) and y of shape (n,), "
                f"got {X.shape} and {y.shape}"
            )
        # A code out of range would be tallied into another leaf's or class's cell.
        if y.size and (y.dtype.kind not in "iu" or y.min() < 0 or y.max() >= self.schema.n_classes):
            raise ValueError(f"encoded labels must be integers in [0, {self.schema.n_classes})")
        if X.size:
            # Two cheap passes (column minima and maxima; NaN propagates into both).
            lo, hi = X.min(axis=0), X.max(axis=0)
            if X.dtype.kind == "f" and (np.isnan(lo).any() or np.isnan(hi).any()):
                raise ValueError("encoded batch contains NaN")
            cat = self.schema.is_categorical
            if np.any(lo[cat] < 0) or np.any(hi[cat] >= self.schema.arities[cat]):
                raise ValueError("encoded categorical codes must lie in 0..arity-1 for each attribute")
        return X, y

    def sample_mask(self, n: int, rng: SecureRandom) -> np.ndarray | None:
        """Which (record, tree) pairs are counted, ``(n, n_trees + prior_trees)``; None: all of them."""
        mask = None
        if self.budget == "disjoint":
            T = self.n_released_trees  # a stump is one of the trees a record may be sent to
            mask = rng.integers(T, n)[:, None] == np.arange(T)[None, :]
        if self.mechanism == "kanon":
            keep = bernoulli_sample(self.beta, (n, self.n_released_trees), rng)
            mask = keep if mask is None else mask & keep
        return mask

    def _tally_valid(self, X: np.ndarray, y: np.ndarray, rng: SecureRandom | None = None) -> np.ndarray:
        return self.tally_on(self.structure, X, y, self.sample_mask(X.shape[0], rng or self._rng))

    def tally_on(self, structure: ForestStructure, X: np.ndarray, y: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        """EXACT (secret) counts of checked encoded records on ``structure`` (this forest's or a pruned one),
        counting the (record, tree) pairs of ``mask`` (:meth:`sample_mask`; None: all)."""
        leaves = structure.apply(X, self.schema.is_categorical)
        shape = (structure.n_trees, structure.max_leaves, self.schema.n_classes)
        return tally(leaves, y.astype(np.int64), shape, mask)

    def _noise(self, counts: np.ndarray, rng: SecureRandom | None = None) -> np.ndarray:
        # One rule for every release (batch, window, tree node): continual.noisy_node, real cells only; the
        # callers pass a fresh tally, noised in place (one counts-sized array, not two).
        return noisy_node(
            counts, self.epsilon_per_tree, self.mechanism, rng or self._rng, self.real_cells, self.k, in_place=True
        )

    def _padding_nonzero(self, a: np.ndarray) -> bool:
        """Whether ``a`` holds anything past a tree's last leaf (slices: no counts-sized temporaries)."""
        return any(a[t, n:].any() for t, n in enumerate(self.structure.n_leaves.tolist()))

    @functools.cached_property
    def real_cells(self) -> np.ndarray:
        """Boolean mask of the cells that exist (a tree's leaves; padding past its last leaf is not); do not modify."""
        return (np.arange(self.structure.max_leaves)[None, :] < self.structure.n_leaves[:, None])[:, :, None].repeat(
            self.schema.n_classes, axis=2
        )

    # -- prediction --------------------------------------------------------------
    def apply(self, X: Any) -> np.ndarray:
        """Leaf number of each record in each tree, stumps included, shape ``(n, n_trees + prior_trees)``."""
        enc = self.schema.encode(X)
        return self.structure.apply(enc.X, self.schema.is_categorical)

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities, columns in the schema's label order.

        Raises :class:`~streamdp.validation.NotFittedError` before the first release (``fit``, or a stream
        model's first merge) when no counts were given: zero counts would give the first class for every record."""
        if not self.n_releases and not self._counts.any():
            raise NotFittedError(
                "this PrivateForest has released no counts yet (n_releases is 0): call fit, or wait for the stream "
                "model's first release"
            )
        return self.proba_from_leaves(self.apply(X))

    def predict(self, X: Any) -> np.ndarray:
        codes = self.predict_proba(X).argmax(axis=1)
        return np.asarray(list(self.schema.decode_labels(codes))) if len(codes) else np.empty(0)

    @property
    def cell_variance(self) -> float:
        """Public variance of the noise one release puts on a cell (:func:`streamdp.estimation.cell_variance`)."""
        return cell_variance(self.mechanism, self.epsilon_per_tree, self.k)

    @property
    def estimator(self) -> str:
        """ "shrink" (noise-aware, :mod:`streamdp.estimation`) or "leaf" (the rule before); post-processing only."""
        return self._estimator

    @estimator.setter
    def estimator(self, value: str) -> None:
        self._estimator = check_choice(value, "estimator", ESTIMATORS)

    @property
    def noise_variance(self) -> np.ndarray:
        """Public variance of the noise on each tree's cells as the counts stand, ``(n_trees + prior_trees,)``.

        The releases' noises add up: ``n_releases * cell_variance`` unless a release
        said otherwise (a pruned fit's probe leaves its trees less budget; a stream's
        binary tree mechanism publishes sums of fewer nodes). What estimation weighs
        the counts by. Set it with a number or an array (per tree); None: the default.
        """
        if self._noise_variance is None:
            return np.full(self.structure.n_trees, self.n_releases * self.cell_variance)
        return self._noise_variance

    @noise_variance.setter
    def noise_variance(self, value: Any) -> None:
        if value is None:
            self._noise_variance = None
            return
        v = np.broadcast_to(np.asarray(value, dtype=np.float64), (self.structure.n_trees,)).copy()
        if not np.all(np.isfinite(v)) or np.any(v < 0):
            raise ValueError("noise_variance must be finite and >= 0")
        v.flags.writeable = False
        self._noise_variance = v

    @property
    def node_variance(self) -> np.ndarray:
        """Public noise variance of each node's count of one class, ``(n_trees + prior_trees, max_nodes)``.

        By default :attr:`noise_variance` times the leaves below the node (each
        release noised every leaf). Trees grown release by release
        (:meth:`grow`) keep their own: a node that was a leaf for some releases
        carries less noise than the leaves now below it.
        """
        if self._node_variance is None:
            return leaves_below(self.structure) * self.noise_variance[:, None]
        return self._node_variance

    @node_variance.setter
    def node_variance(self, value: Any) -> None:
        if value is None:
            self._node_variance = None
            return
        v = np.array(value, dtype=np.float64)
        if v.shape != self.structure.feature.shape or not np.all(np.isfinite(v)) or np.any(v < 0):
            raise ValueError(f"node_variance must be finite, >= 0 and of shape {self.structure.feature.shape}")
        v.flags.writeable = False
        self._node_variance = v

    def estimation_nodes(self) -> ForestNodes:
        """Every node's noisy counts and public noise variance (:class:`streamdp.estimation.ForestNodes`), cached per release."""
        nv, cp = self._node_variance, self.__dict__.get("class_prior")
        key = (
            self.version,
            id(self._counts),
            self.noise_variance.tobytes(),
            None if nv is None else nv.tobytes(),
            None if cp is None else cp.tobytes(),
        )
        if self.__dict__.get("_nodes_key") != key:
            s = self.structure
            if self.__dict__.get("_layout_of") is not s:  # the structure's part, once per structure
                self._layout, self._layout_of = ForestNodes.layout(s.feature, s.child, s.leaf, self.prior_trees), s
            self._nodes = ForestNodes.build(
                s.feature,
                s.child,
                s.leaf,
                self._counts,
                self.noise_variance,
                self.prior_trees,
                self.record_share,
                self._layout,
                nv,
                cp,
            )
            self._nodes_key, self._tables = key, {}
        return self._nodes

    def leaf_proba(self) -> np.ndarray:
        """Estimated class distribution of every leaf of the random trees, ``(n_trees, max_leaves, n_classes)``.

        Post-processing of the released counts by :mod:`streamdp.estimation`
        (``self.estimator``: "shrink", the noise-aware rule within each tree, or
        "leaf", the leaf's clipped counts alone). This is what each tree votes
        with under ``vote="majority"``; ``vote="proba"`` pools the trees along
        the record's paths instead (:meth:`ForestNodes.path_proba`).
        """
        if self.estimator == "leaf":
            return leaf_rule_proba(self._counts[: self.n_trees])
        nodes = self.estimation_nodes()
        if self.vote not in self._tables:  # cached per release and vote (vote may be changed on a fitted forest)
            # A majority vote pools T independent trees: each tree's bar is lowered by sqrt(T).
            self._tables[self.vote] = nodes.leaf_proba(
                SNR_MIN / math.sqrt(self.n_trees) if self.vote == "majority" else None
            )
        return self._tables[self.vote]

    def prior(self) -> np.ndarray:
        """The vote's class prior: :func:`streamdp.estimation.forest_prior` (every tree's root totals,
        stumps included, inverse-variance weighted); under ``estimator="leaf"`` (the rule before) the
        random trees' clipped counts summed, normalised."""
        if self.estimator == "leaf":
            return prior_from(np.maximum(self._counts[: self.n_trees], 0))
        return self.estimation_nodes().prior

    def proba_from_leaves(self, leaves: np.ndarray) -> np.ndarray:
        """The vote: class probabilities from each record's leaf numbers ``(n, n_trees)`` (:meth:`apply`).

        ``vote="proba"``: the noise-aware rule pooled over the trees along the
        record's paths (:meth:`ForestNodes.path_proba`; under ``estimator="leaf"``,
        Fan et al.'s clipped leaf counts summed, the :meth:`prior` when all are 0);
        ``"majority"``: each tree votes the argmax of its leaf's :meth:`leaf_proba`,
        ties to the class with the larger :meth:`prior`.
        """
        # Only the random trees vote (prior stumps inform the prior in estimation_nodes alone).
        T, L, C = self.n_trees, self.structure.max_leaves, self.schema.n_classes
        leaves = leaves[:, :T]
        if self.vote == "proba":
            if self.estimator == "shrink":
                return self.estimation_nodes().path_proba(leaves)
            # Fan et al.: the trees' clipped counts pooled, the clipped prior when all are 0
            pos = np.clip(self._counts[:T], 0, None).astype(np.float64).reshape(T * L, C)
            s = pos[leaves + np.arange(T, dtype=np.int64) * L].sum(axis=1)
            tot = s.sum(axis=1, keepdims=True)
            return np.where(tot > 0, s / np.where(tot > 0, tot, 1), self.prior())
        # majority: each tree votes its leaf's argmax; ties go to the class with the larger prior.
        cells = self.leaf_proba().reshape(T * L, C)[leaves + np.arange(T, dtype=np.int64) * L]  # (n, T, C)
        prior = self.prior()
        rank = np.argsort(np.argsort(prior, kind="stable"), kind="stable") + 1
        top = cells.max(axis=2, keepdims=True)
        votes = np.where(cells == top, rank, 0).argmax(axis=2)  # (n, T)
        proba = np.zeros((len(leaves), C))
        np.add.at(proba, (np.repeat(np.arange(len(leaves)), T), votes.ravel()), 1.0)
        return proba / T

    # -- serialization -----------------------------------------------------------
    def to_bytes(self) -> bytes:
        """Self-describing msgpack blob; holds no seed and nothing the noise could be rebuilt from."""
        return blob.dumps(
            FORMAT,
            FORMAT_VERSION,
            {
                "schema": self.schema.to_dict(),
                "params": {
                    "n_trees": self.n_trees,
                    "height": self.height,
                    "mechanism": self.mechanism,
                    "k": self.k,
                    "beta": self.beta,
                    "vote": self.vote,
                    "budget": self.budget,
                    "prior_trees": self.prior_trees,
                },
                "privacy": {"epsilon": self.epsilon, "delta": self.delta, "private": self.private},
                # an all-categorical forest's thresholds (all +inf) and a fresh model's counts: shape and value alone
                "structure": {
                    name: blob.pack_array(a, fill_ok=name == "threshold") for name, a in self.structure.arrays().items()
                },
                "counts": blob.pack_array(self._counts, fill_ok=True),
                "version": self.version,
                "n_releases": self.n_releases,
                "noise_variance": None if self._noise_variance is None else [float(v) for v in self._noise_variance],
                "node_variance": None if self._node_variance is None else blob.pack_array(self._node_variance),
                "created": time.time(),
            },
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> PrivateForest:
        """Load a blob produced by :meth:`to_bytes`; raises :class:`ValueError` on anything malformed."""
        return cls.from_doc(blob.loads(data, FORMAT, FORMAT_VERSION))

    @classmethod
    def from_doc(cls, doc: dict) -> PrivateForest:
        """:meth:`from_bytes` of a blob already decoded by ``blob.loads(data, FORMAT, FORMAT_VERSION)``: a caller
        that drops the blob's bytes before this step never holds them and their decoded copy at once.
        The structure's arrays view the document's bytes (no copy)."""
        if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("format_version") != FORMAT_VERSION:
            raise blob.BlobError(f"not a decoded {FORMAT} blob (use blob.loads(data, {FORMAT!r}, {FORMAT_VERSION}))")
        try:
            schema = Schema.from_dict(blob.field(doc, "schema", dict, FORMAT))
            params = blob.field(doc, "params", dict, FORMAT)
            privacy = blob.field(doc, "privacy", dict, FORMAT)
            sdoc = blob.field(doc, "structure", dict, FORMAT)
            arrays = {
                name: blob.unpack_array(sdoc.get(name), name) for name in ("feature", "child", "leaf", "n_leaves")
            }
            arrays["threshold"] = blob.unpack_array(
                sdoc.get("threshold"), "threshold", fill_shape=np.shape(arrays["feature"])
            )
            height = blob.field(params, "height", int, FORMAT)
            structure = ForestStructure.from_arrays(arrays, height, schema)
            prior_trees = (
                blob.field(params, "prior_trees", int, FORMAT) if "prior_trees" in params else 0
            )  # older blobs
            if prior_trees < 0 or blob.field(params, "n_trees", int, FORMAT) + prior_trees != structure.n_trees:
                raise blob.BlobError(f"{FORMAT}: n_trees + prior_trees does not match the structure")
            mechanism = blob.field(params, "mechanism", str, FORMAT)
            counts = blob.unpack_array(  # a spec's all-zero counts: their shape alone, which must be the structure's
                doc.get("counts"),
                "counts",
                "<f8" if mechanism == "laplace" else "<i8",
                ndim=3,
                fill_shape=(structure.n_trees, structure.max_leaves, schema.n_classes),
            )
            version = blob.field(doc, "version", int, FORMAT)
            n_releases = blob.field(doc, "n_releases", int, FORMAT)
            if version < 0 or n_releases < 0:
                raise blob.BlobError(f"{FORMAT}: version and n_releases must be non-negative")
            forest = cls(
                schema,
                structure,
                epsilon=blob.field(privacy, "epsilon", (int, float), FORMAT),
                mechanism=mechanism,
                k=params.get("k"),
                beta=params.get("beta"),
                vote=blob.field(params, "vote", str, FORMAT),
                budget=blob.field(params, "budget", str, FORMAT),
                # an all-zero blob (a model's spec) gets fresh zeros: untouched pages, no resident copy
                counts=counts.copy() if counts.any() else np.zeros(counts.shape, counts.dtype.newbyteorder("=")),
                version=version,
                n_releases=n_releases,
                private=bool(blob.field(privacy, "private", bool, FORMAT)),
                prior_trees=prior_trees,
                noise_variance=doc.get("noise_variance"),  # absent or None: n_releases * cell_variance
            )
            if doc.get("node_variance") is not None:  # trees grown release by release
                forest.node_variance = blob.unpack_array(doc["node_variance"], "node_variance", "<f8", ndim=2)
        except blob.BlobError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise blob.BlobError(f"{FORMAT}: inconsistent blob ({e})") from None
        return forest

    def __repr__(self) -> str:
        d = f", delta={self.delta:.3g}" if self.delta else ""
        return (
            f"PrivateForest(n_trees={self.n_trees}, prior_trees={self.prior_trees}, height={self.height}, epsilon={self.epsilon:g}{d}, "
            f"mechanism={self.mechanism!r}, version={self.version}, releases={self.n_releases})"
        )
