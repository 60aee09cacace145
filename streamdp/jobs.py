"""On-demand batch jobs: which algorithms exist, their parameters, and how one job runs (pure; no Redis).

A job is ``(algorithm, epsilon, params)`` over one data source. :func:`run_job`
charges the ledger **first** (one spend, idempotency key = the job id, so a
retried job is charged once), only then loads the data, fits, and returns
the model blob (decodable by :func:`streamdp.learners.load_model`).

=================  ==========================================================
``dpea``           :class:`streamdp.learners.DPEA` (Bai et al.)
``sulq-id3``       :class:`streamdp.learners.SuLQID3`
``diffp-id3``      :class:`streamdp.learners.DiffPID3`
``diffp-c45``      :class:`streamdp.learners.DiffPC45`
``hanisch-forest`` :class:`streamdp.learners.HanischForest`
``private-rdt``    one-shot Private-RDT (:class:`streamdp.PrivateForest`, geometric noise)
``kanon-forest``   the k-anonymity forest (:class:`streamdp.PrivateForest`, ``mechanism="kanon"``)
=================  ==========================================================

>>> from streamdp.datasets import load
>>> from streamdp.ledger import InMemoryLedger
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

import inspect
import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .ledger import Ledger
from .private_data import PrivateDataset
from .schema import Schema

__all__ = ["ALGORITHMS", "Algorithm", "JobSpec", "JobResult", "JobError", "AlgorithmNotAvailable",
           "algorithm", "check_params", "describe", "parse_param", "run_job"]


class JobError(ValueError):
    """A job that cannot run as specified (unknown algorithm or parameter, bad value); retrying will not help."""


class AlgorithmNotAvailable(JobError):
    """The algorithm's module is not part of this build."""


@dataclass(frozen=True)
class Algorithm:
    name: str
    description: str
    learner: str | None = None  # class name in streamdp.learners; None: a PrivateForest algorithm
    mechanism: str | None = None  # PrivateForest mechanism

    def cls(self) -> type:
        """The estimator class (imported now; :class:`AlgorithmNotAvailable` if absent)."""
        if self.learner is None:
            from .forest import PrivateForest

            return PrivateForest
        try:
            import streamdp.learners as learners

            return getattr(learners, self.learner)
        except (ImportError, AttributeError) as e:
            raise AlgorithmNotAvailable(f"algorithm {self.name!r} is not available in this build "
                                        f"(streamdp.learners.{self.learner}: {e})") from None

    def param_names(self) -> list[str]:
        """Parameters a job may set (schema and epsilon come from the job; test-only seeds are excluded)."""
        if self.learner is None:
            names = ["n_trees", "height", "seed", "vote", "budget"]
            return names + (["k", "beta"] if self.mechanism == "kanon" else [])
        sig = inspect.signature(self.cls().__init__)
        return [p for p in sig.parameters if p not in ("self", "schema", "epsilon", "noise_seed")]


ALGORITHMS: dict[str, Algorithm] = {a.name: a for a in (
    Algorithm("dpea", "Bai et al.'s deep embedding with MCMC", learner="DPEA"),
    Algorithm("sulq-id3", "Friedman & Schuster's SuLQ-based ID3", learner="SuLQID3"),
    Algorithm("diffp-id3", "Friedman & Schuster's DiffPID3", learner="DiffPID3"),
    Algorithm("diffp-c45", "Friedman & Schuster's DiffPC4.5", learner="DiffPC45"),
    Algorithm("hanisch-forest", "Hanisch's private random forest", learner="HanischForest"),
    Algorithm("private-rdt", "one-shot Private-RDT (random trees, geometric noise)", mechanism="geometric"),
    Algorithm("kanon-forest", "random trees with beta-sampling and a k threshold", mechanism="kanon"),
)}


def algorithm(name: str) -> Algorithm:
    """The algorithm called ``name`` (:class:`JobError` naming the known ones otherwise)."""
    a = ALGORITHMS.get(name)
    if a is None:
        raise JobError(f"unknown algorithm {name!r}; known: {', '.join(ALGORITHMS)}")
    return a


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
    """What a job computes: algorithm, total epsilon, the algorithm's own parameters."""

    algorithm: str
    epsilon: float
    params: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"algorithm": self.algorithm, "epsilon": self.epsilon, "params": dict(self.params)}

    @classmethod
    def from_dict(cls, d: dict) -> "JobSpec":
        return cls(str(d["algorithm"]), float(d["epsilon"]), dict(d.get("params") or {}))


