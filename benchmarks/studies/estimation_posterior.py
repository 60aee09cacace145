"""The probability vote's estimate, paired on the same releases: the posterior mean against the gated shrink rule.

Every estimate is post-processing of the same released counts, so each draw (structure and noise) is scored
with every estimate: the differences are the estimates', not the draws'. Per dataset and epsilon (0.1 / 0.5 /
1 / 2), over ``--repeats`` x ``--folds``-fold CV:

* ``posterior``: :meth:`ForestNodes.path_proba` (the posterior mean, :func:`streamdp.estimation.posterior_step`);
* ``gated``: the rule it replaced, re-run here from :func:`streamdp.estimation.shrink`: the pooled counts
  shrunk toward the level above where their total stands ``SNR_MIN`` noise sds above zero, else the level above;
* ``leaf``: the plain noisy vote (``estimator="leaf"``, Fan et al.'s clipped counts summed);
* ``majority``: the training folds' most frequent class.

Two settings: ``default`` (``PrivateForest.create(schema, epsilon=e).fit``, pruned) and ``height H``
(``prune=False``, drawn trees of height 2-6: where the gate gave the signal away). Datasets: those of
``accuracy_small_data`` and three generated ones (seeds not used to choose anything): ``gen-car`` (a full
factorial of six categorical attributes labelled by a hierarchical score, four classes 70/25/3/3),
``gen-cat`` (1,600 records, seven categorical attributes, a random rule on three of them, 10% label noise),
``gen-wide`` (1,800 records, 64 integer attributes 0-16, ten classes around random prototypes).

Second table (``--streams``): where the streaming paths lose, on the fit's own pruned structure: its counts
released once at the whole budget (``one release``) against the same records released as ten disjoint chunks
(``ten releases``, each at the whole budget, summed: what ``update`` and ``grow`` publish), both read by the
posterior mean; beside them ``update`` (fit on the first tenth, nine ``update``s) and ``grow`` (ten chunks).

    python benchmarks/studies/estimation_posterior.py [--repeats 1 --folds 5] [--streams]

Writes ``results/estimation_posterior.{json,md}``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

EPSILONS = (0.1, 0.5, 1.0, 2.0)
HEIGHTS = (2, 3, 4, 5, 6)
ESTIMATES = ("posterior", "gated", "leaf", "majority")
GENERATED = ("gen-car", "gen-cat", "gen-wide")


def _schema(arities=None, d=0, hi=1.0, n_classes=2):
    from streamdp.records.schema import Schema

    if arities is not None:
        attrs = [{"name": f"a{i}", "type": "categorical", "values": list(range(k))} for i, k in enumerate(arities)]
    else:
        attrs = [{"name": f"x{i}", "type": "numeric", "min": 0.0, "max": hi} for i in range(d)]
    return Schema.from_dict({"attributes": attrs, "label": {"name": "y", "values": list(range(n_classes))}})


def generated(name: str):
    """(schema, X, y) raw values of a generated dataset (fixed seeds)."""
    rng = np.random.default_rng({"gen-car": 101, "gen-cat": 102, "gen-wide": 103}[name])
    if name == "gen-car":
        ar = [4, 4, 4, 3, 3, 3]
        X = np.array(np.meshgrid(*[np.arange(k) for k in ar], indexing="ij")).reshape(6, -1).T
        v = np.stack([rng.permutation(k)[X[:, i]] / (k - 1) for i, k in enumerate(ar)], axis=1)
        score = (v * rng.uniform(0.5, 1.5, 6)).sum(axis=1)
        bad = (v[:, 3] == 0) | (v[:, 5] == 0)
        cuts = np.quantile(score[~bad], [0.3, 0.87, 0.935])
        y = np.where(bad, 0, np.searchsorted(cuts, score, side="right"))
        return _schema(arities=ar, n_classes=4), X, y
    if name == "gen-cat":
        n, ar = 1600, rng.integers(2, 6, 7)
        X = np.stack([rng.integers(0, k, n) for k in ar], axis=1)
        a, b, c = rng.choice(7, 3, replace=False)
        rule = rng.choice(4, size=(ar[a], ar[b], ar[c]), p=[0.55, 0.25, 0.12, 0.08])
        y = np.where(rng.random(n) < 0.1, rng.integers(0, 4, n), rule[X[:, a], X[:, b], X[:, c]])
        return _schema(arities=ar.tolist(), n_classes=4), X, y
    n, d, k = 1800, 64, 10
    protos = rng.uniform(0, 16, (k, d)) * (rng.random((k, d)) < 0.6)
    y = rng.integers(0, k, n)
    X = np.clip(np.round(protos[y] + rng.normal(0, 4, (n, d))), 0, 16)
    return _schema(d=d, hi=16.0, n_classes=k), X, y


def load(name: str, rng: np.random.Generator):
    if name in GENERATED:
        schema, X, y = generated(name)
        enc = schema.encode(X.tolist(), y.tolist())
        return schema, enc.X, enc.y
    from accuracy_small_data import load_encoded

    return load_encoded(name, rng)


def gated(nodes, leaves: np.ndarray) -> np.ndarray:
    """The gated pooled rule: :func:`streamdp.estimation.shrink` depth by depth along the pooled paths (the
    record's :meth:`ForestNodes.path_rows` summed over the trees, as the river path pools them)."""
    from streamdp.estimation import shrink

    T, L = nodes.leaf_node.shape
    C = nodes.y.shape[1]
    flat = (leaves[:, :T] + np.arange(T) * L).ravel()
    rows = nodes.path_rows(flat).reshape(len(leaves), T, -1).sum(axis=1)
    p, last = np.broadcast_to(nodes.prior, (len(leaves), C)), None
    for d in range(C + 1, rows.shape[1], C + 1):  # from depth 1 (the roots take the prior)
        Y, V = rows[:, d : d + C], rows[:, d + C]
        q = shrink(Y, V, p)
        if last is not None:  # a pool no tree deepens is not weighed twice
            q = np.where(((Y == last[0]).all(axis=1) & (V == last[1]))[:, None], p, q)
        p, last = q, (Y, V)
    return np.asarray(p)


def scores(forest, X, y, ytr) -> dict:
    leaves = forest.structure.apply(X, forest.schema.is_categorical)
    forest.estimator = "shrink"
    out = {"posterior": forest.proba_from_leaves(leaves), "gated": gated(forest.estimation_nodes(), leaves)}
    forest.estimator = "leaf"
    out["leaf"] = forest.proba_from_leaves(leaves)
    forest.estimator = "shrink"
    acc = {k: float((v.argmax(axis=1) == y).mean()) for k, v in out.items()}
    acc["majority"] = float((y == np.bincount(ytr).argmax()).mean())
    return acc


def stream_scores(schema, Xtr, ytr, Xte, yte, eps: float) -> dict:
    from streamdp import PrivateForest

    def acc(f) -> float:
        return float((f.proba_from_leaves(f.structure.apply(Xte, schema.is_categorical)).argmax(1) == yte).mean())

    chunks = np.array_split(np.arange(len(ytr)), 10)
    fit = PrivateForest.create(schema, epsilon=eps).fit_encoded(Xtr, ytr)
    one = fit.with_counts(np.zeros_like(fit.counts), version=0, n_releases=0)
    one.merge(one.noisy_delta_encoded(Xtr, ytr))
    ten = fit.with_counts(np.zeros_like(fit.counts), version=0, n_releases=0)
    for c in chunks:
        ten.merge(ten.noisy_delta_encoded(Xtr[c], ytr[c]))
    upd = PrivateForest.create(schema, epsilon=eps).fit_encoded(Xtr[chunks[0]], ytr[chunks[0]])
    for c in chunks[1:]:
        upd.merge(upd.noisy_delta_encoded(Xtr[c], ytr[c]))
    grow = PrivateForest.create(schema, epsilon=eps)
    for c in chunks:
        grow.grow_encoded(Xtr[c], ytr[c])
    return {
        "fit": acc(fit),
        "one release": acc(one),
        "ten releases": acc(ten),
        "update": acc(upd),
        "grow": acc(grow),
        "fit height": float(fit.height),
        "update height": float(upd.height),
        "grow height": float(grow.height),
    }


def main() -> None:
    from accuracy_small_data import DATASETS

    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--datasets", nargs="*", default=[*DATASETS, *GENERATED])
    ap.add_argument("--heights", nargs="*", default=["uci-nursery", "uci-tic-tac-toe", "gen-car", "gen-cat"])
    ap.add_argument("--streams", action="store_true")
    ap.add_argument("--stem", default="estimation_posterior")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from common import machine, sh, write_results

    from streamdp import PrivateForest

    warnings.simplefilter("ignore")
    info = {"machine": machine(), "git": sh("git rev-parse --short HEAD"), "uptime_start": sh("uptime")}
    info.update(repeats=args.repeats, folds=args.folds)
    rows = []
    for name in args.datasets:
        t0 = time.time()
        rng = np.random.default_rng(sum(map(ord, name)))
        schema, X, y = load(name, rng)
        settings = [("default", None)] + ([(f"height {h}", h) for h in HEIGHTS] if name in args.heights else [])
        for _ in range(args.repeats):
            perm = rng.permutation(len(y))
            for test in np.array_split(perm, args.folds):
                train = np.setdiff1d(perm, test)
                for eps in EPSILONS:
                    for setting, h in settings:
                        f = PrivateForest.create(schema, epsilon=eps, height=h)
                        f.fit_encoded(X[train], y[train], prune=h is None)
                        row = {"dataset": name, "setting": setting, "epsilon": eps}
                        rows.append({**row, "acc": scores(f, X[test], y[test], y[train])})
                    if args.streams:
                        s = stream_scores(schema, X[train], y[train], X[test], y[test], eps)
                        rows.append({"dataset": name, "setting": "streams", "epsilon": eps, "acc": s})
        print(f"{name}: {time.time() - t0:.0f} s", flush=True)
    info["uptime_end"] = sh("uptime")
    write_results(args.stem, info, rows, report(info, rows))


def report(info: dict, rows: list[dict]) -> list[str]:
    n = info["repeats"] * info["folds"]
    lines = [
        "# The probability vote's estimate: posterior mean against the gated rule, on the same releases",
        "",
        f"`python benchmarks/studies/estimation_posterior.py --repeats {info['repeats']} --folds {info['folds']}`; "
        f"git {info['git']}; {info['machine']['nproc']} x {info['machine']['cpu']}",
        f"load at start: {info['uptime_start']}",
        f"load at end: {info['uptime_end']}",
        "",
        f"Mean test accuracy over {n} splits; each split's release scored by every estimate (paired). "
        "`below`: cells under the majority share - 0.01.",
        "",
    ]
    settings = sorted({r["setting"] for r in rows if r["setting"] != "streams"}, key=lambda s: (s != "default", s))
    for setting in settings:
        lines += [f"## {setting}", "", "| dataset | epsilon | " + " | ".join(ESTIMATES) + " | posterior - gated |"]
        lines.append("|---|---|" + "---|" * (len(ESTIMATES) + 1))
        cells = []
        for name in dict.fromkeys(r["dataset"] for r in rows if r["setting"] == setting):
            for eps in EPSILONS:
                rs = [
                    r["acc"] for r in rows if r["dataset"] == name and r["setting"] == setting and r["epsilon"] == eps
                ]
                m = {k: float(np.mean([r[k] for r in rs])) for k in ESTIMATES}
                cells.append(m)
                vals = " | ".join(f"{m[k]:.3f}" for k in ESTIMATES)
                lines.append(f"| {name} | {eps:g} | {vals} | {m['posterior'] - m['gated']:+.3f} |")
        mean = " | ".join(f"{np.mean([c[k] for c in cells]):.3f}" for k in ESTIMATES)
        below = " | ".join(str(sum(c[k] < c["majority"] - 0.01 for c in cells)) for k in ESTIMATES)
        diff = np.mean([c["posterior"] - c["gated"] for c in cells])
        lines += [f"| **mean** | | {mean} | {diff:+.3f} |", f"| **below** | | {below} | |", ""]
    streams = [r for r in rows if r["setting"] == "streams"]
    if streams:
        keys = ("fit", "one release", "ten releases", "update", "grow", "fit height", "update height", "grow height")
        lines += ["## Streams: where the gap comes from", "", "| dataset | epsilon | " + " | ".join(keys) + " |"]
        lines.append("|---|---|" + "---|" * len(keys))
        for name in dict.fromkeys(r["dataset"] for r in streams):
            for eps in EPSILONS:
                rs = [r["acc"] for r in streams if r["dataset"] == name and r["epsilon"] == eps]
                vals = " | ".join(f"{np.mean([r[k] for r in rs]):.3f}" for k in keys)
                lines.append(f"| {name} | {eps:g} | {vals} |")
        lines.append("")
    return lines


if __name__ == "__main__":
    main()
