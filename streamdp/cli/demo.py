"""``streamdp demo``: the whole service on the bundled Congressional Voting data.

Creates a model, starts worker processes, streams the training records in
batches and prints a held-out accuracy per published version. After each batch it waits until the workers
have read it and released the window holding it (public values: the stream group's progress and the model's
published window schedule); a short ``max_lag`` keeps those windows short. Starts an
embedded Redis when none is reachable (stopped at the end); on an external
Redis the model is deleted at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import logging
import math
import signal
import sys
import threading
import time
from typing import Any

from streamdp.cli.common import MAX_PROCESSES, finite_epsilon_arg, int_in, redact
from streamdp.cli.model_show import privacy_warnings
from streamdp.options import BUDGETS

__all__ = ["add_parser", "demo", "default_batch_size", "wait_published"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``streamdp demo`` on an ``argparse`` subparsers object."""
    de = subparsers.add_parser("demo", help="run the service end to end on a bundled dataset")
    de.add_argument(
        "--epsilon", type=finite_epsilon_arg, default=1.0, help="the model's privacy budget (finite; default 1)"
    )
    # checked as they are parsed: nothing is created or started for a value that cannot work
    de.add_argument("--trees", type=int_in(1, 1000), default=5, help="random trees (default 5)")
    de.add_argument("--height", type=int_in(1, 16), default=3, help="levels per tree (default 3)")
    de.add_argument(
        "--budget",
        choices=BUDGETS,
        default="disjoint",
        help="how epsilon is shared among the trees (default disjoint: each record feeds one tree)",
    )
    de.add_argument(
        "--batch-size",
        type=int_in(1, 300),
        default=None,
        help="records per batch (of the 300 streamed; default: equal batches, each large enough that its noisy "
        "total stands 2.5 sd clear of the merge bar, the sd counting the release noise and the disjoint budget's "
        "random routing, so each batch is merged but for a chance of about 1 in 160 at most; a smaller batch may be left "
        "out of the published counts until the left-out releases add up)",
    )
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
    from streamdp.service.registry import create_model, delete_model, show_model

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
            url,
            name,
            ds.schema,
            n_trees=args.trees,
            height=args.height,
            epsilon=args.epsilon,
            budget=args.budget,
            release_every=RELEASE_EVERY,
            max_lag=MAX_LAG,
        )
        print(f"model {name}: {forest!r}")
        for line in privacy_warnings(show_model(url, name)):  # as model create says it: nearly exact counts
            print(f"streamdp: {line}", file=sys.stderr)
        batch = args.batch_size or default_batch_size(forest, len(train))
        pool = WorkerPool(name, args.processes, url, log_level=logging.WARNING, block_ms=200).start()
        majority = max(float(np.mean(ds.y[test] == c)) for c in ds.schema.label.values)
        print(
            f"{pool.n} worker process(es); streaming {len(train)} records in batches of {batch}, "
            f"testing on {len(test)} held-out records (predicting their majority class scores {majority:.3f}; "
            f"the first versions know only the first batches, whose majority may differ)"
        )
        with Producer(url, name, batch_size=batch) as prod, Consumer(url, name) as cons:
            version = cons.version()
            for start in range(0, len(train), batch):
                b = train[start : start + batch]
                prod.push(ds.X[b], ds.y[b])
                try:
                    f = wait_published(cons, version, timeout=WAIT_S)
                except TimeoutError as e:
                    print(f"streamdp demo: {e}", file=sys.stderr)
                    return 1
                if f is None:
                    print(
                        f"batch of {len(b)} left out of the published counts until the left-out releases add up: "
                        "its window's noisy record total could not be told from an empty one's (streamdp model "
                        "show: the bar; a larger --batch-size stands clear alone)"
                    )
                    continue
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


#: The demo model's shortest and longest window (seconds): short, so each batch is published within seconds.
RELEASE_EVERY, MAX_LAG = 0.25, 1.0
#: How long the demo waits for the workers at each step (seconds).
WAIT_S = 60.0
#: A default batch stands this many noise sd above the threshold a release must clear to be merged.
MARGIN_SD = 2.5


