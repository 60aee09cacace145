"""``streamdp demo``: the whole service on the bundled Congressional Voting data.

Creates a model, starts worker processes, streams the training records in
batches and prints a held-out accuracy per published version. Starts an
embedded Redis when none is reachable (stopped at the end); on an external
Redis the model is deleted at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from typing import Any

from streamdp.cli.common import MAX_PROCESSES, epsilon_arg, int_in, redact
from streamdp.options import BUDGETS

__all__ = ["add_parser", "demo"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``streamdp demo`` on an ``argparse`` subparsers object."""
    de = subparsers.add_parser("demo", help="run the service end to end on a bundled dataset")
    de.add_argument("--epsilon", type=epsilon_arg, default=1.0, help="the model's privacy budget (default 1)")
    # checked as they are parsed: nothing is created or started for a value that cannot work
    de.add_argument("--trees", type=int_in(1, 1000), default=5, help="random trees (default 5)")
    de.add_argument("--height", type=int_in(1, 16), default=3, help="levels per tree (default 3)")
    de.add_argument(
        "--budget",
        choices=BUDGETS,
        default="disjoint",
        help="how epsilon is shared among the trees (default disjoint: each record feeds one tree)",
    )
    de.add_argument("--batch-size", type=int_in(1, 300), default=30, help="records per batch (of the 300 streamed)")
    de.add_argument(
        "--processes", type=int_in(1, MAX_PROCESSES), default=None, help="worker processes (default: one per core)"
    )
    de.add_argument("--shuffle-seed", type=int, default=0, help="order of the records streamed (public)")
    de.add_argument("--keep", action="store_true", help="keep the model (on an external Redis)")
    de.set_defaults(func=demo)
    return de


def demo(args: argparse.Namespace) -> int:
    """The whole service on the bundled Congressional Voting data, with a held-out accuracy per version."""
    import uuid

    import numpy as np

    from streamdp.records.datasets import load
    from streamdp.service.connection import connect
    from streamdp.service.consumer import Consumer
    from streamdp.service.embedded import resolve_redis
    from streamdp.service.ledger_store import ledger_keys
    from streamdp.service.pool import WorkerPool
    from streamdp.service.producer import Producer
    from streamdp.service.registry import create_model, delete_model

    ds = load("congressional-voting")
    rng = np.random.default_rng(args.shuffle_seed)
    idx = rng.permutation(len(ds.y))
    test, train = idx[:135], idx[135:]
    url, emb = resolve_redis(args.redis_url)
    print(f"redis: {redact(url)}" + (f" (embedded {emb.kind}, stopped at the end)" if emb else ""))
    name = f"demo-votes-{uuid.uuid4().hex[:8]}"
    pool = None
    old_term = signal.getsignal(signal.SIGTERM)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_interrupt)  # SIGTERM cleans up like Ctrl-C
    try:
        forest = create_model(
            url, name, ds.schema, n_trees=args.trees, height=args.height, epsilon=args.epsilon, budget=args.budget
        )
        print(f"model {name}: {forest!r}")
        pool = WorkerPool(name, args.processes, url, log_level=logging.WARNING, block_ms=200).start()
        majority = max(float(np.mean(ds.y[test] == c)) for c in ds.schema.label.values)
        print(
            f"{pool.n} worker process(es); streaming {len(train)} records in batches of {args.batch_size}, "
            f"testing on {len(test)} held-out records (predicting their majority class scores {majority:.3f}; "
            f"the first versions know only the first batches, whose majority may differ)"
        )
        with Producer(url, name, batch_size=args.batch_size) as prod, Consumer(url, name) as cons:
            version = cons.version()
            for start in range(0, len(train), args.batch_size):
                b = train[start : start + args.batch_size]
                prod.push(ds.X[b], ds.y[b])
                f = cons.wait_newer(version, timeout=60)
                if f is None:
                    print("no new version within 60 s: are the workers running?", file=sys.stderr)
                    return 1
                version = f.version
                acc = float((f.predict(ds.X[test]) == ds.y[test]).mean())
                print(
                    f"version {f.version:3d}  batches {f.n_releases:3d}  records ~{f.estimated_records():6.0f} "
                    f"(noisy)  accuracy {acc:.3f}"
                )
        return 0
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    finally:
        if pool is not None:
            pool.stop()
        try:
            if emb is None and not args.keep:
                delete_model(url, name)
                # the demo's throwaway source: its ledger goes too (a real model's ledger is kept on delete)
                connect(url).delete(*ledger_keys(name))
        except Exception:
            pass
        if emb is not None:
            emb.stop()
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, old_term)


def _raise_interrupt(*_: Any) -> None:
    raise KeyboardInterrupt
