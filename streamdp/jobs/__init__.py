"""Batch jobs: a learner from the catalogue run over a private dataset, charged to its ledger."""

from streamdp.jobs.runner import (
    ALGORITHMS,
    Algorithm,
    AlgorithmNotAvailable,
    JobError,
    JobResult,
    JobSpec,
    algorithm,
    check_params,
    describe,
    parse_param,
    run_job,
)

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
    "parse_param",
    "run_job",
]
