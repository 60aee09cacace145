"""A heartbeat while a worker is busy: a daemon thread calls ``beat`` every ``every_s`` seconds until the block
ends (its Redis errors ignored: the worker's own path meets a lost connection).

Why: a long step (a large release or merge, a batch job's fit) must not look like a dead or silent worker.

>>> import time
>>> seen = []
>>> with beating(lambda: seen.append(1), 0.01):
...     time.sleep(0.1)
>>> len(seen) > 0
True
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

import redis

__all__ = ["beating"]


@contextlib.contextmanager
def beating(beat: Callable[[], None], every_s: float) -> Iterator[None]:
    """Call ``beat()`` every ``every_s`` seconds (the first after ``every_s``) in a daemon thread while the block
    runs; on leaving, the thread is stopped and joined (a beat under way finishes first)."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every_s):
            try:
                beat()
            except redis.RedisError:
                pass

    thread = threading.Thread(target=loop, name="streamdp-beat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
