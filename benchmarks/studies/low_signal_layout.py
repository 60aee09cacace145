"""Issue #33's low-signal cells: is there a layout rule, from released numbers and public parameters only, that beats
the default one-shot fit where decision 019's tree count ``k`` is small? Results: ``results/low_signal_layout.md``.

Every cell (dataset, CV split, epsilon) fits each column on the same training folds (paired):

* ``default``: ``PrivateForest.create(s, epsilon=e).fit``; ``k`` is the count it kept (a released number's
  function, decision 019). The rules below trigger on it.
* the candidates, each its own fit of 10 random trees at ``10 e / 11``, unpruned, no threshold share, no stump,
  leaf estimator (clipped counts): a layout switched to after the default's first stump release, which cost
  ``e / 11``, so the budget adds up to ``e``. A stump released here at ``e / 11`` (geometric) stands in for that
  release: it breaks ties, in a tree's leaf and in the vote (``_tie``), or counts as two more votes (``_vote``: a
  margin of two or less goes to the stump); ``_unb``: a leaf's ties broken at random, not toward the prior's
  class (:func:`unpruned_votes`).
  ``dj5`` is diffprivlib's layout (disjoint budget, height 5), ``dj4`` / ``dj3`` the same at height 4 / 3,
  ``sp5`` / ``sp4`` / ``sp3`` the split budget.
* ``hard``: the default's release, each kept tree voting the argmax of its tree-mean estimate (hard labels at small k).
* ``dpllike``: ``tree_vote_explore.py``'s column of that name (the whole ``e`` on the 10 disjoint trees, the
  library's majority vote, no stump): the layout as its log measured it, not paying for a trigger.

A rule ``col@K`` reads ``col`` where ``k <= K`` and ``default`` elsewhere (``num:`` only on numeric schemas).

    python benchmarks/studies/low_signal_layout.py run NAMES REPEATS EPS OUT.json
    python benchmarks/studies/low_signal_layout.py summary ROWS.json[,..] [DPL.json[,..]]
    python benchmarks/studies/low_signal_layout.py why NAMES REPEATS EPS   # diffprivlib's labels on dpllike's trees
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tree_vote_explore as tve  # noqa: E402

LAYOUTS = {f"{b}{h}": (budget, h) for b, budget in (("dj", "disjoint"), ("sp", "split")) for h in (5, 4, 3)}
VOTES = ("tie", "vote", "unb")
RULES = [f"{c}_{v}" for c in LAYOUTS for v in VOTES] + ["hard", "dpllike"]


def unpruned_votes(s, e, X, y, Xte, budget, height, stump):
    """``(tie, vote, unb)`` class scores of a 10-tree unpruned hard-vote forest at ``10 e / 11``. ``unb``: a leaf's
    label is its clipped noisy counts' argmax with ties (all classes, where every count is clipped to 0) broken
    uniformly at random, as diffprivlib labels an empty leaf, not toward the prior's class; ties in the vote to
    the stump."""
    from streamdp import PrivateForest
    from streamdp.estimation.prior import leaf_rule_proba

    f = PrivateForest.create(
        s, n_trees=10, height=height, epsilon=e * 10 / 11, budget=budget, prior_trees=0, threshold_share=0
    ).fit_encoded(X, y, prune=False)
    T, Lm, C = f.n_trees, f.structure.max_leaves, s.n_classes
    cells = leaf_rule_proba(np.asarray(f.counts[:T])).reshape(T * Lm, C)
    leaves = f.structure.apply(Xte, s.is_categorical)[:, :T]
    lab = (cells[leaves + np.arange(T) * Lm] + 1e-9 * stump).argmax(2)
    votes = tve._hard(lab, C, 0 * stump)
    top = (stump == stump.max()).astype(float)
    pos = np.clip(np.asarray(f.counts[:T], dtype=float), 0, None).reshape(T * Lm, C)
    unb = (pos + 1e-3 * np.random.default_rng().random(pos.shape)).argmax(1)[leaves + np.arange(T) * Lm]
    return votes + 1e-3 * stump, votes + 2 * top + 1e-3 * stump, tve._hard(unb, C, 0 * stump) + 1e-3 * stump


def hard_of(f, Xte):
    """Each kept tree's tree-mean estimate (the default vote's per-tree term) as one hard vote, ties by pooled."""
    from streamdp.estimation.rule import TREE_WEIGHT, shrink

    T, L, nodes, pooled, node, P = tve._leaf_rows(f, Xte)
    q = shrink(nodes.y[node], nodes.var[node], P, 0.0, TREE_WEIGHT).reshape(len(pooled), T, -1)
    return tve._hard(q.argmax(2), pooled.shape[1], pooled)


def run(names, reps, eps, out_path):
    from streamdp import PrivateForest
    from streamdp.privacy.secure_random import SecureRandom
    from streamdp.release.noisy import noisy_node

    tve.EPS, rows, rng = eps, [], SecureRandom()
    for name in names:
        t0 = time.time()
        for s, X, y, tr, te, e, row in tve.cells([name], reps):
            f = PrivateForest.create(s, epsilon=e).fit_encoded(X[tr], y[tr])
            row.update(default=tve.accuracy(f, X[te], y[te]), trees=f.n_trees, numeric=bool(~s.is_categorical.any()))
            row["hard"] = float((hard_of(f, X[te]).argmax(1) == y[te]).mean())
            exact = np.bincount(y[tr], minlength=s.n_classes)[None, None, :]
            stump = np.clip(noisy_node(exact, e / 11, "geometric", rng)[0, 0].astype(float), 0, None)
            stump = stump / stump.sum() if stump.sum() > 0 else np.full(s.n_classes, 1.0 / s.n_classes)
            for col, (budget, h) in LAYOUTS.items():
                for v, p in zip(VOTES, unpruned_votes(s, e, X[tr], y[tr], X[te], budget, h, stump)):
                    row[f"{col}_{v}"] = float((p.argmax(1) == y[te]).mean())
            kw = tve.PART0["dpllike"][0]
            g = PrivateForest.create(s, epsilon=e, **kw).fit_encoded(X[tr], y[tr], prune=False)
            g.estimator = "leaf"
            row["dpllike"] = tve.accuracy(g, X[te], y[te])
            rows.append(row)
        print(name, f"{time.time() - t0:.0f}s", flush=True)
    json.dump(rows, open(out_path, "w"))


def why(names, reps, eps):
    """diffprivlib's forest against ``dpllike`` on the same drawn trees: each tree's leaves labelled as diffprivlib
    does (permute-and-flip on the exact counts at ``e``, a uniform random label in an empty leaf), on a random
    tenth of the records (``pf_random``) or on a contiguous tenth in the file's order (``pf_blocks``: diffprivlib's
    ``shuffle=False`` default, with the training indices sorted as ``cv_splits`` gives them). Prints the paired
    differences to ``dpllike`` (mean, se)."""
    from streamdp import PrivateForest

    tve.EPS, rng, out = eps, np.random.default_rng(3), {}
    for s, X, y, tr, te, e, row in tve.cells(names, reps):
        f = PrivateForest.create(s, epsilon=e, **tve.PART0["dpllike"][0]).fit_encoded(X[tr], y[tr], prune=False)
        f.estimator = "leaf"
        T, C, st = 10, s.n_classes, f.structure
        Ltr, Lte = (st.apply(X[i], s.is_categorical)[:, :T] for i in (tr, te))
        blocks = (np.arange(len(tr)) // (len(tr) / T)).astype(int)
        acc = [tve.accuracy(f, X[te], y[te])]
        for part in (rng.permutation(blocks), blocks):
            lab = np.zeros((T, st.max_leaves), int)
            for i in range(T):
                cnt = np.zeros((st.max_leaves, C))
                np.add.at(cnt, (Ltr[part == i, i], y[tr][part == i]), 1)
                lab[i] = np.where(cnt.sum(1) > 0, tve.pf_labels(cnt, e, rng), rng.integers(0, C, st.max_leaves))
            votes = tve._hard(lab[np.arange(T)[None, :], Lte], C, rng.random(C))
            acc.append(float((votes.argmax(1) == y[te]).mean()))
        out.setdefault((row["dataset"], e), []).append(acc)
    for (n, e), a in out.items():
        a = np.array(a)
        d = a[:, 1:] - a[:, :1]
        se = d.std(0, ddof=1) / np.sqrt(len(d))
        print(
            "%-18s %5g dpllike %.3f  pf_random %+.3f (%.3f)  pf_blocks %+.3f (%.3f)"
            % (n[:18], e, a[:, 0].mean(), d[:, 0].mean(), se[0], d[:, 1].mean(), se[1])
        )


def _cells(rows, col, K, numeric_only):
    """Per (dataset, eps): split-paired differences of rule ``col@K`` minus default, and the cell's means."""
    out = {}
    for r in rows:
        on = r["trees"] <= K and (r["numeric"] or not numeric_only)
        out.setdefault((r["dataset"], r["eps"]), []).append(
            (r[col] if on else r["default"], r["default"], r["majority"])
        )
    return {c: np.array(v) for c, v in out.items()}


