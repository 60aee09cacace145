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
import math
import sys
import time
from typing import Any

from streamdp.cli.common import client, finite_epsilon_arg, int_in, positive_seconds, read_schema, redis_url
from streamdp.cli.history import HELP as HISTORY_HELP
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
        f"created model {args.name!r}: {_n(forest.n_trees, 'tree')} + {_n(forest.prior_trees, 'prior stump')}, "
        f"height {forest.height}, {forest.mechanism}, epsilon {epsilon_words(info)}{delta}; "
        f"{forest.structure.max_leaves} leaves per tree, {forest.counts.nbytes / 2**20:.1f} MiB of counts per release"
    )
    print(f"unit of privacy: {_unit_line(info.get('unit'))}")
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


def list_(args: argparse.Namespace) -> int:
    from streamdp.service.registry import list_job_results, list_models

    r = client(args)
    models, jobs = list_models(r), list_job_results(r)
    if not models and not jobs:
        print("no models")
    for name, s in models.items():
        print(
            f"{name}\ttrees={s.get('n_trees')} height={s.get('height')} mechanism={s.get('mechanism')} "
            f"epsilon={epsilon_words(s)} delta={s.get('delta', 0):.3g}"
        )
    for name, s in jobs.items():
        print(
            f"{name}\tjob={s.get('job')} algorithm={s.get('algorithm')} source={s.get('source')} "
            f"epsilon={s.get('epsilon')} delta={s.get('delta', 0):.3g}"
        )
    return 0


def show(args: argparse.Namespace) -> int:
    from streamdp.service.registry import show_model

    info = show_model(client(args), args.name)
    if args.json:
        print(json.dumps(info, indent=1))
        return 0
    from streamdp.release.continual import ReleasePolicy

    policy = ReleasePolicy.from_dict(info["release"])
    last = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(info["last_update"])) if info["last_update"] else "-"
    if not info["releases"] and info.get("kind") != "job":  # version 0 is published at creation: no release yet
        last = f"none yet (created {last})"
    if info.get("kind") == "job":
        print(
            f"batch job model {info['name']}\n"
            f"  job             {info.get('job')} ({info.get('algorithm')}, format {info.get('format')})\n"
            f"  source          {info.get('source')} ({info.get('source_kind')})\n"
            f"  epsilon, delta  {info.get('epsilon')}, {info.get('delta', 0):.3g}\n"
            f"  published       {last}"
        )
        return 0
    # a growing model's drawn height is its ceiling: its published trees (model get) are as deep as the data allow
    height = f"height {info['height']}" + (
        " (a ceiling: the published trees grow toward it)" if (info.get("release") or {}).get("kind") == "grow" else ""
    )
    print(
        f"model {info['name']}\n"
        f"  version         {info['version']}\n"
        f"  epsilon, delta  {epsilon_words(info)}, {info['delta']:.3g} ({info['mechanism']}, budget {info['budget']})\n"
        f"  forest          {_n(info['n_trees'], 'tree')} + {_n(info.get('prior_trees', 0), 'prior stump')}, {height}, {info['max_leaves']} leaves max, "
        f"{info['n_classes']} classes\n"
        f"  release         {policy}\n"
        f"  merged          {_n(info['releases'], 'release')} in the published counts\n"
        f"  last update     {last}"
    )
    for line in _cadence_lines(info):
        print(line)
    print(f"  unit            {_unit_line(info.get('unit'))}")
    sd = info.get("class_total_sd")
    if sd:  # the prior's noise: what a user reads when a model scores the majority share or below
        print(
            f"  noise now       sd {sd:,.0f} on the published estimate of each class's record count (the noise of "
            f"every merged release, summed): the model can tell its majority class once that class leads the next "
            f"by well over {3 * math.sqrt(2) * sd:,.0f} records"
        )
    return 0


