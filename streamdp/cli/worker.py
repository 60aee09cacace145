"""``streamdp worker NAME``: stream workers that merge a model's batches and publish new versions.

A pool of processes (one per core by default); the exit code is 1 when any of
them ended with an error (stopped by SIGTERM is not an error).
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
from typing import Any

from streamdp.cli.common import MAX_BLOCK_MS, MAX_PROCESSES, client, int_in, redis_url

__all__ = ["add_parser", "worker"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``streamdp worker`` on an ``argparse`` subparsers object."""
    w = subparsers.add_parser("worker", help="run stream workers for a model")
    w.add_argument("name")
    w.add_argument("--processes", type=int_in(1, MAX_PROCESSES), default=None, help="default: one per core")
    w.add_argument("--batch-entries", type=int, default=16, help="entries merged per commit")
    w.add_argument(
        "--claim-idle-ms",
        type=int,
        default=30_000,
        help="take over entries another worker has held this long without committing (a crashed "
        "worker's; default 30,000); a worker of this host whose process is gone: at once",
    )
    w.add_argument("--max-deliveries", type=int, default=5)
    w.add_argument("--block-ms", type=int_in(1, MAX_BLOCK_MS), default=1000)
    w.add_argument(
        "--keep-versions",
        type=int_in(0, 10**6),
        default=None,
        help="published versions retained (pub:v:N) for consumers' get(version) (0: no bound in number; default 20)",
    )
    w.add_argument(
        "--keep-mib",
        type=int_in(0, 10**7),
        default=None,
        help="... and no more of them than fit in this many MiB (0: no bound; at least one is kept; "
        "default 256); older ones are removed when a "
        "worker starts: give every worker of a model the same settings (each removes what it "
        "would not keep)",
    )
    w.add_argument("--until-drained", action="store_true", help="exit when the stream has nothing left")
    w.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also the INFO log lines (windows released, entries claimed); warnings and errors are logged without "
        "it. Every log line is one JSON object on stderr, for log collectors, and holds no record value",
    )
    w.set_defaults(func=worker)
    return w


def worker(args: argparse.Namespace) -> int:
    """``streamdp worker``: run the model's stream workers (a pool of processes) until stopped or drained;
    returns the exit status."""
    from streamdp.service.pool import run_workers
    from streamdp.service.registry import require_model
    from streamdp.service.rollback import WorkerRefused
    from streamdp.service.stream_worker import WorkerConfig, preflight

    # a missing model or an unreachable server: one error line, no child started (the model is the workers' to load)
    require_model(client(args), args.name)
    try:  # a missing or mismatched noise key: one error line here, not one per process
        preflight(client(args), args.name)
    except WorkerRefused as e:
        print(f"streamdp: error: {e}", file=sys.stderr)
        return 2

    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    cfg = {
        "batch_entries": args.batch_entries,
        "claim_idle_ms": args.claim_idle_ms,
        "max_deliveries": args.max_deliveries,
        "block_ms": args.block_ms,
    }
    if args.keep_versions is not None:  # (else WorkerConfig's defaults, stated once there)
        cfg["keep_versions"] = args.keep_versions
    if args.keep_mib is not None:
        cfg["keep_bytes"] = args.keep_mib << 20
    WorkerConfig(**cfg).check()  # a bad setting: one error line here, not a traceback in every child
    _say_start(args)
    codes = run_workers(
        args.name,
        args.processes,
        redis_url(args),
        until_drained=args.until_drained,
        log_level=logging.INFO if args.verbose else logging.WARNING,
        **cfg,
    )
    bad = [c for c in codes if c not in (0, None, -15)]  # -15: stopped by SIGTERM
    if args.until_drained and not bad:
        _say_drained(args)
    return 1 if bad else 0


def _say_start(args: argparse.Namespace) -> None:
    """One JSON line on stderr as the pool starts (``worker.pool_start``, also without ``-v``; every log line is
    JSON): what it consumes, how it stops and, when other consumers hold pending entries (a restart after a SIGKILL
    elsewhere), when those are taken over were their workers dead: no silent wait. Names and settings only."""
    import json
    import os
    import time

    from streamdp.service.group import holders
    from streamdp.service.keys import GROUP, Keys

    stream = Keys(args.name).records
    line: dict[str, Any] = {
        "ts": round(time.time(), 3),
        "event": "worker.pool_start",
        "model": args.name,
        "processes": args.processes or os.cpu_count() or 1,  # (the pool's default: one per core)
        "stream": stream,
        "group": GROUP,
        "stop": ("when the stream is drained, or " if args.until_drained else "")
        + "at Ctrl-C or SIGTERM (each process finishes its step)",
    }
    held = [h for h in holders(client(args), stream, GROUP) if h.pending and not h.gone]
    if held:
        line["consumers_holding_entries"] = len(held)
        line["taken_over_within_s"] = math.ceil(max(h.wait_ms(args.claim_idle_ms) for h in held) / 1000)
        line["note"] = (
            "a live worker commits the entries it holds; a dead one's are taken over once idle --claim-idle-ms"
        )
    print(json.dumps(line), file=sys.stderr, flush=True)


def _say_drained(args: argparse.Namespace) -> None:
    """One line after a pool run ``--until-drained`` stopped: the published version, its merged releases and the
    releases left out (public; nothing if the model is gone meanwhile)."""
    from streamdp.service.model_store import ModelNotFound
    from streamdp.service.registry import show_model

    try:
        info = show_model(client(args), args.name)
    except ModelNotFound:
        return
    n, out = info["releases"], info.get("windows", info["releases"]) - info["releases"]
    left = (
        f"; {out} left out, their released totals too small to tell from an empty window (records in them are "
        "not in the published model)"
        if out > 0
        else ""
    )
    print(
        f"drained {args.name!r}: version {info['version']} published, {n} release{'s' if n != 1 else ''} "
        f"merged in all{left} (streamdp model show for more)"
    )
