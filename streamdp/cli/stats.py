"""``streamdp stats [NAME]``: worker counters per model, as text or Prometheus exposition format; a model's
last dead letters with ``--dead-letters``.

Only public or noisy figures by default; the exact record-dependent counts
(records merged, records dropped by a per-person model's K bound, dead letters, ...) only with ``--exact``,
with a warning.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from streamdp.cli.common import client, int_in

__all__ = ["add_parser", "stats", "serve"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``streamdp stats`` on an ``argparse`` subparsers object."""
    st = subparsers.add_parser("stats", help="a model's health and noisy figures (exact worker counters with --exact)")
    st.add_argument("name", nargs="?")
    st.add_argument("--prometheus", action="store_true")
    st.add_argument(
        "--exact",
        action="store_true",
        help="also show the EXACT record-dependent counts (records_merged, records_dropped_over_k: the records a "
        "per-person model's K bound dropped, dead letters, ...): "
        "not differentially private, keep them out of shared metrics systems",
    )
    st.add_argument(
        "--dead-letters",
        type=int_in(1, 10_000),
        nargs="?",
        const=10,
        default=None,
        metavar="N",
        help="list NAME's last N dead letters (default 10): when, the entry, why (the reason names what was "
        "wrong, never a value); EXACT facts about individual records, for the model's operator",
    )
    st.add_argument(
        "--serve",
        metavar="[HOST:]PORT",
        default=None,
        help="serve the public figures for Prometheus at http://HOST:PORT/metrics until stopped "
        "(default host 127.0.0.1; every model, or NAME's); exact counts are never served",
    )
    st.set_defaults(func=stats)
    return st


def stats(args: argparse.Namespace) -> int:
    from streamdp.service.registry import list_models, no_stream_model
    from streamdp.service.stats import EXACT_WARNING, collect, metric_value, prometheus_text, public

    r = client(args)
    if args.serve is not None:
        return serve(r, args)
    models = list(list_models(r))
    if args.name and args.name not in models:  # (all-zero counters of a typo looked like an idle model)
        raise no_stream_model(r, args.name)
    if args.dead_letters is not None:
        return _dead_letters(r, args)
    names = [args.name] if args.name else models
    counters = {n: collect(r, n) for n in names}
    if args.exact:
        print(f"streamdp: warning: --exact: {EXACT_WARNING}", file=sys.stderr)
    else:
        counters = {n: public(s) for n, s in counters.items()}
    if args.prometheus:
        sys.stdout.write(prometheus_text(counters, exact=args.exact))
    else:
        for n, s in counters.items():
            print(n)
            for k, v in s.items():
                # (a noisy estimate to one decimal for people; times and Prometheus at full precision)
                print(f"  {k:22s} {f'{float(v):.1f}' if k.startswith('estimated_') else metric_value(v)}")
    return 0


def _dead_letters(r: Any, args: argparse.Namespace) -> int:
    """``streamdp stats NAME --dead-letters [N]``: the last N dead letters, newest first, one line each."""
    import time

    from streamdp.service.stats import dead_letters

    if not args.name:
        raise ValueError("--dead-letters lists one model's: give its NAME")
    print(
        "streamdp: warning: --dead-letters: which records were refused, and why, are exact facts about individual "
        "records, not differentially private: keep them to the model's operator",
        file=sys.stderr,
    )
    letters = dead_letters(r, args.name, args.dead_letters)
    if not letters:
        print(f"no dead letters for '{args.name}'")
    for d in letters:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(d["ms"] / 1000)) if d["ms"] else "-"
        print(f"{when}  entry {d['entry']}  {d['reason']}")
        for row, why in d["rows"]:
            print(f"    record {row} (0-based) of the entry's batch: {why}")
    return 0


def serve(r: Any, args: argparse.Namespace) -> int:
    """``streamdp stats --serve``: the exporter (:mod:`streamdp.service.exporter`) in the foreground until
    interrupted. Refuses ``--exact`` (a scrape endpoint is read by whoever reaches it)."""
    from streamdp.service.exporter import make_server, parse_address
    from streamdp.service.registry import list_models, no_stream_model

    if args.exact:
        raise ValueError(
            "--exact cannot be served over HTTP (exact counts are not private; a scrape is read by "
            "whoever reaches the port)"
        )
    if args.name and args.name not in list(list_models(r)):
        raise no_stream_model(r, args.name)
    host, port = parse_address(args.serve)
    server = make_server(r, [args.name] if args.name else None, host=host, port=port)
    bound = server.server_address
    print(f"serving public metrics at http://{bound[0]}:{bound[1]}/metrics (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
