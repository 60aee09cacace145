"""Job workers: run the batch jobs queued by :class:`~.job_queue.JobQueue` and publish their models.

A job worker (a consumer of group ``jobworkers`` on ``sdp:jobs``, reading it with :mod:`.group` in the run
loop of :mod:`.loop`):

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
5. publishes the model under ``sdp:{job:RESULT}:pub:model`` (the job key
   space, :class:`~.keys.Keys` ``job=True``) with a script that writes it only
   if no attempt of this job published yet (one release per job: a second
   attempt's fit is discarded, never released) and an entry ``kind: "job"``
   in ``sdp:job-results``; consumers fetch it with :func:`~.job_queue.fetch_model`.
   The ``jobworker`` ACL user can write only that key space, never a stream
   model's ``pub:model`` or ``sdp:registry``.

Data of a job: ``source_kind="model"`` reads the model's raw records still in
its stream (those within its retention window, :mod:`.retention`, plus the
unacked ones; each batch id once, undecodable entries skipped, see
:func:`read_model_records`); ``source_kind="dataset"``
reads a CSV file with a header (or a bundled/shared UCI dataset by name)
against a declared schema (:func:`streamdp.records.sources.read_dataset`), from the very bytes checked against the
SHA-256 pinned at submit (a private copy; see ``JobWorker._dataset_loader``). The ledger source is the model's
name, or the ``source`` given for a dataset.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import time
import traceback
from typing import Any

import redis

from streamdp.forest.model import PrivateForest
from streamdp.forest.persistence import FORMAT as FOREST_FORMAT
from streamdp.jobs.runner import JobError, JobSpec, run_job
from streamdp.privacy.ledger import BudgetExceeded
from streamdp.records.schema import Schema
from streamdp.service.beat import beating
from streamdp.service.connection import connect, heal
from streamdp.service.group import GroupReader, consumer_name
from streamdp.service.job_data import dataset_loader, read_model_records
from streamdp.service.job_queue import DEFAULT_MAX_ATTEMPTS, JOB_GROUP, JOBS_STREAM, job_key, now_s
from streamdp.service.keys import JOB_RESULTS, Keys, as_str
from streamdp.service.ledger_store import RedisLedger
from streamdp.service.loop import GroupLoop
from streamdp.service.published import published_fields
from streamdp.service.registry import ModelNotFound, load_spec, load_unit
from streamdp.service.retention import retention_refusal

__all__ = ["JobWorker", "run_job_worker", "read_model_records"]

log = logging.getLogger("streamdp.jobs")


# KEYS: job hash. ARGV: worker, now, the entry, the worker's claim_idle_ms. Starts an attempt, or says why not.
_START = """
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return {'missing', ''} end
if st == 'done' or st == 'failed' or st == 'refused' then return {'final', st} end
local a = tonumber(redis.call('HGET', KEYS[1], 'attempts') or '0')
local m = tonumber(redis.call('HGET', KEYS[1], 'max_attempts') or '3')
if a >= m then
  local reason = 'gave up after ' .. a .. (a == 1 and ' attempt' or ' attempts')
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
           'progress', 'starting', 'fraction', '0', 'entry', ARGV[3], 'claim_idle_ms', ARGV[4])
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


