"""The differentially private random forest (Private-RDT, Jagannathan et al.).

>>> from streamdp.records.datasets import load
>>> ds = load("congressional-voting")
>>> forest = PrivateForest.create(ds.schema, n_trees=5, height=2, epsilon=1.0, seed=2)
>>> _ = forest.fit(ds.X[:300], ds.y[:300])
>>> acc = (forest.predict(ds.X[300:]) == ds.y[300:]).mean()
>>> bool(acc > 0.75)
True

Privacy in one paragraph: the structure is drawn from the schema alone. One record lands in exactly one cell of
each tree's leaf vector, so one tree's vector has L1 sensitivity 1. ``budget="split"`` lets every tree see every
record and gives each tree ``epsilon / n_trees`` (sequential composition); ``budget="disjoint"`` routes each record
to one tree chosen at random and gives each tree the full ``epsilon`` (parallel composition). ``update`` is
Jagannathan's procedure: the new batch alone is tallied into an empty clone, noised once with the same scale, and
added; batches are disjoint, so the model stays ``epsilon``-DP however many batches it absorbs (parallel
composition). With ``mechanism="kanon"`` each (record, tree) pair is kept with probability ``beta`` and cells below
``k`` are zeroed (Li–Qardaji–Su): the forest is ``(epsilon, delta)``-DP with ``delta`` from :func:`kanon_delta`.
``mechanism="laplace"`` adds Laplace noise on a power-of-two grid (:func:`streamdp.privacy.noise.laplace_noise`,
closed to Mironov's floating-point attack); ``"geometric"`` (the default) adds integer noise.

Height as a ceiling: :meth:`PrivateForest.fit` releases the prior stumps first
and prunes each random tree where its nodes cannot expect enough records to
stand above the noise (a probe of the leaf totals, 10% of each tree's budget,
finds where records concentrate), then releases the pruned trees: the same
per-tree epsilon, decisions read released numbers only
(:meth:`PrivateForest.fit_encoded`). :meth:`PrivateForest.grow` continues it
release by release (the trees deepen as the released counts allow, never past
the drawn height: :mod:`streamdp.forest.growth`, the service's ``release="grow"``);
``update`` of trees so cut is a grown release too, and adds to drawn trees as they are.

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

Thresholds where the data is: with ``threshold_share`` ``s > 0`` the trees' first release (the one-shot fit,
or a fresh forest's first update or grow) first spends ``s * epsilon`` on noisy numeric histograms and redraws
the thresholds from them; later releases keep the whole epsilon (:mod:`streamdp.forest.first_release`).
"""

from __future__ import annotations

import math
import warnings
from typing import Any, cast

import numpy as np

from streamdp.forest import persistence
from streamdp.forest.first_release import FirstRelease
from streamdp.forest.growing import Growing
from streamdp.forest.marginals import Marginals
from streamdp.forest.node_links import leaves_below
from streamdp.forest.persistence import FORMAT, FORMAT_VERSION
from streamdp.forest.releasing import BatchReleases
from streamdp.forest.structure import DEFAULT_MAX_CELLS, ForestStructure
from streamdp.forest.thresholds import default_threshold_share
from streamdp.forest.voting import Voting
from streamdp.options import BUDGETS, DEFAULT_N_TREES, MAX_PRIOR_TREES, MECHANISMS
from streamdp.privacy.ledger import refit_words
from streamdp.privacy.mechanisms import NotPrivateWarning, SecureRandom, kanon_check, kanon_delta
from streamdp.records.schema import Numeric, Schema
from streamdp.release.variance import warn_nearly_exact
from streamdp.validation import Interval, check_choice, check_epsilon, check_integer

__all__ = ["PrivateForest", "MECHANISMS", "FORMAT", "FORMAT_VERSION", "default_threshold_share"]


