"""Prior stumps (issue 13, section 1): the floor at the majority share, and the cost at the best height.

    python benchmarks/studies/prior_stumps.py [--reps 2] [--cost-reps 4]
    # appends the section "Prior stumps" to results/accuracy_height.md, writes results/prior_stumps.json

Floor: for the synthetic ``skewed`` data, Congressional Votes, Tic-Tac-Toe and
Nursery (3 classes, as in accuracy_height.py), every height from 1 to the
number of attributes (trees of more than 20,000 possible leaves left out, as
in tests/estimation/test_estimation.py), epsilon 0.5, 1 and 2, both budgets and both votes,
10 random trees with ``prior_trees`` 0 and 1: the number of settings whose
hold-out accuracy (mean over ``--reps`` fits, new structure and noise each) is
below the test set's majority share - 0.01, and the worst margin.
Cost: 10 random trees, split budget, probability vote, at the best height of
accuracy_height.md (Nursery 4, Mushroom 5, Votes 4), ``prior_trees`` 0, 1, 2.
One hold-out split (2/3 train, 1/3 test) throughout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import sh  # noqa: E402
from benchmarks.studies.accuracy_height import EPS, N_TREES, OUT, data, split  # noqa: E402  (also silences NotPrivateWarning)
from streamdp.forest.model import PrivateForest  # noqa: E402
from streamdp.forest.structure import max_possible_leaves  # noqa: E402

FLOOR_DATA = ("skewed", "congressional-voting", "tic-tac-toe", "nursery")
DEFAULT_HEIGHT_NOTE = (
    "`default_height` stays `n_attributes // 2` (not changed here): on Nursery, the dataset the default "
    "was judged on, m // 2 = 4 is the best height at every epsilon (tables above); the stumps change the "
    "prior, not which height is best, and taller trees now stay near or above the majority share but do "
    "not gain (Nursery h8 eps 1: 0.57 with prior_trees=1, 4 fits). Mushroom's m // 2 = 10 and Votes' 8 "
    "are outside or far from their measured best (h5, h1), which this change does not address."
)
COST = (("nursery", 4), ("mushroom", 5), ("congressional-voting", 4))


def accuracy(schema, X, y, tr, te, h, eps, budget, votes, prior_trees, seed) -> dict[str, float]:
    f = PrivateForest.create(schema, N_TREES, h, eps, seed=seed, budget=budget, prior_trees=prior_trees)
    f.merge(f.noisy_delta_encoded(X[tr], y[tr]))
    leaves = f.structure.apply(X[te], schema.is_categorical)
    out = {}
    for vote in votes:
        f.vote = vote  # the per-vote table cache follows the vote
        out[vote] = float((f.proba_from_leaves(leaves).argmax(axis=1) == y[te]).mean())
    return out


def floor_rows(reps: int) -> list[dict]:
    rows = []
    for name in FLOOR_DATA:
        schema, X, y = data(name)
        tr, te = split(len(y), np.random.default_rng(0))
        majority = float(np.bincount(y[te]).max() / len(te))
        heights = [h for h in range(1, schema.n_attributes + 1) if max_possible_leaves(schema, h) <= 20_000]
        t0 = time.time()
        for h in heights:
            for eps in EPS:
                for budget in ("split", "disjoint"):
                    for pt in (0, 1):
                        accs = [
                            accuracy(schema, X, y, tr, te, h, eps, budget, ("proba", "majority"), pt, 100 * h + r)
                            for r in range(reps)
                        ]
                        for vote in ("proba", "majority"):
                            rows.append(
                                {
                                    "data": name,
                                    "majority": majority,
                                    "height": h,
                                    "eps": eps,
                                    "budget": budget,
                                    "vote": vote,
                                    "prior_trees": pt,
                                    "acc": float(np.mean([a[vote] for a in accs])),
                                }
                            )
        print(f"{name}: heights {heights[0]}..{heights[-1]}, {time.time() - t0:.0f} s", flush=True)
    return rows


def cost_rows(reps: int) -> list[dict]:
    rows = []
    for name, h in COST:
        schema, X, y = data(name)
        tr, te = split(len(y), np.random.default_rng(0))
        for eps in EPS:
            for pt in (0, 1, 2):
                accs = [
                    accuracy(schema, X, y, tr, te, h, eps, "split", ("proba",), pt, 7000 + r)["proba"]
                    for r in range(reps)
                ]
                rows.append(
                    {
                        "data": name,
                        "height": h,
                        "eps": eps,
                        "prior_trees": pt,
                        "acc": float(np.mean(accs)),
                        "sd": float(np.std(accs)),
                    }
                )
        print(f"cost {name} done", flush=True)
    return rows


def report(floor: list[dict], cost: list[dict], args, load0: str, load1: str, secs: float) -> list[str]:
    L = [
        "",
        "## Prior stumps",
        "",
        f"Generated by `python benchmarks/studies/prior_stumps.py --reps {args.reps} --cost-reps {args.cost_reps}` "
        "(see its docstring). `PrivateForest.create(..., prior_trees=1)` (the default now) appends one single-leaf "
        "tree that releases the class totals with one cell's noise; the forest-wide prior is the inverse-variance "
        "mean of every tree's root totals (`streamdp.estimation.forest_prior`; under the disjoint budget each tree's "
        "own sampling variance counts too), so the stump dominates it; the roots "
        "of the random trees take the prior and stumps do not vote. Under the split budget the stump takes one share: "
        "every tree gets epsilon / 11 instead of epsilon / 10.",
        "",
        f"- load at start: `{load0}`; at end: `{load1}`; {secs:.0f} s in all",
        f"- one hold-out split (2/3 train, 1/3 test), mean of {args.reps} fits per floor cell and {args.cost_reps} per "
        "cost cell (new structure and noise each); 10 random trees; heights with trees of more than 20,000 "
        "possible leaves left out (Votes above 14).",
        "",
        "### Floor: settings below the majority share - 0.01",
        "",
        "Per dataset: settings (height x epsilon 0.5/1/2 x budget x vote) below the floor, out of all, and the "
        "worst accuracy minus the majority share.",
        "",
        "| data | majority | settings | below, prior_trees=0 | worst margin | below, prior_trees=1 | worst margin |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in FLOOR_DATA:
        r0 = [r for r in floor if r["data"] == name and r["prior_trees"] == 0]
        r1 = [r for r in floor if r["data"] == name and r["prior_trees"] == 1]
        if not r0:
            continue
        m = r0[0]["majority"]
        b0 = [r for r in r0 if r["acc"] < m - 0.01]
        b1 = [r for r in r1 if r["acc"] < m - 0.01]
        L.append(
            f"| {name} | {m:.3f} | {len(r0)} | {len(b0)} | {min(r['acc'] for r in r0) - m:+.3f} | {len(b1)} | "
            f"{min(r['acc'] for r in r1) - m:+.3f} |"
        )
    below = [r for r in floor if r["prior_trees"] == 1 and r["acc"] < r["majority"] - 0.01]
    L += ["", "Settings still below the floor with prior_trees=1 (data, height, epsilon, budget, vote: accuracy):", ""]
    L += [
        f"- {r['data']} h{r['height']} eps {r['eps']:g} {r['budget']} {r['vote']}: {r['acc']:.3f} "
        f"(majority {r['majority']:.3f})"
        for r in below
    ] or ["- none"]
    L += [
        "",
        "### Cost at the best height (split budget, probability vote; mean (sd))",
        "",
        "| data | height | eps | prior_trees=0 | prior_trees=1 | prior_trees=2 |",
        "|---|---|---|---|---|---|",
    ]
    for name, h in COST:
        for eps in EPS:
            cells = [
                next(r for r in cost if r["data"] == name and r["eps"] == eps and r["prior_trees"] == pt)
                for pt in (0, 1, 2)
            ]
            L.append(
                f"| {name} | {h} | {eps:g} | " + " | ".join(f"{c['acc']:.3f} ({c['sd']:.3f})" for c in cells) + " |"
            )
    L += ["", DEFAULT_HEIGHT_NOTE, ""]
    return L


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--cost-reps", type=int, default=4)
    ap.add_argument("--only", choices=("floor", "cost"))
    args = ap.parse_args()
    load0, t0 = sh("uptime"), time.time()
    cost = [] if args.only == "floor" else cost_rows(args.cost_reps)
    floor = [] if args.only == "cost" else floor_rows(args.reps)
    load1 = sh("uptime")
    (OUT / "prior_stumps.json").write_text(json.dumps({"floor": floor, "cost": cost, "load": [load0, load1]}, indent=1))
    if floor and cost:
        md = OUT / "accuracy_height.md"
        text = md.read_text()
        reading = ""  # a hand-written "### Reading (prior stumps)" is kept (check it against the new numbers)
        if "\n### Reading (prior stumps)\n" in text:
            reading = text[text.index("\n### Reading (prior stumps)\n") :]
        if "\n## Prior stumps\n" in text:
            text = text[: text.index("\n## Prior stumps\n")]
        md.write_text(
            text.rstrip("\n") + "\n" + "\n".join(report(floor, cost, args, load0, load1, time.time() - t0)) + reading
        )


if __name__ == "__main__":
    main()
