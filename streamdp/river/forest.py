"""The private random forest (Private-RDT) as a river mini-batch classifier."""

from __future__ import annotations

import collections
import warnings
from typing import Any

import numpy as np
import river.base  # absolute import: this package is streamdp.river, the library is river

from streamdp.estimation.prior_phase import prior_phase_size
from streamdp.forest.first_release import stream_share
from streamdp.forest.growth import grows_by_default
from streamdp.forest.model import PrivateForest
from streamdp.forest.structure import ceiling_height
from streamdp.privacy.mechanisms import NearlyExactWarning, NotPrivateWarning
from streamdp.records.schema import Schema
from streamdp.release.variance import warn_nearly_exact
from streamdp.river.encoding import RecordEncoder, labels_of
from streamdp.river.forest_view import ForestView
from streamdp.river.prior_vote import PriorVote
from streamdp.river.schemas import declared_schema
from streamdp.validation import check_choice, check_epsilon, check_integer, check_probability

__all__ = ["PrivateForestClassifier", "default_height"]

#: The default height (the rule is :func:`streamdp.forest.structure.ceiling_height`, shared with the service's
#: growing models).
default_height = ceiling_height


class PrivateForestClassifier(PriorVote, river.base.MiniBatchClassifier):
    """Differentially private random forest (Private-RDT) as a river classifier.

    Labelled records are buffered; after the prior phase (``prior_records``)
    when a batch is full (``first_batch``
    records, then twice as many, ..., up to ``batch_size``) the batch is
    tallied into an empty copy of the leaf vectors, noised once (two-sided
    geometric noise, scale ``(n_trees + prior_trees) / epsilon`` per cell) and added to the
    released counts (Jagannathan et al.'s update). The released model is
    ``epsilon``-DP with respect to every record it has absorbed, whatever the
    number of batches, because batches are disjoint. Predictions use released
    counts only.

    Parameters
    ----------
    schema
        A :class:`streamdp.records.schema.Schema` (or its dict form) declaring every
        attribute's domain and the labels, or a river dataset object whose declared schema
        :func:`streamdp.river.schemas.schema_for` knows (``river.datasets.Phishing()``,
        ``river.datasets.synth.Agrawal()``, ...). Domains must be public knowledge,
        never read from the data (see :func:`streamdp.river.inference.infer_schema`);
        without one the classifier is refused with an error saying what to pass.
    n_trees
        Number of random trees.
    height
        Tree height; ``None`` means :func:`default_height`: tall trees, as tall
        as a budget of leaves allows (up to 8). Height is a ceiling, not a
        bet: the noise-aware estimate (:mod:`streamdp.estimation`) falls back
        from a leaf swamped by noise toward its deepest informative ancestor,
        and the deep levels pay off once the stream has brought enough records.
    epsilon
        Privacy budget of every release (constant over the stream).
    first_batch
        Records of the trees' first release (default 100), after the prior
        phase; each next batch doubles, up to ``batch_size``, so a short stream
        gets a model early (the sizes are public: a function of the release
        number). ``first_batch=batch_size`` gives fixed batches.
    batch_size
        Records per release once the batches have grown. Each release adds fresh noise to every cell, so
        the noise on a cell after ``r`` releases has standard deviation
        ``sqrt(2 r) * (n_trees + prior_trees) / epsilon``: few large batches beat many small ones.
    mechanism
        ``"geometric"`` (default, exact integer noise) or ``"laplace"``.
    vote
        ``"proba"`` (summed leaf counts) or ``"majority"`` (one vote per tree).
    window
        ``None`` (default): the model sums every release since the start.
        ``K``: the model is the sum of the last ``K`` released deltas only
        (older deltas are subtracted again; post-processing of released
        values, so still ``epsilon``-DP). It forgets, so it follows concept
        drift, and the noise per cell stops growing at ``sqrt(2K) (n_trees + prior_trees) / epsilon``.
    seed
        ``None`` (private) or an int: reproducible structure **and noise**, for
        tests only; a seeded model is NOT private.
    prior_trees
        Single-leaf "prior stumps" after the random trees (as
        :meth:`streamdp.PrivateForest.create`): they release the class totals
        with one cell's noise, so predictions fall back to a measured prior;
        one more tree to the budget. They help most streams and can cost a
        little on streams of many classes.
    prior_records
        The prior phase (with prior stumps only): the first ``prior_records``
        records (None: ``first_batch``) are released to the prior stumps alone,
        with the whole ``epsilon`` (one cell's noise per class total, not the
        noise of a budget shared with the trees), in batches of
        :attr:`prior_first` records, then twice as many, ...
        So the model predicts a measured class prior from its first release on,
        as a running majority does, not the uniform prior until ``first_batch``
        records; the random trees start after the phase. Every record is still in exactly one release. Where the
        released prior is still unsettled at the end of the phase (its top-two margin within two noise sds, and a
        wrong majority could cost more than 0.02 of accuracy), the phase goes on, doubling, until it is not: a
        schedule on released values. 0: no prior phase.
        The prior itself is :func:`streamdp.estimation.release_prior` of the
        stumps' releases (each release's class totals weighed by its size and
        noise), not of their sum: a first tree release, far noisier per total,
        would otherwise drown the phase's precise totals.
    guard
        Share of ``epsilon`` spent on the prior guard (default 0: none), so that
        the model does no worse than its own class prior whatever the settings,
        at a price: it lifts a stream where no attribute changes the majority
        but costs the streams where the forest wins (its trees keep less
        epsilon, and early noisy advantages hand the vote to the prior). Each release after the prior phase also
        releases, with two-sided geometric (or Laplace) noise at ``guard *
        epsilon``, how many of the batch's records the current forest predicts
        right minus how many the prior's most probable class does (progressive
        validation: the batch is scored before it is learned). The model votes
        with the forest while the sum of these noisy advantages (of the last
        ``window`` releases under a window) is positive, else predicts the
        prior. The trees and stumps get ``(1 - guard) * epsilon``.

        Privacy sketch, with the neighbouring relation of the rest of this
        class (one record added or removed within its batch, the batch
        schedule public): the forest and the prior that score a batch are
        functions of earlier releases only, so one record changes the
        advantage by at most 1 (it is right under one of them, both or
        neither): the count is ``guard * epsilon``-DP, the batch's tally
        ``(1 - guard) * epsilon``-DP, together ``epsilon``-DP for its records
        (sequential composition), and batches are disjoint. Which model votes
        is post-processing of released numbers. Under replacement of one
        record by another, the advantage, like each tree's tally, moves by up
        to 2 (twice the epsilon). Prior-phase records are in no guard count
        (the model is the prior then) and keep the whole ``epsilon`` for the
        stumps.

    grow
        Whether the trees grow release by release (:meth:`streamdp.PrivateForest.grow`,
        :mod:`streamdp.forest.growth`): they start from their roots at the trees' first release (a
        pruned fit: its stumps, a probe, then the pruned trees) and each later batch may split
        a leaf further where the records seen so far stand clear of the noise, never past
        ``height``. Otherwise (``False``) every batch is added to the drawn trees. ``None``
        (default) decides by the schema, a public fact: grow when every attribute is
        categorical (and there is no ``window``, which growing cannot slide): growing wins where
        the drawn trees fall to the majority on small categorical streams, while on numeric
        streams the tall drawn trees stay as good or better. Needs a
        prior stump and noise (else the trees are drawn; ``grow=True`` without them is refused).
        A release that changes the trees rebuilds the one-record path, which slows learning.
        Privacy: each batch is one release, as without growing; a release
        may spend a share of its trees' budget on the probe (the first) and decide where to
        split from released numbers only (:mod:`streamdp.forest.growth`'s proof sketch).
    threshold_share
        Share of the trees' epsilon their first release (after the prior phase) spends on its records' noisy
        numeric histograms, redrawing the numeric thresholds where those records are; the structure is fixed
        after it and later releases keep the whole epsilon (:mod:`streamdp.forest.first_release`: the proof
        sketch). ``None`` (default): the fit's default where the first release's scheduled records can fill the
        histograms above their noise, else 0 (:func:`~streamdp.forest.first_release.stream_share`).

    Attributes
    ----------
    encoder
        The :class:`~streamdp.river.encoding.RecordEncoder` of the schema; with
        :meth:`learn_encoded` and :meth:`predict_proba_encoded` it makes the
        vectorised path (``streamdp.evaluate.run_private``).

    Examples
    --------
    >>> from streamdp.river.schemas import agrawal_schema
    >>> from river import datasets, evaluate, metrics
    >>> model = PrivateForestClassifier(agrawal_schema(), epsilon=1.0, batch_size=1000)
    >>> metric = evaluate.progressive_val_score(datasets.synth.Agrawal(seed=42).take(3000), model, metrics.Accuracy())
    >>> model.n_releases  # the prior phase's 4, 8, 16, 32, 40 records; then batches of 100, 200, 400, 800, 1000
    10
    """

    def __init__(
        self,
        schema: Schema | dict | Any = None,
        n_trees: int = 10,
        height: int | None = None,
        epsilon: float = 1.0,
        batch_size: int = 1000,
        first_batch: int = 100,
        mechanism: str = "geometric",
        vote: str = "proba",
        window: int | None = None,
        seed: int | None = None,
        prior_trees: int = 1,
        prior_records: int | None = None,
        guard: float = 0.0,
        grow: bool | None = None,
        threshold_share: float | None = None,
    ):
        self.schema = schema
        self.n_trees = n_trees
        self.height = height
        self.epsilon = check_epsilon(epsilon, allow_inf=True)
        self.batch_size = batch_size
        self.first_batch = first_batch
        self.mechanism = mechanism
        self.vote = vote  # (checked: the property's setter)
        self.window = window
        self.seed = seed
        self.prior_trees = prior_trees
        self.prior_records = prior_records
        self.guard = check_probability(guard, "guard (a share of epsilon)", closed="left")
        grow = bool(grow) if isinstance(grow, np.bool_) else grow
        self.grow = grow
        self.threshold_share = threshold_share
        if grow is not None and not isinstance(grow, bool):
            raise TypeError(f"grow must be True, False or None (by the schema), got {grow!r}")
        if grow and window is not None:
            raise ValueError(
                "grow=True cannot slide a window: a grown release changes the trees, so an old "
                "release cannot be subtracted from a later one (use grow=False with window)"
            )
        if window is not None:
            check_integer(window, "window (releases kept)")
        for name, v in (("batch_size", batch_size), ("first_batch", first_batch)):
            check_integer(v, name)
        if prior_records is not None:
            check_integer(prior_records, "prior_records", low=0)
        check_choice(mechanism, "mechanism", ("geometric", "laplace"))
        self._schema = declared_schema(schema)
        why = [f"seed={seed}) draws reproducible noise"] if seed is not None else []
        why += ["epsilon=inf) adds no noise"] if epsilon == float("inf") else []
        for w in why:  # said once, here, in our words (SecureRandom's and PrivateForest.create's are silenced below)
            warnings.warn(
                f"PrivateForestClassifier({w}: for tests only, the model is NOT private", NotPrivateWarning, 2
            )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NotPrivateWarning)
            warnings.simplefilter("ignore", NearlyExactWarning)  # said below, naming this class
            self.forest = PrivateForest.create(
                self._schema,
                n_trees=n_trees,
                height=default_height(self._schema, n_trees) if height is None else height,
                epsilon=epsilon * (1.0 - guard),
                mechanism=mechanism,
                seed=seed,
                vote=vote,
                noise_seed=seed,
                prior_trees=prior_trees,
                threshold_share=stream_share(
                    self._schema, epsilon * (1.0 - guard), mechanism, threshold_share, min(first_batch, batch_size)
                ),
            )
        if grow and not self.forest.can_grow:
            raise ValueError(
                "grow=True needs a prior stump (prior_trees >= 1) to count the records and a finite "
                "epsilon to weigh them against; use grow=False (or None: by the schema)"
            )
        warn_nearly_exact("PrivateForestClassifier", self.forest.epsilon, mechanism, "split", n_trees, prior_trees)
        self.encoder = RecordEncoder(self._schema)
        self._n_prior_releases = 0  # releases of the prior phase (stumps only); public, like every batch size
        m = self._schema.n_attributes
        # sized for the open batch and grown as batches grow (a huge batch_size allocates nothing up front)
        self._buf_X = np.zeros((self.current_batch_size, m), dtype=np.float64)
        self._buf_y = np.zeros(self.current_batch_size, dtype=np.int64)
        self._n_buf = 0  # records buffered: the first rows of _buf_X/_buf_y, then _pend_X/_pend_y
        # learn_one appends here (a list append, no numpy call per record); moved into the buffer at release.
        self._pend_X: list = []
        self._pend_y: list = []
        self._cap = self.current_batch_size
        self._deltas: collections.deque = collections.deque()  # the last `window` released deltas
        self._guard_log: collections.deque = collections.deque()  # released noisy advantages (the last `window`)
        self._view = ForestView(self.forest, self.encoder)

    # -- river plumbing ---------------------------------------------------------
    @property
    def _multiclass(self) -> bool:
        return True

    @classmethod
    def _unit_test_params(cls):
        from streamdp.river.schemas import river_check_schema

        # One schema covering the check datasets (Phishing and ImageSegments);
        # small batches so that the checks exercise several releases.
        yield {"schema": river_check_schema(), "n_trees": 5, "height": 4, "batch_size": 10}

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        # Derived caches are rebuilt on load (keeps pickles small).
        for k in ("encoder", "_view", "_prior_of"):
            state.pop(k, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("_pend_X", [])
        self.__dict__.setdefault("_pend_y", [])
        self.__dict__.setdefault("guard", 0.0)  # pickled before the guard: none
        self.__dict__.setdefault("_guard_log", collections.deque())
        self.__dict__.setdefault("grow", False)  # pickled before growing trees: its trees are the drawn ones
        self.__dict__.setdefault("threshold_share", 0.0)  # pickled before stream thresholds: its trees' were drawn
        if "prior_records" not in state:  # pickled before the prior phase: none, and window deltas without variances
            self.prior_records, self._n_prior_releases = 0, 0
            v = np.full(self.forest.n_released_trees, self.forest.cell_variance)
            self._deltas = collections.deque((d, v) for d in self._deltas)
        self._cap = self.current_batch_size
        self.encoder = RecordEncoder(self._schema)
        self._view = ForestView(self.forest, self.encoder)

    # -- facts ------------------------------------------------------------------
    @property
    def classes(self) -> list:
        return list(self._schema.label.values)

    @property
    def n_releases(self) -> int:
        """Releases so far: the prior phase's and the trees'."""
        return self.forest.n_releases + (self._n_prior_releases if self.grows else 0)

    @property
    def grows(self) -> bool:
        """Whether the trees grow release by release (:meth:`streamdp.PrivateForest.grow`): ``grow``, or by
        the schema when None (every attribute categorical, no ``window``); needs a prior stump and noise."""
        g = self.grow if self.grow is not None else self.window is None and grows_by_default(self._schema)
        return bool(g) and self.forest.can_grow

    @property
    def private(self) -> bool:
        """True when the model's noise is secure (``seed=None``) and epsilon is finite."""
        return self.forest.private

    @property
    def current_batch_size(self) -> int:
        """Records of the open batch (public: a function of the release count).

        The prior phase (:attr:`n_prior_records` records; none without prior
        stumps): :attr:`prior_first` records, then twice as many, ..., the last
        cut to end the phase. Then ``first_batch * 2**r`` after ``r`` releases
        of the trees, at most ``batch_size``.
        """
        k = self._n_prior_releases
        if self.in_prior_phase:  # past n_prior_records (an unsettled prior): the phase's doubling goes on
            size = prior_phase_size(k, self.prior_first, self.n_prior_records)
            return size or min(self.batch_size, self.prior_first << min(k, 62))
        return min(self.batch_size, self.first_batch << min(self.n_releases - k, 62))  # the trees' releases

    @property
    def n_buffered(self) -> int:
        """Records waiting for the next release (raw data, not yet in the model)."""
        return self._n_buf

    # -- learning -----------------------------------------------------------------
    def learn_one(self, x: dict, y: Any) -> None:
        code = self.encoder.encode_label(y)
        row = self.encoder.encode_one(x)
        if None in row:  # a missing or undeclared categorical value: dropped
            self.encoder.warn_unlearned(x, row)
            return
        self._pend_X.append(row)
        self._pend_y.append(code)
        self._n_buf += 1
        if self._n_buf >= self._cap:
            self._release()

    def _grow(self) -> None:
        """Make the buffer hold the open batch (batches double from ``first_batch``)."""
        need = self.current_batch_size
        if len(self._buf_y) < need:
            X = np.zeros((need, self._buf_X.shape[1]), dtype=np.float64)
            y = np.zeros(need, dtype=np.int64)
            X[: len(self._buf_y)], y[: len(self._buf_y)] = self._buf_X, self._buf_y
            self._buf_X, self._buf_y = X, y

    def _sync(self) -> None:
        """Move learn_one's pending records into the numpy buffer."""
        self._grow()
        k = len(self._pend_y)
        if k:
            self._buf_X[self._n_buf - k : self._n_buf] = self._pend_X
            self._buf_y[self._n_buf - k : self._n_buf] = self._pend_y
            self._pend_X.clear()
            self._pend_y.clear()

    def learn_many(self, X: Any, y: Any) -> None:
        """Learn a mini-batch (``X`` a DataFrame, ``y`` a Series): the same model as ``learn_one`` row by row."""
        enc, unknown = self.encoder.encode_frame(X)
        codes = self.encoder.encode_labels(y)
        if len(codes) != len(enc):
            raise ValueError(f"y has {len(codes)} labels but X has {len(enc)} records")
        keep = ~unknown
        self.encoder.warn_unlearned_rows(X, unknown)  # why rows were dropped (not for missing values)
        self.learn_encoded(enc[keep], codes[keep])

    def learn_encoded(self, X: np.ndarray, y: np.ndarray) -> None:
        """Absorb already-encoded records, releasing every ``current_batch_size`` (the vectorised path).

        ``X`` is ``(n, n_attributes)`` in schema order and ``y`` the label codes,
        as :attr:`encoder` makes them (``encoder.encode_many`` /
        ``encoder.encode_frame`` and ``encoder.encode_label``); rows with a
        missing categorical value must be left out, as ``learn_one`` drops them.
        Same result as ``learn_one`` record by record.
        """
        self._sync()
        i, n = 0, len(X)
        while i < n:
            self._grow()
            take = min(self.current_batch_size - self._n_buf, n - i)
            self._buf_X[self._n_buf : self._n_buf + take] = X[i : i + take]
            self._buf_y[self._n_buf : self._n_buf + take] = y[i : i + take]
            self._n_buf += take
            i += take
            if self._n_buf == self.current_batch_size:
                self._release()

    def flush(self) -> None:
        """Release the partial batch now (fresh noise once, like any batch)."""
        if self._n_buf:
            self._release()

    def _release(self) -> None:
        self._sync()
        n = self._n_buf
        X, y = self._buf_X[:n], self._buf_y[:n]
        size = n if n == self.current_batch_size else None  # a full batch's size is the public schedule's
        T = self.forest.n_trees
        if self.in_prior_phase:
            delta, var = self.forest.prior_delta_encoded(y, epsilon=self.epsilon)  # (the whole epsilon: no guard)
            self._n_prior_releases += 1
            self._log_prior(delta[T:, 0, :], float(var[T:].mean()), size)
            if not self.grows:  # a growing model keeps the phase in the prior's log: its trees start fresh
                self._merge(delta, var)
        elif self.grows:
            # One grown release (streamdp.forest.growth): the trees start from their roots at the first one (a pruned
            # fit with its probe) and deepen where the records stand clear of the noise.
            self._guard_release(X, y)  # scored by the model before it learns the batch
            f = self.forest
            before = f.counts[T:, 0, :].astype(np.float64) if f.n_releases else 0.0
            had = f.node_variance[T:, 0] if f.n_releases else 0.0
            f.grow_encoded(X, y)  # (its first release spends the threshold share: its stumps' noise is that release's)
            self._log_prior(f.counts[T:, 0, :] - before, float(np.mean(f.node_variance[T:, 0] - had)), size)
        else:
            self._guard_release(X, y)  # scored by the model before it learns the batch
            with self.forest.first_release(X, y, due=self.n_releases == self._n_prior_releases):  # the trees' first
                delta, cell_var = self.forest.noisy_delta_encoded(X, y), self.forest.cell_variance
            self._log_prior(delta[T:, 0, :], cell_var, size)
            self._merge(delta, cell_var)
        self._scrub(n)

    def _merge(self, delta: np.ndarray, var: Any) -> None:
        """Add a released delta (and the noise variance it adds: a number, or one per tree) to the drawn trees."""
        if self.window is None:
            self.forest.merge(delta, variance=var)
            return
        # Sliding window over releases: subtracting an old, already released (noised) delta is
        # post-processing, so the model stays epsilon-DP; it forgets old data and caps the noise.
        self._deltas.append((delta, var))
        if len(self._deltas) > self.window:  # one release in, one out
            old, old_var = self._deltas.popleft()
            self.forest.merge(delta - old, variance=var - old_var)
        else:
            self.forest.merge(delta, variance=var)

    def _scrub(self, n: int) -> None:
        """Empty the released batch's buffer (its raw records) and size it for the next batch."""
        self._n_buf = 0
        self._buf_X[:n] = 0.0
        self._buf_y[:n] = 0
        self._cap = self.current_batch_size

    def predict_proba_one(self, x: dict, **kwargs) -> dict:
        if not self.forest_votes:
            return dict(self._prior_vote()[0])
        return self._view.predict_proba_one(x)

    def predict_one(self, x: dict, **kwargs) -> Any:
        """The most probable label (river's ``predict_one``: the first in label order on ties), without the dict."""
        if not self.forest_votes:
            return self._prior_vote()[1]
        return self._view.predict_one(x)

    def predict_proba_many(self, X: Any):
        """Probabilities of a mini-batch (a DataFrame), one column per label: ``predict_proba_one`` row by row."""
        import pandas as pd

        enc, unknown = self.encoder.encode_frame(X)
        proba = self.predict_proba_encoded(enc)
        for i in np.flatnonzero(unknown if self.forest_votes else []):  # an unknown value: the one-record path
            proba[i] = self._view.proba_one(
                self._view.leaves_one(self.encoder.encode_one(self.encoder.frame_row(X, int(i))))
            )
        return pd.DataFrame(proba, columns=self.encoder.label_values, index=X.index)

    def predict_many(self, X: Any):
        """Most probable label of every row of a DataFrame (``predict_one`` row by row)."""
        return labels_of(self.predict_proba_many(X), self.encoder.label_values)

    def predict_proba_encoded(self, X: np.ndarray) -> np.ndarray:
        """Probabilities for complete encoded records (the vectorised path), shape ``(n, n_classes)``.

        ``X`` as for :meth:`learn_encoded`; columns in the schema's label order.
        Same values as ``predict_proba_one`` record by record.
        """
        if not self.forest_votes:
            return np.tile(self.forest.prior(), (len(X), 1))
        return self._view.predict_proba_encoded(X)
