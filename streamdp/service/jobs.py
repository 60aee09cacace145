"""On-demand batch jobs through Redis: a queue (stream + consumer group), job workers, published results.

Keys (jobs are not a model's keys; each job hash carries its id as hash tag)::

    sdp:jobs            stream: one entry {job: ID} per (re)delivery; consumer group "jobworkers"
    sdp:jobs:index      zset: job id -> submission time (for ``list``)
    sdp:job:{ID}        hash: the job (spec, source, status, progress, attempts, error/reason, result, times)

A job's status goes ``queued -> running -> done | refused | failed``. The job
worker:

1. claims entries of dead job workers idle longer than ``claim_idle_ms``
   (``XAUTOCLAIM``), otherwise reads a new one (``XREADGROUP``);
2. starts an attempt in one script on the job hash: a finished job is only
   acked; past ``max_attempts`` the job is marked ``failed`` with the reason;
3. if the result was already published by an earlier attempt (a worker died
   after publishing), marks the job done without fitting again;
4. :func:`streamdp.jobs.run_job`: charges the ledger of the job's source
   (``RedisLedger``, one atomic script, idempotency key = job id, so a retry is
   never charged twice) **before** reading the data; a refused charge ends the
   job ``refused`` with the ledger's message, having read nothing;
5. publishes the model under ``sdp:{RESULT}:pub:model`` with a script that
   writes it only if no attempt of this job published yet (one release per
   job: a second attempt's fit is discarded, never released) and a registry
   entry ``kind: "job"``; consumers fetch it with :func:`fetch_model`.

Data of a job: ``source_kind="model"`` reads the model's raw records still in
its stream (those within its retention window, :mod:`.retention`, plus the
unacked ones; undecodable entries are skipped); ``source_kind="dataset"``
reads a CSV file with a header (or a bundled/shared UCI dataset by name)
against a declared schema. The ledger source is the model's name, or the
``source`` given for a dataset.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import socket
import threading
import time
import uuid
from typing import Any

import numpy as np
import redis

from ..jobs import JobError, JobSpec, check_params, run_job
from ..ledger import BudgetExceeded
from ..schema import Schema
from . import codec
from .keys import Keys, REGISTRY, as_str, check_name
from .registry import ModelNotFound, connect, load_spec

__all__ = ["JobQueue", "JobWorker", "fetch_model", "JOBS_STREAM", "JOB_GROUP", "job_key", "read_model_records",
           "read_dataset", "STATUSES"]

log = logging.getLogger("streamdp.jobs")

JOBS_STREAM = "sdp:jobs"
JOBS_INDEX = "sdp:jobs:index"
JOB_GROUP = "jobworkers"
STATUSES = ("queued", "running", "done", "failed", "refused")
FINAL = ("done", "failed", "refused")
DEFAULT_MAX_ATTEMPTS = 3


def job_key(job_id: str) -> str:
    """``sdp:job:{ID}``.

    >>> job_key("abc")
    'sdp:job:{abc}'
    """
    return f"sdp:job:{{{job_id}}}"



def _now() -> str:
    return repr(round(time.time(), 3))


# KEYS: job hash. ARGV: worker, now. Starts an attempt, or says why not.
_START = """
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return {'missing', ''} end
if st == 'done' or st == 'failed' or st == 'refused' then return {'final', st} end
local a = tonumber(redis.call('HGET', KEYS[1], 'attempts') or '0')
local m = tonumber(redis.call('HGET', KEYS[1], 'max_attempts') or '3')
if a >= m then
  local reason = 'gave up after ' .. a .. ' attempts'
  if st == 'running' then
    reason = reason .. '; job worker ' .. (redis.call('HGET', KEYS[1], 'worker') or '?') ..
             ' stopped during the last attempt (killed?)'
  end
  local last = redis.call('HGET', KEYS[1], 'error')
  if last and last ~= '' then reason = reason .. '; last error: ' .. last end
  redis.call('HSET', KEYS[1], 'status', 'failed', 'reason', reason, 'finished', ARGV[2], 'progress', 'failed')
  return {'failed', reason}
end
redis.call('HSET', KEYS[1], 'status', 'running', 'attempts', a + 1, 'worker', ARGV[1], 'started', ARGV[2],
           'progress', 'starting', 'fraction', '0')
return {'run', tostring(a + 1)}
"""

# KEYS: result pub:model hash. ARGV: job id, then field/value pairs. One release per job.
_PUBLISH = """
local j = redis.call('HGET', KEYS[1], 'job')
if j then
  if j == ARGV[1] then return 'dup' end
  return 'taken'