def default_batch_size(forest: Any, n: int) -> int:
    """Records per batch, the ``n`` split into equal batches: as many batches as hold each at least the fewest
    records (a multiple of 5) whose window's noisy record total stands :data:`MARGIN_SD` sd above the cadence's
    merge threshold (``keep_z`` sd of the release noise), ``n`` when none does. The sd counts the release noise
    and, under the disjoint budget, the random routing: each record lands in one of the ``R`` trees, so the
    stumps' share of ``m`` records is binomial and the total read from it (times ``R``) varies by ``m (R - 1)``.
    From the model's public parameters only. Why: ``demo --help`` promises each default batch is merged, and a
    batch sized on the noise alone was not, often enough to see; equal batches leave no short last one.

    >>> from streamdp import PrivateForest
    >>> from streamdp.records.datasets import load
    >>> f = PrivateForest.create(load("congressional-voting").schema, n_trees=5, height=3, budget="disjoint", seed=0)
    >>> g = PrivateForest.create(load("congressional-voting").schema, n_trees=5, height=3, epsilon=0.01, seed=0)
    >>> default_batch_size(f, 300), default_batch_size(g, 300)
    (100, 300)
    """
    from streamdp.estimation import cell_variance
    from streamdp.release.cadence import KEEP_Z, total_sd

    rows = forest.structure.n_trees
    v = cell_variance(forest.mechanism, forest.epsilon_per_tree, forest.k)
    sd = total_sd(v, forest.schema.n_classes, max(forest.prior_trees, 1), forest.budget, rows)
    route = rows - 1 if forest.budget == "disjoint" else 0  # the routing's variance per record in the total

    def clear(m: int) -> bool:
        return m - KEEP_Z * sd >= MARGIN_SD * math.sqrt(sd * sd + m * route)

    fewest = next((m for m in range(5, n + 1, 5) if clear(m)), n)
    return math.ceil(n / max(1, n // fewest))


def wait_published(cons: Any, version: int, timeout: float = WAIT_S, poll_s: float = 0.05) -> Any:
    """Wait until every record pushed so far is read by a worker and the window holding it is released.

    Returns the newer forest when that release was merged, None when the window was left out (its noisy
    record total could not be told from an empty one's: :func:`streamdp.release.cadence.keeps`). Reads public
    values only: the consumer group's progress (``XINFO GROUPS``) and the published schedule. A model without
    a schedule (windows on the clock, every release merged) waits for a newer version. Raises
    :class:`TimeoutError` naming the step that did not happen within ``timeout`` seconds.
    """
    import json

    from streamdp.service.keys import GROUP, as_str

    r, keys = cons.redis, cons.keys
    deadline = time.monotonic() + timeout
    while True:  # 1. every pushed record read and acknowledged (added to an open window)
        group = next((g for g in r.xinfo_groups(keys.records) if as_str(g["name"]) == GROUP), None)
        if group is not None and int(group["pending"]) == 0 and not int(group.get("lag") or 0):
            break
        if time.monotonic() > deadline:
            workers = 0 if group is None else int(group["consumers"])
            raise TimeoutError(
                f"the workers did not read the pushed records within {timeout:g} s ({workers} worker(s) in the "
                "model's group): are the workers running?"
            )
        time.sleep(poll_s)
    read_at = time.time()
    while True:  # 2. the window open when the last record was added is released
        if cons.version() > version:
            return cons.latest()
        raw = r.hget(keys.pub_model, "schedule")
        if raw is not None:
            sched = json.loads(raw)
            if sched["end"] - sched["length"] >= read_at:  # the open window began after the last record was added
                return cons.latest() if cons.version() > version else None
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"the workers read every pushed record but released no window within {timeout:g} s"
                + (f" (the open window ends at {sched['end']:.0f}, epoch seconds)" if raw is not None else "")
            )
        time.sleep(poll_s)


def _raise_interrupt(*_: Any) -> None:
    raise KeyboardInterrupt
