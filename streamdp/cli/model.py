"""``streamdp model``: create, list, show, get, delete private models, read their release history, and set what raw
records they retain.

streamdp model create NAME --schema FILE|NAME --epsilon E [--trees T] [--height H] ...
                      [--release {batch,window,grow,tree}] [--release-every SECONDS] [--max-lag SECONDS]
                      [--cadence {adaptive,fixed}] [--half-life H [--half-life-unit {releases,records}]]
streamdp model list | show NAME [--json] | get NAME [--version V] -o FILE | delete NAME
streamdp model history NAME [--last N] [--json] [--plot FILE]
streamdp model retention NAME [--seconds S] [--records N] [--clear]
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from streamdp.cli.common import client, finite_epsilon_arg, int_in, positive_seconds, read_schema, redis_url
from streamdp.cli.history import HELP as HISTORY_HELP
from streamdp.cli.model_show import count_words, epsilon_words, list_, privacy_warnings, show, unit_line
from streamdp.options import BUDGETS, MECHANISMS, RELEASES, VOTES

__all__ = ["add_parser"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``streamdp model`` and its subcommands on an ``argparse`` subparsers object."""
    m = subparsers.add_parser(
        "model", help="create, list, show, get or delete private models; their history and retention"
    )
    msub = m.add_subparsers(dest="model_command", required=True)
    c = msub.add_parser(
        "create",
        help="create a model: draws its random structure and publishes version 0",
        description="Create a model. Its ledger source is its NAME (streamdp ledger NAME): the same "
        "records pushed to two models, or released by a dataset job under another "
        "label, are charged to separate ledgers; keep one source per population.",
    )
    c.add_argument("name")
    c.add_argument(
        "--schema",
        required=True,
        help="schema JSON file (declared domains), or a bundled schema's name: "
        "adult, congressional-voting, mushroom, nursery, tic-tac-toe",
    )
    c.add_argument("--trees", type=int, default=10)
    c.add_argument(
        "--height",
        type=int,
        default=None,
        help="tree height (default: the budgeted draw, each branch as deep as its tree's leaf budget holds (at most "
        "half the attributes, at least 3, where every attribute is categorical); for grow on a schema whose attributes "
        "are all categorical (where grow is the default), the river classifier's default, "
        "streamdp.forest.structure.ceiling_height; both lowered where the trees could exceed what the server accepts)",
    )
    c.add_argument(
        "--epsilon",
        type=finite_epsilon_arg,
        required=True,
        help="the model's privacy budget: a finite number > 0 (the service publishes only private models)",
    )
    c.add_argument("--mechanism", choices=MECHANISMS, default="geometric")
    c.add_argument("--k", type=int, default=None, help="k-anonymity threshold (kanon)")
    c.add_argument("--beta", type=float, default=None, help="sampling rate (kanon)")
    c.add_argument("--budget", choices=BUDGETS, default="split")
    c.add_argument("--vote", choices=VOTES, default="proba")
    c.add_argument(
        "--ledger-budget",
        type=finite_epsilon_arg,
        default=None,
        metavar="E",
        help="total privacy budget (epsilon) of the source NAME; the model's epsilon is one spend "
        "(default: set to the model's epsilon when the source has no budget). The ledger is tied "
        "to the name: pushing the same people to two models spends two budgets",
    )
    c.add_argument(
        "--seed", type=int_in(0, 2**63 - 1), default=None, help="structure seed (public; noise stays secure)"
    )
    c.add_argument(
        "--retention-seconds",
        type=positive_seconds,
        default=None,
        metavar="S",
        help="keep the raw records at most S seconds for batch jobs (streamdp job submit ... --source NAME), as "
        "`streamdp model retention NAME --seconds S` does; default: keep nothing once merged",
    )
    c.add_argument(
        "--release",
        choices=RELEASES,
        default=None,
        help="release policy: window (exact tallies of --release-every seconds noised once), "
        "grow (the same windows on trees that deepen as the released counts allow: --height is "
        "a ceiling), tree (the same windows through continual counting with no horizon: the plain sum while releases are few, polylog noise after) or batch (each "
        "pushed batch noised once, Jagannathan et al.); default: grow when every attribute is categorical, else "
        "window (grow is more accurate on short numeric streams, but its workers need more memory and its "
        "consumers read each version whole: docs/decisions/025-service-handover.md)",
    )
    c.add_argument(
        "--release-every",
        type=float,
        default=None,
        metavar="SECONDS",
        help="public release schedule of window/grow/tree: the shortest window (default 1 s)",
    )
    c.add_argument(
        "--max-lag",
        type=float,
        default=None,
        metavar="SECONDS",
        help="window/grow: how long a record may wait to be published (default 300 s; windows are at most 0.9 of "
        "it). Windows follow the released record rate in between: they grow while releases hold too few records "
        "to stand above their noise and shorten when data flow; releases that carry only noise are left out of "
        "the published counts. --max-lag equal to --release-every keeps the clock's windows (noise-only releases still "
        "left out; --cadence fixed merges every one)",
    )
    c.add_argument(
        "--cadence",
        choices=("adaptive", "fixed"),
        default=None,
        help="window/grow/tree: adaptive (the windows of --max-lag; needs a prior stump and geometric or laplace "
        "noise) or fixed (a window every --release-every seconds, every release merged: each idle window adds a "
        "noise draw to every count, so accuracy falls while no data flow); default: adaptive where the model "
        "can measure its releases, else fixed",
    )
    c.add_argument(
        "--half-life",
        type=float,
        default=None,
        metavar="H",
        help="forgetting for drifting streams (release window; implies it): the published counts halve every H "
        "releases or records (--half-life-unit) as newer releases arrive; post-processing of the released deltas, "
        "no epsilon, and the noise per count stays bounded",
    )
    c.add_argument(
        "--half-life-unit",
        choices=("releases", "records"),
        default=None,
        help="what --half-life counts: merged releases (default) or noisy records",
    )
    c.add_argument(
        "--privacy-id",
        default=None,
        metavar="COLUMN",
        help="the column naming each record's person (producers send it; never an attribute): epsilon then "
        "holds per person over the whole stream (needs --max-records-per-id)",
    )
    c.add_argument(
        "--max-records-per-id",
        type=int,
        default=None,
        metavar="K",
        help="with --privacy-id: at most K records per person are merged, ever (later ones are dropped); "
        "the noise grows with K",
    )
    c.add_argument(
        "--max-ids", type=int, default=None, metavar="N", help="with --privacy-id: persons kept (default 10,000,000)"
    )
    c.set_defaults(func=create)
    lst = msub.add_parser("list", help="list models")
    lst.set_defaults(func=list_)
    s = msub.add_parser("show", help="version, epsilon/delta, batches merged, last update")
    s.add_argument("name")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=show)
    h = msub.add_parser(
        "history",
        help="a windowed model's releases over time: noisy records, noise sd per cell, window length",
        description=HISTORY_HELP,
    )
    h.add_argument("name")
    h.add_argument("--last", type=int_in(0, 2**31), default=50, metavar="N", help="windows shown (0: all)")
    h.add_argument("--json", action="store_true")
    h.add_argument("--plot", default=None, metavar="FILE", help="draw it into a PNG (needs streamdp[plot])")
    h.set_defaults(func=_history)
    g = msub.add_parser("get", help="write a published model blob to a file")
    g.add_argument("name")
    g.add_argument("--version", type=int, default=None)
    g.add_argument("-o", "--output", required=True)
    g.set_defaults(func=get)
    d = msub.add_parser("delete", help="delete a model and all its keys")
    d.add_argument("name")
    d.set_defaults(func=delete)
    rt = msub.add_parser("retention", help="how long / how many raw records a model keeps for jobs")
    rt.add_argument("name")
    rt.add_argument("--seconds", type=positive_seconds, default=None, help="keep records at most this old")
    rt.add_argument(
        "--records", type=int_in(0, 2**62), default=None, help="keep at most this many newest stream entries"
    )
    rt.add_argument("--clear", action="store_true", help="back to the default: keep nothing already merged")
    rt.add_argument("--json", action="store_true")
    rt.set_defaults(func=retention)
    return m


