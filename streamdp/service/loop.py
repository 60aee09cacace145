"""The run loop of a group consumer (a stream worker, a job worker): steps until stopped, a deadline, one entry or
the stream drained; it waits out a restarting Redis, or one refusing writes, and says when it is back.

Why its own module: reading the group (:mod:`streamdp.service.group`) and running a worker's loop are two things.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from typing import Any

import redis

from streamdp.service.log import jlog

__all__ = ["GroupLoop"]


class GroupLoop:
    """The run loop of a group consumer; subclasses define :meth:`step` (entries handled) and :meth:`drained`."""

    stop_signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)
    log = logging.getLogger("streamdp.group")
    event_prefix = "worker"

    #: Longest blocking read (ms) of a loop run ``until_drained``: it looks whether it is drained at least this often,
    #: so the workers of a pool stop together once one of them releases the last window.
    DRAIN_POLL_MS = 100

    def __init__(self) -> None:
        self._stop = threading.Event()
        self.until_drained = False

    def stop(self, *_: Any) -> None:
        """Ask the loop to stop after the step in hand (the SIGTERM handler)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stop.is_set()

    def step(self) -> int:
        """One read-process-acknowledge step; returns the number of entries handled."""
        raise NotImplementedError

    def drained(self) -> bool:
        """Whether nothing is left to do (the ``--until-drained`` exit condition)."""
        raise NotImplementedError

    def _log_context(self) -> dict:
        return {}

    def _on_start(self) -> None:
        pass

    def _on_disconnect(self) -> None:
        pass

    def _on_stop(self) -> None:
        pass

    def _wait_out(self, err: Exception, event: str, level: int, backoff: float, low: float, high: float) -> float:
        """Log ``event``, wait the doubled ``backoff`` (within ``[low, high]`` seconds) and forget the connection's
        state; returns the new backoff."""
        backoff = min(high, max(low, backoff * 2))
        jlog(
            self.log,
            level,
            f"{self.event_prefix}.{event}",
            **self._log_context(),
            error=str(err)[:200],
            retry_s=backoff,
        )
        self._stop.wait(backoff)
        self._on_disconnect()
        return backoff

    def run(
        self,
        *,
        once: bool = False,
        until_drained: bool = False,
        max_seconds: float | None = None,
        handle_signals: bool = True,
    ) -> int:
        """Loop until :meth:`stop` (or a signal), ``max_seconds``, the stream drained (``until_drained``),
        or one entry handled (``once``). Returns the number of entries handled."""
        if handle_signals and threading.current_thread() is threading.main_thread():
            for s in self.stop_signals:
                signal.signal(s, self.stop)
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        self.until_drained = until_drained
        self._on_start()
        n, backoff = 0, 0.0
        down_since: float | None = None  # (Redis away or refusing writes since then: said when it is back)
        try:
            while not self._stop.is_set():
                if deadline is not None and time.monotonic() > deadline:
                    break
                try:
                    did = self.step()
                    backoff = 0.0
                    if down_since is not None:
                        away = round(time.monotonic() - down_since, 1)
                        jlog(
                            self.log,
                            logging.WARNING,
                            f"{self.event_prefix}.reconnected",
                            **self._log_context(),
                            away_s=away,
                        )
                        down_since = None
                except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError) as err:
                    # Redis restarting / failing over: entries in hand stay pending (re-read or reclaimed later).
                    down_since = down_since or time.monotonic()
                    backoff = self._wait_out(err, "disconnected", logging.WARNING, backoff, 0.1, 5.0)
                    continue
                except redis.ResponseError as err:
                    if _refused(err):
                        # Redis refuses writes (maxmemory reached, a replica after failover): nothing was written
                        # (each step's writes are one atomic script or MULTI/EXEC), entries in hand stay pending;
                        # wait for an operator or the failover rather than die.
                        down_since = down_since or time.monotonic()
                        backoff = self._wait_out(err, "redis_refused", logging.ERROR, backoff, 1.0, 30.0)
                        continue
                    # NOGROUP: the group or stream is gone; UNBLOCKED: deleted while this worker blocked on it (7.0)
                    if "NOGROUP" not in str(err) and "UNBLOCKED" not in str(err):
                        raise
                    jlog(
                        self.log,
                        logging.WARNING,
                        f"{self.event_prefix}.nogroup",
                        **self._log_context(),
                        note="its stream or consumer group is gone (the model or queue deleted): stopping",
                    )
                    self._stop.set()  # the group (or stream) was deleted: the model or queue is gone
                    break
                n += did
                if once and n:
                    break
                if until_drained and not did and self.drained():
                    break
        finally:
            self._on_stop()
        return n


def _refused(err: redis.ResponseError) -> bool:
    """Whether Redis refused a write it may accept later: out of memory, or a read-only replica (redis-py's
    OutOfMemoryError / ReadOnlyError, or, from a script on Redis 6.2, an error whose text carries -OOM/-READONLY)."""
    if isinstance(err, (redis.exceptions.OutOfMemoryError, redis.exceptions.ReadOnlyError)):
        return True
    text = str(err)
    return "OOM command not allowed" in text or "READONLY You can't write" in text
