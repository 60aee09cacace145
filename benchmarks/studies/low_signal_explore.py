"""Exploration harness for issue 33's low-signal gaps (results: results/low_signal_explore.log; not adopted).

    REP=6 ESTS=shrink,k2,eb,ebs1 python benchmarks/studies/low_signal_explore.py 0.1,0.5 [datasets]
    REP=40 ESTS=shrink,ebs1 python benchmarks/studies/low_signal_explore.py floor

One default fit per split (``PrivateForest.create(schema, epsilon=e).fit``), several estimates read from the
same released forest (post-processing; ``estimation.rule.KAPPA`` patched in-process, which the pooled vote's
:func:`~streamdp.estimation.rule.posterior_step` reads at call time). Estimates:

* ``shrink``: the default posterior mean (KAPPA 8);
* ``kX``: the posterior mean with KAPPA = X at every depth; ``dA/B/..``: KAPPA A at depth 1, B at 2, ...
  (the last repeats);
* ``eb[:lo:hi]``: KAPPA estimated from the released depth-1 counts (:func:`prior_strength` with no error
  shrinkage), clipped to ``[lo, hi]`` (default ``[0.5, 64]``);
* ``ebsC``: :func:`prior_strength` with the excess spread shrunk by ``C`` times its squared standard error
  (``ebs1`` is the positive-part rule), within ``[0.5, 8]``; ``ebsC/1``: the same at depth 1 only;
* ``leaf``: Fan et al.'s clipped counts summed.

On the accuracy_small_data datasets and splits only. ``floor``: the floor check of
``tests/estimation/test_estimation.py`` (skewed data, 10 trees at epsilon 0.1, heights 4 and 6, split and
disjoint budgets) over ``REP`` noise draws: the mean accuracy and the draws below the majority share - 0.01.
"""

import os
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
warnings.simplefilter("ignore")
from accuracy_small_data import DATASETS, cv_splits, load_encoded

import streamdp.estimation.nodes as nodes_mod
import streamdp.estimation.rule as rule
from streamdp import PrivateForest

_step = rule.posterior_step
DEPTH_K = []  # per depth from 1 (the last repeats); empty: rule.KAPPA everywhere
_calls = [0]


def _depth_step(*a):
    if DEPTH_K:
        rule.KAPPA = DEPTH_K[min(_calls[0], len(DEPTH_K) - 1)]
    _calls[0] += 1
    return _step(*a)


nodes_mod.posterior_step = _depth_step


def prior_strength(nodes, kappa=8.0, se_mult=1.0, lo=0.5, hi=8.0):
    """KAPPA from the released depth-1 counts of a forest's random trees (weighted moments, post-processing).

    Node ``j`` at depth 1: released counts ``y_j`` (total ``t_j``, noise variance of the total ``v_j``, per cell
    ``s_j = v_j / C``), records ``m_j`` (``t_j`` and its uniform share of a tree's records averaged by inverse
    variance, as the posterior does), against the prior ``p``: ``z_j = sum_c (y_jc - t_j p_c)^2`` has
    expectation ``m_j^2 g / k + m_j g + s_j sum_c ((1 - p_c)^2 + (C - 1) p_c^2)``, ``g = sum_c p_c (1 - p_c)``.
    ``r_j = (z_j - m_j g - noise_j) / (m_j^2 g)`` estimates ``1 / k``; their mean weighted by the inverse
    variance at ``kappa`` (``(C - 1) (m_j^2 g)^2 / (2 E[z_j]^2)``). The excess over ``1 / kappa`` is shrunk by
    ``max(0, 1 - se_mult SE^2 / excess^2)`` (``se_mult`` None: not shrunk), then ``1 / (1 / kappa + excess)``
    clipped to ``[lo, hi]``. Inputs: released counts, public variances and structure, released-derived prior
    and records: a function of released values only. Returns None without depth-1 nodes.
    """
    first = np.flatnonzero(nodes.depth == 1)
    if first.size == 0:
        return None
    T = nodes.leaf_node.shape[0]
    y, v = nodes.y[first], nodes.var[first]
    above = nodes.var[nodes.parent[first]]
    share = np.divide(v, above, out=np.zeros(first.size), where=above > 0)
    C = y.shape[1]
    t = y.sum(1)
    m0 = nodes.records / max(T, 1) * share
    vm = (rule.SHARE_SPREAD * m0) ** 2 + 1.0
    vs = np.where(v > 0, v, 1.0)
    m = np.maximum(np.where(v > 0, (t / vs + m0 / vm) / (1 / vs + 1 / vm), t), 1.0)
    p = nodes.prior[None, :]
    g = float((p * (1 - p)).sum())
    if not g > 0:
        return None
    z = ((y - t[:, None] * p) ** 2).sum(1)
    sampling, noise, signal = m * g, (v / C) * float(((1 - p) ** 2 + (C - 1) * p**2).sum()), m * m * g
    r = (z - sampling - noise) / signal
    w = (C - 1) * (signal / (signal / kappa + sampling + noise)) ** 2 / 2.0
    inv = float((w * r).sum() / w.sum())
    excess = inv - 1.0 / kappa
    if not excess > 0:
        return float(np.clip(kappa if inv <= 0 else 1.0 / inv, lo, hi))
    if se_mult is not None:
        excess *= max(0.0, 1.0 - se_mult / (float(w.sum()) * excess * excess))
    return float(np.clip(1.0 / (1.0 / kappa + excess), lo, hi))


