"""The job queue client: submit batch jobs, read their status, fetch their results (see :mod:`.job_worker`).

Keys (jobs are not a model's keys; each job hash carries its id as hash tag)::

    sdp:jobs            stream: one entry {job: ID} per (re)delivery; consumer group "jobworkers"
    sdp:jobs:index      zset: job id -> submission time (for ``list``)
    sdp:job:{ID}        hash: the job (spec, source, status, progress, attempts, error/reason, result, times)
    sdp:ledger:files    hash: SHA-256 of a dataset file -> the first ledger source it was submitted under

A dataset job over a file records the SHA-256 of its bytes at submit; the job
worker refuses (before charging) a file that changed since. A source of the
form ``file-<hash>`` (:func:`streamdp.privacy.ledger.file_source`, ``job submit
--source-file``) must match the file; the same file submitted under another
label than before draws a :class:`SourceLabelWarning` (two labels, two ledgers,
the same people).

A job's status goes ``queued -> running -> done | refused | failed``. A done
job's model is published under ``sdp:{job:RESULT}:pub:model`` and registered in
``sdp:job-results`` (the job key space: job workers never write a stream
model's keys); consumers fetch it with :func:`fetch_model`.
"""

from __future__ import annotations

import json
import os
import time
import uuid
import warnings
from typing import Any

import redis

from streamdp.jobs.runner import JobError, JobSpec, check_params, job_warnings
from streamdp.privacy.ledger import exceeds, file_sha256, refusal, unit_of_charge, unit_refusal
from streamdp.records.datasets import DATASETS, dataset_digest, load_schema
from streamdp.records.read_errors import SourceError
from streamdp.records.schema import Schema
from streamdp.records.sources import check_columns, check_records
from streamdp.service.connection import connect
from streamdp.service.group import gone
from streamdp.service.keys import JOB_RESULTS, REGISTRY, Keys, as_str, check_name
from streamdp.service.ledger_store import RedisLedger
from streamdp.service.registry import load_spec, load_unit, published_keys
from streamdp.service.retention import retention_refusal
from streamdp.validation import check_integer

__all__ = [
    "JobQueue",
    "fetch_model",
    "SourceLabelWarning",
    "ModelSourceWarning",
    "JobWarning",
    "FILE_SOURCES",
    "JOBS_STREAM",
    "JOBS_INDEX",
    "JOB_GROUP",
    "job_key",
    "STATUSES",
    "FINAL",
    "DEFAULT_MAX_ATTEMPTS",
    "now_s",
]

JOBS_STREAM = "sdp:jobs"
JOBS_INDEX = "sdp:jobs:index"
JOB_GROUP = "jobworkers"
STATUSES = ("queued", "running", "done", "failed", "refused")
FINAL = ("done", "failed", "refused")
DEFAULT_MAX_ATTEMPTS = 3
FILE_SOURCES = "sdp:ledger:files"
#: result name -> the job holding it (a job name is reserved at submit)
RESULT_NAMES = "sdp:job-names"
# KEYS: RESULT_NAMES. ARGV: result, the holder seen, the new job. Takes the name over only from that holder (one key:
# cluster-safe); two submitters who saw the same finished holder cannot both take it.
_TAKE_OVER = """
if (redis.call('HGET', KEYS[1], ARGV[1]) or '') ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
"""


class SourceLabelWarning(UserWarning):
    """The same dataset file was submitted under another ledger source than before."""


class ModelSourceWarning(SourceLabelWarning):
    """A dataset job's ledger source is a model's name: the file is charged to that model's ledger, though it is
    not the model's records."""


class JobWarning(UserWarning):
    """What a job's public parameters say about its result before it runs (:func:`streamdp.jobs.runner.job_warnings`:
    a nearly exact epsilon, ``auto``'s candidates left out)."""


def job_key(job_id: str) -> str:
    """``sdp:job:{ID}``.

    >>> job_key("abc")
    'sdp:job:{abc}'
    """
    return f"sdp:job:{{{job_id}}}"


