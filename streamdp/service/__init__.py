"""Redis service parts: they move bytes and call the pure core.

One concept per module; the table of ``docs/service.md`` (the streaming service) names each, and a test keeps
it complete. The entry points: :class:`Producer`, :class:`Consumer`, :class:`Worker` and :class:`WorkerPool`,
:func:`create_model` and the registry's functions, the job queue and job worker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamdp.lazy import lazy_names

if TYPE_CHECKING:  # the names' types for checkers; at run time each is imported on first use (below)
    from streamdp.service.connection import connect
    from streamdp.service.consumer import Consumer, VersionNotAvailable
    from streamdp.service.job_queue import JobQueue, fetch_model
    from streamdp.service.job_worker import JobWorker, run_job_worker
    from streamdp.service.keys import Keys
    from streamdp.service.pool import WorkerPool, run_workers
    from streamdp.service.producer import Producer
    from streamdp.service.registry import (
        ModelExists,
        ModelNotFound,
        create_model,
        delete_model,
        list_models,
        show_model,
    )
    from streamdp.service.stream_worker import Worker, WorkerConfig

#: Where each public name lives; imported on first use, so a worker process (which imports
#: :mod:`.pool` or :mod:`.stream_worker`) does not load the job queue and its CSV reader (pandas).
_WHERE = {
    "connect": "connection",
    "Consumer": "consumer",
    "VersionNotAvailable": "consumer",
    "JobQueue": "job_queue",
    "fetch_model": "job_queue",
    "JobWorker": "job_worker",
    "run_job_worker": "job_worker",
    "Keys": "keys",
    "WorkerPool": "pool",
    "run_workers": "pool",
    "Producer": "producer",
    "ModelExists": "registry",
    "ModelNotFound": "registry",
    "create_model": "registry",
    "delete_model": "registry",
    "list_models": "registry",
    "show_model": "registry",
    "Worker": "stream_worker",
    "WorkerConfig": "stream_worker",
}


__getattr__ = lazy_names("streamdp.service", _WHERE, globals(), prefix="streamdp.service.")


__all__ = [
    "Producer",
    "Consumer",
    "Worker",
    "WorkerConfig",
    "WorkerPool",
    "run_workers",
    "Keys",
    "create_model",
    "delete_model",
    "list_models",
    "show_model",
    "ModelExists",
    "ModelNotFound",
    "VersionNotAvailable",
    "JobQueue",
    "JobWorker",
    "run_job_worker",
    "fetch_model",
    "connect",
]
