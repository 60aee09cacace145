"""River classifiers backed by the private forest, locally or through the live service.

* :class:`PrivateForestClassifier`: a ``river.base.MiniBatchClassifier`` that
  buffers labelled records and, every ``batch_size`` records, releases that
  batch's noised leaf-count delta into its :class:`~streamdp.forest.PrivateForest`
  (Jagannathan's update). Batches are disjoint, so the model stays
  ``epsilon``-DP however long it learns (parallel composition); every release
  adds fresh noise, so the number of releases matters for accuracy (see
  ``benchmarks/results/river_eval.md``).
* :class:`ServiceClassifier`: predicts with the latest model published by the
  streamdp service and pushes what it learns to the service as labelled
  records, so ``river.evaluate.progressive_val_score`` measures the live
  service end to end.

Privacy notes
-------------
* ``seed=None`` (the default) is the only private setting: the structure is
  drawn from a CSPRNG and the noise comes from an AES-CTR keystream keyed from ``os.urandom``, through
  :class:`streamdp.privacy.SecureRandom`.
* ``seed=<int>`` makes the model reproducible for tests and river's checks:
  the structure *and the noise* are drawn from seeded generators, the forest is
  marked ``private=False`` and a ``NotPrivateWarning`` is issued. **A seeded
  model is NOT private.**
* Predictions only ever use released (noised) counts. The records waiting in
  the buffer are raw data: they are not used until their batch is released,
  but they are kept in memory and would be included in a pickle of the model.
  Call :meth:`PrivateForestClassifier.flush` before pickling/sharing a model
  (it releases the partial batch with fresh noise).
* Missing values (a record without one of the schema's attributes):
  a missing numeric value is replaced by the midpoint of its declared range (a
  public constant), in learning and prediction alike. A record whose
  categorical value is missing or undeclared is dropped by ``learn_one`` (the
  decision depends on that record only) and, in prediction, descends every
  branch of that split (each tree averages the leaves it reaches).
* A record key may be the attribute name or, for schemas whose attribute names
  are digit strings (river's LED uses integer keys), the integer.
* Batch size: every release adds fresh noise, so the noise on a cell grows
  like ``sqrt(#releases)``; ``batch_size=1000`` is the measured default
  (``benchmarks/results/river_eval.md``). ``window=K`` keeps only the last
  ``K`` releases (follows drift, caps the noise).

Module name: this module is ``streamdp.river`` and imports the library with
absolute imports (``import river.base``), which is unambiguous as long as the
``streamdp/`` folder itself is not on ``sys.path``. Run its doctests with
``pytest --doctest-modules streamdp/river.py``, not ``python -m doctest
streamdp/river.py`` (that puts ``streamdp/`` first on the path and the file
shadows the library).

>>> from streamdp.river_schemas import stagger_schema
>>> from river import datasets
>>> model = PrivateForestClassifier(stagger_schema(), n_trees=5, epsilon=1.0, batch_size=100)
>>> for x, y in datasets.synth.STAGGER(seed=1).take(300):
...     model.learn_one(x, y)
>>> model.n_releases
3
>>> p = model.predict_proba_one({"size": 0, "color": 0, "shape": 0})
>>> sorted(p) == [0, 1] and abs(sum(p.values()) - 1) < 1e-9
True
"""

from __future__ import annotations

import collections
import inspect
import math
import time
import warnings
from typing import Any

import numpy as np
import river.base  # absolute import: this module is streamdp.river, the library is river

from streamdp.forest import PrivateForest
from streamdp.algorithms import learners as _catalogue_learners
from streamdp.privacy import NotPrivateWarning
from streamdp.schema import Categorical, Schema

__all__ = ["PrivateForestClassifier", "PrivateWindowClassifier", "ServiceClassifier", "PrivacyLeakWarning"]


class PrivacyLeakWarning(UserWarning):
    """Something was learned from the private data outside the privacy mechanism (e.g. attribute domains)."""


_MISSING = object()


def _key(v: Any) -> Any:
    return ("bool", v) if isinstance(v, bool) else v


