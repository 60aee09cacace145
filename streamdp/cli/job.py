"""``streamdp job``: on-demand batch learners over a model's retained records or a dataset file.

    streamdp job submit ALGORITHM --source NAME --epsilon E [--param k=v ...] [--name RESULT] [--wait]
    streamdp job submit ALGORITHM --source LEDGER_SOURCE --epsilon E --dataset FILE --schema FILE
    streamdp job submit ALGORITHM --source-file FILE --schema FILE --epsilon E
        [--privacy-id COLUMN --max-records-per-id K]
    streamdp job status ID | job list | job result ID [-o FILE] | job algorithms
    streamdp job worker [--once | --until-drained]

A job charges the source's ledger (``streamdp ledger NAME``) before reading any
record; a job over budget ends ``refused`` with the reason. Without ``--privacy-id`` the unit of privacy
is a record; with it, a person (the column's value): at most K records per person are used and the
epsilon holds per person.

The ledger is tied to the source *label*: the same data submitted under two
labels is charged to two ledgers, so its people lose twice the epsilon the
ledgers show. ``--source-file FILE`` binds a file to one ledger by its content
(``file-`` + the first 128 bits of the SHA-256 of its bytes): the same bytes under any path or name are
one ledger. A file submitted under a label it was not submitted under before
draws a warning; a file changed after submit is refused before any charge.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import Any

from streamdp.cli.common import MAX_BLOCK_MS, client, finite_epsilon_arg, int_in, seconds_arg

__all__ = ["add_parser", "submit", "status", "list_", "result", "algorithms", "worker"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``streamdp job`` and its subcommands on an ``argparse`` subparsers object."""
    p = subparsers.add_parser(
        "job",
        help="on-demand batch learners: submit, status, list, result, worker",
        description=__doc__.split("\n\n")[0].replace("``", ""),
    )
    sub = p.add_subparsers(dest="job_command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--queue", default="sdp:jobs", help="job stream (default sdp:jobs; a separate queue per tenant/test)"
    )

    s = sub.add_parser(
        "submit", parents=[common], help="queue a job (charged to the source's ledger when a worker runs it)"
    )
    s.add_argument(
        "algorithm",
        help="dpea, sulq-id3, diffp-id3, diffp-c45, hanisch-forest, private-rdt, kanon-forest, or auto (the most "
        "accurate of them, chosen privately within the same epsilon)",
    )
    src = s.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--source",
        help="model name (its retained records), or the ledger source of --dataset: a free-text label; "
        "the same data under two labels is charged to two ledgers (prefer --source-file)",
    )
    src.add_argument(
        "--source-file",
        default=None,
        metavar="FILE",
        help="a CSV dataset bound to its own ledger by content (file- and the first 128 bits of the SHA-256 of its bytes): the same "
        "bytes under any path or name share one budget; implies --dataset FILE",
    )
    s.add_argument(
        "--epsilon", type=finite_epsilon_arg, required=True, help="the job's spend (finite: jobs always add noise)"
    )
    s.add_argument("--param", action="append", default=[], metavar="K=V", help="algorithm parameter (repeatable)")
    s.add_argument(
        "--dataset",
        default=None,
        help="CSV file (with a header, or see --no-header) or a known dataset name, instead of a model",
    )
    s.add_argument("--schema", default=None, help="schema JSON file of --dataset")
    s.add_argument(
        "--no-header",
        action="store_true",
        help="the file has no header: columns are the label then the attributes in schema order (or the "
        "label at --label INDEX), as `streamdp push --no-header` reads them",
    )
    s.add_argument("--label", default=None, help="label column of the file (name; index with --no-header)")
    s.add_argument(
        "--privacy-id",
        default=None,
        metavar="COLUMN",
        help="the dataset's column naming each record's person (not an attribute): epsilon then holds per "
        "person, not per record (needs --max-records-per-id and a header)",
    )
    s.add_argument(
        "--max-records-per-id",
        type=int_in(1, 10**6),
        default=None,
        metavar="K",
        help="with --privacy-id: at most K records per person are used (a uniform sample); the noise grows with K",
    )
    s.add_argument("--name", default=None, help="publish the model under this name (default ALGORITHM-ID8)")
    s.add_argument("--max-attempts", type=int_in(1, 1000), default=3)
    s.add_argument("--wait", action="store_true", help="wait until the job is finished")
    s.add_argument("--timeout", type=seconds_arg, default=3600.0, help="seconds to --wait")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=submit)

    st = sub.add_parser("status", parents=[common], help="a job's status, progress, attempts, reason")
    st.add_argument("id")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=status)

    ls = sub.add_parser("list", parents=[common], help="recent jobs, newest first")
    ls.add_argument("--limit", type=int_in(1, 10**6), default=50)
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=list_)

    rs = sub.add_parser("result", parents=[common], help="a done job's model (write the blob with -o)")
    rs.add_argument("id", help="the job's id, or its result's name (submit --name)")
    rs.add_argument("-o", "--output", default=None)
    rs.set_defaults(func=result)

    al = sub.add_parser("algorithms", parents=[common], help="algorithms, availability and parameters")
    al.add_argument("--json", action="store_true")
    al.set_defaults(func=algorithms)

    w = sub.add_parser("worker", parents=[common], help="run a job worker in this process")
    g = w.add_mutually_exclusive_group()
    g.add_argument("--once", action="store_true", help="stop after one job")
    g.add_argument("--until-drained", action="store_true", help="stop when no job is waiting")
    w.add_argument("--claim-idle-ms", type=int, default=60_000, help="reclaim jobs of workers silent this long")
    w.add_argument("--block-ms", type=int_in(1, MAX_BLOCK_MS), default=1000)
    w.add_argument("-v", "--verbose", action="store_true")
    w.set_defaults(func=worker)
    return p


