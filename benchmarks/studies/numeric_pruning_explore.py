"""Exploration harness for issue 33's numeric pruning lead (results: results/numeric_pruning_explore.log; not adopted).

    python benchmarks/studies/numeric_pruning_explore.py diag            # depth and one-sided kept splits
    python benchmarks/studies/numeric_pruning_explore.py oracle          # the same with ranges narrowed to the data
    python benchmarks/studies/numeric_pruning_explore.py paired [names]  # post-release variants on one release
    python benchmarks/studies/numeric_pruning_explore.py compare a.json b.json ...  # accuracy_small_data runs

``narrowK``: synthetic numeric sets (600 x 20; 500 x 20 in ``diag`` and ``oracle``; declared [0, 100]) whose records of every attribute lie in a random
stretch of 5% (K = 0, 1) or 20% (K = 2) of the range; the label a noisy rule on three attributes (2 or 3 classes).
``diag`` and ``oracle`` read the exact records to count how many records each kept split sends each way: a
diagnosis, never released. ``paired``: one default fit per split and epsilon, predictions read from the released
forest and from post-processings of the same release (same noise, so the columns compare without noise):

* ``collapse``: bottom up, a split whose children are all leaves and not all clear of their noise (total at
  least ``PRUNE_SNR`` sds of ``C`` cells) becomes a leaf holding their summed counts;
* ``zero``: below a numeric split with a child clear of its noise, a child that is not is read as holding no
  records (its subtree's counts 0, their variance ~0; ancestors' variances recomputed).
"""

from __future__ import annotations

import copy
import json
import sys
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
warnings.simplefilter("ignore")

from streamdp import PrivateForest  # noqa: E402
from streamdp.forest import pruning  # noqa: E402
from streamdp.forest.growth import aggregate  # noqa: E402
from streamdp.forest.node_links import depths, up_links  # noqa: E402
from streamdp.records.schema import Schema  # noqa: E402

EPSILONS = (0.1, 0.5, 1.0, 2.0)


def narrow_set(seed: int, n: int = 500, d: int = 20, width: float = 0.05, n_classes: int = 2, oracle: bool = False):
    """(schema, X codes, y codes); ``oracle``: each range declared as the records' own min and max."""
    rng = np.random.default_rng(seed)
    lo = rng.uniform(0, 100 * (1 - width), d)
    U = rng.uniform(0, 1, (n, d))
    X = lo + U * 100 * width
    score = U[:, 0] + U[:, 1] - U[:, 2] - 0.5 + rng.normal(0, 0.15, n)
    y = (score > 0).astype(int) if n_classes == 2 else np.digitize(score, np.quantile(score, [1 / 3, 2 / 3]))
    ranges = zip(X.min(axis=0), X.max(axis=0)) if oracle else [(0.0, 100.0)] * d
    attrs = [{"name": f"x{i}", "type": "numeric", "min": float(a), "max": float(b)} for i, (a, b) in enumerate(ranges)]
    schema = Schema.from_dict({"attributes": attrs, "label": {"name": "y", "values": list(range(n_classes))}})
    enc = schema.encode(X, y)
    return schema, enc.X, np.asarray(enc.y)


def named(name: str):
    if name.startswith("narrow"):
        k = int(name[-1])
        return narrow_set(k, n=600, width=0.05 if k < 2 else 0.2, n_classes=2 + k % 2)
    from accuracy_small_data import load_encoded

    schema, X, y = load_encoded(name, np.random.default_rng(0))
    return schema, X, np.asarray(y)


def splits_of(s, t: int, X: np.ndarray, is_cat: np.ndarray) -> list[tuple[int, int]]:
    """(records at the node, records of its largest child) for every kept inner node of tree ``t``."""
    out, stack = [], [(0, np.arange(len(X)))]
    while stack:
        node, idx = stack.pop()
        if s.leaf[t, node] >= 0:
            continue
        f, c = int(s.feature[t, node]), int(s.child[t, node])
        if is_cat[f]:
            v = X[idx, f].astype(int)
            kids = [(c + a, idx[v == a]) for a in np.unique(v)]
        else:
            go = X[idx, f] > s.threshold[t, node]
            kids = [(c, idx[~go]), (c + 1, idx[go])]
        out.append((len(idx), max(len(k[1]) for k in kids)))
        stack += kids
    return out


def depth_of(s, t: int, arity: np.ndarray) -> int:
    best, stack = 0, [(0, 0)]
    while stack:
        node, d = stack.pop()
        if s.leaf[t, node] >= 0:
            best = max(best, d)
            continue
        stack += [(int(s.child[t, node]) + i, d + 1) for i in range(int(arity[s.feature[t, node]]))]
    return best


