"""Redis service parts: they move bytes and call the pure core.

Modules: :mod:`.keys` (key layout), :mod:`.registry` (create/list/show/delete
models), :mod:`.codec` (batch envelope), :mod:`.producer`, :mod:`.consumer`,
:mod:`.worker` (+ :mod:`.commit`, the atomic Lua merge), :mod:`.stats`,
:mod:`.embedded` (find or start a Redis).
"""

from .consumer import Consumer, VersionNotAvailable
from .keys import Keys
from .producer import Producer
from .registry import ModelExists, ModelNotFound, create_model, delete_model, list_models, show_model
from .worker import Worker, WorkerConfig, WorkerPool, run_workers

__all__ = ["Producer", "Consumer", "Worker", "WorkerConfig", "WorkerPool", "run_workers", "Keys", "create_model", "delete_model",
           "list_models", "show_model", "ModelExists", "ModelNotFound", "VersionNotAvailable"]