def _norm(v: Any) -> Any:
    """Normalise a raw categorical value or label to its lookup key (same rules as Schema.encode)."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float):
        if math.isnan(v) or not v.is_integer():
            return _MISSING
        v = int(v)
    return _key(v)


class _Encoder:
    """Fast one-record encoder against a schema: codes, clamped numbers, None for missing categoricals."""

    def __init__(self, schema: Schema):
        self.names = schema.names
        self.alt = [int(n) if n.isdigit() else None for n in self.names]
        self.is_cat = [isinstance(a, Categorical) for a in schema.attributes]
        self.lookup = [
            {_key(v): i for i, v in enumerate(a.values)} if isinstance(a, Categorical) else None
            for a in schema.attributes
        ]
        self.lo = [None if c else a.min for a, c in zip(schema.attributes, self.is_cat)]
        self.hi = [None if c else a.max for a, c in zip(schema.attributes, self.is_cat)]
        self.mid = [None if c else (a.min + a.max) / 2.0 for a, c in zip(schema.attributes, self.is_cat)]
        self.labels = {_key(v): i for i, v in enumerate(schema.label.values)}
        self.label_values = list(schema.label.values)
        self.spec = list(zip(self.names, self.alt, self.is_cat, self.lookup, self.lo, self.hi, self.mid))

    def get(self, x: dict, name: str, alt: int | None) -> Any:
        v = x.get(name, _MISSING)
        if v is _MISSING and alt is not None:
            v = x.get(alt, _MISSING)
        return v

    def encode_one(self, x: dict) -> list:
        """Encoded values in schema order; ``None`` for a missing/undeclared categorical value."""
        out = []
        for name, alt, cat, lookup, lo, hi, mid in self.spec:
            v = x.get(name, _MISSING)
            if v is _MISSING and alt is not None:
                v = x.get(alt, _MISSING)
            if cat:
                if v is _MISSING or v is None:
                    out.append(None)
                    continue
                try:
                    out.append(lookup.get(_norm(v)))
                except TypeError:  # unhashable
                    out.append(None)
            else:
                try:
                    if v is _MISSING or v is None or isinstance(v, (str, bytes)):
                        raise TypeError
                    f = float(v)
                    if math.isnan(f):
                        raise TypeError
                except (TypeError, ValueError):
                    out.append(mid)
                    continue
                out.append(lo if f < lo else hi if f > hi else f)
        return out

    def encode_many(self, xs: list) -> tuple[np.ndarray, np.ndarray]:
        """Column-wise :meth:`encode_one` for a list of dicts: (X float64, rows with a missing categorical)."""
        n = len(xs)
        out = np.empty((n, len(self.spec)), dtype=np.float64)
        bad = np.zeros(n, dtype=bool)
        for j, (name, alt, cat, lookup, lo, hi, mid) in enumerate(self.spec):
            col = [x.get(name, _MISSING) for x in xs]
            if alt is not None:
                col = [x.get(alt, _MISSING) if v is _MISSING else v for v, x in zip(col, xs)]
            if cat:
                codes = []
                for v in col:
                    tv = type(v)
                    if tv is int or tv is str:
                        c = lookup.get(v)
                    elif v is _MISSING or v is None:
                        c = None
                    else:
                        try:
                            c = lookup.get(_norm(v))
                        except TypeError:
                            c = None
                    codes.append(-1 if c is None else c)
                a = np.array(codes, dtype=np.float64)
                miss = a < 0
                if miss.any():
                    bad |= miss
                    a[miss] = 0
                out[:, j] = a
            else:
                try:
                    if any(type(v) is bool or type(v) is str for v in col):
                        raise TypeError
                    a = np.array(col, dtype=np.float64)
                except (TypeError, ValueError):
                    a = np.array([_to_num(v) if v is not _MISSING else math.nan for v in col], dtype=np.float64)
                out[:, j] = np.where(np.isnan(a), mid, np.clip(a, lo, hi))
        return out, bad

    def encode_label(self, y: Any) -> int:
        try:
            code = self.labels.get(_norm(y))
        except TypeError:
            code = None
        if code is None:
            raise ValueError(f"unknown class {y!r}: the schema declares {self.label_values}")
        return code

    def encode_frame(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised encoding of a DataFrame (columns = feature names). Returns (X, has_missing_cat)."""
        n = len(X)
        m = len(self.names)
        out = np.empty((n, m), dtype=np.float64)
        bad = np.zeros(n, dtype=bool)
        cols = set(X.columns)
        for j, (name, alt, cat, lookup, lo, hi, mid) in enumerate(self.spec):
            col = name if name in cols else alt if (alt is not None and alt in cols) else _MISSING
            if col is _MISSING:
                if cat:
                    out[:, j] = 0
                    bad[:] = True
                else:
                    out[:, j] = mid
                continue
            values = X[col].to_numpy()
            if cat:
                codes = np.empty(n, dtype=np.float64)
                for i, v in enumerate(values):
                    if v is None:
                        c = None
                    else:
                        try:
                            c = lookup.get(_norm(v))
                        except TypeError:
                            c = None
                    if c is None:
                        bad[i] = True
                        codes[i] = 0
                    else:
                        codes[i] = c
                out[:, j] = codes
            else:
                if values.dtype.kind in "iuf":
                    f = values.astype(np.float64)
                else:
                    f = np.array([_to_num(v) for v in values], dtype=np.float64)
                f = np.where(np.isnan(f), mid, np.clip(f, lo, hi))
                out[:, j] = f
        return out, bad


