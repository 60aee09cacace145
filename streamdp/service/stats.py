"""Worker counters of a model, from Redis, as a dict or Prometheus text.

Counters (``priv:stats``, written atomically by the workers): entries_read,
batches_merged, records_merged (exact: private, never published),
records_dropped_over_k and records_dropped_over_max_ids (exact: the records a per-person model's bound
dropped, :mod:`.units`), commits, commit_retries, commit_rejections, dead_letters, acked_without_merge,
poison, claimed, delta_reused, trimmed, lost_trimmed. Live gauges: pending, lag (entries
not yet delivered), stream length, dead-letter length, consumers (those live, and those silent for
:data:`LIVE_IDLE_S` or more: workers killed, until they are forgotten), published version,
and ``estimated_records``: the noisy record count of the published counts
(:meth:`PrivateForest.estimated_records`, post-processing of a private release).

Exports are private by default: :data:`EXACT` figures (counts of records,
and of bad records or batches, which depend on individual records) leave only
with ``exact=True`` (``streamdp stats --exact``), flagged in their HELP text.
Batch-level figures (batches, versions, entries, pending, lag) are public by
design under ``release="batch"``, where every merged batch is a published release;
under the window policies releases follow the clock, not the batches, so the
batch-level figures (:data:`BATCH_LEVEL`) are exact there too (with one record an
entry, entries read is the number of records): ``collect`` marks such a model with
``windowed = 1`` (its policy is public) and :func:`exact_names` says what is exact.

>>> text = prometheus_text({"m": {"version": 3.0, "records_merged": 1234.0}})
>>> "streamdp_version" in text, "1234" in text
(True, False)
"""

from __future__ import annotations

import json
import time
from typing import Any

import msgpack
import redis

from streamdp.service.connection import connect
from streamdp.service.group import LIVE_IDLE_S, holders
from streamdp.service.keys import GROUP, Keys, as_str

__all__ = [
    "collect",
    "dead_letters",
    "prometheus_text",
    "public",
    "exact_names",
    "metric_value",
    "EXACT",
    "BATCH_LEVEL",
    "LIVE_IDLE_S",
]

COUNTERS = (
    "entries_read",
    "batches_merged",
    "records_merged",
    "records_dropped_over_k",
    "records_dropped_over_max_ids",
    "commits",
    "commit_retries",
    "commit_rejections",
    "dead_letters",
    "acked_without_merge",
    "poison",
    "claimed",
    "delta_reused",
    "trimmed",
    "lost_trimmed",
)
# Exact figures that depend on individual records (how many, how many were bad): never exported by default.
EXACT = (
    "records_merged",
    "records_dropped_over_k",
    "records_dropped_over_max_ids",
    "dead_letters",
    "acked_without_merge",
    "poison",
    "dead_letter_length",
)
# Figures that follow the producers' entries and batches: public where each batch is a release ("batch"), exact
# under the window policies (a model with windowed = 1).
BATCH_LEVEL = (
    "entries_read",
    "batches_merged",
    "commits",
    "commit_retries",
    "commit_rejections",
    "claimed",
    "delta_reused",
    "trimmed",
    "lost_trimmed",
    "last_commit_seconds",
    "stream_length",
    "pending",
    "lag",
)
EXACT_WARNING = (
    "exact counts are not differentially private: they reveal facts about individual records "
    "(keep them out of widely shared metrics systems)"
)


def _id(entry_id: str) -> tuple[int, ...]:
    """A stream entry id as a comparable pair (``"1-2"`` -> ``(1, 2)``)."""
    return tuple(int(x) for x in entry_id.split("-"))


def collect(r: Any, model: str) -> dict[str, float]:
    """Every counter and gauge of ``model`` by name, exact ones included (:func:`exact_names` says which:
    callers that publish them must hide those without ``--exact``). ``r``: a Redis client or URL."""
    r = connect(r)
    keys = Keys(model)
    raw = {as_str(k): as_str(v) for k, v in r.hgetall(keys.stats).items()}
    out: dict[str, float] = {c: float(raw.get(c, 0)) for c in COUNTERS}
    out["last_commit_seconds"] = float(raw.get("last_commit_ms", 0)) / 1000
    release = r.hget(keys.pub_model, "release")  # the public policy (absent: a model from before policies, batch)
    out["windowed"] = float(release is not None and json.loads(release).get("kind") != "batch")
    out["version"] = float(r.hget(keys.pub_model, "version") or 0)
    out["stream_length"] = float(r.xlen(keys.records))
    out["dead_letter_length"] = float(r.xlen(keys.dead))
    pending = lag = consumers = live = silent = 0.0
    try:
        g = next((g for g in r.xinfo_groups(keys.records) if as_str(g["name"]) == GROUP), None)
        if g is not None:
            out.update(_stream_tampering(r, keys, g))
            pending, consumers = float(g["pending"]), float(g["consumers"])
            if consumers:
                cs = holders(r, keys.records, GROUP)  # (one of this host whose process is gone: not live)
                live = float(sum(h.live for h in cs))
                silent = len(cs) - live
            delivered = as_str(g["last-delivered-id"])
            top = r.xrevrange(keys.records, count=1)
            if not top or _id(as_str(top[0][0])) <= _id(delivered):
                lag = 0.0  # (every entry delivered: Redis's own lag stays wrong after a crash's AOF replay)
            elif g.get("lag") is not None:
                lag = float(g["lag"])
            else:  # Redis < 7: entries after the last delivered id
                lag = float(len(r.xrange(keys.records, min=f"({delivered}", count=100_000)))
    except redis.ResponseError:
        pass
    out.update(pending=pending, lag=lag, consumers=consumers, consumers_live=live, consumers_silent=silent)
    est = _estimated_records(r, keys)
    if est is not None:
        out["estimated_records"] = est
    return out


