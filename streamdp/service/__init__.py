"""Redis service parts: they move bytes and call the pure core.

Modules: :mod:`.connection` (clients and timeouts), :mod:`.keys` (key layout),
:mod:`.registry` (create/list/show/delete models), :mod:`.published` (the
published counts format), :mod:`.codec` (batch envelope), :mod:`.producer`,
:mod:`.consumer`, :mod:`.group` (the consumer-group loop), :mod:`.stream_worker`
(+ :mod:`.commit`, the atomic Lua merge; :mod:`.faults`, test-only fault
points), :mod:`.pool` (worker processes), :mod:`.job_queue` and
:mod:`.job_worker` (batch jobs), :mod:`.ledger_store`, :mod:`.retention`,
:mod:`.stats`, :mod:`.embedded` (find or start a Redis).
"""

from streamdp.service.connection import connect
from streamdp.service.consumer import Consumer, VersionNotAvailable
from streamdp.service.job_queue import JobQueue, fetch_model
from streamdp.service.job_worker import JobWorker, run_job_worker
from streamdp.service.keys import Keys
from streamdp.service.pool import WorkerPool, run_workers
from streamdp.service.producer import Producer
from streamdp.service.registry import ModelExists, ModelNotFound, create_model, delete_model, list_models, show_model
from streamdp.service.stream_worker import Worker, WorkerConfig

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