def diag(schema, X, y, eps: float, seeds=range(5)) -> np.ndarray:
    """Means over 80/20 splits: trees, mean / max depth, kept splits, one-sided (>= 95%), near-empty (< 5), acc."""
    is_cat = np.append(schema.is_categorical, False)
    arity = np.where(is_cat, np.append(schema.arities, 0), 2)
    rows = []
    for sd in seeds:
        perm = np.random.default_rng(100 + sd).permutation(len(X))
        tr, te = perm[: int(0.8 * len(X))], perm[int(0.8 * len(X)) :]
        f = PrivateForest.create(schema, epsilon=eps, seed=sd).fit_encoded(X[tr], y[tr])
        s, T = f.structure, f.n_trees
        depths = [depth_of(s, t, arity) for t in range(T)]
        nodes = [w for t in range(T) for w in splits_of(s, t, X[tr], is_cat)]
        pred = f.proba_from_leaves(s.apply(X[te], schema.is_categorical)).argmax(axis=1)
        rows.append(
            (
                T,
                np.mean(depths),
                max(depths),
                len(nodes),
                sum(mx >= 0.95 * n for n, mx in nodes),
                sum(n < 5 for n, _ in nodes),
                (pred == y[te]).mean(),
            )
        )
    return np.array(rows, dtype=float).mean(axis=0)


def _totals(f):
    s, counts = f.structure, f._counts.astype(np.float64)
    (parent, leaf_node), depth = up_links(s), depths(s)
    t, lf = np.nonzero(np.arange(s.max_leaves)[None, :] < s.n_leaves[:, None])
    tot = np.zeros(s.feature.shape)
    tot[t, leaf_node[t, lf]] = counts[t, lf].sum(axis=1)
    for d in range(int(depth.max(initial=0)), 0, -1):
        a, b = np.nonzero((depth == d) & (parent >= 0))
        np.add.at(tot, (a, parent[a, b]), tot[a, b])
    clear = tot >= pruning.PRUNE_SNR * np.sqrt(counts.shape[2] * f.node_variance)
    return s, counts, parent, depth, leaf_node, (t, lf), clear


def _copy(f):
    g = copy.copy(f)
    g.__dict__ = dict(f.__dict__)
    return g


def collapse(f):
    """The ``collapse`` post-processing (module docstring): a forest on the merged trees, or None."""
    s, counts, parent, depth, _, _, clear = _totals(f)
    is_cat = np.append(f.schema.is_categorical, False)
    arity = np.where(is_cat, np.append(f.schema.arities, 0), 2)
    eff = s.leaf >= 0
    coll = np.zeros_like(eff)
    for d in range(int(depth.max(initial=0)), -1, -1):
        a, b = np.nonzero((depth == d) & (s.leaf < 0) & (s.feature < f.schema.n_attributes))
        a, b = a[a < f.n_trees], b[a < f.n_trees]
        if not a.size:
            continue
        w = arity[s.feature[a, b]]
        ok, quiet = np.ones(a.size, bool), np.zeros(a.size, bool)
        for j in range(int(w.max())):
            c = np.where(j < w, s.child[a, b] + j, 0)
            ok &= (j >= w) | eff[a, c]
            quiet |= (j < w) & ~clear[a, c]
        hit = ok & quiet
        coll[a[hit], b[hit]] = eff[a[hit], b[hit]] = True
    if not coll.any():
        return None
    flat = coll.ravel()
    new, old = s.pruned(f.schema, lambda nodes, share, rate: (~flat[nodes], rate))
    tn = np.broadcast_to(np.arange(new.n_trees)[:, None], old.shape)
    g = _copy(f)
    nv = np.where(old >= 0, f.node_variance[tn, np.maximum(old, 0)], 0.0)
    g._released(new, aggregate(counts, s, new, f.schema.arities, f.schema.is_categorical).astype(counts.dtype), nv)
    return g


