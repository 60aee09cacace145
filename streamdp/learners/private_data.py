"""The private data layer (PINQ-like): the only door from batch learners to records.

A :class:`PrivateDataset` holds encoded records and a budget. It offers only differentially private
operations, each naming its epsilon and charged *before* any record is read:

* :meth:`~PrivateDataset.noisy_count`, :meth:`~PrivateDataset.noisy_class_counts`,
  :meth:`~PrivateDataset.noisy_contingency` (geometric noise, sensitivity 1);
* :meth:`~PrivateDataset.noisy_leaf_class_counts` over the leaves of a tree
  fixed in advance (one histogram: parallel composition in one pass);
* :meth:`~PrivateDataset.partition` by a categorical attribute's declared values, or a numeric attribute
  at a threshold: the parts are disjoint, so their spends compose in parallel (a parent is charged the
  MAX over its children, not the sum);
* :meth:`~PrivateDataset.exponential`: the exponential mechanism over candidate splits, with a quality
  function of each candidate's class contingency table and its declared sensitivity;
* :meth:`~PrivateDataset.exponential_threshold`: the exponential mechanism over the ranges of a numeric
  attribute (DiffPC4.5);
* :meth:`~PrivateDataset.subtree_mechanism`: Bai et al.'s subtree mechanism (DPEA);
* random disjoint shares, a forest's fit and the most accurate of candidate models:
  :mod:`streamdp.learners.private_selection` (private learner selection).

Record bounds (``max_records``). Some scores (Friedman & Schuster's
information gain and gain ratio) have a sensitivity that grows with the
number of records. The exponential mechanisms then take ``max_records`` and
*enforce* it: the scores are computed on at most ``max_records`` of the
part's records, a uniformly random subset (when the part holds more), and the
mechanism uses ``2 * S(max_records)``. Proof sketch: draw an independent
uniform priority per record and keep the ``max_records`` smallest. For
neighbours ``D`` and ``D + x`` and any fixed priorities, the kept sets are
equal, differ by adding ``x``, or differ by one substitution (``x`` in, the
last kept record out), all of at most ``max_records`` records. A substitution
is a removal then an addition, each moving a score by at most
``S(max_records)``, so every score moves by at most ``2 S(max_records)`` and
the mechanism is ``epsilon``-DP for each draw of priorities, hence for their
mixture. Only the scores use the subset: counts and partitions use every
record, so a record still affects one branch (parallel composition holds).

The unit of privacy. With a privacy id, :meth:`PrivateDataset.from_records` keeps at most ``K = max_records_per_id``
records per id (a uniform sample) before any query, and every operation charges ``epsilon`` but draws its noise at
``epsilon / K``: the allotment is spent per person (:mod:`streamdp.privacy.contribution`); a ledger's spend records
the id column (``NAME`` of ``privacy_id={NAME: ids}``, ids given as values) and K. Without one: per record.

Budget. The dataset's ``epsilon`` is its allotment. With a ledger, :meth:`PrivateDataset.from_records` charges the
whole allotment to the ledger (one atomic spend, idempotent under a key) before it even encodes the records; inside,
every operation is charged to the allotment, and an operation that would exceed it raises
:class:`~streamdp.privacy.ledger.BudgetExceeded` before reading anything. Accounting is PINQ's: a dataset's spend is
its own charges plus, for each partition made of it, the maximum spend among the parts; the root's spend is what the
records lost.

Learners (``streamdp.learners``) receive a ``PrivateDataset`` and never the
records: the raw arrays are name-mangled attributes, and a test fails if a
learner module reaches for them. Quality functions passed to the
exponential mechanisms see exact contingency tables; they must be pure
functions (the layer passes copies and uses only the returned scores).

>>> import numpy as np
>>> from streamdp import Schema
>>> schema = Schema.from_dict({"attributes": [{"name": "a", "type": "categorical", "values": [0, 1]}],
...                            "label": {"name": "y", "values": [0, 1]}})
>>> pds = PrivateDataset.from_records(schema, [[0], [1], [1]], [0, 1, 1], epsilon=1.0)
>>> parts = pds.partition(0)
>>> c0 = parts[0].noisy_count(0.5); c1 = parts[1].noisy_count(0.5)
>>> pds.spent        # parallel composition: max(0.5, 0.5)
0.5
>>> pds.noisy_count(0.75)
Traceback (most recent call last):
...
streamdp.privacy.ledger.BudgetExceeded: dataset: charging epsilon=0.75 for noisy_count would spend 1.25 of 1 (0.5 left); refused before reading any data
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np

from streamdp.forest.routing import route, routing_error
from streamdp.learners.private_bounds import enforced_sensitivity, ids_of, unit_name
from streamdp.learners.private_budget import Allotment
from streamdp.learners.private_selection import SelectionOps
from streamdp.privacy.contribution import bound_contributions, check_unit, per_record_epsilon
from streamdp.privacy.ledger import BudgetExceeded, Ledger
from streamdp.privacy.mechanisms import SecureRandom, exponential_mechanism, geometric_noise
from streamdp.records.domains import Categorical, Numeric
from streamdp.records.schema import Schema
from streamdp.validation import check_epsilon, check_integer

__all__ = ["PrivateDataset", "Candidate", "BudgetExceeded", "enforced_sensitivity"]

# A split candidate: a categorical attribute index, or (numeric attribute index, threshold).
Candidate = int | tuple[int, float]


class PrivateDataset(SelectionOps, Allotment):
    """Records behind differentially private operations (see the module docstring).

    Build one with :meth:`from_records` (raw records, encoded against the
    schema) or directly from already encoded arrays (``X`` float64 codes and
    clamped numbers in schema order, ``y`` label codes), as the service does.
    ``records_per_unit`` (``K``, default 1: the unit is a record) says the arrays
    hold at most ``K`` records of any one person (bounded by the caller, as
    :meth:`from_records` does with a privacy id): every query's noise is then
    calibrated to sensitivity ``K``.
    """

    def __init__(
        self,
        schema: Schema,
        X: np.ndarray,
        y: np.ndarray,
        *,
        epsilon: float,
        rng: SecureRandom | None = None,
        records_per_unit: int = 1,
        _parent: PrivateDataset | None = None,
        _bounds: dict[int, tuple[float, float]] | None = None,
        _path: tuple = (),
    ):
        if not isinstance(schema, Schema):
            raise TypeError(f"schema must be a streamdp.Schema, got {type(schema).__name__}")
        check_epsilon(epsilon, allow_inf=True)
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.int64)
        if X.ndim != 2 or X.shape[1] != schema.n_attributes:
            raise ValueError(f"X must have shape (n, {schema.n_attributes}), got {X.shape}")
        if y.shape != (X.shape[0],):
            raise ValueError(f"y must have shape ({X.shape[0]},), got {y.shape}")
        self.__X = X
        self.__y = y
        self.schema = schema
        #: K: at most this many records of one person; each query's noise is calibrated to sensitivity K (public).
        self.records_per_unit = check_integer(records_per_unit, "records_per_unit")
        super().__init__(float(epsilon), rng if rng is not None else SecureRandom(), _parent, _path)
        self._bounds = dict(_bounds or {})

    # -- construction -------------------------------------------------------------
    @classmethod
    def from_records(
        cls,
        schema: Schema,
        X: Any,
        y: Any,
        *,
        epsilon: float,
        ledger: Ledger | None = None,
        source: str | None = None,
        who: str = "library",
        what: str = "PrivateDataset",
        key: str = "",
        noise_seed: int | None = None,
        on_invalid: str = "raise",
        privacy_id: Any = None,
        max_records_per_id: int | None = None,
    ) -> PrivateDataset:
        """Charge ``epsilon`` to ``ledger`` (if given) for ``source``, then encode the records.

        ``noise_seed`` makes the noise reproducible and the result NOT private
        (tests only; a :class:`~streamdp.privacy.NotPrivateWarning` is raised).

        ``privacy_id`` (with ``max_records_per_id``, ``K``): whose record each record is, as one id per record
        (an array or list; ``{NAME: ids}`` with a ledger) or the name of a column of ``X`` (records as dicts, or a data frame) that is not a
        schema attribute. At most ``K`` records per id are kept (a uniform sample), and the epsilon is then
        per person (module docstring). A record without an id raises :class:`ValueError`.

        >>> from streamdp import Schema
        >>> schema = Schema.from_dict({"attributes": [{"name": "a", "type": "categorical", "values": [0, 1]}],
        ...                            "label": {"name": "y", "values": [0, 1]}})
        >>> rows = [{"user": "ann", "a": 1}, {"user": "ann", "a": 0}, {"user": "bob", "a": 1}]
        >>> pds = PrivateDataset.from_records(schema, rows, [1, 0, 1], epsilon=1.0,
        ...                                   privacy_id="user", max_records_per_id=1)
        >>> pds.records_per_unit
        1
        """
        check_epsilon(epsilon, allow_inf=True)
        k = check_unit(privacy_id, max_records_per_id)
        ids = None if privacy_id is None else ids_of(schema, X, privacy_id)
        if ledger is not None:
            if not source:
                raise ValueError("a ledger needs the name of the data source (source=...)")
            p = unit_name(privacy_id)
            ledger.charge(
                source, epsilon, who=who, what=what, key=key, privacy_id=p, max_records_per_id=k if p else None
            )
        elif source is not None:  # (else source= alone fits with no charge and no word)
            raise ValueError(
                f"source={source!r} names a ledger's source, but no ledger= was given: nothing would be "
                "charged; pass the ledger too (or neither)"
            )
        rng = SecureRandom(noise_seed) if noise_seed is not None else SecureRandom()
        enc = schema.encode(X, y, on_invalid=on_invalid)
        if enc.y is None:
            raise ValueError("a private dataset needs labels (y)")
        if ids is None:
            return cls(schema, enc.X, enc.y, epsilon=epsilon, rng=rng)
        if len(ids) != len(enc.kept) + len(enc.dropped):
            raise ValueError(f"privacy_id has {len(ids)} ids for {len(enc.kept) + len(enc.dropped)} records")
        kept = bound_contributions(ids[enc.kept], k, rng)
        return cls(schema, enc.X[kept], enc.y[kept], epsilon=epsilon, rng=rng, records_per_unit=k)

    # -- counts ---------------------------------------------------------------------
    def noisy_count(self, epsilon: float) -> int:
        """Number of records plus two-sided geometric noise (sensitivity 1)."""
        self._charge(epsilon, "noisy_count")
        return int(self.__y.shape[0] + geometric_noise((), self._noise_epsilon(epsilon), self._rng))

    def noisy_class_counts(self, epsilon: float) -> np.ndarray:
        """Records per class (schema label order) plus geometric noise.

        A histogram: one record changes one cell by 1, so the whole vector costs ``epsilon``.
        """
        self._charge(epsilon, "noisy_class_counts")
        c = np.bincount(self.__y, minlength=self.schema.n_classes)
        return c + geometric_noise(c.shape, self._noise_epsilon(epsilon), self._rng)

    def noisy_contingency(self, attribute: int | str, epsilon: float) -> np.ndarray:
        """Counts per (declared value, class) of a categorical attribute plus geometric noise (a histogram)."""
        j = self._categorical(attribute)
        self._charge(epsilon, f"noisy_contingency({self.schema.attributes[j].name})")
        t = self._table(j)
        return t + geometric_noise(t.shape, self._noise_epsilon(epsilon), self._rng)

    def noisy_leaf_class_counts(self, feature: Any, threshold: Any, child_start: Any, epsilon: float) -> np.ndarray:
        """Class counts per leaf of a tree fixed in advance, plus geometric noise on every leaf cell.

        The tree (arrays as in :mod:`streamdp.forest.routing`) must be drawn without
        looking at the data, e.g. from the schema alone: it is public. Its
        leaves partition the records, so the (leaf, class) table is one
        histogram: one record changes one cell by 1 and the whole table
        costs ``epsilon``, the same as partitioning down to every leaf and
        asking each for :meth:`noisy_class_counts` (parallel composition),
        in one vectorized pass. Returns shape ``(n_nodes, n_classes)``;
        rows of inner nodes are zero (no record stops there, nothing is released).
        """
        f = np.asarray(feature, dtype=np.int64)
        thr = np.asarray(threshold, dtype=np.float64)
        cs = np.asarray(child_start, dtype=np.int64)
        if f.ndim != 1:
            raise ValueError(f"feature must be 1-D, got shape {f.shape}")
        err = routing_error(self.schema, f, thr, cs)
        if err:
            raise ValueError(f"noisy_leaf_class_counts: {err}")
        for i in np.flatnonzero(np.isfinite(thr) & (f >= 0)):
            lo, hi = self.bounds(int(f[i]))
            if not lo <= thr[i] <= hi:
                raise ValueError(
                    f"noisy_leaf_class_counts: node {i} threshold {thr[i]} outside "
                    f"{self.schema.attributes[int(f[i])].name!r}'s range here [{lo}, {hi}]"
                )
        self._charge(epsilon, f"noisy_leaf_class_counts({int(np.sum(f < 0))} leaves)")
        C = self.schema.n_classes
        leaf = route(self.__X, f, thr, cs)
        out = np.bincount(leaf * C + self.__y, minlength=f.size * C).reshape(f.size, C)
        leaves = f < 0
        out[leaves] += geometric_noise((int(leaves.sum()), C), self._noise_epsilon(epsilon), self._rng)
        return out

    # -- partitions -----------------------------------------------------------------
    def partition(self, attribute: int | str, threshold: float | None = None) -> list[PrivateDataset]:
        """Disjoint parts: one per declared value of a categorical attribute, or ``[x <= t, x > t]``.

        Costs nothing; the parts' spends compose in parallel.
        """
        j = self._index(attribute)
        attr = self.schema.attributes[j]
        col = self.__X[:, j]
        if isinstance(attr, Categorical):
            if threshold is not None:
                raise ValueError(f"attribute {attr.name!r} is categorical: partition it without a threshold")
            codes = col.astype(np.int64)
            order = np.argsort(codes, kind="stable")
            cuts = np.searchsorted(codes[order], np.arange(1, attr.arity))
            masks = np.split(order, cuts)
            bounds = [self._bounds] * attr.arity
            labels: list[tuple] = [(attr.name, v) for v in attr.values]
        else:
            if threshold is None:
                raise ValueError(f"attribute {attr.name!r} is numeric: partition it at a threshold")
            lo, hi = self.bounds(j)
            t = float(threshold)
            if not lo <= t <= hi:
                raise ValueError(f"threshold {t} for {attr.name!r} outside this part's range [{lo}, {hi}]")
            left = col <= t
            masks = [np.flatnonzero(left), np.flatnonzero(~left)]
            bounds = [{**self._bounds, j: (lo, t)}, {**self._bounds, j: (t, hi)}]
            labels = [(attr.name, "<=", t), (attr.name, ">", t)]
        parts = [
            PrivateDataset(
                self.schema,
                self.__X[m],
                self.__y[m],
                epsilon=self.epsilon,
                rng=self._rng,
                records_per_unit=self.records_per_unit,
                _parent=self,
                _bounds=b,
                _path=self.path + (lab,),
            )
            for m, b, lab in zip(masks, bounds, labels)
        ]
        self._groups.append(parts)
        return parts

    def bounds(self, attribute: int | str) -> tuple[float, float]:
        """The declared range of a numeric attribute narrowed by this part's thresholds (public)."""
        j = self._index(attribute)
        attr = self.schema.attributes[j]
        if not isinstance(attr, Numeric):
            raise ValueError(f"attribute {attr.name!r} is categorical: it has no range")
        return self._bounds.get(j, (float(attr.min), float(attr.max)))

    # -- exponential mechanisms --------------------------------------------------------
    def exponential(
        self,
        candidates: Sequence[Candidate],
        quality: Callable[[np.ndarray], float],
        *,
        sensitivity: float | Callable[[float], float],
        epsilon: float,
        max_records: int | None = None,
    ) -> Candidate:
        """One candidate split, drawn with probability ∝ ``exp(epsilon * q / (2 * sensitivity))``.

        A candidate is a categorical attribute index (its table has one row
        per declared value) or ``(numeric attribute, threshold)`` (rows
        ``x <= t`` and ``x > t``). ``quality`` maps a candidate's class
        contingency table (rows x classes, float) to its score; ``sensitivity``
        must bound how much one record can change any score: a number, or a
        function of the record bound (``S(n)``, e.g. ``scorer.sensitivity``).
        With ``max_records`` the bound is enforced (module docstring: the
        scores see at most that many records and the mechanism uses
        ``2 S(max_records)``).
        """
        cands = list(candidates)
        if not cands:
            raise ValueError("the exponential mechanism needs at least one candidate")
        for c in cands:
            self._candidate_table(c)  # validates before charging
        s = enforced_sensitivity(sensitivity, max_records)
        self._charge(epsilon, "exponential")
        rows = self._kept(max_records)
        scores = np.array([float(quality(self._candidate_table(c, rows).astype(np.float64))) for c in cands])
        return cands[exponential_mechanism(scores, self._noise_epsilon(epsilon), s, self._rng)]

    def exponential_threshold(
        self,
        attribute: int | str,
        quality: Callable[[np.ndarray], np.ndarray],
        *,
        sensitivity: float | Callable[[float], float],
        epsilon: float,
        max_records: int | None = None,
    ) -> float:
        """A split point of a numeric attribute by the exponential mechanism over ranges (DiffPC4.5).

        The attribute's range in this part, ``[lo, hi]``, is cut at the
        distinct values present; every point of one range gives the same
        split ``x <= t``, so the same score. Range ``R_i`` is drawn with
        probability ∝ ``exp(epsilon * q_i / (2 * sensitivity)) * |R_i|``,
        then the point uniformly inside it. ``quality`` is vectorized: it
        maps tables of shape ``(m, 2, n_classes)`` to ``m`` scores.
        ``sensitivity`` and ``max_records`` as in :meth:`exponential`.
        """
        j = self._index(attribute)
        if not isinstance(self.schema.attributes[j], Numeric):
            raise ValueError(f"attribute {self.schema.attributes[j].name!r} is categorical: use exponential()")
        lo, hi = self.bounds(j)
        s = enforced_sensitivity(sensitivity, max_records)
        self._charge(epsilon, f"exponential_threshold({self.schema.attributes[j].name})")
        rows = self._kept(max_records)
        col = self.__X[:, j] if rows is None else self.__X[rows, j]
        ys = self.__y if rows is None else self.__y[rows]
        C = self.schema.n_classes
        inside = (col >= lo) & (col <= hi)
        v, y = col[inside], ys[inside]
        order = np.argsort(v, kind="stable")
        v, y = v[order], y[order]
        cuts, first = np.unique(v, return_index=True)
        # Left class counts for "x <= t" with t in [lo, cuts[0]), [cuts[0], cuts[1]), ..., [cuts[-1], hi].
        onehot = np.zeros((v.size + 1, C))
        onehot[np.arange(1, v.size + 1), y] = 1
        cum = np.cumsum(onehot, axis=0)
        # Range i is [edges[i], edges[i+1]) with edges = lo, cuts..., hi; a point t there puts the
        # first first[i] sorted records left (all of them for the last range).
        left = cum[np.append(first, v.size)]
        total = cum[-1]
        tables = np.stack([left, total - left], axis=1)
        edges = np.concatenate([[lo], cuts, [hi]])
        lengths = np.diff(edges)
        scores = np.asarray(quality(tables), dtype=np.float64)
        if scores.shape != lengths.shape:
            raise ValueError(f"quality must return one score per range ({lengths.shape}), got {scores.shape}")
        if not np.any(lengths > 0):  # a degenerate range: any point is the same
            return float(lo)
        i = exponential_mechanism(scores, self._noise_epsilon(epsilon), s, self._rng, measure=lengths)
        return float(edges[i] + self._rng.uniform() * lengths[i])

    def subtree_mechanism(
        self,
        space: Any,
        epsilon: float,
        *,
        sampler: str = "exact",
        buffer_size: int = 50,
        step_limit: int = 1000,
        variance_threshold: float = 0.0,
        trace: list | None = None,
    ):
        """Bai et al.'s subtree mechanism (see :mod:`streamdp.learners.private_subtree`); returns attribute numbers only.

        Numeric attributes take part with arity 0 in ``space``: they are never split.

        ``trace`` (the MCMC score trace) is for trusted diagnostics and is data
        dependent: never publish it.
        """
        from streamdp.learners import private_subtree

        if sampler not in ("exact", "mcmc"):
            raise ValueError(f"sampler must be 'exact' or 'mcmc', got {sampler!r}")
        attrs = self.schema.attributes
        arities = tuple(space.arities)
        if len(arities) != len(attrs):
            raise ValueError(f"the subtree space has {len(arities)} arities; the schema has {len(attrs)} attributes")
        for a, k in zip(attrs, arities):
            want = a.arity if isinstance(a, Categorical) else 0
            if k != want:
                raise ValueError(
                    f"the subtree space gives {a.name!r} arity {k}; it must be {want} "
                    "(declared values; 0 for numeric attributes, which are never split)"
                )
        self._charge(epsilon, f"subtree_mechanism({sampler})")
        # Numeric columns are zeroed: arity 0 means the samplers never read them.
        X = np.where(self.schema.is_categorical, self.__X, 0.0).astype(np.int64)
        epsilon = self._noise_epsilon(epsilon)
        if sampler == "exact":
            return private_subtree.exact_subtree(space, X, self.__y, epsilon, self._rng)
        res = private_subtree.mcmc_subtree(
            space,
            X,
            self.__y,
            epsilon,
            self._rng,
            buffer_size=buffer_size,
            step_limit=step_limit,
            variance_threshold=variance_threshold,
        )
        if trace is not None:
            trace.append(res.trace)
        return res.structure

    # -- helpers (read data; never return it) ---------------------------------------------
    def _noise_epsilon(self, epsilon: float) -> float:
        """The epsilon a charged query's noise is drawn at: ``epsilon / K`` (sensitivity ``K`` per person)."""
        return per_record_epsilon(epsilon, self.records_per_unit)

    def _index(self, attribute: int | str) -> int:
        if isinstance(attribute, str):
            return self.schema.index(attribute)
        j = int(attribute)
        if not 0 <= j < self.schema.n_attributes:
            raise ValueError(f"attribute index {attribute} out of range (the schema has {self.schema.n_attributes})")
        return j

    def _categorical(self, attribute: int | str) -> int:
        j = self._index(attribute)
        if not isinstance(self.schema.attributes[j], Categorical):
            raise ValueError(f"attribute {self.schema.attributes[j].name!r} is numeric: give a threshold")
        return j

    def _kept(self, max_records: int | None) -> np.ndarray | None:
        """Rows a score may use: all (None), or ``max_records`` of them drawn uniformly (random priorities)."""
        n = self.__y.size
        if max_records is None or n <= max_records:
            return None
        return np.argpartition(self._rng.uniform(n), max_records - 1)[:max_records]

    def _table(self, j: int, rows: np.ndarray | None = None) -> np.ndarray:
        C = self.schema.n_classes
        arity = cast(Categorical, self.schema.attributes[j]).arity
        X, y = (self.__X, self.__y) if rows is None else (self.__X[rows], self.__y[rows])
        idx = X[:, j].astype(np.int64) * C + y
        return np.bincount(idx, minlength=arity * C).reshape(arity, C)

    def _candidate_table(self, cand: Candidate, rows: np.ndarray | None = None) -> np.ndarray:
        if isinstance(cand, (tuple, list)):
            if len(cand) != 2:
                raise ValueError(f"a numeric candidate is (attribute, threshold), got {cand!r}")
            j = self._index(cand[0])
            if not isinstance(self.schema.attributes[j], Numeric):
                raise ValueError(f"candidate {cand!r}: attribute {self.schema.attributes[j].name!r} is categorical")
            X, y = (self.__X, self.__y) if rows is None else (self.__X[rows], self.__y[rows])
            left = X[:, j] <= float(cand[1])
            C = self.schema.n_classes
            return np.stack([np.bincount(y[left], minlength=C), np.bincount(y[~left], minlength=C)])
        return self._table(self._categorical(cand), rows)

    def __repr__(self) -> str:
        return f"PrivateDataset(epsilon={self.epsilon:g}, spent={self._spent:g}, path={self.path!r})"

    def __getstate__(self):
        raise TypeError("a PrivateDataset cannot be pickled or copied out of its process")
