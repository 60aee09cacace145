"""Private learner selection: the most accurate of a few learners and settings, chosen privately.

:func:`select_learner` runs on a :class:`~streamdp.learners.private_data.PrivateDataset` of allotment
``epsilon``; :class:`AutoPrivateClassifier` is the same as an estimator (the catalogue's ``auto``). With
``m`` candidates and a selection share ``s`` (``0 < s <= 1``):

1. split the records at random into ``m + 1`` disjoint shares, ``m`` of equal expected size and a held-out
   one (``holdout_share``; default as large as the others): a partition drawn from the secure source,
   whatever the data;
2. fit candidate ``i`` on share ``i`` at ``s * epsilon``;
3. on the last share, draw the winner with the exponential mechanism over the candidates' correct counts
   at ``s * epsilon`` (:meth:`~streamdp.learners.private_selection.SelectionOps.most_accurate`);
4. with ``s < 1``, fit the winner again on every record at ``(1 - s) * epsilon``; with ``s = 1``, return the
   winner fitted on its share.

Proof sketch (``epsilon``-DP, the whole allotment and no more). Steps 1-3 touch each record in exactly one
share. A record of share ``i <= m`` changes only candidate ``i``'s model, an ``s epsilon``-DP release, and
everything after it (the other models, the selection given the models) is a randomized function of that
release and of records it does not hold: ``s epsilon``-DP. A record of the held-out share changes only the
selection, ``s epsilon``-DP given the models. Parallel composition, as the data layer accounts the shares
(the max of their spends), makes steps 1-3 ``s epsilon``-DP; step 4 reads every record again at
``(1 - s) epsilon``, and sequential composition gives ``epsilon``. The candidates and their settings come
from the schema and the caller only (public), never from the records. Candidates on the same records
would compose sequentially (``m`` times the spend); disjoint shares are what lets each one use ``s epsilon``.
The winner's settings are released; its index depends on the data only through the noisy selection.

>>> from streamdp.records.datasets import load
>>> ds = load("congressional-voting")
>>> clf = AutoPrivateClassifier(ds.schema, epsilon=1.0).fit(ds.X, ds.y)
>>> clf.winner_[0] in {name for name, _ in default_candidates(ds.schema)}, round(clf.epsilon_spent_, 9)
(True, 1.0)
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streamdp.learners._base import PrivateLearner
from streamdp.learners.catalogue import ALGORITHMS, AlgorithmError, algorithm
from streamdp.learners.private_data import PrivateDataset
from streamdp.records.domains import Categorical
from streamdp.records.schema import Schema
from streamdp.validation import check_epsilon

__all__ = [
    "AutoPrivateClassifier",
    "DroppedCandidateWarning",
    "Selection",
    "default_candidates",
    "select_learner",
    "usable_candidates",
]

#: A candidate: a catalogue algorithm's name and its parameters.
CandidateSpec = tuple[str, dict]

#: The default share of epsilon spent on choosing (the rest refits the winner on every record).
DEFAULT_SELECTION_SHARE = 0.1


def default_candidates(schema: Schema) -> list[CandidateSpec]:
    """The default candidates for ``schema`` (public: the schema only): Private-RDT and, when categorical
    attributes outnumber numeric ones, DPEA (which splits on the categorical ones and ignores the numeric).
    Where most attributes are numeric DPEA sees little of the data, yet at a share's scale its near-majority
    vote often looks as good as the forest and wins the selection; DiffPC4.5 is not offered either (it lost
    to the forest alone as a second candidate). Few candidates, because each one takes a share of the records
    (choice and evidence: docs/decisions/015-private-learner-selection.md).

    >>> from streamdp.records.datasets import load
    >>> [name for name, _ in default_candidates(load("congressional-voting").schema)]
    ['private-rdt', 'dpea']
    """
    categorical = sum(isinstance(a, Categorical) for a in schema.attributes)
    out: list[CandidateSpec] = [("private-rdt", {})]
    return out + [("dpea", {})] if 2 * categorical > len(schema.attributes) else out


class DroppedCandidateWarning(UserWarning):
    """A candidate that cannot learn from the schema (the catalogue's rule) was left out of the selection."""


def check_candidates(candidates: Any, schema: Schema | None = None) -> list[CandidateSpec]:
    """``candidates`` as ``[(name, params), ...]`` with every name in the catalogue (a batch learner or the
    geometric forest) and every parameter within its rule; :class:`AlgorithmError` otherwise. With ``schema``,
    only the candidates that can learn from it (:func:`usable_candidates`; :class:`AlgorithmError` if none)."""
    if not isinstance(candidates, (list, tuple)) or not candidates:
        raise AlgorithmError(f"candidates must be a non-empty list of [algorithm, params], got {candidates!r}")
    out = []
    for c in candidates:
        if not isinstance(c, (list, tuple)) or len(c) != 2:
            raise AlgorithmError(f"a candidate is [algorithm, params], got {c!r}")
        name, params = c
        selectable = [n for n, a in ALGORITHMS.items() if n != "auto" and a.mechanism != "kanon"]
        if name not in selectable:
            known = "" if name in ALGORITHMS else "unknown algorithm; "
            raise AlgorithmError(f"candidate {name!r}: {known}a candidate is one of {', '.join(selectable)}")
        out.append((name, algorithm(name).check_params(params)))
    return out if schema is None else usable_candidates(out, schema)[0]


def usable_candidates(candidates: list[CandidateSpec], schema: Schema) -> tuple[list[CandidateSpec], list[str]]:
    """The candidates that can learn from ``schema`` by the catalogue's rule
    (:meth:`~streamdp.learners.catalogue.Algorithm.schema_refusal`), and a message for each one left out;
    :class:`AlgorithmError` if none is left. The schema alone decides (public), before anything is charged: a
    candidate left out takes no share of the records nor of the budget.

    >>> from streamdp.records.schema import Schema
    >>> numeric = Schema.from_dict({"attributes": [{"name": "x", "type": "numeric", "min": 0, "max": 1}],
    ...                             "label": {"name": "y", "values": [0, 1]}})
    >>> kept, said = usable_candidates([("sulq-id3", {}), ("private-rdt", {})], numeric)
    >>> kept, said[0].startswith("auto leaves out candidate sulq-id3: sulq-id3 (SuLQID3) splits")
    ([('private-rdt', {})], True)
    """
    kept, said = [], []
    for name, params in candidates:
        why = algorithm(name).schema_refusal(schema)
        if why is None:
            kept.append((name, params))
        else:
            said.append(f"auto leaves out candidate {name}: {why}")
    if not kept:
        raise AlgorithmError("auto has no candidate that can learn from this schema: " + "; ".join(said))
    return kept, said


@dataclass
class Selection:
    """What :func:`select_learner` returns: the winner's index and spec, its fitted model, the candidates."""

    index: int
    winner: CandidateSpec
    model: Any
    candidates: list[CandidateSpec] = field(default_factory=list)


def fit_candidate(spec: CandidateSpec, pds: PrivateDataset, epsilon: float, seed: int | None = None) -> Any:
    """Candidate ``spec`` fitted on ``pds`` at ``epsilon`` (charged to ``pds``; ``epsilon`` per person);
    ``seed`` draws a forest's structure where the spec sets none (public)."""
    name, params = spec
    a = algorithm(name)
    if a.is_forest:
        p = {**a.defaults(), **params}
        p["seed"] = p["seed"] if p["seed"] is not None else seed
        forest = a.cls().create(
            pds.schema,
            n_trees=p.pop("n_trees"),
            height=p.pop("height"),
            epsilon=epsilon / pds.records_per_unit,
            seed=p.pop("seed"),
            **p,
        )
        return pds.forest_release(forest, epsilon)
    return a.cls()(pds.schema, epsilon=epsilon, **params).fit(pds)


def proba_encoded(model: Any, Xe: np.ndarray) -> np.ndarray:
    """Class probabilities of encoded records from a fitted learner or forest (post-processing)."""
    if hasattr(model, "proba_from_leaves"):
        return model.proba_from_leaves(model.structure.apply(Xe, model.schema.is_categorical))
    return model.predict_proba_encoded(Xe)


def select_learner(
    pds: PrivateDataset,
    epsilon: float,
    candidates: list[CandidateSpec] | None = None,
    selection_share: float = DEFAULT_SELECTION_SHARE,
    seed: int | None = None,
    holdout_share: float | None = None,
) -> Selection:
    """Choose among ``candidates`` (default :func:`default_candidates`) privately and fit the winner,
    spending ``epsilon`` of ``pds`` in all (module docstring). Raises
    :class:`~streamdp.privacy.ledger.BudgetExceeded` before reading if ``pds`` lacks ``epsilon``,
    :class:`AlgorithmError` for a bad candidate, :class:`ValueError` for a bad share. ``seed`` makes the
    forest candidates' structures reproducible (public; candidate ``i`` uses ``seed + i``). ``holdout_share``:
    the expected share of records that scores the candidates (None: ``1 / (m + 1)``, as every candidate's)."""
    check_epsilon(epsilon)
    _check_shares(selection_share, holdout_share)
    cands = check_candidates(candidates if candidates is not None else default_candidates(pds.schema))
    cands, left_out = usable_candidates(cands, pds.schema)  # (before any charge: the schema alone decides)
    for message in left_out:
        warnings.warn(message, DroppedCandidateWarning, stacklevel=2)
    if not pds.can_charge(epsilon):
        from streamdp.privacy.ledger import BudgetExceeded

        raise BudgetExceeded(f"selection needs epsilon={epsilon:g}, the dataset has {pds.remaining:g} left")
    if len(cands) == 1:  # nothing to choose: the one candidate gets everything
        return Selection(0, cands[0], fit_candidate(cands[0], pds, epsilon, seed), cands)
    e_select = epsilon * selection_share
    m = len(cands)
    h = 1.0 / (m + 1) if holdout_share is None else float(holdout_share)
    shares = pds.split([(1.0 - h) / m] * m + [h])
    seeds = [None if seed is None else seed + i for i in range(m)]
    models, said = [], []
    for c, part, s in zip(cands, shares, seeds):  # (a losing candidate's warnings are not the result's)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            models.append(fit_candidate(c, part, e_select, s))
        said.append(caught)
    index = shares[-1].most_accurate([_predictor(mod) for mod in models], e_select)
    if selection_share < 1:  # (sequential composition: e_select + (epsilon - e_select) = epsilon)
        refit = fit_candidate(cands[index], pds, epsilon - e_select, seeds[index])
        return Selection(index, cands[index], refit, cands)
    for w in said[index]:
        warnings.warn(w.message, stacklevel=2)
    return Selection(index, cands[index], models[index], cands)


def _check_shares(selection_share: Any, holdout_share: Any) -> None:
    if not (isinstance(selection_share, (int, float)) and 0 < selection_share <= 1):
        raise ValueError(f"selection_share must be in (0, 1], got {selection_share!r}")
    if holdout_share is not None and not (isinstance(holdout_share, (int, float)) and 0 < holdout_share < 1):
        raise ValueError(f"holdout_share must be in (0, 1) or None, got {holdout_share!r}")


def _predictor(model: Any) -> Any:
    return lambda Xe: proba_encoded(model, Xe).argmax(axis=1)


class AutoPrivateClassifier(PrivateLearner):
    """The most accurate of a few private learners, chosen privately (:func:`select_learner`).

    Parameters: ``schema``; ``epsilon`` (the whole spend, selection included); ``candidates``
    (``[(algorithm, params), ...]`` from the catalogue; None: :func:`default_candidates`);
    ``selection_share`` (the part of epsilon spent on choosing; 1: no refit, the winner keeps its share's
    fit); ``seed`` (reproducible forest structures, public); ``holdout_share`` (the records that score the
    candidates; None: as many as each candidate's). After ``fit``: ``winner_`` (the chosen ``(algorithm, params)``,
    released), ``learner_`` (the same as text: ``"dpea"``, ``'private-rdt {"n_trees": 2}'``) and ``model_``;
    the winner's warnings (:class:`~streamdp.learners.IgnoredAttributesWarning`, ...) are raised by ``fit``.
    ``to_bytes`` writes the winner's own blob (:func:`streamdp.learners.load_model` decodes it).

    Why: which learner wins depends on the data and the budget, and choosing on exact validation scores
    would leak them; a private choice makes the choice part of the guarantee.
    """

    FORMAT = "streamdp.auto"
    ALLOWS_INF = False

    def __init__(
        self,
        schema: Schema,
        epsilon: float = 1.0,
        candidates: list | None = None,
        selection_share: float = DEFAULT_SELECTION_SHARE,
        seed: int | None = None,
        holdout_share: float | None = None,
        noise_seed: int | None = None,
    ):
        self.schema = schema
        self.epsilon = epsilon
        self.candidates = candidates
        self.selection_share = selection_share
        self.seed = seed
        self.holdout_share = holdout_share
        self.noise_seed = noise_seed

    def _check_params(self) -> None:
        super()._check_params()
        if self.candidates is not None:
            check_candidates(self.candidates, self.schema)  # (none that can learn from the schema: refused)
        _check_shares(self.selection_share, self.holdout_share)

    def warn_ignored(self, stacklevel: int = 2) -> None:
        """No warning of its own: the winner's fit warns (a losing candidate's warnings are dropped)."""

    def _fit(self, pds: PrivateDataset) -> None:
        sel = select_learner(
            pds, float(self.epsilon), self.candidates, self.selection_share, self.seed, self.holdout_share
        )
        self.winner_, self.model_, self.candidates_ = sel.winner, sel.model, sel.candidates
        name, params = sel.winner
        self.learner_ = name + (" " + ", ".join(f"{k}={params[k]!r}" for k in sorted(params)) if params else "")

    def _check_fitted(self) -> None:
        if not hasattr(self, "model_"):
            from streamdp.validation import NotFittedError

            raise NotFittedError("this AutoPrivateClassifier is not fitted yet: call fit")

    def predict_proba_encoded(self, Xe: np.ndarray) -> np.ndarray:
        self._check_fitted()
        return proba_encoded(self.model_, np.asarray(Xe, dtype=np.float64))

    def predict_proba(self, X: Any) -> np.ndarray:
        self._check_fitted()
        return self.model_.predict_proba(X)

    def cell_variance(self) -> float:
        """The winner's noise variance per released cell."""
        self._check_fitted()
        return float(self.model_.cell_variance())

    def to_bytes(self) -> bytes:
        """The winner's blob (its own format)."""
        self._check_fitted()
        return self.model_.to_bytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> Any:
        """The winner's model, decoded by its own format (:func:`streamdp.learners.load_model`)."""
        from streamdp.learners import load_model

        return load_model(data)