end
if redis.call('EXISTS', KEYS[1]) == 1 then return 'taken' end
redis.call('HSET', KEYS[1], 'job', ARGV[1], unpack(ARGV, 2))
return 'ok'
"""


# -- data ---------------------------------------------------------------------------------
def read_model_records(r: redis.Redis, name: str, schema: Schema, *, chunk: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """Encoded ``(X, y)`` of every decodable entry in model ``name``'s record stream (up to its newest id now)."""
    stream = Keys(name).records
    newest = r.xrevrange(stream, "+", "-", count=1)
    if not newest:
        return np.empty((0, schema.n_attributes)), np.empty(0, dtype=np.int64)
    end = as_str(newest[0][0])
    Xs, ys = [], []
    start = "-"
    while True:
        entries = r.xrange(stream, start, end, count=chunk)
        for eid, fields in entries:
            data = fields.get(b"d", fields.get("d"))
            try:
                b = codec.decode(schema, data)
            except codec.EnvelopeError:
                continue  # undecodable: the stream worker dead-letters it
            Xs.append(b.X)
            ys.append(b.y)
        if len(entries) < chunk:
            break
        start = "(" + as_str(entries[-1][0])
    if not Xs:
        return np.empty((0, schema.n_attributes)), np.empty(0, dtype=np.int64)
    return np.concatenate(Xs).astype(np.float64), np.concatenate(ys).astype(np.int64)


def read_dataset(path: str, schema: Schema) -> tuple[np.ndarray, np.ndarray]:
    """Encoded ``(X, y)`` of a CSV file with a header (attribute and label names), or a known dataset by name.

    Rows with values outside the declared schema are dropped.
    """
    import csv

    from ..csvrows import parse_row
    from ..datasets import DATASETS, load

    if not os.path.exists(path) and path in DATASETS:
        ds = load(path)
        enc = schema.encode(ds.X, ds.y, on_invalid="drop")
        return enc.X, enc.y
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        raise JobError(f"{path}: empty file")
    head = [h.strip() for h in rows[0]]
    missing = [n for n in [*schema.names, schema.label.name] if n not in head]
    if missing:
        raise JobError(f"{path}: the header lacks the columns {missing} (it has {head})")
    cols = [head.index(n) for n in schema.names]
    li = head.index(schema.label.name)
    X, y = [], []
    for row in rows[1:]:
        if not row or all(not c.strip() for c in row) or len(row) < len(head):
            continue
        rec, lab = parse_row(schema, row, cols, li)
        X.append(rec)
        y.append(lab)
    if not X:
        return np.empty((0, schema.n_attributes)), np.empty(0, dtype=np.int64)
    enc = schema.encode(np.array(X, dtype=object), y, on_invalid="drop")
    return enc.X, enc.y


