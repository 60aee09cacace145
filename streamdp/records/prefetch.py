"""Reading ahead: a source's chunks parsed in a thread while the caller codes or sends the ones before."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator

__all__ = ["prefetch"]


def prefetch(chunks: Iterable, depth: int = 2) -> Iterator:
    """Iterate ``chunks`` in a reader thread, up to ``depth`` items ahead (pandas' parser releases the GIL).

    An error in the reader is raised in the caller; closing the generator stops the reader.

    >>> list(prefetch(iter(range(5))))
    [0, 1, 2, 3, 4]
    """
    q: queue.Queue = queue.Queue(maxsize=max(1, depth))
    stop = threading.Event()
    end = object()

    def run() -> None:
        try:
            for item in chunks:
                while not stop.is_set():
                    try:
                        q.put((item, None), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put((end, None))
        except BaseException as e:  # handed to the caller
            q.put((end, e))

    t = threading.Thread(target=run, name="streamdp-reader", daemon=True)
    t.start()
    try:
        while True:
            item, err = q.get()
            if item is end:
                if err is not None:
                    raise err
                return
            yield item
    finally:
        stop.set()
        while t.is_alive():  # unblock a reader waiting on a full queue
            try:
                q.get_nowait()
            except queue.Empty:
                t.join(0.1)