def summary(rows_paths, dpl_paths=""):
    rows = [r for p in rows_paths.split(",") for r in json.load(open(p))]
    dpl = [r for p in dpl_paths.split(",") for r in json.load(open(p))] if dpl_paths else []
    print("%-26s %5s %6s %6s %6s %5s" % ("dataset", "eps", "maj", "dpl", "default", "k"), *("%8s" % c for c in RULES))
    for (n, e), _ in sorted(_cells(rows, "default", 0, False).items(), key=lambda kv: (kv[0][0], kv[0][1])):
        rs = [r for r in rows if r["dataset"] == n and r["eps"] == e]
        d = [r["acc"] for r in dpl if r["dataset"] == n and abs(r["epsilon"] - e) < 1e-9]
        print(
            "%-26s %5g %6.3f %6.3f %6.3f %5.1f"
            % (
                n[:26],
                e,
                rs[0]["majority"],
                np.mean(d) if d else np.nan,
                np.mean([r["default"] for r in rs]),
                np.mean([r["trees"] for r in rs]),
            ),
            *("%8.3f" % np.mean([r[c] for r in rs]) for c in RULES),
        )
    print(
        "\neach column minus default on every split (no rule), paired mean (se), cells where the default kept <= 4 trees"
    )
    for (n, e), v in sorted(_cells(rows, "default", 0, False).items()):
        rs = [r for r in rows if r["dataset"] == n and r["eps"] == e]
        if np.mean([r["trees"] for r in rs]) <= 4:
            ds = [np.array([r[c] - r["default"] for r in rs]) for c in RULES]
            print("%-26s %5g" % (n[:26], e), *("%+.3f(%.3f)" % (d.mean(), d.std(ddof=1) / np.sqrt(len(d))) for d in ds))
    print(
        "\nrule col@K (num: numeric schemas only): mean paired d vs default over cells; cells with d < -0.01 - 2 se;"
        " cells d > +0.01; floor: cells below majority-0.01 that the default held; worst cell d (se)"
    )
    for numeric_only in (True, False):
        for K in (1, 2, 3):
            for col in RULES:
                cs = _cells(rows, col, K, numeric_only)
                ds = {c: (v[:, 0] - v[:, 1]) for c, v in cs.items()}
                se = {c: d.std(ddof=1) / np.sqrt(len(d)) for c, d in ds.items()}
                mean = {c: d.mean() for c, d in ds.items()}
                worse = [c for c in ds if mean[c] < -0.01 - 2 * se[c]]
                floor = [c for c, v in cs.items() if v[:, 0].mean() < v[:, 2].mean() - 0.01 <= v[:, 1].mean()]
                w = min(ds, key=lambda c: mean[c])
                print(
                    "%-4s %-9s @%d  d %+.4f  worse %d  better %d  floor %d  worst %s %g %+.3f (%.3f)"
                    % (
                        "num:" if numeric_only else "all:",
                        col,
                        K,
                        np.mean(list(mean.values())),
                        len(worse),
                        sum(m > 0.01 for m in mean.values()),
                        len(floor),
                        w[0][:14],
                        w[1],
                        mean[w],
                        se[w],
                    )
                )


if __name__ == "__main__":
    cmd, *rest = sys.argv[1:]
    if cmd == "summary":
        summary(*rest)
    elif cmd == "why":
        why(rest[0].split(","), int(rest[1]), tuple(float(x) for x in rest[2].split(",")))
    else:
        run(rest[0].split(","), int(rest[1]), tuple(float(x) for x in rest[2].split(",")), rest[3])
