"""What every batch learner shares: sklearn parameters, the door to the data layer, prediction, blobs.

A subclass sets ``FORMAT`` and implements ``_fit(pds)`` (build ``self.trees_``,
a list of :class:`~streamdp.learners.tree.Tree`, from a
:class:`~streamdp.learners.private_data.PrivateDataset` only). Its ``__init__`` takes
``schema`` and keyword parameters stored under the same names, as
scikit-learn requires.
"""

from __future__ import annotations

import inspect
import math
import warnings
from functools import reduce
from typing import TYPE_CHECKING, Any

import numpy as np

from streamdp import blob
from streamdp.estimation.nodes import ForestNodes
from streamdp.estimation.prior import prior_from
from streamdp.estimation.rule import SNR_MIN_GROWN, cell_variance, node_distributions
from streamdp.estimation.trees import inverse_variance_mean
from streamdp.forest.voting import mean_accuracy
from streamdp.learners.catalogue import FORMATS, Algorithm
from streamdp.learners.private_data import PrivateDataset
from streamdp.learners.tree import Tree
from streamdp.options import MAX_PRIOR_TREES, VOTES
from streamdp.privacy.ledger import BudgetExceeded, refit_words
from streamdp.privacy.mechanisms import NotPrivateWarning
from streamdp.records.domains import Categorical
from streamdp.records.schema import Schema
from streamdp.validation import NotFittedError, check_choice, check_epsilon, check_flag, check_integer

FORMAT_VERSION = 1


class IgnoredAttributesWarning(UserWarning):
    """A learner that splits on categorical attributes only was given numeric ones: they are not used."""