def zero(f):
    """The ``zero`` post-processing (module docstring): the forest with quiet subtrees read as empty, or None."""
    s, counts, parent, depth, leaf_node, (t, lf), clear = _totals(f)
    T, D = f.n_trees, int(depth.max(initial=0))
    is_cat = np.append(f.schema.is_categorical, False)
    a, b = np.nonzero((depth > 0) & (parent >= 0))
    a, b = a[a < T], b[a < T]
    par = parent[a, b]
    clear_kids = np.zeros(s.feature.shape, dtype=np.int64)
    np.add.at(clear_kids, (a, par), clear[a, b])
    quiet = ~clear[a, b] & (clear_kids[a, par] > 0) & ~is_cat[s.feature[a, par]]
    z = np.zeros(s.feature.shape, bool)
    z[a[quiet], b[quiet]] = True
    for d in range(1, D + 1):
        a, b = np.nonzero((depth == d) & (parent >= 0))
        z[a, b] |= z[a, parent[a, b]]
    if not z.any():
        return None
    zl = z[t, leaf_node[t, lf]]
    new = counts.copy()
    new[t[zl], lf[zl]] = 0.0
    nv = np.zeros(s.feature.shape)
    nv[t, leaf_node[t, lf]] = np.where(zl, 1e-9, f.node_variance[t, leaf_node[t, lf]])
    for d in range(D, 0, -1):
        a, b = np.nonzero((depth == d) & (parent >= 0))
        np.add.at(nv, (a, parent[a, b]), nv[a, b])
    nv[T:] = f.node_variance[T:]
    g = _copy(f)
    g._counts = new.astype(f._counts.dtype)
    g.node_variance = nv
    g.version = f.version + 1
    return g


def accuracy(f, X, y) -> float:
    return float((f.proba_from_leaves(f.structure.apply(X, f.schema.is_categorical)).argmax(axis=1) == y).mean())


def paired(names: list[str]) -> None:
    res: dict = {}
    for name in names:
        schema, X, y = named(name)
        rng = np.random.default_rng(7)
        for _ in range(2):
            folds = np.array_split(rng.permutation(len(X)), 5)
            for k in range(5):
                te, tr = folds[k], np.concatenate([folds[j] for j in range(5) if j != k])
                for eps in EPSILONS:
                    f = PrivateForest.create(schema, epsilon=eps).fit_encoded(X[tr], y[tr])
                    a0 = accuracy(f, X[te], y[te])
                    row = [a0] + [a0 if (g := fn(f)) is None else accuracy(g, X[te], y[te]) for fn in (collapse, zero)]
                    res.setdefault((name, eps), []).append(row)
        for eps in EPSILONS:
            print(name, eps, " ".join(f"{v:.3f}" for v in np.mean(res[(name, eps)], axis=0)), flush=True)
    mean = np.mean([np.mean(v, axis=0) for v in res.values()], axis=0)
    print("ALL (released, collapse, zero):", " ".join(f"{v:.4f}" for v in mean))


def compare(paths: list[str]) -> None:
    runs = []
    for p in paths:
        cells = defaultdict(list)
        for r in json.loads(Path(p).read_text())["rows"]:
            if not r.get("dpl") and isinstance(r.get("acc"), dict) and "fit" in r["acc"]:
                cells[(r["dataset"], r["epsilon"])].append(r["acc"]["fit"])
        runs.append({k: float(np.mean(v)) for k, v in cells.items()})
    keys = sorted(runs[0], key=lambda k: (k[1], k[0]))
    print("| dataset | eps | " + " | ".join(Path(p).stem for p in paths) + " |")
    for k in keys:
        print(f"| {k[0]} | {k[1]:g} | " + " | ".join(f"{r.get(k, float('nan')):.3f}" for r in runs) + " |")
    for e in sorted({k[1] for k in keys}):
        print(
            f"| mean | {e:g} | " + " | ".join(f"{np.mean([r[k] for k in keys if k[1] == e]):.4f}" for r in runs) + " |"
        )
    print("| mean | all | " + " | ".join(f"{np.mean([r[k] for k in keys]):.4f}" for r in runs) + " |")


def main() -> None:
    cmd, rest = sys.argv[1], sys.argv[2:]
    if cmd in ("diag", "oracle"):
        print("set eps | trees meandepth maxdepth kept_splits one-sided(>=95%) near-empty(<5 records) acc")
        for width in (0.05, 0.2, 1.0) if cmd == "diag" else (0.05, 0.2):
            for oracle in (False, True) if cmd == "oracle" else (False,):
                schema, X, y = narrow_set(0, width=width, oracle=oracle)
                for eps in EPSILONS:
                    r = diag(schema, X, y, eps)
                    tag = " oracle" if oracle else ""
                    print(f"w={width} eps={eps}{tag} | " + " ".join(f"{v:.2f}" for v in r), flush=True)
    elif cmd == "paired":
        paired(rest or ["narrow0", "narrow1", "narrow2", "synth-blobs", "synth-linear", "river-bananas"])
    elif cmd == "compare":
        compare(rest)


if __name__ == "__main__":
    main()