class PrivateForest(BatchReleases, FirstRelease, Growing, Voting):
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
        threshold_share: float = 0.0,
        threshold_spent: float = 0.0,
    ):
        check_choice(mechanism, "mechanism", MECHANISMS)
        share = Interval(float, 0, 1, closed="left").check(threshold_share, "threshold_share")
        spent = Interval(float, 0, 1, closed="left").check(threshold_spent, "threshold_spent")
        if (share or spent) and mechanism == "kanon":
            raise ValueError("threshold_share applies to mechanism='geometric' or 'laplace', not 'kanon' (use 0)")
        if share and not any(isinstance(a, Numeric) for a in schema.attributes):
            raise ValueError(f"threshold_share={share:g} needs a numeric attribute; this schema has none (use 0)")
        #: Share of epsilon the trees' first release spends on the numeric attributes' noisy histograms.
        self.threshold_share = share
        #: Share the thresholds took of the first release's epsilon (0: none yet; later releases keep the whole).
        self.threshold_spent = spent
        #: The released densities the current trees' thresholds were drawn from (None: uniform or declared).
        self.marginals: Marginals | None = None
        check_choice(budget, "budget", BUDGETS)
        check_epsilon(epsilon, allow_inf=True)
        self.schema = schema
        self.structure = structure
        self.drawn = structure  # what fit starts from (a fit may replace self.structure by a pruned one)
        self.prior_trees = self._check_stumps(structure, prior_trees, schema.n_attributes)
        self.mechanism = mechanism
        self.vote = vote  # (checked: the property's setter)
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
        n_trees: int | None = None,
        height: int | None = None,
        epsilon: float = 1.0,
        mechanism: str = "geometric",
        k: int | None = None,
        beta: float | None = None,
        seed: int | None = None,
        *,
        vote: str | None = None,
        budget: str = "split",
        noise_seed: int | None = None,
        max_cells: int = DEFAULT_MAX_CELLS,
        prior_trees: int = 1,
        threshold_share: float | None = None,
    ) -> PrivateForest:
        """Draw the random structure from ``schema`` and return an empty private forest.

        ``seed`` makes the structure reproducible (it is public anyway); the noise stays fresh and secure.
        ``noise_seed`` is for tests only and marks the forest as not private, as ``epsilon=inf`` (exact counts)
        does, which warns once, here (:class:`~streamdp.privacy.NotPrivateWarning`, a ``UserWarning``); a finite
        epsilon so large that a release's counts are nearly exact warns here too (:class:`~streamdp.privacy.NearlyExactWarning`).
        ``prior_trees`` single-leaf trees are appended after the ``n_trees`` random ones (module docstring; 0 gives
        the forest without them). ``threshold_share``: the share of ``epsilon`` :meth:`fit` spends drawing numeric
        thresholds where the records are (module docstring); None: :func:`default_threshold_share`. ``n_trees``
        None: :data:`DEFAULT_N_TREES` drawn, of which :meth:`fit` keeps as many as the released signal carries
        (:mod:`streamdp.forest.sizing`). ``vote`` None: ``"trees"`` (each tree's estimate averaged,
        :meth:`proba_from_leaves`) with ``n_trees`` None, else ``"proba"`` (docs/decisions/026-tree-mean-vote.md).
        """
        check_integer(prior_trees, "prior_trees", low=0, high=MAX_PRIOR_TREES)  # before drawing anything
        if math.isinf(check_epsilon(epsilon, allow_inf=True)):  # said where it is made, as river says its seed
            msg = "PrivateForest.create(epsilon=inf) adds no noise: for tests only, the model is NOT private"
            warnings.warn(msg, NotPrivateWarning, stacklevel=2)
        if threshold_share is None:
            threshold_share = default_threshold_share(schema, mechanism)
        sized, n_trees = n_trees is None, DEFAULT_N_TREES if n_trees is None else n_trees
        vote = ("trees" if sized else "proba") if vote is None else vote
        structure = ForestStructure.draw(schema, n_trees, height, seed=seed, max_cells=max_cells)
        forest = cls(
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
            threshold_share=threshold_share,
        )
        forest.trees_by_signal = sized
        warn_nearly_exact("PrivateForest.create", forest.epsilon, mechanism, budget, n_trees, prior_trees)
        return forest

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
        """Each tree's epsilon for the counts of a release, shared by the budget: the whole epsilon, but what the
        thresholds leave during the first release that draws them (:mod:`streamdp.forest.first_release`)."""
        counts = self._epsilon * self._counts_share
        return counts / self.n_released_trees if self.budget == "split" else counts

    @property
    def record_share(self) -> float:
        """Probability that a record is counted in a given tree (public: disjoint routing, k-anonymity sampling)."""
        share = 1.0 / self.n_released_trees if self.budget == "disjoint" else 1.0
        if self.mechanism == "kanon":
            assert self.beta is not None  # __init__ requires it for k-anonymity
            return share * self.beta
        return share

    @property
    def noise_scale(self) -> float:
        """Laplace scale b of the noise a release puts on every cell at :attr:`epsilon_per_tree` (the next release's:
        ``(n_trees + prior_trees)/epsilon`` with the split budget; :attr:`noise_variance` holds what was released)."""
        return 0.0 if self.mechanism == "kanon" else 1.0 / self.epsilon_per_tree

    def _kanon_forest_delta(self) -> float:
        assert self.k is not None and self.beta is not None  # __init__ requires them for k-anonymity
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
        so a prior stump's total (one cell per class) outweighs a tall tree's, whose many leaves' noise the
        plain mean would let dominate. Disjoint: the totals' sum."""
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
        if self.mechanism == "kanon":
            assert self.beta is not None  # __init__ requires it for k-anonymity
            est /= self.beta
        return max(0.0, est)

    # -- learning ----------------------------------------------------------------
    def fit(self, X: Any, y: Any, *, prune: bool = True) -> PrivateForest:
        """Private-RDT on one dataset: replaces the counts with one noisy release of ``(X, y)``.

        With ``prune`` (and at least one prior stump) the height is a ceiling:
        see :meth:`fit_encoded`.
        """
        enc = self.schema.encode(X, y)
        return self.fit_encoded(enc.X, cast(np.ndarray, enc.y), prune=prune)

    def fit_encoded(
        self, X: np.ndarray, y: np.ndarray, *, prune: bool = True, rng: SecureRandom | None = None
    ) -> PrivateForest:
        """:meth:`fit` for records already encoded by :meth:`Schema.encode`.

        Pruning (``prune=True``, at least one prior stump, finite epsilon):
        :mod:`streamdp.forest.pruning` (the rule and its privacy),
        the first release of :func:`streamdp.forest.growth.grown_release` with a probe. The structure, its height and the counts' shape become
        the pruned ones; :meth:`update` grows them further. A refit starts again from
        the structure the forest was built with (a forest loaded from a blob:
        the structure the blob holds, so a pruned blob cannot grow back). A forest that holds a release
        already warns: fitting again releases its records again (``epsilon`` more, sequential composition),
        which :attr:`epsilon` does not count.
        """
        if self.n_releases and not math.isinf(self.epsilon):
            warnings.warn(refit_words("forest", self.epsilon), UserWarning, stacklevel=3)
        rng = rng or self._rng
        self._fresh()  # a refit starts from the drawn trees, not an earlier fit's pruning or tree count
        self.threshold_spent, self.marginals = 0.0, None
        with self.first_release(X, y, rng, due=True) as first:  # a share: the thresholds from these records
            if prune and self.prior_trees and not math.isinf(self.epsilon):  # no noise: nothing to prune against
                return self._sized(*self._checked(X, y), rng)
            self._counts = self._noise(self.tally_encoded(X, y, rng), rng)
            self._node_variance = None
            self.noise_variance = self.cell_variance if first else None
        self.version += 1
        self.n_releases = 1
        return self

    def update(self, X: Any, y: Any) -> PrivateForest:
        """Jagannathan's update: tally only the new records, noise that delta once, add it.

        On trees cut from the drawn ones (a pruned :meth:`fit` or :meth:`grow`, while the forest
        :attr:`can_grow`), the release is :meth:`grow`'s: the trees may deepen where the records
        released so far stand clear of the noise, so a fit on the first records of a stream does not
        keep trees sized for them. Why: a tree pruned for a few records, updated with many, stays
        at the majority share; deepening as the released counts allow is what :meth:`grow` measures.
        Privacy: a grown release costs what this update costs (:mod:`streamdp.forest.growth`: each
        release noised once with the same budget, the cut a function of released numbers), so the model
        stays ``epsilon``-DP over disjoint batches either way. A forest on its drawn trees (``prune=False``,
        no stump, no noise, k-anonymity, or a pruned blob loaded without its drawn trees) adds to them.

        >>> from streamdp.records.datasets import load
        >>> ds = load("congressional-voting")
        >>> f = PrivateForest.create(ds.schema, n_trees=5, height=8, epsilon=1.0, seed=1).fit(ds.X[:40], ds.y[:40])
        >>> f.update(ds.X[40:], ds.y[40:]).n_releases
        2
        """
        enc = self.schema.encode(X, y)
        return self.update_encoded(enc.X, cast(np.ndarray, enc.y))

    def update_encoded(self, X: np.ndarray, y: np.ndarray, rng: SecureRandom | None = None) -> PrivateForest:
        """:meth:`update` for records already encoded by :meth:`Schema.encode` (``rng``: the release's noise
        source, default the forest's own)."""
        if self.structure is not self.drawn and self.can_grow:
            return self.grow_encoded(X, y, rng)
        return self._fixed_release(X, y, rng)  # a fresh forest's first: the thresholds too (first_release)

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
        self._counts = self._counts if self._counts.flags.writeable else self._counts.copy()  # (a fetch's view)
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
            threshold_share=self.threshold_share,
            threshold_spent=self.threshold_spent,
        )
        forest.marginals = self.marginals
        forest.node_variance = node_variance
        return forest

    # -- serialization (streamdp.forest.persistence) -----------------------------
    def to_bytes(self) -> bytes:
        """Self-describing msgpack blob; holds no seed and nothing the noise could be rebuilt from."""
        return persistence.to_bytes(self)

    @classmethod
    def from_bytes(cls, data: bytes) -> PrivateForest:
        """Load a blob produced by :meth:`to_bytes`; raises :class:`ValueError` on anything malformed."""
        return cls.from_doc(persistence.loads(data))

    @classmethod
    def from_doc(cls, doc: dict) -> PrivateForest:
        """:meth:`from_bytes` of a blob already decoded by ``persistence.loads(data)``: a caller
        that drops the blob's bytes before this step never holds them and their decoded copy at once.
        The structure's arrays view the document's bytes (no copy)."""
        return persistence.from_doc(cls, doc)

    def __repr__(self) -> str:
        d = f", delta={self.delta:.3g}" if self.delta else ""
        d += f", threshold_share={self.threshold_share:g}" if self.threshold_share else ""
        return (
            f"PrivateForest(n_trees={self.n_trees}, prior_trees={self.prior_trees}, height={self.height}, epsilon={self.epsilon:g}{d}, "
            f"mechanism={self.mechanism!r}, version={self.version}, releases={self.n_releases})"
        )