def dead_letters(r: Any, model: str, last: int = 10) -> list[dict[str, Any]]:
    """The ``last`` dead letters of ``model``, newest first: the stream entry each came from, why (a reason that
    names what was wrong, never a value: :func:`.codec.value_free`), the consumer that wrote it, when (``ms``),
    and for a batch with refused rows each row's number in its batch and reason (``rows``, value-free as well).
    Any other ``detail`` (the head of a raw payload, where records are retained) is not returned. EXACT and
    worker-only, as the stream they come from: for the model's operator.

    >>> import fakeredis, msgpack
    >>> r = fakeredis.FakeRedis()
    >>> rows = msgpack.packb({"batch_id": "b", "rows": [[5, "attribute 'a' is missing"]]})
    >>> _ = r.xadd(Keys("m").dead, {"entry": "5-0", "reason": "1 invalid record(s)", "detail": rows, "ms": 7})
    >>> _ = r.xadd(Keys("m").dead, {"entry": "6-0", "reason": "undecodable", "detail": b"raw head", "ms": 8})
    >>> [(d["entry"], d["reason"], d["ms"], d["rows"]) for d in dead_letters(r, "m")]
    [('6-0', 'undecodable', 8, []), ('5-0', '1 invalid record(s)', 7, [(5, "attribute 'a' is missing")])]
    """
    r = connect(r)
    out = []
    for _id, f in r.xrevrange(Keys(model).dead, count=last):
        f = {as_str(k): v for k, v in f.items()}
        out.append(
            {
                "entry": as_str(f.get("entry", b"")),
                "reason": as_str(f.get("reason", b"")),
                "consumer": as_str(f.get("consumer", b"")),
                "ms": int(f.get("ms") or 0),
                "rows": _refused_rows(f.get("detail", b"")),
            }
        )
    return out


def _refused_rows(detail: bytes) -> list[tuple[int, str]]:
    """A dead letter's refused rows (row in its batch, value-free reason) where its detail lists them
    (:func:`.merging.dead_items`); [] for any other detail, which is never decoded further."""
    try:
        doc = msgpack.unpackb(detail, raw=False)
    except Exception:  # (a raw payload's head, or anything else: not shown)
        return []
    if not isinstance(doc, dict) or set(doc) != {"batch_id", "rows"} or not isinstance(doc["rows"], list):
        return []
    return [
        (int(r[0]), str(r[1]))
        for r in doc["rows"]
        if isinstance(r, list) and len(r) == 2 and isinstance(r[0], int) and isinstance(r[1], str)
    ]


def _stream_id(x: Any) -> tuple[int, int]:
    ms, _, seq = as_str(x).partition("-")
    return int(ms), int(seq or 0)


def _stream_tampering(r: Any, keys: Keys, group: dict) -> dict[str, float]:
    """Gauges for what the producer ACL cannot forbid (``XADD`` arguments; docs/security.md, "What remains a
    trust boundary").

    * ``deleted_undelivered``: 1 if an entry no worker was given was deleted (``XADD ... MAXLEN 0``
      or ``MINID`` by a producer): fewer entries follow the group's last delivered id than were added
      after it (``entries-added`` minus the group's ``entries-read``). Workers trim and delete only
      entries already delivered to them, so this stays 0 in normal operation.
    * ``stream_ids_blocked``: 1 if the stream's last id is more than a minute in the future (an ``XADD``
      with an explicit huge id: every later push fails until an admin repairs the stream).
    Redis >= 7.0; absent where the server does not report these fields (or after a manual ``SETID``).
    """
    out: dict[str, float] = {}
    try:
        info = r.xinfo_stream(keys.records)
        last = info.get("last-generated-id")
        if last is not None:
            out["stream_ids_blocked"] = float(_stream_id(last)[0] > int(time.time() * 1000) + 60_000)
        added, read, delivered = info.get("entries-added"), group.get("entries-read"), group.get("last-delivered-id")
        if read is None and delivered is not None and _stream_id(delivered) == (0, 0):
            read = 0  # nothing delivered yet
        if added is not None and read is not None and delivered is not None:
            expected = int(added) - int(read)
            present = len(r.xrange(keys.records, min=f"({as_str(delivered)}", count=min(max(expected, 1), 100_000)))
            out["deleted_undelivered"] = float(present < min(expected, 100_000))
    except (redis.ResponseError, ValueError, AttributeError):
        pass
    return out