# -- queue --------------------------------------------------------------------------------
class JobQueue:
    """Submit jobs, read their status, fetch their results."""

    def __init__(self, r: Any = None, queue: str = JOBS_STREAM):
        self.r = connect(r)
        self.stream, self.index = queue, f"{queue}:index"

    def submit(
        self,
        algorithm: str,
        source: str,
        epsilon: float,
        params: dict | None = None,
        *,
        source_kind: str = "model",
        dataset: str | None = None,
        schema: Schema | str | dict | None = None,
        result_name: str | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> str:
        """Queue a job; returns its id. Everything checkable is checked here (nothing is charged yet)."""
        check_name(source)
        if source_kind not in ("model", "dataset"):
            raise JobError(f"source_kind must be 'model' or 'dataset', got {source_kind!r}")
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise JobError(f"max_attempts must be an integer >= 1, got {max_attempts!r}")
        if source_kind == "model":
            if dataset is not None or schema is not None:
                raise JobError("a job over a model's records takes no dataset or schema (the model's schema is used)")
            sch = load_spec(self.r, source).schema
        else:
            if not dataset:
                raise JobError("a dataset job needs a dataset (a CSV file path or a known dataset name)")
            sch = _schema_of(schema, dataset)
        spec = JobSpec(algorithm, epsilon, dict(params or {}))
        check_params(spec, sch)
        job_id = uuid.uuid4().hex
        result = check_name(result_name or f"{algorithm}-{job_id[:8]}")
        if self.r.hexists(REGISTRY, result):
            raise JobError(f"result name {result!r} is taken (a model or job result of that name exists)")
        now = _now()
        doc = {
            "id": job_id, "algorithm": algorithm, "epsilon": repr(float(epsilon)),
            "params": json.dumps(spec.params, sort_keys=True), "source": source, "source_kind": source_kind,
            "dataset": dataset or "", "schema": json.dumps(sch.to_dict()) if source_kind == "dataset" else "",
            "result": result, "status": "queued", "progress": "queued", "fraction": "0", "attempts": 0,
            "max_attempts": max_attempts, "error": "", "reason": "", "created": now,
        }
        p = self.r.pipeline(transaction=False)
        p.hset(job_key(job_id), mapping=doc)
        p.zadd(self.index, {job_id: float(now)})
        p.execute()
        self.r.xadd(self.stream, {"job": job_id})
        return job_id

    def status(self, job_id: str) -> dict:
        """The job's hash as a dict (params decoded, numbers as numbers); :class:`LookupError` if unknown."""
        raw = self.r.hgetall(job_key(job_id))
        if not raw:
            raise LookupError(f"no job {job_id!r} (streamdp job list shows the jobs)")
        d = {as_str(k): as_str(v) for k, v in raw.items()}
        d.pop("schema", None)
        d["params"] = json.loads(d.get("params") or "{}")
        for k in ("epsilon", "fraction", "created", "started", "finished"):
            if d.get(k):
                d[k] = float(d[k])
        for k in ("attempts", "max_attempts"):
            d[k] = int(d.get(k) or 0)
        return d

    def list(self, limit: int = 100) -> list[dict]:
        """The newest ``limit`` jobs, newest first."""
        ids = [as_str(i) for i in self.r.zrevrange(self.index, 0, max(limit, 1) - 1)]
        out = []
        for i in ids:
            try:
                out.append(self.status(i))
            except LookupError:
                continue
        return out

    def result_bytes(self, job_id: str) -> bytes:
        """The published model blob of a done job."""
        st = self.status(job_id)
        if st["status"] != "done":
            why = st.get("reason") or st.get("error") or st.get("progress")
            raise LookupError(f"job {job_id} is {st['status']}" + (f" ({why})" if why else "") + "; no result")
        blob_, owner = self.r.hmget(Keys(st["result"]).pub_model, "blob", "job")
        if blob_ is None or as_str(owner or b"") != job_id:
            raise LookupError(f"job {job_id}'s result {st['result']!r} is no longer published")
        return bytes(blob_)

    def result(self, job_id: str) -> Any:
        """The trained estimator of a done job (decoded by :func:`streamdp.learners.load_model`)."""
        from ..learners import load_model

        return load_model(self.result_bytes(job_id))

    def wait(self, job_id: str, timeout: float = 60.0, poll_s: float = 0.05) -> dict:
        """Poll until the job is finished (done/failed/refused) or ``timeout`` passes; returns the status."""
        deadline = time.monotonic() + timeout
        while True:
            st = self.status(job_id)
            if st["status"] in FINAL or time.monotonic() > deadline:
                return st
            time.sleep(poll_s)


def _schema_of(schema: Schema | str | dict | None, dataset: str) -> Schema:
    if isinstance(schema, Schema):
        return schema
    if isinstance(schema, dict):
        return Schema.from_dict(schema)
    if isinstance(schema, str):
        return Schema.from_json(schema)
    from ..datasets import DATASETS, load_schema

    if dataset in DATASETS:
        return load_schema(dataset)
    raise JobError(f"dataset {dataset!r} needs a schema JSON file (--schema)")


def fetch_model(r: Any, name: str) -> Any:
    """The model published under ``name`` (a job result or a stream forest), as an estimator."""
    from ..learners import load_model

    data = connect(r).hget(Keys(name).pub_model, "blob")
    if data is None:
        raise ModelNotFound(f"no published model named {name!r}")
    return load_model(bytes(data))


# -- worker -------------------------------------------------------------------------------
class JobWorker:
    """One job worker (consumer of group ``jobworkers`` on ``sdp:jobs``)."""

    def __init__(self, r: Any = None, *, queue: str = JOBS_STREAM, consumer: str | None = None,
                 claim_idle_ms: int = 60_000, block_ms: int = 1000, claim_every_s: float = 1.0):
        self.r = connect(r)
        self.stream = queue
        self.name = consumer or f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self.claim_idle_ms = int(claim_idle_ms)
        self.block_ms = int(block_ms)
        self.claim_every_s = claim_every_s
        self._start = self.r.register_script(_START)
        self._publish_script = self.r.register_script(_PUBLISH)
        self._stop = threading.Event()
        self._last_claim = 0.0
        self._entry: str | None = None
        try:
            self.r.xgroup_create(self.stream, JOB_GROUP, id="0", mkstream=True)
        except redis.ResponseError as e:
            if "BUSYGROUP" not in str(e):
                raise

    def stop(self, *_: Any) -> None:
        self._stop.set()

    # -- loop ------------------------------------------------------------------------
    def run(self, *, once: bool = False, until_drained: bool = False, max_seconds: float | None = None,
            handle_signals: bool = True) -> int:
        """Run jobs; ``once``: stop after one job; ``until_drained``: stop when no job is waiting. Returns jobs run."""
        if handle_signals and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self.stop)
        t0 = time.monotonic()
        n = 0
        backoff = 0.0
        while not self._stop.is_set():
            if max_seconds is not None and time.monotonic() - t0 > max_seconds:
                break
            try:
                did = self.step()
                backoff = 0.0
            except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError) as err:
                # Redis restarting / failing over: the entry in hand stays pending and is reclaimed later.
                backoff = min(5.0, max(0.1, backoff * 2))
                log.warning(json.dumps({"event": "job.disconnected", "error": str(err), "retry_s": backoff}))
                self._entry = None
                self._stop.wait(backoff)
                continue
            n += did
            if once and n:
                break
            if until_drained and not did and self.drained():
                break
        return n

    def drained(self) -> bool:
        """No undelivered entry and none pending (for any worker)."""
        groups = self.r.xinfo_groups(self.stream)
        g = next((g for g in groups if as_str(g["name"]) == JOB_GROUP), None)
        if g is None or int(g.get("pending", 0)):
            return False
        newest = self.r.xrevrange(self.stream, "+", "-", count=1)
        if not newest:
            return True
        last = tuple(int(x) for x in as_str(g["last-delivered-id"]).split("-"))
        return tuple(int(x) for x in as_str(newest[0][0]).split("-")) <= last

    def step(self) -> int:
        """Handle at most one job entry (a claimed one first); returns 1 if one was handled."""
        entry = None
        if time.monotonic() - self._last_claim >= self.claim_every_s:
            self._last_claim = time.monotonic()
            res = self.r.xautoclaim(self.stream, JOB_GROUP, self.name, self.claim_idle_ms, "0-0", count=1)
            claimed = res[1] if res and len(res) > 1 else []
            if claimed:
                entry = claimed[0]
        if entry is None:
            resp = self.r.xreadgroup(JOB_GROUP, self.name, {self.stream: ">"}, count=1, block=self.block_ms)
            if resp:
                entry = resp[0][1][0]
        if entry is None:
            return 0
        eid, fields = as_str(entry[0]), entry[1] or {}
        job_id = as_str(fields.get(b"job", fields.get("job", b"")))
        self.handle(eid, job_id)
        return 1

    def _ack(self, eid: str) -> None:
        p = self.r.pipeline(transaction=True)
        p.xack(self.stream, JOB_GROUP, eid)
        p.xdel(self.stream, eid)
        p.execute()

    def _set(self, job_id: str, **fields: Any) -> None:
        self.r.hset(job_key(job_id), mapping={k: str(v) for k, v in fields.items()})

    def handle(self, eid: str, job_id: str) -> str:
        """Run (or finish the bookkeeping of) one job entry; returns the job's status afterwards."""
        if not job_id:
            self._ack(eid)
            return "missing"
        key = job_key(job_id)
        res = self._start(keys=[key], args=[self.name, _now()])
        what = as_str(res[0])
        if what != "run":
            self._ack(eid)
            return as_str(res[1]) if what == "final" else what
        attempt = int(as_str(res[1]))
        self._entry = eid
        doc = {as_str(k): as_str(v) for k, v in self.r.hgetall(key).items()}
        beating = threading.Event()
        beat = threading.Thread(target=self._beat_loop, args=(beating,), daemon=True)
        beat.start()
        try:
            status = self._run(job_id, doc)
        except BudgetExceeded as e:
            self._set(job_id, status="refused", reason=str(e), progress="refused", finished=_now())
            status = "refused"
        except (JobError, ModelNotFound) as e:
            self._set(job_id, status="failed", reason=str(e), progress="failed", finished=_now())
            status = "failed"
        except Exception as e:  # a transient failure: retry while attempts last
            err = f"{type(e).__name__}: {e}"[:1000]
            log.warning(json.dumps({"event": "job.error", "job": job_id, "attempt": attempt, "error": err}))
            if attempt >= int(doc.get("max_attempts") or DEFAULT_MAX_ATTEMPTS):
                self._set(job_id, status="failed", error=err, progress="failed", finished=_now(),
                          reason=f"gave up after {attempt} attempts; last error: {err}")
                status = "failed"
            else:
                self._set(job_id, status="queued", error=err, progress="retrying")
                p = self.r.pipeline(transaction=True)
                p.xack(self.stream, JOB_GROUP, eid)
                p.xdel(self.stream, eid)
                p.xadd(self.stream, {"job": job_id})
                p.execute()
                self._entry = None
                return "queued"
        finally:
            beating.set()
            beat.join()
        self._ack(eid)
        self._entry = None
        return status

    def _beat_loop(self, stop: threading.Event) -> None:
        """Heartbeat every third of ``claim_idle_ms`` while a job runs (a long fit is not taken for dead)."""
        while not stop.wait(max(self.claim_idle_ms / 3000, 0.01)):
            try:
                self._heartbeat()
            except redis.RedisError:
                pass

    def _progress(self, job_id: str, stage: str, fraction: float) -> None:
        self._set(job_id, progress=stage, fraction=round(float(fraction), 3))
        self._heartbeat()

    def _heartbeat(self) -> None:
        """Reset the entry's idle time while this worker still owns it (so it is not reclaimed while alive)."""
        entry = self._entry
        if entry is None:
            return
        owner = self.r.xpending_range(self.stream, JOB_GROUP, min=entry, max=entry, count=1)
        if owner and as_str(owner[0]["consumer"]) == self.name:
            self.r.xclaim(self.stream, JOB_GROUP, self.name, 0, [entry], justid=True)

    def _run(self, job_id: str, doc: dict) -> str:
        result = doc["result"]
        keys = Keys(result)
        if as_str(self.r.hget(keys.pub_model, "job") or b"") == job_id:
            # An earlier attempt published, then its worker died: the one release stands; do not fit again.
            self._set(job_id, status="done", progress="done", fraction=1, finished=_now())
            return "done"
        spec = JobSpec(doc["algorithm"], float(doc["epsilon"]), json.loads(doc.get("params") or "{}"))
        source, kind = doc["source"], doc["source_kind"]
        if kind == "model":
            schema = load_spec(self.r, source).schema

            def load() -> tuple[np.ndarray, np.ndarray]:
                return read_model_records(self.r, source, schema)
        else:
            schema = Schema.from_dict(json.loads(doc["schema"]))
            path = doc["dataset"]

            def load() -> tuple[np.ndarray, np.ndarray]:
                return read_dataset(path, schema)

        from .ledger_store import RedisLedger

        out = run_job(spec, schema, load, RedisLedger(self.r), source, job_id,
                      progress=lambda stage, f: self._progress(job_id, stage, f))
        self._progress(job_id, "publishing", 0.95)
        outcome = self._publish(job_id, doc, out)
        if outcome == "taken":
            raise JobError(f"result name {result!r} is taken by another model; this job's model was not released")
        self._set(job_id, status="done", progress="done", fraction=1, finished=_now())
        return "done"

    def _publish(self, job_id: str, doc: dict, out: Any) -> str:
        """Register ``result`` (kind job) and write its ``pub:model`` once per job: 'ok', 'dup' or 'taken'."""
        result = doc["result"]
        entry = {"name": result, "kind": "job", "job": job_id, "algorithm": doc["algorithm"],
                 "source": doc["source"], "source_kind": doc["source_kind"], "epsilon": out.epsilon,
                 "delta": out.delta, "format": out.format, "params": json.loads(doc.get("params") or "{}"),
                 "created": time.time()}
        if not self.r.hsetnx(REGISTRY, result, json.dumps(entry)):
            try:
                owner = json.loads(self.r.hget(REGISTRY, result) or b"{}").get("job")
            except ValueError:
                owner = None
            if owner != job_id:
                return "taken"
        fields = {"version": 1, "blob": out.blob, "updated": int(time.time() * 1000), "releases": 1,
                  "model_id": job_id, "format": out.format, "kind": "job"}
        if out.format == "streamdp.forest":  # consumers fetch forests by their counts (see .consumer)
            from ..forest import PrivateForest

            f = PrivateForest.from_bytes(out.blob)
            fields["counts"] = f.counts.astype(f.counts.dtype.newbyteorder("<")).tobytes()
            fields["version"] = f.version
            fields["releases"] = f.n_releases
        flat: list[Any] = []
        for k, v in fields.items():
            flat += [k, v]
        return as_str(self._publish_script(keys=[Keys(result).pub_model], args=[job_id, *flat]))


def run_job_worker(r: Any = None, *, once: bool = False, until_drained: bool = False, **kw: Any) -> int:
    """Run one job worker in this process until stopped (SIGTERM), drained, or one job is done."""
    return JobWorker(r, **kw).run(once=once, until_drained=until_drained)

