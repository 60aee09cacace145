"""The height as a ceiling: a forest's trees cut from the drawn ones and grown release by release.

:class:`Growing` is the part of :class:`~streamdp.forest.model.PrivateForest` that holds the releases
of :func:`~streamdp.forest.growth.grown_release` (the rule and its privacy are in
:mod:`streamdp.forest.growth` and :mod:`streamdp.forest.pruning`), kept apart from the fixed-structure
release so that a structure only ever changes here.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self, cast

import numpy as np

from streamdp.forest import pruning
from streamdp.forest.growth import aggregate, drawn_nodes, grown_release, held_leaves
from streamdp.forest.marginals import Marginals
from streamdp.forest.sizing import kept_tree_epsilon, sized_stumps
from streamdp.forest.structure import ForestStructure
from streamdp.privacy.mechanisms import SecureRandom
from streamdp.records.schema import Schema

__all__ = ["Growing"]


class Growing:
    """Pruned fits, growth and holding a grown release for a :class:`~streamdp.forest.model.PrivateForest` (a mixin)."""

    if TYPE_CHECKING:  # what the forest provides
        schema: Schema
        structure: ForestStructure
        drawn: ForestStructure
        mechanism: str
        k: int | None
        beta: float | None
        vote: str
        budget: str
        prior_trees: int
        private: bool
        version: int
        n_releases: int
        _rng: SecureRandom
        _counts: np.ndarray
        _noise_variance: np.ndarray | None
        _node_variance: np.ndarray | None
        threshold_share: float
        threshold_spent: float
        marginals: Marginals | None

        def __init__(self, schema: Schema, structure: ForestStructure, **kwargs: Any) -> None: ...
        @property
        def n_trees(self) -> int: ...
        @property
        def epsilon(self) -> float: ...
        @property
        def epsilon_per_tree(self) -> float: ...
        @property
        def counts(self) -> np.ndarray: ...
        @property
        def shape(self) -> tuple[int, int, int]: ...
        @property
        def noise_variance(self) -> np.ndarray: ...
        @noise_variance.setter
        def noise_variance(self, value: Any) -> None: ...
        @property
        def node_variance(self) -> np.ndarray: ...
        @node_variance.setter
        def node_variance(self, value: Any) -> None: ...
        def merge(self, delta: np.ndarray, releases: int = 1, variance: Any = None) -> Self: ...
        def _fixed_release(self, X: np.ndarray, y: np.ndarray, rng: SecureRandom | None = None) -> Self: ...
        def first_release(
            self, X: np.ndarray, y: np.ndarray, rng: SecureRandom | None = None, due: bool | None = None
        ) -> contextlib.AbstractContextManager[bool]: ...
        def _checked(self, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...
        def sample_mask(self, n: int, rng: SecureRandom) -> np.ndarray | None: ...
        def tally_on(
            self, structure: ForestStructure, X: np.ndarray, y: np.ndarray, mask: np.ndarray | None
        ) -> np.ndarray: ...

    #: Whether the one-shot fit keeps only as many of the drawn trees as the released signal carries
    #: (:mod:`streamdp.forest.sizing`): set by :meth:`PrivateForest.create` for the default tree count.
    trees_by_signal: bool = False

    def _forget_cells(self) -> None:
        """The structure changed: its cached masks of real cells are dropped (recomputed when next read)."""
        self.__dict__.pop("real_cells", None)
        self.__dict__.pop("real_rows", None)

    def _fresh(self) -> None:
        """Before a fit: back to the trees the forest was built with (not an earlier fit's pruning or count)."""
        self.drawn = self.__dict__.get("_all_drawn", self.drawn)
        if self.structure is not self.drawn:
            self.structure = self.drawn
            self._forget_cells()

    def _sized(self, X: np.ndarray, y: np.ndarray, rng: SecureRandom) -> Self:
        """The one-shot fit's pruned release (checked encoded records), its tree count sized first where
        :attr:`trees_by_signal` (:mod:`streamdp.forest.sizing`: the rule and its privacy)."""
        self.n_releases = 0
        if not (self.trees_by_signal and self.budget == "split" and self.mechanism != "kanon"):
            self._counts = np.zeros(self.shape, dtype=self._counts.dtype)
            return self._grown(X, y, rng)
        T, P = self.n_trees, self.prior_trees
        exact = np.stack([np.bincount(y, minlength=self.schema.n_classes)] * P)[:, None, :]
        e = self.epsilon_per_tree * (T + P)  # the counts' budget
        k, stumps, var = sized_stumps(exact, e, T, P, self.mechanism, rng)
        if k < T:
            self.__dict__.setdefault("_all_drawn", self.drawn)
            self.drawn = self.structure = self.drawn.rows(np.r_[0:k, T : T + P])
            self._forget_cells()
        self._counts = np.zeros(self.shape, dtype=self._counts.dtype)
        tally = self._tallies(X, y, rng)[0]
        kept = kept_tree_epsilon(e, T, P, k)
        return self._released(*grown_release(self, tally, exact, rng, pruning.PRUNE_PROBE, (stumps, var), kept))

    @property
    def can_grow(self) -> bool:
        """Whether :meth:`grow` cuts the trees (:meth:`growable` of this forest's parameters)."""
        return self.growable(self.epsilon, self.mechanism, self.prior_trees)

    @staticmethod
    def growable(epsilon: float, mechanism: str, prior_trees: int = 1) -> bool:
        """Whether a forest of these parameters can grow: a prior stump to count the records, noise to weigh
        them against, not k-anonymity (whose delta is for one release per tree).

        >>> from streamdp import PrivateForest
        >>> PrivateForest.growable(1.0, "geometric"), PrivateForest.growable(float("inf"), "geometric")
        (True, False)
        """
        return bool(prior_trees) and not math.isinf(epsilon) and mechanism != "kanon"

    def _released(self, structure: ForestStructure, counts: np.ndarray, node_var: np.ndarray) -> Self:
        """Hold one more release that may change the structure (:mod:`streamdp.forest.growth`)."""
        old = self.structure
        if old.feature.shape == structure.feature.shape and all(
            np.array_equal(getattr(old, k), getattr(structure, k)) for k in ("feature", "child", "leaf", "threshold")
        ):
            structure = old  # the same trees: keep the object, and what readers derived from it (routes, layouts)
        self.structure = structure
        self._forget_cells()
        self._counts = counts
        self.node_variance = node_var
        # per tree, the noise of its noisiest leaf cell (what a reader without node variances assumes)
        self.noise_variance = np.max(np.where(structure.leaf >= 0, node_var, 0.0), axis=1)
        self.version += 1
        self.n_releases += 1
        return self

    def grow(self, X: Any, y: Any) -> Self:
        """:meth:`update` with the height as a ceiling: one release of the batch that may deepen the trees.

        :mod:`streamdp.forest.growth` (the rule, its privacy): a fresh forest starts
        from its roots and every batch may split further where the records
        seen so far stand clear of the noise, never past the drawn height.
        Needs a prior stump and geometric or Laplace noise (else, k-anonymity or
        no noise included, it is :meth:`update`). A fresh
        forest's first :meth:`grow` is a pruned :meth:`fit` (with its probe, and its thresholds with a share);
        a forest updated on its drawn trees keeps them.
        """
        enc = self.schema.encode(X, y)
        return self.grow_encoded(enc.X, cast(np.ndarray, enc.y))

    def grow_encoded(self, X: np.ndarray, y: np.ndarray, rng: SecureRandom | None = None) -> Self:
        """:meth:`grow` for records already encoded by :meth:`Schema.encode`."""
        if not self.can_grow:
            return self._fixed_release(X, y, rng)
        X, y = self._checked(X, y)
        with self.first_release(X, y, rng):  # a fresh forest's first release: the thresholds too
            return self._grown(X, y, rng or self._rng)

    def _grown(self, X: np.ndarray, y: np.ndarray, rng: SecureRandom) -> Self:
        """One grown release of checked encoded records (with the probe a fresh forest spends)."""
        return self._released(*grown_release(self, *self._tallies(X, y, rng), rng, probe=pruning.PRUNE_PROBE))

    def grow_exact(self, exact: np.ndarray, rng: SecureRandom | None = None) -> Self:
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
        held = held_leaves(exact)  # (the same for every pruning tried)
        return self._released(
            *grown_release(
                self,
                lambda s: aggregate(exact, drawn, s, arities, is_cat, held),
                exact[self.n_trees :, :1],
                rng or self._rng,
                probe=pruning.PRUNE_PROBE,
            )
        )

    def _tallies(
        self, X: np.ndarray, y: np.ndarray, rng: SecureRandom
    ) -> tuple[Callable[[ForestStructure], np.ndarray], np.ndarray]:
        """What :func:`~streamdp.forest.growth.grown_release` reads of checked encoded records: their exact tally
        on any pruning of the drawn trees and the stumps' exact counts, under one sampling mask."""
        T, C = self.n_trees, self.schema.n_classes
        mask = self.sample_mask(len(y), rng)
        stumps = np.stack(
            [np.bincount(y if mask is None else y[mask[:, T + j]], minlength=C) for j in range(self.prior_trees)]
        )[:, None, :]
        return (lambda s: self.tally_on(s, X, y, mask)), stumps

    def holding(self, grown: Self, *, copy: bool = True) -> Self:
        """This forest's drawn trees and settings holding ``grown``'s release (trees cut from them by
        :meth:`grow`, as a grown model's blob holds them), ready to grow on; :class:`ValueError` unless
        ``grown``'s trees are a pruning of this forest's.

        ``copy=False``: the result holds ``grown``'s counts and node variances themselves, not copies (a grown
        release replaces them, never writes into them: ``grown`` stays as it was when the result grows).

        >>> from streamdp import PrivateForest
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
        cache = grown.structure._cache()  # a structure found cut from these drawn trees is not checked again
        if grown.structure is not drawn and cache.get("cut_from") is not drawn:
            self._check_cut(grown.structure, drawn)
            cache["cut_from"] = drawn
        out = type(self)(
            self.schema,
            grown.structure,
            epsilon=self.epsilon,
            mechanism=self.mechanism,
            k=self.k,
            beta=self.beta,
            vote=self.vote,
            budget=self.budget,
            counts=grown.counts.copy() if copy else grown._counts,
            version=grown.version,
            n_releases=grown.n_releases,
            private=self.private,
            prior_trees=self.prior_trees,
            noise_variance=grown._noise_variance,
            threshold_share=self.threshold_share,
            threshold_spent=grown.threshold_spent,
        )
        out.marginals = self.marginals
        out.node_variance = grown._node_variance
        out.drawn = drawn  # what it grows from (no drawn-sized array is made)
        return out

    def _check_cut(self, structure: ForestStructure, drawn: ForestStructure) -> None:
        """:class:`ValueError` unless ``structure``'s trees are a pruning of ``drawn`` (same splits where kept)."""
        try:
            ids = drawn_nodes(structure, drawn, self.schema.arities, self.schema.is_categorical)
            t, i = np.nonzero((structure.leaf < 0) & (ids >= 0))
            same = np.array_equal(structure.feature[t, i], drawn.feature[t, ids[t, i]]) and np.array_equal(
                structure.threshold[t, i], drawn.threshold[t, ids[t, i]]
            )
        except IndexError:
            same = False
        if not same:
            raise ValueError("the grown forest's trees are not cut from this forest's drawn trees")