def create(args: argparse.Namespace) -> int:
    from streamdp.service.registry import create_model, show_model

    schema = read_schema(args.schema)
    forest = create_model(
        client(args),
        args.name,
        schema,
        n_trees=args.trees,
        height=args.height,
        epsilon=args.epsilon,
        mechanism=args.mechanism,
        k=args.k,
        beta=args.beta,
        seed=args.seed,
        budget=args.budget,
        vote=args.vote,
        ledger_budget=args.ledger_budget,
        release=args.release,
        release_every=args.release_every,
        max_lag=args.max_lag,
        cadence=args.cadence,
        half_life=args.half_life,
        half_life_unit=args.half_life_unit or "releases",
        privacy_id=args.privacy_id,
        max_records_per_id=args.max_records_per_id,
        max_ids=args.max_ids,
    )
    info = show_model(client(args), args.name)
    delta = f", delta {forest.delta:.3g}" if forest.delta else ""
    print(
        f"created model {args.name!r}: {count_words(forest.n_trees, 'tree')} + {count_words(forest.prior_trees, 'prior stump')}, "
        f"height {forest.height}, {forest.mechanism}, epsilon {epsilon_words(info)}{delta}; "
        f"{forest.structure.max_leaves} leaves per tree, {forest.counts.nbytes / 2**20:.1f} MiB of counts per release"
    )
    print(f"unit of privacy: {unit_line(info.get('unit'))}")
    for line in privacy_warnings(info):  # (loud: a budget this large releases nearly exact counts)
        print(f"streamdp: {line}", file=sys.stderr)
    if (info.get("release") or {}).get("kind") == "batch":
        print(
            "streamdp: note: release batch publishes one release per pushed batch: how many batches and when are "
            "public (a batch of one record shows when that record came); the other policies (window, grow, tree) "
            "release on a schedule of the clock and released values only",
            file=sys.stderr,
        )
    if "merge_bar" in info:  # public: what a window must hold before its release is merged alone
        print(
            f"a release is merged once its noisy record total stands above {info['merge_bar']:,.0f} "
            "(3 sd of its noise); thinner windows wait until their releases add up"
        )
    if args.retention_seconds is not None:  # before any record can be pushed: a job reads them all
        from streamdp.service.retention import set_retention

        set_retention(client(args), args.name, seconds=args.retention_seconds)
        print(f"keeps raw records at most {args.retention_seconds:g} s old for batch jobs")
    return 0