def now_s() -> str:
    """The time as Unix seconds to the millisecond, as the job hashes store it."""
    return repr(round(time.time(), 3))


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
        header: bool = True,
        label: str | int | None = None,
        privacy_id: str | None = None,
        max_records_per_id: int | None = None,
    ) -> str:
        """Queue a job; returns its id. Everything checkable is checked here (nothing is charged yet).

        A dataset file is read as :func:`streamdp.records.sources.read_csv_chunks` reads it (``header``, ``label``);
        a relative path is made absolute here (a job worker may run in another directory).
        ``privacy_id`` names the dataset's column of each record's person (with ``max_records_per_id``, K): the
        job keeps at most K records per id and its epsilon holds per person (:mod:`streamdp.jobs.runner`)."""
        check_name(source)
        if source_kind not in ("model", "dataset"):
            raise JobError(f"source_kind must be 'model' or 'dataset', got {source_kind!r}")
        try:
            check_integer(max_attempts, "max_attempts")
        except ValueError as e:
            raise JobError(str(e)) from None
        if source_kind == "model":
            if dataset is not None or schema is not None or not header or label is not None:
                raise JobError(
                    "a job over a model's records takes no dataset, schema, header or label (the "
                    "model's schema is used)"
                )
            sch = load_spec(self.r, source).schema
            why = retention_refusal(self.r, source)  # configuration and versions, public: before any charge
            if why is not None:
                raise JobError(why)
        else:
            if not dataset:
                raise JobError("a dataset job needs a dataset (a CSV file path or a known dataset name)")
            sch = _schema_of(schema, dataset)
        spec = JobSpec(algorithm, epsilon, dict(params or {}), privacy_id, max_records_per_id)
        unit = load_unit(self.r, source) if source_kind == "model" and privacy_id is None else None
        # (a model whose unit is a person: the job bounds by its ids and K, checked here as the worker will run it)
        runs = (
            spec if unit is None else JobSpec(algorithm, epsilon, spec.params, unit.privacy_id, unit.max_records_per_id)
        )
        check_params(runs, sch)
        if privacy_id is not None and source_kind == "model":
            raise JobError(
                "a job over a model's records uses the model's own unit of privacy; --privacy-id goes with a "
                "dataset file (with a header)"
            )
        if privacy_id is not None and (privacy_id in sch.names or privacy_id == sch.label.name):
            raise JobError(f"privacy id {privacy_id!r} is a schema attribute or the label: it must not be learned from")
        if result_name is not None:  # ("" is no name: refused, not replaced by the default)
            try:
                check_name(result_name)
            except ValueError as e:
                raise JobError(f"result name: {e}; leave it out for the default, ALGORITHM-ID8") from None
        ledger = RedisLedger(self.r)
        budget = ledger.budget(source)  # (refused here, not accepted and then refused by the worker)
        if budget is None:
            raise JobError(f"{refusal(source, float(epsilon), 0.0, None)}; nothing was charged")
        pid, k = (privacy_id, max_records_per_id) if unit is None else (unit.privacy_id, unit.max_records_per_id)
        fixed, mine = ledger.unit(source), unit_of_charge(pid)  # (the worker's charge checks it again, atomically)
        if fixed not in (None, mine):
            raise JobError(f"{unit_refusal(source, fixed, mine, k)}; nothing was charged")
        if source_kind == "dataset" and os.path.isfile(dataset):
            dataset = os.path.abspath(dataset)
        bundled = source_kind == "dataset" and not os.path.isfile(dataset) and dataset in DATASETS
        if bundled and privacy_id is not None:
            raise JobError(f"{dataset!r} is a known dataset without a privacy id column; give a file with one")
        if bundled and (not header or label is not None):
            raise JobError(f"--no-header and --label describe a file; {dataset!r} is a known dataset's name")
        digest = ""
        if bundled:  # pinned: the job worker reads the dataset only where it finds these bytes
            _check_named_dataset(dataset, sch)
            try:
                digest = dataset_digest(dataset)
            except FileNotFoundError as e:
                raise JobError(f"{e}; nothing was charged") from None
        elif source_kind == "dataset":
            digest = self._bind_file(source, dataset, sch, header, label, privacy_id)
        spent = ledger.spent(source)  # (the worker's charge checks it again, atomically, with jobs queued since)
        if exceeds(spent, (float(epsilon), 0.0), budget):  # (the ledgers' one rule; the job's delta is the worker's)
            raise JobError(f"{refusal(source, float(epsilon), spent[0], budget[0])}; nothing was queued")
        if source_kind == "dataset" and self.r.hexists(REGISTRY, source):
            warnings.warn(
                f"source {source!r} is a model: this job over {dataset!r} is charged to that model's ledger, "
                "though the file is not the model's records (give no --dataset to learn from the model's "
                "records; --source-file binds a file to a ledger of its own)",
                ModelSourceWarning,
                stacklevel=2,
            )
        for said in job_warnings(runs, sch):  # (public parameters only; the job's status lists them too)
            warnings.warn(said, JobWarning, stacklevel=2)
        job_id = uuid.uuid4().hex
        result = check_name(result_name if result_name is not None else f"{algorithm}-{job_id[:8]}")
        if self.r.hexists(REGISTRY, result) or self.r.hexists(JOB_RESULTS, result):
            raise JobError(f"result name {result!r} is taken (a model or job result of that name exists)")
        now = now_s()
        doc = {
            "id": job_id,
            "algorithm": algorithm,
            "epsilon": repr(float(epsilon)),
            "params": json.dumps(spec.params, sort_keys=True),
            "source": source,
            "source_kind": source_kind,
            "dataset": dataset or "",
            "dataset_sha256": digest,
            "schema": json.dumps(sch.to_dict()) if source_kind == "dataset" else "",
            "result": result,
            "status": "queued",
            "progress": "queued",
            "fraction": "0",
            "attempts": 0,
            "max_attempts": max_attempts,
            "error": "",
            "reason": "",
            "created": now,
            "header": int(bool(header)),
            "label": json.dumps(label),
            "bundled": int(bundled),
            "privacy_id": privacy_id or "",
            "max_records_per_id": spec.records_per_unit if privacy_id is not None else "",
        }
        self.r.hset(job_key(job_id), mapping=doc)  # first: a holder of the name always has a status
        try:
            self._reserve(result, job_id)
        except JobError:
            self.r.delete(job_key(job_id))
            raise
        self.r.zadd(self.index, {job_id: float(now)})
        self.r.xadd(self.stream, {"job": job_id})
        return job_id

    def _reserve(self, result: str, job_id: str) -> None:
        """Hold ``result`` for this job (else a second job of the same name would be charged, fitted, then
        refused at publishing); a name held by a job that has ended (its result, if any, deleted since:
        the caller checked) is taken over."""
        take_over = self.r.register_script(_TAKE_OVER)
        for _ in range(8):  # each round loses only to a submitter that took the name meanwhile
            if self.r.hsetnx(RESULT_NAMES, result, job_id):
                return
            holder = as_str(self.r.hget(RESULT_NAMES, result) or b"")
            status = as_str(self.r.hget(job_key(holder), "status") or b"") if holder else ""
            if status in ("queued", "running"):  # (a job never goes back from done, failed or refused)
                raise JobError(f"result name {result!r} is held by job {holder} ({status}); choose another --name")
            if take_over(keys=[RESULT_NAMES], args=[result, holder, job_id]):
                return
        raise JobError(f"result name {result!r} is being taken by other submits; choose another --name")

    def _bind_file(
        self,
        source: str,
        dataset: str,
        schema: Schema,
        header: bool,
        label: str | int | None,
        privacy_id: str | None = None,
    ) -> str:
        """The SHA-256 of a dataset file; checks it (its source label, then its columns: a file without the
        schema's is refused before anything is recorded or charged; the job worker reads only these bytes) and
        records its ledger source.

        A path that does not exist yet is refused: unbound, a file written after the submit (other people)
        would be read and charged to the source the job names."""
        if not os.path.isfile(dataset):
            raise JobError(
                f"dataset file {dataset!r} does not exist: a job is bound to its file's content when "
                "it is submitted; write the file first"
            )
        digest = file_sha256(dataset)
        if source.startswith("file-") and source != "file-" + digest[:32]:
            raise JobError(
                f"source {source!r} names another file's content than {dataset!r} "
                f"(its source is file-{digest[:32]}); use --source-file"
            )
        try:
            if not header or privacy_id is not None:  # (a header is checked by check_records' reader; the rest here)
                check_columns(dataset, schema, header=header, label=label, privacy_id=privacy_id)
            check_records(dataset, schema, header=header, label=label)
        except SourceError as e:
            raise JobError(f"{e}; nothing was charged") from None
        if not self.r.hsetnx(FILE_SOURCES, digest, source):
            first = as_str(self.r.hget(FILE_SOURCES, digest) or b"")
            if first and first != source:
                warnings.warn(
                    f"this file's content (sha256 {digest[:16]}...) was submitted under source {first!r} "
                    f"before; under {source!r} it is charged to another ledger although it holds the "
                    f"same people (use --source-file to bind a file to one ledger)",
                    SourceLabelWarning,
                    stacklevel=3,
                )
        return digest

    def status(self, job_id: str) -> dict:
        """The job's hash as a dict (params decoded, numbers as numbers), named by the job's id or by its result's
        name (``--name``; a job id is looked up first); :class:`LookupError` if unknown."""
        raw = self.r.hgetall(job_key(job_id))
        if not raw and (held := self._job_of(job_id)) != job_id:
            raw = self.r.hgetall(job_key(held))
        if not raw:
            raise LookupError(f"no job {job_id!r} (streamdp job list shows the jobs)")
        d: dict[str, Any] = {as_str(k): as_str(v) for k, v in raw.items()}
        d.pop("schema", None)
        d["params"] = json.loads(d.get("params") or "{}")
        d["warnings"] = json.loads(d.get("warnings") or "[]")  # (the learners' warnings, once done)
        for k in ("epsilon", "fraction", "created", "started", "finished"):
            if d.get(k):
                d[k] = float(d[k])
        for k in ("attempts", "max_attempts"):
            d[k] = int(d.get(k) or 0)
        d["max_records_per_id"] = int(d["max_records_per_id"]) if d.get("max_records_per_id") else None
        d["privacy_id"] = d.get("privacy_id") or None
        if d["status"] == "running":
            d.update(self._heartbeat(d))
        return d

    def _heartbeat(self, d: dict) -> dict:
        """A running job's heartbeat: ``heartbeat_age_s``, the idle time of its queue entry, which its worker resets
        every third of its ``claim_idle_ms`` (``heartbeat_every_s``) while it lives, and which another worker
        claims at ``claim_idle_s``; ``worker_may_be_lost`` once the age passes two heartbeats (one missed: the age
        of a live worker's heartbeat stays below one, plus a round trip); ``worker_gone`` when the worker is
        provably not running (a process of this host that no longer exists). None for a job started by a worker
        of a version that did not record its entry."""
        out: dict[str, Any] = {"heartbeat_age_s": None, "worker_may_be_lost": False, "worker_gone": False}
        entry, claim_ms = d.get("entry"), int(d.get("claim_idle_ms") or 0)
        if not entry or claim_ms <= 0:
            return out
        try:
            pending = self.r.xpending_range(self.stream, JOB_GROUP, min=entry, max=entry, count=1)
        except redis.ResponseError:  # (no group yet)
            pending = []
        out.update(heartbeat_every_s=claim_ms / 3000, claim_idle_s=claim_ms / 1000)
        if not pending:  # (acked meanwhile: the job is ending)
            return out
        age = int(pending[0]["time_since_delivered"]) / 1000
        holder = as_str(pending[0]["consumer"])
        out.update(heartbeat_age_s=age, worker_may_be_lost=age > 2 * claim_ms / 3000, worker_gone=gone(holder))
        return out

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
        """The published model blob of a done job, named by the job's id or by its result's name (``--name``)."""
        job_id = self._job_of(job_id)
        st = self.status(job_id)
        if st["status"] != "done":
            raise LookupError(_no_result(job_id, st))
        blob_, owner = self.r.hmget(Keys(st["result"], job=True).pub_model, "blob", "job")
        if blob_ is None or as_str(owner or b"") != job_id:
            raise LookupError(f"job {job_id}'s result {st['result']!r} is no longer published")
        return bytes(blob_)

    def _job_of(self, job_or_result: str) -> str:
        """The id of the job: ``job_or_result`` itself (a job id comes first), else the job that holds or published
        the result of that name; a name no job holds is returned as it is (the job lookup then says so)."""
        if self.r.exists(job_key(job_or_result)):
            return job_or_result
        try:
            Keys(job_or_result, job=True)
        except ValueError:  # not a result name either
            return job_or_result
        try:  # the job holding the name since its submit (queued, running or ended)
            holder = self.r.hget(RESULT_NAMES, job_or_result)
        except redis.exceptions.NoPermissionError:  # (an ACL user without the names hash: the published owner)
            holder = None
        holder = holder or self.r.hget(Keys(job_or_result, job=True).pub_model, "job")
        if not holder:
            return job_or_result
        if not self.r.exists(job_key(as_str(holder))):
            raise LookupError(
                f"result {job_or_result!r} is held by job {as_str(holder)}, which is no longer listed "
                f"(streamdp model get {job_or_result} -o FILE reads a published model)"
            )
        return as_str(holder)

    def result(self, job_id: str) -> Any:
        """The trained estimator of a done job, by its id or its result's name (decoded by
        :func:`streamdp.learners.load_model`)."""
        from streamdp.learners import load_model

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
        if os.path.isfile(schema) or schema.lstrip().startswith("{"):
            return Schema.from_json(schema)
        if schema in DATASETS:  # (a bundled dataset's schema by its name, as `streamdp push --schema` takes it)
            return load_schema(schema)
        raise JobError(
            f"schema {schema!r}: no such file, nor a bundled schema ({', '.join(sorted(DATASETS))}); "
            "nothing was charged"
        )
    if dataset in DATASETS:
        return load_schema(dataset)
    raise JobError(f"dataset {dataset!r} needs a schema JSON file (--schema)")