def _cadence_lines(info: dict) -> list[str]:
    """``model show``'s lines on the window cadence (public: the clock, the model's parameters, released values)."""
    from streamdp.release.cadence import Cadence

    sched, cadence = info.get("schedule"), info.get("cadence")
    every = info["release"].get("release_every", 0)
    lines = _decay_lines(info)
    if (not sched or not cadence) and info["release"].get("kind") in ("window", "grow", "tree"):
        return [
            f"  cadence         fixed: a window every {every:g} s, every release merged (each idle window adds a "
            "noise draw to every count)",
            *lines,
        ]
    if not sched or not cadence:
        return lines
    longest = Cadence.from_dict(cadence).longest(every)
    last = sched.get("last")
    per_release = f"{last:,.0f} noisy records in the last one" if last is not None else "none released yet"
    return [
        f"  window now      {sched['length']:g} s (from {every:g} s to {longest:g} s by the released record rate; "
        f"{sched['released']} released, "
        f"{sched['merged']} merged into the counts)",
        f"  per release     {per_release}; {sched['total']:,.0f} noisy records merged in all",
        _noise_per_cell(info),
        f"  lag bound       {cadence['max_lag']:g} s: a release comes at most that long after a record's push, "
        "while the workers keep up",
        *(
            [
                f"  merge bar       a release is merged once its noisy record total stands above "
                f"{info['merge_bar']:,.0f} (3 sd of its noise); a thinner one is left out until the last of them "
                "add up"
            ]
            if "merge_bar" in info
            else []
        ),
        *lines,
    ]


def _noise_per_cell(info: dict) -> str:
    """``model show``'s noise-per-cell line: one release's noise sd on each count, and the first release's where
    its scale differs (``grow``: its probe spends part of the trees' budget; ``first_cell_sd``, public)."""
    line = (
        f"  noise per cell  sd {info.get('cell_sd', 0):,.1f} added to each published count (cell) by each merged "
        "release, one draw each"
    )
    if "first_cell_sd" in info:
        line += (
            f" (the first release: up to sd {info['first_cell_sd']:,.1f} on the random trees' counts, what their "
            "budget leaves after the probe that shapes them)"
        )
    return line


def _decay_lines(info: dict) -> list[str]:
    """``model show``'s line on forgetting (a half-life): the published noise now and its bound (public)."""
    from streamdp.release.continual import ReleasePolicy, variance_bound

    policy = ReleasePolicy.from_dict(info["release"])
    if policy.half_life is None or "cell_sd" not in info:
        return []
    bound = math.sqrt(variance_bound(policy, info["cell_sd"] ** 2))
    return [
        f"  forgetting      half-life {policy.half_life:g} {policy.half_life_unit}: noise sd per cell "
        f"{math.sqrt(info.get('noise_variance', 0.0)):,.1f} now, never above {bound:,.1f}"
    ]


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
            f"streamdp: note: {args.name!r} is empty (version 0, nothing released yet): the file cannot predict "
            f"until a worker merges pushed records (streamdp worker {args.name})",
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
            f"deleted job result {args.name!r} ({_n(n, 'key')}; the job's spend stays on the ledger of source "
            f"{source!r}: spends are history, see `streamdp ledger {source}`)"
        )
        return 0
    print(
        f"deleted model {args.name!r} ({_n(n, 'key')}; its privacy ledger sdp:{{{args.name}}}:ledger* is kept: "
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


def _n(k: int, noun: str) -> str:
    """``k noun`` in the singular or plural ("1 prior stump", "2 prior stumps").

    >>> _n(1, "key"), _n(3, "key")
    ('1 key', '3 keys')
    """
    return f"{k} {noun}" + ("" if k == 1 else "s")


def epsilon_words(info: dict) -> str:
    """A model's epsilon as stated in its summary, with its unit: ``"1 per person (0.1 per record, K=10)"`` under a
    privacy id (the ledger is charged per person, the noise drawn per record), else the number alone.

    >>> epsilon_words({"epsilon": 1.0, "epsilon_per_record": 0.1, "unit": {"max_records_per_id": 10}})
    '1 per person (0.1 per record, K=10)'
    >>> epsilon_words({"epsilon": 0.5})
    '0.5'
    """
    eps = info.get("epsilon")
    unit = info.get("unit")
    if not unit or eps is None:
        return str(eps)
    per_record = info.get("epsilon_per_record", float(eps) / unit["max_records_per_id"])
    return f"{float(eps):g} per person ({float(per_record):g} per record, K={unit['max_records_per_id']})"


def _unit_line(unit: dict | None) -> str:
    """The unit of privacy in one line (a record, or a person with its bound)."""
    from streamdp.service.units import RECORD_UNIT, Unit

    return RECORD_UNIT if not unit else Unit(**unit).describe()