def _history(args: argparse.Namespace) -> int:
    from streamdp.cli.history import history

    return history(args)


def get(args: argparse.Namespace) -> int:
    """``streamdp model get``: write a published model's blob to ``--output``. The latest version of a model
    with nothing released yet is written too (a valid, empty model), with a note on stderr saying so; exit 0."""
    from streamdp.service.consumer import Consumer
    from streamdp.service.registry import published_keys

    r = client(args)
    fmt = r.hget(published_keys(r, args.name).pub_model, "format")
    if fmt is not None and fmt != b"streamdp.forest":  # a batch job's model: one version, any learner
        if args.version not in (None, 1):
            raise SystemExit(f"{args.name!r} is a batch job's model: it has version 1 only")
        from streamdp.service.job_queue import fetch_model

        f = fetch_model(r, args.name)
        data = f.to_bytes()
    else:
        with Consumer(redis_url(args), args.name) as c:
            f = c.latest() if args.version is None else c.get(args.version)
            data = f.to_bytes()
    with open(args.output, "wb") as fh:
        fh.write(data)
    print(f"wrote {f!r} to {args.output} ({len(data):,} bytes)")
    if args.version is None and getattr(f, "n_releases", 1) == 0:  # written all the same: a valid, empty model
        print(
            f"streamdp: note: {args.name!r} is empty (version 0, nothing merged yet): the file cannot predict until "
            f"a worker (streamdp worker {args.name}) merges a release, once its noisy record total clears the merge "
            f"bar (streamdp model show {args.name}: releases made and merged)",
            file=sys.stderr,
        )
    return 0


def delete(args: argparse.Namespace) -> int:
    from streamdp.service.registry import delete_model, show_model

    r = client(args)
    info = show_model(r, args.name)  # (ModelNotFound names a missing model before anything is deleted)
    n = delete_model(r, args.name)
    if info.get("kind") == "job":  # a batch job's model: its spend is on its source's ledger
        source = info.get("source")
        print(
            f"deleted job result {args.name!r} ({count_words(n, 'key')}; the job's spend stays on the ledger of source "
            f"{source!r}: spends are history, see `streamdp ledger {source}`)"
        )
        return 0
    print(
        f"deleted model {args.name!r} ({count_words(n, 'key')}; its privacy ledger sdp:{{{args.name}}}:ledger* is kept: "
        f"spends are history, see `streamdp ledger {args.name}`)"
    )
    return 0


def retention(args: argparse.Namespace) -> int:
    from streamdp.service.registry import load_spec, show_model
    from streamdp.service.retention import get_retention, set_retention

    r = client(args)
    load_spec(r, args.name)  # the model must exist
    if args.clear and (args.seconds is not None or args.records is not None):
        raise ValueError("--clear takes no --seconds/--records")
    if args.clear or args.seconds is not None or args.records is not None:
        cur = get_retention(r, args.name)
        seconds = None if args.clear else (args.seconds if args.seconds is not None else cur.seconds)
        records = None if args.clear else (args.records if args.records is not None else cur.records)
        ret = set_retention(r, args.name, seconds=seconds, records=records)
        if cur.keeps_nothing and not ret.keeps_nothing and show_model(r, args.name)["releases"]:
            # (public: the release count) the records merged before were trimmed: jobs are refused until a
            # new version is published (the versions and this setting are public; the records' number is not)
            print(
                f"note: records merged before now were not kept; jobs over {args.name!r} read only what is "
                "pushed from now on, and are refused until the model publishes a new version",
                file=sys.stderr,
            )
    else:
        ret = get_retention(r, args.name)
    if args.json:
        print(json.dumps(ret.to_dict()))
    elif ret.keeps_nothing:
        print(f"{args.name}: keeps no merged records (only unacked ones)")
    else:
        parts = ([f"at most {ret.seconds:g} s old"] if ret.seconds is not None else []) + (
            [f"at most {ret.records} newest entries"] if ret.records is not None else []
        )
        print(f"{args.name}: keeps raw records " + " and ".join(parts) + " (plus any unacked)")
    return 0
