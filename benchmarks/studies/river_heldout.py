"""The river forest in river's own loop on held-out data: does it stay at or above the majority share?

The held-out sets of ``accuracy_heldout.py`` (scikit-learn's Wine, Breast Cancer and Digits with ranges from their
documentation, and UCI Car when a copy is given), each streamed in ``--orders`` random orders through
``PrivateForestClassifier(schema, epsilon=e)`` at its defaults: progressive validation (each mini-batch of
``--batch`` records predicted, then learned), scored with river's ``metrics.Accuracy``. Beside it river's
``dummy.PriorClassifier`` in the same loop (the most frequent class so far, exact: the floor a streaming model must
hold) and the share of the most frequent class over the whole stream (in hindsight; not private). Nothing was tuned on these
sets.

    python benchmarks/studies/river_heldout.py [--orders 30] [--car car.data] [--variants [RULE ...]]

Writes ``results/river_heldout.{md,json}`` with the machine's load; with ``--variants`` (the rules of
``river_floor_rules.py``, all when none is named), ``results/river_heldout_rules.{md,json}``: every rule on the
same releases of the same orders (decision 029).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import machine, sh, write_keeping_reading  # noqa: E402
from benchmarks.studies.accuracy_heldout import DATASETS, load_encoded  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
EPSILONS = (0.1, 0.5, 1.0, 2.0)


def progressive(schema, X: np.ndarray, y: np.ndarray, eps: float, batch: int, variants=()) -> tuple:
    """Progressive-validation accuracy over the stream ``(X, y)`` of the default river forest, and of river's
    ``dummy.PriorClassifier`` (the most frequent class seen so far, exact: the plain floor) in the same loop;
    with ``variants`` (:mod:`river_floor_rules`), two more items: each variant's accuracy on the same releases,
    and per mini-batch the forest's right predictions minus the ``PriorClassifier``'s."""
    from river import dummy, metrics

    from benchmarks.studies.river_floor_rules import predictions
    from streamdp.river import PrivateForestClassifier

    model, acc = PrivateForestClassifier(schema, epsilon=eps), metrics.Accuracy()
    prior, prior_acc = dummy.PriorClassifier(), metrics.Accuracy()
    accs = {v: metrics.Accuracy() for v in variants}
    gaps = []
    for i in range(0, len(y), batch):
        xs, ys = X[i : i + batch], y[i : i + batch].tolist()
        pred = model.predict_proba_encoded(xs).argmax(axis=1)
        for truth, p in zip(ys, pred.tolist()):
            acc.update(truth, p)
        for v, pv in (predictions(model, xs, variants) if variants else {}).items():
            for truth, p in zip(ys, pv.tolist()):
                accs[v].update(truth, p)
        said = prior.predict_one({})
        gaps.append(int(sum(t == p for t, p in zip(ys, pred.tolist())) - sum(t == said for t in ys)))
        for truth in ys:
            prior_acc.update(truth, said)
        for truth in ys:
            prior.learn_one({}, truth)
        model.learn_encoded(xs, y[i : i + batch])
    if variants:
        return float(acc.get()), float(prior_acc.get()), {v: float(a.get()) for v, a in accs.items()}, gaps
    return float(acc.get()), float(prior_acc.get())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--orders", type=int, default=30)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--car", default=None, help="UCI car.data (skipped when not given)")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument(
        "--variants", nargs="*", default=None, help="river_floor_rules variants, paired (writes river_heldout_rules)"
    )
    args = ap.parse_args()
    if args.variants is not None:
        return variants_main(args)
    warnings.simplefilter("ignore")
    start = sh("uptime")
    rows = []
    for name in (n for n in DATASETS if n != "uci-car" or args.car):
        schema, X, y = load_encoded(name, args.car)
        majority = float(np.bincount(y).max() / len(y))
        for eps in EPSILONS:
            accs, priors = [], []
            for seed in range(args.orders):
                order = np.random.default_rng(seed).permutation(len(y))
                a, b = progressive(schema, X[order], y[order], eps, args.batch)
                accs.append(a)
                priors.append(b)
            rows.append(
                {
                    "dataset": name,
                    "rows": len(y),
                    "epsilon": eps,
                    "mean": float(np.mean(accs)),
                    "lowest": float(np.min(accs)),
                    "below_majority": int(sum(a < majority - 0.01 for a in accs)),
                    "majority": majority,
                    "prior_classifier": float(np.mean(priors)),
                    "below_prior_classifier": int(sum(a < b - 0.01 for a, b in zip(accs, priors))),
                }
            )
            print(rows[-1], flush=True)
    out = {"orders": args.orders, "batch": args.batch, "rows": rows, "uptime": [start, sh("uptime")], **machine()}
    if not args.no_write:
        (RESULTS / "river_heldout.json").write_text(json.dumps(out, indent=1) + "\n")
        (RESULTS / "river_heldout.md").write_text(report(out))


def variants_main(args) -> None:
    """``--variants``: every rule of :mod:`river_floor_rules` on the same releases of each order."""
    from benchmarks.studies.river_floor_rules import VARIANTS

    variants = tuple(args.variants) or VARIANTS
    warnings.simplefilter("ignore")
    start = sh("uptime")
    rows = []
    for name in (n for n in DATASETS if n != "uci-car" or args.car):
        schema, X, y = load_encoded(name, args.car)
        for eps in EPSILONS:
            got = []
            for seed in range(args.orders):
                order = np.random.default_rng(seed).permutation(len(y))
                _, b, accs, gaps = progressive(schema, X[order], y[order], eps, args.batch, variants)
                got.append((b, accs, gaps))
            row = {"dataset": name, "epsilon": eps, "prior_classifier": float(np.mean([g[0] for g in got]))}
            # where the orders below the PriorClassifier - 0.01 lose: their per-batch gaps, summed
            low = [g[2] for g in got if g[1]["base"] < g[0] - 0.01]
            row["below_orders_batch_gaps"] = np.sum(low, axis=0).astype(int).tolist() if low else []
            for v in variants:
                a = np.array([g[1][v] for g in got])
                d = a - np.array([g[1]["base"] for g in got]) if "base" in variants else a * 0
                row[v] = {
                    "mean": float(a.mean()),
                    "below": int(sum(x < g[0] - 0.01 for x, g in zip(a, got))),
                    "d": float(d.mean()),
                    "se": float(d.std(ddof=1) / np.sqrt(len(d))),
                }
            rows.append(row)
            print(
                name,
                eps,
                {v: (round(r["mean"], 3), r["below"]) for v, r in row.items() if isinstance(r, dict)},
                flush=True,
            )
    out = {
        "orders": args.orders,
        "batch": args.batch,
        "variants": list(variants),
        "rows": rows,
        "uptime": [start, sh("uptime")],
        **machine(),
    }
    if not args.no_write:
        (RESULTS / "river_heldout_rules.json").write_text(json.dumps(out, indent=1) + "\n")
        write_keeping_reading(RESULTS / "river_heldout_rules.md", report_rules(out).splitlines())


def report_rules(o: dict) -> str:
    """``--variants``' markdown: per cell each rule's mean accuracy and orders below the PriorClassifier - 0.01."""
    vs = o["variants"]
    lines = [
        "# Post-processing rules for the river forest's floor, in river's loop on held-out data",
        "",
        f"`python benchmarks/studies/river_heldout.py --orders {o['orders']} --variants {' '.join(vs)}`: "
        f"progressive validation (mini-batches of {o['batch']}) as in `river_heldout.md`; every rule of "
        "`benchmarks/studies/river_floor_rules.py` reads the same releases of the same orders. Cells: mean accuracy "
        f"(orders of {o['orders']} more than 0.01 below river's `PriorClassifier` in the same loop). "
        f"Load: `{o['uptime'][0]}` -> `{o['uptime'][1]}`.",
        "",
        f"| dataset | epsilon | `PriorClassifier` | {' | '.join(vs)} |",
        "|---|---|---|" + "---|" * len(vs),
    ]
    for r in o["rows"]:
        cells = " | ".join(f"{r[v]['mean']:.3f} ({r[v]['below']})" for v in vs)
        lines.append(f"| {r['dataset']} | {r['epsilon']:g} | {r['prior_classifier']:.3f} | {cells} |")
    lines += [
        "",
        "Where the orders below the `PriorClassifier` - 0.01 lose (the forest's right predictions minus the "
        "`PriorClassifier`'s, per mini-batch, summed over those orders):",
        "",
    ]
    lines += [
        f"- {r['dataset']} at {r['epsilon']:g}: {r['below_orders_batch_gaps']}"
        for r in o["rows"]
        if r["below_orders_batch_gaps"]
    ]
    return "\n".join(lines) + "\n"


def report(o: dict) -> str:
    lines = [
        "# The river forest in river's loop on held-out data",
        "",
        f"`python benchmarks/studies/river_heldout.py --orders {o['orders']}`: progressive validation (mini-batches of "
        f"{o['batch']} records predicted, then learned) of `PrivateForestClassifier(schema, epsilon=e)` at its "
        f"defaults, {o['orders']} random orders of each set. Load: `{o['uptime'][0]}` -> `{o['uptime'][1]}`.",
        "",
        "| dataset | rows | epsilon | mean accuracy | lowest order | river `PriorClassifier` | orders below it - 0.01 "
        "| majority share (hindsight) | orders below it - 0.01 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in o["rows"]:
        lines.append(
            f"| {r['dataset']} | {r['rows']} | {r['epsilon']:g} | {r['mean']:.3f} | {r['lowest']:.3f} | "
            f"{r['prior_classifier']:.3f} | {r['below_prior_classifier']} of {o['orders']} | {r['majority']:.3f} | "
            f"{r['below_majority']} of {o['orders']} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