class JobWorker(GroupLoop):
    """One job worker (consumer of group ``jobworkers`` on ``sdp:jobs``); one job per step."""

    log = log
    event_prefix = "job"

    def __init__(
        self,
        r: Any = None,
        *,
        queue: str = JOBS_STREAM,
        consumer: str | None = None,
        claim_idle_ms: int = 60_000,
        block_ms: int = 1000,
        claim_every_s: float = 1.0,
    ):
        super().__init__()
        self.r = connect(r, block_s=block_ms / 1000)
        self.stream = queue
        self.name = consumer or consumer_name()
        self.claim_idle_ms = int(claim_idle_ms)
        self.reader = GroupReader(
            self.r,
            queue,
            JOB_GROUP,
            self.name,
            block_ms=block_ms,
            claim_idle_ms=claim_idle_ms,
            claim_every_s=claim_every_s,
            logger=log,
            context={"queue": queue},
        )
        self._start = self.r.register_script(_START)
        self._publish_script = self.r.register_script(_PUBLISH)
        self._entry: str | None = None
        self.reader.create()

    def _on_disconnect(self) -> None:
        if self.r is not self.reader.r:  # (the reader heals its own client: often this one)
            heal(self.r)
        self.reader.reset()
        self._entry = None

    def stop(self, signum: Any = None, *_: Any) -> None:
        """Stop after the job in hand (SIGTERM, a first Ctrl-C); a second Ctrl-C aborts that job, which another
        job worker then retries (its entry stays pending)."""
        if signum == signal.SIGINT and self.stopping:
            raise KeyboardInterrupt
        if signum == signal.SIGINT and self._entry is not None:
            log.warning(
                json.dumps({"event": "job.stopping", "note": "stops after the job in hand; Ctrl-C again aborts it"})
            )
        super().stop()

    def _on_stop(self) -> None:
        self.reader.leave()  # nothing in hand: leave the group (a worker holding an entry stays, to be taken over)

    def drained(self) -> bool:
        """No undelivered entry and none pending (for any worker)."""
        return self.reader.drained()

    def step(self) -> int:
        """Handle at most one job entry (own pending or claimed ones first); returns 1 if one was handled."""
        entries = self.reader.read(1)
        if not entries:
            return 0
        e = entries[0]
        fields = e.fields if isinstance(e.fields, dict) else {}
        try:
            job_id = as_str(fields.get(b"job", fields.get("job", b"")))
        except UnicodeDecodeError:  # not a job id JobQueue.submit wrote: dropped like an entry without one
            job_id = ""
        self.handle(e.id, job_id)
        return 1

    def _ack(self, eid: str) -> None:
        self.reader.ack([eid], delete=True)

    def _set(self, job_id: str, **fields: Any) -> None:
        self.r.hset(job_key(job_id), mapping={k: str(v) for k, v in fields.items()})

    def handle(self, eid: str, job_id: str) -> str:
        """Run (or finish the bookkeeping of) one job entry; returns the job's status afterwards."""
        if not job_id:
            self._ack(eid)
            return "missing"
        key = job_key(job_id)
        res = self._start(keys=[key], args=[self.name, now_s(), eid, self.claim_idle_ms])
        what = as_str(res[0])
        if what != "run":
            self._ack(eid)
            return as_str(res[1]) if what == "final" else what
        attempt = int(as_str(res[1]))
        self._entry = eid
        doc = {as_str(k): as_str(v) for k, v in self.r.hgetall(key).items()}
        # (heartbeat every third of claim_idle_ms while the job runs: a long fit is not taken for dead)
        with beating(self._heartbeat, max(self.claim_idle_ms / 3000, 0.01)):
            try:
                status = self._run(job_id, doc)
            except BudgetExceeded as e:
                self._set(job_id, status="refused", reason=str(e), progress="refused", finished=now_s())
                status = "refused"
            except (JobError, ModelNotFound) as e:
                self._set(job_id, status="failed", reason=str(e), progress="failed", finished=now_s())
                status = "failed"
            except Exception as e:  # a transient failure: retry while attempts last
                err = _error_text(e)
                log.warning(json.dumps({"event": "job.error", "job": job_id, "attempt": attempt, "error": err}))
                if attempt >= int(doc.get("max_attempts") or DEFAULT_MAX_ATTEMPTS):
                    self._set(
                        job_id,
                        status="failed",
                        error=err,
                        progress="failed",
                        finished=now_s(),
                        reason=f"gave up after {attempt} attempt{'s' if attempt != 1 else ''}; last error: {err}",
                    )
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
        self._ack(eid)
        self._entry = None
        # every ended job, not only errors; its status and attempt, no figure of the data
        log.info(
            json.dumps({"event": f"job.{status}", "job": job_id, "algorithm": doc.get("algorithm"), "attempt": attempt})
        )
        return status

    def _progress(self, job_id: str, stage: str, fraction: float) -> None:
        self._set(job_id, progress=stage, fraction=round(float(fraction), 3))
        self._heartbeat()

    def _heartbeat(self) -> None:
        """Reset the entry's idle time while this worker still owns it (so it is not reclaimed while alive); the
        entry's idle time is the job's heartbeat age that ``job status`` shows (:meth:`.JobQueue.status`)."""
        entry = self._entry
        if entry is None:
            return
        owner = self.r.xpending_range(self.stream, JOB_GROUP, min=entry, max=entry, count=1)
        if owner and as_str(owner[0]["consumer"]) == self.name:
            self.r.xclaim(self.stream, JOB_GROUP, self.name, 0, [entry], justid=True)

    def _run(self, job_id: str, doc: dict) -> str:
        with contextlib.ExitStack() as stack:  # (a user file's copy, closed by the end of the job at the latest)
            return self._run_in(job_id, doc, stack)

    def _run_in(self, job_id: str, doc: dict, stack: contextlib.ExitStack) -> str:
        result = doc["result"]
        keys = Keys(result, job=True)
        if as_str(self.r.hget(keys.pub_model, "job") or b"") == job_id:
            # An earlier attempt published, then its worker died: the one release stands; do not fit again.
            entry = json.loads(self.r.hget(JOB_RESULTS, result) or b"{}")
            self._done(job_id, entry.get("learner", ""), entry.get("warnings", []))
            return "done"
        pid = doc.get("privacy_id") or None  # (jobs queued before privacy ids: none)
        spec = JobSpec(
            doc["algorithm"],
            float(doc["epsilon"]),
            json.loads(doc.get("params") or "{}"),
            pid,
            int(doc["max_records_per_id"]) if pid else None,
        )
        source, kind = doc["source"], doc["source_kind"]
        if kind == "model":
            schema = load_spec(self.r, source).schema
            unit = load_unit(self.r, source)
            if unit is not None:  # the model's people: at most K records each in the job too
                spec = dataclasses.replace(spec, privacy_id=unit.privacy_id, max_records_per_id=unit.max_records_per_id)
            why = retention_refusal(self.r, source)  # (the retention may have changed since the submit)
            if why is not None:
                raise JobError(why)

            def load() -> tuple:
                return read_model_records(self.r, source, schema, ids=unit is not None)
        else:
            schema = Schema.from_dict(json.loads(doc["schema"]))
            load = dataset_loader(doc, schema, stack)
        out = run_job(
            spec,
            schema,
            load,
            RedisLedger(self.r),
            source,
            job_id,
            progress=lambda stage, f: self._progress(job_id, stage, f),
        )
        self._progress(job_id, "publishing", 0.95)
        outcome = self._publish(job_id, doc, out)
        if outcome == "taken":
            raise JobError(f"result name {result!r} is taken by another model; this job's model was not released")
        self._done(job_id, out.learner, out.warnings)
        return "done"

    def _done(self, job_id: str, learner: str, said: Any) -> None:
        """Mark the job done with the learner it fitted and the learners' warnings (both released with it)."""
        self._set(
            job_id,
            status="done",
            progress="done",
            fraction=1,
            finished=now_s(),
            learner=learner,
            warnings=json.dumps(list(said)),
        )

    def _publish(self, job_id: str, doc: dict, out: Any) -> str:
        """Register ``result`` (kind job, in ``sdp:job-results``) and write its job ``pub:model`` once per job.

        Returns 'ok', 'dup' (this job published before) or 'taken' (another job's result has the name).
        """
        result = doc["result"]
        entry = {
            "name": result,
            "kind": "job",
            "job": job_id,
            "algorithm": doc["algorithm"],
            "source": doc["source"],
            "source_kind": doc["source_kind"],
            "epsilon": out.epsilon,
            "delta": out.delta,
            "format": out.format,
            "params": json.loads(doc.get("params") or "{}"),
            "learner": out.learner,
            "warnings": list(out.warnings),
            "created": time.time(),
        }
        if not self.r.hsetnx(JOB_RESULTS, result, json.dumps(entry)):
            try:
                owner = json.loads(self.r.hget(JOB_RESULTS, result) or b"{}").get("job")
            except ValueError:
                owner = None
            if owner != job_id:
                return "taken"
        fields = {
            "version": 1,
            "blob": out.blob,
            "updated": int(time.time() * 1000),
            "releases": 1,
            "model_id": job_id,
            "format": out.format,
            "kind": "job",
        }
        if out.format == FOREST_FORMAT:  # consumers fetch forests by their counts (see .consumer)
            fields.update(published_fields(PrivateForest.from_bytes(out.blob)))
        flat: list[Any] = []
        for k, v in fields.items():
            flat += [k, v]
        return as_str(self._publish_script(keys=[Keys(result, job=True).pub_model], args=[job_id, *flat]))


def run_job_worker(r: Any = None, *, once: bool = False, until_drained: bool = False, **kw: Any) -> int:
    """Run one job worker in this process until stopped (SIGTERM), drained, or one job is done."""
    return JobWorker(r, **kw).run(once=once, until_drained=until_drained)


def _error_text(e: BaseException) -> str:
    """An attempt's error for the job's ``error``, its ``reason`` and the log, value-free: an OSError by its number
    and the system's words (no file names: a worker's temporary path), a Redis error as it says itself (the
    connection's trouble), anything else by its type and where it was raised, never its message: an attempt may
    fail after the charge, inside the fit, and a message there may hold exact figures of the data (a record
    count in a shape error), where the job's submitter need not be the data's owner.

    >>> _error_text(ValueError("y must have shape (435,)")).startswith("ValueError (its message is not shown")
    True
    """
    if isinstance(e, OSError) and e.errno is not None:
        return f"{type(e).__name__}: [Errno {e.errno}] {e.strerror}"[:1000]
    if isinstance(e, redis.RedisError):
        return f"{type(e).__name__}: {e}"[:1000]
    frames = traceback.extract_tb(e.__traceback__)
    where = f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
    return f"{type(e).__name__} (its message is not shown: it may quote the data){where}"
