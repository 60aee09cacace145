"""``streamdp stats [NAME]``: worker counters per model, as text or Prometheus exposition format."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import client

__all__ = ["add_parser", "stats"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``streamdp stats`` on an ``argparse`` subparsers object."""
    st = subparsers.add_parser("stats", help="worker counters (records, batches, dead letters, pending, lag, retries)")
    st.add_argument("name", nargs="?")
    st.add_argument("--prometheus", action="store_true")
    st.set_defaults(func=stats)
    return st


def stats(args: argparse.Namespace) -> int:
    from ..service.registry import list_models
    from ..service.stats import collect, prometheus_text

    r = client(args)
    names = [args.name] if args.name else list(list_models(r))
    counters = {n: collect(r, n) for n in names}
    if args.prometheus:
        sys.stdout.write(prometheus_text(counters))
    else:
        for n, s in counters.items():
            print(n)
            for k, v in s.items():
                print(f"  {k:22s} {v:g}")
    return 0
