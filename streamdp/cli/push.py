"""``streamdp push NAME FILE``: a CSV file of labelled records to a model's stream, in batches.

The file is read in chunks (pandas' C reader, on a reader thread); each chunk is
coded against the schema and its batches are sent in one pipelined round trip
while the next chunk is read. Invalid records (a value outside the schema) are
sent to the model's dead-letter stream, never merged; the summary line counts them.

Pushing is idempotent: a batch's id derives from the model, ``--source``, the
batch's position in the file and its content (:mod:`streamdp.service.producer`),
so pushing the same file again (same ``--batch-size``) merges nothing new. Give
genuinely new records that repeat an earlier file's content their own
``--source`` label (e.g. the date), or ``--no-dedup``.

A file that turns out malformed part way (an unbalanced quote) stops the push
with the line named and the number of records already pushed; pushing the corrected file again (same ``--batch-size`` and ``--source``)
merges only the rest. A bad value is named by its line (1-based, the header being
line 1; see :func:`streamdp.records.sources.read_csv_chunks`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from streamdp.cli.common import Progress, redis_url

__all__ = ["add_parser", "push", "NO_WORKER"]

#: The note after a push when no worker of the model's group is live: none ever joined, those that ran left it
#: (a worker run ``--until-drained`` leaves when it stops) or were killed; a worker just started may still be
#: starting.
NO_WORKER = (
    "no worker is running for {0!r}: the records wait in the stream until one runs (streamdp worker {0}; a worker "
    "started moments ago joins once it has started; streamdp stats {0} counts the live ones)"
)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``streamdp push`` on an ``argparse`` subparsers object."""
    pu = subparsers.add_parser("push", help="push a CSV file of labelled records to a model's stream")
    pu.add_argument("name")
    pu.add_argument("file")
    pu.add_argument("--label", default=None, help="label column (name; index with --no-header)")
    pu.add_argument("--batch-size", type=int, default=1000)
    pu.add_argument(
        "--no-header",
        action="store_true",
        help="columns are the label then attributes in schema order (or the label at --label INDEX)",
    )
    pu.add_argument(
        "--source",
        default="",
        metavar="LABEL",
        help="names this data: records identical to an earlier push at the same position are merged "
        "once unless their --source differs (default: none, the content alone decides)",
    )
    pu.add_argument("--no-dedup", action="store_true", help="random batch ids: pushing the file again counts it again")
    pu.add_argument("-q", "--quiet", action="store_true", help="no progress bar (the summary line stays)")
    pu.set_defaults(func=push)
    return pu


def push(args: argparse.Namespace) -> int:
    """``streamdp push``: code a file's records against the model's schema and push them in batches.

    Returns the exit status: 0 pushed (invalid records, if any, went to the dead-letter stream), 2 when
    nothing could be pushed or every record was invalid (the message names the first bad record)."""
    from streamdp.records.frames import CHUNK_ROWS
    from streamdp.records.prefetch import prefetch
    from streamdp.records.sources import read_csv_chunks
    from streamdp.service.model_store import load_unit
    from streamdp.service.producer import Producer

    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be at least 1, got {args.batch_size}")
    label: str | int | None = args.label  # (without a header an index: sources.label_index reads and checks it)
    with Producer(
        redis_url(args), args.name, batch_size=args.batch_size, on_invalid="dead-letter", dedup=not args.no_dedup
    ) as p:
        if args.no_header:  # a line of another width (an id column first) would shift every column
            from streamdp.records.sources import check_columns

            check_columns(args.file, p.schema, header=False, label=label)
        bar = Progress(1) if not args.quiet else None
        read = [0.0]
        chunk_rows = args.batch_size * max(1, CHUNK_ROWS // args.batch_size)  # batches never straddle chunks
        unit = load_unit(p.redis, args.name)  # (public: the registry summary, which the producer user reads)
        if unit is not None and args.no_header:
            raise ValueError(f"model {args.name!r} needs each record's {unit.privacy_id!r}: the file needs a header")
        if not args.no_header:
            _note_ignored(args.file, p.schema, label, None if unit is None else unit.privacy_id, args.name)
        chunks = read_csv_chunks(
            args.file,
            p.schema,
            privacy_id=None if unit is None else unit.privacy_id,
            label=label,
            header=not args.no_header,
            chunk_rows=chunk_rows,
            on_invalid="drop",
            progress=lambda frac: read.__setitem__(0, frac),
        )

        def progress(done: int) -> None:
            if bar:
                bar.update_fraction(read[0], done)

        try:
            # a file of a header alone reads as one chunk of no row: nothing to send (not an empty batch)
            res = p.push_chunks(prefetch(c for c in chunks if c.n_in), source=args.source, progress=progress)
        except BaseException as e:
            if bar:  # the bar shows what was pushed, then ends its line before the error is printed
                done = getattr(e, "n_pushed", None)
                if done is not None:
                    bar.update_fraction(min(read[0], 0.999), done, now_=True)
                bar.close()
            raise
        if bar:
            bar.update_fraction(1.0, res.n_records)
            bar.close()
        consumers = p.live_consumers() if res.n_records else None
    sent, bad = res.n_records, res.n_invalid
    if not sent:
        print(
            f"streamdp: error: {args.file} holds no record"
            + ("" if args.no_header else " (a header line alone?)")
            + "; nothing was pushed",
            file=sys.stderr,
        )
        return 2
    if bad and bad >= sent:  # an error, not "pushed N records": nothing will be merged
        print(
            f"streamdp: error: every record of {args.file} was invalid, none will be merged (first: "
            f"{res.first_invalid}): check the values' spelling against the schema, --label and --no-header (the "
            f"schema's label is {p.schema.label.name!r})",
            file=sys.stderr,
        )
        return 2
    print(
        f"sent {sent:,} record{'s' * (sent != 1)} in {len(res)} batch{'es' * (len(res) != 1)} to {args.name!r}"
        + ("" if args.no_dedup else " (a batch sent before is merged once: sending the same file again adds nothing)")
        + (
            f"; {bad} invalid record{'s go' if bad != 1 else ' goes'} to the dead-letter stream (first: "
            f"{res.first_invalid})"
            if bad
            else ""
        )
    )
    if consumers == 0:  # (None: this user may not ask, the deploy producer's ACL: say nothing)
        print(f"streamdp: note: {NO_WORKER.format(args.name)}", file=sys.stderr)
    if bad:  # a corrected copy of the whole file pushed again would count its valid records twice
        print(
            "streamdp: note: the valid records of those batches are merged (once a worker reads them); pushing a "
            "corrected copy of the whole file would count them again (a batch's id follows its content): push only "
            "the corrected records, as a file of their own",
            file=sys.stderr,
        )
    return 0


def _note_ignored(path: str, schema: Any, label: str | int | None, privacy_id: str | None, model: str) -> None:
    """Say on stderr which of the file's columns the push ignores (neither an attribute, the label nor the model's
    privacy id): a column meant as a person's id is ignored by a model created without ``--privacy-id``."""
    from streamdp.records.sources import check_header

    head, lab = check_header(path, schema, label, privacy_id=privacy_id)
    used = {*schema.names, lab, privacy_id}
    ignored = [c for c in head if c not in used and c and not c.startswith("Unnamed:")]
    if ignored:
        why = "" if privacy_id else f" (model {model!r} has no privacy id: its unit is a record, see --privacy-id)"
        print(f"streamdp: note: {path}: column{'s' * (len(ignored) > 1)} {', '.join(map(repr, ignored))} "
              f"not in the schema, ignored{why}", file=sys.stderr)  # fmt: skip