class PrivateLearner:
    """Base of the batch learners: a scikit-learn classifier whose only door to the records is the data layer.

    ``fit`` hands the records to a :class:`~streamdp.learners.private_data.PrivateDataset` (charged before it
    reads) and the subclass's ``_fit`` sees nothing else, so every fitted learner is private by construction;
    ``predict_proba`` and ``predict`` read released counts only; ``to_bytes`` / ``from_bytes`` round-trip a
    fitted learner as msgpack (never pickle). Subclasses: :mod:`streamdp.learners`.

    >>> from streamdp.learners import DiffPID3
    >>> from streamdp.records.datasets import load
    >>> ds = load("congressional-voting")
    >>> tree = DiffPID3(ds.schema, epsilon=1.0, max_depth=3).fit(ds.X, ds.y)
    >>> type(tree).from_bytes(tree.to_bytes()).predict(ds.X[:3]).shape
    (3,)
    """

    FORMAT = "streamdp.learner"
    vote = (
        "proba"  # how trees combine: "proba" (pooled where the learner has several trees: pooled_nodes) or "majority"
    )
    #: Whether an infinite epsilon (no noise, not private) is a setting of the learner.
    ALLOWS_INF = True
    #: The least ``max_depth``.
    MIN_DEPTH = 0
    _estimator_type = "classifier"  # scikit-learn < 1.6

    # Parameters a subclass's __init__ stores (top_up and prior_trees only where _param_names lists them).
    schema: Schema
    epsilon: float
    top_up: bool
    prior_trees: int
    # Set by fit (and from_bytes); prior_ only by a caller that measured a class prior.
    trees_: list[Tree]
    classes_: np.ndarray
    private_: bool
    epsilon_spent_: float
    records_per_unit_: int
    stumps_: np.ndarray
    prior_: np.ndarray | None

    if TYPE_CHECKING:  # every subclass's constructor takes the schema and its keyword parameters

        def __init__(self, schema: Schema, **params: Any) -> None: ...

    def __sklearn_tags__(self):  # scikit-learn >= 1.6 (imported lazily: sklearn is not a dependency)
        from sklearn.utils import ClassifierTags, Tags, TargetTags

        return Tags(
            estimator_type="classifier", target_tags=TargetTags(required=True), classifier_tags=ClassifierTags()
        )

    # -- scikit-learn protocol -----------------------------------------------------------
    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return [p for p in sig.parameters if p != "self"]

    def get_params(self, deep: bool = True) -> dict:
        """The constructor's parameters by name (scikit-learn's protocol; ``deep`` is ignored)."""
        return {p: getattr(self, p) for p in self._param_names()}

    def set_params(self, **params: Any) -> PrivateLearner:
        """Set constructor parameters by name; :class:`ValueError` names an unknown one. Returns ``self``."""
        names = self._param_names()
        for k, v in params.items():
            if k not in names:
                raise ValueError(f"{type(self).__name__} has no parameter {k!r}; parameters: {names}")
            setattr(self, k, v)
        return self

    def __repr__(self) -> str:
        shown = {k: v for k, v in self.get_params().items() if k != "schema"}
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in shown.items())})"

    # -- fitting ------------------------------------------------------------------------------
    def fit(
        self,
        X: Any,
        y: Any = None,
        *,
        ledger: Any = None,
        source: str | None = None,
        privacy_id: Any = None,
        max_records_per_id: int | None = None,
    ) -> PrivateLearner:
        """Fit on records ``(X, y)`` or on a :class:`PrivateDataset` (``fit(pds)``).

        Records go to the data layer at once (which charges ``ledger`` for
        ``source`` first, when given); the learner continues with the layer only.
        ``privacy_id`` and ``max_records_per_id`` (``K``) make the unit of privacy a person: at most ``K``
        records per id are used and ``epsilon`` holds per person
        (:meth:`PrivateDataset.from_records`; the id is never an attribute).
        """
        self._check_params()
        if isinstance(X, PrivateDataset):
            if y is not None:
                raise ValueError("fit(pds) takes no y: the labels are inside the private dataset")
            if privacy_id is not None or max_records_per_id is not None:
                raise ValueError("fit(pds) takes no privacy_id: give it to PrivateDataset.from_records")
            if ledger is not None or source is not None:
                raise ValueError("fit(pds) takes no ledger/source: the private dataset was charged when it was built")
            if X.schema != self.schema:
                raise ValueError("the private dataset's schema differs from the learner's")
            if not X.can_charge(float(self.epsilon)):
                raise BudgetExceeded(
                    f"{type(self).__name__} needs epsilon={float(self.epsilon):g} but the private "
                    f"dataset has {X.remaining:g} left; refused before reading any data"
                )
            pds = X
        else:
            if y is None:
                raise ValueError(f"{type(self).__name__}.fit needs (X, y) or a PrivateDataset")
            if hasattr(self, "trees_") and not math.isinf(float(self.epsilon)) and ledger is None:
                warnings.warn(refit_words("learner", float(self.epsilon)), UserWarning, stacklevel=2)
            pds = PrivateDataset.from_records(
                self.schema,
                X,
                y,
                epsilon=self.epsilon,
                ledger=ledger,
                source=source,
                who=type(self).__name__,
                what=repr(self),
                noise_seed=getattr(self, "noise_seed", None),
                privacy_id=privacy_id,
                max_records_per_id=max_records_per_id,
            )
        self.classes_ = np.array(list(self.schema.classes), dtype=object)
        self.warn_ignored(stacklevel=3)
        before = pds.spent
        self.records_per_unit_ = pds.records_per_unit
        self._fit(pds)
        self.private_ = pds.private
        self.epsilon_spent_ = pds.spent - before
        return self

    def warn_ignored(self, stacklevel: int = 2) -> None:
        """:class:`IgnoredAttributesWarning` when the schema has numeric attributes this learner does not split on:
        without it a learner given only numeric attributes fits one leaf with no word of why."""
        numeric = [a.name for a in self.schema.attributes if not isinstance(a, Categorical)]
        entry = self.catalogue_entry()
        if numeric and entry is not None and entry.categorical_only:
            warnings.warn(
                f"{type(self).__name__} splits on categorical attributes only: the numeric {numeric} are "
                "not used (bin them into categories, or use diffp-c45 or private-rdt)",
                IgnoredAttributesWarning,
                stacklevel=stacklevel + 1,
            )

    @classmethod
    def catalogue_entry(cls) -> Algorithm | None:
        """This learner's entry in :mod:`streamdp.learners.catalogue` (by its blob format; None for a class of
        another format): what it needs of a schema is stated there, once."""
        return FORMATS.get(cls.FORMAT)

    def _check_params(self) -> None:
        if not isinstance(self.schema, Schema):
            raise TypeError(f"schema must be a streamdp.Schema, got {type(self.schema).__name__}")
        entry = self.catalogue_entry()
        if entry is not None:  # (before fit reads or charges anything: the schema alone decides)
            entry.check_schema(self.schema)
        check_epsilon(self.epsilon, allow_inf=self.ALLOWS_INF)
        check_integer(getattr(self, "max_depth", 1), "max_depth", low=self.MIN_DEPTH)
        if "top_up" in self._param_names():  # (the learners that stop branches early: DPEA, the ID3 family, C4.5)
            check_flag(self.top_up, "top_up")
        if "vote" in self._param_names():  # (the learners of several trees: HanischForest)
            check_choice(self.vote, "vote", VOTES)

    def _fit(self, pds: PrivateDataset) -> None:
        raise NotImplementedError

    # -- prediction ---------------------------------------------------------------------------
    #: "shrink": noise-aware estimation (:mod:`streamdp.estimation`); "leaf": the rule before (comparison only).
    estimator = "shrink"

    def epsilon_leaf_counts(self) -> float:
        """Epsilon of each leaf's released class counts (public: the learner's budget split)."""
        raise NotImplementedError

    def node_tables(self) -> list[np.ndarray]:
        """Per tree, the class distribution of every node (``(n_nodes, n_classes)``): a record's
        prediction from tree ``i`` is ``node_tables()[i][leaf]`` where each tree predicts alone (the one-record
        river path reads these); a learner that pools its trees predicts from :meth:`pooled_nodes` instead."""
        self._check_fitted()
        if self.estimator == "leaf":
            return [t.leaf_distributions() for t in self.trees_]
        cell_var, snr = self.cell_variance(), self.estimation_snr()
        released = [t.released_counts(cell_var) for t in self.trees_]  # once per tree: the prior reads their roots
        prior = self.class_prior(released)
        pooled = self.__dict__.get("prior_") is not None  # measured from more releases than the roots: it IS the root
        return [
            node_distributions(y, var, t.parent, t.depth, prior, snr, roots_are_prior=pooled)
            for t, (y, var) in zip(self.trees_, released)
        ]

    def estimation_snr(self) -> float:
        """The signal-to-noise bar of :mod:`streamdp.estimation` for this learner's trees (public constants)."""
        return SNR_MIN_GROWN

    def cell_variance(self) -> float:
        """Public noise variance of one released leaf cell (two-sided geometric at :meth:`epsilon_leaf_counts`)."""
        return cell_variance("geometric", float(self.epsilon_leaf_counts()) / self._records_per_unit())

    def _records_per_unit(self) -> int:
        """K, the records per person the fit's noise was calibrated to (1: the unit was a record)."""
        return int(self.__dict__.get("records_per_unit_", 1))

    def class_prior(self, released: list | None = None) -> np.ndarray:
        """The prior every tree's root is shrunk toward: ``prior_`` where a caller set one (a class prior measured
        from more released numbers, as :class:`streamdp.river.PrivateWindowClassifier` does over its windows:
        post-processing; every root's distribution is then that prior), else the unclipped sum of all trees'
        root counts (a root's: its reachable leaves' sum, or with DPEA's step releases, those combined:
        :meth:`Tree.released_counts`; ``released``: those, where the caller has them)."""
        self._check_fitted()
        if self.__dict__.get("prior_") is not None:
            return np.asarray(self.prior_, dtype=np.float64)
        if released is None:
            released = [t.released_counts(self.cell_variance()) for t in self.trees_]
        if self._stumps().size:  # the roots and the prior stumps by inverse variance (estimation.forest_prior's rule)
            return prior_from(self._pooled_totals(released)[0][None, :])
        return prior_from(np.stack([y[0] for y, _ in released]))

    def _stumps(self) -> np.ndarray:
        """The prior stumps' released class counts, ``(prior_trees, C)`` (none for the learners without them)."""
        return np.asarray(self.__dict__.get("stumps_", np.empty((0, self.schema.n_classes))), dtype=np.float64)

    def _pooled_totals(self, released: list) -> tuple[np.ndarray, float]:
        """The class totals measured by every root and prior stump, averaged by inverse variance, and their
        variance per class: a stump's cell has one cell's variance where a root sums its leaves'."""
        C = self.schema.n_classes
        measured = [(y[0], var[0] / C) for y, var in released] + [(s, self.cell_variance()) for s in self._stumps()]
        totals, var = reduce(lambda a, b: inverse_variance_mean(*a, *b), measured)
        return np.asarray(totals, dtype=np.float64), float(var)

    def released_totals(self) -> tuple[np.ndarray, float]:
        """The fit's noisy class totals (each tree's root counts from its releases, averaged over the trees) and
        their noise variance per class (public: the leaves' count and their cell variances)."""
        self._check_fitted()
        cell_var, C, T = self.cell_variance(), self.schema.n_classes, len(self.trees_)
        roots = [t.released_counts(cell_var) for t in self.trees_]
        if self._stumps().size:
            return self._pooled_totals(roots)
        totals = np.mean([y[0] for y, _ in roots], axis=0)
        return totals, float(sum(var[0] for _, var in roots)) / C / T**2

    def _encode(self, X: Any) -> np.ndarray:
        return self.schema.encode(X).X

    def _check_fitted(self) -> None:
        if not hasattr(self, "trees_"):
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit first")

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities, columns in the schema's label order."""
        return self.predict_proba_encoded(self._encode(X))

    def pooled_nodes(self) -> ForestNodes | None:
        """The trees' nodes, when the prediction pools the trees' evidence depth by depth
        (:meth:`streamdp.estimation.ForestNodes.path_proba`, PrivateForest's probability vote): the noise-aware
        estimate under the probability vote of a learner of several trees. None where each tree predicts alone
        (:meth:`node_tables`)."""
        self._check_fitted()
        check_choice(self.vote, "vote", VOTES)  # (set_params on a fitted model is checked here, not at fit)
        if self.vote != "proba" or self.estimator != "shrink" or len(self.trees_) < 2:
            return None
        released = [t.released_counts(self.cell_variance()) for t in self.trees_]
        return ForestNodes.of_trees(
            released,
            [t.parent for t in self.trees_],
            [t.depth for t in self.trees_],
            [np.flatnonzero(t.reachable_leaves()) for t in self.trees_],
            self.class_prior(released),
        )

    def predict_proba_encoded(self, Xe: np.ndarray) -> np.ndarray:
        """Class probabilities of already-encoded query records (float64 codes in schema order)."""
        self._check_fitted()
        nodes = self.pooled_nodes()
        if nodes is not None:
            return nodes.path_proba(np.stack([t.apply(Xe) for t in self.trees_], axis=1))
        probas = [table[t.apply(Xe)] for t, table in zip(self.trees_, self.node_tables())]
        if self.vote == "majority":
            C = self.schema.n_classes
            votes = sum(np.eye(C)[p.argmax(axis=1)] for p in probas)
            return votes / len(probas)
        return np.mean(probas, axis=0)

    def predict(self, X: Any) -> np.ndarray:
        """The most probable class of each record of ``X`` (labels as the schema declares them);
        :class:`RuntimeError` if the learner is not fitted."""
        self._check_fitted()
        return self.classes_[self.predict_proba(X).argmax(axis=1)]

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Mean accuracy of :meth:`predict` on ``(X, y)`` (scikit-learn's ``ClassifierMixin.score``,
        :func:`~streamdp.forest.voting.mean_accuracy`). Exact, not private: score on public or held-out data only."""
        return mean_accuracy(self.predict(X), y, sample_weight)

    # -- blobs ----------------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """The fitted learner as a self-describing msgpack blob (its schema, parameters and released trees).

        Raises :class:`RuntimeError` if the learner is not fitted, :class:`ValueError` if a parameter was
        changed after the fit in a way the released trees do not match (``vote``, ``prior_trees``).
        """
        self._check_fitted()
        if "vote" in self._param_names():  # (what from_bytes refuses is not written: set_params is not checked)
            check_choice(self.vote, "vote", VOTES)
        if "prior_trees" in self._param_names() and len(self._stumps()) != self.prior_trees:
            raise ValueError(
                f"prior_trees is {self.prior_trees!r} but the fit released {len(self._stumps())} prior "
                "stumps: set it back or fit again"
            )
        params = {k: v for k, v in self.get_params().items() if k not in ("schema", "noise_seed")}
        return blob.dumps(
            self.FORMAT,
            FORMAT_VERSION,
            {
                "schema": self.schema.to_dict(),
                "params": params,
                "private": bool(self.private_),
                "epsilon_spent": float(self.epsilon_spent_),
                **({"records_per_unit": self._records_per_unit()} if self._records_per_unit() > 1 else {}),
                "trees": [t.to_dict() for t in self.trees_],
                **({"stumps": self._stumps().tolist()} if self._stumps().size else {}),
            },
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> PrivateLearner:
        """A learner from :meth:`to_bytes`'s blob. Raises :class:`~streamdp.blob.BlobError` (a
        :class:`ValueError`) naming what is malformed; never runs code from the blob."""
        fmt = cls.FORMAT
        doc = blob.loads(data, fmt, FORMAT_VERSION)
        try:
            schema = Schema.from_dict(blob.field(doc, "schema", dict, fmt))
        except ValueError as e:
            raise blob.BlobError(f"{fmt}: bad schema ({e})") from None
        params = blob.field(doc, "params", dict, fmt)
        unknown = set(params) - set(cls._param_names())
        if unknown:
            raise blob.BlobError(f"{fmt}: unknown parameters {sorted(unknown)}")
        if "top_up" in cls._param_names() and "top_up" not in params:
            params = {**params, "top_up": False}  # fitted before top_up existed: the papers' budget
        if "prior_trees" in cls._param_names() and "prior_trees" not in params:
            params = {**params, "prior_trees": 0}  # fitted before prior stumps existed: none
        if "vote" in cls._param_names():
            params = {"vote": "majority", **params}  # fitted before the vote was a parameter: the majority vote
            try:
                check_choice(params["vote"], "vote", VOTES)
            except ValueError as e:
                raise blob.BlobError(f"{fmt}: {e}") from None
        m = cls(schema=schema, **params)
        trees = blob.field(doc, "trees", list, fmt)
        if not trees:
            raise blob.BlobError(f"{fmt}: no trees")
        m.trees_ = [Tree.from_dict(t, schema, fmt) for t in trees]
        if "prior_trees" in cls._param_names():
            m.stumps_ = _stumps_of(doc, m.prior_trees, schema.n_classes, fmt)
        m.private_ = bool(blob.field(doc, "private", bool, fmt))
        m.epsilon_spent_ = float(blob.field(doc, "epsilon_spent", (int, float), fmt))
        k = doc.get("records_per_unit", 1)
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise blob.BlobError(f"{fmt}: records_per_unit must be a whole number >= 1")
        m.records_per_unit_ = k
        m.classes_ = np.array(list(schema.classes), dtype=object)
        if not m.private_:
            warnings.warn(
                f"this {cls.__name__} was fitted with a test noise seed: NOT private", NotPrivateWarning, stacklevel=2
            )
        return m


def _stumps_of(doc: dict, prior_trees: Any, n_classes: int, fmt: str) -> np.ndarray:
    """A blob's prior stumps, ``(prior_trees, n_classes)``: a list of ``prior_trees`` lists of ``n_classes``
    finite numbers, else :class:`~streamdp.blob.BlobError` (a hostile blob's shapes were reshaped to fit)."""
    try:
        p = check_integer(prior_trees, "prior_trees", low=0, high=MAX_PRIOR_TREES)
    except ValueError as e:
        raise blob.BlobError(f"{fmt}: {e}") from None
    stumps = blob.field(doc, "stumps", list, fmt) if "stumps" in doc else []
    ok = len(stumps) == p and all(
        isinstance(row, list)
        and len(row) == n_classes
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in row)
        for row in stumps
    )
    if not ok:
        raise blob.BlobError(f"{fmt}: the prior stumps are not {p} lists of {n_classes} finite counts")
    return np.array(stumps, dtype=np.float64).reshape(p, n_classes)