def _to_num(v: Any) -> float:
    if v is None or isinstance(v, (str, bytes)):
        return math.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


class PrivateForestClassifier(river.base.MiniBatchClassifier):
    """Differentially private random forest (Private-RDT) as a river classifier.

    Labelled records are buffered; every ``batch_size`` records the batch is
    tallied into an empty copy of the leaf vectors, noised once (two-sided
    geometric noise, scale ``n_trees / epsilon`` per cell) and added to the
    released counts (Jagannathan et al.'s update). The released model is
    ``epsilon``-DP with respect to every record it has absorbed, whatever the
    number of batches, because batches are disjoint. Predictions use released
    counts only.

    Parameters
    ----------
    schema
        A :class:`streamdp.schema.Schema` (or its dict form) declaring every
        attribute's domain and the labels. Domains must be public knowledge,
        never read from the data (see :func:`streamdp.river_schemas.infer_schema`).
    n_trees
        Number of random trees.
    height
        Tree height; ``None`` means ``max(1, n_attributes // 2)`` (Fan et al.).
    epsilon
        Privacy budget of every release (constant over the stream).
    batch_size
        Records per release. Each release adds fresh noise to every cell, so
        the noise on a cell after ``r`` releases has standard deviation
        ``sqrt(2 r) * n_trees / epsilon``: few large batches beat many small ones.
    mechanism
        ``"geometric"`` (default, exact integer noise) or ``"laplace"``.
    vote
        ``"proba"`` (summed leaf counts) or ``"majority"`` (one vote per tree).
    window
        ``None`` (default): the model sums every release since the start.
        ``K``: the model is the sum of the last ``K`` released deltas only
        (older deltas are subtracted again; post-processing of released
        values, so still ``epsilon``-DP). It forgets, so it follows concept
        drift, and the noise per cell stops growing at ``sqrt(2K) n_trees / epsilon``.
    seed
        ``None`` (private) or an int: reproducible structure **and noise**, for
        tests only; a seeded model is NOT private.

    Examples
    --------
    >>> from streamdp.river_schemas import agrawal_schema
    >>> from river import datasets, evaluate, metrics
    >>> model = PrivateForestClassifier(agrawal_schema(), epsilon=1.0, batch_size=1000)
    >>> metric = evaluate.progressive_val_score(datasets.synth.Agrawal(seed=42).take(3000), model, metrics.Accuracy())
    >>> model.n_releases
    3
    """

    def __init__(
        self,
        schema: Schema | dict,
        n_trees: int = 10,
        height: int | None = None,
        epsilon: float = 1.0,
        batch_size: int = 1000,
        mechanism: str = "geometric",
        vote: str = "proba",
        window: int | None = None,
        seed: int | None = None,
    ):
        self.schema = schema
        self.n_trees = n_trees
        self.height = height
        self.epsilon = epsilon
        self.batch_size = batch_size
        self.mechanism = mechanism
        self.vote = vote
        self.window = window
        self.seed = seed
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
            raise ValueError(f"window must be None or a positive number of releases, got {window!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        if mechanism not in ("geometric", "laplace"):
            raise ValueError(f"mechanism must be 'geometric' or 'laplace', got {mechanism!r}")
        self._schema = schema if isinstance(schema, Schema) else Schema.from_dict(schema)
        if seed is not None:  # said once, here, in our words (SecureRandom's own warning is silenced below)
            warnings.warn(
                f"PrivateForestClassifier(seed={seed}) draws reproducible noise: for tests only, the model is NOT private",
                NotPrivateWarning,
                stacklevel=2,
            )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NotPrivateWarning)
            self.forest = PrivateForest.create(
                self._schema, n_trees=n_trees, height=height, epsilon=epsilon, mechanism=mechanism,
                seed=seed, vote=vote, noise_seed=seed,
            )
        self._enc = _Encoder(self._schema)
        m = self._schema.n_attributes
        self._buf_X = np.empty((batch_size, m), dtype=np.float64)
        self._buf_y = np.empty(batch_size, dtype=np.int64)
        self._n_buf = 0
        self._deltas: collections.deque = collections.deque()  # the last `window` released deltas
        self._refresh()

    # -- river plumbing ---------------------------------------------------------
    @property
    def _multiclass(self) -> bool:
        return True

    @classmethod
    def _unit_test_params(cls):
        from streamdp.river_schemas import river_check_schema

        # One schema covering the check datasets (Phishing and ImageSegments);
        # small batches so that the checks exercise several releases.
        yield {"schema": river_check_schema(), "n_trees": 5, "height": 4, "batch_size": 10}

    def _unit_test_skips(self) -> set:
        return set()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        # Derived caches are rebuilt on load (keeps pickles small).
        for k in ("_enc", "_py", "_pos", "_pos_list", "_prior", "_prior_rank", "_prior_best"):
            state.pop(k, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._enc = _Encoder(self._schema)
        self._refresh()

    # -- facts ------------------------------------------------------------------
    @property
    def classes(self) -> list:
        return list(self._schema.label.values)

    @property
    def n_releases(self) -> int:
        return self.forest.n_releases

    @property
    def private(self) -> bool:
        """True when the model's noise is secure (``seed=None``) and epsilon is finite."""
        return self.forest.private

    @property
    def n_buffered(self) -> int:
        """Records waiting for the next release (raw data, not yet in the model)."""
        return self._n_buf

    # -- learning -----------------------------------------------------------------
    def learn_one(self, x: dict, y: Any) -> None:
        code = self._enc.encode_label(y)
        row = self._enc.encode_one(x)
        if None in row:  # a missing or undeclared categorical value: dropped
            return
        self._buf_X[self._n_buf] = row
        self._buf_y[self._n_buf] = code
        self._n_buf += 1
        if self._n_buf == self.batch_size:
            self._release()

    def learn_many(self, X: Any, y: Any) -> None:
        enc, bad = self._enc.encode_frame(X)
        ys = list(y)
        codes = np.array([self._enc.encode_label(v) for v in ys], dtype=np.int64)
        keep = ~bad
        self._learn_encoded(enc[keep], codes[keep])

    def _learn_encoded(self, X: np.ndarray, y: np.ndarray) -> None:
        """Absorb already-encoded records (schema order), releasing every ``batch_size``."""
        i, n = 0, len(X)
        while i < n:
            take = min(self.batch_size - self._n_buf, n - i)
            self._buf_X[self._n_buf:self._n_buf + take] = X[i:i + take]
            self._buf_y[self._n_buf:self._n_buf + take] = y[i:i + take]
            self._n_buf += take
            i += take
            if self._n_buf == self.batch_size:
                self._release()

    def flush(self) -> None:
        """Release the partial batch now (fresh noise once, like any batch)."""
        if self._n_buf:
            self._release()

    def _release(self) -> None:
        n = self._n_buf
        delta = self.forest.noisy_delta_encoded(self._buf_X[:n], self._buf_y[:n])
        if self.window is None:
            self.forest.merge(delta)
        else:
            # Sliding window over releases: subtracting an old, already released (noised) delta is
            # post-processing, so the model stays epsilon-DP; it forgets old data and caps the noise.
            self._deltas.append(delta)
            if len(self._deltas) > self.window:
                self.forest.merge(delta - self._deltas.popleft())
            else:
                self.forest.merge(delta)
        self._n_buf = 0
        # Scrub the raw records of the released batch.
        self._buf_X[:n] = 0.0
        self._buf_y[:n] = 0
        self._refresh()

    def _refresh(self) -> None:
        """Rebuild prediction caches from the released counts."""
        pos = np.clip(np.asarray(self.forest.counts), 0, None).astype(np.float64)
        C = pos.shape[2]
        prior = pos.sum(axis=(0, 1))
        prior = prior / prior.sum() if prior.sum() > 0 else np.full(C, 1.0 / C)
        self._pos = pos
        self._prior = prior.tolist()
        self._prior_rank = (np.argsort(np.argsort(prior, kind="stable"), kind="stable") + 1).tolist()
        self._prior_best = int(np.argmax(self._prior_rank))
        s = self.forest.structure
        py = getattr(self, "_py", None)
        if py is None or py[-1] is not s:  # the structure never changes: convert it once
            py = (
                s.feature.tolist(), s.threshold.tolist(), s.child.tolist(), s.leaf.tolist(), None,
                self._enc.is_cat + [False],
                [a.arity if c else 2 for a, c in zip(self._schema.attributes, self._enc.is_cat)], s,
            )
        self._py = py  # leaf counts as nested lists are built lazily, on the first one-record prediction
        self._pos_list = None

    # -- prediction ---------------------------------------------------------------
    def _tree_cells(self, row: list) -> list[list[float]]:
        """Per tree, the (averaged) clamped count vector of the leaf/leaves the record reaches."""
        feature, threshold, child, leaf, _, is_cat, arity, _ = self._py
        pos = self._pos_list
        if pos is None:
            pos = self._pos_list = self._pos.tolist()
        out = []
        for t in range(len(feature)):
            ft, th, ch, lf, pt = feature[t], threshold[t], child[t], leaf[t], pos[t]
            node = 0
            while lf[node] < 0:
                f = ft[node]
                v = row[f]
                if v is None:
                    break  # missing categorical: slow path below
                node = ch[node] + (v if is_cat[f] else (v > th[node]))
            if lf[node] >= 0:
                out.append(pt[lf[node]])
                continue
            # Descend every branch below a missing categorical value.
            leaves = []
            stack = [node]
            while stack:
                nd = stack.pop()
                if lf[nd] >= 0:
                    leaves.append(lf[nd])
                    continue
                f = ft[nd]
                v = row[f]
                if v is None:
                    stack.extend(ch[nd] + b for b in range(arity[f]))
                else:
                    stack.append(ch[nd] + (v if is_cat[f] else (v > th[nd])))
            k = len(leaves)
            vec = [sum(pt[l][c] for l in leaves) / k for c in range(len(pt[0]))]
            out.append(vec)
        return out

    def _proba_from_cells(self, cells: list[list[float]]) -> list[float]:
        C = len(self._prior)
        if self.vote == "proba":
            s = [0.0] * C
            for vec in cells:
                for c in range(C):
                    s[c] += vec[c]
            tot = sum(s)
            return [v / tot for v in s] if tot > 0 else list(self._prior)
        rank = self._prior_rank
        votes = [0.0] * C
        for vec in cells:
            top = max(vec)
            if top <= 0:
                votes[self._prior_best] += 1
                continue
            best = max((c for c in range(C) if vec[c] == top), key=lambda c: rank[c])
            votes[best] += 1
        T = len(cells)
        return [v / T for v in votes]

    def predict_proba_one(self, x: dict, **kwargs) -> dict:
        row = self._enc.encode_one(x)
        p = self._proba_from_cells(self._tree_cells(row))
        return dict(zip(self._enc.label_values, p))

    def predict_proba_many(self, X: Any):
        import pandas as pd

        enc, bad = self._enc.encode_frame(X)
        proba = self._predict_proba_encoded(enc)
        for i in np.flatnonzero(bad):  # rows with a missing categorical value
            row = self._enc.encode_one({k: X.iloc[i][k] for k in X.columns if _present(X.iloc[i][k])})
            proba[i] = self._proba_from_cells(self._tree_cells(row))
        return pd.DataFrame(proba, columns=self._enc.label_values, index=X.index)

    def predict_many(self, X: Any):
        import pandas as pd

        p = self.predict_proba_many(X)
        labels = np.empty(len(self._enc.label_values), dtype=object)
        labels[:] = self._enc.label_values
        return pd.Series(labels[p.to_numpy().argmax(axis=1)], index=X.index)

    def _predict_proba_encoded(self, X: np.ndarray) -> np.ndarray:
        """Probabilities for complete encoded records (schema order), shape (n, n_classes)."""
        leaves = self.forest.structure.apply(X, self._schema.is_categorical)
        T, L, C = self._pos.shape
        cells = self._pos.reshape(T * L, C)[leaves + np.arange(T) * L]  # (n, T, C)
        if self.vote == "proba":
            s = cells.sum(axis=1)
            tot = s.sum(axis=1, keepdims=True)
            return np.where(tot > 0, s / np.where(tot > 0, tot, 1), np.asarray(self._prior))
        return self.forest._proba_from_leaves(leaves)


# the batch learners under their catalogue names (streamdp.algorithms); the forest ones are the forest classifier
WINDOW_LEARNERS = _catalogue_learners()


class PrivateWindowClassifier(river.base.Classifier):
    """A private batch learner retrained on each tumbling window of the stream.

    Every ``window`` labelled records, a fresh ``learner`` (a
    :mod:`streamdp.learners` algorithm: DP-chosen splits, unlike the random
    structure of :class:`PrivateForestClassifier`) is fit on exactly those
    records through the private data layer, and the window's raw records are
    dropped. Windows are disjoint, so the sequence of models is
    ``epsilon``-DP for every record (parallel composition), however long the
    stream. Predictions average the last ``n_models`` window models
    (post-processing of released models). Until the first window closes the
    prediction is uniform over the schema's labels.

    Parameters
    ----------
    schema
        A :class:`streamdp.schema.Schema` (or its dict form) with public domains.
    learner
        ``"diffp-c45"`` (default; numeric split points by the exponential
        mechanism over ranges), ``"diffp-id3"``, ``"sulq-id3"``,
        ``"hanisch-forest"`` or ``"dpea"``.
    epsilon
        Budget of each window's fit (and of the whole stream, per record).
    window
        Records per fit. Larger windows give each fit more signal for the same
        noise; the model is as old as one window. Default 5,000 (measured on
        Agrawal, ``benchmarks/results/agrawal_batch.md``).
    n_models
        How many of the latest window models vote (mean of probabilities);
        default 3.
    max_depth
        The learner's ``max_depth`` (default 3: a shallow tree leaves each
        query more budget).
    learner_params
        Other parameters of the learner (e.g. ``{"scorer": "gini"}``). ``n_bound``
        (the public record bound some scorers need) defaults to ``window``.
    seed
        ``None`` (private) or an int: reproducible noise (and Hanisch structures),
        for tests only; a seeded model is NOT private.

    Records that miss a categorical value (or carry an undeclared one) are
    not learned from; in prediction such an attribute is averaged over its
    declared values (up to 256 combinations, else the prediction is uniform).
    The records of the open window are raw data held in memory (and in a
    pickle of the model).

    Examples
    --------
    >>> from streamdp.river_schemas import agrawal_schema
    >>> from river import datasets
    >>> model = PrivateWindowClassifier(agrawal_schema(), window=2000, learner_params={"scorer": "gini"})
    >>> for x, y in datasets.synth.Agrawal(seed=42).take(4000):
    ...     model.learn_one(x, y)
    >>> model.n_fits
    2
    >>> round(sum(model.predict_proba_one(x).values()), 9)
    1.0
    """

    def __init__(self, schema: Schema | dict, learner: str = "diffp-c45", epsilon: float = 1.0, window: int = 5000,
                 n_models: int = 3, max_depth: int = 3, learner_params: dict | None = None, seed: int | None = None):
        self.schema = schema
        self.learner = learner
        self.epsilon = epsilon
        self.window = window
        self.n_models = n_models
        self.max_depth = max_depth
        self.learner_params = learner_params
        self.seed = seed
        if learner not in WINDOW_LEARNERS:
            raise ValueError(f"learner must be one of {sorted(WINDOW_LEARNERS)}, got {learner!r}")
        for name in ("window", "n_models"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if learner_params is not None and not isinstance(learner_params, dict):
            raise ValueError(f"learner_params must be a dict or None, got {type(learner_params).__name__}")
        self._schema = schema if isinstance(schema, Schema) else Schema.from_dict(schema)
        if seed is not None:
            warnings.warn(f"PrivateWindowClassifier(seed={seed}) draws reproducible noise: for tests only, "
                          "the model is NOT private", NotPrivateWarning, stacklevel=2)
        try:  # bad learner parameters fail now, not at the first window
            self._make()._check_params()
        except TypeError as e:
            raise ValueError(f"learner_params for {learner!r}: {e}") from None
        self._enc = _Encoder(self._schema)
        self._X: list[list] = []
        self._y: list[int] = []
        self._models: collections.deque = collections.deque(maxlen=n_models)
        self._tables: list[_TreeTables] = []
        self.n_fits = 0

    @property
    def _multiclass(self) -> bool:
        return True

    @classmethod
    def _unit_test_params(cls):
        from streamdp.river_schemas import river_check_schema

        yield {"schema": river_check_schema(), "learner": "diffp-id3", "window": 10,
               "learner_params": {"scorer": "gini"}, "max_depth": 3}

    @property
    def private(self) -> bool:
        return self.seed is None and math.isfinite(self.epsilon)

    @property
    def n_buffered(self) -> int:
        """Records of the open window (raw data, not yet in any model)."""
        return len(self._y)

    def _make(self) -> Any:
        cls = WINDOW_LEARNERS[self.learner].cls()
        kw = {"schema": self._schema, "epsilon": self.epsilon, "max_depth": self.max_depth}
        if "n_bound" in inspect.signature(cls).parameters:
            kw["n_bound"] = self.window  # a fit never sees more records than the (public) window size
        if self.seed is not None and "seed" in inspect.signature(cls).parameters:
            kw["seed"] = self.seed
        return cls(**{**kw, **(self.learner_params or {})})

    def learn_one(self, x: dict, y: Any) -> None:
        code = self._enc.encode_label(y)
        row = self._enc.encode_one(x)
        if None in row:  # a missing or undeclared categorical value: not learned from
            return
        self._X.append(row)
        self._y.append(code)
        if len(self._y) == self.window:
            self._fit_window()

    def _fit_window(self) -> None:
        from streamdp.private_data import PrivateDataset
        from streamdp.privacy import SecureRandom

        X, y = np.array(self._X, dtype=np.float64), np.array(self._y, dtype=np.int64)
        self._X, self._y = [], []  # the window's raw records are dropped once fitted
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NotPrivateWarning)  # said once, at construction
            rng = SecureRandom(None if self.seed is None else self.seed + self.n_fits)
        pds = PrivateDataset(self._schema, X, y, epsilon=float(self.epsilon), rng=rng)
        self._models.append(self._make().fit(pds))
        self.n_fits += 1
        self._tables = [_TreeTables(m) for m in self._models]

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.pop("_tables", None)  # derived from the models; rebuilt on load
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._tables = [_TreeTables(m) for m in self._models]

    def predict_proba_one(self, x: dict, **kwargs) -> dict:
        C = self._schema.n_classes
        if not self._models:
            return dict.fromkeys(self._enc.label_values, 1.0 / C)
        row = self._enc.encode_one(x)
        missing = [j for j, v in enumerate(row) if v is None]
        if not missing:  # the common case: walk the trees in Python (no numpy call per record)
            p = [0.0] * C
            for t in self._tables:
                for k, v in enumerate(t.proba(row)):
                    p[k] += v
            n = len(self._tables)
            return dict(zip(self._enc.label_values, [v / n for v in p]))
        arities = [self._schema.attributes[j].arity for j in missing]
        if math.prod(arities) > 256:
            return dict.fromkeys(self._enc.label_values, 1.0 / C)
        grid = np.array(np.meshgrid(*[np.arange(a) for a in arities], indexing="ij")).reshape(len(missing), -1).T \
            if missing else np.zeros((1, 0))
        Xe = np.tile(np.array([0.0 if v is None else v for v in row]), (len(grid), 1))
        Xe[:, missing] = grid
        p = np.mean([m.predict_proba_encoded(Xe).mean(axis=0) for m in self._models], axis=0)
        return dict(zip(self._enc.label_values, p.tolist()))


class _TreeTables:
    """A fitted learner's trees as Python lists, for one-record prediction without numpy overhead."""

    def __init__(self, model: Any):
        self.majority = model.vote == "majority"
        self.trees = [(t.feature.tolist(), t.threshold.tolist(), t.child_start.tolist(),
                       t.leaf_distributions().tolist()) for t in model.trees_]
        self.C = model.schema.n_classes

    def proba(self, row: list) -> list[float]:
        """Same as ``model.predict_proba_encoded`` for one complete encoded row."""
        out = [0.0] * self.C
        for feature, threshold, child_start, dist in self.trees:
            node = 0
            f = feature[0]
            while f >= 0:
                v, thr = row[f], threshold[node]
                node = child_start[node] + ((1 if v > thr else 0) if thr != math.inf else int(v))
                f = feature[node]
            d = dist[node]
            if self.majority:
                out[max(range(self.C), key=d.__getitem__)] += 1.0
            else:
                for k in range(self.C):
                    out[k] += d[k]
        n = len(self.trees)
        return [v / n for v in out]


def _present(v: Any) -> bool:
    if v is None:
        return False
    try:
        return not (isinstance(v, float) and math.isnan(v))
    except TypeError:
        return True


class ServiceClassifier(river.base.Classifier):
    """A river classifier backed by the live streamdp service.

    ``predict_proba_one`` uses the latest model the service has published
    (fetched through :class:`streamdp.service.consumer.Consumer`); a newer
    version is picked up at most every ``refresh_every`` seconds with one cheap
    version check. ``learn_one`` buffers the labelled record and pushes a batch
    of ``batch_size`` records through :class:`streamdp.service.producer.Producer`;
    the service's workers noise and merge it. Labels therefore reach the model
    with a delay (the batch, then the worker), exactly as in production, so
    ``river.evaluate.progressive_val_score`` measures the live service end to end.

    Parameters
    ----------
    redis_url
        URL of the service's Redis (with the producer's and consumer's rights).
    model
        Name of the model in the service registry.
    batch_size
        Records per push to the record stream.
    refresh_every
        Seconds between two checks for a newer published version (0: every prediction).
    wait_first
        Seconds to wait for a first published model when none exists yet.
    on_invalid
        ``"dead-letter"`` (default: records that break the schema go to the
        service's dead-letter stream) or ``"raise"``.
    sync_timeout
        ``0`` (default): fully asynchronous, predictions use whatever the
        service has published so far, lag included (what a live client sees).
        ``> 0``: after each push, wait up to that many seconds for the service
        to publish a newer version, so the measurement does not depend on how
        fast the workers keep up (the model then lags by at most one batch,
        like :class:`PrivateForestClassifier`).

    Before the service has published anything ``predict_proba_one`` returns
    ``{}`` (river then skips the metric update). Call :meth:`flush` at the end
    of a stream to push the last partial batch.
    """

    def __init__(
        self,
        redis_url: str = "redis://127.0.0.1:6379/0",
        model: str = "default",
        batch_size: int = 100,
        refresh_every: float = 0.5,
        wait_first: float = 0.0,
        on_invalid: str = "dead-letter",
        sync_timeout: float = 0.0,
    ):
        self.redis_url = redis_url
        self.model = model
        self.batch_size = batch_size
        self.refresh_every = refresh_every
        self.wait_first = wait_first
        self.on_invalid = on_invalid
        self.sync_timeout = sync_timeout
        self._producer = None
        self._consumer = None
        self._forest = None
        self._version = -1
        self._checked = 0.0
        self._buf_x: list[dict] = []
        self._buf_y: list = []
        self._local: PrivateForestClassifier | None = None
        self.n_pushed = 0

    @property
    def _multiclass(self) -> bool:
        return True

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_producer"] = state["_consumer"] = None
        return state

    def _clients(self):
        if self._consumer is None:
            from streamdp.service.consumer import Consumer
            from streamdp.service.producer import Producer

            self._consumer = Consumer(self.redis_url, self.model)
            self._producer = Producer(self.redis_url, self.model, batch_size=max(1, self.batch_size),
                                      on_invalid=self.on_invalid)
        return self._producer, self._consumer

    @property
    def version(self) -> int:
        """Version of the published model in use (-1 before the first one)."""
        return self._version

    def refresh(self, force: bool = False) -> None:
        """Pick up a newer published model if there is one.

        Cheap when there is none: one ``HGET`` of the published version, at
        most every ``refresh_every`` seconds; the blob is fetched and validated
        only when the version moved.
        """
        now = time.monotonic()
        if not force and self._forest is not None and now - self._checked < self.refresh_every:
            return
        self._checked = now
        from streamdp.service.registry import ModelNotFound

        _, consumer = self._clients()
        try:
            if self._forest is None and self.wait_first > 0:
                forest = consumer.wait_newer(self._version, timeout=self.wait_first)
                if forest is None:
                    return
            else:
                if consumer.version() <= self._version:
                    return
                forest = consumer.latest()
        except ModelNotFound:
            return
        forest, version = _unpack_latest(forest)
        if forest is not None and version > self._version:
            self._forest, self._version = forest, version
            self._proba = _ForestView(forest)

    def predict_proba_one(self, x: dict, **kwargs) -> dict:
        self.refresh()
        if self._forest is None:
            return {}
        return self._proba.predict_proba_one(x)

    def learn_one(self, x: dict, y: Any) -> None:
        self._buf_x.append(dict(x))
        self._buf_y.append(y.item() if isinstance(y, np.generic) else y)
        if len(self._buf_x) >= self.batch_size:
            self.flush()

    def flush(self) -> None:
        """Push the buffered labelled records to the service now."""
        if not self._buf_x:
            return
        producer, _ = self._clients()
        producer.push(self._buf_x, self._buf_y)
        self.n_pushed += len(self._buf_x)
        self._buf_x, self._buf_y = [], []
        if self.sync_timeout > 0:
            from streamdp.service.registry import ModelNotFound

            _, consumer = self._clients()
            try:
                forest = consumer.wait_newer(max(self._version, consumer.version()), timeout=self.sync_timeout)
            except ModelNotFound:
                forest = None
            if forest is not None and forest.version > self._version:
                self._forest, self._version = forest, forest.version
                self._proba = _ForestView(forest)
                self._checked = time.monotonic()


def _unpack_latest(got: Any) -> tuple[PrivateForest | None, int]:
    """Accept what ``Consumer.latest()`` returns: a forest, (forest, version), or an object with ``.forest``/``.version``."""
    if isinstance(got, PrivateForest):
        return got, got.version
    if isinstance(got, tuple) and got and isinstance(got[0], PrivateForest):
        return got[0], int(got[1]) if len(got) > 1 else got[0].version
    forest = getattr(got, "forest", None) or getattr(got, "model", None)
    if isinstance(forest, (bytes, bytearray)):
        forest = PrivateForest.from_bytes(bytes(forest))
    if isinstance(got, (bytes, bytearray)):
        forest = PrivateForest.from_bytes(bytes(got))
    if isinstance(forest, PrivateForest):
        version = getattr(got, "version", None)
        return forest, int(version) if version is not None else forest.version
    return None, -1


class _ForestView:
    """Prediction-only wrapper giving a published PrivateForest the classifier's fast one-record path."""

    def __init__(self, forest: PrivateForest):
        self._schema = forest.schema
        self.vote = forest.vote
        self.forest = forest
        self._enc = _Encoder(forest.schema)
        PrivateForestClassifier._refresh(self)  # type: ignore[arg-type]

    _tree_cells = PrivateForestClassifier._tree_cells
    _proba_from_cells = PrivateForestClassifier._proba_from_cells
    predict_proba_one = PrivateForestClassifier.predict_proba_one