def _no_result(job_id: str, st: dict) -> str:
    """Why a job that is not done has no result, in words (its progress only where it says more than its status).

    >>> _no_result("j1", {"status": "queued", "progress": "queued", "reason": "", "error": ""})
    'job j1 is queued: no result yet (streamdp job status j1)'
    >>> _no_result("j1", {"status": "failed", "progress": "failed", "reason": "gave up after 1 attempt", "error": ""})
    'job j1 failed (gave up after 1 attempt): no result'
    """
    status = st["status"]
    if status in ("queued", "running"):
        step = st.get("progress") or ""
        step = f" ({step})" if step and step != status else ""
        return f"job {job_id} is {status}{step}: no result yet (streamdp job status {job_id})"
    why = st.get("reason") or st.get("error") or ""
    said = "failed" if status == "failed" else f"is {status}"
    return f"job {job_id} {said}" + (f" ({why})" if why else "") + ": no result"


def _check_named_dataset(dataset: str, schema: Schema) -> None:
    """Refuse a bundled dataset under a schema of other columns, which would fail after the charge:
    its attributes and label must be the schema's, by name and in order (the declared values may differ)."""
    own = load_schema(dataset)
    if own.names != schema.names or own.label.name != schema.label.name:
        raise JobError(
            f"dataset {dataset!r} has the attributes {own.names} and label {own.label.name!r}; the "
            f"schema declares {schema.names} and {schema.label.name!r}; nothing was charged"
        )


def fetch_model(r: Any, name: str) -> Any:
    """The model published under ``name`` (a stream forest or a job result), as an estimator."""
    from streamdp.learners import load_model

    r = connect(r)
    data = r.hget(published_keys(r, name).pub_model, "blob")
    if data is None:  # a stream model publishes counts on its spec (published.published_fields)
        from streamdp.service.consumer import Consumer

        return Consumer(r, name).latest()
    return load_model(bytes(data))
