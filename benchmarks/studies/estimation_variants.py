"""Can another shrinkage weight keep the forest at the prior where the signal is weak (the Tic-Tac-Toe floor)
without costing the data where it is strong? Three families of the probability vote's weight
toward the parent, ``a = PRIOR_WEIGHT * Var(total) / total + MIN_WEIGHT`` (streamdp/estimation.py), i.e.
a Dirichlet prior whose class shares spread by ``tau^2 = 1 / (C * PRIOR_WEIGHT)`` around the parent's:

* ``pw<K>``: the constant ``PRIOR_WEIGHT = K`` (8 is the library's);
* ``eb``: empirical Bayes, ``tau^2`` per depth estimated from the random trees' own nodes against their
  parents (method of moments, noise and sampling variance subtracted, inverse-variance weights,
  capped at the library's 1/16);
* ``depth``: ``PRIOR_WEIGHT * depth`` (deeper steps assumed to move the shares less);
* ``sure``: one weight per forest, from 1 to 512, the one minimising Stein's unbiased risk estimate of the
  random trees' node class shares against their parents' (from the released counts: post-processing);
* ``slab``: the library's step, then a spike-and-slab gate: the step's move from the parent is kept with the
  posterior probability (prior one half) that the node's shares differ from its parent's by a spread of 0.25
  rather than not at all, given its counts' noise and sampling variance.

The update path (one release of the training part, no pruning), 10 trees, split budget, the probability
vote; the hold-out split of tests/estimation/test_estimation.py's floor check; ``--draws`` new structures and noise
per cell; mean and minimum accuracy. Post-processing only: every variant reads the same released counts.

    python benchmarks/studies/estimation_variants.py tic-tac-toe --heights 3 5 7   # >> results/estimation_variants.log
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import streamdp.estimation as E  # noqa: E402
from streamdp.forest.model import PrivateForest  # noqa: E402
from tests.estimation.test_estimation import _data  # noqa: E402

BASE = E.PRIOR_WEIGHT


def eb_tau2(nodes: E.ForestNodes, cap: float = 1 / 16) -> dict[int, float]:
    """tau^2 per depth from each random-tree node's deviation from its parent's shares (module docstring)."""
    y, var, parent, depth = nodes.y, nodes.var, nodes.parent, nodes.depth
    C = y.shape[1]
    out = {}
    for d in range(1, int(depth.max(initial=0)) + 1):
        v = np.flatnonzero(depth == d)
        t = y[v].sum(1)
        qu = np.clip(y[parent[v]], 0, None)
        s = qu.sum(1, keepdims=True)
        qu = np.where(s > 0, qu / np.where(s > 0, s, 1), 1.0 / C)
        e2 = ((y[v] - t[:, None] * qu) ** 2).sum(1)
        noise = var[v] / C * ((1 - qu) ** 2 + qu**2 * (C - 1)).sum(1)
        samp = np.clip(t, 0, None) * (qu * (1 - qu)).sum(1)
        t2 = np.clip(t**2 - var[v], 0, None)
        tau = cap
        for _ in range(4):
            w = 1.0 / (t2 * C * tau + noise + samp + 1e-9) ** 2
            den = (w * t2 * C).sum()
            tau = float(np.clip((w * (e2 - noise - samp)).sum() / den, 1e-6, cap)) if den > 0 else cap
        out[d] = tau
    return out


SURE_GRID = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256, 512], dtype=float)


def sure_weight(nodes: E.ForestNodes) -> float:
    """The ``sure`` rule's weight: over every informative node with a parent, each class share's risk
    ``(1 - lam)^2 (r - p_parent)^2 + 2 s^2 lam - s^2`` (``r`` the node's share, ``s^2`` its noise variance,
    ``lam`` the data's weight at that PRIOR_WEIGHT), weighted by the node's total."""
    y, var, parent, depth = nodes.y, nodes.var, nodes.parent, nodes.depth
    C = y.shape[1]
    t = y.sum(1)
    i = np.flatnonzero((depth >= 1) & (parent >= 0) & (t > 0) & (t >= 3 * np.sqrt(np.maximum(var, 0))))
    i = i[y[parent[i]].sum(1) > 0]
    if not i.size:
        return BASE
    ti = t[i][:, None]
    pp = np.clip(y[parent[i]], 0, None)
    pp = pp / np.maximum(pp.sum(1, keepdims=True), 1e-9)
    s2 = (var[i] / C)[:, None] / ti**2
    dev2 = (y[i] / ti - pp) ** 2
    risks = [
        (((1 - lam) ** 2 * dev2 + 2 * s2 * lam - s2) * ti).sum()
        for lam in (ti / (ti + w * var[i][:, None] / ti + 1) for w in SURE_GRID)
    ]
    return float(SURE_GRID[int(np.argmin(risks))])


def slab_step(Y: np.ndarray, V: np.ndarray, p: np.ndarray, spread2: float = 0.0625) -> np.ndarray:
    """The ``slab`` rule's step (see the module docstring)."""
    q = E.shrink(Y, V, p)
    C = Y.shape[1]
    t = np.maximum(Y.sum(1), 1.0)[:, None]
    pc = np.clip(p, 1e-6, 1)
    s2 = np.maximum(V, 0)[:, None] / C + t * pc * (1 - pc)
    slab = t**2 * spread2
    llr = (0.5 * np.log(s2 / (s2 + slab)) + 0.5 * (Y - t * pc) ** 2 * (1 / s2 - 1 / (s2 + slab))).sum(1) * (C - 1) / C
    w = 1 / (1 + np.exp(-np.clip(llr, -50, 50)))
    return w[:, None] * q + (1 - w[:, None]) * p


def proba(nodes: E.ForestNodes, leaves: np.ndarray, weight, step=None) -> np.ndarray:
    """ForestNodes.path_proba with the weight ``weight(depth)`` in place of PRIOR_WEIGHT at each depth (the rule
    before shallower leaves were pooled at deeper depths: the same on this script's drawn trees of one height)."""
    from estimation_tall_floor import walk_up  # (this script's folder)

    n, T, C, h, path = walk_up(nodes, leaves)
    p = np.broadcast_to(nodes.prior, (n, C))
    try:
        for d in range(1, h + 1):
            nd = path[h - d]
            at = nodes.depth[nd] == d
            Y = sum(nodes.y[nd[:, t]] * at[:, t, None] for t in range(T))
            V = sum(nodes.var[nd[:, t]] * at[:, t] for t in range(T))
            E.PRIOR_WEIGHT = weight(d)
            p = (step or E.shrink)(Y, V, p)
    finally:
        E.PRIOR_WEIGHT = BASE
    return p


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("--heights", type=int, nargs="+", default=[3, 5, 7])
    ap.add_argument("--eps", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    ap.add_argument("--draws", type=int, default=6)
    ap.add_argument("--no-log", action="store_true")
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    schema, X, y = _data(a.dataset)
    perm = np.random.default_rng(0).permutation(len(y))
    te, tr = perm[: len(y) // 3], perm[len(y) // 3 :]
    majority = np.bincount(y[te]).max() / len(te)
    lines = [
        f"## {a.dataset}: majority {majority:.3f}, {a.draws} draws per cell; load "
        + subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    ]
    names = ["pw8", "pw16", "pw32", "pw64", "eb", "depth", "sure", "slab"]
    lines += [
        "| height | eps | " + " | ".join(f"{k} mean (min)" for k in names) + " |",
        "|---" * (len(names) + 2) + "|",
    ]
    print(lines[0], flush=True)
    for h in a.heights:
        for eps in a.eps:
            acc: dict[str, list] = {k: [] for k in names}
            for d in range(a.draws):
                f = PrivateForest.create(schema, n_trees=10, height=h, epsilon=eps, seed=100 * d + h)
                f.merge(f.noisy_delta_encoded(X[tr], y[tr]))
                leaves = f.structure.apply(X[te], schema.is_categorical)
                nodes = f.estimation_nodes()
                C = schema.n_classes
                tau = eb_tau2(nodes)
                w_sure = sure_weight(nodes)
                rules = {
                    "pw8": lambda _: 8.0,
                    "pw16": lambda _: 16.0,
                    "pw32": lambda _: 32.0,
                    "pw64": lambda _: 64.0,
                    "eb": lambda d: 1.0 / (C * tau[d]),
                    "depth": lambda d: BASE * d,
                    "sure": lambda _: w_sure,
                    "slab": lambda _: BASE,
                }
                for k in names:
                    step = slab_step if k == "slab" else None
                    acc[k].append(float((proba(nodes, leaves, rules[k], step).argmax(1) == y[te]).mean()))
            row = f"| {h} | {eps:g} | " + " | ".join(f"{np.mean(v):.3f} ({min(v):.3f})" for v in acc.values()) + " |"
            lines.append(row)
            print(row, flush=True)
    if not a.no_log:
        with open(ROOT / "benchmarks" / "results" / "estimation_variants.log", "a") as fh:
            fh.write("\n".join(lines) + "\n\n")


if __name__ == "__main__":
    main()
