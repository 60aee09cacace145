"""What ``streamdp model create``, ``list`` and ``show`` print about a model: its public summary in words.

Everything here reads :func:`~streamdp.service.registry.show_model`'s or ``list_models``' public fields (the
model's parameters, the clock, released values); nothing reads data.
"""

from __future__ import annotations

import argparse
import json
import math
import time

from streamdp.cli.common import client
from streamdp.release.variance import nearly_exact_words

__all__ = [
    "list_",
    "show",
    "cadence_lines",
    "count_words",
    "epsilon_words",
    "unit_line",
    "not_private",
    "privacy_warnings",
]


def list_(args: argparse.Namespace) -> int:
    from streamdp.service.registry import list_job_results, list_models

    r = client(args)
    models, jobs = list_models(r), list_job_results(r)
    if not models and not jobs:
        print("no models")
    for name, s in models.items():
        print(
            f"{name}\ttrees={s.get('n_trees')} height={s.get('height')} mechanism={s.get('mechanism')} "
            f"epsilon={epsilon_words(s)} delta={s.get('delta', 0):.3g}" + ("\tNOT private" if not_private(s) else "")
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
        f"  forest          {count_words(info['n_trees'], 'tree')} + {count_words(info.get('prior_trees', 0), 'prior stump')}, {height}, {info['max_leaves']} leaves max, "
        f"{info['n_classes']} classes\n"
        f"  release         {policy}\n"
        f"  merged          {count_words(info['releases'], 'release')} in the published counts\n"
        f"  last update     {last}"
    )
    for line in cadence_lines(info):
        print(line)
    print(f"  unit            {unit_line(info.get('unit'))}")
    for line in privacy_warnings(info):
        print(f"  {line}")
    sd = info.get("class_total_sd")
    if sd:  # the prior's noise: what a user reads when a model scores the majority share or below
        print(
            f"  noise now       sd {sd:,.0f} on the published estimate of each class's record count (the noise of "
            f"every merged release, summed): the model can tell its majority class once that class leads the next "
            f"by well over {3 * math.sqrt(2) * sd:,.0f} records"
        )
    return 0


def cadence_lines(info: dict) -> list[str]:
    """``model show``'s lines on the window cadence (public: the clock, the model's parameters, released values)."""
    from streamdp.release.cadence import Cadence

    sched, cadence = info.get("schedule"), info.get("cadence")
    every = info["release"].get("release_every", 0)
    lines = decay_lines(info)
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
        noise_per_cell(info),
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


def noise_per_cell(info: dict) -> str:
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


def decay_lines(info: dict) -> list[str]:
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


def count_words(k: int, noun: str) -> str:
    """``k noun`` in the singular or plural ("1 prior stump", "2 prior stumps").

    >>> count_words(1, "key"), count_words(3, "key")
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


def unit_line(unit: dict | None) -> str:
    """The unit of privacy in one line (a record, or a person with its bound)."""
    from streamdp.service.units import RECORD_UNIT, Unit

    return RECORD_UNIT if not unit else Unit(**unit).describe()


def not_private(info: dict) -> bool:
    """Whether a model's summary says its counts are released without noise: ``"private": false`` or an infinite
    epsilon (a model created so before the service refused it is still served).

    >>> not_private({"private": False}), not_private({"epsilon": "inf"}), not_private({"epsilon": 1.0})
    (True, True, False)
    """
    eps = info.get("epsilon")
    return info.get("private") is False or (eps is not None and math.isinf(float(eps)))


def privacy_warnings(info: dict) -> list[str]:
    """The warnings ``model create`` (on stderr) and ``model show`` print about a model's privacy, from its public
    summary (:func:`~streamdp.service.registry.show_model`): NOT private (exact counts), or a finite epsilon so
    large that one release's noise on a count is below half a record (``nearly_exact_above``, public parameters
    only). Why: a declared budget is the owner's choice, but nearly exact counts must not pass unnoticed.

    >>> print(*privacy_warnings({"epsilon": 50.0, "cell_sd": 0.0003, "nearly_exact_above": 6.87}))
    ... # doctest: +ELLIPSIS
    WARNING: epsilon 50.0 releases nearly exact counts: ... sd 0.0003, ... an epsilon of 6.87 or less ...
    """
    if not_private(info):
        return [
            "WARNING: NOT private: this model's counts are released exact, without noise (epsilon inf); delete it "
            "and create it with a finite epsilon"
        ]
    if "nearly_exact_above" not in info:
        return []
    words = nearly_exact_words(f"epsilon {epsilon_words(info)}", info["cell_sd"], info["nearly_exact_above"])
    return [f"WARNING: {words}"]