def _line(st: dict) -> str:
    why = st.get("reason") or ""
    extra = f"  {why}" if why else ""
    result = f"result={st['result']}" if st["status"] not in ("failed", "refused") else "(no result)"
    won = f" learner={st['learner']}" if st.get("learner") and st["learner"] != st["algorithm"] else ""
    said = "".join(f"\n  warning: {w}" for w in st.get("warnings") or [])
    if st.get("worker_may_be_lost") or st.get("worker_gone"):
        lost = "gone" if st.get("worker_gone") else "may be lost"
        extra += f"  worker {lost} (last heartbeat {st['heartbeat_age_s']:.0f} s ago: streamdp job status ID)"
    return (
        f"{st['id']}  {st['status']:8s} {st.get('progress', ''):11s} {st['algorithm']:14s} "
        f"eps={st['epsilon']:g} source={st['source']} {result}{won} "
        f"attempts={st['attempts']}/{st['max_attempts']}{extra}{said}"
    )


#: A dataset file above this many bytes: submit says it is reading it (a large file takes a while).
LARGE_FILE = 64 << 20


def submit(args: argparse.Namespace) -> int:
    from streamdp.jobs.runner import parse_param
    from streamdp.service.job_queue import FINAL, JobQueue

    params = dict(parse_param(p) for p in args.param)
    from streamdp.privacy.ledger import file_source

    q = JobQueue(client(args), args.queue)
    if args.source_file:
        if args.dataset:
            raise ValueError("--source-file is the dataset: give no --dataset")
        if not os.path.isfile(args.source_file):
            raise ValueError(_not_a_file(args.source_file))
        args.dataset, args.source = args.source_file, file_source(args.source_file)
    kind = "dataset" if args.dataset else "model"
    if args.schema and not args.dataset:
        raise ValueError("--schema goes with --dataset")
    # (--no-header or --label without a dataset: JobQueue.submit refuses them for a model's records)
    if args.dataset and os.path.isfile(args.dataset) and os.path.getsize(args.dataset) > LARGE_FILE:
        # submit reads the whole file as the job will (sources.check_records)
        print(
            f"streamdp: reading {args.dataset} ({os.path.getsize(args.dataset) >> 20:,} MiB) as the job "
            "will, before anything is queued or charged ...",
            file=sys.stderr,
            flush=True,
        )
    job_id = q.submit(
        args.algorithm,
        args.source,
        args.epsilon,
        params,
        source_kind=kind,
        dataset=args.dataset,
        schema=args.schema,
        result_name=args.name,
        max_attempts=args.max_attempts,
        header=not args.no_header,
        label=args.label,
        privacy_id=args.privacy_id,
        max_records_per_id=args.max_records_per_id,
    )
    if not args.wait:
        print(json.dumps({"id": job_id}) if args.json else job_id)
        return 0
    st = q.wait(job_id, timeout=args.timeout, poll_s=0.2)
    print(json.dumps(st) if args.json else _line(st))
    if st["status"] not in FINAL:
        print(
            f"streamdp: job {job_id} still {st['status']} after {args.timeout:g} s (is a job worker running?)",
            file=sys.stderr,
        )
    return 0 if st["status"] == "done" else 1


def _not_a_file(path: str) -> str:
    """Why ``--source-file PATH`` is refused when no file is there (a bundled dataset is named with --dataset).

    >>> _not_a_file("congressional-voting")  # doctest: +ELLIPSIS
    "--source-file 'congressional-voting': no such file (--source-file takes a CSV file's path); ... --dataset ..."
    """
    from streamdp.records.datasets import DATASETS

    said = f"--source-file {path!r}: no such file (--source-file takes a CSV file's path)"
    if path in DATASETS:
        return f"{said}; {path!r} is a bundled dataset: name it with --dataset {path} --source LABEL"
    return f"{said}; bundled datasets are named with --dataset ({', '.join(sorted(DATASETS))}) and --source LABEL"


