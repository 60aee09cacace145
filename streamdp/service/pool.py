"""A pool of stream worker processes for one model (spawned, so no state is shared but the Redis URL)."""

from __future__ import annotations

import logging
import multiprocessing as mp
import multiprocessing.connection as mp_connection
import os
import signal
import sys
import threading
import time
from typing import Any, NoReturn

import redis

from streamdp.service.log import jlog
from streamdp.service.rollback import WorkerRefused, load_noise_key
from streamdp.service.stream_worker import Worker, WorkerConfig, warn_unkeyed

__all__ = ["WorkerPool", "run_workers"]

log = logging.getLogger("streamdp.worker")


def _child(redis_url: Any, model: str, kw: dict, until_drained: bool, log_level: int) -> None:
    logging.basicConfig(level=log_level, format="%(message)s")
    parent = mp.parent_process()  # (its sentinel was made with this process: a pool gone since still shows)
    try:
        worker = Worker(redis_url, model, warn_unkeyed=False, **kw)  # (the pool warned once for all its processes)
    except (WorkerRefused, ValueError, OSError) as e:  # a configuration error: one line, no traceback
        _refused(model, e)
    if parent is not None:
        threading.Thread(
            target=_stop_with_parent, args=(worker, parent), daemon=True, name="streamdp-parent-watch"
        ).start()
    try:
        worker.run(until_drained=until_drained)
    except WorkerRefused as e:  # (a rollback seen, a key changed under it: the worker stops drawing)
        _refused(model, e)


#: A worker process's exit status when it refuses its configuration (:func:`_refused`).
EXIT_REFUSED = 3
#: A pool restarts at most this many killed processes (:meth:`WorkerPool.restart_killed`) ...
MAX_RESTARTS = 5
#: ... within this many seconds.
RESTART_WINDOW_S = 60.0


def _refused(model: str, e: BaseException) -> NoReturn:
    """Log why this worker process refuses to run (``worker.refused``: one line) and exit with
    :data:`EXIT_REFUSED`."""
    jlog(log, logging.ERROR, "worker.refused", model=model, error=type(e).__name__, reason=str(e))
    sys.exit(EXIT_REFUSED)


def _stop_with_parent(worker: Worker, parent: Any) -> None:
    """Stop ``worker`` gracefully (after its step in hand) once the pool process that started it is gone: a pool
    killed with SIGKILL must not leave its workers running, orphaned.
    Waits on the parent's sentinel, which ``multiprocessing`` opened when the pool started this process, so a
    pool that died while this one was still starting is seen too (a parent pid read at start would then
    already be the adopter's)."""
    mp_connection.wait([parent.sentinel])
    if not worker.stopping:
        jlog(
            log,
            logging.WARNING,
            "worker.pool_gone",
            model=worker.model,
            consumer=worker.name,
            hint="the worker pool that started this worker is gone: stopping",
        )
        worker.stop()


