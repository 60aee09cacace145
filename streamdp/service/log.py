"""The service's log lines: one JSON object a line, for log collectors; never a record value or an exact count.

>>> import logging, io
>>> out = io.StringIO(); h = logging.StreamHandler(out); lg = logging.getLogger("doc.jlog"); lg.addHandler(h)
>>> lg.setLevel(logging.INFO); jlog(lg, logging.INFO, "worker.start", model="m")
>>> '"event": "worker.start", "model": "m"' in out.getvalue()
True
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

__all__ = ["jlog"]


def jlog(logger: logging.Logger, level: int, event: str, **kv: Any) -> None:
    """One JSON log line ``{"ts", "event", **kv}`` at ``level`` (nothing is formatted when the level is off)."""
    if logger.isEnabledFor(level):
        logger.log(level, json.dumps({"ts": round(time.time(), 3), "event": event, **kv}, default=str))