@dataclass(frozen=True)
class JobResult:
    blob: bytes
    format: str
    epsilon: float
    delta: float


def _check_epsilon(e: Any) -> float:
    if isinstance(e, bool) or not isinstance(e, (int, float)) or not math.isfinite(e) or e <= 0:
        raise JobError(f"epsilon must be a finite number > 0, got {e!r}")
    return float(e)


def check_params(spec: JobSpec, schema: Schema | None = None) -> Algorithm:
    """Validate a job before anything is charged: algorithm, epsilon, parameter names and (with a schema) values."""
    a = algorithm(spec.algorithm)
    _check_epsilon(spec.epsilon)
    if not isinstance(spec.params, dict):
        raise JobError(f"params must be a mapping, got {type(spec.params).__name__}")
    known = a.param_names()
    for k in spec.params:
        if k == "noise_seed":
            raise JobError("noise_seed is for tests only (it makes a model NOT private); jobs are always private")
        if k not in known:
            raise JobError(f"algorithm {a.name!r} has no parameter {k!r}; parameters: {', '.join(known)}")
    if schema is not None:
        _build(a, spec, schema)
    return a


def _build(a: Algorithm, spec: JobSpec, schema: Schema) -> Any:
    """The unfitted estimator, with its parameters checked (raises :class:`JobError`)."""
    try:
        if a.learner is None:
            from .forest import PrivateForest

            p = dict(spec.params)
            if a.mechanism == "kanon" and ("k" not in p or "beta" not in p):
                raise JobError("kanon-forest needs parameters k (threshold) and beta (sampling rate)")
            return PrivateForest.create(schema, n_trees=p.pop("n_trees", 10), height=p.pop("height", None),
                                        epsilon=spec.epsilon, mechanism=a.mechanism, seed=p.pop("seed", None), **p)
        m = a.cls()(schema=schema, epsilon=spec.epsilon, **spec.params)
        check = getattr(m, "_check_params", None)
        if check is not None:
            check()
        return m
    except JobError:
        raise
    except (ValueError, TypeError) as e:
        raise JobError(f"{a.name}: {e}") from None


def run_job(
    spec: JobSpec,
    schema: Schema,
    load: Callable[[], tuple[np.ndarray, np.ndarray]],
    ledger: Ledger,
    source: str,
    job_id: str,
    progress: Callable[[str, float], None] | None = None,
) -> JobResult:
    """Charge ``ledger`` (key ``job_id``), then ``load()`` the encoded records, fit, and return the blob.

    ``load`` returns ``(X, y)`` encoded against ``schema`` (float64 codes, label
    codes); it is called only after the charge succeeded, so a refused job
    (:class:`~streamdp.ledger.BudgetExceeded`) reads no data. A retry with the
    same ``job_id`` is not charged again.
    """
    if not job_id:
        raise ValueError("run_job needs a job id (the ledger's idempotency key)")
    say = progress or (lambda stage, fraction: None)
    a = check_params(spec, schema)
    est = _build(a, spec, schema)
    delta = float(est.delta) if a.learner is None else 0.0
    say("charging", 0.0)
    what = f"{a.name} {json.dumps(spec.params, sort_keys=True)}"
    ledger.charge(source, spec.epsilon, delta=delta, who=f"job:{job_id}", what=what, key=job_id)
    say("reading", 0.1)
    X, y = load()
    X = np.asarray(X, dtype=np.float64).reshape(-1, schema.n_attributes)
    y = np.asarray(y, dtype=np.int64)
    say("fitting", 0.4)
    if a.learner is None:
        # A fresh forest holds zero counts: merging one noisy release is Private-RDT's fit on encoded records.
        est.merge(est.noisy_delta_encoded(X, y))
    else:
        pds = PrivateDataset(schema, X, y, epsilon=spec.epsilon)
        est.fit(pds)
    say("serializing", 0.9)
    data = est.to_bytes()
    return JobResult(data, _format_of(data), spec.epsilon, delta)


def _format_of(data: bytes) -> str:
    import msgpack

    doc = msgpack.unpackb(data, raw=False, strict_map_key=False)
    return str(doc.get("format", "")) if isinstance(doc, dict) else ""


def describe() -> list[dict]:
    """Every algorithm with its availability and parameters (for ``streamdp job algorithms``)."""
    out = []
    for a in ALGORITHMS.values():
        try:
            out.append({"name": a.name, "description": a.description, "available": True, "params": a.param_names()})
        except AlgorithmNotAvailable as e:
            out.append({"name": a.name, "description": a.description, "available": False, "reason": str(e)})
    return out