class WorkerPool:
    """``processes`` worker processes (spawned) for one model; :meth:`stop` ends them gracefully."""

    def __init__(
        self,
        model: str,
        processes: int | None = None,
        redis_url: Any = None,
        *,
        until_drained: bool = False,
        log_level: int = logging.INFO,
        **config: Any,
    ):
        if isinstance(redis_url, redis.Redis):
            raise TypeError("worker processes need a URL, not a client")
        for k in config:
            if not hasattr(WorkerConfig, k):
                raise TypeError(f"unknown worker option {k!r}")
        self.model = model
        self.noise_key_file = config.get("noise_key_file")
        self.n = processes or os.cpu_count() or 1
        self._args = (redis_url, model, config, until_drained, log_level)
        self.procs = [self._process(i) for i in range(self.n)]
        self._restarts: list[float] = []  # (when processes were restarted: at most MAX_RESTARTS a RESTART_WINDOW_S)

    def _process(self, i: int) -> Any:
        return mp.get_context("spawn").Process(target=_child, args=self._args, daemon=True, name=f"streamdp-worker-{i}")

    @staticmethod
    def _start(procs: list) -> None:
        # Spawned with Ctrl-C blocked (the mask is inherited through exec): a terminal's Ctrl-C reaches every
        # process, and one still importing printed its traceback. The pool's own Ctrl-C, held meanwhile, arrives
        # once they are started; it stops them with SIGTERM (:meth:`stop`), each after its step.
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            for p in procs:
                p.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def restart_killed(self, dead: set[int]) -> list[int]:
        """Start a new process in the place of each of ``dead`` (indices) that a signal other than SIGTERM ended
        (``kill -9``, out of memory: a supervisor sees the pool alive and would not restart it), at most
        :data:`MAX_RESTARTS` in :data:`RESTART_WINDOW_S` (a process that keeps dying is not restarted for ever);
        one that exited by itself (a refused configuration) is not. Returns the indices restarted; logs
        ``worker.process_restarted`` for each. The new process takes over the dead one's entries at once."""
        now = time.monotonic()
        self._restarts = [t for t in self._restarts if now - t < RESTART_WINDOW_S]
        out = []
        for i in sorted(dead):
            code = self.procs[i].exitcode
            if code is None or code >= 0 or code == -signal.SIGTERM or len(self._restarts) >= MAX_RESTARTS:
                continue
            self.procs[i] = self._process(i)
            self._start([self.procs[i]])
            self._restarts.append(now)
            out.append(i)
            jlog(log, logging.WARNING, "worker.process_restarted", process=self.procs[i].name, pid=self.procs[i].pid)
        return out

    def start(self) -> WorkerPool:
        """Start every worker process; returns the pool. Logs ``worker.unkeyed_noise`` here, once for the
        pool, when no noise key is set (its processes do not repeat it)."""
        try:
            unkeyed = load_noise_key(self.noise_key_file) is None
        except (OSError, ValueError):
            unkeyed = False  # a bad key file: each process refuses to start, naming what is wrong
        if unkeyed:
            warn_unkeyed(self.model, processes=self.n)
        self._start(self.procs)
        return self

    def alive(self) -> bool:
        """Whether any worker process is still running."""
        return any(p.is_alive() for p in self.procs)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for every process to exit by itself; True if they all did."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for p in self.procs:
            p.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not self.alive()

    def report_deaths(self, reported: set[int]) -> set[int]:
        """Log each process that ended with an error and is not in ``reported`` (by index); returns their indices.
        A worker killed (SIGKILL, out of memory) leaves its entries pending: the other workers reclaim them after
        ``claim_idle_ms``, or a worker started later does."""
        dead = {i for i, p in enumerate(self.procs) if i not in reported and p.exitcode not in (None, 0)}
        for i in sorted(dead):
            p = self.procs[i]  # (SIGTERM: stopped from outside while it started, a warning; a signal to the pool
            #                    itself is not reported: run_workers stops reporting once it is stopping)
            level = logging.WARNING if p.exitcode == -signal.SIGTERM else logging.ERROR
            jlog(
                log,
                level,
                "worker.process_died",
                process=p.name,
                pid=p.pid,
                exitcode=p.exitcode,
                hint="a negative exit code is the signal that ended it; its pending entries are reclaimed by "
                "the other workers, or by the next worker started",
            )
        return dead

    def stop(self, timeout: float = 10.0) -> list[int | None]:
        """SIGTERM every worker (each finishes its step), then kill any left after ``timeout``."""
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        deadline = time.monotonic() + timeout
        for p in self.procs:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join()
                jlog(
                    log,
                    logging.ERROR,
                    "worker.killed_at_stop",
                    process=p.name,
                    pid=p.pid,
                    timeout_s=timeout,
                    hint="it did not finish its step in time; its pending entries are reclaimed by the next worker",
                )
        return [p.exitcode for p in self.procs]

    def __enter__(self) -> WorkerPool:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def run_workers(
    model: str,
    processes: int | None = None,
    redis_url: Any = None,
    *,
    until_drained: bool = False,
    log_level: int = logging.INFO,
    **config: Any,
) -> list[int | None]:
    """Run ``processes`` worker processes (default: one per core) until they stop; returns exit codes.

    SIGTERM/SIGINT to this process stop the workers gracefully (each finishes
    its step); a worker that does not stop within 10 s is killed. A worker process killed by another signal
    (``kill -9``, out of memory) is restarted (:meth:`WorkerPool.restart_killed`), except ``until_drained``.
    """
    pool = WorkerPool(model, processes, redis_url, until_drained=until_drained, log_level=log_level, **config)
    stopping = threading.Event()
    old = {}
    if threading.current_thread() is threading.main_thread():
        for s in (signal.SIGTERM, signal.SIGINT):
            old[s] = signal.signal(s, lambda *_: stopping.set())
    pool.start()
    reported: set[int] = set()
    try:
        while pool.alive() and not stopping.is_set():
            # back as soon as a process exits (the pool ends with its last worker), else each 0.2 s: a signal's
            # handler runs within that
            mp_connection.wait([p.sentinel for p in pool.procs if p.is_alive()], timeout=0.2)
            if not stopping.is_set():  # (a SIGTERM or Ctrl-C reaches the workers too: their exits are no news)
                dead = pool.report_deaths(reported)
                reported |= dead - set(pool.restart_killed(dead) if not until_drained else ())
        if not stopping.is_set():  # the last ones, ended since the last check
            pool.report_deaths(reported)
    finally:
        codes = pool.stop()
        for s, h in old.items():
            signal.signal(s, h)
    return codes
