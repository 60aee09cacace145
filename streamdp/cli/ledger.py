"""``streamdp ledger``: a source's privacy budget, what is spent, what is left, and every spend.

    streamdp ledger NAME                       budget, spent, remaining and the spends
    streamdp ledger NAME --json
    streamdp ledger NAME --set-budget E [--delta D]
    streamdp ledger NAME --unit person --privacy-id COLUMN   fix the unit before the first spend
    streamdp ledger --source-file FILE [...]   the ledger bound to a file's content
    streamdp ledger --list                     sources that have a ledger

A ledger has one unit of privacy, fixed by its first spend: a record, or a person (an id column;
each spend shows its K). Its epsilon figures are per that unit; a spend in another unit is refused.

A source is a label (a model's name, or the --source of a dataset job): the
same records under two labels are charged to two ledgers, and nothing here can
tell. Bind a dataset file to one ledger by its content with --source-file
(``file-`` + SHA-256 of its bytes, the same under any path or name).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from streamdp.cli.common import client, finite_epsilon_arg

__all__ = ["add_parser", "ledger"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``streamdp ledger`` on an ``argparse`` subparsers object."""
    p = subparsers.add_parser(
        "ledger",
        help="privacy budget of a source: budget, spent, remaining, spends",
        description=__doc__.split("\n\n")[0].replace("``", ""),
    )
    p.add_argument(
        "name",
        nargs="?",
        help="source label (a model's name is its source); the same data under two labels has two ledgers",
    )
    p.add_argument(
        "--source-file",
        default=None,
        metavar="FILE",
        help="the ledger bound to this file's content (file- and the first 128 bits of its SHA-256), "
        "as job submit --source-file",
    )
    p.add_argument("--list", action="store_true", help="list the sources that have a ledger")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--set-budget",
        type=finite_epsilon_arg,
        default=None,
        metavar="E",
        help="set or raise the total epsilon (cannot go below what is spent)",
    )
    p.add_argument(
        "--delta",
        type=float,
        default=None,
        metavar="D",
        help="total delta with --set-budget (default: keep the current one, else 0)",
    )
    p.add_argument(
        "--unit",
        choices=("record", "person"),
        default=None,
        help="fix the ledger's unit of privacy before its first spend (person: with --privacy-id); "
        "jobs in another unit are then refused at submit",
    )
    p.add_argument("--privacy-id", default=None, metavar="COLUMN", help="with --unit person: the id column")
    p.add_argument(
        "--earlier-spends-per-person",
        action="store_true",
        help="with --unit person on a ledger charged before units were recorded (it counts per record): state "
        "that every earlier spend was per person by that column (a model created with that privacy id, its jobs)",
    )
    p.set_defaults(func=ledger)
    return p


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _unit_cell(s: Any) -> str:
    """``record`` or ``person:COLUMN K=3`` (a spend's unit, for the table)."""
    return s.unit if s.privacy_id is None else f"{s.unit} K={s.max_records_per_id}"


def ledger(args: argparse.Namespace) -> int:
    from streamdp.service.ledger_store import RedisLedger

    if args.source_file:
        from streamdp.privacy.ledger import file_source

        if args.name:
            raise ValueError("give a source NAME or --source-file (not both)")
        args.name = file_source(args.source_file)
    if args.list == bool(args.name):
        raise ValueError("give a source NAME or --list (not both)")
    if args.delta is not None and args.set_budget is None:
        raise ValueError("--delta goes with --set-budget")
    led = RedisLedger(client(args))
    if args.list:
        sources = led.sources()
        if args.json:
            print(json.dumps(sources))
        else:
            print("\n".join(sources) if sources else "no ledgers")
        return 0
    name = args.name
    if (args.unit == "person") != (args.privacy_id is not None) or (args.earlier_spends_per_person and not args.unit):
        raise ValueError("--unit person goes with --privacy-id COLUMN; --earlier-spends-per-person with --unit person")
    if args.set_budget is not None:
        current = led.budget(name)
        delta = args.delta if args.delta is not None else (current[1] if current else 0.0)
        led.set_budget(name, args.set_budget, delta)
    if args.unit is not None:
        led.declare_unit(name, args.privacy_id, earlier_spends_per_person=args.earlier_spends_per_person)
    budget = led.budget(name)
    if budget is None:
        raise ValueError(f"source {name!r} has no budget (streamdp ledger {name} --set-budget E)")
    from streamdp.privacy.ledger import RECORD, describe_unit, left_of

    spent = led.spent(name)
    spends = led.spends(name)
    unit = led.unit(name)
    kind, _, column = (unit or "").partition(":")
    if args.json:
        print(
            json.dumps(
                {
                    "source": name,
                    "unit": kind or None,  # record, person, or null before the first spend
                    "privacy_id": column or None,
                    "budget_epsilon": budget[0],
                    "budget_delta": budget[1],
                    "spent_epsilon": spent[0],
                    "spent_delta": spent[1],
                    "remaining_epsilon": left_of(budget[0], spent[0]),
                    "spends": [s.to_dict() for s in spends],
                },
                indent=1,
            )
        )
        return 0
    if unit is None:
        words, per = "not fixed yet (the first spend fixes it: per record, or per person with a privacy id)", ""
    elif unit == RECORD:
        words = "per record (epsilon is what one record loses; a person with several records loses more)"
        per = " per record"
    else:
        words = f"{describe_unit(unit)}: epsilon is what one person loses, whatever the K of each spend"
        per = " per person"
    print(
        f"source {name}\n"
        f"  unit       {words}\n"
        f"  budget     epsilon {budget[0]:g}, delta {budget[1]:.3g}\n"
        f"  spent      epsilon {spent[0]:g}, delta {spent[1]:.3g}\n"
        f"  remaining  epsilon {left_of(budget[0], spent[0]):g}{per}\n"
        f"  spends     {len(spends)}"
    )
    if spends:
        rows = [
            (_when(s.when), s.who, s.what, f"{s.epsilon:g}", f"{s.delta:.3g}", _unit_cell(s), s.key) for s in spends
        ]
        head = ("when", "who", "what", "epsilon", "delta", "unit", "key")
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
        for r in (head, *rows):
            print("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return 0
