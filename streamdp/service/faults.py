"""Fault points of the stream worker: a test-only hook that kills (or stalls) a worker at named steps.

Off by default. The fault-injection tests turn it on in a worker process
with the environment, read once when the :class:`~streamdp.service.Worker`
starts (or pass a :class:`FaultPoints` as ``Worker(..., faults=...)``)::

    STREAMDP_FAULT_POINTS="after_read:0.05,in_commit:0.05,before_commit:0.03:stall=0.45"
    STREAMDP_FAULT_LOG=/tmp/kills.log     # optional: one line per kill, naming the point

Each item is ``POINT:PROBABILITY`` (SIGKILL the own process at that point
with that probability: no cleanup, no atexit, exactly an external kill at
that instant) or ``POINT:PROBABILITY:stall=SECONDS`` (sleep that long
instead). Items are tried in order. The points, in the order a batch meets them:

=================  ==========================================================
``after_read``     entries read (XREADGROUP / XAUTOCLAIM), nothing processed
``after_draw``     a batch's noise drawn, not yet stored (this noise is never released)
``after_store``    the noised delta stored with SET NX, not yet merged
``before_commit``  deltas summed, before the atomic commit script (so before the XACK)
``in_commit``      the commit script ran on the server; the call has not returned
=================  ==========================================================

Window closing (``release="window"``/``"tree"``, :mod:`.windows`):

=======================  ====================================================
``close_after_seal``     the window is sealed (adds go to the next), nothing drawn
``close_after_draw``     its noise drawn, not yet stored (never released)
``close_after_store``    its noise stored with SET NX, not yet merged
``close_before_commit``  before the release script
``close_in_commit``      the release script ran; the call has not returned
=======================  ====================================================

>>> f = FaultPoints.parse("after_read:0.5,before_commit:0.25:stall=0.4")
>>> f.items
[('after_read', 0.5, None), ('before_commit', 0.25, 0.4)]
>>> FaultPoints.parse("nowhere:0.1")
Traceback (most recent call last):
...
ValueError: unknown fault point 'nowhere' (known: after_read, after_draw, after_store, before_commit, in_commit, close_after_seal, close_after_draw, close_after_store, close_before_commit, close_in_commit)
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Mapping

__all__ = ["FaultPoints", "POINTS", "ENV", "ENV_LOG"]

POINTS = (
    "after_read",
    "after_draw",
    "after_store",
    "before_commit",
    "in_commit",
    "close_after_seal",
    "close_after_draw",
    "close_after_store",
    "close_before_commit",
    "close_in_commit",
)
ENV = "STREAMDP_FAULT_POINTS"
ENV_LOG = "STREAMDP_FAULT_LOG"


class FaultPoints:
    """Kill or stall this process at named points with given probabilities (tests only)."""

    def __init__(
        self, items: list[tuple[str, float, float | None]], *, log_path: str | None = None, seed: int | None = None
    ):
        for point, p, stall in items:
            if point not in POINTS:
                raise ValueError(f"unknown fault point {point!r} (known: {', '.join(POINTS)})")
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"fault point {point}: probability must be in [0, 1], got {p}")
            if stall is not None and not stall >= 0:
                raise ValueError(f"fault point {point}: stall must be >= 0 seconds, got {stall}")
        self.items = list(items)
        self.log_path = log_path
        self._rng = random.Random(seed)

    @classmethod
    def parse(cls, spec: str, **kw) -> FaultPoints:
        """From ``"POINT:P[:stall=S],..."`` (see the module docstring)."""
        items: list[tuple[str, float, float | None]] = []
        for part in filter(None, (s.strip() for s in spec.split(","))):
            bits = part.split(":")
            try:
                if len(bits) == 2:
                    items.append((bits[0], float(bits[1]), None))
                elif len(bits) == 3 and bits[2].startswith("stall="):
                    items.append((bits[0], float(bits[1]), float(bits[2][len("stall=") :])))
                else:
                    raise ValueError
            except ValueError:
                raise ValueError(f"bad fault point {part!r}: use POINT:PROBABILITY or POINT:PROBABILITY:stall=SECONDS")
        return cls(items, **kw)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> FaultPoints | None:
        """The points set in ``$STREAMDP_FAULT_POINTS`` (None when unset or empty: no faults)."""
        spec = environ.get(ENV, "").strip()
        return cls.parse(spec, log_path=environ.get(ENV_LOG) or None) if spec else None

    def __call__(self, point: str) -> None:
        for name, p, stall in self.items:
            if name != point or self._rng.random() >= p:
                continue
            if stall is not None:
                time.sleep(stall)
                continue
            if self.log_path:
                fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                os.write(fd, f"{point}\n".encode())
                os.close(fd)
            os.kill(os.getpid(), signal.SIGKILL)
