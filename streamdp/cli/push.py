"""``streamdp push NAME FILE``: a CSV file of labelled records to a model's stream, in batches.

Invalid records (a value outside the schema) are sent to the model's
dead-letter stream, never merged; the summary line counts them.
"""

from __future__ import annotations

import argparse
import csv
import math
from typing import Any

from .common import Progress, redis_url

__all__ = ["add_parser", "push"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``streamdp push`` on an ``argparse`` subparsers object."""
    pu = subparsers.add_parser("push", help="push a CSV file of labelled records to a model's stream")
    pu.add_argument("name")
    pu.add_argument("file")
    pu.add_argument("--label", default=None, help="label column (name; index with --no-header)")
    pu.add_argument("--batch-size", type=int, default=1000)
    pu.add_argument("--no-header", action="store_true", help="columns are the label then attributes in schema order "
                    "(or the label at --label INDEX)")
    pu.add_argument("-q", "--quiet", action="store_true")
    pu.set_defaults(func=push)
    return pu


def _read_csv(path: str, schema, label: str | None, header: bool) -> tuple[list, list]:
    """``(records in schema order, labels)`` of a CSV file; a clear ``SystemExit`` on a missing column."""
    from ..sources import parse_row

    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    if header:
        if not rows:
            raise SystemExit(f"{path}: empty file")
        head, rows = [h.strip() for h in rows[0]], rows[1:]
        label = label or schema.label.name
        if label not in head:
            raise SystemExit(f"{path}: no label column {label!r} (columns: {head})")
        missing = [n for n in schema.names if n not in head]
        if missing:
            raise SystemExit(f"{path}: missing attribute columns {missing}")
        cols = [head.index(n) for n in schema.names]
        li = head.index(label)
    else:
        li = int(label) if label is not None else 0
        n = schema.n_attributes + 1
        cols = [j for j in range(n) if j != (li % n)]
    X, y = [], []
    for r in rows:
        if not r or all(not c.strip() for c in r):
            continue
        rec, lab = parse_row(schema, r, cols, li)
        X.append(rec)
        y.append(lab)
    return X, y


def push(args: argparse.Namespace) -> int:
    import numpy as np

    from ..service import codec
    from ..service.producer import Producer

    with Producer(redis_url(args), args.name, batch_size=args.batch_size, on_invalid="dead-letter") as p:
        X, y = _read_csv(args.file, p.schema, args.label, not args.no_header)
        bar = Progress(len(X)) if not args.quiet else None
        bad = 0
        sent = 0
        for s in range(0, len(X), args.batch_size):
            xs, ys = X[s:s + args.batch_size], y[s:s + args.batch_size]
            env = codec.encode_batch(p.schema, np.array(xs, dtype=object).reshape(len(xs), -1), ys,
                                     on_invalid="dead-letter")
            bad += len(codec.decode(p.schema, env).dropped)
            p.push_raw(env)
            sent += len(xs)
            if bar:
                bar.update(sent)
        if bar:
            bar.close()
    print(f"pushed {sent:,} records in {math.ceil(sent / args.batch_size)} batches to {args.name!r}"
          + (f"; {bad} invalid records go to the dead-letter stream" if bad else ""))
    return 0
