"""A private batch learner refit on each tumbling window of the stream, as a river classifier."""

from __future__ import annotations

import collections
import inspect
import math
import warnings
from typing import Any

import numpy as np
import river.base  # absolute import: this package is streamdp.river, the library is river

from streamdp.estimation.one_record import path_proba_one
from streamdp.estimation.prior import release_prior
from streamdp.estimation.prior_phase import prior_phase_first, prior_phase_size
from streamdp.estimation.rule import cell_variance
from streamdp.learners import IgnoredAttributesWarning
from streamdp.learners.catalogue import learners as _catalogue_learners
from streamdp.privacy.mechanisms import NotPrivateWarning
from streamdp.records.domains import Numeric
from streamdp.records.schema import Schema
from streamdp.release.continual import noisy_node
from streamdp.river.encoding import RecordEncoder, labels_of
from streamdp.validation import check_integer

__all__ = ["PrivateWindowClassifier", "WINDOW_LEARNERS"]

# the batch learners under their job names (``streamdp job submit``); the forest ones are the forest classifier
WINDOW_LEARNERS = _catalogue_learners()


class PrivateWindowClassifier(river.base.MiniBatchClassifier):
    """A private batch learner retrained on each tumbling window of the stream.

    When a window of labelled records is full, a fresh ``learner`` (a
    :mod:`streamdp.learners` algorithm: DP-chosen splits, unlike the random
    structure of :class:`PrivateForestClassifier`) is fit on exactly those
    records through the private data layer, and the window's raw records are
    dropped. The first windows grow: ``first_window`` records, then twice as
    many, and so on up to ``window`` (then every window has ``window``
    records), so a short stream gets a model early. Predictions average the
    last ``n_models`` window models weighed by their windows' sizes (public; a
    model of 1,600 records outvotes one of 100; post-processing) and
    read each tree's noise-aware node estimates (``node_tables()``,
    :mod:`streamdp.estimation`), every root shrunk toward one class prior pooled
    over the voting models' windows (their released class totals weighed by
    size and noise, :func:`streamdp.estimation.release_prior`). The stream's
    first records (``prior_records``) are a prior phase, as in
    :class:`~streamdp.river.PrivateForestClassifier`: released as noisy class
    totals alone, in batches of 4, 8, 16, ... records (at epsilon 1), so the
    model predicts a measured class prior from its 5th record on, and those
    totals join the pooled prior of every later fit.

    Privacy: every record belongs to exactly one window and every fit reads
    only its own window, with the full ``epsilon``; the windows are disjoint
    sets of records, so by parallel composition the whole sequence of models
    is ``epsilon``-DP for every record, however long the stream and whatever
    the window sizes (they are public: a function of the fit number only). A
    prior-phase record is in its class-total release alone, never in a window:
    one class total changes by one when a record is added or removed
    (sensitivity 1), noised once with two-sided geometric noise at the whole
    ``epsilon``.

    Parameters
    ----------
    schema
        A :class:`streamdp.records.schema.Schema` (or its dict form) with public domains.
    learner
        ``"diffp-c45"`` (default; numeric split points by the exponential
        mechanism over ranges), ``"diffp-id3"``, ``"sulq-id3"``,
        ``"hanisch-forest"`` or ``"dpea"``.
    epsilon
        Budget of each window's fit (and of the whole stream, per record).
    window
        Records per fit once the windows have grown. Larger windows give each
        fit more signal for the same noise; the model is as old as one window.
        Default 5,000 (why: docs/decisions/004-river-batch-and-window-sizes.md).
    first_window
        Records of the first fit (default 200); each next window doubles, up to
        ``window``. ``first_window=window`` gives fixed windows. A model of 100
        records names the wrong class too often (the same decision record).
    prior_records
        Records of the prior phase before the first window (default 100; 0:
        none, the prediction is uniform until the first window closes). Its releases have :func:`streamdp.estimation.prior_phase_first`
        records (4 at epsilon 1), then twice as many, the last cut to end the phase.
    n_models
        How many of the latest window models vote (mean of probabilities,
        weighed by window size); default 3.
    max_depth
        The learner's ``max_depth`` (default 3: a shallow tree leaves each
        query more budget).
    learner_params
        Other parameters of the learner (e.g. ``{"scorer": "gini"}``). ``n_bound``
        (the public record bound some scorers need) defaults to ``window``.
    seed
        ``None`` (private) or an int: reproducible noise (and Hanisch structures),
        for tests only; a seeded model is NOT private.

    Attributes
    ----------
    encoder
        The :class:`~streamdp.river.encoding.RecordEncoder` of the schema.

    Records that miss a categorical value (or carry an undeclared one) are
    not learned from; in prediction each tree weighs a branch below an unknown
    value by one over the split's width (a malformed number: each side of its
    splits alike), so under the probability vote a record's prediction is the
    average over every combination of its unknown categorical values, however
    many (the majority vote counts each tree's averaged leaf distribution). A
    learner that pools its trees (``hanisch-forest``'s default vote) averages
    each tree's path counts that way, then pools them: the noise-aware rule on
    the record's expected counts, which is not an average of predictions.
    The records of the open window (or the labels of the open prior-phase
    release) are raw data held in memory (and in a pickle of the model).

    Examples
    --------
    >>> from streamdp.river.schemas import agrawal_schema
    >>> from river import datasets
    >>> model = PrivateWindowClassifier(agrawal_schema(), window=2000, learner_params={"scorer": "gini"})
    >>> for x, y in datasets.synth.Agrawal(seed=42).take(4000):
    ...     model.learn_one(x, y)
    >>> model.n_fits  # a prior phase of 100 records, windows of 200, 400, 800, 1600, then 2000
    4
    >>> round(sum(model.predict_proba_one(x).values()), 9)
    1.0
    """

    def __init__(
        self,
        schema: Schema | dict,
        learner: str = "diffp-c45",
        epsilon: float = 1.0,
        window: int = 5000,
        n_models: int = 3,
        max_depth: int = 3,
        learner_params: dict | None = None,
        seed: int | None = None,
        first_window: int = 200,
        prior_records: int = 100,
    ):
        self.schema = schema
        self.learner = learner
        self.epsilon = epsilon
        self.window = window
        self.first_window = first_window
        self.n_models = n_models
        self.max_depth = max_depth
        self.learner_params = learner_params
        self.seed = seed
        self.prior_records = prior_records
        if learner not in WINDOW_LEARNERS:
            raise ValueError(f"learner must be one of {sorted(WINDOW_LEARNERS)}, got {learner!r}")
        for name in ("window", "n_models", "first_window"):
            check_integer(getattr(self, name), name)
        check_integer(prior_records, "prior_records", low=0)
        if learner_params is not None and not isinstance(learner_params, dict):
            raise ValueError(f"learner_params must be a dict or None, got {type(learner_params).__name__}")
        self._schema = schema if isinstance(schema, Schema) else Schema.from_dict(schema)
        if seed is not None:
            warnings.warn(
                f"PrivateWindowClassifier(seed={seed}) draws reproducible noise: for tests only, "
                "the model is NOT private",
                NotPrivateWarning,
                stacklevel=2,
            )
        self.n_fits = 0
        try:  # bad learner parameters fail now, not at the first window
            made = self._make()
            made._check_params()
        except TypeError as e:
            raise ValueError(f"learner_params for {learner!r}: {e}") from None
        made.warn_ignored(stacklevel=2)  # said once here, not at every window's fit
        self.encoder = RecordEncoder(self._schema)
        self._X: list[list] = []
        self._y: list[int] = []
        self._models: collections.deque = collections.deque(maxlen=n_models)
        self._tables: list[_TreeTables] = []
        self._prior_y: list[int] = []  # the open prior-phase release's labels (raw data)
        self._prior_log: list[tuple[np.ndarray, float, float]] = []  # released class totals, size, noise variance
        self._prior: np.ndarray | None = None  # release_prior of the prior phase's releases

    @property
    def prior_first(self) -> int:
        """Records of the prior phase's first release (:func:`streamdp.estimation.prior_phase_first` at the
        whole ``epsilon``; 4 at epsilon 1)."""
        return prior_phase_first(cell_variance("geometric", float(self.epsilon)))

    @property
    def prior_release_size(self) -> int:
        """Records of the open prior-phase release; 0 once the phase is over (public: the release count's)."""
        return prior_phase_size(len(self._prior_log), self.prior_first, self.prior_records)

    @property
    def window_size(self) -> int:
        """Records of the open window: ``first_window * 2**n_fits``, at most ``window`` (public)."""
        return self._fit_size(self.n_fits)

    def _fit_size(self, j: int) -> int:
        """Records of fit number ``j`` (from 0): ``first_window * 2**j``, at most ``window``."""
        return min(self.window, self.first_window << min(j, 62))

    @property
    def _multiclass(self) -> bool:
        return True

    @classmethod
    def _unit_test_params(cls):
        from streamdp.river.schemas import river_check_schema

        yield {
            "schema": river_check_schema(),
            "learner": "diffp-id3",
            "window": 10,
            "learner_params": {"scorer": "gini"},
            "max_depth": 3,
        }

    @property
    def private(self) -> bool:
        """Whether the model is differentially private: no seed and a finite epsilon."""
        return self.seed is None and math.isfinite(self.epsilon)

    @property
    def n_buffered(self) -> int:
        """Records of the open window or prior-phase release (raw data, not yet in any model)."""
        return len(self._y) + len(self._prior_y)

    def _make(self) -> Any:
        cls = WINDOW_LEARNERS[self.learner].cls()
        kw = {"schema": self._schema, "epsilon": self.epsilon, "max_depth": self.max_depth}
        if "n_bound" in inspect.signature(cls).parameters:
            kw["n_bound"] = self.window_size  # a fit never sees more records than the (public) window size
        if self.seed is not None and "seed" in inspect.signature(cls).parameters:
            kw["seed"] = self.seed
        return cls(**{**kw, **(self.learner_params or {})})

    def learn_one(self, x: dict, y: Any) -> None:
        """Add ``(x, y)`` to the prior phase or the open window; a full window is fitted and joins the vote.

        A record with a missing or undeclared categorical value is not learned from
        (:class:`~streamdp.river.UndeclaredValueWarning`); an undeclared label raises :class:`ValueError`.
        """
        code = self.encoder.encode_label(y)
        row = self.encoder.encode_one(x)
        if None in row:  # a missing or undeclared categorical value: not learned from
            self.encoder.warn_unlearned(x, row)
            return
        if self.prior_release_size:
            self._prior_y.append(code)
            if len(self._prior_y) == self.prior_release_size:
                self._release_prior()
            return
        self._X.append(row)
        self._y.append(code)
        if len(self._y) == self.window_size:
            self._fit_window()

    def learn_many(self, X: Any, y: Any) -> None:
        """Learn a mini-batch (``X`` a DataFrame, ``y`` a Series): the same models as ``learn_one`` row by row."""
        enc, unknown = self.encoder.encode_frame(X)
        codes = self.encoder.encode_labels(y)
        if len(codes) != len(enc):
            raise ValueError(f"y has {len(codes)} labels but X has {len(enc)} records")
        self.encoder.warn_unlearned_rows(X, unknown)  # why rows were dropped (not for missing values)
        rows, labels = enc[~unknown].tolist(), codes[~unknown].tolist()
        i = 0
        while i < len(rows) and self.prior_release_size:
            take = self.prior_release_size - len(self._prior_y)
            self._prior_y.extend(labels[i : i + take])
            i += take
            if len(self._prior_y) == self.prior_release_size:
                self._release_prior()
        while i < len(rows):
            take = self.window_size - len(self._y)
            self._X.extend(rows[i : i + take])
            self._y.extend(labels[i : i + take])
            i += take
            if len(self._y) == self.window_size:
                self._fit_window()

    def _rng(self, stream: int):
        from streamdp.privacy.mechanisms import SecureRandom

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NotPrivateWarning)  # said once, at construction
            return SecureRandom(None if self.seed is None else self.seed + stream)

    def _release_prior(self) -> None:
        """Release the open prior-phase batch: its class totals, noised once at the whole ``epsilon``."""
        C = self._schema.n_classes
        exact = np.bincount(np.array(self._prior_y, dtype=np.int64), minlength=C)
        rng = self._rng(2**32 + len(self._prior_log))  # fits use seed + n_fits: disjoint test streams
        noisy = noisy_node(exact, float(self.epsilon), "geometric", rng)
        self._prior_log.append(
            (noisy.astype(np.float64), float(len(self._prior_y)), cell_variance("geometric", float(self.epsilon)))
        )
        self._prior_y = []  # the raw labels are dropped once released
        t, n, v = (np.array(c) for c in zip(*self._prior_log))
        self._prior = release_prior(t, n, v)

    def _fit_window(self) -> None:
        from streamdp.learners.private_data import PrivateDataset

        X, y = np.array(self._X, dtype=np.float64), np.array(self._y, dtype=np.int64)
        self._X, self._y = [], []  # the window's raw records are dropped once fitted
        model = self._make()  # n_bound: this window's size, before n_fits moves on
        pds = PrivateDataset(self._schema, X, y, epsilon=float(self.epsilon), rng=self._rng(self.n_fits))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", IgnoredAttributesWarning)  # said once, at construction
            self._models.append(model.fit(pds))
        self.n_fits += 1
        # The voting models' roots shrink toward one class prior pooled over their windows' released class totals
        # (weighed by size and noise, estimation.release_prior), not each toward its own: a small first window
        # names the wrong majority often enough to cost a whole window (why:
        # docs/decisions/004-river-batch-and-window-sizes.md). The prior phase's releases join the pool (their
        # weight is at most their size's). Post-processing of released numbers.
        released = [m.released_totals() for m in self._models]
        sizes = [self._fit_size(j) for j in range(self.n_fits - len(self._models), self.n_fits)]
        pool = [(t, float(n), v) for (t, v), n in zip(released, sizes)] + self._prior_log
        t, n, v = (np.array(c) for c in zip(*pool))
        prior = release_prior(t, n, v)
        for m in self._models:
            m.prior_ = prior
        self._tables = [_TreeTables(m) for m in self._models]

    @property
    def vote_weights(self) -> list[float]:
        """Weights of the voting models, oldest first: their windows' sizes (public), summing to 1."""
        sizes = [self._fit_size(j) for j in range(self.n_fits - len(self._models), self.n_fits)]
        return [n / sum(sizes) for n in sizes]

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.pop("_tables", None)  # derived from the models; rebuilt on load
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if "prior_records" not in state:  # pickled before the prior phase: none
            self.prior_records, self._prior_y, self._prior_log, self._prior = 0, [], [], None
        if any("vote" not in m.__dict__ for m in self._models if "vote" in m._param_names()):
            # pickled before HanischForest's vote was a parameter: its models vote by majority, and so do the next
            self.learner_params = {"vote": "majority", **(self.learner_params or {})}
        self._tables = [_TreeTables(m) for m in self._models]

    def predict_proba_one(self, x: dict, **kwargs) -> dict:
        """Class probabilities of ``x`` from released numbers only: the window models' vote, or before the first
        window the prior phase's class prior (uniform before any release)."""
        return dict(zip(self.encoder.label_values, self._proba_row(self.encoder.encode_one(x))))

    def _proba_row(self, row: list) -> list[float]:
        C = self._schema.n_classes
        if not self._models:
            return [1.0 / C] * C if self._prior is None else self._prior.tolist()
        p = [0.0] * C
        for t, w in zip(self._tables, self.vote_weights):
            for k, v in enumerate(t.proba(row)):
                p[k] += w * v
        return p

    def predict_proba_many(self, X: Any):
        """Probabilities of a mini-batch (a DataFrame), one column per label: ``predict_proba_one`` row by row."""
        import pandas as pd

        enc, unknown = self.encoder.encode_frame(X)
        C = self._schema.n_classes
        if not self._models:
            proba = np.tile(np.full(C, 1.0 / C) if self._prior is None else self._prior, (len(enc), 1))
        else:
            proba = np.average([m.predict_proba_encoded(enc) for m in self._models], axis=0, weights=self.vote_weights)
            for i in np.flatnonzero(unknown):  # rows with an unknown value take the one-record path
                proba[i] = self._proba_row(self.encoder.encode_one(self.encoder.frame_row(X, i)))
        return pd.DataFrame(proba, columns=self.encoder.label_values, index=X.index)

    def predict_many(self, X: Any):
        """Most probable label of every row of a DataFrame (``predict_one`` row by row)."""
        return labels_of(self.predict_proba_many(X), self.encoder.label_values)