def _estimated_records(r: Any, keys: Keys) -> float | None:
    """The noisy record estimate of the published counts (None without a published stream forest)."""
    from streamdp.forest.model import PrivateForest
    from streamdp.service.published import forest_from_counts

    spec = r.get(keys.spec)
    version, counts, releases = r.hmget(keys.pub_model, "version", "counts", "releases")
    if spec is None:
        return None
    try:
        if counts is None:  # release="grow": the structure changes, the published blob holds the counts
            blob_b = r.hget(keys.pub_model, "blob")
            if blob_b is None:
                return None
            forest = PrivateForest.from_bytes(blob_b)
        else:
            forest = forest_from_counts(PrivateForest.from_bytes(spec), counts, version or 0, releases or 0)
        return forest.estimated_records()  # (at least 0: clamped there, post-processing)
    except ValueError:
        return None


def exact_names(stats: dict[str, float]) -> tuple[str, ...]:
    """The figures of ``stats`` (one model's :func:`collect`) that are exact: :data:`EXACT`, and the
    :data:`BATCH_LEVEL` ones under a window policy.

    >>> "entries_read" in exact_names({"windowed": 1.0}), "entries_read" in exact_names({"windowed": 0.0})
    (True, False)
    """
    return EXACT + (BATCH_LEVEL if stats.get("windowed") else ())


def public(stats: dict[str, float]) -> dict[str, float]:
    """``stats`` without its exact (record-dependent) figures (:func:`exact_names`)."""
    hidden = exact_names(stats)
    return {k: v for k, v in stats.items() if k not in hidden}


_HELP = {
    "entries_read": "stream entries read by workers (a throughput count, not an account: a read cut short by a "
    "crash is not counted, and a worker's pending entries re-read after a lost connection count "
    "again)",
    "batches_merged": "batches merged into the model",
    "records_merged": "valid records merged",
    "records_dropped_over_k": "records dropped because their person already had K records merged (a model with a "
    "privacy id; counted once per merged batch)",
    "records_dropped_over_max_ids": "records dropped because their person was new and the model already kept "
    "max_ids persons (a model with a privacy id)",
    "estimated_records": "noisy estimate of the records merged, from the published counts (differentially private)",
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
    "deleted_undelivered": "1 if stream entries were deleted before any worker read them (an XADD MAXLEN/MINID "
    "trim by a producer: a trust boundary, see docs/security.md)",
    "consumers": "worker processes in the model's consumer group (live and silent)",
    "consumers_live": f"consumers that read or claimed in the last {LIVE_IDLE_S} s (live workers)",
    "consumers_silent": f"consumers silent for {LIVE_IDLE_S} s or more, or of this host with their process gone: "
    "workers that died (SIGKILL, out of memory), kept until forgotten (an hour by default), or blocked in a longer read",
    "version": "published model version",
    "windowed": "1 when the model releases by windows (its policy is public), 0 per batch",
    "releases_merged": "releases merged into the published counts (public)",
    "cell_noise_sd": "noise sd one release adds to each count (public: from epsilon and the mechanism)",
    "class_total_noise_sd": "noise sd on each class's published record count now (public)",
    "window_seconds": "length of the current release window (public: the clock and released values)",
    "noisy_records_last_release": "noisy record total of the last release (differentially private)",
    "lag_bound_seconds": "the longest a record waits to be published (the model's max_lag)",
    "stream_ids_blocked": "1 if the stream's last id is far in the future (an XADD with an explicit huge id: "
    "every later push fails; see docs/security.md to repair)",
}


def prometheus_text(stats: dict[str, dict[str, float]], *, exact: bool = False) -> str:
    """Prometheus exposition text for ``{model: collect(...)}``; the :data:`EXACT` figures only if ``exact``."""
    lines = []
    shown = {model: s if exact else public(s) for model, s in stats.items()}
    names = sorted({k for s in shown.values() for k in s})
    for k in names:
        metric = f"streamdp_{k}_total" if k in COUNTERS else f"streamdp_{k}"
        kind = "counter" if k in COUNTERS else "gauge"
        help_ = _HELP.get(k, k.replace("_", " "))
        if any(k in exact_names(s) for s in stats.values()):
            help_ = f"{help_} (EXACT for some models, exported on request with --exact: {EXACT_WARNING})"
        lines.append(f"# HELP {metric} {help_}")
        lines.append(f"# TYPE {metric} {kind}")
        for model, s in sorted(shown.items()):
            if k in s:
                lines.append(f'{metric}{{model="{model}"}} {metric_value(s[k])}')
    return "\n".join(lines) + "\n"


def metric_value(v: float) -> str:
    """A metric value at full precision (``:g`` would round a Unix time to about 10**4 seconds)."""
    return str(int(v)) if float(v).is_integer() else repr(float(v))
