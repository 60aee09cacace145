"""Stream thresholds (streamdp.forest.first_release): the trees' first release draws the numeric thresholds.

Two parts, one results file:

* ``progressive``: river's ``progressive_val_score`` of ``PrivateForestClassifier(schema, epsilon=e)`` on
  river's bundled numeric streams (Bananas, 5,300 records x 2; ImageSegments, 2,310 x 18; their declared
  schemas, ``streamdp.river.schemas``) in three arms interleaved in one run (``--repeats`` each, fresh noise):
  ``threshold_share=0`` (the thresholds as drawn: the classifier before this change), the default (the share
  where the first release's scheduled records can fill the histograms, ``stream_share``) and 0.2 always;
  at the default ``first_batch=100`` and at 1000 (a first release of the trees ten times larger).
* ``small``: per-dataset tables of pairs of ``accuracy_small_data.py`` runs (before: the parent commit;
  after: this change), from their JSON files (``--small-before``, ``--small-after``, in pairs).

    python benchmarks/studies/stream_thresholds.py --repeats 30 \\
        --small-before before_2x5.json before_5x10.json --small-after after_2x5.json after_5x10.json

Writes ``results/stream_thresholds.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

EPSILONS = (0.5, 1.0, 2.0)
STREAMS = ("Bananas", "ImageSegments")
FIRST_BATCHES = (100, 1000)  # the classifier's default, and a first release ten times larger
METHODS = ("fit", "update", "grow", "river")
#: The classifier's threshold_share: none (the classifier before this change), the default (spent where the first
#: release's scheduled records can fill the histograms), and the fit's default share always.
ARMS = {"share 0": 0.0, "default": None, "share 0.2 always": 0.2}


def progressive(repeats: int) -> list[dict]:
    from river import datasets, evaluate, metrics

    from streamdp.river import PrivateForestClassifier
    from streamdp.river.schemas import schema_for

    rows = []
    for name in STREAMS:
        ds = getattr(datasets, name)()
        schema = schema_for(ds)
        for eps in EPSILONS:
            for first in FIRST_BATCHES:
                for rep in range(repeats):
                    for arm, share in ARMS.items():  # interleaved: the same load for each
                        model = PrivateForestClassifier(schema, epsilon=eps, threshold_share=share, first_batch=first)
                        t = time.perf_counter()
                        acc = evaluate.progressive_val_score(ds, model, metrics.Accuracy()).get()
                        rows.append(
                            {
                                "part": "progressive",
                                "stream": name,
                                "epsilon": eps,
                                "first_batch": first,
                                "repeat": rep,
                                "arm": arm,
                                "share": model.forest.threshold_share,
                                "acc": float(acc),
                                "seconds": time.perf_counter() - t,
                            }
                        )
            print(f"{name} eps {eps}: done", flush=True)
    return rows


def _small_means(path: str) -> tuple[dict, dict]:
    doc = json.loads(Path(path).read_text())
    acc: dict = {}
    for r in doc["rows"]:
        if r.get("dpl"):
            continue
        for m in METHODS:
            acc.setdefault((r["dataset"], r["epsilon"], m), []).append(r["acc"][m])
    return {k: float(np.mean(v)) for k, v in acc.items()}, doc["info"]


def report(info: dict, rows: list[dict], smalls: list[dict]) -> list[str]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from common import study_header

    lines = study_header("Stream thresholds: drawn from the trees' first release", "stream_thresholds.py", info)
    lines += [
        "## River progressive validation",
        "",
        f"`progressive_val_score` accuracy, mean (sd) over {info['repeats']} runs each, the arms interleaved. "
        "`first_batch`: records of the trees' first release (after the 100-record prior phase); `spent`: the "
        "default's share there.",
        "",
        "| stream | epsilon | first_batch | "
        + " | ".join(ARMS)
        + " | spent | default - 0 | 0.2 always - 0 | s per run |",
        "|---|---|---|" + "---|" * (len(ARMS) + 4),
    ]
    prog = [r for r in rows if r["part"] == "progressive"]
    for name in STREAMS:
        for eps in EPSILONS:
            for first in FIRST_BATCHES:
                sel = [r for r in prog if (r["stream"], r["epsilon"], r["first_batch"]) == (name, eps, first)]
                acc = {arm: np.array([r["acc"] for r in sel if r["arm"] == arm]) for arm in ARMS}
                spent = next(r["share"] for r in sel if r["arm"] == "default")
                secs = np.mean([r["seconds"] for r in sel])
                cells = " | ".join(f"{a.mean():.3f} ({a.std():.3f})" for a in acc.values())
                base = acc["share 0"].mean()
                lines.append(
                    f"| {name} | {eps:g} | {first} | {cells} | {spent:g} | {acc['default'].mean() - base:+.3f} "
                    f"| {acc['share 0.2 always'].mean() - base:+.3f} | {secs:.1f} |"
                )
    lines.append("")
    for small in smalls:
        b, a = small["before"], small["after"]
        lines += [
            f"## Small data, before and after ({small['repeats']} x {small['folds']}-fold CV)",
            "",
            f"`accuracy_small_data.py --repeats {small['repeats']} --folds {small['folds']}` on the parent commit "
            "(before) and this change (after), the same splits, fresh noise; mean test accuracy, after minus "
            "before in brackets. `fit` is the same code in both runs: its differences are the runs' noise.",
            "",
            f"before: load at start {small['load_before'][0]}; at end {small['load_before'][1]}",
            f"after: load at start {small['load_after'][0]}; at end {small['load_after'][1]}",
            "",
            "| dataset | epsilon | " + " | ".join(METHODS) + " |",
            "|---|---|" + "---|" * len(METHODS),
        ]
        keys = sorted({(d, e) for d, e, _ in a}, key=lambda k: (small["order"].index(k[0]), k[1]))
        for d, e in keys:
            cells = [f"{b[(d, e, m)]:.3f} -> {a[(d, e, m)]:.3f} ({a[(d, e, m)] - b[(d, e, m)]:+.3f})" for m in METHODS]
            lines.append(f"| {d} | {e:g} | " + " | ".join(cells) + " |")
        lines += [
            "",
            "| over every dataset and epsilon | " + " | ".join(METHODS) + " |",
            "|---|" + "---|" * len(METHODS),
        ]
        mean = [np.mean([a[k] - b[k] for k in a if k[2] == m]) for m in METHODS]
        lines.append("| mean after minus before | " + " | ".join(f"{v:+.3f}" for v in mean) + " |")
        lines.append("")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--small-before", nargs="*", default=[], help="accuracy_small_data JSON files, parent commit")
    ap.add_argument("--small-after", nargs="*", default=[], help="the same runs on this change, in the same order")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from common import run_info, sh, write_results

    warnings.simplefilter("ignore")
    info = run_info(repeats=args.repeats, epsilons=list(EPSILONS), first_batches=list(FIRST_BATCHES))
    rows = progressive(args.repeats)
    smalls = []
    for before, after in zip(args.small_before, args.small_after, strict=True):
        b, ib = _small_means(before)
        a, ia = _small_means(after)
        small = {
            "before": b,
            "after": a,
            "repeats": ia["repeats"],
            "folds": ia["folds"],
            "order": list(ia["data"]),
            "load_before": [ib["uptime_start"], ib["uptime_end"]],
            "load_after": [ia["uptime_start"], ia["uptime_end"]],
        }
        smalls.append(small)
        cv = f"{ia['repeats']}x{ia['folds']}"
        for when, means in (("before", b), ("after", a)):
            rows += [
                {"part": "small", "cv": cv, "when": when, "dataset": d, "epsilon": e, "method": m, "acc": v}
                for (d, e, m), v in means.items()
            ]
        info.setdefault("small", {})[cv] = {"before": ib, "after": ia}
    info["uptime_end"] = sh("uptime")
    write_results("stream_thresholds", info, rows, report(info, rows, smalls))


if __name__ == "__main__":
    main()
