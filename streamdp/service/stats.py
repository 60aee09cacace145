"""Worker counters of a model, from Redis, as a dict or Prometheus text.

Counters (``priv:stats``, written atomically by the workers): entries_read,
batches_merged, records_merged (exact: private, never published), commits,
commit_retries, commit_rejections, dead_letters, acked_without_merge, poison,
claimed, delta_reused, trimmed, lost_trimmed. Live gauges: pending, lag (entries
not yet delivered), stream length, dead-letter length, consumers, published version.
"""

from __future__ import annotations

from typing import Any

import redis

from .connection import connect
from .keys import GROUP, Keys, as_str

__all__ = ["collect", "prometheus_text"]

COUNTERS = ("entries_read", "batches_merged", "records_merged", "commits", "commit_retries", "commit_rejections",
            "dead_letters", "acked_without_merge", "poison", "claimed", "delta_reused", "trimmed", "lost_trimmed")



def collect(r: Any, model: str) -> dict[str, float]:
    r = connect(r)
    keys = Keys(model)
    raw = {as_str(k): as_str(v) for k, v in r.hgetall(keys.stats).items()}
    out: dict[str, float] = {c: float(raw.get(c, 0)) for c in COUNTERS}
    out["last_commit_seconds"] = float(raw.get("last_commit_ms", 0)) / 1000
    out["version"] = float(r.hget(keys.pub_model, "version") or 0)
    out["stream_length"] = float(r.xlen(keys.records))
    out["dead_letter_length"] = float(r.xlen(keys.dead))
    pending = lag = consumers = 0.0
    try:
        g = next((g for g in r.xinfo_groups(keys.records) if as_str(g["name"]) == GROUP), None)
        if g is not None:
            pending, consumers = float(g["pending"]), float(g["consumers"])
            if g.get("lag") is not None:
                lag = float(g["lag"])
            else:  # Redis < 7: entries after the last delivered id
                lag = float(len(r.xrange(keys.records, min=f"({as_str(g['last-delivered-id'])}", count=100_000)))
    except redis.ResponseError:
        pass
    out.update(pending=pending, lag=lag, consumers=consumers)
    return out


_HELP = {
    "entries_read": "stream entries read by workers",
    "batches_merged": "batches merged into the model",
    "records_merged": "valid records merged (exact count: private)",
    "commits": "atomic commits (model versions published)",
    "commit_retries": "commits retried after a version conflict",
    "commit_rejections": "commits rejected (entry reclaimed, acked or duplicate batch)",
    "dead_letters": "entries or record groups sent to the dead-letter stream",
    "acked_without_merge": "entries acked without a merge (duplicates, empty, dead)",
    "poison": "entries dead-lettered after too many deliveries",
    "claimed": "entries reclaimed from idle workers",
    "delta_reused": "redelivered batches that reused their stored noised delta",
    "trimmed": "acked entries trimmed from the stream",
    "lost_trimmed": "pending entries found deleted from the stream",
}


def prometheus_text(stats: dict[str, dict[str, float]]) -> str:
    """Prometheus exposition text for ``{model: collect(...)}``."""
    lines = []
    names = sorted({k for s in stats.values() for k in s})
    for k in names:
        metric = f"streamdp_{k}_total" if k in COUNTERS else f"streamdp_{k}"
        kind = "counter" if k in COUNTERS else "gauge"
        lines.append(f"# HELP {metric} {_HELP.get(k, k.replace('_', ' '))}")
        lines.append(f"# TYPE {metric} {kind}")
        for model, s in sorted(stats.items()):
            if k in s:
                lines.append(f'{metric}{{model="{model}"}} {s[k]:g}')
    return "\n".join(lines) + "\n"
