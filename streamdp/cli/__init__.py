"""The ``streamdp`` command line: one module per command group, wired here.

=============  ==============================================================
module         commands
=============  ==============================================================
``common``     shared: Redis URL (redacted in messages), client, progress
               bar, errors to exit codes
``model``      ``model create | list | show | history | get | delete |
               retention``
``model_show`` what ``model list`` and ``model show`` print
``push``       ``push NAME FILE`` (CSV to a model's stream)
``worker``     ``worker NAME`` (stream worker processes)
``stats``      ``stats [NAME]`` (counters, Prometheus text)
``demo``       ``demo`` (the service end to end)
``evaluate``   ``evaluate`` (argument parsing; the computation is
               :mod:`streamdp.evaluate`)
``ledger``     ``ledger NAME | --list`` (privacy budgets)
``job``        ``job submit | status | list | result | algorithms | worker``
=============  ==============================================================

Each module has ``add_parser(subparsers)`` and its handlers; the handlers
import what they need when they run, so ``streamdp --help`` loads neither
Redis nor river.

>>> build_parser().parse_args(["model", "delete", "votes"]).func.__module__
'streamdp.cli.model'
"""

from __future__ import annotations

import argparse

from streamdp.cli import demo, evaluate, job, ledger, model, push, stats, worker
from streamdp.cli.common import run

__all__ = ["main", "build_parser"]

DESCRIPTION = """\
``streamdp demo`` runs the whole service on the bundled Congressional Voting
data (starting an embedded Redis if none is reachable). ``REDIS_URL`` (default
``redis://localhost:6379/0``) selects the server; credentials and TLS go in
the URL (``rediss://user:password@host:port/0``).
"""


def build_parser() -> argparse.ArgumentParser:
    """The parser of every ``streamdp`` command (each subcommand sets ``func``, its handler)."""
    p = argparse.ArgumentParser(
        prog="streamdp",
        description="The streamdp command line.\n\n" + DESCRIPTION.replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    url_help = "Redis URL (default: $REDIS_URL or redis://localhost:6379/0)"
    p.add_argument("--redis-url", default=None, help=url_help)
    sub = p.add_subparsers(dest="command", required=True)
    for group in (model, push, worker, stats, demo, evaluate, ledger, job):
        group.add_parser(sub)
    # ... and after the command too (`streamdp worker votes --redis-url URL`; workers/*.py prepend their
    # command, so they can take it only there)
    for command in _below(p):
        command.add_argument("--redis-url", default=argparse.SUPPRESS, help=url_help)
    return p


def _below(p: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every command's parser below ``p``, groups (``model``, ``job``) and their commands alike."""
    subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    children = [c for a in subs for c in dict.fromkeys(a.choices.values())]
    return [q for c in children for q in (c, *_below(c))]


def main(argv: list[str] | None = None) -> int:
    """Run ``streamdp ARGV``; returns the exit code (see :mod:`streamdp.cli.common`)."""
    return run(build_parser().parse_args(argv))
