"""Exploration behind decision 026 (issue #33, Breast Cancer against diffprivlib): votes and leaf releases on the
same releases of the default one-shot fit. Exploratory: its log is ``results/tree_vote_explore.log``; the measured
choice is ``tree_vote.py``'s.

* ``part0`` (a first check, each column its own fit): the default; ``threshold_share=0`` (``ts0``); the
  majority vote (``maj``); diffprivlib's forest built with this library (``dpllike``: 10 trees of height 5,
  disjoint budget, no threshold share, no stump, unpruned, each tree's leaf argmax as its vote;
  ``dpllike_split`` with the split budget); ``height=5`` given (``h5_default``, ``h5_ts0``: candidate b by the draw).
* ``part1`` (candidate a and the vote): on each default fit's release, the pooled vote (``pooled``, the default
  before 026), the majority vote of the per-tree shrink rule (``maj``), the per-tree shrink rule without a gate
  averaged (``soft_g0``), each tree's clipped leaf counts as a hard vote (``leaf_maj``) and averaged
  (``leaf_soft``); and ``pf_maj``: every leaf of the same pruned structure labelled by permute-and-flip
  (McKenna and Sheldon; diffprivlib's leaf release, monotonic, at the budget the leaf counts got), hard vote.
* ``part2``: each tree's leaf shrunk toward the record's pooled estimate, averaged: by ``posterior_step``
  (``tp_post``), by ``shrink`` at its weight 8 (``tp_shrink``) and at weight 1 (``tp_shrink1``); ``blend``: the
  mean of ``pooled`` and ``leaf_soft``.
* ``part3``: the weight ``a = c v / t + m`` (columns ``tc_m``), the hard vote of the same estimates (``t1_hard``),
  and candidate b as post-processing: each tree read at its node of depth at most ``h`` (``t1_hh``, the sum of
  the released leaves below it).
* ``part4``: an empirical-Bayes weight, ``a = (v / C) / (tau2 t) + 1`` with ``tau2`` the spread of the released
  leaves' class shares around the prior by moments (less their noise), weighted by records (``eb_t``) or by
  reliability (``eb_r``), clipped to ``[1e-4, 0.25]``.
* ``part5``: ``c`` of ``a = c v / t + 1`` at 1 / 2 / 4 and :func:`posterior_step`'s weight at ``KAPPA`` 1 / 2.
* ``share``: the default fit (now voting with the tree mean) against ``threshold_share=0`` (``ts0``) and a share
  by size (``rule``: 0.2 where the training records, spread over the 16 bins, fill a bin to the histograms'
  noise scale ``d / (0.2 e)``, as :func:`streamdp.forest.first_release.stream_share` decides for streams; here
  from the exact count, an upper bound on what a released one could do), each column its own fit.
* ``layout``: the default fit against ``budget="disjoint"`` (10 trees, each on its share of the records with the
  whole epsilon, pruned, the tree mean; ``disjoint``, and without the share ``disj_ts0``) and diffprivlib's
  layout with noisy counts (``dpllike``, as in part 0), each column its own fit. ``layout_trees``: ten disjoint
  unpruned trees of height 5 or 3 (``dj_h5``, ``dj_h3``) voting with the tree mean, one stump, no share.
* ``sizing``: decision 019's ``TREES_PER_SIGNAL`` at 3 (the default) / 2 / 1.5 / 1 under the tree mean (more
  trees kept from the same released total; columns ``c3`` ..., kept trees ``k3`` ...), each column its own fit.
* ``weights REPEATS FOLDS OUT.json``: ``tree_vote.py``'s fit path and datasets, ``tree_mean`` at ``TREE_WEIGHT``
  1 / 2 / 4 / 8 (columns ``w1`` ...) beside the pooled vote on the same releases (the choice of the weight).

    python benchmarks/studies/tree_vote_explore.py part1 NAMES REPEATS OUT.json
    python benchmarks/studies/tree_vote_explore.py dpl NAMES REPEATS OUT.json   # diffprivlib on the same splits
    python benchmarks/studies/tree_vote_explore.py summary ROWS.json[,..] DPL.json[,..] [BASE]

NAMES: comma-separated names of ``tree_vote.py``'s datasets (Car reads ``/tmp/car.data``).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
warnings.simplefilter("ignore")

EPS = (0.1, 0.5, 1.0, 2.0)
CAR = "/tmp/car.data"


def load(name):
    from tree_vote import load as tv_load

    return tv_load(name, CAR)


def splits(n, repeats, rng):
    from accuracy_small_data import cv_splits

    return cv_splits(n, repeats, 5, rng)


def fit(s, e, X, y):
    from streamdp import PrivateForest

    f = PrivateForest.create(s, epsilon=e).fit_encoded(X, y)
    f.vote = "proba"
    return f


def _hard(labels, C, tie):
    n, T = labels.shape
    v = np.zeros((n, C))
    np.add.at(v, (np.repeat(np.arange(n), T), labels.ravel()), 1)
    return v + 1e-6 * tie


def pf_labels(counts, eps, rng):
    """Permute-and-flip (monotonic) per leaf: (L, C) exact counts -> (L,) labels."""
    L, C = counts.shape
    acc = rng.random((L, C)) < np.exp(eps * (counts - counts.max(1, keepdims=True)))
    return np.where(acc, rng.random((L, C)), 2.0).argmin(1)


PART0 = {
    "default": ({}, True),
    "ts0": ({"threshold_share": 0}, True),
    "maj": ({"vote": "majority"}, True),
    "dpllike": (
        {"n_trees": 10, "height": 5, "budget": "disjoint", "threshold_share": 0, "vote": "majority", "prior_trees": 0},
        False,
    ),
    "dpllike_split": (
        {"n_trees": 10, "height": 5, "budget": "split", "threshold_share": 0, "vote": "majority", "prior_trees": 0},
        False,
    ),
    "h5_default": ({"height": 5}, True),
    "h5_ts0": ({"height": 5, "threshold_share": 0}, True),
}


def cells(names, reps):
    """``(schema, X, y, train, test, epsilon, row)`` for every dataset, split and epsilon; ``row`` holds the
    cell's keys and the training folds' majority share (each part adds its columns)."""
    for name in names:
        s, X, y, srng = load(name)
        for i, (tr, te) in enumerate(splits(len(y), reps, srng)):
            mj = float((y[te] == np.bincount(y[tr], minlength=s.n_classes).argmax()).mean())
            for e in EPS:
                yield s, X, y, tr, te, e, {"dataset": name, "split": i, "eps": e, "majority": mj, "trees": 0}


def accuracy(f, X, y) -> float:
    """Test accuracy of forest ``f`` on encoded records."""
    return float((f.proba_from_leaves(f.structure.apply(X, f.schema.is_categorical)).argmax(1) == y).mean())


def part0(names, reps, out_path):
    from streamdp import PrivateForest

    rows = []
    for s, X, y, tr, te, e, row in cells(names, reps):
        for col, (kw, prune) in PART0.items():
            f = PrivateForest.create(s, epsilon=e, **{"vote": "proba", **kw})
            f.fit_encoded(X[tr], y[tr], prune=prune)
            if not prune:
                f.estimator = "leaf"
            row[col] = accuracy(f, X[te], y[te])
        rows.append(row)
    json.dump(rows, open(out_path, "w"))


def share(names, reps, out_path):
    from streamdp import PrivateForest

    rows = []
    for s, X, y, tr, te, e, row in cells(names, reps):
        by_size = 0.2 if len(tr) / 16 >= int((~s.is_categorical).sum()) / (0.2 * e) else 0.0
        for col, ts in (("default", None), ("ts0", 0.0), ("rule", by_size)):
            row[col] = accuracy(
                PrivateForest.create(s, epsilon=e, threshold_share=ts).fit_encoded(X[tr], y[tr]), X[te], y[te]
            )
        rows.append(row)
    json.dump(rows, open(out_path, "w"))


LAYOUTS = {
    "default": ({}, True),
    "disjoint": ({"budget": "disjoint", "vote": "trees"}, True),
    "disj_ts0": ({"budget": "disjoint", "vote": "trees", "threshold_share": 0}, True),
    "dpllike": (PART0["dpllike"][0], False),
}


LAYOUTS_TREES = {
    "default": ({}, True),
    **{
        f"dj_h{h}": (
            {"n_trees": 10, "height": h, "budget": "disjoint", "threshold_share": 0, "vote": "trees"},
            False,
        )
        for h in (5, 3)
    },
}


def layout(names, reps, out_path, layouts=LAYOUTS):
    from streamdp import PrivateForest

    rows = []
    for s, X, y, tr, te, e, row in cells(names, reps):
        for col, (kw, prune) in layouts.items():
            f = PrivateForest.create(s, epsilon=e, **kw).fit_encoded(X[tr], y[tr], prune=prune)
            if not prune and kw.get("vote") == "majority":
                f.estimator = "leaf"
            row[col] = accuracy(f, X[te], y[te])
        rows.append(row)
    json.dump(rows, open(out_path, "w"))


def sizing(names, reps, out_path):
    import streamdp.forest.sizing as sizing_module
    from streamdp import PrivateForest

    rows, kept = [], sizing_module.TREES_PER_SIGNAL
    try:
        for s, X, y, tr, te, e, row in cells(names, reps):
            for c in (3.0, 2.0, 1.5, 1.0):
                sizing_module.TREES_PER_SIGNAL = c
                f = PrivateForest.create(s, epsilon=e).fit_encoded(X[tr], y[tr])
                row[f"c{c:g}"], row[f"k{c:g}"] = accuracy(f, X[te], y[te]), f.n_trees
            rows.append(row)
    finally:
        sizing_module.TREES_PER_SIGNAL = kept
    json.dump(rows, open(out_path, "w"))


def part1(f, Xtr, ytr, Xte, rng):
    from streamdp.estimation.prior import leaf_rule_proba
    from streamdp.forest.pruning import PRUNE_PROBE

    T = f.n_trees
    L = f.structure.apply(Xte, f.schema.is_categorical)
    idx = L[:, :T] + np.arange(T) * f.structure.max_leaves
    nodes = f.estimation_nodes()
    out = {"pooled": f.proba_from_leaves(L)}
    f.vote = "majority"
    out["maj"] = f.proba_from_leaves(L)
    f.vote = "proba"
    tab = nodes.leaf_proba(0.0)
    out["soft_g0"] = tab.reshape(T * tab.shape[1], -1)[idx].mean(1)
    C = f.schema.n_classes
    lt = leaf_rule_proba(f.counts[:T]).reshape(-1, C)[idx]
    out["leaf_maj"] = _hard(lt.argmax(2), C, nodes.prior)
    out["leaf_soft"] = lt.mean(1) + 1e-9 * nodes.prior
    eps_leaf = f.epsilon * (1 - f.threshold_spent) / f.n_released_trees * (1 - PRUNE_PROBE)
    exact = f.tally_on(f.structure, Xtr, ytr, None)[:T]
    lab = np.stack([pf_labels(exact[t], eps_leaf, rng) for t in range(T)])
    out["pf_maj"] = _hard(lab[np.arange(T)[None, :], L[:, :T]], C, nodes.prior)
    return out


def _toward(Y, V, P, c, m):
    tot = Y.sum(1)
    a = (c * np.maximum(V, 0) / np.maximum(tot, 1.0) + m)[:, None]
    q = np.clip((Y + a * P) / (tot[:, None] + a), 0, None)
    s = q.sum(1, keepdims=True)
    return np.where((tot[:, None] > 0) & (s > 0), q / np.where(s > 0, s, 1), P)


def _leaf_rows(f, Xte):
    T = f.n_trees
    L = f.structure.apply(Xte, f.schema.is_categorical)
    nodes = f.estimation_nodes()
    pooled = nodes.path_proba(L)
    node = nodes.leaf_node[np.arange(T)[None, :], L[:, :T]].ravel()
    return T, L, nodes, pooled, node, np.repeat(pooled, T, axis=0)


def part2(f, Xtr, ytr, Xte, rng):
    from streamdp.estimation.prior import leaf_rule_proba
    from streamdp.estimation.rule import posterior_step, shrink

    T, L, nodes, pooled, node, P = _leaf_rows(f, Xte)
    n, C = pooled.shape
    Y, V = nodes.y[node], nodes.var[node]
    lt = leaf_rule_proba(f.counts[:T]).reshape(-1, C)[L[:, :T] + np.arange(T) * f.structure.max_leaves].mean(1)
    q, _ = posterior_step(Y, V, P, np.maximum(Y.sum(1), 0.0), np.ones(n * T))
    return {
        "pooled": pooled,
        "leaf_soft": lt,
        "blend": (pooled + lt) / 2,
        "tp_post": q.reshape(n, T, C).mean(1),
        "tp_shrink": shrink(Y, V, P, 0.0).reshape(n, T, C).mean(1),
        "tp_shrink1": _toward(Y, V, P, 1.0, 1.0).reshape(n, T, C).mean(1),
    }


def part3(f, Xtr, ytr, Xte, rng):
    T, L, nodes, pooled, node, P = _leaf_rows(f, Xte)
    n, C = pooled.shape
    out = {"pooled": pooled}
    for c, m in ((0.25, 1), (0.5, 1), (1, 1), (2, 1), (1, 0), (1, 3)):
        out[f"t{c}_{m}"] = _toward(nodes.y[node], nodes.var[node], P, c, m).reshape(n, T, C).mean(1)
    q = _toward(nodes.y[node], nodes.var[node], P, 1, 1).reshape(n, T, C)
    out["t1_hard"] = _hard(q.argmax(2), C, pooled)
    for h in (3, 5, 7):
        nd = node.copy()
        while (deep := nodes.depth[nd] > h).any():
            nd = np.where(deep, nodes.parent[nd], nd)
        out[f"t1_h{h}"] = _toward(nodes.y[nd], nodes.var[nd], P, 1, 1).reshape(n, T, C).mean(1)
    return out


def _tau2(nodes, weight):
    lf = nodes.leaf_node[nodes.leaf_node >= 0]
    y, V = nodes.y[lf], nodes.var[lf]
    t = y.sum(1)
    ok = t > 0
    y, V, t = y[ok], V[ok], t[ok]
    dev = ((y / t[:, None] - nodes.prior) ** 2).sum(1) - V / t**2
    w = t if weight == "t" else t**2 / (t**2 + V)
    return float(np.sum(w * dev) / (y.shape[1] * np.sum(w))) if w.sum() > 0 else 0.0


def part4(f, Xtr, ytr, Xte, rng):
    T, L, nodes, pooled, node, P = _leaf_rows(f, Xte)
    n, C = pooled.shape
    Y, V = nodes.y[node], nodes.var[node]
    t = np.maximum(Y.sum(1), 1.0)
    out = {"pooled": pooled}
    for c in (1, 2):
        out[f"c{c}"] = _toward(Y, V, P, c, 1.0).reshape(n, T, C).mean(1)
    for name, w in (("eb_t", "t"), ("eb_r", "r")):
        tau2 = min(max(_tau2(nodes, w), 1e-4), 0.25)
        a = (V / C) / (tau2 * t) + 1.0
        q = np.clip((Y + a[:, None] * P) / (Y.sum(1)[:, None] + a[:, None]), 0, None)
        s = q.sum(1, keepdims=True)
        q = np.where((Y.sum(1)[:, None] > 0) & (s > 0), q / np.where(s > 0, s, 1), P)
        out[name] = q.reshape(n, T, C).mean(1)
    return out


def part5(f, Xtr, ytr, Xte, rng):
    import streamdp.estimation.rule as rule

    T, L, nodes, pooled, node, P = _leaf_rows(f, Xte)
    n, C = pooled.shape
    Y, V = nodes.y[node], nodes.var[node]
    out = {"pooled": pooled}
    for c in (1, 2, 4):
        out[f"c{c}"] = _toward(Y, V, P, c, 1.0).reshape(n, T, C).mean(1)
    kappa = rule.KAPPA
    try:
        for k in (1.0, 2.0):
            rule.KAPPA = k
            q, _ = rule.posterior_step(Y, V, P, np.maximum(Y.sum(1), 0.0), np.ones(n * T))
            out[f"K{k:g}"] = q.reshape(n, T, C).mean(1)
    finally:
        rule.KAPPA = kappa
    return out


def weights(reps, folds, out_path):
    from accuracy_small_data import cv_splits
    from tree_vote import CONC, EPSILONS, HELDOUT, SMALL, UNSEEN, released

    import streamdp.estimation.nodes as nodes_module

    rows, kept = [], nodes_module.TREE_WEIGHT
    try:
        for name in [*HELDOUT, *SMALL, *CONC, *UNSEEN]:
            s, X, y, rng = load(name)
            t0 = time.time()
            for i, (tr, te) in enumerate(cv_splits(len(y), reps, folds, rng)):
                mj = float((y[te] == np.bincount(y[tr], minlength=s.n_classes).argmax()).mean())
                for e in EPSILONS:
                    f = released(s, X[tr], y[tr], "fit", e)
                    L = f.structure.apply(X[te], s.is_categorical)
                    r = {"dataset": name, "split": i, "eps": e, "majority": mj, "trees": f.n_trees}
                    nodes = f.estimation_nodes()
                    pooled = nodes.path_proba(L)
                    r["pooled"] = float((pooled.argmax(1) == y[te]).mean())
                    for c in (1.0, 2.0, 4.0, 8.0):
                        nodes_module.TREE_WEIGHT = c
                        r[f"w{c:g}"] = float((nodes.tree_mean(L, pooled).argmax(1) == y[te]).mean())
                    nodes_module.TREE_WEIGHT = kept
                    rows.append(r)
            print(name, f"{time.time() - t0:.0f}s", flush=True)
    finally:
        nodes_module.TREE_WEIGHT = kept
    json.dump(rows, open(out_path, "w"))


def run(part, names, reps, out_path):
    rng = np.random.default_rng(7)
    rows = []
    for name in names:
        s, X, y, srng = load(name)
        t0 = time.time()
        for i, (tr, te) in enumerate(splits(len(y), reps, srng)):
            mj = float((y[te] == np.bincount(y[tr], minlength=s.n_classes).argmax()).mean())
            for e in EPS:
                f = fit(s, e, X[tr], y[tr])
                o = part(f, X[tr], y[tr], X[te], rng)
                acc = {k: float((p.argmax(1) == y[te]).mean()) for k, p in o.items()}
                rows.append({"dataset": name, "split": i, "eps": e, "majority": mj, "trees": f.n_trees, **acc})
        print(name, f"{time.time() - t0:.0f}s", flush=True)
    json.dump(rows, open(out_path, "w"))


def dpl(names, reps, out_path):
    from accuracy_small_data import dpl_job, run_dpl

    tmp, jobs = tempfile.mkdtemp(), []
    for name in names:
        s, X, y, rng = load(name)
        jobs.append(dpl_job(name, s, X, y, splits(len(y), reps, rng), tmp))
    json.dump(run_dpl("/tmp/dplvenv/bin/python", jobs), open(out_path, "w"))


def summary(rows_paths, dpl_paths, base="pooled"):
    rows = [r for p in rows_paths.split(",") for r in json.load(open(p))]
    dpl = [r for p in dpl_paths.split(",") for r in json.load(open(p))] if dpl_paths else []
    skip = {"dataset", "split", "eps", "majority", "trees", "height", "k3", "k2", "k1.5", "k1"}
    cols = [k for k in rows[0] if k not in skip]
    print("%-26s %4s %6s %6s" % ("dataset", "eps", "maj", "dpl"), " ".join("%9s" % c[:9] for c in cols))
    cells = []
    for n in dict.fromkeys(r["dataset"] for r in rows):
        for e in sorted({r["eps"] for r in rows}):
            rs = [r for r in rows if r["dataset"] == n and r["eps"] == e]
            d = [r["acc"] for r in dpl if r["dataset"] == n and abs(r["epsilon"] - e) < 1e-9]
            c = {k: np.mean([r[k] for r in rs]) for k in [*cols, "majority", "trees"]}
            c["dpl"] = np.mean(d) if d else np.nan
            cells.append(c)
            print(
                "%-26s %4g %6.3f %6.3f" % (n[:26], e, c["majority"], c["dpl"]),
                " ".join("%9.3f" % c[k] for k in cols),
                " T%.1f" % c["trees"],
            )
    print(f"\nmean minus {base}; cells below majority-0.01; cells worse / better than {base} by >0.01")
    for k in cols:
        dd = [c[k] - c[base] for c in cells]
        print(
            "%-10s mean %.3f  d %+.4f  below-floor %d  worse %d  better %d  vs dpl %+.3f"
            % (
                k,
                np.mean([c[k] for c in cells]),
                np.mean(dd),
                sum(c[k] < c["majority"] - 0.01 for c in cells),
                sum(x < -0.01 for x in dd),
                sum(x > 0.01 for x in dd),
                np.nanmean([c[k] - c["dpl"] for c in cells]),
            )
        )


if __name__ == "__main__":
    cmd, *rest = sys.argv[1:]
    if cmd == "summary":
        summary(*rest)
    elif cmd == "sizing":
        sizing(rest[0].split(","), int(rest[1]), rest[2])
    elif cmd == "layout":
        layout(rest[0].split(","), int(rest[1]), rest[2])
    elif cmd == "layout_trees":
        layout(rest[0].split(","), int(rest[1]), rest[2], LAYOUTS_TREES)
    elif cmd == "share":
        share(rest[0].split(","), int(rest[1]), rest[2])
    elif cmd == "part0":
        part0(rest[0].split(","), int(rest[1]), rest[2])
    elif cmd == "weights":
        weights(int(rest[0]), int(rest[1]), rest[2])
    elif cmd == "dpl":
        dpl(rest[0].split(","), int(rest[1]), rest[2])
    else:
        parts = {"part1": part1, "part2": part2, "part3": part3, "part4": part4, "part5": part5}
        run(parts[cmd], rest[0].split(","), int(rest[1]), rest[2])