def status(args: argparse.Namespace) -> int:
    from streamdp.service.job_queue import JobQueue

    st = JobQueue(client(args), args.queue).status(args.id)
    if args.json:
        print(json.dumps(st))
        return 0
    for k in (
        "id",
        "status",
        "progress",
        "fraction",
        "algorithm",
        "epsilon",
        "params",
        "source",
        "source_kind",
        "dataset",
        "privacy_id",
        "max_records_per_id",
        "result",
        "learner",
        "attempts",
        "max_attempts",
        "worker",
        "error",
        "reason",
    ):
        if st.get(k) not in (None, ""):
            print(f"{k:13s} {st[k]}")
    if st.get("heartbeat_age_s") is not None:
        print(f"{'heartbeat':13s} {_heartbeat_words(st)}")
    for k in ("created", "started", "finished"):
        if st.get(k):
            print(f"{k:13s} {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(st[k]))}")
    for w in st.get("warnings") or []:
        print(f"{'warning':13s} {w}")
    return 0


def _heartbeat_words(st: dict) -> str:
    """A running job's last heartbeat, and whether its worker may be lost (:meth:`JobQueue.status`'s fields).

    >>> st = {"heartbeat_age_s": 45.0, "heartbeat_every_s": 20.0, "claim_idle_s": 60.0,
    ...       "worker_may_be_lost": True, "worker_gone": False}
    >>> _heartbeat_words(st)  # doctest: +NORMALIZE_WHITESPACE
    'last 45.0 s ago (its worker beats every 20 s): older than two heartbeats, so its worker may have stopped
    (killed, or cut off from Redis); another job worker retries the job once it has been silent 60 s (in about
    15 s), charging nothing more'
    """
    age, every, claim = st["heartbeat_age_s"], st["heartbeat_every_s"], st["claim_idle_s"]
    words = f"last {age:.1f} s ago (its worker beats every {every:g} s)"
    retry = "another job worker retries the job"
    if st.get("worker_gone"):
        return (
            f"{words}: its worker's process no longer runs (killed?); {retry} (a job worker started on this host "
            f"takes it over at once, another once it has been silent {claim:g} s), charging nothing more"
        )
    if st.get("worker_may_be_lost"):
        return (
            f"{words}: older than two heartbeats, so its worker may have stopped (killed, or cut off from Redis); "
            f"{retry} once it has been silent {claim:g} s (in about {max(0.0, claim - age):.0f} s), charging "
            "nothing more"
        )
    return words


def list_(args: argparse.Namespace) -> int:
    from streamdp.service.job_queue import JobQueue

    jobs = JobQueue(client(args), args.queue).list(args.limit)
    if args.json:
        print(json.dumps(jobs))
    else:
        print("\n".join(_line(j) for j in jobs) if jobs else "no jobs")
    return 0


def result(args: argparse.Namespace) -> int:
    from streamdp.learners import load_model
    from streamdp.service.job_queue import JobQueue

    q = JobQueue(client(args), args.queue)
    data = q.result_bytes(args.id)
    model = load_model(data)
    st = q.status(args.id)
    if st.get("learner"):
        print(f"learner: {st['learner']}" + (" (chosen privately by auto)" if st["algorithm"] == "auto" else ""))
    for w in st.get("warnings") or []:
        print(f"warning: {w}", file=sys.stderr)
    if args.output:
        with open(args.output, "wb") as fh:
            fh.write(data)
        print(f"wrote {model!r} to {args.output} ({len(data):,} bytes)")
    else:
        print(repr(model))
    return 0


def algorithms(args: argparse.Namespace) -> int:
    from streamdp.jobs.runner import describe

    d = describe()
    if args.json:
        print(json.dumps(d))
    else:
        for a in d:
            tail = ", ".join(a["params"]) if a["available"] else f"NOT AVAILABLE: {a['reason']}"
            print(f"{a['name']:15s} {a['description']}\n{'':15s} params: {tail}")
    return 0


def worker(args: argparse.Namespace) -> int:
    from streamdp.service.job_worker import JobWorker

    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    w = JobWorker(client(args), queue=args.queue, claim_idle_ms=args.claim_idle_ms, block_ms=args.block_ms)
    n = w.run(once=args.once, until_drained=args.until_drained)
    print(f"job worker {w.name}: {n} job(s) handled", file=sys.stderr)
    return 0