def proba(f, leaves, est):
    """Class probabilities of the estimate ``est`` (module docstring) and the KAPPA it used."""
    old = rule.KAPPA
    try:
        if est == "shrink":
            return f.proba_from_leaves(leaves), rule.KAPPA
        if est == "leaf":
            f.estimator = "leaf"
            try:
                return f.proba_from_leaves(leaves), 0.0
            finally:
                f.estimator = "shrink"
        if est.startswith("d"):
            DEPTH_K[:] = [float(x) for x in est[1:].split("/")]
            _calls[0] = 0
            return f.proba_from_leaves(leaves), DEPTH_K[0]
        if est.startswith("k"):
            rule.KAPPA = float(est[1:])
            return f.proba_from_leaves(leaves), rule.KAPPA
        if est.startswith("ebs"):
            mult, _, depth1 = est[3:].partition("/")
            k = prior_strength(f.estimation_nodes(), se_mult=float(mult))
            k = 8.0 if k is None else k
            if depth1:
                DEPTH_K[:] = [k, 8.0]
                _calls[0] = 0
            else:
                rule.KAPPA = k
            return f.proba_from_leaves(leaves), k
        if est.startswith("eb"):
            parts = (est.split(":") + [None] * 3)[:3]
            k = prior_strength(f.estimation_nodes(), se_mult=None, lo=float(parts[1] or 0.5), hi=float(parts[2] or 64))
            rule.KAPPA = 8.0 if k is None else k
            return f.proba_from_leaves(leaves), rule.KAPPA
        raise ValueError(est)
    finally:
        rule.KAPPA = old
        DEPTH_K[:] = []


REP = int(os.environ.get("REP", 2))
ESTS = os.environ.get("ESTS", "shrink,k2,eb,leaf").split(",")


def tuning(eps_list, datasets):
    tot = {}
    for ds in datasets:
        rng = np.random.default_rng(sum(map(ord, ds)))
        schema, X, y = load_encoded(ds, rng)
        splits = cv_splits(len(y), REP, 5, rng)
        for eps in eps_list:
            maj = np.mean([np.mean(y[te] == np.bincount(y[tr]).argmax()) for tr, te in splits])
            accs = {e: [] for e in ESTS}
            ks = {e: [] for e in ESTS}
            for tr, te in splits:
                f = PrivateForest.create(schema, epsilon=eps).fit_encoded(X[tr], y[tr])
                leaves = f.structure.apply(X[te], f.schema.is_categorical)[:, : f.n_trees]
                for e in ESTS:
                    p, k = proba(f, leaves, e)
                    accs[e].append(np.mean(p.argmax(1) == y[te]))
                    ks[e].append(k)
            row = f"{ds[:14]:14s} {eps:<4g} maj={maj:.3f}"
            for e in ESTS:
                tot.setdefault((eps, e), []).append(float(np.mean(accs[e])) - maj)
                row += f" {e}={np.mean(accs[e]):.3f}"
                if e.startswith("eb"):
                    row += "(K%s)" % "/".join(f"{q:.1f}" for q in np.quantile(ks[e], [0.1, 0.5, 0.9]))
            print(row, flush=True)
    for eps in eps_list:
        print(
            f"eps {eps} mean over maj / worst: "
            + " ".join(f"{e}={np.mean(tot[(eps, e)]):+.3f}/{np.min(tot[(eps, e)]):+.3f}" for e in ESTS),
            flush=True,
        )


def floor():
    from streamdp.records.datasets import skewed

    ds = skewed(6000, seed=11)  # tests/estimation/test_estimation.py's floor data and split
    enc = ds.schema.encode(ds.X, ds.y)
    X, y = enc.X, enc.y
    perm = np.random.default_rng(0).permutation(len(y))
    te, tr = perm[: len(y) // 3], perm[len(y) // 3 :]
    maj = np.bincount(y[te]).max() / len(te)
    for h, budget in ((6, "disjoint"), (4, "disjoint"), (6, "split")):
        acc = {e: [] for e in ESTS}
        for s in range(REP):
            f = PrivateForest.create(
                ds.schema, n_trees=10, height=h, epsilon=0.1, budget=budget, seed=s, noise_seed=s + 77
            )
            f.merge(f.noisy_delta_encoded(X[tr], y[tr]))
            leaves = f.structure.apply(X[te], ds.schema.is_categorical)
            for e in ESTS:
                acc[e].append(float(np.mean(proba(f, leaves, e)[0].argmax(1) == y[te])))
        print(
            f"skewed h={h} {budget:8s} maj={maj:.3f} "
            + " ".join(
                f"{e}={np.mean(a):.3f} below={int(np.sum(np.array(a) < maj - 0.01))}/{REP}" for e, a in acc.items()
            ),
            flush=True,
        )


if __name__ == "__main__":
    if sys.argv[1] == "floor":
        floor()
    else:
        tuning(
            [float(e) for e in sys.argv[1].split(",")], sys.argv[2].split(",") if len(sys.argv) > 2 else list(DATASETS)
        )