class _TreeTables:
    """A fitted learner's trees as Python lists, for one-record prediction without numpy overhead.

    The distributions are the learner's ``node_tables()`` (the noise-aware estimate, or the
    leaf rule under ``estimator="leaf"``): the same numbers as ``predict_proba_encoded``. Where the learner
    pools its trees' evidence (:meth:`~streamdp.learners.HanischForest.pooled_nodes`), each leaf holds its
    path's counts and variances from depth 1 instead (:meth:`streamdp.estimation.ForestNodes.path_rows`): a
    record sums its trees' rows and :func:`~streamdp.estimation.path_proba_one` finishes, the same floats as
    :meth:`~streamdp.estimation.ForestNodes.path_proba`.
    """

    def __init__(self, model: Any):
        self.majority = model.vote == "majority"
        nodes = model.pooled_nodes()
        self.C = C = model.schema.n_classes
        if nodes is None:
            self.prior = None
            tables = [table.tolist() for table in model.node_tables()]
        else:  # per tree, a leaf's row: its path's counts and variances from depth 1 (the roots take the prior)
            self.prior = nodes.prior.tolist()
            self.root = (nodes.records, nodes.root_var)
            T, M = nodes.leaf_node.shape
            tree_of, leaf_of = np.nonzero(nodes.leaf_node >= 0)  # every tree's leaves, in one path_rows call
            rows = nodes.path_rows(tree_of * M + leaf_of)[:, C + 1 :].tolist()
            tables = [[None] * M for _ in range(T)]
            for t, leaf, r in zip(tree_of.tolist(), leaf_of.tolist(), rows):
                tables[t][leaf] = r
        self.trees = [
            (t.feature.tolist(), t.threshold.tolist(), t.child_start.tolist(), table)
            for t, table in zip(model.trees_, tables)
        ]
        self.width = [2 if isinstance(a, Numeric) else a.arity for a in model.schema.attributes]  # children per split

    def proba(self, row: list) -> list[float]:
        """Same as ``model.predict_proba_encoded`` for one encoded row. Below a split on an unknown value (None)
        the record descends every branch, each weighed by one over the split's width (a number's two sides
        alike): each tree's leaf distribution averaged over every combination of the unknown categorical values,
        with no cap (a grid of the combinations capped at 256 would predict 1/C past it); the
        majority vote then counts that average's top class. Pooled trees average their leaves' rows the same way
        (the record's expected counts at each depth) before they are summed over the trees."""
        out = [0.0] * self.C
        complete = None not in row
        pooled = None
        for feature, threshold, child_start, dist in self.trees:
            if complete:  # the common case: one leaf, no list per record
                node = 0
                f = feature[0]
                while f >= 0:
                    v, thr = row[f], threshold[node]
                    node = child_start[node] + ((1 if v > thr else 0) if thr != math.inf else int(v))
                    f = feature[node]
                d = dist[node]
            else:
                reached = self._reached(row, feature, threshold, child_start)
                d = [sum(w * dist[leaf][k] for leaf, w in reached) for k in range(len(dist[reached[0][0]]))]
            if self.prior is not None:  # left to right over the trees, as path_proba's sums
                pooled = d if pooled is None else [a + b for a, b in zip(pooled, d)]
            elif self.majority:
                out[max(range(self.C), key=d.__getitem__)] += 1.0
            else:
                for k in range(self.C):
                    out[k] += d[k]
        if self.prior is not None:
            assert pooled is not None  # a fitted model has at least one tree
            return path_proba_one(pooled, self.prior, *self.root)
        n = len(self.trees)
        return [v / n for v in out]

    def _reached(self, row: list, feature: list, threshold: list, child_start: list) -> list[tuple[int, float]]:
        """Every leaf a record with unknown values (None) can reach, with the share of the combinations of those
        values that reach it (each unknown split's branches share their node's equally; the shares sum to 1)."""
        reached, stack = [], [(0, 1.0)]
        while stack:
            node, w = stack.pop()
            f = feature[node]
            if f < 0:
                reached.append((node, w))
            elif row[f] is None:
                k = self.width[f]
                stack.extend((child_start[node] + b, w / k) for b in range(k))
            else:
                v, thr = row[f], threshold[node]
                stack.append((child_start[node] + ((1 if v > thr else 0) if thr != math.inf else int(v)), w))
        return reached
