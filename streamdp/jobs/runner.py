"""On-demand batch jobs: which algorithms exist, their parameters, and how one job runs (pure; no Redis).

A job is ``(algorithm, epsilon, params)`` over one data source; the
algorithms and their parameters are those of :mod:`streamdp.learners.catalogue`.
:func:`run_job` checks every parameter against the catalogue, then charges
the ledger **first** (one spend, idempotency key = the job id, so a retried
job is charged once), only then loads the data, fits, and returns the model
blob (decodable by :func:`streamdp.learners.load_model`).

A job with a privacy id (``JobSpec.privacy_id``, ``max_records_per_id = K``) spends its epsilon per person:
``load`` then returns the records' ids too, at most ``K`` records per id are kept (a uniform sample from the
secure source, :func:`streamdp.privacy.contribution.bound_contributions`) before the fit, and every release's
noise is calibrated to sensitivity ``K``: a learner through the data layer charges ``epsilon`` per query and
draws its noise at ``epsilon / K``; a Private-RDT forest is fitted at ``epsilon / K`` (the epsilon its blob
states is that per record). Proof sketch: :mod:`streamdp.privacy.contribution` (group privacy of a pure-DP
fit). The k-anonymity forest is ``(epsilon, delta)``-DP, which this does not make per person: refused with an id.

>>> from streamdp.records.datasets import load
>>> from streamdp.privacy.ledger import InMemoryLedger
>>> ds = load("congressional-voting")
>>> enc = ds.schema.encode(ds.X, ds.y)
>>> led = InMemoryLedger(); led.set_budget("votes", 1.0)
>>> spec = JobSpec("private-rdt", 0.5, {"n_trees": 3, "height": 2})
>>> res = run_job(spec, ds.schema, lambda: (enc.X, enc.y), led, "votes", "job-1")
>>> run_job(spec, ds.schema, lambda: (enc.X, enc.y), led, "votes", "job-1").format  # a retry: charged once
'streamdp.forest'
>>> led.spent("votes")
(0.5, 0.0)
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streamdp import blob
from streamdp.estimation import cell_variance
from streamdp.learners.catalogue import ALGORITHMS, Algorithm, AlgorithmError, AlgorithmNotAvailable, algorithm
from streamdp.learners.private_data import PrivateDataset
from streamdp.privacy.contribution import bound_contributions, check_unit
from streamdp.privacy.ledger import Ledger
from streamdp.privacy.secure_random import NearlyExactWarning, SecureRandom
from streamdp.records.schema import Schema
from streamdp.release.variance import NEARLY_EXACT_SD, largest_noisy_epsilon, nearly_exact_words
from streamdp.validation import check_epsilon

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "JobSpec",
    "JobResult",
    "JobError",
    "AlgorithmNotAvailable",
    "algorithm",
    "check_params",
    "describe",
    "empty_release_warning",
    "job_warnings",
    "parse_param",
    "run_job",
]

# A job that cannot run as specified (unknown algorithm or parameter, bad value); retrying will not help.
JobError = AlgorithmError


def parse_param(text: str) -> tuple[str, Any]:
    """``"k=v"`` from the command line: ``v`` as JSON when it parses (numbers, true, null), else a string.

    >>> parse_param("max_depth=5"), parse_param("embed_depth=whole"), parse_param("beta=0.5")
    (('max_depth', 5), ('embed_depth', 'whole'), ('beta', 0.5))
    """
    k, sep, v = text.partition("=")
    k = k.strip()
    if not sep or not k:
        raise JobError(f"parameter {text!r} must look like name=value")
    try:
        return k, json.loads(v)
    except ValueError:
        return k, v


@dataclass(frozen=True)
class JobSpec:
    """What a job computes: algorithm, total epsilon, the algorithm's own parameters, and the unit of privacy
    (``privacy_id``: the column naming each record's person, with ``max_records_per_id``; None: a record)."""

    algorithm: str
    epsilon: float
    params: dict = field(default_factory=dict)
    privacy_id: str | None = None
    max_records_per_id: int | None = None

    @property
    def records_per_unit(self) -> int:
        """K (1 without a privacy id); :class:`JobError` for a bad pair."""
        try:
            return check_unit(self.privacy_id, self.max_records_per_id)
        except ValueError as e:
            raise JobError(str(e)) from None

    def to_dict(self) -> dict:
        """The spec as plain data (what the job queue stores)."""
        d = {"algorithm": self.algorithm, "epsilon": self.epsilon, "params": dict(self.params)}
        if self.privacy_id is not None:
            d.update(privacy_id=self.privacy_id, max_records_per_id=self.max_records_per_id)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> JobSpec:
        """The spec from :meth:`to_dict`'s map; :class:`KeyError` / :class:`ValueError` if a field is missing or
        of the wrong type."""
        return cls(
            str(d["algorithm"]),
            float(d["epsilon"]),
            dict(d.get("params") or {}),
            d.get("privacy_id"),
            d.get("max_records_per_id"),
        )


@dataclass(frozen=True)
class JobResult:
    """What a job publishes: the fitted model's blob, its format name, the privacy it spent, the learner that was
    fitted (``auto``: the selection's winner, a released output) and the learners' warnings (public: they name
    the schema's attributes and the parameters, never a record)."""

    blob: bytes
    format: str
    epsilon: float
    delta: float
    learner: str = ""
    warnings: tuple[str, ...] = ()


#: The smallest job epsilon: the learners split a job's epsilon over at most about 10**5 queries (trees x depth,
#: MCMC steps) and the samplers draw noise of scale up to 1e15 (``noise._MIN_LAMBDA``): a job below this
#: would be charged and then fail at its first release.
MIN_JOB_EPSILON = 1e-9


def check_params(spec: JobSpec, schema: Schema | None = None) -> Algorithm:
    """Validate a job before anything is charged: algorithm, epsilon, parameters against the catalogue's
    rules and (with a schema) the estimator built from them."""
    a = algorithm(spec.algorithm)
    try:
        check_epsilon(spec.epsilon)
    except ValueError as e:
        raise JobError(str(e)) from None
    if spec.epsilon < MIN_JOB_EPSILON:
        raise JobError(
            f"epsilon={spec.epsilon:g} is below {MIN_JOB_EPSILON:g}: a learner splits it over its queries "
            "and the noise samplers stop at scale 1e15, so its releases could not be drawn; refused "
            "before anything is charged"
        )
    a.cls()  # AlgorithmNotAvailable when the build lacks it
    a.check_params(spec.params)
    k = spec.records_per_unit
    if spec.privacy_id is not None and (not isinstance(spec.privacy_id, str) or not spec.privacy_id):
        raise JobError(f"privacy_id must name a column, got {spec.privacy_id!r}")
    if k > 1 and a.mechanism == "kanon":
        raise JobError(
            f"{a.name} is (epsilon, delta)-DP: its guarantee is not made per person by a bound on records per id "
            "(its delta would grow with K); use private-rdt or a learner, or no privacy id"
        )
    if spec.epsilon / k < MIN_JOB_EPSILON:
        raise JobError(
            f"epsilon / max_records_per_id = {spec.epsilon / k:g} is below {MIN_JOB_EPSILON:g}: the noise per "
            "record could not be drawn; refused before anything is charged"
        )
    if schema is not None:
        why = a.schema_refusal(schema)  # (the catalogue's rule: what each algorithm needs of a schema)
        if why is not None:
            raise JobError(f"{why}; nothing was charged")
        _build(a, spec, schema)
    return a


def job_warnings(spec: JobSpec, schema: Schema) -> list[str]:
    """What a job's public parameters already say about its result, before anything is charged (``job submit``
    warns them, the job's status lists them): a nearly exact epsilon (the noise on a released count below half
    a record, :func:`streamdp.release.variance.largest_noisy_epsilon`, ``model create``'s rule), and ``auto``'s
    candidates left out for the schema. From the spec and the schema alone, never the data.

    >>> from streamdp.records.datasets import load
    >>> job_warnings(JobSpec("private-rdt", 1e300), load("congressional-voting").schema)[0][:46]
    'epsilon=1e+300 releases nearly exact counts: e'
    """
    a = check_params(spec, schema)
    return _public_warnings(a, _build(a, spec, schema), spec, schema)


def _public_warnings(a: Algorithm, est: Any, spec: JobSpec, schema: Schema) -> list[str]:
    """:func:`job_warnings` of the job's unfitted estimator ``est``."""
    said = []
    if a.name == "auto":
        from streamdp.learners.selection import check_candidates, default_candidates, usable_candidates

        cands = spec.params.get("candidates")
        usable, dropped = usable_candidates(check_candidates(cands) if cands else default_candidates(schema), schema)
        said += dropped
        share = _auto_cell_epsilon_share(usable, spec, schema)
    else:
        share = _cell_epsilon_share(a, est, spec)
    if share is not None:
        sd = math.sqrt(cell_variance("geometric", spec.epsilon * share))
        if sd < NEARLY_EXACT_SD:
            above = largest_noisy_epsilon(lambda eps: math.sqrt(cell_variance("geometric", eps * share)))
            said.append(nearly_exact_words(f"epsilon={spec.epsilon:g}", sd, above))
    return said


def _cell_epsilon_share(a: Algorithm, est: Any, spec: JobSpec) -> float | None:
    """The share of the job's epsilon that the noise on one released count of its model gets (public: the
    budget split, per record), or None where no count is noised (k-anonymity) or the learner is not known
    before the fit (``auto``: :func:`_auto_cell_epsilon_share`)."""
    if a.mechanism == "kanon" or a.name == "auto":
        return None
    if a.is_forest:  # (built at epsilon / K: the noise per record)
        return float(est.epsilon_per_tree) / spec.epsilon
    return float(est.epsilon_leaf_counts()) / spec.records_per_unit / spec.epsilon


def _auto_cell_epsilon_share(usable: list, spec: JobSpec, schema: Schema) -> float | None:
    """The largest noise any of ``auto``'s usable candidates would put on one count of the model it returns, as
    :func:`_cell_epsilon_share` gives it (the smallest share: "nearly exact" is said only when every choice
    would be); None where none noises a count. The winner is refit at ``(1 - s) epsilon`` (with ``s``, the
    selection share, below 1), else kept at ``epsilon`` on its share of the records: public either way."""
    from streamdp.learners.selection import DEFAULT_SELECTION_SHARE

    s = spec.params.get("selection_share", DEFAULT_SELECTION_SHARE)
    final = spec.epsilon * (1 - s) if s < 1 else spec.epsilon
    shares = []
    for name, params in usable:
        sub = JobSpec(name, final, dict(params), spec.privacy_id, spec.max_records_per_id)
        c = algorithm(name)
        share = _cell_epsilon_share(c, _build(c, sub, schema), sub)
        if share is not None:
            shares.append(share * final / spec.epsilon)
    return min(shares) if shares else None


def empty_release_warning(a: Algorithm, est: Any, spec: JobSpec) -> str | None:
    """A warning when a fitted k-anonymity forest released no count at all (every cell below ``k`` after
    sampling at ``beta``): it then predicts the first label. A function of the released counts only
    (post-processing); no count is named."""
    if a.mechanism != "kanon" or np.any(est.counts):
        return None
    k, beta = spec.params["k"], spec.params["beta"]
    need = k / float(est.record_share)  # (beta, or beta / trees with the disjoint budget: public)
    return (
        f"{a.name} released no records: every count was below k={k} after sampling at beta={beta:g}, so the "
        f"model predicts the first label; a count is kept only where about {need:,.0f} records of a class "
        "reach a leaf (lower k, raise beta, or use private-rdt)"
    )


def _build(a: Algorithm, spec: JobSpec, schema: Schema) -> Any:
    """The unfitted estimator, with its parameters checked (raises :class:`JobError`)."""
    try:
        if a.is_forest:
            p = {**a.defaults(), **spec.params}
            with warnings.catch_warnings():  # (a nearly exact epsilon: job_warnings says it, for every algorithm)
                warnings.simplefilter("ignore", NearlyExactWarning)
                return a.cls().create(
                    schema,
                    n_trees=p.pop("n_trees"),
                    height=p.pop("height"),
                    epsilon=spec.epsilon / spec.records_per_unit,  # (noise per record: epsilon per person of K records)
                    mechanism=a.mechanism,
                    seed=p.pop("seed"),
                    **p,
                )
        m = a.cls()(schema=schema, epsilon=spec.epsilon, **spec.params)
        m._check_params()
        return m
    except JobError:
        raise
    except (ValueError, TypeError) as e:
        raise JobError(f"{a.name}: {e}") from None


def run_job(
    spec: JobSpec,
    schema: Schema,
    load: Callable[[], tuple],
    ledger: Ledger,
    source: str,
    job_id: str,
    progress: Callable[[str, float], None] | None = None,
) -> JobResult:
    """Charge ``ledger`` (key ``job_id``), then ``load()`` the encoded records, fit, and return the blob.

    ``load`` returns ``(X, y)`` encoded against ``schema`` (float64 codes, label
    codes), and the records' privacy ids ``(X, y, ids)`` when the spec has a privacy id; it is called only
    after the charge succeeded, so a refused job
    (:class:`~streamdp.privacy.ledger.BudgetExceeded`) reads no data. A retry with the
    same ``job_id`` is not charged again.
    """
    if not job_id:
        raise ValueError("run_job needs a job id (the ledger's idempotency key)")
    say = progress or (lambda stage, fraction: None)
    a = check_params(spec, schema)
    est = _build(a, spec, schema)
    delta = float(est.delta) if a.is_forest else 0.0
    before = _public_warnings(a, est, spec, schema)  # (unfitted: the budget split as declared)
    say("charging", 0.0)
    what = f"{a.name} {json.dumps(spec.params, sort_keys=True)}"
    k = spec.records_per_unit
    ledger.charge(
        source,
        spec.epsilon,
        delta=delta,
        who=f"job:{job_id}",
        what=what,
        key=job_id,
        privacy_id=spec.privacy_id,
        max_records_per_id=k if spec.privacy_id is not None else None,
    )
    say("reading", 0.1)
    loaded = load()
    if (len(loaded) == 3) != (spec.privacy_id is not None):
        raise JobError("the job's data and its privacy id disagree (ids expected exactly when the spec names one)")
    X = np.asarray(loaded[0], dtype=np.float64).reshape(-1, schema.n_attributes)
    y = np.asarray(loaded[1], dtype=np.int64)
    rng = SecureRandom()
    if spec.privacy_id is not None:  # at most K records per person, before anything is computed on them
        kept = bound_contributions(loaded[2], k, rng)
        X, y = X[kept], y[kept]
    say("fitting", 0.4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if a.is_forest:
            est.fit_encoded(X, y)  # Private-RDT's one-shot fit, height a ceiling (pruned by the stumps' release)
        else:
            pds = PrivateDataset(schema, X, y, epsilon=spec.epsilon, rng=rng, records_per_unit=k)
            est.fit(pds)
    fitted = [  # (a nearly exact release is said once, by job_warnings from public parameters, not by each fit)
        str(w.message)
        for w in caught
        if type(w.message).__module__.startswith("streamdp") and not isinstance(w.message, NearlyExactWarning)
    ]
    empty = empty_release_warning(a, est, spec)
    said = tuple(dict.fromkeys([*before, *fitted, *([empty] if empty else [])]))
    say("serializing", 0.9)
    data = est.to_bytes()
    return JobResult(data, blob.format_of(data), spec.epsilon, delta, getattr(est, "learner_", a.name), said)


def describe() -> list[dict]:
    """Every algorithm with its availability, parameters and their rules (for ``streamdp job algorithms``)."""
    return [a.describe() for a in ALGORITHMS.values()]
